"""Acknowledgements inside a transaction, as RabbitMQ's channel handles them: a tag is taken
off the unacked list when the ack arrives (an unknown or already settled one is 406 at once,
not at commit); tx.rollback puts the uncommitted acks back so they can be acked again;
basic.recover requeues only what is unacked, not what a pending commit will ack; closing the
channel requeues uncommitted acks."""
from conftest import channel_error, get_one


def _queue_with(ch, names, bodies):
    q = names.queue()
    ch.queue_declare(q)
    for b in bodies:
        ch.basic_publish("", q, b)
    return q


def _two_deliveries_in_tx(conn, names):
    """A transactional channel holding two unacked basic.get deliveries, a then b."""
    ch = conn.channel()
    q = _queue_with(ch, names, [b"a", b"b"])
    ch.tx_select()
    m1, _, _ = get_one(ch, q, auto_ack=False)
    m2, _, _ = get_one(ch, q, auto_ack=False)
    return ch, q, m1, m2


def _ready(conn, q):
    ch = conn.channel()
    n = ch.queue_declare(q, passive=True).method.message_count
    ch.close()
    return n


def test_ack_of_unknown_tag_in_tx_fails_at_once(conn, names):
    ch = conn.channel()
    q = _queue_with(ch, names, [b"a"])
    ch.tx_select()
    m, _, _ = get_one(ch, q, auto_ack=False)
    e = channel_error(ch, lambda: ch.basic_ack(m.delivery_tag + 41))
    assert e.reply_code == 406
    assert e.reply_text == "PRECONDITION_FAILED - unknown delivery tag %d" % (m.delivery_tag + 41)


def test_second_ack_of_a_tag_in_tx_fails_at_once(conn, names):
    ch = conn.channel()
    q = _queue_with(ch, names, [b"a"])
    ch.tx_select()
    m, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_ack(m.delivery_tag)
    e = channel_error(ch, lambda: ch.basic_reject(m.delivery_tag, requeue=True))
    assert e.reply_code == 406
    assert e.reply_text == "PRECONDITION_FAILED - unknown delivery tag %d" % m.delivery_tag
    # The uncommitted ack died with the channel: the message is back.
    assert _ready(conn, q) == 1


def test_rollback_puts_uncommitted_acks_back(conn, names):
    ch, q, m1, m2 = _two_deliveries_in_tx(conn, names)
    ch.basic_ack(m2.delivery_tag, multiple=True)
    ch.tx_rollback()
    # Both tags are unacked again: acking them anew is fine and commits.
    ch.basic_nack(m1.delivery_tag, requeue=False)
    ch.basic_ack(m2.delivery_tag)
    ch.tx_commit()
    ch.close()
    assert _ready(conn, q) == 0


def test_recover_leaves_uncommitted_acks_to_the_commit(conn, names):
    ch, q, m1, _ = _two_deliveries_in_tx(conn, names)
    ch.basic_ack(m1.delivery_tag)
    ch.basic_recover(requeue=True)  # requeues b only: a waits for the commit
    ch.tx_commit()
    other = conn.channel()
    m, _, body = get_one(other, q)
    assert body == b"b" and m.redelivered
    m, _, _ = other.basic_get(q)
    assert m is None


def test_recover_then_rollback_keeps_the_ack_pending(conn, names):
    ch = conn.channel()
    q = _queue_with(ch, names, [b"a"])
    ch.tx_select()
    m1, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_ack(m1.delivery_tag)
    ch.basic_recover(requeue=True)
    assert _ready(conn, q) == 0  # not requeued: its ack is pending
    ch.tx_rollback()  # the ack is dropped and the delivery is unacked again
    assert _ready(conn, q) == 0
    ch.close()  # ... so closing the channel requeues it
    assert _ready(conn, q) == 1


def test_close_requeues_uncommitted_acks(conn, names):
    ch, q, _, m2 = _two_deliveries_in_tx(conn, names)
    ch.basic_ack(m2.delivery_tag, multiple=True)
    ch.close()
    assert _ready(conn, q) == 2

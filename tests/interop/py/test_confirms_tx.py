"""Publisher confirms and transactions."""
import pika
import pika.exceptions
import pytest

from conftest import channel_error, connect, drain, get_one, wait_for


def _ready(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def test_confirms_blocking_publish_acked(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.confirm_delivery()
    for i in range(100):
        ch.basic_publish("", q, b"c%d" % i)  # raises NackError/UnroutableError otherwise
    assert _ready(ch, q) == 100


def test_confirms_delivery_tags_and_multiple(conn, names):
    """Low-level: confirm.select then publish N; acks cover tags 1..N exactly
    (possibly with multiple=True)."""
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    impl = ch._impl
    acked = set()
    nacked = []

    def on_confirm(frame):
        m = frame.method
        if isinstance(m, pika.spec.Basic.Ack):
            upto = m.delivery_tag
            if m.multiple:
                acked.update(t for t in range(1, upto + 1))
            else:
                acked.add(upto)
        else:
            nacked.append(m)

    selected = []
    impl.confirm_delivery(on_confirm, callback=lambda f: selected.append(f))
    assert wait_for(lambda: selected, conn=conn)
    n = 500
    for i in range(n):
        impl.basic_publish("", q, b"x")
    assert wait_for(lambda: len(acked) == n, conn=conn, timeout=10)
    assert acked == set(range(1, n + 1))
    assert nacked == []


def test_confirm_mandatory_unroutable_raises(conn, names):
    ch = conn.channel()
    ch.confirm_delivery()
    x = names.exchange()
    ch.exchange_declare(x, "direct")
    with pytest.raises(pika.exceptions.UnroutableError) as ei:
        ch.basic_publish(x, "no-route", b"lost", mandatory=True)
    returned = ei.value.messages
    assert len(returned) == 1
    assert returned[0].method.reply_code == 312
    assert returned[0].body == b"lost"
    # the channel is fine afterwards
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"ok", mandatory=True)


def test_confirm_return_arrives_before_ack(conn, names):
    ch = conn.channel()
    impl = ch._impl
    events = []
    impl.add_on_return_callback(lambda c, m, p, b: events.append("return"))
    selected = []
    impl.confirm_delivery(lambda f: events.append(type(f.method).__name__),
                          callback=lambda f: selected.append(f))
    assert wait_for(lambda: selected, conn=conn)
    impl.basic_publish("amq.direct", "no-route-" + names.queue(), b"x", mandatory=True)
    assert wait_for(lambda: len(events) >= 2, conn=conn)
    assert events == ["return", "Ack"]


def test_confirm_unroutable_without_mandatory_is_acked(ch, names):
    ch.confirm_delivery()
    ch.basic_publish("amq.direct", "no-route-" + names.queue(), b"x")  # no exception


def test_confirm_select_on_tx_channel_406(conn):
    ch = conn.channel()
    ch.tx_select()
    e = channel_error(ch, ch.confirm_delivery)
    assert e.reply_code == 406


def test_tx_select_on_confirm_channel_406(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    e = channel_error(ch, ch.tx_select)
    assert e.reply_code == 406


def test_tx_rollback_discards_publishes(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.tx_select()
    for i in range(3):
        ch.basic_publish("", q, b"tx%d" % i)
    ch.tx_rollback()
    other = conn.channel()
    assert _ready(other, q) == 0
    m, _, _ = ch.basic_get(q)
    assert m is None


def test_tx_commit_delivers(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.tx_select()
    for i in range(3):
        ch.basic_publish("", q, b"tx%d" % i)
    other = conn.channel()
    conn.process_data_events(time_limit=0.1)
    assert _ready(other, q) == 0  # not visible before commit
    ch.tx_commit()
    assert _ready(other, q) == 3
    assert drain(other, q, 3) == [b"tx0", b"tx1", b"tx2"]


def test_tx_commit_with_a_refused_publish_fails_partial_tx_completion(conn, names):
    """A publish some queue refuses (here x-overflow=reject-publish; also a store that
    cannot write) fails the whole commit, as RabbitMQ's channel fails a transaction that saw
    a nack: 406 "partial tx completion"; what the queues took stays."""
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.tx_select()
    ch.basic_publish("", q, b"taken")
    ch.basic_publish("", q, b"refused")
    e = channel_error(ch, ch.tx_commit)
    assert e.reply_code == 406
    assert e.reply_text == "PRECONDITION_FAILED - partial tx completion"
    assert _ready(conn.channel(), q) == 1


def test_tx_ack_takes_effect_on_commit(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"a")
    ch.basic_publish("", q, b"b")
    ch.tx_select()
    m1, _, _ = get_one(ch, q, auto_ack=False)
    m2, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_ack(m1.delivery_tag)
    ch.tx_rollback()       # the ack of m1 is discarded (m1 stays unacked)
    ch.basic_ack(m2.delivery_tag)
    ch.tx_commit()         # m2 acked for real
    ch.close()             # m1 was never acked: back to the queue
    other = conn.channel()
    m, _, body = get_one(other, q)
    assert body == b"a" and m.redelivered
    m, _, _ = other.basic_get(q)
    assert m is None


def test_tx_commit_without_select_406(conn):
    ch = conn.channel()
    e = channel_error(ch, ch.tx_commit)
    assert e.reply_code == 406
    ch = conn.channel()
    e = channel_error(ch, ch.tx_rollback)
    assert e.reply_code == 406


def test_tx_commit_is_repeatable(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.tx_select()
    ch.basic_publish("", q, b"1")
    ch.tx_commit()
    ch.basic_publish("", q, b"2")
    ch.tx_rollback()
    ch.basic_publish("", q, b"3")
    ch.tx_commit()
    other = conn.channel()
    assert drain(other, q, 2) == [b"1", b"3"]

"""x-max-length / x-max-length-bytes when messages return to the queue (nack or reject with
requeue, basic.recover, channel or connection close): RabbitMQ requeues them at the head and
then applies drop-head (dropping, or dead-lettering with reason maxlen, from the head); with
reject-publish(-dlx) requeued messages are kept even past the limit (only publishes are
refused)."""
from conftest import connect, drain, get_one, wait_for


def _ready(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def _take(ch, q, n):
    return [get_one(ch, q, auto_ack=False)[0] for _ in range(n)]


def test_nack_requeue_over_max_length_drops_from_head(ch, names):
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 2})
    ch.basic_publish("", q, b"m1")
    ch.basic_publish("", q, b"m2")
    taken = _take(ch, q, 2)
    ch.basic_publish("", q, b"m3")
    ch.basic_publish("", q, b"m4")
    assert wait_for(lambda: _ready(ch, q) == 2)
    ch.basic_nack(taken[-1].delivery_tag, multiple=True, requeue=True)
    assert wait_for(lambda: _ready(ch, q) == 2)
    # m1 and m2 went back to the head, so they are the ones dropped.
    assert drain(ch, q, 2) == [b"m3", b"m4"]


def test_reject_requeue_over_max_length_bytes_dead_letters_maxlen(ch, names):
    dlx = names.exchange("dlx")
    ch.exchange_declare(dlx, "fanout")
    dlq = names.queue("dlq")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx)
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length-bytes": 10, "x-dead-letter-exchange": dlx})
    ch.basic_publish("", q, b"12345")
    m, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_publish("", q, b"abcde")
    ch.basic_publish("", q, b"fghij")
    assert wait_for(lambda: _ready(ch, q) == 2)
    ch.basic_reject(m.delivery_tag, requeue=True)
    m, props, body = get_one(ch, dlq)
    assert body == b"12345"
    assert props.headers["x-death"][0]["reason"] == "maxlen"
    assert props.headers["x-death"][0]["queue"] == q
    assert drain(ch, q, 2) == [b"abcde", b"fghij"]


def test_recover_over_max_length_drops_from_head(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 1})
    ch.basic_publish("", q, b"old")
    _take(ch, q, 1)
    ch.basic_publish("", q, b"new")
    ch.basic_recover(requeue=True)
    assert wait_for(lambda: _ready(ch, q) == 1)
    assert drain(ch, q, 1) == [b"new"]


def test_channel_and_connection_close_requeue_within_max_length(names):
    c = connect()
    ch = c.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 2})
    for b in (b"m1", b"m2", b"m3"):
        ch.basic_publish("", q, b)
    _take(ch, q, 3)
    ch.basic_publish("", q, b"m4")
    ch.close()  # m1..m3 back at the head: 4 ready, the oldest two dropped
    other = c.channel()
    assert wait_for(lambda: _ready(other, q) == 2)
    _take(other, q, 1)  # m3, unacked on `other`
    other.basic_publish("", q, b"m5")
    other.basic_publish("", q, b"m6")
    c.close()  # connection close: m3 back at the head, dropped again
    c = connect()
    try:
        ch = c.channel()
        assert wait_for(lambda: _ready(ch, q) == 2)
        assert drain(ch, q, 2) == [b"m5", b"m6"]
    finally:
        c.close()


def test_reject_publish_keeps_requeued_messages_past_the_limit(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.basic_publish("", q, b"m1")
    taken = _take(ch, q, 1)
    ch.basic_publish("", q, b"m2")
    assert wait_for(lambda: _ready(ch, q) == 1)
    ch.basic_nack(taken[0].delivery_tag, requeue=True)
    assert wait_for(lambda: _ready(ch, q) == 2)
    assert drain(ch, q, 2) == [b"m1", b"m2"]

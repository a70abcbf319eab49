"""basic.* class: publish/get/consume/ack/nack/reject/recover/qos and properties."""
import datetime
import decimal
import os
import time
import urllib.parse

import pika
import pika.exceptions
import pytest

from conftest import AMQP_URL, channel_error, connect, drain, get_one, wait_for


def _declare(ch, names, **kw):
    q = names.queue()
    ch.queue_declare(q, **kw)
    return q


def _publish_n(ch, q, n, prefix="m"):
    for i in range(1, n + 1):
        ch.basic_publish("", q, ("%s%d" % (prefix, i)).encode())


def _ready(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


class Collector:
    def __init__(self):
        self.items = []

    def __call__(self, ch, method, props, body):
        self.items.append((method, props, body))

    @property
    def bodies(self):
        return [b for _, _, b in self.items]


def test_publish_get_message_count_and_get_empty(ch, names):
    q = _declare(ch, names)
    _publish_n(ch, q, 3)
    assert wait_for(lambda: _ready(ch, q) == 3)
    m, props, body = ch.basic_get(q, auto_ack=True)
    assert body == b"m1"
    assert m.message_count == 2  # messages remaining after this one
    assert m.exchange == "" and m.routing_key == q
    assert m.redelivered is False
    assert m.delivery_tag == 1
    m, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, m.message_count, m.delivery_tag) == (b"m2", 1, 2)
    m, _, body = ch.basic_get(q, auto_ack=True)
    assert (body, m.message_count) == (b"m3", 0)
    m, props, body = ch.basic_get(q, auto_ack=True)
    assert m is None and body is None  # get-empty


def test_mandatory_unroutable_returned_312(conn, names):
    ch = conn.channel()
    returned = []
    ch.add_on_return_callback(lambda c, m, p, b: returned.append((m, p, b)))
    x = names.exchange()
    ch.exchange_declare(x, "direct")
    ch.basic_publish(x, "nobody-home", b"bounce", pika.BasicProperties(message_id="r1"),
                     mandatory=True)
    assert wait_for(lambda: returned, conn=conn, timeout=5)
    m, p, b = returned[0]
    assert m.reply_code == 312
    assert m.reply_text == "NO_ROUTE"
    assert m.exchange == x and m.routing_key == "nobody-home"
    assert b == b"bounce" and p.message_id == "r1"


def test_non_mandatory_unroutable_silently_dropped(conn, names):
    ch = conn.channel()
    returned = []
    ch.add_on_return_callback(lambda *a: returned.append(a))
    ch.basic_publish("amq.direct", "nobody-" + names.queue(), b"x")
    conn.process_data_events(time_limit=0.3)
    assert returned == []
    assert ch.is_open


def test_consume_no_ack(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    col = Collector()
    tag = ch.basic_consume(q, col, auto_ack=True)
    _publish_n(ch, q, 20)
    assert wait_for(lambda: len(col.items) == 20, conn=conn, timeout=5)
    assert col.bodies == [b"m%d" % i for i in range(1, 21)]
    assert [m.delivery_tag for m, _, _ in col.items] == list(range(1, 21))
    assert all(m.consumer_tag == tag for m, _, _ in col.items)
    ch.basic_cancel(tag)
    assert _ready(ch, q) == 0


def test_consume_with_generator_and_inactivity_timeout(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    _publish_n(ch, q, 5)
    got = []
    for m, p, body in ch.consume(q, auto_ack=False, inactivity_timeout=3):
        if m is None:
            break
        got.append(body)
        ch.basic_ack(m.delivery_tag)
    ch.cancel()
    assert got == [b"m%d" % i for i in range(1, 6)]


def test_consume_exclusive_second_consumer_403(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    ch.basic_consume(q, lambda *a: None, exclusive=True)
    ch2 = conn.channel()
    e = channel_error(ch2, lambda: ch2.basic_consume(q, lambda *a: None))
    assert e.reply_code == 403
    assert e.reply_text.startswith("ACCESS_REFUSED"), e.reply_text


def test_consume_exclusive_when_others_consume_403(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    ch.basic_consume(q, lambda *a: None)
    ch2 = conn.channel()
    e = channel_error(ch2, lambda: ch2.basic_consume(q, lambda *a: None, exclusive=True))
    assert e.reply_code == 403


def test_cancel_stops_deliveries(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    col = Collector()
    tag = ch.basic_consume(q, col, auto_ack=True)
    ch.basic_publish("", q, b"1")
    assert wait_for(lambda: len(col.items) == 1, conn=conn)
    ch.basic_cancel(tag)
    ch.basic_publish("", q, b"2")
    assert wait_for(lambda: _ready(ch, q) == 1)
    assert col.bodies == [b"1"]


def test_cancel_unknown_tag_is_ok(ch):
    # basic.cancel with an unknown consumer tag is answered with cancel-ok.
    ch._impl.basic_cancel("no-such-consumer-tag")
    ch.connection.process_data_events(time_limit=0.2)
    assert ch.is_open


def test_server_cancel_when_queue_deleted(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame))
    tag = ch.basic_consume(q, lambda *a: None)
    other = conn.channel()
    other.queue_delete(q)
    assert wait_for(lambda: cancelled, conn=conn, timeout=5)
    assert cancelled[0].method.consumer_tag == tag
    assert ch.is_open  # the channel survives


def test_redelivered_after_nack_requeue(ch, names):
    q = _declare(ch, names)
    ch.basic_publish("", q, b"again")
    m, _, _ = get_one(ch, q, auto_ack=False)
    assert m.redelivered is False
    ch.basic_nack(m.delivery_tag, requeue=True)
    m2, _, body = get_one(ch, q, auto_ack=False)
    assert body == b"again" and m2.redelivered is True
    assert m2.delivery_tag == m.delivery_tag + 1  # tags keep counting up per channel
    ch.basic_ack(m2.delivery_tag)


def test_redelivered_after_channel_close_with_unacked(conn, names):
    c1 = conn.channel()
    q = _declare(c1, names)
    _publish_n(c1, q, 2)
    m, _, _ = get_one(c1, q, auto_ack=False)
    assert m.redelivered is False
    c1.close()
    c2 = conn.channel()
    m, _, body = get_one(c2, q, auto_ack=False)
    assert body == b"m1" and m.redelivered is True
    m, _, body = get_one(c2, q, auto_ack=False)
    assert body == b"m2" and m.redelivered is False


def test_redelivered_after_connection_close_with_unacked(names):
    c = connect()
    ch = c.channel()
    q = _declare(ch, names)
    ch.basic_publish("", q, b"x")
    col = Collector()
    ch.basic_consume(q, col, auto_ack=False)
    assert wait_for(lambda: col.items, conn=c)
    c.close()
    c2 = connect()
    try:
        ch2 = c2.channel()
        m, _, body = get_one(ch2, q)
        assert body == b"x" and m.redelivered is True
    finally:
        c2.close()


def test_reject_and_nack_without_requeue_drop(ch, names):
    q = _declare(ch, names)
    _publish_n(ch, q, 3)
    m1, _, _ = get_one(ch, q, auto_ack=False)
    m2, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_reject(m1.delivery_tag, requeue=False)
    ch.basic_nack(m2.delivery_tag, requeue=False)
    m3, _, body = get_one(ch, q, auto_ack=True)
    assert body == b"m3"
    m, _, _ = ch.basic_get(q, auto_ack=True)
    assert m is None


def test_reject_requeue(ch, names):
    q = _declare(ch, names)
    ch.basic_publish("", q, b"r")
    m, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=True)
    m, _, body = get_one(ch, q, auto_ack=True)
    assert body == b"r" and m.redelivered


def test_nack_multiple(ch, names):
    q = _declare(ch, names)
    _publish_n(ch, q, 5)
    tags = [get_one(ch, q, auto_ack=False)[0].delivery_tag for _ in range(4)]
    # nack multiple up to the 3rd: 1..3 requeued, 4 still unacked
    ch.basic_nack(tags[2], multiple=True, requeue=True)
    got = drain(ch, q, 4)
    assert got == [b"m1", b"m2", b"m3", b"m5"]
    ch.basic_ack(tags[3])


def test_ack_multiple(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    _publish_n(ch, q, 5)
    tags = [get_one(ch, q, auto_ack=False)[0].delivery_tag for _ in range(5)]
    ch.basic_ack(tags[3], multiple=True)  # acks 1..4
    ch.close()  # only 5 returns to the queue
    ch = conn.channel()
    assert drain(ch, q, 1) == [b"m5"]
    m, _, _ = ch.basic_get(q)
    assert m is None


def test_ack_zero_multiple_acks_all(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    _publish_n(ch, q, 3)
    for _ in range(3):
        get_one(ch, q, auto_ack=False)
    ch.basic_ack(0, multiple=True)  # delivery-tag 0 + multiple = everything outstanding
    ch.close()
    ch = conn.channel()
    assert _ready(ch, q) == 0


def test_requeued_messages_keep_their_place(ch, names):
    q = _declare(ch, names)
    _publish_n(ch, q, 5)
    m1, _, _ = get_one(ch, q, auto_ack=False)
    m2, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_nack(m2.delivery_tag, multiple=True, requeue=True)
    assert drain(ch, q, 5) == [b"m1", b"m2", b"m3", b"m4", b"m5"]


def test_requeue_in_reverse_order_still_restores_position(ch, names):
    q = _declare(ch, names)
    _publish_n(ch, q, 4)
    m1, _, _ = get_one(ch, q, auto_ack=False)
    m2, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_nack(m2.delivery_tag, requeue=True)
    ch.basic_nack(m1.delivery_tag, requeue=True)
    assert drain(ch, q, 4) == [b"m1", b"m2", b"m3", b"m4"]


def test_recover_requeue_redelivers(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    _publish_n(ch, q, 3)
    col = Collector()
    ch.basic_consume(q, col, auto_ack=False)
    assert wait_for(lambda: len(col.items) == 3, conn=conn)
    assert not any(m.redelivered for m, _, _ in col.items)
    ch.basic_recover(requeue=True)
    assert wait_for(lambda: len(col.items) == 6, conn=conn)
    again = col.items[3:]
    assert [b for _, _, b in again] == [b"m1", b"m2", b"m3"]
    assert all(m.redelivered for m, _, _ in again)
    for m, _, _ in again:
        ch.basic_ack(m.delivery_tag)


def test_qos_prefetch_limits_unacked_per_consumer(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    ch.basic_qos(prefetch_count=3)
    _publish_n(ch, q, 10)
    col = Collector()
    ch.basic_consume(q, col, auto_ack=False)
    assert wait_for(lambda: len(col.items) == 3, conn=conn)
    conn.process_data_events(time_limit=0.3)
    assert len(col.items) == 3  # no more until we ack
    ch.basic_ack(col.items[0][0].delivery_tag)
    assert wait_for(lambda: len(col.items) == 4, conn=conn)
    conn.process_data_events(time_limit=0.3)
    assert len(col.items) == 4
    ch.basic_ack(col.items[3][0].delivery_tag, multiple=True)
    assert wait_for(lambda: len(col.items) == 7, conn=conn)
    conn.process_data_events(time_limit=0.2)
    assert len(col.items) == 7
    assert col.bodies == [b"m%d" % i for i in range(1, 8)]


def test_qos_per_consumer_applies_to_each_consumer(conn, names):
    ch = conn.channel()
    q1 = _declare(ch, names)
    q2 = _declare(ch, names)
    ch.basic_qos(prefetch_count=2)  # per consumer (global=False)
    _publish_n(ch, q1, 5)
    _publish_n(ch, q2, 5)
    c1, c2 = Collector(), Collector()
    ch.basic_consume(q1, c1)
    ch.basic_consume(q2, c2)
    assert wait_for(lambda: len(c1.items) == 2 and len(c2.items) == 2, conn=conn)
    conn.process_data_events(time_limit=0.3)
    assert (len(c1.items), len(c2.items)) == (2, 2)


def test_qos_global_limits_whole_channel(conn, names):
    ch = conn.channel()
    q1 = _declare(ch, names)
    q2 = _declare(ch, names)
    ch.basic_qos(prefetch_count=3, global_qos=True)  # shared by all consumers on the channel
    _publish_n(ch, q1, 5)
    _publish_n(ch, q2, 5)
    c1, c2 = Collector(), Collector()
    ch.basic_consume(q1, c1)
    ch.basic_consume(q2, c2)
    assert wait_for(lambda: len(c1.items) + len(c2.items) == 3, conn=conn)
    conn.process_data_events(time_limit=0.3)
    assert len(c1.items) + len(c2.items) == 3
    ch.basic_ack(0, multiple=True)
    assert wait_for(lambda: len(c1.items) + len(c2.items) == 6, conn=conn)
    conn.process_data_events(time_limit=0.3)
    assert len(c1.items) + len(c2.items) == 6


def test_qos_prefetch_does_not_limit_get_or_noack(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    ch.basic_qos(prefetch_count=1)
    _publish_n(ch, q, 4)
    got = [get_one(ch, q, auto_ack=False) for _ in range(2)]
    assert [b for _, _, b in got] == [b"m1", b"m2"]  # basic.get ignores prefetch
    col = Collector()
    ch.basic_consume(q, col, auto_ack=True)  # no-ack consumers ignore prefetch
    assert wait_for(lambda: len(col.items) == 2, conn=conn)


def test_qos_zero_means_unlimited(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    ch.basic_qos(prefetch_count=0)
    _publish_n(ch, q, 50)
    col = Collector()
    ch.basic_consume(q, col)
    assert wait_for(lambda: len(col.items) == 50, conn=conn)


def test_round_robin_between_consumers(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    c1, c2 = Collector(), Collector()
    ch.basic_consume(q, c1, auto_ack=True)
    ch.basic_consume(q, c2, auto_ack=True)
    _publish_n(ch, q, 10)
    assert wait_for(lambda: len(c1.items) + len(c2.items) == 10, conn=conn)
    assert len(c1.items) == 5 and len(c2.items) == 5


def test_properties_round_trip(ch, names):
    q = _declare(ch, names)
    u = urllib.parse.urlparse(AMQP_URL)
    user = urllib.parse.unquote(u.username or "guest")
    ts = datetime.datetime(2024, 5, 6, 7, 8, 9)
    headers = {
        "str": "hello",
        "unicode": "h\u00e9llo \u2603",
        "int": 42,
        "neg": -7,
        "big": 2 ** 40,
        "bool_t": True,
        "bool_f": False,
        "nested": {"a": 1, "b": {"c": "deep"}},
        "list": [1, "two", True, {"k": "v"}, [3]],
        "bytes": b"\x00\x01\xfe",
        "decimal": decimal.Decimal("3.14"),
        "timestamp": ts,
        "none": None,
        "empty_str": "",
    }
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers=headers,
        delivery_mode=2,
        priority=5,
        correlation_id="corr-1",
        reply_to="reply.queue",
        expiration="60000",
        message_id="msg-1",
        timestamp=1700000000,
        type="my.type",
        user_id=user,
        app_id="interop-tests",
        cluster_id="",
    )
    ch.basic_publish("", q, b"{}", props)
    m, p, body = get_one(ch, q)
    assert body == b"{}"
    assert p.content_type == "application/json"
    assert p.content_encoding == "gzip"
    assert p.delivery_mode == 2
    assert p.priority == 5
    assert p.correlation_id == "corr-1"
    assert p.reply_to == "reply.queue"
    assert p.expiration == "60000"
    assert p.message_id == "msg-1"
    assert p.timestamp == 1700000000
    assert p.type == "my.type"
    assert p.user_id == user
    assert p.app_id == "interop-tests"
    h = p.headers
    assert h["str"] == b"hello" or h["str"] == "hello"
    for k, v in headers.items():
        got = h[k]
        if isinstance(v, str):
            got = got.decode() if isinstance(got, bytes) else got
        if k == "list":
            assert got[0] == 1 and got[2] is True and got[4] == [3]
            assert got[1] in ("two", b"two")
            assert got[3]["k"] in ("v", b"v")
            continue
        if k == "nested":
            assert got["a"] == 1
            assert got["b"]["c"] in ("deep", b"deep")
            continue
        if k == "timestamp":
            # AMQP timestamps are UTC seconds; pika decodes them tz-aware.
            assert got.replace(tzinfo=None) == v, (got, v)
            continue
        assert got == v, (k, got, v)


def test_no_properties_round_trip(ch, names):
    q = _declare(ch, names)
    ch.basic_publish("", q, b"plain")
    m, p, body = get_one(ch, q)
    assert body == b"plain"
    assert p.headers is None and p.content_type is None and p.delivery_mode is None


def test_user_id_mismatch_406(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    e = channel_error(ch, lambda: ch.basic_publish(
        "", q, b"x", pika.BasicProperties(user_id="not-" + names.queue())))
    assert e.reply_code == 406
    assert e.reply_text.startswith("PRECONDITION_FAILED"), e.reply_text
    ch = conn.channel()
    assert _ready(ch, q) == 0


@pytest.mark.parametrize("size", [0, 1, 131072 - 8, 131072, 1024 * 1024, 3 * 1024 * 1024 + 7])
def test_body_sizes(ch, names, size):
    q = _declare(ch, names)
    body = os.urandom(size)
    ch.basic_publish("", q, body)
    m, _, got = get_one(ch, q, timeout=10)
    assert m is not None
    assert len(got) == size
    assert got == body


def test_big_body_via_consumer(conn, names):
    ch = conn.channel()
    q = _declare(ch, names)
    bodies = [os.urandom(1024 * 1024) for _ in range(3)] + [b""]
    for b in bodies:
        ch.basic_publish("", q, b)
    col = Collector()
    ch.basic_consume(q, col, auto_ack=True)
    assert wait_for(lambda: len(col.items) == 4, conn=conn, timeout=10)
    assert col.bodies == bodies


def test_priority_queue(ch, names):
    q = _declare(ch, names, arguments={"x-max-priority": 10})
    for prio in (1, 5, 9, 3):
        ch.basic_publish("", q, b"p%d" % prio, pika.BasicProperties(priority=prio))
    assert wait_for(lambda: _ready(ch, q) == 4)
    assert drain(ch, q, 4) == [b"p9", b"p5", b"p3", b"p1"]


def test_channel_flow_active(ch):
    # channel.flow(active=True) is answered with flow-ok(active=True).
    # (RabbitMQ refuses active=False from clients with 540 NOT_IMPLEMENTED.)
    assert ch.flow(True) is True
    assert ch.is_open


def test_channel_flow_inactive_not_implemented(names):
    c = connect()
    ch = c.channel()
    try:
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as ei:
            ch.flow(False)
        assert ei.value.reply_code == 540
        assert c.is_closed
    finally:
        if c.is_open:
            c.close()

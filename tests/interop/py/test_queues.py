"""Queue declare/delete/purge/bind semantics and queue arguments."""
import time

import pika
import pika.exceptions

from conftest import channel_error, connect, drain, get_one, queue_exists, wait_for


def test_declare_returns_counts(ch, names):
    q = names.queue()
    ok = ch.queue_declare(q).method
    assert ok.queue == q
    assert ok.message_count == 0
    assert ok.consumer_count == 0
    for i in range(3):
        ch.basic_publish("", q, b"m%d" % i)
    ch.basic_consume(q, lambda *a: None, auto_ack=False)  # consumer gets some of them
    ch.connection.process_data_events(time_limit=0.1)
    ch2 = ch.connection.channel()
    ok = ch2.queue_declare(q, passive=True).method
    assert ok.consumer_count == 1
    # messages delivered to the consumer but unacked are not counted as "ready"
    assert ok.message_count == 0


def test_passive_declare_counts_ready_messages(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    for i in range(5):
        ch.basic_publish("", q, b"m")
    assert wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 5)
    ok = ch.queue_declare(q).method  # non-passive redeclare also reports counts
    assert ok.message_count == 5 and ok.consumer_count == 0


def test_server_named_queue(ch):
    ok = ch.queue_declare("", exclusive=True).method
    assert ok.queue.startswith("amq.gen-"), ok.queue
    assert len(ok.queue) > len("amq.gen-")
    ok2 = ch.queue_declare("", exclusive=True).method
    assert ok2.queue != ok.queue


def test_empty_queue_name_refers_to_last_declared(ch):
    # AMQP 0-9-1: an empty queue name in queue.bind / basic.get etc. means the
    # channel's last declared queue.
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind("", "amq.direct", "empty-name-" + q)
    ch.basic_publish("amq.direct", "empty-name-" + q, b"x")
    m, _, body = get_one(ch, q)
    assert body == b"x"


def test_exclusive_queue_removed_when_connection_closes(names):
    q = names.queue()
    c = connect()
    c.channel().queue_declare(q, exclusive=True)
    c.close()
    assert wait_for(lambda: not queue_exists(queue=q), timeout=5)


def test_auto_delete_queue_removed_after_last_consumer_cancels(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, auto_delete=True)
    # an auto-delete queue that never had a consumer stays
    conn.process_data_events(time_limit=0.1)
    assert queue_exists(queue=q)
    t1 = ch.basic_consume(q, lambda *a: None)
    t2 = ch.basic_consume(q, lambda *a: None)
    ch.basic_cancel(t1)
    assert queue_exists(queue=q)  # one consumer left
    ch.basic_cancel(t2)
    assert wait_for(lambda: not queue_exists(queue=q), timeout=5)


def test_auto_delete_queue_removed_when_consumer_channel_closes(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, auto_delete=True)
    c2 = conn.channel()
    c2.basic_consume(q, lambda *a: None)
    c2.close()
    assert wait_for(lambda: not queue_exists(queue=q), timeout=5)


def test_purge_returns_count(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    for i in range(7):
        ch.basic_publish("", q, b"m")
    assert wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 7)
    ok = ch.queue_purge(q).method
    assert ok.message_count == 7
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    assert ch.queue_purge(q).method.message_count == 0


def test_purge_does_not_touch_unacked(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    for i in range(3):
        ch.basic_publish("", q, b"m%d" % i)
    m, _, _ = get_one(ch, q, auto_ack=False)
    assert ch.queue_purge(q).method.message_count == 2
    ch.basic_nack(m.delivery_tag, requeue=True)
    m2, _, body = get_one(ch, q)
    assert body == b"m0" and m2.redelivered


def test_delete_if_unused_with_consumer_406(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_consume(q, lambda *a: None)
    ch2 = conn.channel()
    e = channel_error(ch2, lambda: ch2.queue_delete(q, if_unused=True))
    assert e.reply_code == 406
    assert e.reply_text.startswith("PRECONDITION_FAILED"), e.reply_text
    assert queue_exists(queue=q)


def test_delete_if_empty_with_messages_406(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"m")
    assert wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 1)
    e = channel_error(ch, lambda: ch.queue_delete(q, if_empty=True))
    assert e.reply_code == 406
    assert queue_exists(queue=q)


def test_delete_returns_message_count(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    for i in range(4):
        ch.basic_publish("", q, b"m")
    assert wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 4)
    ok = ch.queue_delete(q).method
    assert ok.message_count == 4
    assert not queue_exists(queue=q)
    # deleting a missing queue is not an error in RabbitMQ 3.x: delete-ok with 0
    assert ch.queue_delete(q).method.message_count == 0


def test_delete_if_unused_and_if_empty_ok_when_satisfied(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    assert ch.queue_delete(q, if_unused=True, if_empty=True).method.message_count == 0
    assert not queue_exists(queue=q)


def test_bind_unbind(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "direct")
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    ch.basic_publish(x, "k", b"1")
    assert drain(ch, q, 1) == [b"1"]
    ch.queue_unbind(q, x, "k")
    ch.basic_publish(x, "k", b"2")
    ch.connection.process_data_events(time_limit=0.2)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_queue_delete_removes_bindings(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "fanout")
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    ch.queue_delete(q)
    ch.queue_declare(q)  # same name again: old binding must not come back
    ch.basic_publish(x, "", b"x")
    ch.connection.process_data_events(time_limit=0.2)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_exchange_delete_removes_bindings(ch, names):
    x = names.exchange()
    ch.exchange_declare(x, "fanout")
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    ch.exchange_delete(x)
    ch.exchange_declare(x, "fanout")
    ch.basic_publish(x, "", b"x")
    ch.connection.process_data_events(time_limit=0.2)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_x_max_length_drops_oldest(ch, names):
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 3})
    for i in range(1, 6):
        ch.basic_publish("", q, b"m%d" % i)
    assert wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 3)
    assert drain(ch, q, 3) == [b"m3", b"m4", b"m5"]


def test_x_max_length_perftest_style_args(ch, names):
    # The argument shape PerfTest sends with --queue-args x-max-length=10000
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 10000})
    ch.queue_declare(q, passive=True)


def test_x_max_length_reject_publish_nacks(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"first")
    try:
        ch.basic_publish("", q, b"second")
        raise AssertionError("second publish should have been nacked")
    except pika.exceptions.NackError:
        pass
    assert drain(ch, q, 1) == [b"first"]


def test_x_expires_unused_queue_disappears(ch, names):
    q = names.queue()
    ch.queue_declare(q, arguments={"x-expires": 500})
    assert queue_exists(queue=q)
    # NB: in RabbitMQ any queue.declare, including a passive one, counts as a
    # "use" and restarts the expiry timer, so poll less often than x-expires.
    time.sleep(1.0)
    assert wait_for(lambda: not queue_exists(queue=q), timeout=4, step=0.8)


def test_x_expires_queue_with_consumer_stays(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, arguments={"x-expires": 300})
    ch.basic_consume(q, lambda *a: None)
    conn.sleep(1.0)
    assert queue_exists(queue=q)


def test_x_message_ttl_expires_messages(ch, names):
    q = names.queue()
    ch.queue_declare(q, arguments={"x-message-ttl": 100})
    ch.basic_publish("", q, b"short-lived")
    ch.connection.sleep(0.5)
    m, _, _ = ch.basic_get(q, auto_ack=True)
    assert m is None


def test_per_message_expiration(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"expires", pika.BasicProperties(expiration="100"))
    ch.basic_publish("", q, b"stays")
    ch.connection.sleep(0.5)
    assert drain(ch, q, 1) == [b"stays"]
    m, _, _ = ch.basic_get(q, auto_ack=True)
    assert m is None


def test_an_expired_message_behind_a_live_head_is_never_delivered(ch, names):
    """The Java client's PerMessageTTL.expiryWhenConsumerIsLateToTheParty: the head lives
    500 ms, the one behind it 100 ms; a consumer that comes 200 ms later gets the head only
    (the expired one is dropped when it reaches the head, never handed out)."""
    q = names.queue()
    ch.queue_declare(q, auto_delete=True)
    ch.basic_publish("", q, b"head", pika.BasicProperties(expiration="500"))
    ch.basic_publish("", q, b"behind", pika.BasicProperties(expiration="100"))
    ch.connection.sleep(0.2)
    got = []
    ch.basic_consume(q, lambda c, m, p, body: got.append(body), auto_ack=False)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.05)
    assert got == [b"head"]


def test_a_requeued_message_expires_on_time_before_a_later_head(ch, names):
    """The Java client's DeadLetterExchange.deadLetterQueueTTLPromptExpiry: a message taken
    with basic.get and requeued expires when its TTL says (queue TTL 3 s from its publish),
    not when the broker next looks at the message that was the head while it was out."""
    dlx, dlq, q = names.exchange("dlx"), names.queue("dlq"), names.queue()
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx)
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 3000})
    start = time.monotonic()

    def until(t):
        ch.connection.sleep(max(0.0, start + t - time.monotonic()))
    ch.basic_publish("", q, b"first")  # due at 3.0 s
    m, _, _ = get_one(ch, q, auto_ack=False)
    until(1.9)
    ch.basic_publish("", q, b"second")  # the head now, due at 4.9 s
    until(2.95)
    ch.basic_reject(m.delivery_tag, requeue=True)  # back at the head, due at 3.0 s
    _, _, body = get_one(ch, dlq, timeout=5)
    arrived = time.monotonic() - start
    assert body == b"first"
    assert 2.8 < arrived < 3.5, arrived


def test_dead_letter_on_reject(ch, names):
    dlx = names.exchange("dlx")
    ch.exchange_declare(dlx, "fanout")
    dlq = names.queue("dlq")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx)
    q = names.queue()
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": dlx})
    ch.basic_publish("", q, b"dead")
    m, _, _ = get_one(ch, q, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    m, props, body = get_one(ch, dlq)
    assert body == b"dead"
    death = props.headers["x-death"][0]
    assert death["reason"] == "rejected"
    assert death["queue"] == q
    assert death["count"] == 1


def test_invalid_queue_argument_406(conn, names):
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.queue_declare(names.queue(),
                                                  arguments={"x-max-length": "lots"}))
    assert e.reply_code == 406
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.queue_declare(names.queue(),
                                                  arguments={"x-expires": 0}))
    assert e.reply_code == 406


def test_exclusive_queue_usable_from_other_channel_same_connection(conn, names):
    q = names.queue()
    a = conn.channel()
    b = conn.channel()
    a.queue_declare(q, exclusive=True)
    b.queue_declare(q, passive=True)
    b.basic_publish("", q, b"x")
    m, _, body = get_one(b, q)
    assert body == b"x"


def test_exclusive_queue_get_from_other_connection_405(conn, names):
    q = names.queue()
    conn.channel().queue_declare(q, exclusive=True)
    other = connect()
    try:
        och = other.channel()
        e = channel_error(och, lambda: och.basic_get(q))
        assert e.reply_code == 405
        och = other.channel()
        e = channel_error(och, lambda: och.queue_purge(q))
        assert e.reply_code == 405
    finally:
        other.close()

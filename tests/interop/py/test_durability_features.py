"""Queue features from the durability issue that a RabbitMQ user relies on: single active
consumer, queue types, overflow modes with confirms, dead-lettering on expiry and overflow."""
import pika
import pika.exceptions

from conftest import channel_error, connect, get_one, wait_for


def test_single_active_consumer_takes_all_then_hands_over(conn, names):
    q = names.queue()
    setup = conn.channel()
    setup.queue_declare(q, arguments={"x-single-active-consumer": True})
    got = {"a": [], "b": []}
    ch_a, ch_b = conn.channel(), conn.channel()
    tag_a = ch_a.basic_consume(q, lambda c, m, p, b: got["a"].append(b), auto_ack=True)
    ch_b.basic_consume(q, lambda c, m, p, b: got["b"].append(b), auto_ack=True)
    for i in range(10):
        setup.basic_publish("", q, b"%d" % i)
    assert wait_for(lambda: len(got["a"]) == 10, conn=conn)
    assert got["b"] == []
    ch_a.basic_cancel(tag_a)
    for i in range(10, 15):
        setup.basic_publish("", q, b"%d" % i)
    assert wait_for(lambda: len(got["b"]) == 5, conn=conn)
    assert got["b"] == [b"%d" % i for i in range(10, 15)]


def test_stream_queue_type_refused_with_406(conn, names):
    # Warren-specific until streams exist (RabbitMQ accepts them); every other test in this
    # file passes against RabbitMQ 3.10 too. Quorum queues: test_quorum_queues.py.
    ch = conn.channel()
    e = channel_error(ch, lambda: ch.queue_declare(
        names.queue(), durable=True, arguments={"x-queue-type": "stream"}))
    assert e.reply_code == 406
    ch = conn.channel()
    ok = ch.queue_declare(names.queue(), durable=True, arguments={"x-queue-type": "classic"})
    assert ok.method.message_count == 0


def test_lazy_queue_returns_paged_messages_intact_and_in_order(ch, names):
    # In a lazy durable queue persistent messages live on disk only and are read back on
    # delivery: names, properties, headers and bodies must come back exactly.
    q = names.queue()
    ch.queue_declare(q, durable=True, arguments={"x-queue-mode": "lazy"})
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", q, b"body-%d-" % i + bytes(range(256)) * 4, pika.BasicProperties(
            delivery_mode=2, content_type="application/x-test", correlation_id="c%d" % i,
            headers={"n": i, "s": "x" * i}))
    ch.basic_publish("", q, b"transient")  # paged too, as a record a restart drops
    for i in range(50):
        m, props, body = get_one(ch, q)
        assert body == b"body-%d-" % i + bytes(range(256)) * 4
        assert m.routing_key == q and m.exchange == ""
        assert props.delivery_mode == 2 and props.content_type == "application/x-test"
        assert props.correlation_id == "c%d" % i
        assert props.headers == {"n": i, "s": "x" * i}
    m, _, body = get_one(ch, q)
    assert body == b"transient"


def test_deep_lazy_queues_deliver_in_order_to_a_consumer(conn, names):
    # Durable and non-durable lazy queues both keep their messages on disk only; a consumer
    # with a prefetch window reads them back in batches, and a nack-requeued message comes
    # back (after those already in flight), redelivered. Mixed persistent and transient
    # messages keep their order.
    for durable in (True, False):
        ch = conn.channel()
        q = names.queue()
        ch.queue_declare(q, durable=durable, arguments={"x-queue-mode": "lazy"})
        ch.confirm_delivery()
        n = 3000
        for i in range(n):
            ch.basic_publish("", q, b"%d" % i + b"." * 500,
                             pika.BasicProperties(delivery_mode=2 if i % 2 else 1))
        assert ch.queue_declare(q, passive=True).method.message_count == n
        ch.basic_qos(prefetch_count=100)
        got = []
        state = {"nacked": False}

        def on_message(c, m, p, body):
            if not state["nacked"]:
                state["nacked"] = True
                c.basic_nack(m.delivery_tag, requeue=True)
                return
            got.append((int(body.split(b".")[0]), m.redelivered))
            c.basic_ack(m.delivery_tag)

        ch.basic_consume(q, on_message)
        assert wait_for(lambda: len(got) == n, timeout=30, conn=conn), len(got)
        assert [i for i, _ in got if i != 0] == list(range(1, n))
        assert [r for i, r in got if i == 0] == [True]
        assert not any(r for i, r in got if i != 0)
        ch.close()


def test_reject_publish_nacks_confirming_publisher(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"1")
    ch.basic_publish("", q, b"2")
    try:
        ch.basic_publish("", q, b"3")
        raised = False
    except pika.exceptions.NackError:
        raised = True
    assert raised
    assert ch.queue_declare(q, passive=True).method.message_count == 2


def test_dead_letter_on_expiry_and_overflow_with_routing_key(ch, names):
    dlx = names.exchange("dlx")
    ch.exchange_declare(dlx, "direct")
    dlq = names.queue("dlq")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx, "dead")
    q = names.queue()
    ch.queue_declare(q, arguments={
        "x-dead-letter-exchange": dlx,
        "x-dead-letter-routing-key": "dead",
        "x-message-ttl": 50,
        "x-max-length": 1,
    })
    ch.basic_publish("", q, b"first")   # pushed out by the second: maxlen
    ch.basic_publish("", q, b"second")  # expires after 50 ms: expired
    bodies, reasons = [], []
    for _ in range(2):
        m, props, body = get_one(ch, dlq, timeout=3)
        assert m is not None
        bodies.append(body)
        reasons.append(props.headers["x-death"][0]["reason"])
        assert props.headers["x-first-death-queue"] == q
    assert bodies == [b"first", b"second"]
    assert reasons == ["maxlen", "expired"]

"""basic.qos global=true: one unacked limit shared by every acking consumer on the channel, on
top of each consumer's own (global=false) limit; no-ack deliveries take no room (but wait
while the channel is full, as in RabbitMQ); and the shared room is handed out fairly across
the queues the channel consumes from."""
from conftest import wait_for


class Collector:
    def __init__(self, name, log):
        self.name = name
        self.log = log
        self.items = []

    def __call__(self, ch, method, props, body):
        self.items.append((method, body))
        self.log.append((self.name, method.delivery_tag))


def _queue_with(ch, names, n, prefix):
    q = names.queue()
    ch.queue_declare(q)
    for i in range(1, n + 1):
        ch.basic_publish("", q, ("%s%d" % (prefix, i)).encode())
    return q


def test_per_consumer_and_channel_limits_both_apply(conn, names):
    ch = conn.channel()
    q1 = _queue_with(ch, names, 10, "a")
    q2 = _queue_with(ch, names, 10, "b")
    q3 = _queue_with(ch, names, 10, "c")
    ch.basic_qos(prefetch_count=2)  # each consumer created from now on
    ch.basic_qos(prefetch_count=5, global_qos=True)  # all of them together
    log = []
    cs = [Collector(n, log) for n in ("a", "b", "c")]
    for q, c in zip((q1, q2, q3), cs):
        ch.basic_consume(q, c)
    assert wait_for(lambda: len(log) == 5, conn=conn)
    conn.process_data_events(time_limit=0.3)
    assert len(log) == 5
    assert all(len(c.items) <= 2 for c in cs)


def test_no_ack_deliveries_do_not_count_but_wait_while_the_channel_is_full(conn, names):
    # RabbitMQ's limiter: a no-ack delivery takes no room, but while acking consumers fill
    # the channel's limit every consumer on the channel waits, no-ack ones included.
    ch = conn.channel()
    q1 = _queue_with(ch, names, 1, "a")
    q2 = _queue_with(ch, names, 10, "b")
    ch.basic_qos(prefetch_count=1, global_qos=True)
    log = []
    acking, no_ack = Collector("a", log), Collector("b", log)
    ch.basic_consume(q2, no_ack, auto_ack=True)
    assert wait_for(lambda: len(no_ack.items) == 10, conn=conn)
    ch.basic_consume(q1, acking)  # the no-ack deliveries left the room free
    assert wait_for(lambda: len(acking.items) == 1, conn=conn)
    other = conn.channel()
    for i in range(5):
        other.basic_publish("", q2, b"late%d" % i)
    conn.process_data_events(time_limit=0.4)
    assert len(no_ack.items) == 10  # the channel is full
    ch.basic_ack(acking.items[0][0].delivery_tag)
    assert wait_for(lambda: len(no_ack.items) == 15, conn=conn)


def test_channel_limit_is_shared_fairly_between_queues(conn, names):
    ch = conn.channel()
    q1 = _queue_with(ch, names, 30, "a")
    q2 = _queue_with(ch, names, 30, "b")
    ch.basic_qos(prefetch_count=1, global_qos=True)
    log = []

    class Acker(Collector):
        def __call__(self, ch_, method, props, body):
            super().__call__(ch_, method, props, body)
            ch_.basic_ack(method.delivery_tag)

    a, b = Acker("a", log), Acker("b", log)
    ch.basic_consume(q1, a)
    ch.basic_consume(q2, b)
    assert wait_for(lambda: len(log) >= 20, conn=conn, timeout=10)
    first = [name for name, _ in log[:20]]
    # Neither queue may starve the other while both have messages.
    assert first.count("a") >= 5 and first.count("b") >= 5, first


def test_a_per_consumer_qos_lifts_the_channel_limit(conn, names):
    # RabbitMQ 3.10.8: basic.qos global=false resets the channel's global limit.
    ch = conn.channel()
    q = _queue_with(ch, names, 5, "a")
    ch.basic_qos(prefetch_count=1, global_qos=True)
    ch.basic_qos(prefetch_count=0)
    got = Collector("a", [])
    ch.basic_consume(q, got)
    assert wait_for(lambda: len(got.items) == 5, conn=conn)

"""Consumer priorities (x-priority on basic.consume): a queue delivers to its highest-priority
consumers while they have prefetch room, round-robin among equals, and to lower ones only
while every higher one is blocked."""

from conftest import wait_for


class Collector:
    def __init__(self):
        self.items = []

    def __call__(self, ch, method, props, body):
        self.items.append((method, body))

    @property
    def bodies(self):
        return [b for _, b in self.items]


def _consumer(conn, q, priority=None, prefetch=0):
    """A consumer on its own channel (prefetch is per consumer, set before consume)."""
    ch = conn.channel()
    if prefetch:
        ch.basic_qos(prefetch_count=prefetch)
    col = Collector()
    args = None if priority is None else {"x-priority": priority}
    ch.basic_consume(q, col, auto_ack=False, arguments=args)
    return ch, col


def _publish(conn, q, n, prefix="m"):
    ch = conn.channel()
    for i in range(1, n + 1):
        ch.basic_publish("", q, ("%s%d" % (prefix, i)).encode())
    return ch


def test_capability_is_advertised(conn):
    caps = conn._impl.server_capabilities
    assert caps.get("consumer_priorities") is True


def test_higher_priority_consumer_takes_everything_while_it_has_room(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    _, low = _consumer(conn, q)  # default priority 0
    _, high = _consumer(conn, q, priority=10)
    _, lower = _consumer(conn, q, priority=-5)
    _publish(conn, q, 20)
    assert wait_for(lambda: len(high.items) == 20, conn=conn)
    conn.process_data_events(time_limit=0.3)
    assert high.bodies == [b"m%d" % i for i in range(1, 21)]
    assert low.items == [] and lower.items == []


def test_lower_priority_gets_messages_only_while_higher_is_blocked(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    high_ch, high = _consumer(conn, q, priority=5, prefetch=2)
    _, low = _consumer(conn, q, priority=1)
    _publish(conn, q, 6)
    assert wait_for(lambda: len(high.items) + len(low.items) == 6, conn=conn)
    # The high consumer takes the first two, then its prefetch blocks it.
    assert high.bodies == [b"m1", b"m2"]
    assert low.bodies == [b"m3", b"m4", b"m5", b"m6"]
    # Room again: the high one is first in line for the next messages.
    high_ch.basic_ack(high.items[-1][0].delivery_tag, multiple=True)
    conn.process_data_events(time_limit=0.2)
    _publish(conn, q, 3, prefix="n")
    assert wait_for(lambda: len(high.items) + len(low.items) == 9, conn=conn)
    assert high.bodies[2:] == [b"n1", b"n2"]
    assert low.bodies[4:] == [b"n3"]


def test_equal_priorities_round_robin(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    _, a = _consumer(conn, q, priority=3)
    _, b = _consumer(conn, q, priority=3)
    _, low = _consumer(conn, q)
    _publish(conn, q, 10)
    assert wait_for(lambda: len(a.items) + len(b.items) == 10, conn=conn)
    conn.process_data_events(time_limit=0.2)
    assert len(a.items) == 5 and len(b.items) == 5
    assert low.items == []


def test_backlog_goes_to_highest_priority_consumer_that_joins(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    _publish(conn, q, 6)
    assert wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 6)
    _, low = _consumer(conn, q, priority=0, prefetch=1)
    assert wait_for(lambda: len(low.items) == 1, conn=conn)
    _, high = _consumer(conn, q, priority=7, prefetch=100)
    assert wait_for(lambda: len(high.items) == 5, conn=conn)
    conn.process_data_events(time_limit=0.2)
    assert low.bodies == [b"m1"]
    assert high.bodies == [b"m2", b"m3", b"m4", b"m5", b"m6"]

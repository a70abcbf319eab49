"""Dead-lettering history and cycles as RabbitMQ keeps them: one x-death entry per
(queue, reason), its count incremented and the entry moved to the front (its time stays the
first death's); x-first-death-* from the first death, x-last-death-* from the latest (3.13+);
a message is dropped only when it would reach a queue it already died in through a fully
automatic cycle (no rejection between), and delivered otherwise."""
import datetime
import time

import pika
import pytest

from conftest import get_one, wait_for


def _ready(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def _fanout(ch, names):
    x = names.exchange("dlx")
    ch.exchange_declare(x, "fanout")
    return x


def _rabbitmq_before_3_13(ch):
    """RabbitMQ before 3.13 (deaths v1) had no x-last-death-* headers and could reorder the
    x-death entries of a message dead-lettered through three queues, which hid some cycles."""
    props = ch.connection._impl.server_properties
    return props.get("product") == "RabbitMQ" and str(props.get("version")).startswith(
        ("3.8", "3.9", "3.10", "3.11", "3.12"))


def _retry_loop(ch, names, ttl_ms):
    """work --reject--> retry (TTL) --expired--> work: the usual retry set-up, through two
    fanout exchanges. Returns (work, retry, the exchange into retry)."""
    to_retry, to_work = _fanout(ch, names), _fanout(ch, names)
    work, retry = names.queue("work"), names.queue("retry")
    ch.queue_declare(work, arguments={"x-dead-letter-exchange": to_retry})
    ch.queue_declare(retry, arguments={"x-dead-letter-exchange": to_work, "x-message-ttl": ttl_ms})
    ch.queue_bind(work, to_work)
    ch.queue_bind(retry, to_retry)
    return work, retry, to_retry


def _entries(props):
    return [(d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"]]


def test_rejection_in_the_cycle_keeps_the_message_alive(ch, names):
    work, retry, _ = _retry_loop(ch, names, 100)
    ch.basic_publish("", work, b"job", pika.BasicProperties(headers={"app": "x"}))

    m, _, _ = get_one(ch, work, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    m, props, body = get_one(ch, work, auto_ack=False)
    assert body == b"job" and props.headers["app"] == "x"
    assert _entries(props) == [(retry, "expired", 1), (work, "rejected", 1)]
    first_time = {d["queue"]: d["time"] for d in props.headers["x-death"]}
    assert props.headers["x-first-death-queue"] == work
    assert props.headers["x-first-death-reason"] == "rejected"
    assert props.headers["x-first-death-exchange"] == ""

    time.sleep(1.1)  # x-death times have a one-second resolution
    ch.basic_reject(m.delivery_tag, requeue=False)
    m, props, body = get_one(ch, work, auto_ack=False)
    assert body == b"job"
    assert _entries(props) == [(retry, "expired", 2), (work, "rejected", 2)]
    # An entry keeps the time (and exchange, routing keys) of its first death.
    assert {d["queue"]: d["time"] for d in props.headers["x-death"]} == first_time
    assert props.headers["x-first-death-queue"] == work
    ch.basic_ack(m.delivery_tag)


def test_last_death_headers(ch, names):
    work, retry, to_retry = _retry_loop(ch, names, 50)
    ch.basic_publish("", work, b"job")
    m, _, _ = get_one(ch, work, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    m, props, _ = get_one(ch, work, auto_ack=False)
    h = props.headers
    if _rabbitmq_before_3_13(ch):
        pytest.skip("x-last-death-* headers appeared in RabbitMQ 3.13")
    assert (h["x-first-death-queue"], h["x-first-death-reason"], h["x-first-death-exchange"]) \
        == (work, "rejected", "")
    assert (h["x-last-death-queue"], h["x-last-death-reason"], h["x-last-death-exchange"]) \
        == (retry, "expired", to_retry)


def test_message_expiring_back_into_its_own_queue_is_dropped_at_once(ch, names):
    # q's expired messages go to a fanout exchange bound to q itself and to an observer.
    dlx = _fanout(ch, names)
    q, observer = names.queue(), names.queue("observer")
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 300})
    ch.queue_declare(observer)
    ch.queue_bind(q, dlx)
    ch.queue_bind(observer, dlx)
    ch.basic_publish("", q, b"loop")
    m, props, _ = get_one(ch, observer, timeout=5)
    assert m is not None and _entries(props) == [(q, "expired", 1)]
    # Going back into q would be a fully automatic cycle: that copy is dropped.
    assert _ready(ch, q) == 0


def test_automatic_cycle_after_an_old_rejection_is_dropped(ch, names):
    # src --reject--> a (TTL) --expired--> b (TTL) --expired--> a : only the a/b part is a
    # cycle, and it has no rejection in it.
    if _rabbitmq_before_3_13(ch):
        pytest.skip("RabbitMQ before 3.13 reorders this x-death history and loops forever")
    to_a, to_b = _fanout(ch, names), _fanout(ch, names)
    src, a, b = names.queue("src"), names.queue("a"), names.queue("b")
    ch.queue_declare(src, arguments={"x-dead-letter-exchange": to_a})
    ch.queue_declare(a, arguments={"x-dead-letter-exchange": to_b, "x-message-ttl": 100})
    ch.queue_declare(b, arguments={"x-dead-letter-exchange": to_a, "x-message-ttl": 100})
    ch.queue_bind(a, to_a)
    ch.queue_bind(b, to_b)
    ch.basic_publish("", src, b"x")
    m, _, _ = get_one(ch, src, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    # a -> b -> (a: cycle, dropped): after a few TTLs both are empty for good.
    time.sleep(0.6)
    assert wait_for(lambda: _ready(ch, a) == 0 and _ready(ch, b) == 0, timeout=15)
    time.sleep(0.3)
    assert _ready(ch, a) == 0 and _ready(ch, b) == 0


def test_a_legacy_history_is_dropped_and_a_complete_one_kept(ch, names):
    """The Java client's XDeathHeaderGrowth.handlingOfXDeathHeadersFromEarlierVersions: a
    history written one entry per death without counts (RabbitMQ before 3.5.5) is dropped
    when the message dies again, as RabbitMQ 3.13 drops it (3.10 merged it); a complete entry
    (count and time) is kept."""
    q, dlq = names.queue("legacy"), names.queue("legacy-dlq")
    x = _fanout(ch, names)
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": x, "x-message-ttl": 1})
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, x)
    legacy = [{"reason": "expired", "queue": old, "exchange": "fanout0",
               "routing-keys": ["routing-key-1"]} for old in ["q97"] * 12 + ["q98"] * 4]
    complete = {"reason": "rejected", "queue": "q99", "exchange": "fanout0",
                "routing-keys": ["routing-key-1"], "count": 3,
                "time": datetime.datetime(2024, 1, 1)}
    ch.basic_publish("", q, b"old",
                     pika.BasicProperties(headers={"x-death": legacy + [complete]}))
    _, props, _ = get_one(ch, dlq)
    counts = sorted((d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"])
    assert counts == sorted([(q, "expired", 1), ("q99", "rejected", 3)])


def test_without_a_dead_letter_routing_key_cc_keys_route_the_copy(ch, names):
    """RabbitMQ dead-letters with the message's routing keys, CC included, unless the queue
    names an x-dead-letter-routing-key; then with that key alone."""
    x = names.exchange("dlx-direct")
    ch.exchange_declare(x, "direct")
    plain, renamed = names.queue("plain"), names.queue("renamed")
    to_key, to_cc, to_new = names.queue("to-key"), names.queue("to-cc"), names.queue("to-new")
    ch.queue_declare(plain, arguments={"x-dead-letter-exchange": x, "x-message-ttl": 1})
    ch.queue_declare(renamed, arguments={"x-dead-letter-exchange": x, "x-message-ttl": 1,
                                         "x-dead-letter-routing-key": "new"})
    for queue, key in ((to_key, plain), (to_cc, "cc-key"), (to_new, "new")):
        ch.queue_declare(queue)
        ch.queue_bind(queue, x, key)
    cc = pika.BasicProperties(headers={"CC": ["cc-key"]})
    ch.basic_publish("", plain, b"a", cc)
    assert get_one(ch, to_key)[2] == b"a"
    assert get_one(ch, to_cc)[2] == b"a"
    ch.basic_publish("", renamed, b"b", cc)
    assert get_one(ch, to_new)[2] == b"b"
    assert get_one(ch, to_cc, timeout=0.5)[2] is None

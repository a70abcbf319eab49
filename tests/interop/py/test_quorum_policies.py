"""Policies and operator policies on quorum queues, as RabbitMQ 3.10.8 applies them: a
policy set or changed after the queue exists reaches its Raft group (a config change in its
log). `max-length`, `max-length-bytes`, `delivery-limit` and `message-ttl` take the lower of
argument and policy, `overflow` takes the policy's over the argument, the dead-letter target
the argument's over the policy's. Needs the HTTP API (WARREN_MGMT_URL); passes against
RabbitMQ 3.10.8 too."""
import pika
import pytest

from conftest import uname, wait_for
from test_policies import MGMT_URL, exact, policies  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(not MGMT_URL, reason="WARREN_MGMT_URL not set: no HTTP API")

QUORUM = {"x-queue-type": "quorum"}


def declare(ch, q, **args):
    ch.queue_declare(q, durable=True, arguments=dict(QUORUM, **args))


def ready(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def dead_letter_target(ch, names):
    dlx = names.exchange("dlx")
    ch.exchange_declare(dlx, "fanout")
    dlq = names.queue("dlq")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx)
    return dlx, dlq


def publish_confirmed(ch, q, bodies):
    """Publishes each body; returns 'ack' or 'nack' per body."""
    out = []
    for b in bodies:
        try:
            ch.basic_publish("", q, b)
            out.append("ack")
        except pika.exceptions.NackError:
            out.append("nack")
    return out


def test_max_length_policy_on_an_existing_queue_drops_into_the_policy_dlx(ch, names, policies):
    dlx, dlq = dead_letter_target(ch, names)
    q = names.queue()
    declare(ch, q)
    ch.confirm_delivery()
    publish_confirmed(ch, q, [b"0", b"1", b"2"])
    policies.set(uname("p"), exact(q), {"max-length": 1, "dead-letter-exchange": dlx})
    assert wait_for(lambda: ready(ch, q) == 1 and ready(ch, dlq) == 2, timeout=15)
    publish_confirmed(ch, q, [b"3", b"4"])
    assert wait_for(lambda: ready(ch, dlq) == 4, timeout=15)
    assert ready(ch, q) == 1
    _, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"4"
    dead = [ch.basic_get(dlq, auto_ack=True) for _ in range(4)]
    # (RabbitMQ 3.10.8 does not keep dead-letters in order.)
    assert sorted(b for _, _, b in dead) == [b"0", b"1", b"2", b"3"]
    assert dead[0][1].headers["x-death"][0]["reason"] == "maxlen"


def test_message_ttl_and_dead_letter_routing_key_from_a_policy(ch, names, policies):
    dlx = names.exchange("dlx")
    ch.exchange_declare(dlx, "direct")
    dlq = names.queue("dlq")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx, "by-policy")
    q = names.queue()
    declare(ch, q)
    policies.set(uname("p"), exact(q), {"message-ttl": 100, "dead-letter-exchange": dlx,
                                        "dead-letter-routing-key": "by-policy"})

    def expires_into_dlq():
        ch.basic_publish("", q, b"short-lived")
        return wait_for(lambda: ready(ch, dlq) >= 1, timeout=3)
    # The policy reaches the queue asynchronously: publish until a message expires by it.
    assert wait_for(expires_into_dlq, timeout=20)
    m, p, body = ch.basic_get(dlq, auto_ack=True)
    assert body == b"short-lived"
    assert m.routing_key == "by-policy"
    assert p.headers["x-death"][0]["reason"] == "expired"


def test_delivery_limit_policy_takes_the_lower_of_argument_and_policy(ch, names, policies):
    dlx, dlq = dead_letter_target(ch, names)
    q = names.queue()
    declare(ch, q, **{"x-delivery-limit": 1, "x-dead-letter-exchange": dlx})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"poison")
    policies.set(uname("p"), exact(q), {"delivery-limit": 3})
    # The argument's 1 stands: the first delivery and one redelivery, then dead-lettered.
    deliveries = 0
    while deliveries < 5:
        if not wait_for(lambda: ready(ch, q) == 1, timeout=3):
            break
        m, _, _ = ch.basic_get(q)
        deliveries += 1
        ch.basic_nack(m.delivery_tag, requeue=True)
    assert deliveries == 2
    assert wait_for(lambda: ready(ch, dlq) == 1, timeout=10)
    _, p, _ = ch.basic_get(dlq, auto_ack=True)
    assert p.headers["x-death"][0]["reason"] == "delivery_limit"

    q2 = names.queue()
    declare(ch, q2, **{"x-dead-letter-exchange": dlx})
    policies.set(uname("p"), exact(q2), {"delivery-limit": 0})

    def dead_lettered_at_once():
        ch.basic_publish("", q2, b"once")
        m, _, _ = ch.basic_get(q2)
        if m is not None:
            ch.basic_nack(m.delivery_tag, requeue=True)
        return wait_for(lambda: ready(ch, dlq) >= 1, timeout=2)
    assert wait_for(dead_lettered_at_once, timeout=20)


def test_overflow_policy_beats_the_argument(ch, names, policies):
    q = names.queue()
    declare(ch, q, **{"x-max-length": 1, "x-overflow": "drop-head"})
    ch.confirm_delivery()
    policies.set(uname("p"), exact(q), {"overflow": "reject-publish"})
    # Over the limit (2 > 1) publishes are refused once the policy is in; before, drop-head
    # keeps the queue at 1.
    assert wait_for(lambda: publish_confirmed(ch, q, [b"x"]) == ["nack"], timeout=20)
    assert ready(ch, q) == 2


def test_operator_policy_caps_and_clearing_lifts(ch, names, policies):
    q = names.queue()
    declare(ch, q, **{"x-max-length": 5})
    ch.confirm_delivery()
    name = uname("op")
    policies.set(name, exact(q), {"max-length": 2}, kind="operator-policies")
    assert wait_for(lambda: publish_confirmed(ch, q, [b"x"]) and ready(ch, q) == 2, timeout=20)
    publish_confirmed(ch, q, [b"a", b"b", b"c"])
    assert ready(ch, q) == 2
    policies.delete(name, kind="operator-policies")
    # Back to the argument's 5.
    assert wait_for(lambda: publish_confirmed(ch, q, [b"y"]) and ready(ch, q) == 5, timeout=20)
    publish_confirmed(ch, q, [b"z"])
    assert ready(ch, q) == 5

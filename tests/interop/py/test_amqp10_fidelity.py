"""AMQP 1.0 fidelity, as RabbitMQ 4 behaves (checked against its source, rabbitmq-server
deps/rabbit/src mc_amqp.erl, mc.erl, rabbit_variable_queue.erl, rabbit_amqqueue_process.erl:
RabbitMQ 3.10, the broker on this machine, has no native AMQP 1.0, so these run against
Warren only), with python-qpid-proton and pika:

- the header's delivery-count counts the failed deliveries of each queue's copy of a message
  (modified with delivery-failed, rejected, unsettled when the link goes), not of the message
  shared by every queue it was routed to, and survives a restart of a durable queue;
- a message published over AMQP 1.0 and dead-lettered (rejected, expired, max-length,
  delivery-limit) keeps its sections, and an AMQP 1.0 consumer reads its history as the
  x-opt-deaths, x-first-death-* and x-last-death-* message annotations (a 0-9-1 consumer
  still gets the x-death header);
- a message without a header section is not durable (the AMQP 1.0 default, RabbitMQ 4.2
  and later; 4.0 and 4.1 took it as durable), unless its x-basic-delivery-mode annotation
  is ubyte 2: it does not survive a restart of a durable queue, a durable one does.

The cases run against classic and quorum queues (`queue_type`): a quorum queue keeps the
sections in its Raft log, and its header delivery-count is the returns its group counted
(RabbitMQ 4's quorum queue maps its own count into the header), plus a rejection that
dead-letters the message.
"""
import pika  # noqa: F401 (the `ch` fixture's client)
import pytest
from proton import Delivery, Message, symbol, ubyte

from conftest import connect, get_one
from own_broker import Broker, needs_warren_bin
from test_amqp10 import (addr_queue, amqp10, c10, data,  # noqa: F401
                         eventually, published_sections, pump, ready, receive_raw, send_raw)


def fail(receiver):
    """Settles the last received delivery as modified with delivery-failed (requeued)."""
    receiver.fetcher.unsettled[0].local.failed = True
    receiver.settle(Delivery.MODIFIED)


@pytest.fixture(params=["classic", "quorum"])
def queue_type(request):
    return request.param


def declare(ch, queue, queue_type, arguments=None, durable=False):
    """Declares `queue` of `queue_type` (a quorum queue is always durable)."""
    arguments = dict(arguments or {})
    if queue_type == "quorum":
        arguments["x-queue-type"] = "quorum"
    ch.queue_declare(queue, durable=durable or queue_type == "quorum", arguments=arguments)


def dead_letter_pair_of(ch, names, queue_type):
    """A queue dead-lettering into a second one, both of `queue_type`."""
    dlq, q = names.queue("dlq"), names.queue()
    declare(ch, dlq, queue_type)
    declare(ch, q, queue_type, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    return q, dlq


def decoded(payload):
    m = Message()
    m.decode(payload)
    return m


# ---- delivery-count ------------------------------------------------------------------------

def test_delivery_count_is_kept_per_queue(names, ch, c10, queue_type):
    x, q1, q2 = names.exchange(), names.queue(), names.queue()
    ch.exchange_declare(x, "fanout")
    for q in (q1, q2):
        declare(ch, q, queue_type)
        ch.queue_bind(q, x)
    c10.create_sender("/exchanges/" + x).send(data(b"both"))
    r1 = c10.create_receiver(addr_queue(q1))
    assert r1.receive(timeout=10).delivery_count == 0
    fail(r1)
    assert r1.receive(timeout=10).delivery_count == 1
    fail(r1)
    third = r1.receive(timeout=10)
    assert third.delivery_count == 2 and not third.first_acquirer
    r1.accept()
    # The copy in the other queue never failed.
    r2 = c10.create_receiver(addr_queue(q2))
    other = r2.receive(timeout=10)
    assert other.delivery_count == 0 and other.first_acquirer
    r2.accept()


def test_a_link_that_goes_with_the_delivery_unsettled_counts_a_failed_delivery(
        names, ch, c10, queue_type):
    q = names.queue()
    declare(ch, q, queue_type)
    c10.create_sender(addr_queue(q)).send(data(b"held"))
    receiver = c10.create_receiver(addr_queue(q))
    assert receiver.receive(timeout=10).delivery_count == 0
    receiver.close()  # RabbitMQ 4's classic queue requeues with delivery-failed
    again = c10.create_receiver(addr_queue(q))
    m = again.receive(timeout=10)
    assert bytes(m.body) == b"held" and m.delivery_count == 1 and not m.first_acquirer
    again.accept()


# ---- dead-lettering keeps the AMQP 1.0 form ---------------------------------------------

def deaths(m):
    return [dict(d) for d in m.annotations[symbol("x-opt-deaths")]]


def test_a_rejected_10_message_is_dead_lettered_as_published(names, ch, c10, queue_type):
    q, dlq = dead_letter_pair_of(ch, names, queue_type)
    payload, bare_and_footer = published_sections()
    send_raw(c10, addr_queue(q), payload)
    receiver = c10.create_receiver(addr_queue(q))
    receiver.receive(timeout=10)
    fail(receiver)
    receiver.receive(timeout=10)
    receiver.reject()  # a failed delivery too: the copy brings the count along
    assert eventually(c10, lambda: ready(ch, dlq) == 1)
    received = receive_raw(c10, addr_queue(dlq))
    # Bare message and footer byte for byte; sections no 0-9-1 field holds are still there.
    assert received.endswith(bare_and_footer)
    m = decoded(received)
    assert m.subject == "the subject" and m.group_sequence == 3
    assert m.body == {"value": [1, "two", 3.5]}
    assert m.durable and m.priority == 6
    assert not m.first_acquirer and m.delivery_count == 2
    ann = m.annotations
    assert ann[symbol("custom")] == "kept"
    assert ann[symbol("x-exchange")] == "" and ann[symbol("x-routing-key")] == dlq
    assert ann[symbol("x-first-death-queue")] == q
    assert ann[symbol("x-first-death-reason")] == "rejected"
    assert ann[symbol("x-first-death-exchange")] == ""
    assert ann[symbol("x-last-death-queue")] == q
    assert ann[symbol("x-last-death-reason")] == "rejected"
    assert symbol("x-death") not in ann
    [death] = deaths(m)
    assert death[symbol("queue")] == q and death[symbol("reason")] == symbol("rejected")
    assert death[symbol("count")] == 1 and death[symbol("exchange")] == ""
    assert list(death[symbol("routing-keys")]) == [q]
    assert death[symbol("first-time")] > 1_600_000_000 and death[symbol("last-time")] > 0

    # A 0-9-1 consumer of the dead-letter queue gets the x-death header, as before.
    send_raw(c10, addr_queue(q), payload)
    receiver.receive(timeout=10)
    receiver.reject()
    assert eventually(c10, lambda: ready(ch, dlq) == 1)
    _, props, _ = get_one(ch, dlq, timeout=10)
    [death] = props.headers["x-death"]
    assert death["reason"] == "rejected" and death["queue"] == q and death["count"] == 1
    assert props.headers["x-first-death-queue"] == q
    assert "x-opt-deaths" not in props.headers
    assert props.headers["color"] in ("green", b"green")


def test_a_client_republishes_a_dead_lettered_message_with_its_deaths(names, ch, c10, queue_type):
    """x-opt-deaths is an array of maps, which serde_amqp 0.18 cannot decode: such a
    message was refused when a client sent it back (a shovel, a retry loop)."""
    q, dlq = dead_letter_pair_of(ch, names, queue_type)
    payload, bare_and_footer = published_sections()
    send_raw(c10, addr_queue(q), payload)
    receiver = c10.create_receiver(addr_queue(q))
    receiver.receive(timeout=10)
    receiver.reject()
    assert eventually(c10, lambda: ready(ch, dlq) == 1)
    received = receive_raw(c10, addr_queue(dlq))
    assert deaths(decoded(received))
    again = names.queue()
    declare(ch, again, queue_type)
    send_raw(c10, addr_queue(again), received)  # header, annotations and all
    republished = receive_raw(c10, addr_queue(again))
    assert republished.endswith(bare_and_footer)
    m = decoded(republished)
    [death] = deaths(m)
    assert death[symbol("queue")] == q and death[symbol("reason")] == symbol("rejected")
    assert death[symbol("count")] == 1
    # The 0-9-1 view carries the annotation as a header (an array of tables).
    send_raw(c10, addr_queue(again), received)
    _, props, _ = get_one(ch, again, timeout=10)
    [death] = props.headers["x-opt-deaths"]
    assert death["queue"] in (q, q.encode()) and death["count"] == 1


def test_expired_and_overflowing_10_messages_carry_their_deaths(names, ch, c10, queue_type):
    q, dlq = dead_letter_pair_of(ch, names, queue_type)
    payload, bare_and_footer = published_sections()
    # The same sections with a header ttl of 50 ms (proton writes it from `ttl` in seconds).
    header = Message(durable=True, priority=6, ttl=0.05).encode()
    header = header[:header.index(b"\x00\x53\x73")]
    send_raw(c10, addr_queue(q), header + payload[payload.index(b"\x00\x53\x71"):])
    assert eventually(c10, lambda: ready(ch, dlq) == 1)
    m = decoded(receive_raw(c10, addr_queue(dlq)))
    [death] = deaths(m)
    assert death[symbol("reason")] == symbol("expired")
    assert death[symbol("ttl")] == 50  # the message's own ttl
    assert m.ttl is None or m.ttl == 0  # it does not follow the copy
    assert m.subject == "the subject"

    full, full_dlq = names.queue(), names.queue("dlq")
    declare(ch, full_dlq, queue_type)
    declare(ch, full, queue_type, {"x-max-length": 1, "x-dead-letter-exchange": "",
                                   "x-dead-letter-routing-key": full_dlq})
    send_raw(c10, addr_queue(full), payload)
    send_raw(c10, addr_queue(full), payload)  # drops the first from the head
    assert eventually(c10, lambda: ready(ch, full_dlq) == 1)
    received = receive_raw(c10, addr_queue(full_dlq))
    assert received.endswith(bare_and_footer)
    m = decoded(received)
    [death] = deaths(m)
    assert death[symbol("reason")] == symbol("maxlen") and death[symbol("queue")] == full
    assert m.annotations[symbol("x-last-death-reason")] == "maxlen"


def test_a_message_over_the_delivery_limit_reaches_10_with_its_deaths(names, ch, c10):
    q, dlq = names.queue(), names.queue("dlq")
    ch.queue_declare(dlq)
    ch.queue_declare(q, durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 0,
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    try:
        c10.create_sender(addr_queue(q)).send(data(b"limited"))
        receiver = c10.create_receiver(addr_queue(q))
        assert bytes(receiver.receive(timeout=10).body) == b"limited"
        receiver.release()  # a return over the limit of 0: dead-lettered
        assert eventually(c10, lambda: ready(ch, dlq) == 1, timeout=20)
        m = decoded(receive_raw(c10, addr_queue(dlq)))
        [death] = deaths(m)
        assert death[symbol("reason")] == symbol("delivery_limit")
        assert m.annotations[symbol("x-first-death-reason")] == "delivery_limit"
        assert not m.first_acquirer
    finally:
        ch.queue_delete(q)


# ---- across a restart ----------------------------------------------------------------------

def header_less(body, annotations=None):
    """A data-section message without a header section (proton always writes one)."""
    payload = Message(body=body, inferred=True, annotations=annotations).encode()
    assert payload.startswith(b"\x00\x53\x70")
    return payload[payload.index(b"\x00\x53", 3):]


@needs_warren_bin
def test_counts_deaths_and_durability_survive_a_crash(tmp_path, queue_type):
    data_dir = str(tmp_path)
    payload, bare_and_footer = published_sections()
    b = Broker(data_dir)
    try:
        c = connect(b.url)
        ch = c.channel()
        ch.exchange_declare("fid-x", "fanout", durable=True)
        for q in ("fid-1", "fid-2"):
            declare(ch, q, queue_type, durable=True)
            ch.queue_bind(q, "fid-x")
        declare(ch, "fid-dlq", queue_type, durable=True)
        declare(ch, "fid-q", queue_type, {
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "fid-dlq"}, durable=True)
        # Classic: a quorum queue keeps every message, durable or not.
        ch.queue_declare("fid-plain", durable=True)
        c10 = amqp10(port=b.port)
        c10.create_sender("/exchanges/fid-x").send(
            Message(body=b"counted", durable=True, inferred=True))
        r1 = c10.create_receiver("/queues/fid-1")
        for _ in range(2):
            r1.receive(timeout=10)
            fail(r1)
        assert r1.receive(timeout=10).delivery_count == 2
        r1.close()  # a third failed delivery
        # Dead-lettered with one failed delivery before the reject: count 2 in the copy.
        send_raw(c10, "/queues/fid-q", payload)
        rq = c10.create_receiver("/queues/fid-q")
        rq.receive(timeout=10)
        fail(rq)
        rq.receive(timeout=10)
        rq.reject()
        pump(c10, 0.5)
        # Without a header: not durable; with x-basic-delivery-mode 2 or durable: kept.
        send_raw(c10, "/queues/fid-plain", header_less(b"no header"))
        send_raw(c10, "/queues/fid-plain",
                 header_less(b"annotated", {symbol("x-basic-delivery-mode"): ubyte(2)}))
        # Accepted means on disk, and so is everything written before it (one log).
        c10.create_sender("/queues/fid-plain").send(
            Message(body=b"durable", durable=True, inferred=True))
        # A quorum queue's returns and dead-letters are applied once committed (on disk):
        # wait for them to show before the crash.
        assert eventually(c10, lambda: ready(ch, "fid-1") == 1 and ready(ch, "fid-dlq") == 1)
        c.close()
        b.proc.kill()  # no shutdown: only what was fsync'd is there
        b.proc.wait(10)
    finally:
        b.stop()
    b = Broker(data_dir)
    try:
        c10 = amqp10(port=b.port)
        r1 = c10.create_receiver("/queues/fid-1")
        m = r1.receive(timeout=10)
        assert bytes(m.body) == b"counted" and m.delivery_count == 3
        r1.accept()
        r2 = c10.create_receiver("/queues/fid-2")
        m = r2.receive(timeout=10)
        # Recovered: maybe delivered before (first-acquirer false), but never failed here.
        assert bytes(m.body) == b"counted" and m.delivery_count == 0
        r2.accept()
        received = receive_raw(c10, "/queues/fid-dlq")
        assert received.endswith(bare_and_footer)
        m = decoded(received)
        assert m.delivery_count == 2
        [death] = deaths(m)
        assert death[symbol("queue")] == "fid-q" and death[symbol("reason")] == symbol("rejected")
        c = connect(b.url)
        ch = c.channel()
        bodies = []
        while True:
            method, props, body = ch.basic_get("fid-plain", auto_ack=True)
            if method is None:
                break
            bodies.append(body)
            assert props.delivery_mode == 2
        assert bodies == [b"annotated", b"durable"]
        c.close()
        c10.close()
    finally:
        b.stop()


def test_a_091_channel_closed_with_the_message_unacked_counts_a_failed_delivery(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"unacked")
    c = connect()
    other = c.channel()
    method, _, body = other.basic_get(q)
    assert body == b"unacked"
    other.close()  # requeued unacked: counted
    again = ch.basic_get(q)  # a 0-9-1 nack with requeue is not counted
    ch.basic_nack(again[0].delivery_tag, requeue=True)
    c.close()
    receiver = c10.create_receiver(addr_queue(q))
    m = receiver.receive(timeout=10)
    assert bytes(m.body) == b"unacked" and m.delivery_count == 1
    receiver.accept()

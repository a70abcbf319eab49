"""AMQP 1.0 on the AMQP port, with python-qpid-proton (and pika for the 0-9-1 side): RabbitMQ
4's v2 addresses, link credit and drain, the four outcomes a consumer can give, durable
messages accepted only once stored, messages crossing between the protocols with their
properties, and the refusals (bad addresses, permissions, wrong password).

Runs against the broker at AMQP_URL; the crash test starts a broker of its own (WARREN_BIN),
the permission tests need the HTTP API (WARREN_MGMT_URL), as test_access.py.
"""
import time
import urllib.parse
import uuid

import pika
import pytest
from proton import ConnectionException, Delivery, Message, symbol, ulong
from proton.utils import BlockingConnection, LinkDetached, SendException

from conftest import AMQP_URL, connect, get_one, wait_for
from own_broker import Broker, needs_warren_bin
from test_access import Tenant, api, needs_api, q, url_for
from test_tls import certs, started  # noqa: F401 (fixtures)

_url = urllib.parse.urlparse(AMQP_URL)
HOST, PORT = _url.hostname, _url.port or 5672
USER = urllib.parse.unquote(_url.username or "guest")
PASSWORD = urllib.parse.unquote(_url.password or "guest")


def amqp10(user=USER, password=PASSWORD, port=PORT, vhost=None):
    """A blocking AMQP 1.0 connection (SASL PLAIN)."""
    kwargs = {"virtual_host": "vhost:" + vhost} if vhost else {}
    return BlockingConnection("amqp://%s:%d" % (HOST, port), timeout=10, user=user,
                              password=password, allowed_mechs="PLAIN", **kwargs)


@pytest.fixture
def c10():
    c = amqp10()
    yield c
    try:
        c.close()
    except Exception:
        pass


def pump(c, seconds=0.1):
    """Lets the blocking proton connection do its I/O (settlements are sent lazily)."""
    c.container.timeout = 0.02
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        c.container.process()


def eventually(c, pred, timeout=10):
    """Polls `pred` while the proton connection `c` does its I/O."""
    return wait_for(lambda: (pump(c, 0.05), pred())[1], timeout=timeout)


def data(body):
    """A message whose body is one data section (proton sends bytes as amqp-value
    otherwise), which reaches 0-9-1 as the plain body."""
    return Message(body=body, inferred=True)


def addr_queue(q):
    return "/queues/" + urllib.parse.quote(q, safe="")


def ready(ch, queue):
    return ch.queue_declare(queue, passive=True).method.message_count


def receive_all(receiver, n, timeout=10):
    out = []
    for _ in range(n):
        m = receiver.receive(timeout=timeout)
        receiver.accept()
        out.append(m)
    return out


# ---- send and receive ---------------------------------------------------------------------

def test_send_and_receive_through_a_queue(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    sender = c10.create_sender(addr_queue(q))
    for i in range(20):
        sender.send(Message(body="m%d" % i))  # waits for accepted
    assert wait_for(lambda: ready(ch, q) == 20, timeout=10)
    receiver = c10.create_receiver(addr_queue(q), credit=10)
    got = [m.body for m in receive_all(receiver, 20)]
    assert got == ["m%d" % i for i in range(20)]
    assert wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 0
                    and ch.queue_declare(q, passive=True).method.consumer_count == 1, timeout=10)


def test_large_messages_span_several_frames(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    body = bytes(range(256)) * 2000  # 512 KB, several max-size frames each way
    c10.create_sender(addr_queue(q)).send(data(body))
    m, _, got = get_one(ch, q, timeout=10)
    assert got == body
    ch.basic_publish("", q, body)
    receiver = c10.create_receiver(addr_queue(q))
    assert bytes(receiver.receive(timeout=10).body) == body
    receiver.accept()


def test_exchange_targets_route_by_key(names, ch, c10):
    x = names.exchange()
    ch.exchange_declare(x, "direct")
    qa, qb, qf = names.queue(), names.queue(), names.queue()
    for q, key in ((qa, "a/1"), (qb, "b")):
        ch.queue_declare(q)
        ch.queue_bind(q, x, key)
    fan = names.exchange()
    ch.exchange_declare(fan, "fanout")
    ch.queue_declare(qf)
    ch.queue_bind(qf, fan, "")
    # Percent-encoded routing key with a slash in it.
    c10.create_sender("/exchanges/%s/a%%2F1" % x).send(data(b"to a"))
    c10.create_sender("/exchanges/%s/b" % x).send(data(b"to b"))
    c10.create_sender("/exchanges/%s" % fan).send(data(b"fanned"))
    assert get_one(ch, qa)[2] == b"to a"
    assert get_one(ch, qb)[2] == b"to b"
    assert get_one(ch, qf)[2] == b"fanned"
    # Nothing bound for this key: released, as RabbitMQ 4 settles unroutable messages.
    with pytest.raises(SendException) as e:
        c10.create_sender("/exchanges/%s/nobody" % x).send(Message(body="lost"))
    assert e.value.state == Delivery.RELEASED


def test_null_target_routes_by_to(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    sender = c10.create_sender(None)
    sender.send(Message(body=b"via to", address=addr_queue(q), inferred=True))
    with pytest.raises(SendException) as e:  # not bound yet: unroutable
        sender.send(Message(body=b"via exchange", address="/exchanges/amq.direct/" + q))
    assert e.value.state == Delivery.RELEASED
    ch.queue_bind(q, "amq.direct", q)
    sender.send(Message(body=b"via exchange", address="/exchanges/amq.direct/" + q,
                        inferred=True))
    assert get_one(ch, q)[2] == b"via to"
    assert get_one(ch, q)[2] == b"via exchange"
    # A message without `to`, or with an address that is not v2, is rejected; the link stays.
    for bad in (None, "/queue/" + q, "/exchanges/no-such-exchange-%s/k" % uuid.uuid4().hex):
        with pytest.raises(SendException) as e:
            sender.send(Message(body="bad", address=bad))
        assert e.value.state == Delivery.REJECTED
    sender.send(Message(body=b"still open", address=addr_queue(q), inferred=True))
    assert get_one(ch, q)[2] == b"still open"


# ---- credit ---------------------------------------------------------------------------------

def test_link_credit_bounds_deliveries_and_drain_returns_the_rest(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    for i in range(5):
        ch.basic_publish("", q, b"m%d" % i)
    assert wait_for(lambda: ready(ch, q) == 5, timeout=10)
    receiver = c10.create_receiver(addr_queue(q), credit=0)
    incoming = receiver.fetcher.incoming
    # No credit, nothing sent.
    pump(c10, 0.5)
    assert len(incoming) == 0
    receiver.link.flow(2)
    c10.wait(lambda: len(incoming) == 2, timeout=10)
    # Exactly the credit: three stay in the queue.
    assert wait_for(lambda: ready(ch, q) == 3, timeout=10)
    pump(c10, 0.3)
    assert len(incoming) == 2
    # Drain with more credit than messages: the rest arrive, then the credit comes back.
    receiver.link.drain(10)
    c10.wait(lambda: len(incoming) == 5 and receiver.link.credit == 0, timeout=10)
    assert [bytes(m.body) for m, _ in incoming] == [b"m%d" % i for i in range(5)]
    for _ in range(5):
        receiver.receive(timeout=5)
        receiver.accept()
    assert wait_for(lambda: ready(ch, q) == 0, timeout=10)


# ---- outcomes ------------------------------------------------------------------------------

def dead_letter_pair(ch, names):
    dlq, q = names.queue("dlq"), names.queue()
    ch.queue_declare(dlq)
    ch.queue_declare(q, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    return q, dlq


def test_rejected_dead_letters(names, ch, c10):
    q, dlq = dead_letter_pair(ch, names)
    ch.basic_publish("", q, b"bad")
    receiver = c10.create_receiver(addr_queue(q))
    assert bytes(receiver.receive(timeout=10).body) == b"bad"
    receiver.reject()
    assert eventually(c10, lambda: ready(ch, dlq) == 1)
    m, props, body = get_one(ch, dlq, timeout=10)
    assert body == b"bad"
    assert props.headers["x-death"][0]["reason"] == "rejected"
    assert ready(ch, q) == 0


def test_released_and_modified_requeue(names, ch, c10):
    q, dlq = dead_letter_pair(ch, names)
    ch.basic_publish("", q, b"again")
    receiver = c10.create_receiver(addr_queue(q))
    first = receiver.receive(timeout=10)
    assert first.first_acquirer
    assert first.delivery_count == 0
    receiver.release(delivered=False)  # released
    second = receiver.receive(timeout=10)
    assert bytes(second.body) == b"again"
    assert not second.first_acquirer  # handed out before
    assert second.delivery_count == 0  # released is not a failed delivery
    receiver.release(delivered=True)  # modified (proton leaves delivery-failed unset)
    third = receiver.receive(timeout=10)
    assert bytes(third.body) == b"again"
    assert not third.first_acquirer and third.delivery_count == 0
    receiver.fetcher.unsettled[0].local.failed = True
    receiver.settle(Delivery.MODIFIED)  # modified, delivery-failed: counted
    fourth = receiver.receive(timeout=10)
    assert bytes(fourth.body) == b"again"
    assert not fourth.first_acquirer and fourth.delivery_count == 1
    # modified with undeliverable-here: dead-lettered, as RabbitMQ 4 does for classic queues.
    receiver.fetcher.unsettled[0].local.undeliverable = True
    receiver.settle(Delivery.MODIFIED)
    assert eventually(c10, lambda: ready(ch, dlq) == 1)
    assert get_one(ch, dlq, timeout=10)[2] == b"again"
    assert ready(ch, q) == 0


def test_detaching_requeues_unsettled(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"held")
    receiver = c10.create_receiver(addr_queue(q))
    assert bytes(receiver.receive(timeout=10).body) == b"held"
    receiver.close()
    m, _, body = get_one(ch, q, timeout=10)
    assert body == b"held" and m.redelivered


def test_presettled_receiver_takes_messages_off_the_queue(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    sender = c10.create_sender(addr_queue(q))
    for i in range(3):
        sender.send(Message(body="m%d" % i))  # amqp-value strings, kept as they are
    from proton.reactor import AtMostOnce
    receiver = c10.create_receiver(addr_queue(q), credit=10, options=AtMostOnce())
    assert [receiver.receive(timeout=10).body for _ in range(3)] == ["m0", "m1", "m2"]
    receiver.close()
    assert wait_for(lambda: ready(ch, q) == 0, timeout=10)


# ---- durability ----------------------------------------------------------------------------

@needs_warren_bin
def test_an_accepted_durable_message_survives_a_crash(tmp_path):
    data = str(tmp_path)
    b = Broker(data)
    try:
        c = connect(b.url)
        c.channel().queue_declare("durable-10", durable=True)
        c.close()
        c10 = amqp10(port=b.port)
        sender = c10.create_sender("/queues/durable-10")
        for i in range(50):
            # Accepted means on disk.
            sender.send(Message(body=b"keep %d" % i, durable=True, inferred=True))
        b.proc.kill()  # no shutdown: only what was fsync'd is there
        b.proc.wait(10)
    finally:
        b.stop()
    b = Broker(data)
    try:
        c = connect(b.url)
        ch = c.channel()
        assert ready(ch, "durable-10") == 50
        m, props, body = get_one(ch, "durable-10")
        assert body == b"keep 0" and props.delivery_mode == 2
        c.close()
    finally:
        b.stop()


# ---- AMQP 1.0 to AMQP 1.0: the message as published ---------------------------------------

# A footer section (proton has no API for footers): {sig: 9}.
FOOTER = bytes.fromhex("005378" "c1" "08" "02" "a303736967" "5409")


def published_sections():
    """An AMQP 1.0 message with what no 0-9-1 field holds, as raw sections: (the whole
    payload, its bare message and footer)."""
    bare = Message(
        address="/queues/somewhere", subject="the subject", reply_to_group_id="rg-1",
        group_sequence=3, expiry_time=1900000000, id=ulong(12345),
        correlation_id=uuid.UUID("550e8400-e29b-41d4-a716-446655440000"),
        creation_time=1700000000.5, content_type="application/x-thing",
        properties={"color": "green", "n": 4}, body={"value": [1, "two", 3.5]},
    ).encode()[4:]  # proton always writes an (here empty) header first: 00 53 70 45
    leading = Message(
        durable=True, priority=6, instructions={symbol("x-opt-hop"): 1},
        annotations={symbol("custom"): "kept", symbol("x-opt-y"): 2}).encode()
    leading = leading[:leading.index(b"\x00\x53\x73")]  # header, delivery and message annotations
    return leading + bare + FOOTER, bare + FOOTER


class RawReceiver:
    """A receiving link's handler that keeps each delivery's bytes undecoded."""

    def __init__(self):
        self.payloads = []

    def on_delivery(self, event):
        d = event.delivery
        if d.readable and not d.partial:
            self.payloads.append(event.link.recv(d.pending))
            event.link.advance()
            d.update(Delivery.ACCEPTED)
            d.settle()


def send_raw(c, address, payload):
    """Sends pre-encoded sections on a new link and waits for the outcome."""
    sender = c.create_sender(address)
    link = sender.link
    c.wait(lambda: link.credit > 0, timeout=10, msg="no credit")
    d = link.delivery(b"raw-1")
    link.send(payload)
    link.advance()
    c.wait(lambda: d.remote_state != 0, timeout=10, msg="no outcome")
    assert d.remote_state == Delivery.ACCEPTED
    d.settle()
    sender.close()


def receive_raw(c, address):
    handler = RawReceiver()
    receiver = c.create_receiver(address, credit=1, handler=handler)  # open while referenced
    c.wait(lambda: handler.payloads, timeout=10, msg="nothing received")
    pump(c)  # lets the accepted disposition go out
    receiver.close()
    return bytes(handler.payloads[0])


def assert_kept(received, bare_and_footer, queue, first_acquirer=True):
    # The bare message and the footer, byte for byte (RabbitMQ 4 keeps them unaltered).
    assert received.endswith(bare_and_footer)
    m = Message()
    m.decode(received)
    assert m.address == "/queues/somewhere" and m.subject == "the subject"
    assert m.reply_to_group_id == "rg-1" and m.group_sequence == 3
    assert m.expiry_time == 1900000000 and m.id == 12345
    assert m.body == {"value": [1, "two", 3.5]}
    assert m.properties == {"color": "green", "n": 4}
    assert m.durable and m.priority == 6 and m.first_acquirer == first_acquirer
    # Message annotations kept, x-exchange and x-routing-key added; delivery annotations
    # are hop-by-hop and not forwarded.
    ann = m.annotations
    assert ann[symbol("custom")] == "kept" and ann[symbol("x-opt-y")] == 2
    assert ann[symbol("x-exchange")] == "" and ann[symbol("x-routing-key")] == queue
    assert not m.instructions


def test_10_to_10_keeps_the_message_as_published(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    payload, bare_and_footer = published_sections()
    send_raw(c10, addr_queue(q), payload)
    assert_kept(receive_raw(c10, addr_queue(q)), bare_and_footer, q)
    # The 0-9-1 view of the same message is unchanged: application properties as headers.
    send_raw(c10, addr_queue(q), payload)
    m, props, body = get_one(ch, q, timeout=10)
    assert props.headers["color"] in ("green", b"green") and props.headers["n"] == 4
    assert props.type == "amqp-1.0" and props.delivery_mode == 2 and props.priority == 6
    assert props.correlation_id == "urn:uuid:550e8400-e29b-41d4-a716-446655440000"


def test_10_to_10_headers_exchange_matches_application_properties(names, ch, c10):
    x, q = names.exchange(), names.queue()
    ch.exchange_declare(x, "headers")
    ch.queue_declare(q)
    ch.queue_bind(q, x, arguments={"x-match": "all", "color": "green"})
    payload, bare_and_footer = published_sections()
    send_raw(c10, "/exchanges/" + x, payload)
    received = receive_raw(c10, addr_queue(q))
    assert received.endswith(bare_and_footer)


def test_10_message_expires_by_its_ttl_and_is_dead_lettered(names, ch, c10):
    q, dlq = dead_letter_pair(ch, names)
    payload, _ = published_sections()
    # The same sections with a header ttl of 50 ms (proton writes it from `ttl` in seconds).
    header = Message(durable=True, priority=6, ttl=0.05).encode()
    header = header[:header.index(b"\x00\x53\x73")]
    send_raw(c10, addr_queue(q), header + payload[payload.index(b"\x00\x53\x71"):])
    assert eventually(c10, lambda: ready(ch, dlq) == 1)
    m, props, body = get_one(ch, dlq, timeout=10)
    assert props.headers["x-death"][0]["reason"] == "expired"
    assert props.headers["color"] in ("green", b"green")
    assert ready(ch, q) == 0


@needs_warren_bin
def test_10_to_10_message_is_kept_as_published_across_a_restart(tmp_path):
    data = str(tmp_path)
    payload, bare_and_footer = published_sections()
    b = Broker(data)
    try:
        c = connect(b.url)
        c.channel().queue_declare("kept-10", durable=True)
        c.close()
        c10 = amqp10(port=b.port)
        send_raw(c10, "/queues/kept-10", payload)  # accepted: on disk
        b.proc.kill()
        b.proc.wait(10)
    finally:
        b.stop()
    b = Broker(data)
    try:
        c10 = amqp10(port=b.port)
        # (Recovered messages count as delivered before, as for 0-9-1's redelivered.)
        assert_kept(receive_raw(c10, "/queues/kept-10"), bare_and_footer, "kept-10",
                    first_acquirer=False)
        c10.close()
    finally:
        b.stop()


# ---- across protocols ----------------------------------------------------------------------

def test_091_publish_to_10_consume_maps_properties(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"from 0-9-1", pika.BasicProperties(
        content_type="text/plain", content_encoding="utf-8", delivery_mode=2, priority=3,
        correlation_id="corr-1", reply_to="replies", expiration="60000",
        message_id="urn:uuid:550e8400-e29b-41d4-a716-446655440000", timestamp=1700000000,
        type="order.created", app_id="shop", user_id=USER,
        headers={"color": "red", "n": 7, "x-trace": "t1"}))
    receiver = c10.create_receiver(addr_queue(q))
    m = receiver.receive(timeout=10)
    receiver.accept()
    assert bytes(m.body) == b"from 0-9-1"  # a data section
    assert m.content_type == "text/plain" and m.content_encoding == "utf-8"
    assert m.durable and m.priority == 3 and m.ttl == 60
    # A 0-9-1 reply_to names a queue; a 1.0 replier gets its address (RabbitMQ 4's mapping).
    assert m.correlation_id == "corr-1" and m.reply_to == "/queues/replies"
    assert m.id == uuid.UUID("550e8400-e29b-41d4-a716-446655440000")
    assert m.creation_time == 1700000000
    assert m.group_id == "shop" and m.user_id == USER.encode()
    assert m.properties == {"color": "red", "n": 7}
    ann = m.annotations
    assert ann[symbol("x-basic-type")] == "order.created"
    assert ann[symbol("x-trace")] == "t1"
    assert ann[symbol("x-routing-key")] == q and ann[symbol("x-exchange")] == ""


def test_10_publish_to_091_consume_maps_properties(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    sender = c10.create_sender(addr_queue(q))
    sender.send(Message(
        body=b"from 1.0", inferred=True, durable=True, priority=7, ttl=30, id="msg-1", correlation_id=42,
        reply_to="/queues/replies", content_type="application/octet-stream",
        creation_time=1700000000, group_id="shop", user_id=USER.encode(),
        properties={"color": "blue", "count": 3}, annotations={symbol("x-tag"): "v"}))
    m, props, body = get_one(ch, q, timeout=10)
    assert body == b"from 1.0"
    assert props.delivery_mode == 2 and props.priority == 7 and props.expiration == "30000"
    assert props.message_id == "msg-1" and props.correlation_id == "42"
    # ... and a queue address reaches a 0-9-1 replier as the queue's name.
    assert props.reply_to == "replies"
    assert props.content_type == "application/octet-stream"
    assert props.timestamp == 1700000000 and props.app_id == "shop" and props.user_id == USER
    assert props.headers["color"] == b"blue" or props.headers["color"] == "blue"
    assert props.headers["count"] == 3
    assert props.headers["x-tag"] in ("v", b"v")
    # A non-binary body (amqp-value) reaches 0-9-1 as its AMQP encoding, typed "amqp-1.0",
    # and an AMQP 1.0 consumer gets the value back.
    sender.send(Message(body={"k": [1, 2]}))
    m, props, body = get_one(ch, q, timeout=10)
    assert props.type == "amqp-1.0" and body[:3] == b"\x00\x53\x77"
    ch.basic_publish("", q, body, props)
    receiver = c10.create_receiver(addr_queue(q))
    assert receiver.receive(timeout=10).body == {"k": [1, 2]}
    receiver.accept()


def test_a_user_id_that_is_not_the_login_is_rejected(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    with pytest.raises(SendException) as e:
        c10.create_sender(addr_queue(q)).send(Message(body="x", user_id=b"someone-else"))
    assert e.value.state == Delivery.REJECTED


# ---- refusals ------------------------------------------------------------------------------

def detached_condition(fn):
    with pytest.raises(LinkDetached) as e:
        fn()
    return e.value.condition


def test_bad_addresses_are_refused(names, ch, c10):
    missing = "missing-" + uuid.uuid4().hex
    assert detached_condition(lambda: c10.create_sender(addr_queue(missing))) == "amqp:not-found"
    assert detached_condition(lambda: c10.create_receiver(addr_queue(missing))) == "amqp:not-found"
    assert detached_condition(
        lambda: c10.create_sender("/exchanges/" + missing + "/k")) == "amqp:not-found"
    for v1 in ("/queue/q", "/exchange/amq.direct/k", "q", "/exchanges/amq.default/q"):
        assert detached_condition(lambda: c10.create_sender(v1)) == "amqp:invalid-field"
    assert detached_condition(lambda: c10.create_receiver("/exchanges/amq.direct")) \
        == "amqp:invalid-field"
    # The connection is still good after refused links.
    q = names.queue()
    ch.queue_declare(q)
    c10.create_sender(addr_queue(q)).send(Message(body="ok"))


def test_wrong_password_is_refused():
    with pytest.raises(ConnectionException):
        amqp10(password="not-" + PASSWORD)


def test_unknown_vhost_is_refused():
    vhost = "no-such-vhost-" + uuid.uuid4().hex
    with pytest.raises(ConnectionException) as info:
        c = amqp10(vhost=vhost)
        c.create_sender(None)
    # RabbitMQ 4's condition and text.
    assert "amqp:unauthorized-access" in str(info.value), info.value
    assert "virtual host '%s' does not exist" % vhost in str(info.value), info.value


@needs_api
def test_a_users_connection_limit_counts_amqp10_and_091_connections_together():
    t = Tenant()
    try:
        t.permit(t.user, ".*", ".*", ".*")
        api("PUT", "user-limits/%s/max-connections" % q(t.user), {"value": 1})
        with t.connect():
            with pytest.raises(ConnectionException) as info:
                c = amqp10(user=t.user, password=t.password, vhost=t.vhost)
                c.create_sender(None)
            assert "amqp:resource-limit-exceeded" in str(info.value), info.value
            assert "connection refused for user '%s': user connection limit (1) is reached" % t.user \
                in str(info.value), info.value
        # The 0-9-1 connection gave its slot back: a 1.0 one gets it, and then 0-9-1 waits.
        c = amqp10(user=t.user, password=t.password, vhost=t.vhost)
        c.create_sender(None)
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            t.connect()
        c.close()
    finally:
        t.remove()


@needs_api
def test_permissions_are_enforced_as_for_091():
    t = Tenant()
    try:
        t.permit(t.user, "", "^allowed.*", "^allowed.*")
        admin = connect(url_for(USER, PASSWORD, t.vhost))
        ach = admin.channel()
        for q in ("allowed-q", "secret-q"):
            ach.queue_declare(q)
        ach.exchange_declare("allowed-x", "fanout")
        ach.exchange_declare("secret-x", "fanout")
        ach.queue_bind("allowed-q", "allowed-x")
        c = amqp10(user=t.user, password=t.password, vhost=t.vhost)
        try:
            c.create_sender("/exchanges/allowed-x").send(data(b"in"))
            assert detached_condition(
                lambda: c.create_sender("/exchanges/secret-x")) == "amqp:unauthorized-access"
            # /queues/ publishes through the default exchange: write on amq.default needed.
            assert detached_condition(
                lambda: c.create_sender("/queues/allowed-q")) == "amqp:unauthorized-access"
            r = c.create_receiver("/queues/allowed-q")
            assert bytes(r.receive(timeout=10).body) == b"in"
            r.accept()
            assert detached_condition(
                lambda: c.create_receiver("/queues/secret-q")) == "amqp:unauthorized-access"
        finally:
            c.close()
            admin.close()
    finally:
        t.remove()



# ---- protocol header and TLS -----------------------------------------------------------------

def test_amqp10_without_sasl_is_answered_with_the_sasl_header():
    """RabbitMQ requires SASL: the plain AMQP 1.0 header gets the SASL header and a close."""
    import socket
    s = socket.create_connection((HOST, PORT), timeout=10)
    try:
        s.sendall(b"AMQP\x00\x01\x00\x00")
        got = b""
        while True:
            chunk = s.recv(64)
            if not chunk:
                break
            got += chunk
        assert got == b"AMQP\x03\x01\x00\x00"
    finally:
        s.close()


def test_amqp10_over_tls(certs, started):
    from proton import SSLDomain
    broker = started(certs)
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(certs["ca"])
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    c = BlockingConnection("amqps://127.0.0.1:%d" % broker.amqps_port, timeout=10,
                           ssl_domain=domain, user="guest", password="guest",
                           allowed_mechs="PLAIN")
    try:
        admin = connect(broker.warren.url)
        admin.channel().queue_declare("over-tls")
        admin.close()
        c.create_sender("/queues/over-tls").send(data(b"secret"))
        r = c.create_receiver("/queues/over-tls")
        assert bytes(r.receive(timeout=10).body) == b"secret"
        r.accept()
    finally:
        c.close()


# ---- resource alarms -------------------------------------------------------------------------

@needs_warren_bin
def test_a_resource_alarm_gives_amqp10_publishers_no_credit(tmp_path):
    """RabbitMQ 4 blocks AMQP 1.0 publishers by granting them no link credit during an
    alarm (here the disk alarm, on from the start: the free-space limit is absurdly high).
    The sender cannot send; the connection stays up and consuming still works. (A 0-9-1
    publish meeting the alarm waits unrouted, its body unread, as in RabbitMQ; the message
    to consume is one the queue kept from before the alarm, across a restart.)"""
    from proton import Timeout
    data_dir = str(tmp_path)
    broker = Broker(data_dir)
    c = connect(broker.url)
    ch = c.channel()
    ch.queue_declare("alarmed", durable=True)
    ch.basic_publish("", "alarmed", b"before", pika.BasicProperties(delivery_mode=2))
    assert wait_for(lambda: ready(ch, "alarmed") == 1, timeout=10)
    c.close()
    broker.stop()
    broker = Broker(data_dir, "--disk-free-limit-bytes", str(10 ** 18))
    try:
        c = connect(broker.url)  # never publishes: never blocked
        ch = c.channel()
        publisher = connect(broker.url, blocked_connection_timeout=None)
        publisher.channel().basic_publish("", "alarmed", b"held")  # waits out the alarm
        broker.log.flush()

        def alarm_on():
            with open(broker.log.name) as f:
                return "resource alarm set" in f.read()
        assert wait_for(alarm_on, timeout=15), "the disk alarm never came on"
        c10 = amqp10(port=broker.port)
        sender = c10.create_sender("/queues/alarmed")
        pump(c10, 1.0)
        assert sender.link.credit == 0
        with pytest.raises(Timeout):
            sender.send(data(b"blocked"), timeout=2)
        assert ready(ch, "alarmed") == 1  # the held publish is not routed
        receiver = c10.create_receiver("/queues/alarmed")
        assert bytes(receiver.receive(timeout=10).body) == b"before"
        receiver.accept()
        assert ready(ch, "alarmed") == 0
        c10.close()
    finally:
        broker.stop()


def test_idle_timeout_keepalives_keep_a_quiet_connection_open(names, ch):
    """The client asks for a 2 s idle timeout (proton closes the connection when nothing
    arrives for that long); the broker's empty frames keep it open through 7 quiet seconds."""
    c = BlockingConnection("amqp://%s:%d" % (HOST, PORT), timeout=10, user=USER,
                           password=PASSWORD, allowed_mechs="PLAIN", heartbeat=2)
    try:
        pump(c, 7)
        q = names.queue()
        ch.queue_declare(q)
        c.create_sender(addr_queue(q)).send(data(b"still here"))
        assert get_one(ch, q)[2] == b"still here"
    finally:
        c.close()


@needs_api
def test_the_http_api_lists_and_closes_amqp10_connections():
    from test_access import api, q as quote
    c = amqp10()
    try:
        def mine():
            return [x for x in api("GET", "connections").json()
                    if x["protocol"] == "AMQP 1-0" and x["user"] == USER]
        assert wait_for(lambda: len(mine()) >= 1, timeout=10)
        conn = mine()[-1]
        assert conn["auth_mechanism"] == "PLAIN" and conn["vhost"] == "/"
        for x in mine():
            api("DELETE", "connections/" + quote(x["name"]), expect=(204,))
        with pytest.raises(ConnectionException):
            c.wait(lambda: False, timeout=10)
    finally:
        try:
            c.close()
        except Exception:
            pass


def test_deleting_the_queue_detaches_its_receivers(names, ch, c10):
    q = names.queue()
    ch.queue_declare(q)
    receiver = c10.create_receiver(addr_queue(q))
    ch.queue_delete(q)
    with pytest.raises(LinkDetached) as e:
        receiver.receive(timeout=10)
    assert e.value.condition == "amqp:resource-deleted"


def test_x_cc_annotation_adds_routing_keys(names, ch, c10):
    qa, qb = names.queue(), names.queue()
    for q in (qa, qb):
        ch.queue_declare(q)
        ch.queue_bind(q, "amq.direct", q)
    m = data(b"to both")
    m.annotations = {symbol("x-cc"): [qb]}
    c10.create_sender("/exchanges/amq.direct/" + qa).send(m)
    assert get_one(ch, qa)[2] == b"to both"
    assert get_one(ch, qb)[2] == b"to both"

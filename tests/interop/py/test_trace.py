"""The firehose tracer (RabbitMQ's `rabbitmqctl trace_on`), as a user checks it: a queue bound
to amq.rabbitmq.trace with "#" receives a copy of every message published in the vhost
(routing key publish.<exchange>) and of every message delivered or fetched from it
(deliver.<queue>), with RabbitMQ 3.13's headers describing the original and the original body.

Tracing is turned on and off with the real `warren ctl trace_on/trace_off` ($WARREN_BIN) and
the HTTP API's vhost `tracing` field ($WARREN_MGMT_URL); pika publishes and consumes, and one
AMQP 1.0 publish (python-qpid-proton) shows that every protocol's publish is traced. Each test
works in vhosts of its own, so tracing never reaches another test's messages.
"""
import json
import os
import subprocess
import time

import pika
import pika.exceptions
import pytest

from conftest import get_one
from test_access import Tenant, api, needs_api, q

WARREN_BIN = os.environ.get("WARREN_BIN")

pytestmark = [
    needs_api,
    pytest.mark.skipif(not WARREN_BIN, reason="needs WARREN_BIN (warren ctl)"),
]

TRACE = "amq.rabbitmq.trace"


def ctl(*args):
    return subprocess.run([WARREN_BIN, "ctl", *args], capture_output=True, text=True,
                          timeout=20)


def trace_on(vhost):
    r = ctl("trace_on", "-p", vhost)
    assert r.returncode == 0, r.stderr
    assert r.stdout == 'Starting tracing for vhost "%s" ...\nTrace enabled for vhost %s\n' % (
        vhost, vhost)


def trace_off(vhost):
    r = ctl("trace_off", "-p", vhost)
    assert r.returncode == 0, r.stderr
    assert r.stdout == 'Stopping tracing for vhost "%s" ...\nTrace disabled for vhost %s\n' % (
        vhost, vhost)


class Traced(Tenant):
    """A vhost (and a user with every permission in it) whose firehose a queue of the admin
    takes: `firehose` is bound to the trace exchange with "#"."""

    def __init__(self):
        super().__init__()
        self.permit(self.user, ".*", ".*", ".*")
        self.watcher = self.admin()
        self.watch = self.watcher.channel()
        self.firehose = self.watch.queue_declare("firehose").method.queue
        self.watch.queue_bind(self.firehose, TRACE, "#")

    def copies(self, n, timeout=5.0):
        """The next `n` copies (method, properties, body), then checks no more come."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            m, p, b = get_one(self.watch, self.firehose, timeout=0.2)
            if m is not None:
                out.append((m, p, b))
        assert len(out) == n, [(m.routing_key, b) for m, _, b in out]
        assert self.none_more(), "more copies than %d" % n
        return out

    def none_more(self, wait=0.5):
        m, _, b = get_one(self.watch, self.firehose, timeout=wait)
        return m is None

    def node(self):
        return api("GET", "overview").json()["node"]

    def connection_name(self, protocol="AMQP 0-9-1"):
        """The one connection of the tenant's user in the vhost, as the API names it."""
        path = "vhosts/%s/connections" % q(self.vhost)
        found = [c["name"] for c in api("GET", path).json()
                 if c["user"] == self.user and c["protocol"] == protocol]
        assert len(found) == 1, found
        return found[0]

    def remove(self):
        try:
            self.watcher.close()
        except Exception:
            pass
        super().remove()


@pytest.fixture
def tenants():
    """Makes traced tenants, all removed after the test."""
    made = []

    def make():
        made.append(Traced())
        return made[-1]
    yield make
    for t in made:
        t.remove()


@pytest.fixture
def traced(tenants):
    return tenants()


def vhost_tracing(vhost):
    return api("GET", "vhosts/" + q(vhost)).json()["tracing"]


def test_trace_on_copies_each_publish_and_delivery_with_rabbitmqs_headers(traced):
    trace_on(traced.vhost)
    c = traced.connect()
    ch = c.channel()
    ch.exchange_declare("orders", "direct")
    ch.queue_declare("shipping")
    ch.queue_bind("shipping", "orders", "eu")
    properties = pika.BasicProperties(
        content_type="application/json", headers={"tenant": "acme", "n": 7}, delivery_mode=2,
        priority=3, message_id="m-1", timestamp=1700000000, app_id="shop")
    # One delivered to a consumer, one fetched with basic.get.
    ch.basic_publish("orders", "eu", b'{"order": 1}', properties)
    for _m, _p, consumed in ch.consume("shipping", auto_ack=True, inactivity_timeout=5):
        assert consumed == b'{"order": 1}'
        break
    ch.cancel()
    ch.basic_publish("orders", "eu", b'{"order": 2}', properties)
    m, _p, got = get_one(ch, "shipping")
    assert got == b'{"order": 2}' and not m.redelivered

    copies = traced.copies(4)
    publishes = [c for c in copies if c[0].routing_key == "publish.orders"]
    deliveries = [c for c in copies if c[0].routing_key == "deliver.shipping"]
    assert len(publishes) == 2 and len(deliveries) == 2, [c[0].routing_key for c in copies]
    assert [b for _, _, b in publishes] == [b'{"order": 1}', b'{"order": 2}']
    assert sorted(b for _, _, b in deliveries) == [b'{"order": 1}', b'{"order": 2}']

    node, connection = traced.node(), traced.connection_name()
    original = {"content_type": "application/json", "headers": {"tenant": "acme", "n": 7},
                "delivery_mode": 2, "priority": 3, "message_id": "m-1",
                "timestamp": 1700000000, "app_id": "shop"}
    for method, props, _body in copies:
        assert method.exchange == TRACE
        # A copy is transient and carries nothing but its headers.
        assert props.delivery_mode is None and props.content_type is None
        assert props.message_id is None and props.priority is None
    # The original described, then who published or consumed, in RabbitMQ's order (a table
    # is a list on the wire; pika keeps its order).
    described = {"exchange_name": "orders", "routing_keys": ["eu"], "properties": original,
                 "node": node}
    who = {"vhost": traced.vhost, "connection": connection, "channel": ch.channel_number,
           "user": traced.user}
    for _, props, _ in publishes:
        expected = {**described, **who, "routed_queues": ["shipping"]}
        assert (props.headers, list(props.headers)) == (expected, list(expected))
    for _, props, _ in deliveries:
        expected = {**described, "redelivered": 0, **who}
        assert (props.headers, list(props.headers)) == (expected, list(expected))
    # Consuming the firehose (above, with basic.get) fed it nothing.
    assert traced.none_more()
    c.close()


def traced_queue(traced, queue):
    """Tracing on in the tenant's vhost, and a channel of its user with `queue` declared."""
    trace_on(traced.vhost)
    c = traced.connect()
    ch = c.channel()
    ch.queue_declare(queue)
    return c, ch


def test_a_redelivery_and_an_unroutable_publish_to_the_default_exchange(traced):
    c, ch = traced_queue(traced, "work")
    ch.basic_publish("", "nowhere", b"lost")
    ch.basic_publish("", "work", b"job")
    m, _, _ = get_one(ch, "work", auto_ack=False)
    ch.basic_nack(m.delivery_tag, requeue=True)
    m, _, _ = get_one(ch, "work", auto_ack=True)
    assert m.redelivered
    copies = traced.copies(4)
    # The default exchange is named "": its copies' key is "publish.", as RabbitMQ's.
    assert [(c[0].routing_key, c[2]) for c in copies] == [
        ("publish.", b"lost"), ("publish.", b"job"), ("deliver.work", b"job"),
        ("deliver.work", b"job")]
    lost, job = copies[0][1].headers, copies[1][1].headers
    assert (lost["exchange_name"], lost["routing_keys"], lost["routed_queues"]) == (
        "", ["nowhere"], [])
    assert job["routed_queues"] == ["work"]
    assert [c[1].headers["redelivered"] for c in copies[2:]] == [0, 1]
    c.close()


def test_a_direct_reply_to_reply_lists_the_requesters_pseudo_queue(traced):
    c, client = traced_queue(traced, "rpc")
    replies = []
    client.basic_consume("amq.rabbitmq.reply-to",
                         lambda _ch, _m, _p, body: replies.append(body), auto_ack=True)
    client.basic_publish("", "rpc", b"request",
                         pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    server = c.channel()
    _, request, _ = get_one(server, "rpc")
    server.basic_publish("", request.reply_to, b"response")
    deadline = time.monotonic() + 5
    while not replies and time.monotonic() < deadline:
        c.process_data_events(time_limit=0.05)
    assert replies == [b"response"]
    # The reply reaches its requester without a queue: its publish is traced with the
    # pseudo-queue as RabbitMQ names it, its delivery is not (as RabbitMQ's is not).
    copies = traced.copies(3)
    assert [(m.routing_key, body) for m, _, body in copies] == [
        ("publish.", b"request"), ("deliver.rpc", b"request"), ("publish.", b"response")]
    response = copies[2][1].headers
    assert response["routing_keys"] == [request.reply_to]
    assert response["routed_queues"] == [request.reply_to]
    assert response["channel"] == server.channel_number
    c.close()


def test_trace_off_stops_the_copies(traced):
    c, ch = traced_queue(traced, "q")
    ch.basic_publish("", "q", b"while on")
    assert [cp[2] for cp in traced.copies(1)] == [b"while on"]
    trace_off(traced.vhost)
    ch.basic_publish("", "q", b"while off")
    assert [get_one(ch, "q")[2] for _ in range(2)] == [b"while on", b"while off"]
    assert traced.none_more(wait=1.0)
    c.close()


def test_the_http_api_shows_and_sets_tracing(traced):
    vhost = traced.vhost
    assert vhost_tracing(vhost) is False
    listed = {v["name"]: v["tracing"] for v in api("GET", "vhosts").json()}
    assert listed[vhost] is False
    assert api("PUT", "vhosts/" + q(vhost), {"tracing": True}).status_code == 204
    assert vhost_tracing(vhost) is True
    listed = {v["name"]: v["tracing"] for v in api("GET", "vhosts").json()}
    assert listed[vhost] is True
    rows = json.loads(ctl("list_vhosts", "name", "tracing", "--json").stdout)
    assert {"name": vhost, "tracing": True} in rows
    # The API's own publish is traced too, as the requesting user.
    api("PUT", "queues/%s/api-q" % q(vhost), {})
    r = api("POST", "exchanges/%s/amq.default/publish" % q(vhost),
            {"properties": {}, "routing_key": "api-q", "payload": "via api",
             "payload_encoding": "string"})
    assert r.json() == {"routed": True}
    [(method, props, body)] = traced.copies(1)
    assert (method.routing_key, body) == ("publish.", b"via api")
    h = props.headers
    assert (h["user"], h["connection"], h["channel"], h["routed_queues"]) == (
        "guest", "HTTP API", 0, ["api-q"])

    assert api("PUT", "vhosts/" + q(vhost), {"tracing": False}).status_code == 204
    assert vhost_tracing(vhost) is False
    api("PUT", "vhosts/" + q(vhost), {"tracing": "maybe"}, expect=(400,))
    assert vhost_tracing(vhost) is False
    # A PUT without the field leaves tracing as it is.
    api("PUT", "vhosts/" + q(vhost), {"tracing": "true"})
    api("PUT", "vhosts/" + q(vhost), {"description": "kept on"})
    assert vhost_tracing(vhost) is True


def test_tracing_one_vhost_does_not_trace_another(traced, tenants):
    other = tenants()
    trace_on(traced.vhost)
    assert vhost_tracing(other.vhost) is False
    c = other.connect()
    ch = c.channel()
    ch.queue_declare("q")
    ch.basic_publish("", "q", b"untraced")
    assert get_one(ch, "q")[2] == b"untraced"
    assert other.none_more() and traced.none_more()
    c.close()


def test_publishing_to_the_trace_exchange_is_refused(traced):
    c = traced.connect()
    ch = c.channel()
    # Topic, durable and internal, as RabbitMQ's: an equivalent declaration is accepted.
    ch.exchange_declare(TRACE, "topic", durable=True, internal=True)
    shown = api("GET", "exchanges/%s/%s" % (q(traced.vhost), TRACE)).json()
    assert (shown["type"], shown["durable"], shown["internal"]) == ("topic", True, True)
    ch.basic_publish(TRACE, "publish.x", b"forged")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("after")  # the refusal closes the channel
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - cannot publish to internal exchange '%s' in vhost '%s'"
        % (TRACE, traced.vhost))
    # Not in a definitions export, as RabbitMQ leaves amq.* exchanges out.
    exported = api("GET", "definitions/" + q(traced.vhost)).json()
    assert TRACE not in [x["name"] for x in exported["exchanges"]]
    assert traced.none_more()
    c.close()


def test_trace_on_an_unknown_vhost_is_refused():
    r = ctl("trace_on", "-p", "no-such-vhost-for-tracing")
    assert r.returncode == 65
    assert "Virtual host 'no-such-vhost-for-tracing' does not exist" in r.stderr
    # Not created by the command (the API's PUT would have).
    api("GET", "vhosts/no-such-vhost-for-tracing", expect=(404,))


def test_a_definitions_import_can_turn_tracing_on(traced):
    body = {"vhosts": [{"name": traced.vhost, "tracing": True}]}
    api("POST", "definitions", body)
    assert vhost_tracing(traced.vhost) is True


def test_an_amqp10_publish_is_traced(traced):
    from proton import Message
    from test_amqp10 import amqp10

    admin = traced.admin().channel()
    admin.exchange_declare("events", "topic")
    admin.queue_declare("all-events")
    admin.queue_bind("all-events", "events", "#")
    trace_on(traced.vhost)
    c10 = amqp10(user=traced.user, password=traced.password, vhost=traced.vhost)
    try:
        sender = c10.create_sender("/exchanges/events/user.created")
        sender.send(Message(body=b"from 1.0", inferred=True, id="evt-1",
                            content_type="text/plain"))
        [(method, props, body)] = traced.copies(1)
        connection = traced.connection_name("AMQP 1-0")
    finally:
        c10.close()
    assert (method.routing_key, body) == ("publish.events", b"from 1.0")
    h = props.headers
    assert (h["exchange_name"], h["routing_keys"], h["routed_queues"]) == (
        "events", ["user.created"], ["all-events"])
    assert (h["user"], h["vhost"], h["connection"]) == (traced.user, traced.vhost, connection)
    assert isinstance(h["channel"], int)
    assert h["properties"]["message_id"] == "evt-1"
    assert h["properties"]["content_type"] == "text/plain"
    assert get_one(admin, "all-events")[2] == b"from 1.0"

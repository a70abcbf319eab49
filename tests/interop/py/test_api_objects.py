"""HTTP API: exchanges, queues and bindings — declare, list, inspect, delete, publish and
get — checked against what AMQP clients see, with the JSON fields RabbitMQ's tools read."""
import time
import uuid

import pytest

from api_helpers import VHOST, Api, needs_api, poll, q
from conftest import connect, get_one

pytestmark = needs_api


@pytest.fixture
def api():
    return Api()


def uid(prefix):
    return "api.%s.%s" % (prefix, uuid.uuid4().hex[:10])


def queue_info(api, name, conn=None, until=lambda i: True):
    """The queue's JSON once its counts are in (RabbitMQ adds them with its stats)."""
    def look():
        i = api.json("/api/queues/%2F/" + q(name))
        return i if "messages" in i and "consumers" in i and until(i) else None
    return poll(look, conn=conn) or api.json("/api/queues/%2F/" + q(name))


@pytest.fixture
def queue(api):
    name = uid("q")
    assert api.put("/api/queues/%2F/" + q(name), {"durable": False, "arguments": {"x-max-length": 100}}).status_code == 201
    yield name
    api.delete("/api/queues/%2F/" + q(name))


@pytest.fixture
def exchange(api):
    name = uid("x")
    assert api.put("/api/exchanges/%2F/" + q(name), {"type": "topic", "durable": False}).status_code == 201
    yield name
    api.delete("/api/exchanges/%2F/" + q(name))


def test_queue_put_get_and_amqp_sees_it(api, queue):
    info = queue_info(api, queue)
    assert info["name"] == queue and info["vhost"] == "/"
    assert info["durable"] is False and info["auto_delete"] is False and info["exclusive"] is False
    assert info["arguments"] == {"x-max-length": 100}
    for key in ("messages", "messages_ready", "messages_unacknowledged", "consumers", "node", "state"):
        assert key in info, key
    # The same declare again is 204; a different one is 400 (queue.declare's 406).
    assert api.put("/api/queues/%2F/" + q(queue), {"durable": False, "arguments": {"x-max-length": 100}}).status_code == 204
    r = api.put("/api/queues/%2F/" + q(queue), {"durable": True})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    c = connect()
    try:
        ok = c.channel().queue_declare(queue, passive=True)
        assert ok.method.message_count == 0
    finally:
        c.close()
    names = [x["name"] for x in api.json("/api/queues")]
    assert queue in names
    assert queue in [x["name"] for x in api.json("/api/queues/%2F")]


def test_queue_counts_follow_amqp(api, queue):
    c = connect()
    try:
        ch = c.channel()
        for i in range(3):
            ch.basic_publish("", queue, b"m%d" % i)
        m, _, _ = get_one(ch, queue, auto_ack=False)
        assert m is not None
        info = queue_info(api, queue, c, lambda i: i["messages"] == 3 and i["messages_unacknowledged"] == 1)
        assert info["messages"] == 3 and info["messages_unacknowledged"] == 1, info
        assert info["messages_ready"] == 2
        stats = poll(lambda: api.json("/api/queues/%2F/" + q(queue)).get("message_stats", {}).get("publish") == 3, conn=c)
        assert stats
        ms = api.json("/api/queues/%2F/" + q(queue))["message_stats"]
        assert ms["publish"] == 3 and "rate" in ms["publish_details"]
        assert ms["get"] == 1
    finally:
        c.close()


def test_queue_delete_if_empty_and_if_unused(api, queue):
    assert api.post("/api/exchanges/%2F/amq.default/publish",
                    {"properties": {}, "routing_key": queue, "payload": "x", "payload_encoding": "string"}).json() == {"routed": True}
    r = api.delete("/api/queues/%2F/" + q(queue) + "?if-empty=true")
    assert r.status_code == 400
    assert api.delete("/api/queues/%2F/" + q(queue) + "/contents").status_code == 204
    assert queue_info(api, queue, until=lambda i: i["messages"] == 0)["messages"] == 0
    c = connect()
    try:
        ch = c.channel()
        ch.basic_consume(queue, lambda *a: None)
        assert poll(lambda: api.json("/api/queues/%2F/" + q(queue))["consumers"] == 1, conn=c)
        assert api.delete("/api/queues/%2F/" + q(queue) + "?if-unused=true").status_code == 400
    finally:
        c.close()
    assert api.delete("/api/queues/%2F/" + q(queue) + "?if-empty=true&if-unused=true").status_code == 204
    assert api.get("/api/queues/%2F/" + q(queue)).status_code == 404
    assert api.delete("/api/queues/%2F/" + q(queue)).status_code == 404


def test_publish_and_get_with_ack_modes(api, queue):
    props = {"content_type": "text/plain", "delivery_mode": 1, "headers": {"h": "v"}, "message_id": "id-1"}
    for body in ("one", "two"):
        r = api.post("/api/exchanges/%2F/amq.default/publish",
                     {"properties": props, "routing_key": queue, "payload": body, "payload_encoding": "string"})
        assert r.status_code == 200 and r.json() == {"routed": True}
    r = api.post("/api/exchanges/%2F/amq.default/publish",
                 {"properties": {}, "routing_key": "no-such-queue-" + queue, "payload": "x", "payload_encoding": "string"})
    assert r.json() == {"routed": False}
    # Requeue: both come back, and both are still there.
    got = api.post("/api/queues/%2F/" + q(queue) + "/get",
                   {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000}).json()
    assert [m["payload"] for m in got] == ["one", "two"]
    m = got[0]
    assert m["payload_encoding"] == "string" and m["payload_bytes"] == 3
    assert m["routing_key"] == queue and m["exchange"] == "" and m["redelivered"] is False
    assert m["properties"]["content_type"] == "text/plain"
    assert m["properties"]["headers"] == {"h": "v"}
    assert m["properties"]["message_id"] == "id-1"
    assert m["message_count"] == 1
    # base64 and truncate, then ack: gone.
    got = api.post("/api/queues/%2F/" + q(queue) + "/get",
                   {"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64", "truncate": 2}).json()
    assert got[0]["payload"] == "b24=" and got[0]["payload_encoding"] == "base64"
    assert got[0]["redelivered"] is True
    left = api.post("/api/queues/%2F/" + q(queue) + "/get",
                    {"count": 5, "ackmode": "reject_requeue_false", "encoding": "auto"}).json()
    assert [m["payload"] for m in left] == ["two"]
    assert api.post("/api/queues/%2F/" + q(queue) + "/get",
                    {"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto"}).json() == []
    bad = api.post("/api/queues/%2F/" + q(queue) + "/get", {"count": 1, "ackmode": "nope", "encoding": "auto"})
    # RabbitMQ 3.10 crashes on an unknown ack mode (500); Warren answers 400.
    assert bad.status_code in (400, 500)


def test_api_publish_is_a_confirmed_mandatory_publish(api):
    """POST …/publish is a publish in confirm mode, as RabbitMQ's management plugin makes it
    through a channel: the CC and BCC headers route it too (BCC is not delivered), a queue
    that refuses it (x-overflow=reject-publish, full) makes the answer 400 "rejected", and an
    internal exchange is refused (not_authorised)."""
    main, cc, bcc, full, internal = (uid(k) for k in ("main", "cc", "bcc", "full", "internal"))
    try:
        for name in (main, cc, bcc):
            assert api.put("/api/queues/%2F/" + q(name), {"durable": False}).status_code == 201
        assert api.put("/api/queues/%2F/" + q(full), {"durable": False, "arguments": {
            "x-max-length": 1, "x-overflow": "reject-publish"}}).status_code == 201
        r = api.post("/api/exchanges/%2F/amq.default/publish", {
            "properties": {"headers": {"CC": [cc], "BCC": [bcc]}}, "routing_key": main,
            "payload": "m", "payload_encoding": "string"})
        assert r.status_code == 200 and r.json() == {"routed": True}, r.text
        c = connect()
        try:
            ch = c.channel()
            for name in (main, cc, bcc):
                _, props, body = get_one(ch, name)
                assert body == b"m", name
                ccs = [v.decode() if isinstance(v, bytes) else v for v in props.headers["CC"]]
                assert ccs == [cc] and "BCC" not in props.headers, (name, props.headers)
        finally:
            c.close()
        one = {"properties": {}, "routing_key": full, "payload": "x", "payload_encoding": "string"}
        assert api.post("/api/exchanges/%2F/amq.default/publish", one).json() == {"routed": True}
        r = api.post("/api/exchanges/%2F/amq.default/publish", one)
        assert r.status_code == 400 and "Unable to publish message" in r.json()["reason"], r.text
        assert api.put("/api/exchanges/%2F/" + q(internal),
                       {"type": "direct", "internal": True}).status_code == 201
        r = api.post("/api/exchanges/%2F/" + q(internal) + "/publish", one)
        assert r.status_code == 401 and "internal exchange" in r.json()["reason"], r.text
    finally:
        for name in (main, cc, bcc, full):
            api.delete("/api/queues/%2F/" + q(name))
        api.delete("/api/exchanges/%2F/" + q(internal))


def test_binary_payload_round_trip(api, queue):
    r = api.post("/api/exchanges/%2F/amq.default/publish",
                 {"properties": {}, "routing_key": queue, "payload": "AP8A/w==", "payload_encoding": "base64"})
    assert r.json() == {"routed": True}
    c = connect()
    try:
        _, _, body = get_one(c.channel(), queue)
        assert body == b"\x00\xff\x00\xff"
    finally:
        c.close()


def test_exchange_put_get_delete(api, exchange, queue):
    info = api.json("/api/exchanges/%2F/" + q(exchange))
    assert info["name"] == exchange and info["type"] == "topic" and info["vhost"] == "/"
    assert info["durable"] is False and info["internal"] is False and info["auto_delete"] is False
    assert api.put("/api/exchanges/%2F/" + q(exchange), {"type": "topic", "durable": False}).status_code == 204
    assert api.put("/api/exchanges/%2F/" + q(exchange), {"type": "fanout"}).status_code == 400
    r = api.put("/api/exchanges/%2F/" + q(uid("x")), {"type": "no-such-type"})
    assert r.status_code == 400
    assert exchange in [x["name"] for x in api.json("/api/exchanges/%2F")]
    defaults = {x["name"] for x in api.json("/api/exchanges/%2F")}
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} <= defaults
    assert api.json("/api/exchanges/%2F/amq.default")["type"] == "direct"
    r = api.post("/api/bindings/%%2F/e/%s/q/%s" % (q(exchange), q(queue)), {"routing_key": "a.#"})
    assert r.status_code == 201
    r = api.post("/api/exchanges/%2F/" + q(exchange) + "/publish",
                 {"properties": {}, "routing_key": "a.b", "payload": "hi", "payload_encoding": "string"})
    assert r.json() == {"routed": True}
    stats = poll(lambda: api.json("/api/exchanges/%2F/" + q(exchange)).get("message_stats", {}).get("publish_in"))
    assert stats == 1
    assert api.delete("/api/exchanges/%2F/" + q(exchange) + "?if-unused=true").status_code == 400
    assert api.delete("/api/exchanges/%2F/" + q(exchange)).status_code == 204
    assert api.get("/api/exchanges/%2F/" + q(exchange)).status_code == 404
    assert api.delete("/api/exchanges/%2F/" + q(exchange)).status_code == 404


def test_bindings_create_list_delete(api, exchange, queue):
    path = "/api/bindings/%%2F/e/%s/q/%s" % (q(exchange), q(queue))
    r = api.post(path, {"routing_key": "a.#", "arguments": {"k": "v"}})
    assert r.status_code == 201
    assert r.headers.get("location")
    r = api.post(path, {"routing_key": "plain"})
    assert r.status_code == 201
    listed = api.json(path)
    assert sorted(b["routing_key"] for b in listed) == ["a.#", "plain"]
    b = [b for b in listed if b["routing_key"] == "a.#"][0]
    assert b["source"] == exchange and b["destination"] == queue
    assert b["destination_type"] == "queue" and b["vhost"] == "/"
    assert b["arguments"] == {"k": "v"}
    plain = [b for b in listed if b["routing_key"] == "plain"][0]
    assert plain["properties_key"] == "plain"
    # The binding routes for AMQP clients too.
    c = connect()
    try:
        ch = c.channel()
        ch.basic_publish(exchange, "a.x", b"routed")
        _, _, body = get_one(ch, queue)
        assert body == b"routed"
    finally:
        c.close()
    assert api.json(path + "/" + q(b["properties_key"]))["routing_key"] == "a.#"
    src = api.json("/api/exchanges/%2F/" + q(exchange) + "/bindings/source")
    assert len(src) == 2
    by_queue = api.json("/api/queues/%2F/" + q(queue) + "/bindings")
    # The default exchange's implicit binding comes first.
    assert by_queue[0]["source"] == "" and by_queue[0]["routing_key"] == queue
    assert len(by_queue) == 3
    assert any(x["source"] == exchange for x in api.json("/api/bindings/%2F"))
    assert any(x["source"] == exchange for x in api.json("/api/bindings"))
    assert api.delete(path + "/" + q(b["properties_key"])).status_code == 204
    assert api.delete(path + "/" + q(b["properties_key"])).status_code == 404
    assert [x["routing_key"] for x in api.json(path)] == ["plain"]
    assert api.post("/api/bindings/%2F/e/no-such-x/q/" + q(queue), {"routing_key": ""}).status_code == 404


def test_exchange_to_exchange_bindings(api, exchange):
    other = uid("x2")
    assert api.put("/api/exchanges/%2F/" + q(other), {"type": "fanout"}).status_code == 201
    try:
        path = "/api/bindings/%%2F/e/%s/e/%s" % (q(exchange), q(other))
        assert api.post(path, {"routing_key": "k"}).status_code == 201
        listed = api.json(path)
        assert listed[0]["destination_type"] == "exchange"
        dest = api.json("/api/exchanges/%2F/" + q(other) + "/bindings/destination")
        assert [d["source"] for d in dest] == [exchange]
        assert api.delete(path + "/k").status_code == 204
        assert api.json(path) == []
    finally:
        api.delete("/api/exchanges/%2F/" + q(other))


def test_message_rates_are_sampled(api, queue):
    """Rates come from sampling (every 5 s, as RabbitMQ): while a publisher keeps going, the
    queue's publish rate and the overview's rise above zero."""
    c = connect()
    try:
        ch = c.channel()

        def rated():
            for _ in range(10):
                ch.basic_publish("", queue, b"r")
            ms = api.json("/api/queues/%2F/" + q(queue)).get("message_stats", {})
            overview = api.json("/api/overview")["message_stats"]
            return (ms.get("publish_details", {}).get("rate", 0) > 0
                    and overview.get("publish_details", {}).get("rate", 0) > 0)
        assert poll(rated, timeout=15, conn=c)
    finally:
        c.close()


def test_an_exclusive_queue_is_not_deleted_through_the_api(api):
    """RabbitMQ 3.10.8 answers DELETE on a connection's exclusive queue with 400 and the
    locked queue's text, and the queue stays."""
    name = uid("excl")
    c = connect()
    try:
        c.channel().queue_declare(name, exclusive=True)
        r = api.delete("/api/queues/%2F/" + q(name))
        assert r.status_code == 400
        assert r.json()["reason"] == (
            "cannot obtain exclusive access to locked queue '%s' in vhost '/'. It could be "
            "originally declared on another connection or the exclusive property value does "
            "not match that of the original declaration." % name)
        assert api.get("/api/queues/%2F/" + q(name)).status_code == 200
    finally:
        c.close()

"""HTTP API: connections, channels and consumers as AMQP clients open them, and closing a
connection from the API (320 CONNECTION_FORCED with the X-Reason text, as RabbitMQ)."""
import uuid

import pika
import pika.exceptions
import pytest

from api_helpers import Api, needs_api, poll, q
from conftest import connect

pytestmark = needs_api


@pytest.fixture
def api():
    return Api()


def named_connection():
    tag = "api-test-%s" % uuid.uuid4().hex[:10]
    c = connect(client_properties={"connection_name": tag})
    return tag, c


def find_connection(api, tag, conn):
    def look():
        for x in api.json("/api/connections"):
            # RabbitMQ adds the counters with its first stats event.
            if x.get("client_properties", {}).get("connection_name") == tag and "recv_oct" in x:
                return x
        return None
    return poll(look, conn=conn)


def test_connection_fields(api):
    tag, c = named_connection()
    try:
        x = find_connection(api, tag, c)
        assert x, "connection not listed"
        assert x["user"] == "guest" and x["vhost"] == "/"
        assert x["protocol"] == "AMQP 0-9-1"
        assert x["peer_host"] == "127.0.0.1"
        assert x["name"] == "%s:%d -> %s:%d" % (x["peer_host"], x["peer_port"], x["host"], x["port"])
        assert x["client_properties"]["product"] == "Pika Python Client Library"
        assert x["client_properties"]["capabilities"]["publisher_confirms"] is True
        assert x["auth_mechanism"] == "PLAIN"
        assert x["frame_max"] == 131072 and x["channel_max"] > 0
        assert isinstance(x["timeout"], int)
        assert isinstance(x["connected_at"], int) and x["connected_at"] > 1_600_000_000_000
        assert x["state"] == "running"
        for key in ("recv_oct", "send_oct", "channels", "ssl"):
            assert key in x, key
        one = api.json("/api/connections/" + q(x["name"]))
        assert one["name"] == x["name"]
        assert any(v["name"] == x["name"] for v in api.json("/api/vhosts/%2F/connections"))
        assert api.get("/api/connections/" + q("1.2.3.4:5 -> 6.7.8.9:10")).status_code == 404
    finally:
        c.close()


def test_channels_and_consumers(api, names):
    tag, c = named_connection()
    try:
        ch = c.channel()
        ch.basic_qos(prefetch_count=7)
        ch.confirm_delivery()
        queue = names.queue()
        ch.queue_declare(queue)
        ch.basic_consume(queue, lambda *a: None, consumer_tag="ctag-" + tag, arguments={"x-priority": 3})
        x = find_connection(api, tag, c)
        chans = poll(lambda: [h for h in api.json("/api/connections/" + q(x["name"]) + "/channels")
                              if h["consumer_count"] == 1], conn=c)
        assert chans, api.json("/api/connections/" + q(x["name"]) + "/channels")
        h = chans[0]
        assert h["name"] == "%s (%d)" % (x["name"], h["number"])
        assert h["prefetch_count"] == 7 and h["global_prefetch_count"] == 0
        assert h["confirm"] is True and h["transactional"] is False
        assert h["user"] == "guest" and h["vhost"] == "/"
        assert h["connection_details"]["name"] == x["name"]
        assert "message_stats" in h or h["messages_unacknowledged"] == 0
        assert any(v["name"] == h["name"] for v in api.json("/api/channels"))
        consumers = [k for k in api.json("/api/consumers") if k["consumer_tag"] == "ctag-" + tag]
        assert len(consumers) == 1
        k = consumers[0]
        assert k["queue"] == {"name": queue, "vhost": "/"}
        assert k["ack_required"] is True and k["exclusive"] is False
        assert k["prefetch_count"] == 7
        assert k["arguments"] == {"x-priority": 3}
        assert k["channel_details"]["connection_name"] == x["name"]
        assert k["channel_details"]["number"] == h["number"]
        assert [k2["consumer_tag"] for k2 in api.json("/api/consumers/%2F") if k2["consumer_tag"] == "ctag-" + tag]
        qi = api.json("/api/queues/%2F/" + q(queue))
        assert [d["consumer_tag"] for d in qi["consumer_details"]] == ["ctag-" + tag]
    finally:
        c.close()


def test_channel_counters(api, names):
    tag, c = named_connection()
    try:
        ch = c.channel()
        ch.confirm_delivery()
        queue = names.queue()
        ch.queue_declare(queue)
        for _ in range(4):
            ch.basic_publish("", queue, b"x")
        m, _, _ = ch.basic_get(queue, auto_ack=False)
        ch.basic_ack(m.delivery_tag)
        x = find_connection(api, tag, c)

        def counted():
            for h in api.json("/api/connections/" + q(x["name"]) + "/channels"):
                ms = h.get("message_stats", {})
                if ms.get("publish") == 4 and ms.get("ack") == 1:
                    return h
            return None
        h = poll(counted, conn=c)
        assert h, api.json("/api/connections/" + q(x["name"]) + "/channels")
        ms = h["message_stats"]
        assert ms["confirm"] == 4 and ms["get"] == 1
        assert "rate" in ms["publish_details"]
    finally:
        c.close()


def test_delete_connection_closes_it_with_reason(api):
    tag, c = named_connection()
    x = find_connection(api, tag, c)
    assert x
    r = api.delete("/api/connections/" + q(x["name"]), headers={"X-Reason": "bye from the API"})
    assert r.status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
        for _ in range(100):
            c.process_data_events(time_limit=0.1)
    assert e.value.reply_code == 320
    assert e.value.reply_text == "CONNECTION_FORCED - bye from the API"
    assert poll(lambda: all(v["name"] != x["name"] for v in api.json("/api/connections")))
    assert api.delete("/api/connections/" + q(x["name"])).status_code == 404


def test_a_trailing_slash_is_ignored(api):
    """amqp091-go's recovery tests list connections at `/api/connections/`; RabbitMQ's router
    ignores the trailing slash, for lists, single objects and with a query string alike."""
    tag, c = named_connection()
    try:
        x = find_connection(api, tag, c)
        assert x, "connection not listed"
        listed = api.get("/api/connections/")
        assert listed.status_code == 200
        assert any(v["name"] == x["name"] for v in listed.json())
        one = api.get("/api/connections/" + q(x["name"]) + "/")
        assert one.status_code == 200 and one.json()["name"] == x["name"]
        paged = api.get("/api/queues/?page=1&page_size=100")
        assert paged.status_code == 200 and "items" in paged.json()
        assert api.get("/api/vhosts/%2F/").json()["name"] == "/"
    finally:
        c.close()

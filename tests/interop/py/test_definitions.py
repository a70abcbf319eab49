"""Definitions loaded at boot (--load-definitions, RabbitMQ's load_definitions): an export
taken from RabbitMQ 3.10.8 (tests/interop/fixtures) brings its vhosts, users, topology and
policies into Warren, and a bad file stops the broker with a message naming it.
RABBITMQ_DEFS_URL=http://guest:guest@127.0.0.1:15672 runs the live variant: the definitions
are made through a real RabbitMQ's HTTP API and exported from it first."""
import json
import os
import subprocess
import tempfile
import urllib.request
import base64

import pika
import pytest

from own_broker import Broker, WARREN_BIN, needs_warren_bin

pytestmark = pytest.mark.own_brokers

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "rabbitmq-3.10-definitions.json")


def connect(broker, vhost, user="guest", password="guest"):
    params = pika.ConnectionParameters(
        "127.0.0.1", broker.port, vhost, pika.PlainCredentials(user, password))
    return pika.BlockingConnection(params)


@pytest.fixture
def loaded(tmp_path):
    b = Broker(str(tmp_path), "--load-definitions", FIXTURE)
    yield b
    b.stop()


@needs_warren_bin
def test_topology_from_a_rabbitmq_export_routes(loaded):
    conn = connect(loaded, "orders")
    ch = conn.channel()
    for q in ["orders.new", "orders.dead", "auto.q", "transient.q"]:
        ch.queue_declare(q, passive=True)
    ch.exchange_declare("events", passive=True)
    # orders --order.created.#--> orders.new
    ch.basic_publish("orders", "order.created.1", b"hello")
    # headers binding hdr --x-match any, kind=refund--> orders.dead
    ch.basic_publish("hdr", "", b"refund", pika.BasicProperties(headers={"kind": "refund"}))
    ch.basic_publish("dlx", "", b"dead")
    got = ch.basic_get("orders.new", auto_ack=True)
    assert got[2] == b"hello"
    bodies = {ch.basic_get("orders.dead", auto_ack=True)[2] for _ in range(2)}
    assert bodies == {b"refund", b"dead"}
    conn.close()
    conn = connect(loaded, "/")
    ch = conn.channel()
    ch.basic_publish("ex.main", "work", b"w")
    assert ch.basic_get("work", auto_ack=True)[2] == b"w"
    conn.close()


@needs_warren_bin
def test_imported_users_log_in_with_their_rabbitmq_passwords(loaded):
    conn = connect(loaded, "orders", "alice", "alice-secret")
    conn.channel().queue_declare("orders.new", passive=True)
    conn.close()
    conn = connect(loaded, "orders", "bob", "bob pw")
    conn.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(loaded, "orders", "bob", "not bob's")


@needs_warren_bin
def test_a_bad_definitions_file_is_a_startup_error(tmp_path):
    bad = tmp_path / "defs.json"
    bad.write_text(json.dumps({"queues": [{"name": "q", "vhost": "nowhere"}]}))
    out = subprocess.run(
        [WARREN_BIN, "server", "--bind", "127.0.0.1", "--amqp-port", "0",
         "--data-dir", str(tmp_path / "data"), "--load-definitions", str(bad)],
        capture_output=True, text=True, timeout=30, env={**os.environ, "RUST_BACKTRACE": "0"})
    assert out.returncode != 0
    assert ('definitions file %s: Please create virtual host "nowhere" prior to importing '
            'definitions.' % bad) in out.stderr
    bad.write_text("{not json")
    out = subprocess.run(
        [WARREN_BIN, "server", "--bind", "127.0.0.1", "--amqp-port", "0",
         "--data-dir", str(tmp_path / "data"), "--load-definitions", str(bad)],
        capture_output=True, text=True, timeout=30, env={**os.environ, "RUST_BACKTRACE": "0"})
    assert out.returncode != 0
    assert "is not valid JSON" in out.stderr


RABBITMQ_DEFS_URL = os.environ.get("RABBITMQ_DEFS_URL")


def rabbitmq_api(method, path, body=None):
    url = RABBITMQ_DEFS_URL.split("@")[-1]
    creds = RABBITMQ_DEFS_URL.split("//")[1].split("@")[0]
    req = urllib.request.Request(
        "http://%s/api/%s" % (url.split("//")[-1], path), method=method,
        data=None if body is None else json.dumps(body).encode())
    req.add_header("authorization", "Basic " + base64.b64encode(creds.encode()).decode())
    req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req) as r:
        data = r.read()
        return json.loads(data) if data else None


@needs_warren_bin
@pytest.mark.skipif(not RABBITMQ_DEFS_URL, reason="set RABBITMQ_DEFS_URL to a RabbitMQ with management")
def test_live_rabbitmq_export_round_trip(tmp_path):
    rabbitmq_api("PUT", "vhosts/live", {"description": "live test"})
    rabbitmq_api("PUT", "users/carol", {"password": "carol's secret", "tags": "management"})
    rabbitmq_api("PUT", "permissions/live/carol", {"configure": ".*", "write": ".*", "read": ".*"})
    rabbitmq_api("PUT", "permissions/live/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    rabbitmq_api("PUT", "policies/live/ttl", {"pattern": "^live\\.", "apply-to": "queues",
                                               "definition": {"message-ttl": 60000}})
    rabbitmq_api("PUT", "exchanges/live/live.x", {"type": "topic", "durable": True})
    rabbitmq_api("PUT", "queues/live/live.q", {"durable": True, "arguments": {"x-max-length": 7}})
    rabbitmq_api("POST", "bindings/live/e/live.x/q/live.q", {"routing_key": "a.#"})
    exported = rabbitmq_api("GET", "definitions")
    path = tmp_path / "defs.json"
    path.write_text(json.dumps(exported))
    b = Broker(str(tmp_path / "data"), "--load-definitions", str(path))
    try:
        conn = connect(b, "live")
        ch = conn.channel()
        assert ch.queue_declare("live.q", passive=True).method.message_count == 0
        ch.basic_publish("live.x", "a.b", b"x")
        assert ch.basic_get("live.q", auto_ack=True)[2] == b"x"
        conn.close()
    finally:
        b.stop()

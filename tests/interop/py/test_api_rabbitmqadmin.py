"""RabbitMQ's own CLI, rabbitmqadmin (tests/interop/tools/rabbitmqadmin, copied unchanged
from RabbitMQ 3.10.8's management plugin, MPL 2.0), run against the API: list, declare,
publish, get and delete as an operator would."""
import json
import os
import subprocess
import sys
import urllib.parse
import uuid

import pytest

from api_helpers import MGMT_URL, PASSWORD, USER, needs_api

pytestmark = needs_api

TOOL = os.path.join(os.path.dirname(__file__), "..", "tools", "rabbitmqadmin")


def admin(*args, fmt=None):
    url = urllib.parse.urlparse(MGMT_URL)
    cmd = [sys.executable, TOOL, "-H", url.hostname, "-P", str(url.port), "-u", USER, "-p", PASSWORD]
    if fmt:
        cmd += ["-f", fmt]
    r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def listed(kind, **filters):
    return json.loads(admin("list", kind, fmt="raw_json"))


def test_declare_publish_get_delete():
    suffix = uuid.uuid4().hex[:10]
    queue, exchange = "admin.q." + suffix, "admin.x." + suffix
    try:
        assert "queue declared" in admin("declare", "queue", "name=" + queue, "durable=false",
                                          'arguments={"x-max-length": 10}')
        assert "exchange declared" in admin("declare", "exchange", "name=" + exchange, "type=fanout", "durable=false")
        assert "binding declared" in admin("declare", "binding", "source=" + exchange, "destination=" + queue)
        q = [x for x in listed("queues") if x["name"] == queue][0]
        assert q["arguments"] == {"x-max-length": 10}
        assert any(x["name"] == exchange and x["type"] == "fanout" for x in listed("exchanges"))
        assert any(b["source"] == exchange and b["destination"] == queue for b in listed("bindings"))
        assert "Message published" in admin("publish", "exchange=" + exchange, "routing_key=any", "payload=hello admin")
        assert "Message published" in admin("publish", "routing_key=" + queue, "payload=second")
        table = admin("list", "queues", "name", "messages")
        assert queue in table
        got = admin("get", "queue=" + queue, "ackmode=ack_requeue_false", "count=2")
        assert "hello admin" in got and "second" in got
        assert "No items" in admin("get", "queue=" + queue, "ackmode=ack_requeue_false")
        admin("publish", "routing_key=" + queue, "payload=purge-me")
        assert "queue purged" in admin("purge", "queue", "name=" + queue)
        assert "binding deleted" in admin("delete", "binding", "source=" + exchange, "destination=" + queue,
                                          "destination_type=queue", "properties_key=~")
        assert not any(b["source"] == exchange for b in listed("bindings"))
        # A topic binding's key as the operator types it ('a.#'), not as the API lists it
        # ('a.%23'): RabbitMQ finds it either way.
        assert "binding declared" in admin("declare", "binding", "source=amq.topic",
                                           "destination=" + queue, "routing_key=a.#")
        assert "binding deleted" in admin("delete", "binding", "source=amq.topic",
                                          "destination=" + queue, "destination_type=queue",
                                          "properties_key=a.#")
        assert not any(b["source"] == "amq.topic" and b["destination"] == queue
                       for b in listed("bindings"))
    finally:
        admin("delete", "queue", "name=" + queue)
        admin("delete", "exchange", "name=" + exchange)
    assert not any(x["name"] == queue for x in listed("queues"))


def test_show_overview_and_lists():
    out = admin("show", "overview")
    assert "rabbitmq_version" in out or "cluster_name" in out
    for kind in ("connections", "channels", "consumers", "exchanges", "queues", "bindings",
                 "vhosts", "users", "permissions", "nodes"):
        assert isinstance(listed(kind), list), kind


def test_users_vhosts_permissions():
    suffix = uuid.uuid4().hex[:10]
    user, vhost = "admin-user-" + suffix, "admin-vhost-" + suffix
    try:
        assert "user declared" in admin("declare", "user", "name=" + user, "password=pw", "tags=monitoring")
        assert "vhost declared" in admin("declare", "vhost", "name=" + vhost)
        assert "permission declared" in admin("declare", "permission", "vhost=" + vhost, "user=" + user,
                                              "configure=.*", "write=.*", "read=.*")
        assert any(p["user"] == user and p["vhost"] == vhost for p in listed("permissions"))
        assert any(u["name"] == user for u in listed("users"))
        assert any(v["name"] == vhost for v in listed("vhosts"))
    finally:
        admin("delete", "user", "name=" + user)
        admin("delete", "vhost", "name=" + vhost)
    assert not any(u["name"] == user for u in listed("users"))

"""Resource alarms are cluster-wide, as in RabbitMQ ("when running RabbitMQ in a cluster, the
memory and disk alarms are cluster-wide"): a node whose disk fills below its limit blocks
publishers connected to every node, each told connection.blocked "low on disk"; any node's
/api/health/checks/alarms lists the alarm with the node it is on, while local-alarms answers
for the node asked only; once space is back every publisher is unblocked and what it published
arrives. Needs root (a tmpfs for each node's data directory)."""
import os
import threading
import time

import pika
import pytest

from cluster_nodes import Cluster, eventually
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(240),
              pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")]

LIMIT_MB = 48
QUEUE = "alarm-q"


def test_a_node_s_disk_alarm_blocks_publishers_on_every_node():
    cluster = Cluster("alarms", 3, extra=["--disk-free-limit-bytes", str(LIMIT_MB << 20)],
                      disk_mb=96)
    try:
        cluster.start()
        n1, n2, n3 = cluster.nodes
        connection = pika.BlockingConnection(pika.URLParameters(n1.amqp_url))
        blocked, unblocked, reasons = threading.Event(), threading.Event(), []
        connection.add_on_connection_blocked_callback(
            lambda _c, frame: (reasons.append(frame.method.reason), blocked.set()))
        connection.add_on_connection_unblocked_callback(lambda _c, _f: unblocked.set())
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.basic_publish("", QUEUE, b"before")

        n3.fill_disk(leave_mb=LIMIT_MB // 2)
        eventually("node 1 seeing node 3's alarm", lambda: n1.request(
            "GET", "/api/health/checks/alarms").status_code == 503)
        # Node 1's publisher publishes again and is blocked by node 3's alarm (as in RabbitMQ,
        # a connection is blocked when it publishes): told connection.blocked, its publish
        # held until the alarm clears.
        channel.basic_publish("", QUEUE, b"during")
        deadline = time.monotonic() + 30
        while not blocked.is_set() and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
        assert blocked.is_set(), "node 1's publisher was not blocked by node 3's disk alarm"
        assert reasons == ["low on disk"]
        for node in (n1, n2):
            answer = node.request("GET", "/api/health/checks/alarms")
            assert answer.status_code == 503, (node.name, answer.text)
            assert answer.json()["alarms"] == [{"node": n3.name, "resource": "disk"}]
            local = node.request("GET", "/api/health/checks/local-alarms")
            assert local.status_code == 200, (node.name, local.text)
        own = {n["name"]: n for n in n1.get("/api/nodes")}
        assert own[n3.name]["disk_free_alarm"] is True
        assert own[n1.name]["disk_free_alarm"] is False

        n3.free_disk()
        deadline = time.monotonic() + 30
        while not unblocked.is_set() and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
        assert unblocked.is_set(), "node 1's publisher stayed blocked after node 3's disk freed"
        channel.basic_publish("", QUEUE, b"after")
        eventually("the three messages in the queue",
                   lambda: (n2.queue(QUEUE) or {}).get("messages") == 3)
        assert n1.request("GET", "/api/health/checks/alarms").status_code == 200
        connection.close()
    finally:
        cluster.close()

"""A classic queue's home node survives a metadata snapshot: with the metadata group
snapshotting every 16 entries (`--raft-snapshot-every`), a fourth node that joins after the log
was purged gets the definitions by a snapshot install, and holds a record forwarding to the
queue's home node rather than a queue of its own (or none): a message published on it is
consumed on the home node. Restarted from its stored definitions, it still forwards."""
import time

import pika
import pytest

from cluster_nodes import Node, agreed, eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(400)]

SNAPSHOT_EVERY = 16
EXTRA = ["--raft-snapshot-every", str(SNAPSHOT_EVERY)]


def served_from(node, name, home):
    info = node.queue(name)
    return info is not None and info["node"] == home.name and info["state"] == "running"


@pytest.fixture
def cluster():
    with started_cluster("snaphome", extra=EXTRA, timeout=120) as cluster:
        fourth = Node(cluster.root, "snaphome4@127.0.0.1", cluster.secret_file, EXTRA)
        try:
            yield cluster, fourth
        finally:
            fourth.stop()


def test_a_node_installing_a_snapshot_forwards_to_the_queues_home(cluster):
    cluster, fourth = cluster
    a, b, _ = cluster.nodes
    conn = a.connect()
    conn.channel().queue_declare("q.homed-on-a", durable=True)
    conn.close()
    for node in cluster.nodes:
        eventually("q.homed-on-a served by a on %s" % node.name,
                   lambda node=node: served_from(node, "q.homed-on-a", a), timeout=60)
    # Enough changes after it (through node b) for the metadata log to be snapshotted and
    # purged past the declaration several times over.
    conn = b.connect()
    ch = conn.channel()
    for i in range(6 * SNAPSHOT_EVERY):
        ch.exchange_declare("x.filler-%d" % (i % 8), "fanout", durable=True)
        ch.exchange_delete("x.filler-%d" % (i % 8))
    conn.close()

    fourth.start(cluster.nodes)
    everyone = cluster.nodes + [fourth]
    eventually("four nodes in one cluster",
               lambda: agreed(everyone, [n.name for n in everyone]), timeout=120)
    assert "bringing definitions to the metadata snapshot" in fourth.log(), \
        "the fourth node did not catch up by a snapshot install"
    eventually("q.homed-on-a served by a on the fourth node",
               lambda: served_from(fourth, "q.homed-on-a", a), timeout=60)

    def publish_on_fourth_consume_on_a(body):
        conn = fourth.connect()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "q.homed-on-a", body, pika.BasicProperties(delivery_mode=2),
                         mandatory=True)
        conn.close()
        conn = a.connect()
        try:
            ch = conn.channel()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                method, _, got = ch.basic_get("q.homed-on-a", auto_ack=True)
                if method is not None:
                    return got
                time.sleep(0.3)
            return None
        finally:
            conn.close()

    assert publish_on_fourth_consume_on_a(b"via-snapshot") == b"via-snapshot"

    # Restarted from its stored definitions: still a record forwarding to node a.
    fourth.stop()
    fourth.start(cluster.nodes)
    eventually("four nodes again", lambda: agreed(everyone, [n.name for n in everyone]),
               timeout=120)
    eventually("q.homed-on-a served by a on the restarted fourth node",
               lambda: served_from(fourth, "q.homed-on-a", a), timeout=60)
    assert publish_on_fourth_consume_on_a(b"after-restart") == b"after-restart"

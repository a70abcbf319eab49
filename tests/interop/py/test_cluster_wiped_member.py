"""A member whose data was wiped, restarted under its old name without being forgotten first
(an operator's slip, or a replaced machine started too early): the cluster refuses it at the
cluster handshake — it presents a new incarnation — with the way out in the log on both sides,
and keeps serving a quorum queue meanwhile. Then, as in RabbitMQ, `forget_cluster_node` (which
refuses a running node) removes it from the cluster and from the queue's group, the node joins
as a new node, and `grow_quorum_queues` (`rabbitmq-queues grow`) makes it a member of the queue
again, with every message there. Each membership change is recorded in the definitions: the
node that joins anew, no member yet, shows the shrunk group's members, and after a restart of
every node the queue still runs on the three (the grown node starts its member again)."""
import pika
import pytest

from cluster_nodes import eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(600)]

QUEUE = "qq-wiped"


def publish(node, first, count):
    conn = node.connect()
    channel = conn.channel()
    channel.confirm_delivery()
    for i in range(first, first + count):
        channel.basic_publish("", QUEUE, b"m%d" % i,
                              pika.BasicProperties(delivery_mode=2), mandatory=True)
    conn.close()


def members_seen_by(node):
    info = node.queue(QUEUE) or {}
    return sorted(info.get("members") or [])


def test_a_wiped_member_is_refused_until_forgotten_then_joins_and_grows_back():
    with started_cluster("wipedm") as cluster:
        first, second, victim = cluster.nodes
        conn = first.connect()
        conn.channel().queue_declare(QUEUE, durable=True, arguments={
            "x-queue-type": "quorum", "x-quorum-initial-group-size": 3})
        conn.close()
        eventually("3 members", lambda: all(members_seen_by(n) == sorted(cluster.names)
                                             for n in cluster.nodes), timeout=60)
        publish(first, 0, 50)

        victim.kill()
        victim.wipe()
        victim.start([first, second])

        instructions = ("was reset (its data is new): run `warren ctl forget_cluster_node %s` "
                        "on a running node, then restart it" % victim.name)
        eventually("the wiped node told why it is refused", lambda: instructions in victim.log(),
                   timeout=60)
        eventually("a member saying it refused the wiped node",
                   lambda: any(instructions in n.log() for n in (first, second)), timeout=60)

        # The cluster keeps serving: the queue takes and gives messages through both members,
        # and no Raft core stopped anywhere.
        publish(second, 50, 10)
        eventually("60 messages ready", lambda: (first.queue(QUEUE) or {}).get(
            "messages_ready") == 60, timeout=60)
        for node in cluster.nodes:
            assert "reversion" not in node.log(), node.name
        statuses = [first.status(), second.status()]
        for status in statuses:
            listed = {m["name"]: m for m in status["members"]}
            assert sorted(listed) == sorted(cluster.names), status
            assert not listed[victim.name]["running"], status

        # As RabbitMQ: a running (connected) node is not forgotten.
        refused = first.ctl("forget_cluster_node", second.name)
        assert refused.returncode != 0, refused.stdout
        assert "failed_to_remove_node" in refused.stdout + refused.stderr, refused

        forgot = second.ctl("forget_cluster_node", victim.name)
        assert forgot.returncode == 0, forgot.stdout + forgot.stderr
        survivors = sorted([first.name, second.name])
        eventually("the queue shrunk to the survivors", lambda: all(
            members_seen_by(n) == survivors for n in (first, second)), timeout=60)

        # The refused node keeps asking its seeds; forgotten, it joins as a new node.
        cluster.wait_agreed(timeout=90)
        eventually("the new node sees the queue", lambda: victim.queue(QUEUE) is not None,
                   timeout=60)
        # No member of the group now, it knows the members the forget recorded.
        eventually("the new node showing the survivors as the members",
                   lambda: members_seen_by(victim) == survivors, timeout=60)

        grown = first.ctl("grow_quorum_queues", victim.name)
        assert grown.returncode == 0, grown.stdout + grown.stderr
        assert QUEUE in grown.stdout, grown.stdout
        eventually("the queue back to 3 members", lambda: all(
            members_seen_by(n) == sorted(cluster.names) for n in cluster.nodes), timeout=90)
        queue = first.queue(QUEUE)
        raft = queue.get("raft") or {}
        assert len(raft.get("members") or []) == 3 or raft.get("state") != "leader", raft

        # Every node restarted: each starts the queue with the members recorded, the grown
        # node its member of the group too, and the three elect a leader.
        for node in cluster.nodes:
            node.stop()
        for node in cluster.nodes:
            node.start(cluster.peers_of(node))
        cluster.wait_agreed(timeout=90)
        eventually("the queue on 3 members with a leader after the restart", lambda: all(
            members_seen_by(n) == sorted(cluster.names)
            and (n.queue(QUEUE) or {}).get("leader") in cluster.names
            for n in cluster.nodes), timeout=120)

        # Every message is still there, and the new member serves them.
        conn = victim.connect()
        channel = conn.channel()
        bodies = set()
        for _ in range(600):
            method, _properties, body = channel.basic_get(QUEUE, auto_ack=True)
            if method is None:
                if len(bodies) == 60:
                    break
                conn.sleep(0.1)
                continue
            bodies.add(body)
        conn.close()
        assert bodies == {b"m%d" % i for i in range(60)}, sorted(bodies)[:5]
        for node in cluster.nodes:
            assert "reversion" not in node.log(), node.name

"""A RabbitMQ 3.x setup on a Warren cluster: an `ha-mode: all` policy, and an application
declaring its durable queue and publishing with confirms through every node. The policy makes
the queue one quorum queue (one Raft group, the same members and leader on every node, every
confirmed message in it), not a queue of its own per node. And the application keeps doing
what it did with the mirrored classic queue it asked for: redeclaring it with
`x-queue-type: classic`, and consuming on a channel with a global prefetch limit."""
import pika
import pytest

from cluster_nodes import agreed_queue_leader, eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]

QUEUE = "ha.jobs"
PER_NODE = 5


def test_a_mirroring_policy_makes_one_replicated_queue_that_3x_applications_can_use():
    with started_cluster("hapol") as cluster:
        nodes = cluster.nodes
        names = sorted(n.name for n in nodes)
        response = nodes[0].request("PUT", "/api/policies/%2F/ha-all", json={
            "pattern": r"^ha\.", "apply-to": "queues",
            "definition": {"ha-mode": "all", "ha-sync-mode": "automatic"}})
        assert response.status_code in (201, 204), response.text

        # Every node declares it (no x-queue-type, as a 3.x application does) and publishes.
        for i, node in enumerate(nodes):
            connection = node.connect()
            channel = connection.channel()
            channel.queue_declare(QUEUE, durable=True)
            channel.confirm_delivery()
            for j in range(PER_NODE):
                channel.basic_publish("", QUEUE, b"n%d-%d" % (i, j),
                                      pika.BasicProperties(delivery_mode=2))
            connection.close()

        eventually("one group of three members, the same on every node",
                   lambda: agreed_queue_leader(nodes, QUEUE, members=names), timeout=60)
        total = PER_NODE * len(nodes)
        eventually("every node counting every confirmed message",
                   lambda: all((n.queue(QUEUE) or {}).get("messages") == total for n in nodes),
                   timeout=60)
        assert all(n.queue(QUEUE)["type"] == "quorum" for n in nodes)

        # What the application still does with its "mirrored classic" queue.
        connection = nodes[2].connect()
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "classic"})
        channel.basic_qos(prefetch_count=100, global_qos=True)
        got = []
        for method, _properties, body in channel.consume(QUEUE, inactivity_timeout=30):
            if body is None:
                break
            got.append(body)
            channel.basic_ack(method.delivery_tag)
            if len(got) == total:
                break
        channel.cancel()
        connection.close()
        assert sorted(got) == sorted(b"n%d-%d" % (i, j) for i in range(len(nodes))
                                     for j in range(PER_NODE))

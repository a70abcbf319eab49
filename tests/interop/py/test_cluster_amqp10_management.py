"""The AMQP 1.0 management node in a cluster: every change it makes waits for the metadata
log, so a request is answered only once its change is made, and requests sent back to back
take effect in order (the connection reads the next only after the answer). Driven by
RabbitMQ's Python AMQP 1.0 client on one node, checked on every node's HTTP API."""
import pytest
from proton import Message
from rabbitmq_amqp_python_client import (
    AddressHelper,
    ClassicQueueSpecification,
    Environment,
    ExchangeSpecification,
    ExchangeToQueueBindingSpecification,
    ExchangeType,
    QueueType,
    QuorumQueueSpecification,
)
from rabbitmq_amqp_python_client import Message as ClientMessage

from cluster_nodes import eventually, started_cluster
from own_broker import needs_warren_bin
from test_amqp10_management import Pair, members
from test_cluster_amqp10_confirms import amqp10

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]


def on_every_node(nodes, name):
    """The queue as each node's API shows it, once all of them have it."""
    return eventually("queue %s on every node" % name,
                      lambda: all(n.queue(name) for n in nodes) and [n.queue(name) for n in nodes])


def test_topology_declared_on_one_node_is_on_every_node():
    with started_cluster("mgmt10") as cluster:
        nodes = cluster.nodes
        node = nodes[1]
        env = Environment("amqp://guest:guest@127.0.0.1:%d/" % node.amqp_port)
        try:
            connection = env.connection()
            connection.dial()
            management = connection.management()
            management.declare_queue(QuorumQueueSpecification(name="mq-quorum"))
            management.declare_queue(ClassicQueueSpecification(name="mq-classic"))
            management.declare_exchange(ExchangeSpecification(
                name="mx-topic", exchange_type=ExchangeType.topic))
            management.bind(ExchangeToQueueBindingSpecification(
                source_exchange="mx-topic", destination_queue="mq-classic", binding_key="a.#"))
            # Answered once made: the declaring node already reports the quorum queue.
            info = management.queue_info("mq-quorum")
            assert info.queue_type == QueueType.quorum
            assert sorted(members(info)) == sorted(n.name for n in nodes)

            assert {q["type"] for q in on_every_node(nodes, "mq-quorum")} == {"quorum"}
            on_every_node(nodes, "mq-classic")
            publisher = connection.publisher(AddressHelper.exchange_address("mx-topic", "a.b"))
            publisher.publish(ClientMessage(body=b"routed"))
            publisher.close()
            eventually("the routed message on every node", lambda: all(
                (n.queue("mq-classic") or {}).get("messages") == 1 for n in nodes))
            management.close()
            connection.close()
        finally:
            env.close()


def test_requests_sent_back_to_back_take_effect_in_order():
    with started_cluster("mgmt10o") as cluster:
        c = amqp10(cluster.nodes[2])
        try:
            pair = Pair(c)
            # Three requests before any answer: each change waits for the log, and the next
            # request is read only after it, so the GET sees the queue the PUT declared.
            for i, (method, path, body) in enumerate([
                ("PUT", "/queues/mq-ordered", {"durable": True}),
                ("GET", "/queues/mq-ordered", None),
                ("DELETE", "/queues/mq-ordered", None),
            ]):
                pair.sender.send(Message(id="r%d" % i, address=path, subject=method,
                                         reply_to="$me", body=body, inferred=False))
            answers = [pair.receiver.receive(timeout=30) for _ in range(3)]
            assert [(a.correlation_id, a.subject) for a in answers] == [
                ("r0", "201"), ("r1", "200"), ("r2", "200")]
            assert answers[1].body["name"] == "mq-ordered"
        finally:
            c.close()

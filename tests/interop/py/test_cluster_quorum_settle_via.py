"""A settle goes back the way its delivery came: on a node that does not lead a quorum queue,
consumers are served through a delegate to the leader's node, and after a leader change a
message consumer A held (through the old delegate) comes back and is delivered again, under the
same message id, through the new leader — to A itself, which stays attached (no basic.cancel,
as RabbitMQ's quorum queue consumers). A's late nack of its first copy must not touch the
second: no third delivery, the ack of the second settles it exactly once, and the queue ends
empty. (A settle used to go through every delegate the queue kept, and the new one's serving
side requeued the new copy.)"""
import time

import pika
import pytest

from cluster_nodes import agreed_queue_leader, eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(400)]

QUEUE = "qq-settle-via"


def queue_info(node):
    return node.queue(QUEUE)


def agreed_leader(cluster):
    """The queue's leader every node's API names, once they agree and it has three members."""
    return agreed_queue_leader(cluster.nodes, QUEUE, member_count=3)


class Consumer:
    """A consumer on its own connection to `node`, collecting (delivery tag, redelivered,
    body) as they come."""

    def __init__(self, node, prefetch):
        # No heartbeats: a consumer left idle while the test waits on another must not be
        # closed for missing them.
        self.connection = pika.BlockingConnection(pika.ConnectionParameters(
            host=node.host, port=node.amqp_port, heartbeat=0, connection_attempts=3,
            retry_delay=1))
        self.channel = self.connection.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.received = []
        self.cancelled = []
        self.channel.add_on_cancel_callback(lambda frame: self.cancelled.append(frame))
        self.channel.basic_consume(QUEUE, on_message_callback=self._on_message)

    def _on_message(self, _channel, method, _properties, body):
        self.received.append((method.delivery_tag, method.redelivered, body))

    def pump(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.connection.process_data_events(time_limit=0.2)

    def wait_for(self, count, what, timeout=60):
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            assert time.monotonic() < deadline, "timed out waiting for %s" % what
            self.connection.process_data_events(time_limit=0.2)
        return self.received[count - 1]

    def close(self):
        try:
            self.connection.close()
        except pika.exceptions.AMQPError:
            pass


def test_a_late_settle_through_the_old_delegate_leaves_the_redelivered_copy_alone():
    with started_cluster("qqvia") as cluster:
        conn = cluster.nodes[0].connect()
        conn.channel().queue_declare(QUEUE, durable=True, arguments={
            "x-queue-type": "quorum", "x-quorum-initial-group-size": 3})
        conn.close()
        leader_name = eventually("one leader of %s on every node" % QUEUE,
                                 lambda: agreed_leader(cluster), timeout=60)
        leader = cluster.node(leader_name)
        node = next(n for n in cluster.nodes if n is not leader)

        conn = node.connect()
        channel = conn.channel()
        channel.confirm_delivery()
        channel.basic_publish("", QUEUE, b"the-one", pika.BasicProperties(delivery_mode=2),
                              mandatory=True)
        conn.close()

        # A, on a follower's node, consumes through the delegate to the leader's node.
        a = Consumer(node, prefetch=1)
        try:
            tag_a, redelivered, body = a.wait_for(1, "the delivery to A")
            assert (body, redelivered) == (b"the-one", False)

            # The leader goes: A stays attached, the new leader delivers what A held again.
            leader.kill()
            eventually("a new leader named on %s" % node.name, lambda: (
                queue_info(node) or {}).get("leader") not in (None, leader_name), timeout=90)
            tag_again, redelivered, body = a.wait_for(2, "the redelivery to A", timeout=90)
            assert (body, redelivered) == (b"the-one", True)
            assert tag_again != tag_a
            assert not a.cancelled

            # A's late nack (requeue) of its first copy: its delegate is gone, nothing happens
            # to the second.
            a.channel.basic_nack(tag_a, requeue=True)
            a.pump(8)
            assert [r[2] for r in a.received] == [b"the-one"] * 2, (
                "the second copy was requeued by the late nack and delivered again: %r"
                % a.received)
            info = queue_info(node) or {}
            assert info.get("messages_ready") == 0, info

            # The ack of the second settles it, once: the queue ends empty everywhere still up.
            a.channel.basic_ack(tag_again)
            a.pump(1)
            up = [n for n in cluster.nodes if n is not leader]
            eventually("the queue empty on %s" % [n.name for n in up], lambda: all(
                (queue_info(n) or {}).get("messages") == 0 for n in up), timeout=60)
            a.pump(3)
            assert len(a.received) == 2, a.received
        finally:
            a.close()

"""A quorum queue used through any node of a three-node cluster (group of three): a consumer on
a follower's node and one on the leader's node, a publisher with confirms on the third, get
every message exactly once and each in order; basic.get, ack and nack-requeue through a
follower act on the leader's queue; a node that is no member of a group of two learns its
leader and serves basic.get and a consumer through it; and when the leader is killed (kill -9) while a consumer
attached through a follower holds unacknowledged messages, that consumer stays attached (no
basic.cancel, as RabbitMQ's quorum queue consumers) and gets every message from the new
leader, the held ones again, flagged redelivered, none lost."""
import time

import pika
import pytest

from cluster_nodes import Cluster, agreed_queue_leader, eventually
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(400)]

QUEUE = "qq-follow"
MESSAGES = 300


@pytest.fixture
def cluster():
    cluster = Cluster("qqfollow")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def connect(node):
    params = pika.URLParameters(node.amqp_url)
    params.connection_attempts = 3
    params.retry_delay = 1
    return pika.BlockingConnection(params)


def queue_info(node):
    return node.queue(QUEUE)


def agreed_leader(cluster):
    """The queue's leader every node's API names, once they agree and it has three members."""
    return agreed_queue_leader(cluster.nodes, QUEUE, member_count=3)


def declare(cluster):
    conn = connect(cluster.nodes[0])
    conn.channel().queue_declare(QUEUE, durable=True, arguments={
        "x-queue-type": "quorum", "x-quorum-initial-group-size": 3})
    conn.close()
    leader = eventually("one leader of %s on every node" % QUEUE, lambda: agreed_leader(cluster),
                        timeout=60)
    leader_node = cluster.node(leader)
    followers = [n for n in cluster.nodes if n is not leader_node]
    return leader_node, followers


def publish_confirmed(node, bodies):
    conn = connect(node)
    channel = conn.channel()
    channel.confirm_delivery()
    for body in bodies:
        # Raises on a nack or a return: every message here must be confirmed.
        channel.basic_publish("", QUEUE, body, pika.BasicProperties(delivery_mode=2),
                              mandatory=True)
    conn.close()


def ready_count_everywhere(cluster, expected):
    return all((queue_info(n) or {}).get("messages_ready", -1) == expected
               for n in cluster.nodes)


def test_consumers_on_a_follower_and_the_leader_share_the_queue(cluster):
    leader, (follower, third) = declare(cluster)
    received = {"follower": [], "leader": []}
    connections = []
    for who, node in (("follower", follower), ("leader", leader)):
        conn = connect(node)
        channel = conn.channel()
        channel.basic_qos(prefetch_count=20)

        def on_message(ch, method, _props, body, who=who):
            received[who].append(body.decode())
            ch.basic_ack(method.delivery_tag)
        channel.basic_consume(QUEUE, on_message)
        connections.append(conn)
    # Both consumers registered on the leader (the follower's forwarded) before publishing.
    eventually("two consumers on the leader",
               lambda: (queue_info(leader) or {}).get("consumers") == 2)
    bodies = ["m%05d" % i for i in range(MESSAGES)]
    publish_confirmed(third, bodies)
    deadline = time.monotonic() + 90
    while sum(map(len, received.values())) < MESSAGES and time.monotonic() < deadline:
        for conn in connections:
            conn.process_data_events(time_limit=0.1)
    for conn in connections:
        conn.process_data_events(time_limit=0.5)
    everything = received["follower"] + received["leader"]
    assert sorted(everything) == bodies, "missing %d, duplicates %d" % (
        len(set(bodies) - set(everything)), len(everything) - len(set(everything)))
    # The follower's consumer really consumed (through its node), and each in order.
    assert received["follower"], "the follower's consumer got nothing"
    for who, got in received.items():
        assert got == sorted(got), "%s's consumer out of order" % who
    for conn in connections:
        conn.close()
    eventually("the queue empty on every node", lambda: ready_count_everywhere(cluster, 0))

    # basic.get, nack-requeue and ack through a follower.
    publish_confirmed(third, [b"g1", b"g2"])
    conn = connect(follower)
    channel = conn.channel()
    method, _props, body = channel.basic_get(QUEUE)
    assert method is not None and body == b"g1", (method, body)
    assert not method.redelivered
    channel.basic_nack(method.delivery_tag, requeue=True)
    # Requeued on the leader: g2 first, then g1 again, flagged redelivered.
    method, _props, body = channel.basic_get(QUEUE)
    assert body == b"g2", body
    channel.basic_ack(method.delivery_tag)
    method, _props, body = channel.basic_get(QUEUE)
    assert body == b"g1" and method.redelivered, (body, method)
    channel.basic_ack(method.delivery_tag)
    assert channel.basic_get(QUEUE)[0] is None
    conn.close()
    eventually("acks through the follower reached the leader",
               lambda: ready_count_everywhere(cluster, 0) and
               (queue_info(leader) or {}).get("messages_unacknowledged") == 0)


def test_killing_the_leader_leaves_a_follower_consumer_attached_and_loses_nothing(cluster):
    leader, (follower, _third) = declare(cluster)
    bodies = ["k%04d" % i for i in range(50)]
    publish_confirmed(follower, bodies)
    conn = connect(follower)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    held = []
    received = {}
    redelivered = set()
    cancelled = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame))

    def on_message(ch, method, _props, body):
        body = body.decode()
        if len(held) < 10 and not received:
            # The first ten are held, unacknowledged, when the leader goes.
            held.append((method.delivery_tag, body))
            return
        received[body] = received.get(body, 0) + 1
        if method.redelivered:
            redelivered.add(body)
        ch.basic_ack(method.delivery_tag)
    channel.basic_consume(QUEUE, on_message)
    deadline = time.monotonic() + 60
    while len(held) < 10 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    assert [body for _, body in held] == bodies[:10], held

    leader.kill()
    # The same consumer gets the rest, and the held ten again from the new leader.
    deadline = time.monotonic() + 120
    while len(received) < len(bodies) and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    assert not cancelled, "basic.cancel after the leader was killed: %r" % cancelled
    lost = set(bodies) - set(received)
    assert not lost, "lost %d: %s" % (len(lost), sorted(lost)[:10])
    assert set(bodies[:10]) <= redelivered, sorted(set(bodies[:10]) - redelivered)
    assert not set(received) - set(bodies)
    # The client's late acks of the copies it held before are harmless.
    for tag, _ in held:
        channel.basic_ack(tag)
    conn.process_data_events(time_limit=1)
    assert channel.is_open
    conn.close()


def test_a_node_that_is_no_member_serves_consumers_through_the_leader(cluster):
    conn = connect(cluster.nodes[0])
    conn.channel().queue_declare(QUEUE, durable=True, arguments={
        "x-queue-type": "quorum", "x-quorum-initial-group-size": 2})
    conn.close()

    def two_members():
        info = queue_info(cluster.nodes[0])
        return info and info.get("leader") and len(info.get("members") or []) == 2 and info
    info = eventually("a group of two", two_members, timeout=60)
    outsider = next(n for n in cluster.nodes if n.name not in info["members"])
    bodies = ["n%03d" % i for i in range(30)]
    publish_confirmed(outsider, bodies)
    conn = connect(outsider)
    channel = conn.channel()
    # The outsider learns the leader by asking the members: a get answers once it has.
    got = eventually("basic.get through a node that is no member",
                     lambda: (lambda m, _p, b: m and b)(*channel.basic_get(QUEUE, auto_ack=True)),
                     timeout=60)
    received = [got.decode()]
    channel.basic_qos(prefetch_count=10)
    channel.basic_consume(QUEUE, lambda ch, m, _p, body: (received.append(body.decode()),
                                                         ch.basic_ack(m.delivery_tag)))
    deadline = time.monotonic() + 60
    while len(received) < len(bodies) and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    assert received == bodies, received
    conn.close()

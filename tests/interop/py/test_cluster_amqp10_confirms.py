"""An AMQP 1.0 transfer to a quorum queue is accepted only once the queue's Raft group has
committed it, exactly when a 0-9-1 publisher would get its confirm (the one rule in
crates/broker/src/vhost/publish.rs): with both followers stopped (no majority) the sender gets no
`accepted`; once the followers are back, transfers are accepted again and every accepted message
is in the queue."""
import pytest
from proton import Message
from proton.utils import BlockingConnection, SendException
from proton import Timeout

from cluster_nodes import agreed_queue_leader, eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]

QUEUE = "qq-amqp10-confirms"


def amqp10(node):
    return BlockingConnection("amqp://127.0.0.1:%d" % node.amqp_port, timeout=10,
                              user="guest", password="guest", allowed_mechs="PLAIN")


def settles(sender, body, timeout_s):
    """"accepted", "refused" (any other outcome) or "no answer" within `timeout_s`."""
    try:
        sender.send(Message(body=body, durable=True), timeout=timeout_s)
        return "accepted"
    except SendException:
        return "refused"
    except Timeout:
        return "no answer"


def test_a_transfer_is_accepted_only_once_the_group_committed_it():
    with started_cluster("qq10") as cluster:
        nodes = cluster.nodes
        names = sorted(n.name for n in nodes)
        connection = nodes[0].connect()
        connection.channel().queue_declare(QUEUE, durable=True,
                                           arguments={"x-queue-type": "quorum"})
        connection.close()
        leader_name = eventually("the group's leader, the same on every node",
                                 lambda: agreed_queue_leader(nodes, QUEUE, members=names))
        leader = cluster.node(leader_name)
        followers = [n for n in nodes if n is not leader]

        c10 = amqp10(leader)
        sender = c10.create_sender("/queues/%s" % QUEUE)
        assert settles(sender, "with a majority", 10) == "accepted"

        for follower in followers:
            follower.stop()
        # No majority: the leader cannot commit, so nothing may be accepted.
        assert settles(sender, "without a majority", 5) != "accepted"

        for follower in followers:
            follower.start(cluster.peers_of(follower))
        assert settles(sender, "with a majority again", 60) == "accepted"
        c10.close()
        # Every accepted message is in the queue (the one sent without a majority may be too:
        # the leader commits it once the followers are back).
        count = eventually("the queue's count on every node",
                           lambda: {(n.queue(QUEUE) or {}).get("messages") for n in nodes}
                           if len({(n.queue(QUEUE) or {}).get("messages") for n in nodes}) == 1
                           else None, timeout=60)
        assert count & {2, 3}, count

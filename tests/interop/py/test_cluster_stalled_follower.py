"""A follower that stalls (SIGSTOP for 10 s: a hung VM, a long GC pause) deposes nobody when it
wakes: the quorum queue's leader and term, and the metadata group's term, are the same on every
node afterwards, and confirms through the leader's node never stop for longer than a second
while it is stalled or after. (Before Pre-Vote the woken node started elections in every group
and took the leadership away from a healthy leader, term after term.)"""
import threading
import time

import pika
import pytest

from cluster_nodes import agreed_queue_leader, eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]

QUEUE = "qq-stall"
STALL_S = 10


def queue_terms(nodes):
    return {n.name: ((n.queue(QUEUE) or {}).get("raft") or {}).get("term") for n in nodes}


def metadata_terms(nodes):
    return {n.name: n.api_status().get("term") for n in nodes}


def test_a_stalled_follower_deposes_no_leader_and_stalls_no_confirm():
    with started_cluster("stall") as cluster:
        nodes = cluster.nodes
        names = sorted(n.name for n in nodes)
        connection = nodes[0].connect()
        connection.channel().queue_declare(QUEUE, durable=True,
                                           arguments={"x-queue-type": "quorum"})
        connection.close()
        leader_name = eventually("the queue's leader", lambda: agreed_queue_leader(
            nodes, QUEUE, members=names))
        leader = cluster.node(leader_name)
        follower = next(n for n in nodes if n is not leader)
        terms_before = eventually("every node's term of the queue",
                                  lambda: (lambda t: t if None not in t.values() else None)(
                                      queue_terms(nodes)))
        metadata_before = metadata_terms(nodes)

        confirmed_at = []
        stop = threading.Event()
        failures = []

        def publish():
            try:
                conn = leader.connect()
                channel = conn.channel()
                channel.confirm_delivery()
                while not stop.is_set():
                    channel.basic_publish("", QUEUE, b"m",
                                          pika.BasicProperties(delivery_mode=2))
                    confirmed_at.append(time.monotonic())
                    time.sleep(0.005)
                conn.close()
            except Exception as e:  # noqa: BLE001 (reported below)
                failures.append(e)

        publisher = threading.Thread(target=publish)
        publisher.start()
        time.sleep(2)
        fault_at = time.monotonic()
        follower.pause()
        time.sleep(STALL_S)
        follower.resume()
        # Long enough for the woken node's failure detector to see its peers and act.
        time.sleep(10)
        stop.set()
        publisher.join(30)
        assert not failures, failures

        during = [t for t in confirmed_at if t >= fault_at]
        gaps = [b - a for a, b in zip([fault_at] + during, during)]
        assert during and max(gaps) < 1.0, "longest time without a confirm: %.2f s" % max(gaps)
        assert agreed_queue_leader(nodes, QUEUE, members=names) == leader_name
        assert queue_terms(nodes) == terms_before
        assert metadata_terms(nodes) == metadata_before

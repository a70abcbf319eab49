"""Confirmed publishing and manual-ack consuming on a three-node cluster while the other nodes
fail: the message workload (message_workload.py) on one classic queue whose node stays up —
queues are served by the node they live on today, so this is the case that must already hold —
while the two other nodes take turns being killed with -9 and restarted, and being frozen with
SIGSTOP and resumed (the metadata leader among them). Lost = 0 confirmed messages,
unexpected = 0; duplicates are counted and reported. Once queues are replicated, the same
workload spreads over every node and the failures hit the queue's own node.

Rounds: WARREN_CHAOS_ROUNDS (default 20); the report goes to WARREN_CHAOS_REPORT."""
import json
import os
import time

import pytest

from cluster_nodes import eventually, started_cluster
from message_workload import MessageWorkload
from own_broker import needs_warren_bin

ROUNDS = int(os.environ.get("WARREN_CHAOS_ROUNDS", "20"))
REPORT = os.environ.get("WARREN_CHAOS_REPORT", "/tmp/warren-chaos-report.jsonl")

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(180 + ROUNDS * 30)]


@pytest.fixture
def cluster():
    with started_cluster("msgs") as cluster:
        yield cluster


def test_confirmed_messages_survive_failures_of_the_other_nodes(cluster):
    home, *others = cluster.nodes
    queue = "chaos.messages"
    response = home.request("PUT", "/api/queues/%2F/" + queue, json={"durable": True})
    assert response.status_code in (201, 204), response.text
    # Two publishers and two consumers, all on the queue's node.
    workload = MessageWorkload("run%d" % os.getpid(), queue, [home, home], [home, home],
                               publish_interval_s=0.002)
    workload.start()
    eventually("messages flowing", lambda: workload.report()["received"] > 50)
    for round_number in range(ROUNDS):
        victim = others[round_number % len(others)]
        if round_number % 2 == 0:
            victim.kill()
            time.sleep(0.5)
            victim.start(cluster.peers_of(victim))
        else:
            victim.pause()
            time.sleep(1.5)
            victim.resume()
        before = workload.report()["confirmed"]
        eventually("publishing goes on (round %d)" % round_number,
                   lambda: workload.report()["confirmed"] > before)
    result = workload.drain(timeout=60)
    line = {"test": "messages on a queue whose node stays up", "rounds": ROUNDS, **result}
    with open(REPORT, "a") as f:
        f.write(json.dumps(line) + "\n")
    print(json.dumps(line))
    assert result["lost"] == 0, (result, workload.errors[-5:])
    assert result["unexpected"] == 0, (result, workload.unexpected[:5])
    assert result["confirmed"] > ROUNDS * 10, result
    # Nothing failed on the queue's node: no connection of the workload dropped.
    assert result["reconnects"] == 0, workload.errors[-5:]
    # A queue that exists and a node that never failed: nothing is refused.
    assert result["nacked"] == 0 and result["unconfirmed_at_failure"] == 0, result
    cluster.wait_agreed(caught_up=True)

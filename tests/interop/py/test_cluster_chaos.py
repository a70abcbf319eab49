"""Chaos on a three-node cluster's metadata group (definitions), with real processes: while a
workload keeps declaring and deleting exchanges, queues, bindings, users and vhosts through
every node (AMQP and HTTP API), one failure per round —

- kill -9 the metadata leader: a follower leads within seconds, the killed node restarts and
  rejoins;
- SIGSTOP a follower, then SIGCONT: it catches up;
- partition the leader away (network namespaces, its veth down): the majority elects and goes
  on, the cut-off node refuses changes, and after healing every node agrees;
- kill a node, wipe its data and restart it: `forget_cluster_node` first (what RabbitMQ asks
  of an operator too), then the fresh node joins again and gets every definition.

After every round: every acknowledged change is on every node, nothing unexpected is (no
refused change, no acknowledged deletion undone), and all nodes agree. Retries (changes that
had to go to another node) are counted and reported.

Rounds: WARREN_CHAOS_ROUNDS (default 20, the issue's count; test.sh runs fewer, tools/chaos.sh
the full count). Every test appends its report as a JSON line to WARREN_CHAOS_REPORT (default
/tmp/warren-chaos-report.jsonl)."""
import json
import os
import threading
import time

import pytest

from cluster_nodes import agreed, eventually, netns_unavailable, started_cluster
from definitions_workload import ContinuousChanges, DefinitionsWorkload
from own_broker import needs_warren_bin

ROUNDS = int(os.environ.get("WARREN_CHAOS_ROUNDS", "20"))
REPORT = os.environ.get("WARREN_CHAOS_REPORT", "/tmp/warren-chaos-report.jsonl")
CHANGES_PER_STEP = 3

# Per round: a failover, a restart and catching up of debug builds on a loaded machine.
pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(180 + ROUNDS * 60)]


def report(test, workload, **extra):
    line = {"test": test, "rounds": ROUNDS, **workload.summary(), **extra}
    with open(REPORT, "a") as f:
        f.write(json.dumps(line) + "\n")
    print(json.dumps(line))
    return line


def converge(cluster, workload, nodes=None, timeout=60):
    """Waits until the nodes agree on the membership and leader, every member is up and caught
    up, and every node has exactly what the workload's record says."""
    nodes = nodes or cluster.nodes
    cluster.wait_agreed(nodes, timeout=timeout, caught_up=len(nodes) == len(cluster.nodes))
    deadline = time.monotonic() + timeout
    problems = None
    while time.monotonic() < deadline:
        problems = workload.check(nodes)
        if problems is None:
            return
        time.sleep(0.5)
    raise AssertionError("definitions after the round: %r (errors seen: %s)"
                         % (problems, workload.errors[-5:]))


def changes(workload, nodes, count=CHANGES_PER_STEP):
    for _ in range(count):
        workload.change(nodes)


def new_leader(nodes, old, names):
    """The leader `nodes` agree on, once it is not `old`."""
    def check():
        chosen = agreed(nodes, names)
        return chosen if chosen and chosen != old else None
    return eventually("a leader other than %s among %s" % (old, [n.name for n in nodes]), check,
                      timeout=45)


@pytest.fixture
def cluster():
    with started_cluster("chaos") as cluster:
        yield cluster


def test_kill_9_the_metadata_leader(cluster):
    workload = DefinitionsWorkload("k9")
    workload.setup(cluster.nodes[0])
    failovers_s = []
    for round_number in range(ROUNDS):
        leader = cluster.node(cluster.wait_agreed(caught_up=True))
        # Changes keep going through every node, the leader too, while it is killed and
        # restarted: those on the dead node fail and are retried on the next.
        with ContinuousChanges(workload, cluster.nodes):
            time.sleep(0.5)
            leader.kill()
            killed_at = time.monotonic()
            survivors = cluster.peers_of(leader)
            new_leader(survivors, leader.name, cluster.names)
            failovers_s.append(round(time.monotonic() - killed_at, 2))
            leader.start(cluster.peers_of(leader))
        converge(cluster, workload)
    line = report("kill -9 the metadata leader", workload, failover_s_max=max(failovers_s),
                  failover_s_mean=round(sum(failovers_s) / len(failovers_s), 2))
    assert line["states"].get("present", 0) > 0


def test_sigstop_a_follower(cluster):
    workload = DefinitionsWorkload("ss")
    workload.setup(cluster.nodes[0])
    for round_number in range(ROUNDS):
        leader = cluster.wait_agreed(caught_up=True)
        followers = [n for n in cluster.nodes if n.name != leader]
        frozen = followers[round_number % len(followers)]
        changes(workload, cluster.nodes)
        frozen.pause()
        try:
            # The two others are a majority: every change goes through.
            before = workload.acknowledged
            changes(workload, cluster.peers_of(frozen))
            assert workload.acknowledged == before + CHANGES_PER_STEP, workload.errors[-3:]
            # Frozen long enough for the failure detector to see it silent.
            time.sleep(1.5)
        finally:
            frozen.resume()
        converge(cluster, workload)
    report("SIGSTOP a follower", workload)
    assert workload.retries == 0, workload.errors


def test_wipe_a_node_forget_it_and_let_it_join_again(cluster):
    workload = DefinitionsWorkload("wp")
    workload.setup(cluster.nodes[0])
    for round_number in range(ROUNDS):
        # Every node in turn, the lowest id among them: a fresh node must join the running
        # cluster, never form a second one.
        victim = cluster.nodes[round_number % len(cluster.nodes)]
        cluster.wait_agreed(caught_up=True)
        changes(workload, cluster.nodes)
        victim.kill()
        remaining = cluster.peers_of(victim)
        forgot = remaining[round_number % 2].ctl("forget_cluster_node", victim.name)
        assert forgot.returncode == 0, forgot.stdout + forgot.stderr
        remaining_names = sorted(n.name for n in remaining)
        eventually("membership without %s" % victim.name,
                   lambda: agreed(remaining, remaining_names))
        changes(workload, remaining)
        victim.wipe()
        victim.start(remaining)
        converge(cluster, workload)
    report("wipe a node, forget it, restart it", workload)


@pytest.fixture
def netns_cluster():
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    with started_cluster("part", netns=True) as cluster:
        yield cluster


def test_partition_the_leader_away(netns_cluster):
    cluster = netns_cluster
    workload = DefinitionsWorkload("pt")
    workload.setup(cluster.nodes[0])
    refusals = []
    for round_number in range(ROUNDS):
        old = cluster.node(cluster.wait_agreed(caught_up=True))
        changes(workload, cluster.nodes)
        cluster.partition(old)
        try:
            majority = cluster.peers_of(old)
            # The first round waits for the broker's own answer on both protocols (it gives
            # up after 30 s); later rounds give up on the client side after a few seconds.
            if round_number == 0:
                attempts = [("amqp", None), ("http", None)]
            else:
                attempts = [("http", 3)]
            outcomes = []

            def attempt(via, timeout):
                try:
                    outcomes.append(workload.attempt_refused(old, via, timeout))
                except AssertionError as e:
                    outcomes.append(e)
            threads = [threading.Thread(target=attempt, args=a) for a in attempts]
            for thread in threads:
                thread.start()
            new_leader(majority, old.name, cluster.names)
            changes(workload, majority)
            for thread in threads:
                thread.join(90)
            assert not any(t.is_alive() for t in threads), "a refused change still hangs"
            acknowledged = [o for o in outcomes if isinstance(o, AssertionError)]
            assert not acknowledged, acknowledged
            refusals += outcomes
        finally:
            cluster.heal(old)
        converge(cluster, workload)
    first_round = [text for _, text in refusals[:2]]
    report("partition the leader away", workload, refused=len(refusals),
           first_round_errors=first_round)
    # What the cut-off node answers, once its 30 s are up: AMQP a channel error, HTTP an error
    # status, both saying no majority confirmed the change.
    assert any("majority" in text for text in first_round), first_round

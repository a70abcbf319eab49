"""Chaos on a quorum queue (group of three) in a three-node cluster, with real processes: while
publishers with confirms and manual-ack consumers keep working through every node (a node that
does not lead the queue forwards publishes and consumers to its leader), one failure per round —

- kill -9 the queue's leader: a follower leads within seconds, the killed node restarts and
  its member catches up;
- SIGSTOP a follower of the queue, then SIGCONT;
- partition the queue's leader away (network namespaces, its veth down), then heal;
- kill a node, `forget_cluster_node` it (it leaves the queue's group), wipe its data, restart it
  (it joins as a new node) and `grow_quorum_queues` it (it is a member of the group again).

After the rounds, publishing stops and the consumers drain: lost (confirmed, never received)
must be 0 and unexpected (a body never published) 0; duplicates (at-least-once redeliveries
after a failure), nacks, consumer cancels and reconnects are counted and reported.

Rounds: WARREN_CHAOS_ROUNDS (default 20; test.sh runs 2, tools/chaos.sh the default). Every
test appends its report as a JSON line to WARREN_CHAOS_REPORT (see test_cluster_chaos.py)."""
import json
import os
import time
from urllib.parse import quote

import pytest

from cluster_nodes import Cluster, eventually, netns_unavailable
from message_workload import MessageWorkload
from own_broker import needs_warren_bin
from test_cluster_chaos import REPORT, ROUNDS
from test_cluster_quorum_follower import connect

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(240 + ROUNDS * 60)]

QUEUE = "qq-chaos"


def queue_info(node, timeout=5):
    response = node.request("GET", "/api/queues/%%2F/%s" % quote(QUEUE, safe=""),
                            timeout=timeout)
    return response.json() if response.status_code == 200 else None


def queue_leader(nodes, names, not_this=None):
    """The queue's leader that every node in `nodes` names (with all `names` as members), once
    they agree and it is not `not_this`."""
    def check():
        infos = [queue_info(n) for n in nodes]
        if any(i is None or sorted(i.get("members") or []) != sorted(names) for i in infos):
            return None
        leaders = {i.get("leader") for i in infos}
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        return leader if leader in names and leader != not_this else None
    return eventually("one leader of %s on %s" % (QUEUE, [n.name for n in nodes]), check,
                      timeout=90)


def caught_up(cluster):
    """Every member of the queue's group runs and holds, as its leader sees it, the log the
    leader had committed when asked (the workload keeps the log growing meanwhile)."""
    leader = cluster.node(queue_leader(cluster.nodes, cluster.names))

    def view():
        # The queue's `raft` object on the leader: its member's view of the group, with each
        # member's matched log index as the leader knows it.
        info = queue_info(leader) or {}
        raft = info.get("raft") or {}
        return raft if raft.get("state") == "leader" else None
    committed = eventually("the leader's commit index",
                           lambda: (view() or {}).get("commit_index"))

    def check():
        now = view()
        if now is None:
            return False
        members = now.get("members") or []
        return (len(members) == 3 and all(m.get("online") for m in members)
                and all(m.get("name") == now.get("node")
                        or (m.get("matched_index") or 0) >= committed for m in members))
    eventually("every member of %s caught up" % QUEUE, check, timeout=90)


def start_workload(cluster, tag):
    conn = connect(cluster.nodes[0])
    conn.channel().queue_declare(QUEUE, durable=True, arguments={
        "x-queue-type": "quorum", "x-quorum-initial-group-size": 3})
    conn.close()
    queue_leader(cluster.nodes, cluster.names)
    # One publisher and one consumer per node, each moving to the next node when its fails.
    workload = MessageWorkload(tag, QUEUE, cluster.nodes, cluster.nodes, prefetch=20,
                               publish_interval_s=0.01)
    workload.start()
    return workload


def where_lost_messages_are(cluster, lost):
    """After a drain that missed confirmed messages: what every node says of the queue (ready,
    unacked, consumers, Raft state), and whether a fresh basic.get through each node finds the
    missing bodies (then they were stuck in the queue, not lost from its log)."""
    seen = {}
    for node in cluster.nodes:
        try:
            info = queue_info(node) or {}
            seen[node.name] = {key: info.get(key) for key in (
                "leader", "members", "messages_ready", "messages_unacknowledged",
                "consumers", "consumer_details")}
            seen[node.name]["raft"] = info.get("raft")
        except Exception as e:  # noqa: BLE001 — diagnostics only, never hide the real failure
            seen[node.name] = repr(e)
    found = {}
    for node in cluster.nodes:
        try:
            conn = connect(node)
            channel = conn.channel()
            bodies = []
            while len(bodies) < 10000:
                method, _properties, body = channel.basic_get(QUEUE, auto_ack=False)
                if method is None:
                    break
                bodies.append((body.decode(errors="replace"), method.redelivered))
            found[node.name] = [b for b in bodies if b[0] in lost] + ["%d got" % len(bodies)]
            conn.close()
        except Exception as e:  # noqa: BLE001
            found[node.name] = repr(e)
    return {"queue": seen, "basic_get_finds": found}


def finish(test, workload, cluster=None, **extra):
    result = workload.drain(timeout=120)
    line = {"test": test, "rounds": ROUNDS, **result, **extra}
    with open(REPORT, "a") as f:
        f.write(json.dumps(line) + "\n")
    print(json.dumps(line))
    lost = sorted(workload.confirmed - workload.received)
    if lost and cluster is not None:
        where = where_lost_messages_are(cluster, set(lost))
        print("LOST %s; where: %s" % (lost[:20], json.dumps(where, default=str)))
    assert result["lost"] == 0, (result, lost[:5], workload.errors[-5:])
    assert result["unexpected"] == 0, (result, workload.unexpected[:5])
    assert result["confirmed"] > 0 and result["received"] > 0, result
    return line


def cluster_fixture(netns):
    def fixture():
        if netns:
            reason = netns_unavailable()
            if reason:
                pytest.skip(reason)
        cluster = Cluster("qqchaos", netns=netns)
        try:
            cluster.start(timeout=90)
            yield cluster
        finally:
            cluster.close()
    return fixture


cluster = pytest.fixture(cluster_fixture(False))
netns_cluster = pytest.fixture(cluster_fixture(True))


def test_kill_9_the_queue_leader(cluster):
    workload = start_workload(cluster, "qk%d" % os.getpid())
    failovers_s = []
    for _ in range(ROUNDS):
        caught_up(cluster)
        time.sleep(1)
        leader = cluster.node(queue_leader(cluster.nodes, cluster.names))
        leader.kill()
        killed_at = time.monotonic()
        queue_leader(cluster.peers_of(leader), cluster.names, not_this=leader.name)
        failovers_s.append(round(time.monotonic() - killed_at, 2))
        leader.start(cluster.peers_of(leader))
    caught_up(cluster)
    finish("quorum queue: kill -9 its leader", workload, cluster, failover_s_max=max(failovers_s),
           failover_s_mean=round(sum(failovers_s) / len(failovers_s), 2))


def test_sigstop_a_queue_follower(cluster):
    workload = start_workload(cluster, "qs%d" % os.getpid())
    for round_number in range(ROUNDS):
        caught_up(cluster)
        leader = queue_leader(cluster.nodes, cluster.names)
        followers = [n for n in cluster.nodes if n.name != leader]
        frozen = followers[round_number % len(followers)]
        frozen.pause()
        try:
            time.sleep(3)
        finally:
            frozen.resume()
    caught_up(cluster)
    finish("quorum queue: SIGSTOP a follower", workload, cluster)


def test_wipe_a_node_forget_it_and_restart_it(cluster):
    workload = start_workload(cluster, "qw%d" % os.getpid())
    for round_number in range(ROUNDS):
        caught_up(cluster)
        victim = cluster.nodes[round_number % len(cluster.nodes)]
        victim.kill()
        remaining = cluster.peers_of(victim)
        queue_leader(remaining, cluster.names, not_this=victim.name)
        forgot = remaining[round_number % 2].ctl("forget_cluster_node", victim.name)
        assert forgot.returncode == 0, forgot.stdout + forgot.stderr
        victim.wipe()
        victim.start(remaining)
        cluster.wait_agreed(timeout=90)
        # As `rabbitmq-queues grow`: the new node joins the queue's group again (its member
        # starts once the node applied the grow's record of the group's members).
        eventually("%s knows %s" % (victim.name, QUEUE), lambda: queue_info(victim), timeout=60)
        # The node asked learns that the restarted one runs from its failure detector, a
        # little after the membership agreed; until then it refuses the grow with 503 "is
        # not running", as rabbitmq-queues grow refuses a node that is down.
        asked = remaining[round_number % 2]

        def grow():
            grown = asked.ctl("grow_quorum_queues", victim.name)
            if grown.returncode != 0 and "is not running" in grown.stderr:
                return None
            assert grown.returncode == 0, grown.stdout + grown.stderr
            return grown

        eventually("%s grows %s's queues" % (asked.name, victim.name), grow, timeout=30)
    caught_up(cluster)
    finish("quorum queue: wipe a node, forget it, restart it", workload, cluster)


def test_partition_the_queue_leader_away(netns_cluster):
    cluster = netns_cluster
    workload = start_workload(cluster, "qp%d" % os.getpid())
    for _ in range(ROUNDS):
        caught_up(cluster)
        old = cluster.node(queue_leader(cluster.nodes, cluster.names))
        cluster.partition(old)
        try:
            queue_leader(cluster.peers_of(old), cluster.names, not_this=old.name)
            time.sleep(2)
        finally:
            cluster.heal(old)
    caught_up(cluster)
    finish("quorum queue: partition its leader away", workload, cluster)

#!/usr/bin/env python3
"""A Jepsen-style run against a 3-node Warren cluster of real processes: a quorum queue under
publishers with confirms and manual-ack consumers on every node (each moving to the next node
when its own fails, `message_workload.py`), while a schedule drawn from a seed injects one
fault after another —

- kill-leader / kill-node: kill -9 of the queue's leader or of any node, restarted after a
  while;
- stall-leader / stall-node: SIGSTOP for a few seconds, then SIGCONT;
- restart-node: a clean stop (SIGTERM) and a start;
- rolling-restart: every node in turn;
- partition-leader / partition-node (network namespaces, when this machine has them: root,
  `ip netns`): the node's cluster link down, healed after a while;

waiting after each for the cluster to heal (every node agreeing on the members and the
queue's leader, every member caught up). Then publishing stops, the consumers drain, and the
checker reads the history: lost (confirmed, never consumed) must be 0, unexpected (consumed,
never published) 0; duplicates (at-least-once redeliveries), nacks and reconnects are
reported. Prints the seed and every fault with its time, so that a failing schedule replays
(`--seed`). Exit status 1 on a violation.

Usage (from the repository root, after tests/interop/venv.sh):
  WARREN_BIN=target/release/warren tests/interop/.venv/bin/python tools/jepsen.py \\
      [--minutes M] [--seed S] [--no-netns]
`just jepsen MINUTES` runs it; ./test.sh runs a short one with fixed seeds
(tests/interop/py/test_cluster_jepsen.py).
"""
import argparse
import json
import os
import random
import sys
import time

import pika

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "interop", "py"))
from cluster_nodes import Cluster, eventually, netns_unavailable  # noqa: E402
from message_workload import MessageWorkload  # noqa: E402

QUEUE = "jepsen-qq"
FAULTS = ["kill-leader", "kill-node", "stall-leader", "stall-node", "restart-node",
          "rolling-restart"]
NETNS_FAULTS = ["partition-leader", "partition-node"]


def queue_view(node):
    return node.queue(QUEUE) or {}


def agreed_leader(nodes, names):
    """The queue's leader every node in `nodes` names, with all `names` as members."""
    views = [queue_view(n) for n in nodes]
    if any(sorted(v.get("members") or []) != sorted(names) for v in views):
        return None
    leaders = {v.get("leader") for v in views}
    return leaders.pop() if len(leaders) == 1 and None not in leaders else None


def healed(cluster):
    """Every node agrees on the membership and the queue's leader, and the leader sees every
    member online and caught up."""
    cluster.wait_agreed(timeout=120)
    leader = cluster.node(eventually("one leader of %s on every node" % QUEUE,
                                     lambda: agreed_leader(cluster.nodes, cluster.names),
                                     timeout=120))

    def caught_up():
        raft = queue_view(leader).get("raft") or {}
        members = raft.get("members") or []
        return (raft.get("state") == "leader" and len(members) == len(cluster.names)
                and all(m.get("online") and m.get("lag") == 0 for m in members))
    eventually("every member of %s caught up" % QUEUE, caught_up, timeout=120)
    return leader


def inject(cluster, fault, rng, log):
    """Injects `fault` and undoes it (restart, SIGCONT, heal); returns when the cluster healed."""
    leader = healed(cluster)
    victim = leader if fault.endswith("-leader") else rng.choice(cluster.nodes)
    hold_s = round(rng.uniform(1.0, 6.0), 1)
    log(fault, victim.name if fault != "rolling-restart" else "all", hold_s)
    if fault.startswith("kill-"):
        victim.kill()
        time.sleep(hold_s)
        victim.start(cluster.peers_of(victim))
    elif fault.startswith("stall-"):
        victim.pause()
        try:
            time.sleep(hold_s)
        finally:
            victim.resume()
    elif fault == "restart-node":
        cluster.restart(victim)
    elif fault == "rolling-restart":
        for node in cluster.nodes:
            cluster.restart(node)
            healed(cluster)
    elif fault.startswith("partition-"):
        cluster.partition(victim)
        try:
            time.sleep(hold_s)
        finally:
            cluster.heal(victim)
    healed(cluster)


def run(seconds, seed, netns, tag="jepsen"):
    """One run; returns the result (seed, schedule, the checker's counts, `ok`)."""
    rng = random.Random(seed)
    faults = FAULTS + (NETNS_FAULTS if netns else [])
    cluster = Cluster("jepsen", netns=netns)
    started = time.monotonic()
    schedule = []

    def log(fault, victim, hold_s):
        at = round(time.monotonic() - started, 1)
        schedule.append({"at_s": at, "fault": fault, "node": victim, "hold_s": hold_s})
        print("  %6.1f s  %-16s %s (%.1f s)" % (at, fault, victim, hold_s), flush=True)

    try:
        cluster.start(timeout=120)
        # The node's own URL: in network namespaces the nodes have a user of their own.
        conn = pika.BlockingConnection(pika.URLParameters(cluster.nodes[0].amqp_url))
        conn.channel().queue_declare(QUEUE, durable=True, arguments={
            "x-queue-type": "quorum", "x-quorum-initial-group-size": 3})
        conn.close()
        healed(cluster)
        workload = MessageWorkload("%s%d" % (tag, seed), QUEUE, cluster.nodes, cluster.nodes,
                                   prefetch=20, publish_interval_s=0.01)
        workload.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.5, 3.0))
            inject(cluster, rng.choice(faults), rng, log)
        healed(cluster)
        counts = workload.drain(timeout=120)
        final_leader = agreed_leader(cluster.nodes, cluster.names)
    finally:
        cluster.close()
    ok = (counts["lost"] == 0 and counts["unexpected"] == 0 and counts["confirmed"] > 0
          and counts["received"] > 0 and final_leader is not None)
    return {"seed": seed, "seconds": seconds, "netns": netns, "faults": len(schedule),
            "schedule": schedule, **counts, "agreed_leader": final_leader, "ok": ok,
            "lost_bodies": sorted(workload.confirmed - workload.received)[:20],
            "unexpected_bodies": workload.unexpected[:20]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-netns", action="store_true",
                        help="no partitions even where network namespaces work")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    netns = not args.no_netns and netns_unavailable() is None
    print("jepsen: seed %d, %.1f minutes, partitions %s" % (
        seed, args.minutes, "on" if netns else "off (%s)" % (netns_unavailable() or "--no-netns")),
        flush=True)
    result = run(args.minutes * 60, seed, netns)
    print(json.dumps({k: v for k, v in result.items() if k != "schedule"}))
    print("jepsen: %s (replay: --seed %d)" % ("ok" if result["ok"] else "VIOLATION", seed))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()

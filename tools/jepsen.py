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
- wipe-rejoin: a node killed, its data wiped and started again (refused: a new incarnation),
  forgotten through another node (`forget_cluster_node`), after which it joins as a new node
  and the queue grows back onto it (continuous membership reconciliation);
- add-forget-node: a fourth node joins the running cluster, then is stopped and forgotten;
- partition-leader / partition-node (network namespaces, when this machine has them: root,
  `ip netns`): the node's cluster link down, healed after a while;
- between two nodes, through the fault-injecting proxy every cluster connection crosses in
  network namespaces (`fault_proxy.py`): bridge (one pair cut, the third node sees both
  halves), one-way (one direction of a pair held), flap (a pair cut and healed every few
  hundred milliseconds), slow-links (20-300 ms on a node's links), reset-links (a node's
  connections reset), overlap (a pair cut while the third node is stalled: no majority
  anywhere for a while);
- disk-full (root): every node's data directory is a small disk of its own (ext4 on a loop
  device, or a tmpfs); the node's is filled to the last byte (writes fail with ENOSPC), then
  freed; slow-disk (a loop device and cgroup v1's blkio throttle): the node's disk takes 10,
  30 or 100 writes a second (an fsync takes tenths of a second), then its full speed again;

while a definitions workload declares and deletes exchanges, queues, bindings, users and
vhosts through every node (`definitions_workload.py`), and

waits after each fault for the cluster to heal (every node agreeing on the members and the
queue's leader, every member caught up). Then publishing stops, the consumers drain, and the
checkers read the history: lost (confirmed, never consumed) must be 0, unexpected (consumed,
never published) 0, consumers cancelled 0 (a quorum queue's consumers stay attached through
every fault); duplicates (at-least-once redeliveries), nacks and reconnects are reported; every node has every acknowledged definitions change and none it refused, and all
agree. Prints the seed and every fault with its time, so that a failing schedule replays
(`--seed`). Exit status 1 on a violation.

The same schedule runs against a RabbitMQ cluster (`--broker rabbitmq`, Debian's package, one
node per network namespace, `rabbitmq_nodes.py`) for the side-by-side record in
docs/CLUSTERING.md: a seed and a `--faults` list draw the same faults, victims (by position)
and hold times for both. Every fault also reports the longest time without a confirm while it
was injected and healed (the availability gap).

Usage (from the repository root, after tests/interop/venv.sh):
  WARREN_BIN=target/release/warren tests/interop/.venv/bin/python tools/jepsen.py \\
      [--minutes M] [--seed S] [--no-netns] [--faults a,b,...] [--broker warren|rabbitmq]
`just jepsen MINUTES` runs it; ./test.sh runs a short one with fixed seeds
(tests/interop/py/test_cluster_jepsen.py).
"""
import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import time

import pika

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "interop", "py"))
from cluster_nodes import Cluster, eventually, netns_unavailable  # noqa: E402
from definitions_workload import ContinuousChanges, DefinitionsWorkload  # noqa: E402
from message_workload import MessageWorkload  # noqa: E402
from rabbitmq_nodes import RabbitCluster, rabbitmq_unavailable  # noqa: E402

QUEUE = "jepsen-qq"
# A member this close to the leader's log counts as caught up (entries in flight).
CAUGHT_UP_LAG = 64
FAULTS = ["kill-leader", "kill-node", "stall-leader", "stall-node", "restart-node",
          "rolling-restart", "wipe-rejoin", "add-forget-node"]
NETNS_FAULTS = ["partition-leader", "partition-node", "bridge", "one-way", "flap",
                "slow-links", "reset-links", "overlap"]
# Root only (a tmpfs per node), which network namespaces need too.
DISK_FAULTS = ["disk-full"]  # and slow-disk, where `Node.can_slow_disk`
DISK_MB = 256


def short(node):
    return node.name.split("@")[0]


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
    member online and caught up (within the entries in flight: under the publishers' steady
    load, and the proxy's hop, a follower is rarely at lag 0 at the moment it is asked). The
    leader is asked again each time: the one every node named a moment ago may have been a
    stale view (nodes still naming a leader cut off during a partition)."""
    cluster.wait_agreed(timeout=cluster.heal_timeout_s)
    return eventually("one leader of %s on every node, every member caught up" % QUEUE,
                      lambda: cluster.queue_leader_caught_up(QUEUE, CAUGHT_UP_LAG),
                      timeout=cluster.heal_timeout_s)


def inject(cluster, fault, rng, log):
    """Injects `fault` and undoes it (restart, SIGCONT, heal); returns when the cluster healed."""
    leader = healed(cluster)
    victim = leader if fault.endswith("-leader") else rng.choice(cluster.nodes)
    a, b = rng.sample(cluster.nodes, 2)
    hold_s = round(rng.uniform(1.0, 6.0), 1)
    pair = "%s-%s" % (short(a), short(b))
    via = rng.choice(cluster.peers_of(victim))
    target = {"rolling-restart": "all", "bridge": pair, "one-way": pair + " (to)",
              "flap": pair, "overlap": pair,
              "add-forget-node": cluster.spares[0].name}.get(fault, victim.name)
    entry = log(fault, target, hold_s)
    if fault in ("bridge", "one-way", "overlap"):
        third = next(n for n in cluster.nodes if n not in (a, b))
        cluster.cut(a, b, one_way=fault == "one-way")
        if fault == "overlap":
            third.pause()
        try:
            time.sleep(hold_s)
        finally:
            if fault == "overlap":
                third.resume()
            cluster.heal_pair(a, b)
    elif fault == "flap":
        end = time.monotonic() + hold_s
        while time.monotonic() < end:
            cluster.cut(a, b)
            time.sleep(rng.uniform(0.1, 0.8))
            cluster.heal_pair(a, b)
            time.sleep(rng.uniform(0.1, 0.8))
    elif fault == "slow-links":
        delay_ms = rng.choice([20, 100, 300])
        others = [n for n in cluster.nodes if n is not victim]
        for other in others:
            cluster.delay(victim, other, delay_ms)
        try:
            time.sleep(hold_s)
        finally:
            for other in others:
                cluster.delay(victim, other, 0)
    elif fault == "reset-links":
        cluster.reset(victim)
    elif fault == "slow-disk":
        victim.slow_disk(rng.choice([10, 30, 100]))
        try:
            time.sleep(hold_s)
        finally:
            victim.slow_disk(0)
    elif fault == "disk-full":
        victim.fill_disk()
        try:
            time.sleep(hold_s)
        finally:
            victim.free_disk()
    elif fault.startswith("kill-"):
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
    elif fault == "wipe-rejoin":
        cluster.wipe_and_rejoin(victim, via, hold_s)
    elif fault == "add-forget-node":
        spare = cluster.add_spare()
        time.sleep(hold_s)
        cluster.forget_spare(spare, via)
    healed(cluster)
    entry["healed_at"] = time.monotonic()


def make_cluster(broker, netns):
    """The cluster under test and the faults it can take: Warren's (`Cluster`), or RabbitMQ's
    (`RabbitCluster`, network namespaces only; no faults through the proxy, which RabbitMQ's
    distribution does not cross)."""
    if broker == "rabbitmq":
        if not netns:
            raise ValueError("RabbitMQ runs need network namespaces (root)")
        if rabbitmq_unavailable():
            raise ValueError(rabbitmq_unavailable())
        cluster = RabbitCluster(spares=1, disk_mb=DISK_MB)
        faults = FAULTS + ["partition-leader", "partition-node"] + DISK_FAULTS
    else:
        cluster = Cluster("jepsen", netns=netns, proxy=netns,
                          disk_mb=DISK_MB if netns else None, spares=1)
        faults = FAULTS + (NETNS_FAULTS + DISK_FAULTS if netns else [])
    if netns and cluster.nodes[0].can_slow_disk():
        faults.append("slow-disk")
    return cluster, faults


def run(seconds, seed, netns, tag="jepsen", only=None, broker="warren"):
    """One run; returns the result (seed, schedule, the checker's counts, `ok`). `only`: the
    faults to draw from, in that order (default: every one this machine can inject): one seed
    and one list draw the same schedule against either `broker` ("warren", "rabbitmq")."""
    rng = random.Random(seed)
    lost_details = None
    cluster, faults = make_cluster(broker, netns)
    if only:
        unknown = set(only) - set(faults)
        if unknown:
            cluster.close()
            raise ValueError("faults not known or not possible here: %s" % sorted(unknown))
        faults = list(only)
    started = time.monotonic()
    schedule = []
    # A run that fails (an exception, or a checker's finding) keeps its nodes' logs and data.
    ok = False
    stuck = None

    def log(fault, victim, hold_s):
        now = time.monotonic()
        at = round(now - started, 1)
        entry = {"at_s": at, "fault": fault, "node": victim, "hold_s": hold_s, "at": now}
        schedule.append(entry)
        print("  %6.1f s  %-16s %s (%.1f s)" % (at, fault, victim, hold_s), flush=True)
        return entry

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
        # The definitions checker reads each node's definitions through Warren's HTTP API
        # (RabbitMQ's nodes run without the management plugin here).
        definitions = DefinitionsWorkload("jd%d" % seed) if broker == "warren" else None
        if definitions:
            definitions.setup(cluster.nodes[0])
        changes = (ContinuousChanges(definitions, cluster.nodes, pause_s=0.5) if definitions
                   else contextlib.nullcontext())
        with changes:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(0.5, 3.0))
                try:
                    inject(cluster, rng.choice(faults), rng, log)
                except AssertionError as e:
                    # The cluster did not heal, or a node did not come back, in time: a
                    # finding of its own. No more faults; the checkers still read what the
                    # clients saw.
                    stuck = str(e)
                    print("  stuck: %s" % stuck, flush=True)
                    break
        if stuck is None:
            healed(cluster)
        counts = workload.drain(timeout=120)
        final_leader = agreed_leader(cluster.nodes, cluster.names)
        # Applied everywhere once healed: a node may still be catching up its metadata log.
        problems = None
        try:
            if definitions:
                eventually("every node agreeing with the definitions record",
                           lambda: definitions.check(cluster.nodes) is None, timeout=60)
        except AssertionError:
            problems = definitions.check(cluster.nodes)
        if counts["lost"]:
            lost_details = describe_lost(workload, cluster, schedule, started)
        # A quorum queue's consumers are never cancelled while the queue exists (RabbitMQ's
        # are not): a basic.cancel is a violation too.
        ok = (counts["lost"] == 0 and counts["unexpected"] == 0 and counts["confirmed"] > 0
              and counts["received"] > 0 and final_leader is not None and problems is None
              and counts["consumer_cancels"] == 0 and stuck is None)
    finally:
        cluster.close(keep_logs=not ok)
    for entry in schedule:
        healed_at = entry.pop("healed_at", None)
        at = entry.pop("at")
        entry["heal_s"] = round(healed_at - at, 1) if healed_at else None
        gap = workload.longest_gap_s(at, healed_at or at)
        entry["gap_s"] = round(gap, 2) if gap is not None else None
    return {"broker": broker, "seed": seed, "seconds": seconds, "netns": netns,
            "faults": len(schedule),
            "schedule": schedule, "gaps": gaps_by_fault(schedule), **counts,
            "agreed_leader": final_leader, "ok": ok, "stuck": stuck,
            "definitions": definitions.summary() if definitions else None,
            "definitions_problems": problems,
            "cancels_at": [(round(at - started, 1), node) for at, node in workload.cancel_log],
            "lost_bodies": sorted(workload.confirmed - workload.received)[:20],
            "lost_details": lost_details,
            "unexpected_bodies": workload.unexpected[:20]}


def describe_lost(workload, cluster, schedule, started):
    """What a lost message's trail is, read before the nodes stop: when it was confirmed and
    through which node, the faults around then, what each node's API says of the queue, and
    which nodes still hold the body in their data (committed to their log or snapshot)."""
    lost = sorted(workload.confirmed - workload.received)[:20]
    messages = []
    for body in lost:
        at, node = workload.confirm_log.get(body, (None, None))
        rel = round(at - started, 1) if at is not None else None
        near = [{"at_s": e["at_s"], "fault": e["fault"], "node": e["node"], "hold_s": e["hold_s"]}
                for e in schedule if rel is not None and rel - 30 <= e["at_s"] <= rel + 5]
        held_by = []
        for n in cluster.nodes:
            data_dir = getattr(n, "data_dir", None)
            if data_dir and os.path.isdir(data_dir):
                found = subprocess.run(["grep", "-rlaF", body, data_dir],
                                       capture_output=True, text=True).stdout.split()
                if found:
                    held_by.append({"node": n.name,
                                    "files": [os.path.relpath(f, data_dir) for f in found]})
        messages.append({"body": body, "confirmed_at_s": rel, "published_via": node,
                         "faults_before": near, "in_data_of": held_by})
    queues = {}
    for n in cluster.nodes:
        try:
            q = n.queue(QUEUE) or {}
        except Exception as e:  # noqa: BLE001 (a node that does not answer is reported as such)
            q = {"error": str(e)}
        queues[n.name] = {k: q.get(k) for k in ("messages", "messages_ready",
                                                 "messages_unacknowledged", "consumers",
                                                 "leader", "members", "error")}
    return {"messages": messages, "queue_on_each_node": queues}


def gaps_by_fault(schedule):
    """Per fault: how often it ran and the longest time without a confirm while it was
    injected and healed, mean and max over its runs (seconds)."""
    by_fault = {}
    for entry in schedule:
        if entry.get("gap_s") is not None:
            by_fault.setdefault(entry["fault"], []).append(entry["gap_s"])
    return {fault: {"runs": len(gaps), "gap_mean_s": round(sum(gaps) / len(gaps), 2),
                    "gap_max_s": max(gaps)}
            for fault, gaps in sorted(by_fault.items())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-netns", action="store_true",
                        help="no partitions even where network namespaces work")
    parser.add_argument("--broker", choices=["warren", "rabbitmq"], default="warren",
                        help="the cluster under test: Warren (WARREN_BIN) or RabbitMQ "
                        "(Debian's rabbitmq-server package), for side-by-side runs")
    parser.add_argument("--faults", default=None,
                        help="comma-separated faults to draw from (default: all), e.g. "
                        "disk-full,kill-leader")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    netns = not args.no_netns and netns_unavailable() is None
    print("jepsen: %s, seed %d, %.1f minutes, partitions %s" % (
        args.broker, seed, args.minutes, "on" if netns else "off (%s)" % (netns_unavailable() or "--no-netns")),
        flush=True)
    result = run(args.minutes * 60, seed, netns,
                 only=args.faults.split(",") if args.faults else None, broker=args.broker)
    print(json.dumps({k: v for k, v in result.items() if k not in ("schedule", "gaps")}))
    for fault, gaps in result["gaps"].items():
        print("  %-16s runs %3d  confirm gap mean %6.2f s  max %6.2f s" % (
            fault, gaps["runs"], gaps["gap_mean_s"], gaps["gap_max_s"]))
    print("jepsen: %s (replay: --seed %d)" % ("ok" if result["ok"] else "VIOLATION", seed))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()

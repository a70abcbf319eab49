#!/usr/bin/env python3
"""How long confirms stop when a quorum queue's node fails: a 3-node Warren cluster (real
processes, loopback), one quorum queue, a confirming publisher (pika, one message in flight, so
each confirm's time is exact) on every node that stays up, then one fault per round:

- `kill-leader`: kill -9 of the queue's leader; the publishers run on the two survivors;
- `sigstop-follower`: SIGSTOP of a follower for STALL seconds, then SIGCONT; the publisher runs
  on the leader's node;
- `restart-follower`: a clean stop (SIGTERM) of a follower, started again at once; the
  publisher runs on the leader's node;
- `rolling-restart`: every node in turn stopped cleanly, started again, and waited for until
  the cluster agrees and has caught up; a publisher starts on each node and moves to the next
  node when its node goes (reconnects counted).

Prints, per round and publisher, the longest time without a confirm after the fault and the
nacks, and for kill-leader how soon every survivor's API named a new leader.

Usage (from the repository root, after tests/interop/venv.sh):
  WARREN_BIN=target/release/warren tests/interop/.venv/bin/python \
      tools/bench/quorum_failover_gap.py kill-leader [ROUNDS]
  WARREN_BIN=... tests/interop/.venv/bin/python tools/bench/quorum_failover_gap.py \
      sigstop-follower [ROUNDS] [STALL]
  WARREN_BIN=... tests/interop/.venv/bin/python tools/bench/quorum_failover_gap.py \
      restart-follower|rolling-restart [ROUNDS]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "interop", "py"))
from confirm_publisher import ConfirmPublisher  # noqa: E402
from cluster_nodes import agreed_queue_leader, eventually, started_cluster  # noqa: E402

QUEUE = "failover-gap"


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "kill-leader"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    stall_s = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    with started_cluster("gap") as cluster:
        nodes = cluster.nodes
        names = sorted(n.name for n in nodes)
        conn = nodes[0].connect()
        conn.channel().queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
        conn.close()
        for round_number in range(rounds):
            leader = cluster.node(eventually("the queue's leader", lambda: agreed_queue_leader(
                nodes, QUEUE, members=names), timeout=90))
            others = [n for n in nodes if n is not leader]
            if mode == "kill-leader":
                publishers = [ConfirmPublisher(n, QUEUE) for n in others]
            elif mode == "rolling-restart":
                publishers = [ConfirmPublisher(n, QUEUE, fallback=[p for p in nodes if p is not n])
                              for n in nodes]
            else:
                publishers = [ConfirmPublisher(leader, QUEUE)]
            for publisher in publishers:
                publisher.start()
            time.sleep(3)
            fault_at = time.monotonic()
            elected = None
            if mode == "kill-leader":
                leader.kill()
                eventually("a new leader", lambda: (lambda l: l if l and l != leader.name
                                                    else None)(
                    agreed_queue_leader(others, QUEUE, members=names)), timeout=60)
                elected = time.monotonic() - fault_at
            elif mode == "sigstop-follower":
                others[0].pause()
                time.sleep(stall_s)
                others[0].resume()
            elif mode == "restart-follower":
                cluster.restart(others[0])
                cluster.wait_agreed(timeout=90, caught_up=True)
            else:
                for node in nodes:
                    cluster.restart(node)
                    cluster.wait_agreed(timeout=90, caught_up=True)
                    # As an operator waits before the next node (RabbitMQ's
                    # check_if_node_is_quorum_critical): the queue's members all online and
                    # caught up on its leader.
                    eventually("every member of the queue caught up", lambda: queue_caught_up(
                        nodes, names), timeout=90)
            time.sleep(10)
            for publisher in publishers:
                publisher.stop()
                print("round %d, %s, via %s: longest gap %.3f s, nacks %d, reconnects %d" % (
                    round_number, mode, publisher.node.name,
                    publisher.longest_gap_since(fault_at), publisher.nacks,
                    publisher.reconnects))
            if elected is not None:
                print("round %d: every survivor named the new leader after %.2f s" % (
                    round_number, elected))
                leader.start(cluster.peers_of(leader))
                cluster.wait_agreed(timeout=90)


def queue_caught_up(nodes, names):
    """Whether the queue's leader sees every member online and at lag 0."""
    leader_name = agreed_queue_leader(nodes, QUEUE, members=names)
    if not leader_name:
        return False
    leader = next(n for n in nodes if n.name == leader_name)
    raft = (leader.queue(QUEUE) or {}).get("raft") or {}
    members = raft.get("members") or []
    return len(members) == len(names) and all(
        m.get("online") and m.get("lag") == 0 for m in members)


if __name__ == "__main__":
    main()

"""Three `warren server` processes started with each other's cluster addresses form one
cluster: `warren ctl cluster_status` and /api/nodes on every node show the same three members
and one metadata-group leader; kill -9 of the leader gives a new leader among the other two and
shows the dead node down; restarted, it rejoins and catches up; a node with another secret is
refused; a forgotten node leaves the membership, and is added back with add_cluster_node.
Over mutual TLS two nodes form a cluster and a node without TLS does not get in."""
import os
import shutil
import tempfile
import time

import pika
import pytest

import tls_certs
from cluster_nodes import Node, agreed, eventually, members
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]


# Three brokers, a failover, restarts and membership changes: minutes on a slow machine.
@pytest.mark.timeout(300)
def test_three_nodes_form_one_cluster_fail_over_rejoin_and_change_membership():
    root = tempfile.mkdtemp(prefix="warren-cluster-")
    secret_file = os.path.join(root, "secret")
    with open(secret_file, "w") as f:
        f.write("a-shared-cluster-secret\n")
    nodes = [Node(root, "warren%d@127.0.0.1" % i, secret_file) for i in (1, 2, 3)]
    by_name = {n.name: n for n in nodes}
    names = [n.name for n in nodes]
    intruder = None
    try:
        for node in nodes:
            node.start([p for p in nodes if p is not node])

        # One cluster: the same three members and one leader, seen from every node.
        leader = eventually("three nodes in one cluster", lambda: agreed(nodes, names))
        for node in nodes:
            listed = node.get("/api/nodes")
            assert sorted(n["name"] for n in listed) == sorted(names)
            assert all(n["running"] and n["type"] == "disc" for n in listed)
            text = node.ctl("cluster_status")
            assert text.returncode == 0, text.stderr
            assert "Leader: %s" % leader in text.stdout
            for name in names:
                assert name in text.stdout

        # A quorum queue on a cluster node works as on a single node (a group of one member).
        amqp = pika.BlockingConnection(pika.URLParameters(
            "amqp://guest:guest@127.0.0.1:%d/%%2F" % nodes[0].amqp_port))
        channel = amqp.channel()
        channel.confirm_delivery()
        channel.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum"})
        for i in range(5):
            channel.basic_publish("", "qq", b"m%d" % i)
        got = [channel.basic_get("qq", auto_ack=True)[2] for _ in range(5)]
        assert got == [b"m%d" % i for i in range(5)]
        amqp.close()

        # Prometheus: every member up, and the metadata group's term and indexes.
        for node in nodes:
            metrics = node.metrics()
            for name in names:
                assert 'warren_cluster_node_up{node="%s"} 1' % name in metrics, metrics
            assert "warren_raft_metadata_term_total " in metrics
            assert "warren_raft_metadata_log_last_applied_index " in metrics
        assert "warren_raft_metadata_is_leader 1" in by_name[leader].metrics()

        # kill -9 the metadata leader: the other two elect one of themselves.
        by_name[leader].kill()
        survivors = [n for n in nodes if n.name != leader]

        def new_leader():
            chosen = agreed(survivors, names)
            if chosen is None or chosen == leader:
                return None
            down = [m for m in survivors[0].status()["members"] if m["name"] == leader]
            return chosen if down and not down[0]["running"] else None

        successor = eventually("a new leader among the survivors", new_leader)
        assert successor in {n.name for n in survivors}
        ctl_text = survivors[0].ctl("cluster_status").stdout
        assert "%s at %s: down" % (leader, by_name[leader].address) in ctl_text

        # Restarted, it rejoins (as the same member, not a new cluster) and catches up.
        by_name[leader].start([p for p in nodes if p is not by_name[leader]])
        eventually("the restarted node back and up", lambda: agreed(nodes, names) and all(
            m["running"] for m in nodes[0].status()["members"]))

        def caught_up():
            status = by_name[agreed(nodes, names)].status()
            lags = [m["lag"] for m in status["members"]]
            return all(lag == 0 for lag in lags)
        eventually("every member caught up (lag 0)", caught_up)

        # A node with another secret is refused: it never joins, and says why in its log.
        bad_secret = os.path.join(root, "bad-secret")
        with open(bad_secret, "w") as f:
            f.write("not-the-secret\n")
        intruder = Node(root, "intruder@127.0.0.1", bad_secret)
        intruder.start(nodes)
        eventually("the intruder's handshake refusal in its log",
                   lambda: "handshake failed" in intruder.log())
        time.sleep(2)
        for node in nodes:
            assert "intruder@127.0.0.1" not in members(node.status())
        assert members(intruder.status()) in ([], ["intruder@127.0.0.1"])
        intruder.stop()

        # Forget a (stopped) node: two members remain and keep a leader.
        forgotten = nodes[2]
        forgotten.stop()
        remaining = nodes[:2]
        result = remaining[0].ctl("forget_cluster_node", forgotten.name)
        assert result.returncode == 0, result.stderr + result.stdout
        eventually("membership of two", lambda: agreed(remaining, [n.name for n in remaining]))

        # Add it back: restarted (it waits, not a member any more) and added with a command
        # run against the cluster.
        forgotten.start([])
        result = remaining[1].ctl("add_cluster_node", forgotten.name, forgotten.address)
        assert result.returncode == 0, result.stderr + result.stdout
        eventually("three members again", lambda: agreed(nodes, names))
    finally:
        for node in nodes + ([intruder] if intruder else []):
            node.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(300)
def test_nodes_over_mutual_tls_form_a_cluster_and_a_plain_node_is_kept_out():
    root = tempfile.mkdtemp(prefix="warren-cluster-tls-")
    secret_file = os.path.join(root, "secret")
    with open(secret_file, "w") as f:
        f.write("a-shared-cluster-secret\n")
    certs = os.path.join(root, "certs")
    paths = tls_certs.make(certs)
    ca_key = os.path.join(certs, "ca.key")
    # Every node presents one certificate both ways: server and client key usages.
    cert, key = tls_certs._leaf(certs, "node", "/CN=warren-node", ca_key, paths["ca"],
                                ["subjectAltName=DNS:warren-node",
                                 "extendedKeyUsage=serverAuth,clientAuth"])
    tls = ["--cluster-tls-cert-file", cert, "--cluster-tls-key-file", key,
           "--cluster-tls-ca-file", paths["ca"], "--cluster-tls-server-name", "warren-node"]
    nodes = [Node(root, "tls%d@127.0.0.1" % i, secret_file, tls) for i in (1, 2)]
    plain = Node(root, "plain@127.0.0.1", secret_file)
    try:
        for node in nodes:
            node.start([p for p in nodes if p is not node])
        names = [n.name for n in nodes]
        eventually("two TLS nodes in one cluster", lambda: agreed(nodes, names))
        plain.start(nodes)
        time.sleep(3)
        for node in nodes:
            assert members(node.status()) == sorted(names)
        assert plain.status()["members"] == []
    finally:
        for node in nodes + [plain]:
            node.stop()
        shutil.rmtree(root, ignore_errors=True)

"""What an operator sees of quorum queues and the cluster, on one node and on a cluster of three
real processes: the management API's quorum queue fields as RabbitMQ 3.10 names them (`leader`,
`members`, `online`, `node`; checked against 3.10.8 with a quorum queue declared there) plus
Warren's `raft` object, /api/nodes' running and uptime, Prometheus' `rabbitmq_raft_*` families
as rabbitmq_prometheus serves them (summed on /metrics, per queue on /metrics/per-object and
/metrics/detailed?family=ra_metrics), `warren ctl list_queues name leader members` and
`warren ctl quorum_status`, and the console's Cluster page, queues list and queue page in
headless Chromium (tests/console/quorum.test.mjs)."""
import json
import os
import shutil
import subprocess
import tempfile

import pika
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from own_broker import WARREN_BIN, Broker, free_port, needs_warren_bin
from cluster_nodes import eventually, started_cluster

pytestmark = [needs_warren_bin, pytest.mark.timeout(300)]

QUORUM = {"x-queue-type": "quorum"}
RAFT_FAMILIES = [
    "rabbitmq_raft_term_total",
    "rabbitmq_raft_log_snapshot_index",
    "rabbitmq_raft_log_last_applied_index",
    "rabbitmq_raft_log_commit_index",
    "rabbitmq_raft_log_last_written_index",
]
CONSOLE_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "console")


class Single:
    """One node with its HTTP API and Prometheus endpoint on free ports."""

    def __init__(self):
        self.data_dir = tempfile.mkdtemp(prefix="warren-qviews-")
        self.http_port = free_port()
        self.prometheus_port = free_port()
        self.broker = Broker(self.data_dir, "--management-port", str(self.http_port),
                             "--prometheus-port", str(self.prometheus_port))
        self.amqp_port = self.broker.port

    def stop(self):
        self.broker.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def get(node, path):
    response = requests.get("http://127.0.0.1:%d%s" % (node.http_port, path),
                            auth=("guest", "guest"), timeout=10)
    response.raise_for_status()
    return response.json()


def scrape(node, path="/metrics"):
    response = requests.get("http://127.0.0.1:%d%s" % (node.prometheus_port, path), timeout=10)
    response.raise_for_status()
    return response.text


def samples(text, family):
    """{frozenset(labels): value} of one family in a scrape."""
    found = {}
    for metric in text_string_to_metric_families(text):
        for sample in metric.samples:
            if sample.name == family:
                found[frozenset(sample.labels.items())] = sample.value
    return found


def ctl(node, *args):
    return subprocess.run(
        [WARREN_BIN, "ctl", "--url", "http://127.0.0.1:%d" % node.http_port, *args],
        capture_output=True, text=True, timeout=90)


def amqp(node):
    return pika.BlockingConnection(pika.ConnectionParameters(
        host="127.0.0.1", port=node.amqp_port,
        credentials=pika.PlainCredentials("guest", "guest")))


def publish_confirmed(node, queue, n):
    conn = amqp(node)
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    conn.close()


def elected(node, queue, names):
    """The queue's API entry once its leader is one of `names` and this node's member has
    joined the group (its `raft` view is null until the leader's membership reaches it)."""
    def check():
        found = get(node, "/api/queues/%2F/" + queue)
        return found if found.get("leader") in names and found.get("raft") else None
    return eventually("%s elected on %s" % (queue, node), check)


@pytest.fixture
def single():
    node = Single()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def cluster():
    with started_cluster("views") as cluster:
        yield cluster.nodes


def test_quorum_queue_fields_as_rabbitmq_and_the_raft_object(single):
    conn = amqp(single)
    ch = conn.channel()
    ch.queue_declare("qq.views", durable=True, arguments=QUORUM)
    ch.queue_declare("cq.views", durable=True)
    conn.close()
    me = get(single, "/api/overview")["node"]

    qq = elected(single, "qq.views", [me])
    # RabbitMQ 3.10.8's quorum queue keys for these fields, with the values a one-node
    # broker has (checked against RabbitMQ: leader, members and online are node names).
    assert qq["type"] == "quorum"
    assert qq["node"] == me
    assert qq["members"] == [me]
    assert qq["online"] == [me]
    raft = qq["raft"]
    assert raft["node"] == me and raft["state"] == "leader" and raft["leader"] == me
    assert raft["term"] >= 1
    assert raft["members"] == [{"name": me, "state": "leader", "voter": True, "online": True,
                                "matched_index": raft["last_log_index"], "lag": 0}]
    before = raft["commit_index"]

    publish_confirmed(single, "qq.views", 5)
    # Confirmed publishes are committed and applied entries (openraft's metrics, which the
    # API reads, may trail the confirms by a moment).
    after = eventually("the publishes committed and applied", lambda: (lambda r: r if (
        r["commit_index"] >= before + 5 and r["last_applied_index"] == r["commit_index"])
        else None)(get(single, "/api/queues/%2F/qq.views")["raft"]))
    assert after["last_log_index"] >= after["commit_index"]

    listed = {q["name"]: q for q in get(single, "/api/queues")}
    assert listed["qq.views"]["leader"] == me and listed["qq.views"]["members"] == [me]
    # A classic queue has none of the quorum fields, as in RabbitMQ.
    for key in ("leader", "members", "online", "raft"):
        assert key not in listed["cq.views"]

    nodes = get(single, "/api/nodes")
    assert [n["name"] for n in nodes] == [me]
    assert nodes[0]["running"] is True and nodes[0]["uptime"] > 0


def test_prometheus_raft_families_summed_per_queue_and_detailed(single):
    # No quorum queue yet: RabbitMQ 3.10.8 serves the summed families as 0, none per queue.
    empty, empty_per_object = scrape(single), scrape(single, "/metrics/per-object")
    for family in RAFT_FAMILIES:
        assert samples(empty, family) == {frozenset(): 0}, family
        assert samples(empty_per_object, family) == {}, family
    conn = amqp(single)
    ch = conn.channel()
    for name in ("qq.p1", "qq.p2"):
        ch.queue_declare(name, durable=True, arguments=QUORUM)
    ch.queue_declare("cq.p", durable=True)
    conn.close()
    me = get(single, "/api/overview")["node"]
    for name in ("qq.p1", "qq.p2"):
        elected(single, name, [me])
    publish_confirmed(single, "qq.p2", 3)

    key = frozenset({("vhost", "/"), ("queue", "qq.p2")})
    # Settled: the three confirmed publishes are in the metrics (which may trail confirms).
    eventually("the publishes in the metrics", lambda: samples(
        scrape(single, "/metrics/per-object"), "rabbitmq_raft_log_last_applied_index")[key] >= 4)

    def consistent():
        per_object = scrape(single, "/metrics/per-object")
        aggregated = scrape(single, "/metrics")
        detailed = scrape(single, "/metrics/detailed?family=ra_metrics")
        for family in RAFT_FAMILIES:
            per_queue = samples(per_object, family)
            # Quorum queues only, labelled as rabbitmq_prometheus labels them.
            assert set(per_queue) == {frozenset({("vhost", "/"), ("queue", q)})
                                      for q in ("qq.p1", "qq.p2")}, family
            # /metrics sums them, as RabbitMQ 3.10.8 does (two queues: term 1 + 1 = 2 there).
            if samples(aggregated, family) != {frozenset(): sum(per_queue.values())}:
                return None
            detailed_name = family.replace("rabbitmq_", "rabbitmq_detailed_", 1)
            if samples(detailed, detailed_name) != per_queue:
                return None
        return per_object
    per_object = eventually("the three endpoints agreeing", consistent)
    # The API and the scrape read the same group.
    raft = get(single, "/api/queues/%2F/qq.p2")["raft"]
    assert samples(per_object, "rabbitmq_raft_term_total")[key] == raft["term"]
    # Index 0 the first membership, 1 the leader's first entry, then one per publish.
    assert samples(per_object, "rabbitmq_raft_log_commit_index")[key] >= 4
    assert samples(per_object, "warren_raft_member_lag") == {
        frozenset({("vhost", "/"), ("queue", q), ("node", me)}): 0 for q in ("qq.p1", "qq.p2")}
    # Without ra_metrics the detailed endpoint has no Raft families.
    assert "raft" not in scrape(single, "/metrics/detailed?family=queue_coarse_metrics")


def test_ctl_list_queues_leader_members_and_quorum_status(single):
    conn = amqp(single)
    ch = conn.channel()
    ch.queue_declare("qq.ctl", durable=True, arguments=QUORUM)
    ch.queue_declare("cq.ctl", durable=True)
    conn.close()
    me = get(single, "/api/overview")["node"]
    elected(single, "qq.ctl", [me])

    listed = ctl(single, "list_queues", "name", "leader", "members", "type", "--formatter", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["qq.ctl"] == {"name": "qq.ctl", "leader": me, "members": [me], "type": "quorum"}
    table = ctl(single, "list_queues", "name", "leader", "members", "-q")
    assert "qq.ctl\t%s\t[%s]" % (me, me) in table.stdout.splitlines()

    status = ctl(single, "quorum_status", "qq.ctl", "--formatter", "json")
    assert status.returncode == 0, status.stderr
    [row] = json.loads(status.stdout)
    raft = get(single, "/api/queues/%2F/qq.ctl")["raft"]
    assert row["Node Name"] == me and row["Raft State"] == "leader"
    assert row["Term"] == raft["term"] and row["Lag"] == 0
    assert row["Snapshot Index"] == "undefined"
    assert row["Commit Index"] <= row["Log Index"]
    # VHOST QUEUE form, the text table with rabbitmq-queues' banner.
    text = ctl(single, "quorum_status", "/", "qq.ctl")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("Status of quorum queue qq.ctl on node %s ..." % me)
    assert "Node Name\tRaft State\tLog Index\tCommit Index\tSnapshot Index\tTerm" in text.stdout

    # rabbitmq-queues' errors and exit code 69; an unknown vhost is rabbitmqctl's 65.
    missing = ctl(single, "quorum_status", "no.such.queue")
    assert missing.returncode == 69 and "not_found" in missing.stderr
    classic = ctl(single, "quorum_status", "cq.ctl")
    assert classic.returncode == 69
    assert "Cannot get quorum status of a classic queue" in classic.stderr
    assert ctl(single, "quorum_status", "no-vhost", "qq.ctl").returncode == 65


def test_a_cluster_shows_every_node_and_each_quorum_queues_members(cluster):
    names = [n.name for n in cluster]
    conn = amqp(cluster[0])
    conn.channel().queue_declare("qq.cluster", durable=True, arguments=QUORUM)
    conn.close()
    for node in cluster:
        nodes = eventually("every node running on %s" % node.name, lambda: (lambda ns: ns if (
            sorted(n["name"] for n in ns) == sorted(names)
            and all(n["running"] for n in ns)) else None)(get(node, "/api/nodes")))
        for entry in nodes:
            assert entry["uptime"] >= 0, entry
            assert entry["raft_voter"] is True
        assert sum(1 for n in nodes if n["raft_leader"]) == 1

        qq = elected(node, "qq.cluster", names)
        # Members are cluster nodes by name, the leader among them, all running.
        assert set(qq["members"]) <= set(names) and qq["leader"] in qq["members"]
        assert sorted(qq["online"]) == sorted(qq["members"])
        lag = samples(scrape(node, "/metrics/per-object"), "warren_raft_member_lag")
        assert {dict(k)["node"] for k in lag} <= set(names)
        # The group spans the nodes: only its leader knows how far each member lags.
        if qq["leader"] == node.name:
            assert len(lag) >= 1

        status = ctl(node, "quorum_status", "qq.cluster", "--formatter", "json")
        assert status.returncode == 0, status.stderr
        assert {row["Node Name"] for row in json.loads(status.stdout)} == set(qq["members"])


def run_console(urls, names, queue):
    if not os.path.exists("/usr/bin/chromium") and not os.environ.get("CHROMIUM"):
        pytest.skip("no Chromium (tests/console/run.sh installs it where it can)")
    if shutil.which("node") is None:
        pytest.skip("no Node.js for the console test")
    env = dict(os.environ, WARREN_MGMT_URLS=",".join(urls), EXPECT_NODES=",".join(names),
               QUORUM_QUEUE=queue)
    result = subprocess.run([os.path.join(CONSOLE_DIR, "run.sh"), "quorum.test.mjs"],
                            env=env, capture_output=True, text=True, timeout=240)
    assert "SKIPPED" not in result.stdout or result.returncode != 0, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.timeout(300)
def test_console_shows_a_single_node_and_its_quorum_queue(single):
    conn = amqp(single)
    conn.channel().queue_declare("qq.console <one>", durable=True, arguments=QUORUM)
    conn.close()
    me = get(single, "/api/overview")["node"]
    elected(single, "qq.console %3Cone%3E", [me])
    out = run_console(["http://127.0.0.1:%d/" % single.http_port], [me], "qq.console <one>")
    assert out.count("ok ") == 3, out


@pytest.mark.timeout(400)
def test_console_shows_the_cluster_and_quorum_queue_members_on_every_node(cluster):
    names = [n.name for n in cluster]
    conn = amqp(cluster[0])
    conn.channel().queue_declare("qq.console", durable=True, arguments=QUORUM)
    conn.close()
    for node in cluster:
        elected(node, "qq.console", names)
    out = run_console(["http://127.0.0.1:%d/" % n.http_port for n in cluster], names,
                      "qq.console")
    assert out.count("ok ") == 9, out

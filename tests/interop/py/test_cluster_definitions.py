"""Definitions are one cluster's: a change made on any node (AMQP or HTTP API) goes through the
metadata Raft group and is applied on every node; a refused change's error reaches the client
that made it; a node that was down catches up when it comes back."""

import concurrent.futures

import pika
import pytest
import requests

from own_broker import needs_warren_bin
from cluster_nodes import agreed, eventually, netns_unavailable, started_cluster

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]


def api(node, method, path, **kwargs):
    response = requests.request(method, "http://127.0.0.1:%d%s" % (node.http_port, path),
                                auth=("guest", "guest"), timeout=10, **kwargs)
    return response


def has(node, path):
    return api(node, "GET", path).status_code == 200


def amqp(node, user="guest", password="guest", vhost="/"):
    return pika.BlockingConnection(pika.ConnectionParameters(
        host="127.0.0.1", port=node.amqp_port, virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password), connection_attempts=3,
        retry_delay=1))


@pytest.fixture
def cluster():
    with started_cluster("defs") as cluster:
        yield cluster.nodes


def test_definitions_made_on_any_node_are_on_every_node(cluster):
    n1, n2, n3 = cluster

    # AMQP on node 1: an exchange, a queue, a binding.
    conn = amqp(n1)
    ch = conn.channel()
    ch.exchange_declare("x.repl", "topic", durable=True)
    ch.queue_declare("q.repl", durable=True)
    ch.queue_bind("q.repl", "x.repl", "a.#")
    conn.close()

    # HTTP API on node 2: a vhost, a user with permissions on it; on node 3: a policy.
    assert api(n2, "PUT", "/api/vhosts/v2").status_code in (201, 204)
    assert api(n2, "PUT", "/api/users/alice",
               json={"password": "alice-pw", "tags": ""}).status_code in (201, 204)
    assert api(n2, "PUT", "/api/permissions/v2/alice",
               json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    assert api(n3, "PUT", "/api/policies/%2F/p-repl",
               json={"pattern": "^q\\.", "definition": {"max-length": 10},
                     "apply-to": "queues"}).status_code in (201, 204)

    for node in cluster:
        eventually("definitions on %s" % node.name, lambda node=node: all(has(node, path) for path in (
            "/api/exchanges/%2F/x.repl", "/api/queues/%2F/q.repl", "/api/vhosts/v2",
            "/api/users/alice", "/api/permissions/v2/alice", "/api/policies/%2F/p-repl")))
        bindings = api(node, "GET", "/api/bindings/%2F/e/x.repl/q/q.repl").json()
        assert [b["routing_key"] for b in bindings] == ["a.#"]

    # alice, created through node 2, logs in on node 3 to the vhost made on node 2.
    conn = amqp(n3, "alice", "alice-pw", "v2")
    conn.channel().queue_declare("alice-q", durable=True)
    conn.close()
    eventually("alice's queue on node 1", lambda: has(n1, "/api/queues/v2/alice-q"))

    # An inequivalent redeclare through node 2: the error decided in the log reaches the client.
    conn = amqp(n2)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        ch.queue_declare("q.repl", durable=False)
    assert closed.value.reply_code == 406
    assert "inequivalent arg 'durable'" in closed.value.reply_text
    conn.close()

    # Deleted through node 3: gone everywhere.
    conn = amqp(n3)
    conn.channel().queue_delete("q.repl")
    conn.close()
    for node in cluster:
        eventually("q.repl gone on %s" % node.name,
                   lambda node=node: not has(node, "/api/queues/%2F/q.repl"))


def test_a_node_that_was_down_catches_up(cluster):
    n1, n2, n3 = cluster
    n2.kill()
    eventually("node 2 seen down", lambda: not [
        m for m in n1.status()["members"] if m["name"] == n2.name][0]["running"])
    # Two of three still commit changes.
    assert api(n1, "PUT", "/api/users/bob",
               json={"password": "bob-pw", "tags": "management"}).status_code in (201, 204)
    conn = amqp(n3)
    conn.channel().exchange_declare("x.while-down", "fanout", durable=True)
    conn.close()
    n2.start([n1, n3])
    eventually("node 2 caught up", lambda: has(n2, "/api/users/bob")
               and has(n2, "/api/exchanges/%2F/x.while-down"))
    user = api(n2, "GET", "/api/users/bob").json()
    assert user["tags"] in ("management", ["management"])
    # And the definitions stay after a clean restart of every node.
    for node in cluster:
        node.stop()
    for node in cluster:
        node.start([p for p in cluster if p is not node])
    eventually("cluster back", lambda: agreed(cluster, [n.name for n in cluster]))
    for node in cluster:
        assert has(node, "/api/users/bob")
        assert has(node, "/api/exchanges/%2F/x.while-down")


@pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
def test_a_delete_through_a_node_behind_the_log_is_never_a_false_404():
    """An exchange, a queue and a binding made through the majority while a third node is cut
    off: a DELETE through that node must not answer 404 from its stale view (clients take a
    404 as "already gone", and the objects would stay for good: the Jepsen-style run found
    three such); it fails while the node cannot catch up, and deletes once it can."""
    with started_cluster("defsbehind", netns=True) as cluster:
        a, _, behind = cluster.nodes
        binding = "/api/bindings/%2F/e/amq.topic/q/behind-q"
        cluster.partition(behind)
        try:
            assert a.request("PUT", "/api/exchanges/%2F/behind-x",
                             json={"type": "direct", "durable": True}).status_code in (201, 204)
            assert a.request("PUT", "/api/queues/%2F/behind-q",
                             json={"durable": True}).status_code in (201, 204)
            assert a.request("POST", binding, json={"routing_key": "k"}).status_code == 201
            paths = ("/api/exchanges/%2F/behind-x", binding + "/k", "/api/queues/%2F/behind-q")
            # At once: each waits out the node's time for a change (30 s).
            with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:
                answers = list(pool.map(
                    lambda path: behind.request("DELETE", path, timeout=90), paths))
            for path, answer in zip(paths, answers):
                assert answer.status_code != 404, (path, answer.status_code, answer.text)
                # Refused: the change could not be committed (the error names the unreachable
                # majority).
                assert answer.status_code >= 400, (path, answer.status_code, answer.text)
                assert "not committed" in answer.text, (path, answer.text)
        finally:
            cluster.heal(behind)
        for path in ("/api/exchanges/%2F/behind-x", binding + "/k", "/api/queues/%2F/behind-q"):
            eventually("%s deleted through the node that was behind" % path,
                       lambda: behind.request("DELETE", path, timeout=60).status_code == 204,
                       timeout=90, interval_s=1)
            eventually("%s gone on every node" % path, lambda: all(
                n.request("GET", path).status_code == 404 for n in cluster.nodes), timeout=30)

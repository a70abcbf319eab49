"""One cluster in every view of the HTTP API, as RabbitMQ's management plugin shows it: asked
through any node, /api/connections, /api/channels and /api/consumers list the clients of every
node (each with the node it is on), /api/overview counts them all and adds up every node's
message counters, a queue's message_stats count each message once wherever it was published and
consumed, /api/nodes has the full figures of every node, and DELETE /api/connections/{name}
closes a connection on another node.
"""
import time
from urllib.parse import quote

import pika
import pytest

from cluster_nodes import Cluster, eventually
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]

QUEUE = "views-q"
MESSAGES = 50


@pytest.fixture(scope="module")
def cluster():
    c = Cluster("views", 3)
    try:
        c.start()
        yield c
    finally:
        c.close()


def connect(node, name):
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=node.host, port=node.amqp_port, connection_attempts=3, retry_delay=1,
        client_properties={"connection_name": name}))


def by_client_name(items, field="client_properties"):
    return {c[field].get("connection_name"): c for c in items if c[field].get("connection_name")}


def test_every_node_shows_every_node_s_clients_and_counts_each_message_once(cluster):
    n1, n2, n3 = cluster.nodes
    # The queue lives on node 3; node 1's client publishes to it, node 2's consumes it.
    declaring = connect(n3, "declarer")
    declaring.channel().queue_declare(QUEUE, durable=True)
    declaring.close()
    # Consumed through node 2 at once: a link to node 3 still being made is waited for.
    consumer_connection = connect(n2, "consumer-on-n2")
    consuming = consumer_connection.channel()
    consuming.basic_qos(prefetch_count=10)
    got = []
    consuming.basic_consume(QUEUE, lambda ch, method, props, body: (
        got.append(body), ch.basic_ack(method.delivery_tag)), consumer_tag="views-consumer")
    publisher_connection = connect(n1, "publisher-on-n1")
    publishing = publisher_connection.channel()
    # Declared first, as applications do: queue.declare waits for node 1's link to node 3
    # while it is being made, where a publish routed over a link not up yet is nacked (a
    # gap left: RabbitMQ would hold it; crates/broker/src/remote.rs, "Failures").
    publishing.queue_declare(QUEUE, passive=True)
    publishing.confirm_delivery()
    for i in range(MESSAGES):
        publishing.basic_publish("", QUEUE, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    deadline = time.monotonic() + 30
    while len(got) < MESSAGES and time.monotonic() < deadline:
        consumer_connection.process_data_events(time_limit=0.2)
    assert len(got) == MESSAGES

    for node in cluster.nodes:
        connections = by_client_name(node.get("/api/connections"))
        assert connections["publisher-on-n1"]["node"] == n1.name, node.name
        assert connections["consumer-on-n2"]["node"] == n2.name, node.name
        channels = node.get("/api/channels")
        assert {ch["node"] for ch in channels} == {n1.name, n2.name}, node.name
        consumers = [k for k in node.get("/api/consumers")
                     if k["consumer_tag"] == "views-consumer"]
        assert len(consumers) == 1, (node.name, consumers)
        assert consumers[0]["channel_details"]["node"] == n2.name
        assert consumers[0]["queue"] == {"name": QUEUE, "vhost": "/"}
        # One connection's page and its channels, wherever it lives.
        one = node.get("/api/connections/%s" % quote(
            connections["publisher-on-n1"]["name"], safe=""))
        assert one["node"] == n1.name

        overview = node.get("/api/overview")
        assert overview["object_totals"]["connections"] == 2, (node.name, overview)
        assert overview["object_totals"]["consumers"] == 1, node.name
        assert overview["message_stats"]["publish"] == MESSAGES, (node.name, overview)
        assert overview["message_stats"]["deliver_get"] == MESSAGES, node.name

        # Counted once: by the queue on node 3 (publish) and node 2's consumer (deliver, ack).
        stats = node.queue(QUEUE)["message_stats"]
        assert stats["publish"] == MESSAGES, (node.name, stats)
        assert stats["deliver_get"] == MESSAGES, (node.name, stats)
        assert stats["ack"] == MESSAGES, (node.name, stats)
        queue_page = node.queue(QUEUE)
        assert [k["consumer_tag"] for k in queue_page["consumer_details"]] == ["views-consumer"]

        nodes = {entry["name"]: entry for entry in node.get("/api/nodes")}
        assert set(nodes) == set(cluster.names), node.name
        for name, entry in nodes.items():
            assert entry["running"] is True, (node.name, name)
            # The figures each node measures of itself, whichever node was asked.
            for field in ("mem_used", "fd_used", "sockets_used", "os_pid", "disk_free"):
                assert field in entry, (node.name, name, field)
            assert entry["raft_voter"] is True

        vhost = node.get("/api/vhosts/%2F")
        assert vhost["cluster_state"] == {name: "running" for name in cluster.names}

    # Closed through node 3, on node 1, as RabbitMQ's management plugin does.
    name = by_client_name(n3.get("/api/connections"))["publisher-on-n1"]["name"]
    response = n3.request("DELETE", "/api/connections/%s" % quote(name, safe=""),
                          headers={"X-Reason": "closed from node 3"})
    assert response.status_code == 204, response.text
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        for _ in range(50):
            publisher_connection.process_data_events(time_limit=0.2)
    assert closed.value.reply_code == 320
    assert "closed from node 3" in closed.value.reply_text
    eventually("the closed connection gone from every node's list", lambda: all(
        "publisher-on-n1" not in by_client_name(node.get("/api/connections"))
        for node in cluster.nodes))
    consumer_connection.close()


def test_a_stopped_node_is_left_out_and_shown_down(cluster):
    n1, n2, n3 = cluster.nodes
    connection = connect(n3, "on-n3")
    try:
        eventually("node 3's connection listed by node 1", lambda: "on-n3" in by_client_name(
            n1.get("/api/connections")))
        n3.stop()
        nodes = eventually("node 3 shown not running", lambda: (
            lambda entries: entries if entries[n3.name]["running"] is False else None)(
                {entry["name"]: entry for entry in n1.get("/api/nodes", timeout=10)}))
        assert "mem_used" in nodes[n2.name]
        assert "on-n3" not in by_client_name(n1.get("/api/connections", timeout=10))
        assert n1.get("/api/vhosts/%2F")["cluster_state"][n3.name] == "nodedown"
    finally:
        try:
            connection.close()
        except pika.exceptions.AMQPError:
            pass
        cluster.restart(n3)
        cluster.wait_agreed()

"""One cluster to clients: a classic queue lives on one node (its home, the node the client
declared it on) and every node serves it by forwarding there. Three `warren server`
processes: a durable queue declared on node 1 takes publishes with confirms on node 2, is
consumed in order on node 3 (manual ack, prefetch, nack-requeue), answers basic.get on node
2, is purged on node 3 and shows its counts and home node on every node; a queue deleted on
node 3 is gone everywhere. kill -9 of the home node: a consumer on node 2 gets basic.cancel,
a confirmed mandatory publish on node 2 is returned and confirmed, a declare on node 2 answers 404 as RabbitMQ's does
for a durable classic queue whose home node is down; restarted, its messages are there and
consumable from node 2."""
import time

import pika
import pytest

from own_broker import needs_warren_bin
from cluster_nodes import eventually, started_cluster

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]


def served_from(node, name, home):
    """The queue is on `node`, served by `home`, and reachable (its link is up)."""
    info = node.queue(name)
    return info is not None and info["node"] == home.name and info["state"] == "running"


def declared_count(node, name):
    conn = node.connect()
    try:
        return conn.channel().queue_declare(name, passive=True).method.message_count
    finally:
        conn.close()


@pytest.fixture
def cluster():
    with started_cluster("place") as cluster:
        yield cluster.nodes


def test_a_queue_on_one_node_is_used_from_every_node(cluster):
    a, b, c = cluster
    conn_a = a.connect()
    ch_a = conn_a.channel()
    ch_a.queue_declare("q.place", durable=True)
    ch_a.queue_declare("q.gone", durable=True)
    conn_a.close()
    for node in cluster:
        eventually("q.place served by %s on %s" % (a.name, node.name),
                   lambda node=node: served_from(node, "q.place", a), timeout=60)

    # Publish with confirms on node 2: every message confirmed (acked by the home node).
    conn_b = b.connect()
    ch_b = conn_b.channel()
    ch_b.confirm_delivery()
    for i in range(50):
        ch_b.basic_publish("", "q.place", b"m%d" % i,
                           pika.BasicProperties(delivery_mode=2), mandatory=True)
    # declare-ok on node 2 counts what node 1 holds.
    eventually("50 messages in declare-ok on node 2", lambda: declared_count(b, "q.place") == 50)
    for node in cluster:
        eventually("50 messages in the API of %s" % node.name,
                   lambda node=node: node.queue("q.place")["messages"] == 50)

    # Consume on node 3 with manual acks and a prefetch: all 50, in order.
    conn_c = c.connect()
    ch_c = conn_c.channel()
    ch_c.basic_qos(prefetch_count=10)
    received = []
    for method, _, body in ch_c.consume("q.place", inactivity_timeout=30):
        assert method is not None, "deliveries stopped after %d" % len(received)
        received.append(body)
        if len(received) < 50:
            ch_c.basic_ack(method.delivery_tag)
        else:
            last_tag = method.delivery_tag
            break
    assert received == [b"m%d" % i for i in range(50)]
    # nack with requeue: the last message comes back, redelivered.
    ch_c.basic_nack(last_tag, requeue=True)
    method, _, body = next(ch_c.consume("q.place", inactivity_timeout=30))
    assert method is not None and body == b"m49" and method.redelivered
    ch_c.basic_ack(method.delivery_tag)
    ch_c.cancel()
    eventually("q.place empty", lambda: declared_count(b, "q.place") == 0)

    # basic.get on node 2.
    for i in range(3):
        ch_b.basic_publish("", "q.place", b"g%d" % i, pika.BasicProperties(delivery_mode=2))
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        method, _, body = ch_b.basic_get("q.place")
        if method is not None:
            got = body
            ch_b.basic_ack(method.delivery_tag)
        else:
            time.sleep(0.2)
    assert got == b"g0"
    eventually("2 left after the get", lambda: declared_count(b, "q.place") == 2)

    # Purge on node 3: empty everywhere.
    ch_c.queue_purge("q.place")
    for node in cluster:
        eventually("q.place purged, seen on %s" % node.name,
                   lambda node=node: declared_count(node, "q.place") == 0)

    # Deleted on node 3: gone on every node.
    ch_c.queue_delete("q.gone")
    for node in cluster:
        eventually("q.gone gone on %s" % node.name,
                   lambda node=node: node.queue("q.gone") is None)
    conn_c.close()
    conn_b.close()


def test_an_auto_delete_queue_its_forwarded_consumer_left_is_gone_on_every_node(cluster):
    a, b, c = cluster
    conn_a = a.connect()
    conn_a.channel().queue_declare("q.auto", auto_delete=True)
    for node in cluster:
        eventually("q.auto served by %s on %s" % (a.name, node.name),
                   lambda node=node: served_from(node, "q.auto", a), timeout=60)
    # Consumed on node 2 (forwarded to node 1), then cancelled: the queue's last consumer
    # left it, so it goes, on every node (not only on its home).
    conn_b = b.connect()
    ch_b = conn_b.channel()
    tag = ch_b.basic_consume("q.auto", lambda *_: None)
    eventually("q.auto has its consumer", lambda: a.queue("q.auto")["consumers"] == 1)
    ch_b.basic_cancel(tag)
    for node in cluster:
        eventually("q.auto gone on %s" % node.name,
                   lambda node=node: node.queue("q.auto") is None)
    conn_b.close()
    conn_a.close()


def test_home_node_down_and_back(cluster):
    a, b, c = cluster
    conn_a = a.connect()
    ch_a = conn_a.channel()
    ch_a.queue_declare("q.live", durable=True)
    ch_a.queue_declare("q.keep", durable=True)
    conn_a.close()
    for node in (b, c):
        for name in ("q.live", "q.keep"):
            eventually("%s served by %s on %s" % (name, a.name, node.name),
                       lambda node=node, name=name: served_from(node, name, a), timeout=60)

    # Messages kept on node 1, published (and confirmed) through node 2.
    conn_b = b.connect()
    pub = conn_b.channel()
    pub.confirm_delivery()
    for i in range(5):
        pub.basic_publish("", "q.keep", b"k%d" % i, pika.BasicProperties(delivery_mode=2))

    # A consumer on node 2 of a queue on node 1.
    sub = conn_b.channel()
    cancelled = []
    sub.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = sub.basic_consume("q.live", lambda *args: None)

    a.kill()
    deadline = time.monotonic() + 30
    while not cancelled and time.monotonic() < deadline:
        conn_b.process_data_events(time_limit=0.5)
    assert cancelled == [tag], "the consumer on node 2 was not cancelled"

    # A publish to the queue whose home is down is unroutable, as in RabbitMQ: a mandatory
    # one is returned and confirmed, another confirmed (never lost silently, never nacked).
    eventually("node 2 holding node 1 down", lambda: b.queue("q.keep")["state"] == "down" and not
               {n["name"]: n for n in b.get("/api/nodes")}[a.name]["running"])
    with pytest.raises(pika.exceptions.UnroutableError):
        pub.basic_publish("", "q.keep", b"returned", pika.BasicProperties(delivery_mode=2),
                          mandatory=True)
    pub.basic_publish("", "q.keep", b"dropped", pika.BasicProperties(delivery_mode=2))

    # queue.declare answers 404, as RabbitMQ does for a durable queue whose node is down.
    ch = conn_b.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        ch.queue_declare("q.keep", durable=True)
    assert closed.value.reply_code == 404
    assert "home node '%s'" % a.name in closed.value.reply_text
    assert "is down or inaccessible" in closed.value.reply_text
    conn_b.close()
    assert b.queue("q.keep")["state"] == "down"

    # Back: the messages published before are there, and node 2 serves them again.
    a.start([b, c])
    eventually("q.keep reachable from node 2 again", lambda: served_from(b, "q.keep", a),
               timeout=90)
    eventually("5 messages in q.keep seen on node 2", lambda: declared_count(b, "q.keep") == 5,
               timeout=60)
    conn_b = b.connect()
    ch = conn_b.channel()
    got = []
    for method, _, body in ch.consume("q.keep", inactivity_timeout=30):
        assert method is not None, "deliveries stopped after %d" % len(got)
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == 5:
            break
    assert got == [b"k%d" % i for i in range(5)]
    conn_b.close()

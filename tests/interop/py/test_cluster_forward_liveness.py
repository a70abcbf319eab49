"""A forwarding link follows the cluster's failure detector: when a classic queue's home node
is SIGSTOPped (its sockets stay open and silent, so TCP notices nothing), the node forwarding
to it drops the link once the node-level heartbeats say the peer is down — its consumer of the
queue gets basic.cancel, a declare of the queue answers 404 as for a home node that is down —
and links again once the node is back (SIGCONT): the queue is served again through it."""
import time

import pika
import pytest

from cluster_nodes import eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]


@pytest.fixture
def cluster():
    with started_cluster("fwdlive", timeout=120) as cluster:
        yield cluster


def declare_passive_code(node, name):
    """0 when a passive declare of `name` on `node` succeeds, else the channel's close code."""
    conn = node.connect()
    try:
        conn.channel().queue_declare(name, passive=True)
        return 0
    except pika.exceptions.ChannelClosedByBroker as e:
        return e.reply_code
    finally:
        if conn.is_open:
            conn.close()


def test_a_stopped_home_node_is_noticed_by_heartbeats_and_comes_back(cluster):
    a, b, _ = cluster.nodes
    conn = a.connect()
    conn.channel().queue_declare("q.live", durable=True)
    conn.close()
    eventually("q.live running on b", lambda: (b.queue("q.live") or {}).get("state")
               == "running", timeout=60)

    consumer_conn = b.connect()
    ch = consumer_conn.channel()
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume("q.live", lambda *_: None)

    a.pause()
    try:
        deadline = time.monotonic() + 45
        while not cancelled and time.monotonic() < deadline:
            consumer_conn.process_data_events(time_limit=0.5)
        assert cancelled == [tag], "no basic.cancel within 45 s of SIGSTOP of the home node"
        assert declare_passive_code(b, "q.live") == 404
    finally:
        a.resume()
    if consumer_conn.is_open:
        consumer_conn.close()

    eventually("q.live declared again on b", lambda: declare_passive_code(b, "q.live") == 0,
               timeout=60)
    conn = b.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", "q.live", b"back", pika.BasicProperties(delivery_mode=2),
                     mandatory=True)

    def got():
        method, _, body = ch.basic_get("q.live", auto_ack=True)
        return body if method is not None else None

    assert eventually("the message back through b", got, timeout=30) == b"back"
    conn.close()

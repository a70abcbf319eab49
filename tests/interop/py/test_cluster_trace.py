"""The firehose in a cluster: `warren ctl trace_on` through one node turns tracing on in every
node (RabbitMQ's flag is per node; Warren's is a definitions change every node applies), so a
message published through one node and fetched through another is traced by each of them (its
copy's `node` header names the node that saw it) into a firehose queue a third node serves;
`trace_off` through yet another node turns it off everywhere. A node that restarts meanwhile
traces again (its flag comes back from the metadata log)."""
import pytest

from cluster_nodes import eventually, started_cluster
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]

TRACE = "amq.rabbitmq.trace"


def tracing_everywhere(nodes, on):
    return all(n.get("/api/vhosts/%2F")["tracing"] is on for n in nodes)


def get(node, queue):
    """One basic.get through `node`: (routing key, headers, body), or None."""
    c = node.connect()
    try:
        m, p, body = c.channel().basic_get(queue, auto_ack=True)
        return None if m is None else (m.routing_key, p.headers, body)
    finally:
        c.close()


def switch(via, nodes, on):
    """`trace_on` (or `trace_off`) through `via`; waits until every node shows it. Its output."""
    r = via.ctl("trace_on" if on else "trace_off")
    assert r.returncode == 0, r.stderr
    eventually("tracing %s in every node" % on, lambda: tracing_everywhere(nodes, on))
    return r.stdout


def across(publisher, consumer, body):
    """Publishes `body` to queue work through one node and fetches it through another."""
    c = publisher.connect()
    c.channel().basic_publish("", "work", body)
    c.close()
    assert eventually("%r in work" % body, lambda: get(consumer, "work"))[2] == body


def test_trace_on_through_one_node_traces_on_every_node():
    with started_cluster("trace") as cluster:
        n1, n2, n3 = cluster.nodes
        c = n1.connect()
        ch = c.channel()
        ch.queue_declare("firehose")
        ch.queue_bind("firehose", TRACE, "#")
        ch.queue_declare("work")
        c.close()

        assert switch(n1, cluster.nodes, True) == (
            'Starting tracing for vhost "/" ...\nTrace enabled for vhost /\n')
        # A node that restarts gets the cluster's flag back from the metadata log.
        n2.stop()
        n2.start(cluster.peers_of(n2))
        eventually("tracing on in every node after a restart",
                   lambda: tracing_everywhere(cluster.nodes, True))
        across(n2, n3, b"across")

        copies = []

        def both_copies():
            got = get(n1, "firehose")
            if got:
                copies.append(got)
            return len(copies) == 2
        eventually("two copies in the firehose", both_copies)
        (deliver_key, deliver, body1), (publish_key, publish, body2) = sorted(copies)
        assert (publish_key, body2) == ("publish.", b"across")
        assert (deliver_key, body1) == ("deliver.work", b"across")
        assert (publish["node"], publish["routed_queues"]) == (n2.name, ["work"])
        assert (deliver["node"], deliver["redelivered"]) == (n3.name, 0)

        switch(n3, cluster.nodes, False)
        across(n2, n3, b"untraced")
        assert get(n1, "firehose") is None

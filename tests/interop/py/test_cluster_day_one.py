"""A cluster as a newcomer starts one on day one: three nodes started at once, an application
declaring its quorum queue through every node while they are still forming, and a node started
late.

- One configuration file for every node (`[cluster] peers` lists all three, each node itself
  included, as a StatefulSet or an Ansible template has it) and no secret file: the nodes find
  themselves in the list and skip it, and share the secret one user's nodes share on one machine
  (`~/.warren-cluster-secret`, 0600, as Erlang's `~/.erlang.cookie`).
- Each node given only the others (the classic way), the same declares while forming.

Either way the queue is one Raft group: every node's API shows the same three members and one
leader, 5,000 messages confirmed through one node are all consumed through another, and no node
ran a group of its own. A quorum queue declared with room for a fourth node grows onto it by
itself once that node joins (continuous membership reconciliation), and the late node serves it.
"""
import os
import shutil
import stat
import tempfile
import threading
import time

import pika
import pytest

from cluster_nodes import Node, agreed, agreed_queue_leader, eventually
from own_broker import needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]

MESSAGES = 5000
QUEUE = "orders-qq"


def declare_with_retries(node, queue, arguments, results, timeout=60):
    """What an application does at start: connect (retrying while the broker is not up yet)
    and declare its durable quorum queue; records "ok" or the last error in `results`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            connection = pika.BlockingConnection(pika.ConnectionParameters(
                host=node.host, port=node.amqp_port, connection_attempts=1,
                blocked_connection_timeout=60))
            try:
                connection.channel().queue_declare(
                    queue, durable=True, arguments=dict({"x-queue-type": "quorum"}, **arguments))
                results[node.name] = "ok"
                return
            finally:
                if connection.is_open:
                    connection.close()
        except pika.exceptions.AMQPError as e:
            last = e
            time.sleep(0.2)
    results[node.name] = "failed: %r" % (last,)


def declare_through_every_node_while_forming(nodes, queue, arguments=None):
    results = {}
    threads = [threading.Thread(target=declare_with_retries,
                                args=(node, queue, arguments or {}, results))
               for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n.name: "ok" for n in nodes}, results


def publish_confirmed(node, queue, count):
    connection = node.connect()
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(count):
        channel.basic_publish("", queue, b"m%d" % i,
                              pika.BasicProperties(delivery_mode=2), mandatory=True)
    connection.close()


def consume_all(node, queue, count, timeout=60):
    connection = node.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=500)
    got = []
    for _method, _properties, body in channel.consume(queue, inactivity_timeout=timeout):
        if body is None:
            break
        got.append(body)
        if len(got) % 100 == 0 or len(got) == count:
            channel.basic_ack(multiple=True, delivery_tag=_method.delivery_tag)
        if len(got) == count:
            break
    channel.cancel()
    connection.close()
    return got


def start_all_at_once(nodes, peers_of):
    for node in nodes:
        node.start(peers_of(node), wait=False)


def stop_all(nodes, root):
    for node in nodes:
        try:
            node.stop()
        except OSError:
            pass
    if os.environ.get("WARREN_KEEP_CLUSTER_LOGS") is None:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print("cluster logs kept in %s" % root)


@pytest.mark.parametrize("layout", ["one-config-file", "each-node-its-peers"])
def test_a_queue_declared_while_the_nodes_form_is_one_group_of_three(layout):
    root = tempfile.mkdtemp(prefix="warren-dayone-")
    home = os.path.join(root, "home")
    os.mkdir(home)
    env = dict(os.environ, HOME=home)
    names = ["day%d@127.0.0.1" % i for i in (1, 2, 3)]
    if layout == "one-config-file":
        nodes = [Node(root, name, None, env=env) for name in names]
        config = os.path.join(root, "warren.toml")
        with open(config, "w") as f:
            f.write("[cluster]\npeers = [%s]\n" % ", ".join('"%s"' % n.address for n in nodes))
        for node in nodes:
            node.extra += ["--config", config]
        peers_of = lambda node: None  # noqa: E731 (from the file)
    else:
        secret = os.path.join(root, "secret")
        with open(secret, "w") as f:
            f.write("day-one-secret\n")
        nodes = [Node(root, name, secret) for name in names]
        peers_of = lambda node: [p for p in nodes if p is not node]  # noqa: E731
    try:
        start_all_at_once(nodes, peers_of)
        declare_through_every_node_while_forming(nodes, QUEUE)
        eventually("one cluster of three", lambda: agreed(nodes, names), timeout=60)

        leader = eventually("one group of three members, the same on every node",
                            lambda: agreed_queue_leader(nodes, QUEUE, members=names),
                            timeout=60)
        publish_confirmed(nodes[1], QUEUE, MESSAGES)
        eventually("every node counting the 5,000 messages",
                   lambda: all((n.queue(QUEUE) or {}).get("messages") == MESSAGES
                               for n in nodes), timeout=60)
        got = consume_all(nodes[2], QUEUE, MESSAGES)
        assert len(got) == MESSAGES and set(got) == {b"m%d" % i for i in range(MESSAGES)}
        assert agreed_queue_leader(nodes, QUEUE, members=names) in names, leader

        if layout == "one-config-file":
            secret_file = os.path.join(home, ".warren-cluster-secret")
            mode = stat.S_IMODE(os.stat(secret_file).st_mode)
            assert mode == 0o600, oct(mode)
            assert not any(os.path.exists(os.path.join(n.data_dir, ".cluster-secret"))
                           for n in nodes)
            for node in nodes:
                assert "refused a cluster connection" not in node.log(), node.log()[-3000:]
    finally:
        stop_all(nodes, root)


def test_a_queue_below_its_size_grows_onto_a_node_started_late():
    root = tempfile.mkdtemp(prefix="warren-late-")
    secret = os.path.join(root, "secret")
    with open(secret, "w") as f:
        f.write("late-node-secret\n")
    nodes = [Node(root, "late%d@127.0.0.1" % i, secret) for i in (1, 2, 3, 4)]
    first, late = nodes[:3], nodes[3]
    try:
        start_all_at_once(first, lambda node: [p for p in first if p is not node])
        declare_through_every_node_while_forming(first, QUEUE,
                                                 {"x-quorum-initial-group-size": 4})
        three = [n.name for n in first]
        eventually("a group of the three running nodes",
                   lambda: agreed_queue_leader(first, QUEUE, members=three), timeout=60)
        publish_confirmed(first[0], QUEUE, 100)

        late.start(first)
        everyone = [n.name for n in nodes]
        eventually("four nodes in one cluster", lambda: agreed(nodes, everyone), timeout=60)
        eventually("the group grown onto the late node by itself",
                   lambda: agreed_queue_leader(nodes, QUEUE, members=everyone), timeout=90)
        got = consume_all(late, QUEUE, 100)
        assert sorted(got) == sorted(b"m%d" % i for i in range(100))
    finally:
        stop_all(nodes, root)

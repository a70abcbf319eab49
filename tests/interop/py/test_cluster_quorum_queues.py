"""A quorum queue in a cluster is one Raft group over several nodes: declared on one node with
x-quorum-initial-group-size 3, every node's API shows the same three members and one leader;
1,000 messages published with confirms on the leader's node survive kill -9 of that node (a
new leader within seconds holds every confirmed message, and its node serves them); a
consumer on the old leader's node goes with its node and its unacked messages come back
redelivered; the killed node rejoins as a follower and catches up. Group sizes 1
and 2 place the group on that many nodes, the declaring node first. Dead letters of an
at-least-once queue that had no route when they died outlive their leader: the next leader
sends them once a route exists."""
import time

import pika
import pytest
import requests

from own_broker import needs_warren_bin
from cluster_nodes import agreed_queue_leader, eventually, started_cluster

pytestmark = [pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(300)]

MESSAGES = 1000


@pytest.fixture
def cluster():
    """A cluster of the test's own: for a test that kills a node."""
    with started_cluster("qgroup") as cluster:
        yield cluster.nodes


@pytest.fixture(scope="module")
def shared_cluster():
    """One cluster for the tests that only declare queues of their own names (no node is
    stopped): a 3-node start less."""
    with started_cluster("qgroup") as cluster:
        yield cluster.nodes


def raft(node, name):
    """The queue's `raft` object on `node` (its member's view of the group), None while the
    group starts there."""
    info = node.queue(name)
    return info["raft"] if info else None


def leader_after(survivors, queue, names, old):
    """The queue's leader the survivors agree on once it is not `old` (within 60 s)."""
    return eventually(
        "a new leader among the survivors",
        lambda: (lambda l: l if l and l != old else None)(
            agreed_queue_leader(survivors, queue, names)),
        timeout=60)


def declare_group_of_three(cluster, queue, **arguments):
    """Declares a quorum queue of three members through the first node; returns the nodes by
    name, their sorted names and the leader every node agrees on."""
    by_name = {n.name: n for n in cluster}
    names = sorted(by_name)
    conn = cluster[0].connect()
    conn.channel().queue_declare(queue, durable=True, arguments=dict(
        {"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}, **arguments))
    conn.close()
    leader = eventually("one leader of three members on every node",
                        lambda: agreed_queue_leader(cluster, queue, names))
    return by_name, names, leader


def test_a_group_of_three_survives_its_leader(cluster):
    by_name, names, leader = declare_group_of_three(cluster, "qq3")
    for node in cluster:
        info = node.queue("qq3")
        assert sorted(info["online"]) == names
        assert info["type"] == "quorum"

    # 1,000 confirmed publishes on the leader's node.
    conn = by_name[leader].connect()
    channel = conn.channel()
    channel.confirm_delivery()
    bodies = [b"message-%04d" % i for i in range(MESSAGES)]
    for body in bodies:
        channel.basic_publish("", "qq3", body, pika.BasicProperties(delivery_mode=2))
    eventually("the leader to count the messages",
               lambda: by_name[leader].queue("qq3")["messages"] == MESSAGES)

    # A consumer on the leader's node holds ten messages unacked when its node dies. (Its
    # connection dies with the node; the new leader returns what it held, redelivered.)
    consumer_conn = by_name[leader].connect()
    consumer_channel = consumer_conn.channel()
    consumer_channel.basic_qos(prefetch_count=10)
    held = []
    consumer_channel.basic_consume("qq3", lambda ch, m, p, body: held.append(body))
    deadline = time.monotonic() + 30
    while len(held) < 10 and time.monotonic() < deadline:
        consumer_conn.process_data_events(time_limit=0.5)
    assert held == bodies[:10]

    by_name[leader].kill()
    survivors = [n for n in cluster if n.name != leader]
    new_leader = leader_after(survivors, "qq3", names, leader)
    info = by_name[new_leader].queue("qq3")
    assert leader not in info["online"]
    assert sorted(info["online"]) == sorted(n.name for n in survivors)

    # Every confirmed message is on the new leader, in order; the ten the dead node's consumer
    # held come first, redelivered.
    eventually("every message back in the queue",
               lambda: by_name[new_leader].queue("qq3")["messages_ready"] == MESSAGES)
    conn = by_name[new_leader].connect()
    channel = conn.channel()
    got = []
    for _ in range(MESSAGES):
        method, _, body = channel.basic_get("qq3", auto_ack=False)
        assert method is not None, "the queue ran dry after %d messages" % len(got)
        assert method.redelivered == (len(got) < 10), (len(got), body)
        got.append(body)
        channel.basic_ack(method.delivery_tag)
    assert got == bodies
    assert channel.basic_get("qq3", auto_ack=True)[0] is None

    # The group goes on with two of its three members: a publish is replicated to both.
    channel.basic_publish("", "qq3", b"after-failover")
    eventually("the follower to replicate the publish",
               lambda: all(n.queue("qq3")["messages_ready"] == 1 for n in survivors))
    method, _, body = channel.basic_get("qq3", auto_ack=True)
    assert body == b"after-failover"
    conn.close()

    # The killed node comes back as a follower and catches up with the leader's log.
    by_name[leader].start([p for p in cluster if p is not by_name[leader]])
    eventually("the restarted node to see the new leader",
               lambda: agreed_queue_leader(cluster, "qq3", names) == new_leader, timeout=60)

    def caught_up():
        leader_view = raft(by_name[new_leader], "qq3")
        own = raft(by_name[leader], "qq3")
        if leader_view is None or own is None:
            return False
        matched = {m["name"]: m["matched_index"] for m in leader_view["members"]}
        return (own["node"] == leader and own["state"] == "follower"
                and own["commit_index"] is not None
                and own["commit_index"] >= leader_view["commit_index"]
                and matched[leader] == leader_view["last_log_index"])

    eventually("the restarted member to catch up", caught_up, timeout=60)
    text = by_name[new_leader].ctl("quorum_status", "qq3")
    assert text.returncode == 0, text.stderr
    assert "Raft State" in text.stdout and "Commit Index" in text.stdout
    for name in names:
        assert name in text.stdout


def test_at_least_once_dead_letters_outlive_their_leader(cluster):
    by_name, names, leader = declare_group_of_three(cluster, "qdl", **{
        "x-dead-letter-exchange": "late-dlx", "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish"})

    # Twenty messages rejected while the dead-letter exchange does not exist: held.
    conn = by_name[leader].connect()
    channel = conn.channel()
    channel.confirm_delivery()
    bodies = {b"dead-%02d" % i for i in range(20)}
    for body in sorted(bodies):
        channel.basic_publish("", "qdl", body, pika.BasicProperties(delivery_mode=2))
    for _ in range(len(bodies)):
        method, _, _ = channel.basic_get("qdl", auto_ack=False)
        assert method is not None
        channel.basic_reject(method.delivery_tag, requeue=False)
    eventually("every message rejected on every member",
               lambda: all((n.queue("qdl") or {}).get("messages") == 0 for n in cluster))
    conn.close()

    by_name[leader].kill()
    survivors = [n for n in cluster if n.name != leader]
    new_leader = leader_after(survivors, "qdl", names, leader)

    # A route appears: the new leader sends what the group still holds.
    conn = by_name[new_leader].connect()
    channel = conn.channel()
    channel.exchange_declare("late-dlx", "fanout", durable=True)
    channel.queue_declare("late-dlq", durable=True)
    channel.queue_bind("late-dlq", "late-dlx")
    got = set()
    deadline = time.monotonic() + 60
    while got != bodies and time.monotonic() < deadline:
        method, props, body = channel.basic_get("late-dlq", auto_ack=True)
        if method is None:
            time.sleep(0.2)
            continue
        assert props.headers["x-death"][0]["reason"] == "rejected"
        got.add(body)
    assert got == bodies, "dead letters lost with their leader: %s" % sorted(bodies - got)
    conn.close()


def declare_sized(node, sizes):
    """Declares quorum queues through `node`, each with its x-quorum-initial-group-size
    (`sizes`: name -> size)."""
    conn = node.connect()
    channel = conn.channel()
    for name, size in sizes.items():
        channel.queue_declare(name, durable=True, arguments={
            "x-queue-type": "quorum", "x-quorum-initial-group-size": size})
    conn.close()


def publish_confirmed(node, queue, count):
    """Publishes `count` messages (m0, m1, ...) to `queue` through `node`, each confirmed."""
    conn = node.connect()
    channel = conn.channel()
    channel.confirm_delivery()
    for i in range(count):
        channel.basic_publish("", queue, b"m%d" % i)
    conn.close()


def test_group_sizes_one_and_two_place_the_declaring_node_first(shared_cluster):
    cluster = shared_cluster
    first, second, _ = cluster
    declare_sized(second, {"qq1": 1, "qq2": 2})

    # Every node lists the members; the members agree on the leader. (A node outside the
    # group shows no leader until it has one to forward to: it runs no member.)
    def placed(name, size):
        listed = [(n.queue(name) or {}).get("members") for n in cluster]
        if any(m is None or len(m) != size for m in listed) or len({tuple(sorted(m)) for m in listed}) != 1:
            return None
        return listed[0]

    assert eventually("qq1 on the declaring node alone", lambda: placed("qq1", 1)) == [second.name]
    assert eventually("qq1 led by its one member",
                      lambda: agreed_queue_leader([second], "qq1", [second.name])) == second.name
    two = eventually("qq2 on two nodes", lambda: placed("qq2", 2))
    assert two[0] == second.name
    members = [n for n in cluster if n.name in two]
    assert eventually("qq2's leader agreed", lambda: agreed_queue_leader(members, "qq2", two)) in two

    # Published on a node outside the group: forwarded to the leader, confirmed, and there.
    outside = next(n for n in cluster if n.name not in two)
    publish_confirmed(outside, "qq2", 20)
    leader = next(n for n in cluster if n.name == agreed_queue_leader(members, "qq2", two))
    eventually("the forwarded publishes on the leader",
               lambda: leader.queue("qq2")["messages"] == 20)

    # Deleting the queue removes the group on every member.
    conn = first.connect()
    conn.channel().queue_delete("qq2")
    conn.close()
    eventually("qq2 gone everywhere", lambda: all(n.queue("qq2") is None for n in cluster))


def test_invalid_group_sizes_are_refused_as_rabbitmq_does(shared_cluster):
    conn = shared_cluster[0].connect()
    # Texts as RabbitMQ 3.10.8 answers them (checked side by side).
    for value, why in [(0, "{value_zero,0}"), (-1, "{value_negative,-1}"),
                       ("x", '"expected integer, got longstr"')]:
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("bad", durable=True, arguments={
                "x-queue-type": "quorum", "x-quorum-initial-group-size": value})
        assert refused.value.reply_code == 406
        assert refused.value.reply_text == (
            "PRECONDITION_FAILED - invalid arg 'x-quorum-initial-group-size' for queue 'bad' "
            "in vhost '/': %s" % why)
    conn.close()


def per_object_samples(node, family, queue):
    """The samples of `family` for `queue` on `node`'s /metrics/per-object: (labels, value)."""
    response = requests.get("http://%s:%d/metrics/per-object" % (node.host, node.prometheus_port),
                            timeout=10)
    response.raise_for_status()
    samples = []
    for line in response.text.splitlines():
        if line.startswith(family + "{") and ('queue="%s"' % queue) in line:
            labels, value = line.rsplit(" ", 1)
            samples.append((labels, float(value)))
    return samples


def test_prometheus_reports_each_queue_once_with_its_type(shared_cluster):
    """Summed over the nodes, as a Grafana dashboard sums them, a quorum queue's and a classic
    queue's depths are counted once (by the group's leader, by the home node), and
    rabbitmq_queue_info carries the queue's real type."""
    cluster = shared_cluster
    conn = cluster[0].connect()
    channel = conn.channel()
    channel.queue_declare("prom-qq", durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_declare("prom-classic", durable=True)
    channel.confirm_delivery()
    for i in range(10):
        channel.basic_publish("", "prom-qq", b"q%d" % i)
    for i in range(5):
        channel.basic_publish("", "prom-classic", b"c%d" % i)
    conn.close()
    names = sorted(n.name for n in cluster)
    eventually("prom-qq's leader", lambda: agreed_queue_leader(cluster, "prom-qq", names))

    def summed(family, queue):
        return sum(v for n in cluster for _, v in per_object_samples(n, family, queue))

    eventually("the quorum queue's depth summed once",
               lambda: summed("rabbitmq_queue_messages", "prom-qq") == 10, timeout=30)
    eventually("the classic queue's depth summed once",
               lambda: summed("rabbitmq_queue_messages", "prom-classic") == 5, timeout=30)
    infos = [labels for n in cluster
             for labels, _ in per_object_samples(n, "rabbitmq_queue_info", "prom-qq")]
    assert len(infos) == 1 and 'queue_type="rabbit_quorum_queue"' in infos[0], infos
    infos = [labels for n in cluster
             for labels, _ in per_object_samples(n, "rabbitmq_queue_info", "prom-classic")]
    assert len(infos) == 1 and 'queue_type="rabbit_classic_queue"' in infos[0], infos


def test_idle_quorum_queues_still_expire_and_report_counts(shared_cluster):
    """An idle quorum queue costs no periodic work (its tick has no timer once quiet, and the
    nodes look at it only when it changes): what happens to it later must still wake that.
    A message with a TTL published after a quiet spell expires; a node outside the group
    learns the count of messages published on the leader after a quiet spell (its
    declare-ok answers from the leader's count reports, sent when the queue changes)."""
    cluster = shared_cluster
    declare_sized(cluster[1], {"idle-ttl": 3, "idle-counts": 2})
    names = sorted(n.name for n in cluster)
    ttl_leader_name = eventually("idle-ttl's leader",
                                 lambda: agreed_queue_leader(cluster, "idle-ttl", names))
    two = eventually("idle-counts on two nodes",
                     lambda: (cluster[1].queue("idle-counts") or {}).get("members"))
    members = [n for n in cluster if n.name in two]
    counts_leader_name = eventually(
        "idle-counts' leader", lambda: agreed_queue_leader(members, "idle-counts", sorted(two)))
    outside = next(n for n in cluster if n.name not in two)
    outside_conn = outside.connect()

    def outside_count():
        return outside_conn.channel().queue_declare(
            "idle-counts", passive=True).method.message_count

    assert outside_count() == 0
    # Quiet long enough for the ticks to sleep (5 checks, 200 ms apart) and the bound queue's
    # count checks to stop (10 rounds, 100 ms apart).
    time.sleep(3)

    # Published through a follower: the TTL is only the group's to apply.
    follower = next(n for n in cluster if n.name != ttl_leader_name)
    conn = follower.connect()
    channel = conn.channel()
    channel.confirm_delivery()
    channel.basic_publish("", "idle-ttl", b"short-lived",
                          pika.BasicProperties(expiration="300"))
    conn.close()
    ttl_leader = next(n for n in cluster if n.name == ttl_leader_name)
    eventually("the message with a TTL expired", lambda: (
        lambda info: info is not None and info.get("messages") == 0)(ttl_leader.queue("idle-ttl")),
        timeout=4)

    counts_leader = next(n for n in cluster if n.name == counts_leader_name)
    publish_confirmed(counts_leader, "idle-counts", 7)
    eventually("the outside node's declare-ok counts the publishes",
               lambda: outside_count() == 7, timeout=5)
    outside_conn.close()

    conn = cluster[0].connect()
    conn.channel().queue_delete("idle-ttl")
    conn.channel().queue_delete("idle-counts")
    conn.close()

"""The one publish rule through every protocol and every queue type: a publish is confirmed
(0-9-1's basic.ack, AMQP 1.0's accepted, the HTTP API's answer) only once the message is safe
in its queue, and then the message is there:

- a durable classic queue: once its node's store has fsync'd the message (stalled here by
  freezing the node's file system, `fsfreeze`);
- a quorum queue: once its group has committed it (stalled by stopping both followers);
- a classic queue served by another node (published through a node that forwards it): once
  the serving node has it safe (its file system frozen).

For each protocol x queue type: no confirm while stalled, the confirm once released, and the
message in the queue. Needs root (each node's data directory is a file system of its own)."""
import os
import shutil
import subprocess
import threading

import pika
import pika.exceptions
import pytest
from proton import Message
from proton.utils import BlockingConnection, SendException

from cluster_nodes import Cluster, agreed_queue_leader, eventually
from own_broker import needs_warren_bin

pytestmark = [
    pytest.mark.own_brokers, needs_warren_bin, pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("fsfreeze") is None,
                       reason="a file system of each node's own, frozen with fsfreeze: root")]

CLASSIC, QUORUM = "safety-classic", "safety-quorum"
# How long a stalled publish must stay unconfirmed.
STALL_S = 3
# How long a released publish may take to be confirmed (a debug build on a busy machine).
RELEASE_S = 60


class Amqp091:
    def __init__(self, node):
        self.connection = node.connect()
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def publish(self, queue, body):
        try:
            self.channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2),
                                       mandatory=True)
            return "confirmed"
        except pika.exceptions.NackError:
            return "nacked"
        except pika.exceptions.UnroutableError:
            return "returned"

    def close(self):
        self.connection.close()


class Amqp10:
    def __init__(self, node):
        self.connection = BlockingConnection(
            "amqp://%s:%d" % (node.host, node.amqp_port), timeout=RELEASE_S,
            user=node.user, password=node.password, allowed_mechs="PLAIN")
        self.senders = {}

    def publish(self, queue, body):
        if queue not in self.senders:
            self.senders[queue] = self.connection.create_sender("/queues/%s" % queue)
        try:
            self.senders[queue].send(Message(body=body, durable=True, inferred=True),
                                     timeout=RELEASE_S)
            return "confirmed"
        except SendException as e:
            return "refused: %s" % e

    def close(self):
        self.connection.close()


class Http:
    def __init__(self, node):
        self.node = node

    def publish(self, queue, body):
        answer = self.node.request(
            "POST", "/api/exchanges/%2F/amq.default/publish", timeout=RELEASE_S,
            json={"routing_key": queue, "payload": body.decode(), "payload_encoding": "string",
                  "properties": {"delivery_mode": 2}})
        if answer.status_code == 200 and answer.json() == {"routed": True}:
            return "confirmed"
        return "answered %d %s" % (answer.status_code, answer.text)

    def close(self):
        pass


PROTOCOLS = {"amqp091": Amqp091, "amqp10": Amqp10, "http": Http}


class Publisher(threading.Thread):
    """One publish through `protocol` to `queue` via `node`, in a thread of its own: its
    client connects at once (before any stall) and publishes when told to (`go`)."""

    def __init__(self, protocol, node, queue, body):
        super().__init__(daemon=True)
        self.protocol, self.node, self.queue, self.body = protocol, node, queue, body
        self.connected, self.go, self.done = (threading.Event(), threading.Event(),
                                              threading.Event())
        self.outcome = None

    def run(self):
        try:
            client = PROTOCOLS[self.protocol](self.node)
            self.connected.set()
            self.go.wait()
            self.outcome = client.publish(self.queue, self.body)
            client.close()
        except Exception as e:  # any failure is the publish's outcome, which the test reads
            self.outcome = "failed: %r" % e
        finally:
            self.connected.set()
            self.done.set()


def freeze(node):
    subprocess.run(["fsfreeze", "-f", node.data_dir], check=True)


def thaw(node):
    subprocess.run(["fsfreeze", "-u", node.data_dir], check=False, capture_output=True)


def got(node, queue):
    """The bodies `queue` holds, taken from it through `node`."""
    connection = node.connect()
    channel = connection.channel()
    bodies = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    connection.close()
    return bodies


def publish_now(protocol, via, queue, body):
    """One publish with nothing stalled: its outcome."""
    publisher = Publisher(protocol, via, queue, body)
    publisher.start()
    publisher.go.set()
    assert publisher.done.wait(RELEASE_S + 10), "%s: no answer" % protocol
    return publisher.outcome


def check_stalled_then_confirmed(protocol, via, queue, stall, release, holder):
    body = ("%s-%s-%s" % (protocol, queue, via.name)).encode()
    publisher = Publisher(protocol, via, queue, body)
    publisher.start()
    assert publisher.connected.wait(30) and publisher.outcome is None, publisher.outcome
    stall()
    try:
        publisher.go.set()
        answered_early = publisher.done.wait(STALL_S)
    finally:
        release()
    # A refusal while stalled is safe (a quorum leader whose lease ran out refuses writes: the
    # publisher hears nack / rejected / 400 and may publish again); a confirm is not.
    assert not (answered_early and publisher.outcome == "confirmed"), (
        "%s publish to %s via %s confirmed while the message was not safe"
        % (protocol, queue, via.name))
    assert publisher.done.wait(RELEASE_S + 10), "%s: no answer once released" % protocol
    confirmed = [body] if publisher.outcome == "confirmed" else []
    if not confirmed:
        # Refused: published again, now with nothing stalled, it must be confirmed.
        again = body + b"-again"
        assert publish_now(protocol, via, queue, again) == "confirmed", (
            protocol, queue, publisher.outcome)
        confirmed = [again]
    held = []

    def holds_every_confirmed():
        held.extend(got(holder, queue))
        return set(confirmed) <= set(held) or None

    assert eventually("%s's confirmed message in %s" % (protocol, queue),
                      holds_every_confirmed, timeout=30)
    # Nothing else: a refused publish may or may not have reached the queue (as with any
    # nack), but no other message may be there.
    assert set(held) <= {body, body + b"-again"}, held


def test_every_protocol_confirms_only_what_every_queue_type_holds_safe():
    cluster = Cluster("safety", 3, extra=["--disk-free-limit-bytes", str(1 << 20)],
                      disk_mb=160)
    frozen, paused = [], []

    def freeze_disk_of(node):
        def stall():
            freeze(node)
            frozen.append(node)
        return stall

    def thaw_all():
        while frozen:
            thaw(frozen.pop())

    try:
        cluster.start()
        home, forwarder, _third = cluster.nodes
        connection = home.connect()
        channel = connection.channel()
        channel.queue_declare(CLASSIC, durable=True, arguments={"x-queue-type": "classic"})
        channel.queue_declare(QUORUM, durable=True, arguments={"x-queue-type": "quorum"})
        connection.close()
        eventually("%s known on %s" % (CLASSIC, forwarder.name),
                   lambda: forwarder.queue(CLASSIC))
        leader = cluster.node(eventually(
            "%s's leader, the same on every node" % QUORUM,
            lambda: agreed_queue_leader(cluster.nodes, QUORUM, members=cluster.names)))
        followers = [n for n in cluster.nodes if n is not leader]

        def stop_followers():
            for node in followers:
                node.pause()
                paused.append(node)

        def resume_followers():
            while paused:
                paused.pop().resume()

        for protocol in PROTOCOLS:
            # A durable classic queue on the node published to: its store's fsync.
            check_stalled_then_confirmed(protocol, home, CLASSIC, freeze_disk_of(home),
                                         thaw_all, home)
            # The same queue through another node, which forwards to the one serving it.
            check_stalled_then_confirmed(protocol, forwarder, CLASSIC, freeze_disk_of(home),
                                         thaw_all, home)
            # A quorum queue: its group's commit, which needs a follower.
            check_stalled_then_confirmed(protocol, leader, QUORUM, stop_followers,
                                         resume_followers, leader)
    finally:
        thaw_all()
        for node in paused:
            node.resume()
        cluster.close()

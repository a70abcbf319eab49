"""Resource alarms as RabbitMQ applies them ("Memory and Disk Alarms", "Blocked Connection
Notifications"): only a connection that publishes is blocked and told; a consume-only
connection is never notified and keeps consuming, acking, declaring and deleting, so the
backlog drains, the alarm clears, the publisher gets connection.unblocked and everything it
published arrives, in order. Heartbeat timeouts are suspended while a connection is blocked.

These tests start brokers of their own (a small memory watermark, a data directory on a
small tmpfs), so they need the broker binary: WARREN_BIN, which test.sh sets.
"""
import os
import subprocess
import threading
import time

import pytest

from conftest import connect, uname
from own_broker import Broker, mount_tmpfs, needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]


class Notified:
    """connection.blocked / unblocked as they arrive. Registered on pika's connection
    object itself: BlockingConnection would only hand them over once a publish stuck on a
    socket the broker no longer reads returns."""

    def __init__(self, conn):
        self.blocked = threading.Event()
        self.unblocked = threading.Event()
        self.reasons = []
        conn._impl.add_on_connection_blocked_callback(self._on_blocked)
        conn._impl.add_on_connection_unblocked_callback(self._on_unblocked)

    def _on_blocked(self, _conn, frame):
        self.reasons.append(frame.method.reason)
        self.blocked.set()

    def _on_unblocked(self, _conn, _frame):
        self.unblocked.set()


def publish_all(url, queue, count, body_size, done, errors, heartbeat=None):
    try:
        overrides = {"blocked_connection_timeout": None}
        if heartbeat:
            overrides["heartbeat"] = heartbeat
        conn = connect(url, **overrides)
        done["notified"] = Notified(conn)
        ch = conn.channel()
        pad = b"x" * body_size
        for i in range(count):
            ch.basic_publish("", queue, b"%08d" % i + pad)
        conn.process_data_events(time_limit=0.5)
        done["published"] = count
        conn.close()
    except Exception as e:  # reported by the test thread
        errors.append(e)


def consume_all(url, queue, count, during_alarm=None, after_first=None, timeout=60):
    """Consumes `count` messages with manual acks; returns (bodies' sequence numbers,
    whether this connection was ever notified). `after_first` runs once the first message
    was received and acked."""
    conn = connect(url)
    notified = Notified(conn)
    ch = conn.channel()
    if during_alarm:
        during_alarm(ch)
    ch.basic_qos(prefetch_count=500)
    seen = []
    deadline = time.monotonic() + timeout
    for method, _props, body in ch.consume(queue, inactivity_timeout=1):
        if method is not None:
            seen.append(int(body[:8]))
            if len(seen) % 100 == 0 or len(seen) == count or len(seen) == 1:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if len(seen) == 1 and after_first:
                after_first()
        if len(seen) >= count or time.monotonic() > deadline:
            break
    ch.cancel()
    conn.close()
    return seen, notified.blocked.is_set() or notified.unblocked.is_set()


def declare_and_delete(ch):
    other = uname("alarm.other")
    ch.queue_declare(other)
    ch.queue_delete(other)


def run_blocked_publisher_and_consumer(url, queue, count, body_size, clear_alarm=None):
    done, errors = {}, []
    publisher = threading.Thread(
        target=publish_all, args=(url, queue, count, body_size, done, errors),
        kwargs={"heartbeat": 1}, daemon=True)
    publisher.start()
    deadline = time.monotonic() + 20
    while "notified" not in done and not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not errors, errors
    notified = done["notified"]
    assert notified.blocked.wait(20), "the publisher was never blocked"
    # Blocked for over three heartbeat intervals: the broker must not time it out.
    time.sleep(3.5)
    assert not notified.unblocked.is_set()
    # The consumer declares and deletes during the alarm, then consumes and acks. An alarm
    # the test clears itself is cleared after the declares: the publish that met it waits
    # unrouted until then (RabbitMQ stops reading at its content header), so when the alarm
    # was on before the first publish there is nothing to consume before.
    def during_alarm(ch):
        declare_and_delete(ch)
        if clear_alarm:
            clear_alarm()
    seen, consumer_notified = consume_all(url, queue, count, during_alarm=during_alarm)
    publisher.join(30)
    assert not errors, errors
    assert done.get("published") == count, "the publisher did not finish"
    assert notified.unblocked.is_set(), "no connection.unblocked"
    assert not consumer_notified, "a consume-only connection was told it is blocked"
    assert seen == list(range(count)), "lost, duplicated or reordered messages"
    return notified


def test_memory_alarm_blocks_only_the_publisher(tmp_path):
    data = str(tmp_path / "data")
    broker = Broker(data, "--memory-high-watermark-bytes", str(48 * 1024 * 1024))
    try:
        queue = uname("alarm.mem")
        c = connect(broker.url)
        c.channel().queue_declare(queue)
        c.close()
        notified = run_blocked_publisher_and_consumer(broker.url, queue, 20000, 4000)
        # It may be blocked again while the consumer drains: the alarm clears below 90 % of
        # the watermark and publishing resumes.
        assert notified.reasons and set(notified.reasons) == {"low on memory"}, notified.reasons
        assert broker.proc.poll() is None
    finally:
        broker.stop()


def test_disk_alarm_blocks_only_the_publisher():
    mount_point = mount_tmpfs("warren-diskalarm-", "64m")
    broker = None
    try:
        broker = Broker(os.path.join(mount_point, "data"),
                        "--disk-free-limit-bytes", str(40 * 1000 * 1000))
        queue = uname("alarm.disk")
        c = connect(broker.url)
        c.channel().queue_declare(queue)
        c.close()
        filler = os.path.join(mount_point, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (30 * 1024 * 1024))
        notified = run_blocked_publisher_and_consumer(
            broker.url, queue, 2000, 100, clear_alarm=lambda: os.remove(filler))
        assert notified.reasons == ["low on disk"], notified.reasons
    finally:
        if broker:
            broker.stop()
        subprocess.run(["umount", mount_point])


def test_set_vm_memory_high_watermark_raises_and_clears_the_alarm(tmp_path):
    """`warren ctl set_vm_memory_high_watermark` (the Java client's suites call rabbitmqctl's
    to provoke the memory alarm): a threshold below what the broker uses blocks a publishing
    connection at once; the configured one back unblocks it, and what it published arrives."""
    from own_broker import free_port
    port = free_port()
    broker = Broker(str(tmp_path), "--management-port", str(port))
    api = "http://127.0.0.1:%d" % port
    ctl = lambda *args: subprocess.run(  # noqa: E731
        [os.environ["WARREN_BIN"], "ctl", "--url", api, *args],
        capture_output=True, text=True, timeout=20)
    try:
        conn = connect(broker.url, blocked_connection_timeout=None)
        notified = Notified(conn)
        ch = conn.channel()
        ch.queue_declare("watermark", auto_delete=True)
        ch.basic_publish("", "watermark", b"before")
        r = ctl("set_vm_memory_high_watermark", "absolute", "1MB")
        assert r.returncode == 0, r.stderr
        assert "Setting memory threshold on" in r.stdout and "to 1MB bytes" in r.stdout
        ch.basic_publish("", "watermark", b"during")  # a publishing connection gets blocked
        deadline = time.monotonic() + 10
        while not notified.blocked.is_set() and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert notified.blocked.is_set(), "no connection.blocked"
        assert ctl("set_vm_memory_high_watermark", "0.4").returncode == 0
        deadline = time.monotonic() + 10
        while not notified.unblocked.is_set() and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert notified.unblocked.is_set(), "no connection.unblocked"
        assert ch.queue_declare("watermark", passive=True).method.message_count == 2
        bad = ctl("set_vm_memory_high_watermark", "1.5")
        assert bad.returncode == 65 and "between 0.0 and 1.0" in bad.stderr
        conn.close()
    finally:
        broker.stop()


def test_set_disk_free_limit_raises_and_clears_the_disk_alarm(tmp_path):
    """`warren ctl set_disk_free_limit` (the Java client's suites raise the disk alarm through
    rabbitmqctl, tools/rabbitmqctl maps it here): a limit above the disk's size blocks a
    publishing connection with the disk alarm; the old limit back unblocks it, and the API's
    node says the limit in force."""
    from own_broker import free_port
    import json
    import urllib.request
    port = free_port()
    broker = Broker(str(tmp_path), "--management-port", str(port))
    api = "http://127.0.0.1:%d" % port
    ctl = lambda *args: subprocess.run(  # noqa: E731
        [os.environ["WARREN_BIN"], "ctl", "--url", api, *args],
        capture_output=True, text=True, timeout=20)

    def node_limit():
        request = urllib.request.Request(api + "/api/nodes")
        request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
        return json.load(urllib.request.urlopen(request))[0]["disk_free_limit"]
    try:
        conn = connect(broker.url, blocked_connection_timeout=None)
        notified = Notified(conn)
        ch = conn.channel()
        ch.queue_declare("disk-limit", auto_delete=True)
        r = ctl("set_disk_free_limit", "1000000GB")
        assert r.returncode == 0, r.stderr
        assert "Setting disk free limit on" in r.stdout and "to 1000000GB bytes" in r.stdout
        assert node_limit() == 1000000 * 10**9
        ch.basic_publish("", "disk-limit", b"during")
        deadline = time.monotonic() + 10
        while not notified.blocked.is_set() and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert notified.blocked.is_set() and notified.reasons == ["low on disk"]
        assert ctl("set_disk_free_limit", "50000000").returncode == 0
        deadline = time.monotonic() + 10
        while not notified.unblocked.is_set() and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        assert notified.unblocked.is_set(), "no connection.unblocked"
        assert node_limit() == 50000000
        assert ctl("set_disk_free_limit", "lots").returncode == 65
        conn.close()
    finally:
        broker.stop()

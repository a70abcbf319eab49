"""A full disk under a broker whose disk alarm is off (--disk-free-limit-bytes 0), so the
store's writes themselves fail with ENOSPC (docs/STORAGE.md §11), on a real 32 MiB tmpfs:

- every unconfirmed persistent publish is settled within 1 s of being sent: an ack if it
  reached the disk, a nack if not; a publish during the outage is nacked at once;
- a consumer on another connection keeps consuming and acking meanwhile;
- once space returns (a filler file is deleted) publishing with confirms works again,
  without a restart, and every confirmed message is delivered;
- killed (-9) and restarted on a disk with not one free page, the broker comes up with its
  messages; publishes are nacked until the consumer's acks free whole segments, then the
  store writes again by itself.

Starts brokers of its own: needs WARREN_BIN (test.sh sets it) and permission to mount a
tmpfs (root); skips otherwise.
"""
import errno
import os
import subprocess
import time

import pika
import pytest

from conftest import connect, wait_for
from own_broker import Broker, mount_tmpfs, needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]

BODY = 64 * 1024
QUEUE = "full.disk"
# The bound is 1 s; confirms come in milliseconds here. The test allows twice that
# so a CI machine that stalls a process for a moment does not fail it.
SLOWEST_CONFIRM_S = 2.0


def body(i):
    return b"%08d" % i + b"x" * (BODY - 8)


def number(b):
    return int(b[:8])


class Confirms:
    """Pipelined publisher confirms on a channel of `conn`: when each tag was sent and when
    (and how) it was settled."""

    def __init__(self, conn):
        self.conn = conn
        self.ch = conn.channel()
        self.sent = {}
        self.settled = {}  # tag -> (acked, monotonic time)
        selected = []
        self.ch._impl.confirm_delivery(self._on_confirm, callback=selected.append)
        assert wait_for(lambda: selected, conn=conn)

    def _on_confirm(self, frame):
        m = frame.method
        acked = isinstance(m, pika.spec.Basic.Ack)
        now = time.monotonic()
        tags = [m.delivery_tag]
        if m.multiple:
            tags = [t for t in self.sent if t <= m.delivery_tag and t not in self.settled]
        for t in tags:
            assert t not in self.settled, "tag %d confirmed twice" % t
            self.settled[t] = (acked, now)

    def publish(self, i):
        tag = len(self.sent) + 1
        self.ch.basic_publish("", QUEUE, body(i),
                              pika.BasicProperties(delivery_mode=2))
        self.sent[tag] = (i, time.monotonic())
        return tag

    def settle(self, tags, timeout):
        assert wait_for(lambda: all(t in self.settled for t in tags), timeout, self.conn), \
            "unsettled: %s" % [t for t in tags if t not in self.settled]
        acked = [self.sent[t][0] for t in tags if self.settled[t][0]]
        nacked = [self.sent[t][0] for t in tags if not self.settled[t][0]]
        slowest = max(self.settled[t][1] - self.sent[t][1] for t in tags)
        return acked, nacked, slowest

    def publish_until_acked(self, first, timeout=5.0):
        """Publishes one message at a time until one is acked; returns its number."""
        deadline = time.monotonic() + timeout
        i = first
        while True:
            tag = self.publish(i)
            acked, _, _ = self.settle([tag], 2)
            if acked:
                return i
            assert time.monotonic() < deadline, "publishing did not work again"
            time.sleep(0.1)
            i += 1


def fill(path, leave_bytes=0):
    """Writes a file until the filesystem has at most `leave_bytes` free."""
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 20)
        while True:
            st = os.statvfs(os.path.dirname(path))
            free = st.f_bavail * st.f_frsize - leave_bytes
            if free <= 0:
                break
            try:
                f.write(chunk[: max(4096, min(len(chunk), free))])
                f.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break


def consume(url, want, timeout=20):
    """Consumes with manual acks until every number in `want` arrived; returns all numbers
    received (nacked messages may come too: at least once)."""
    conn = connect(url)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    seen = []
    deadline = time.monotonic() + timeout
    for method, _props, b in ch.consume(QUEUE, inactivity_timeout=0.5):
        if method is not None:
            seen.append(number(b))
            ch.basic_ack(method.delivery_tag)
        if set(want) <= set(seen) or time.monotonic() > deadline:
            break
    ch.cancel()
    conn.close()
    missing = set(want) - set(seen)
    assert not missing, "confirmed messages not delivered: %s" % sorted(missing)
    return seen


def count(url):
    conn = connect(url)
    n = conn.channel().queue_declare(QUEUE, durable=True, passive=True).method.message_count
    conn.close()
    return n


def test_full_disk_nacks_consumers_go_on_publishing_resumes_and_restart_works():
    mount_point = mount_tmpfs("warren-fulldisk-", "32m")
    data = os.path.join(mount_point, "data")
    filler = os.path.join(mount_point, "filler")
    broker = None
    try:
        broker = Broker(data, "--disk-free-limit-bytes", "0")
        conn = connect(broker.url)
        conn.channel().queue_declare(QUEUE, durable=True)
        confirms = Confirms(conn)

        # About 6 MiB left; 160 publishes of 64 KiB (10 MiB) in a burst fill it.
        fill(filler, leave_bytes=6 << 20)
        tags = [confirms.publish(i) for i in range(160)]
        acked, nacked, slowest = confirms.settle(tags, timeout=15)
        assert acked and nacked, (len(acked), len(nacked))
        assert slowest <= SLOWEST_CONFIRM_S, "a confirm took %.2f s" % slowest
        # The failed batch's bytes were cut off again, freeing a little: take that too,
        # so the store stays unable to write until the fillers go. A publish then is
        # nacked at once.
        fill(filler + "2")
        tag = confirms.publish(1000)
        again_acked, _, slowest = confirms.settle([tag], timeout=15)
        assert not again_acked and slowest <= SLOWEST_CONFIRM_S

        # A consumer on another connection consumes and acks 20 messages meanwhile.
        seen = consume(broker.url, acked[:20])
        assert set(seen) <= set(range(160)), "unknown messages"

        # Space returns: publishing works again without a restart.
        os.remove(filler)
        os.remove(filler + "2")
        resumed = confirms.publish_until_acked(2000)
        confirmed = acked + [resumed]
        seen = consume(broker.url, [n for n in confirmed if n not in seen])
        assert broker.proc.poll() is None

        # Messages that stay, then a disk with not one free page, then kill -9.
        tags = [confirms.publish(3000 + i) for i in range(20)]
        kept, lost, _ = confirms.settle(tags, timeout=15)
        assert kept == list(range(3000, 3020)), lost
        conn.close()
        time.sleep(0.5)  # the consumer's acks reach the disk
        fill(filler)
        broker.proc.kill()
        broker.proc.wait()
        broker.log.close()

        broker = Broker(data, "--disk-free-limit-bytes", "0")
        assert count(broker.url) >= 20
        conn = connect(broker.url)
        confirms = Confirms(conn)
        fill(filler + "3")  # whatever opening the store freed, too
        tag = confirms.publish(4000)
        ok, _, slowest = confirms.settle([tag], timeout=15)
        assert not ok and slowest <= SLOWEST_CONFIRM_S, "a full disk takes no new message"
        # Consuming and acking everything frees whole segments: the store writes again.
        consume(broker.url, kept)
        resumed = confirms.publish_until_acked(5000, timeout=10)
        conn.close()
        consume(broker.url, [resumed])
        assert broker.proc.poll() is None
        with open(broker.log.name) as log:
            assert "panicked" not in log.read()
    finally:
        if broker:
            broker.stop()
        subprocess.run(["umount", mount_point])
        os.rmdir(mount_point)

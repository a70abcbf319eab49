"""Resource tests: a peer must not be able to make the broker exceed its limits. Each drives
a broker of its own with `warren perf` (pika would take minutes for a million messages)."""
import subprocess
import time

import pytest

from conftest import connect
from own_broker import WARREN_BIN, Broker, needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]


@pytest.mark.parametrize("queue_args", [[], ["--queue-args", "x-max-priority=10"]],
                         ids=["plain", "priority"])
def test_a_million_one_byte_publishes_stay_under_the_watermark(queue_args, tmp_path):
    """Counting only body bytes, a million 1-byte messages would count as 1 MB while holding
    far more. The publisher must be blocked, not killed, with RSS under the watermark + 10 %.
    Both a plain queue (which would page to disk past 64 MiB) and a priority queue (which
    keeps everything in memory)."""
    watermark = 64 * 1024 * 1024
    broker = Broker(str(tmp_path / "data"),
                    "--memory-high-watermark-bytes", str(watermark))
    perf = None
    try:
        perf = subprocess.Popen(
            [WARREN_BIN, "perf", "--uri", "amqp://guest:guest@127.0.0.1:%d" % broker.port,
             "-x", "1", "-y", "0", "-s", "1", "-C", "1000000", "-u", "one-byte",
             *queue_args, "-z", "25"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        peak = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and perf.poll() is None:
            peak = max(peak, broker.rss_bytes())
            time.sleep(0.05)
        print("peak RSS %.1f MiB" % (peak / 2**20))
        assert broker.proc.poll() is None, "the broker died"
        assert perf.poll() is None, "the publisher should still be connected, blocked"
        assert peak <= watermark * 1.1, "RSS peaked at %.1f MiB" % (peak / 2**20)
        with open(broker.log.name) as log:
            assert 'to="blocked"' in log.read(), "the publisher was never blocked"
    finally:
        if perf and perf.poll() is None:
            perf.kill()
        broker.stop()


def test_a_consumer_that_stops_reading_does_not_pull_its_queue_into_memory(tmp_path):
    """A consumer with no prefetch limit that stops reading its socket: the broker stops at
    a few MiB in flight for it (the pipeline bounds bytes, not only messages) and leaves the
    rest of a lazy queue on disk, instead of paging 2000 large messages into memory."""
    broker = Broker(str(tmp_path / "data"))
    try:
        uri = "amqp://guest:guest@127.0.0.1:%d" % broker.port
        subprocess.run(
            [WARREN_BIN, "perf", "--uri", uri, "-x", "1", "-y", "0", "-s", "65536",
             "-C", "3000", "-f", "persistent", "-c", "100", "-u", "stalled",
             "--queue-args", "x-queue-mode=lazy", "-ad", "false", "-z", "60"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=True, timeout=90)
        before = broker.rss_bytes()
        conn = connect(broker.url)
        ch = conn.channel()
        ch.basic_consume("stalled", lambda *a: None, auto_ack=False)
        # From here on the client reads nothing: the broker fills the socket, then waits.
        time.sleep(3)
        after = broker.rss_bytes()
        assert broker.proc.poll() is None
        grown = after - before
        print("RSS grew by %.1f MiB" % (grown / 2**20))
        assert grown < 40 * 2**20, "RSS grew by %.1f MiB for one stalled consumer" % (grown / 2**20)
        conn.close()
    finally:
        broker.stop()

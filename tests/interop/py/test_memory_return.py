"""Memory given back: after a burst of messages has gone through a queue, or thousands of
connections have come and gone, an idle broker's RSS comes back near where it started and
its own counters show nothing left over. Each drives a broker of its own with `warren perf`
(pika would take minutes for the volumes that make a difference).

The bounds are generous (8 and 30 MiB over the start) and RSS is polled for up to a minute: the broker
returns memory once it has been idle for a few seconds, which a loaded machine delays."""
import subprocess
import tempfile
import time

import pytest

from own_broker import WARREN_BIN, Broker, free_port, needs_warren_bin

requests = pytest.importorskip("requests")

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]

MiB = 2**20
SETTLE_S = 60


def perf(broker, *args, timeout=180):
    out = subprocess.run(
        [WARREN_BIN, "perf", "--uri", "amqp://guest:guest@127.0.0.1:%d" % broker.port,
         "--quiet", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    text = out.stdout.decode(errors="replace")
    assert out.returncode == 0, text
    return text


def peak_rss(broker):
    """The broker's highest RSS so far (VmHWM)."""
    with open("/proc/%d/status" % broker.proc.pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def settled_rss(broker, bound):
    """Polls RSS until it is at or under `bound` (or SETTLE_S pass); returns the last value."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        rss = broker.rss_bytes()
        if rss <= bound or time.monotonic() > deadline:
            return rss
        time.sleep(1)


@pytest.mark.timeout(400)
def test_rss_comes_back_after_a_burst_through_a_queue():
    """300,000 × 1000 B into a queue with no consumer, then all consumed: the queue's ready
    list, the store's pending buffers and the allocator's free pages all grew with it; once
    the queue is empty and the broker idle, RSS is back within 30 MiB of its start (it stayed
    about 100 MiB above before)."""
    broker = Broker(tempfile.mkdtemp(prefix="warren-burst-"))
    try:
        start = broker.rss_bytes()
        perf(broker, "-x", "1", "-y", "0", "-s", "1000", "-C", "300000", "-u", "burst",
             "-ad", "false", "-z", "150")
        perf(broker, "-x", "0", "-y", "1", "-D", "300000", "-q", "1000", "-A", "100",
             "-u", "burst", "-p", "-z", "150")
        peak = peak_rss(broker)
        # The burst must have made RSS grow, or the check below would prove nothing.
        assert peak - start > 60 * MiB, "the burst grew RSS by only %.1f MiB" % (
            (peak - start) / MiB)
        bound = start + 30 * MiB
        rss = settled_rss(broker, bound)
        print("RSS: start %.1f MiB, peak %.1f MiB, idle %.1f MiB" % (
            start / MiB, peak / MiB, rss / MiB))
        assert rss <= bound, "RSS stayed at %.1f MiB (started at %.1f MiB)" % (
            rss / MiB, start / MiB)
    finally:
        broker.stop()


@pytest.mark.timeout(400)
def test_rss_and_counters_come_back_after_two_thousand_connections():
    """1,000 sender/receiver pairs (2,000 connections, each with a channel, a queue and
    traffic) for 5 s, then all gone: the HTTP API shows no connection, channel or consumer,
    and RSS comes back within 8 MiB of its start (500 pairs stayed 15 MiB above with glibc's
    malloc left to itself). A thousand pairs, not 500: since a connection costs about 10 KiB,
    500 pairs grew RSS by only 10 MiB, too little for the bound below to tell a leak."""
    api_port = free_port()
    broker = Broker(tempfile.mkdtemp(prefix="warren-pairs-"), "--management-port", str(api_port))
    try:
        api = "http://127.0.0.1:%d/api" % api_port

        def totals():
            overview = requests.get(api + "/overview", auth=("guest", "guest"), timeout=10)
            assert overview.status_code == 200, overview.text
            return overview.json()["object_totals"]

        before = totals()
        start = broker.rss_bytes()
        report = tempfile.mkdtemp(prefix="warren-pairs-report-")
        out = subprocess.run(
            [WARREN_BIN, "perf", "scenario", "many-pairs", "--uri",
             "amqp://guest:guest@127.0.0.1:%d" % broker.port, "--steps", "1000",
             "--duration", "5", "--out", report, "--progress", "false"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
        text = out.stdout.decode(errors="replace")
        assert out.returncode == 0, text
        assert "1000 senders, 1000 receivers" in text, text

        deadline = time.monotonic() + SETTLE_S
        while True:
            now = totals()
            left = {k: now[k] for k in ("connections", "channels", "consumers", "queues")}
            if all(left[k] == before[k] for k in left) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert left == {k: before[k] for k in left}, left
        connections = requests.get(api + "/connections", auth=("guest", "guest"), timeout=10)
        assert connections.json() == []

        peak = peak_rss(broker)
        assert peak - start > 15 * MiB, "the connections grew RSS by only %.1f MiB" % (
            (peak - start) / MiB)
        bound = start + 8 * MiB
        rss = settled_rss(broker, bound)
        print("RSS: start %.1f MiB, peak %.1f MiB, idle %.1f MiB" % (
            start / MiB, peak / MiB, rss / MiB))
        assert rss <= bound, "RSS stayed at %.1f MiB (started at %.1f MiB)" % (
            rss / MiB, start / MiB)
    finally:
        broker.stop()

"""What a connection costs the broker in memory, carrying traffic or idle (the last test).

Carrying traffic (issue 12: 10,000 pairs within 300 MB, so ≤ 15 KB per connection):
1,000 sender/receiver pairs of `warren perf scenario many-pairs` — 2,000
connections, each with one channel; every receiver consumes its own queue, every sender
publishes 10 msg/s with confirms — against a broker of the test's own, over AMQP
0-9-1 and AMQP 1.0. The broker's RSS near the end of the sending window, less its RSS
before, divided by the 2,000 connections, must stay under `BOUND_PER_CONNECTION`: above the issue's
15 KB target (measured at h/pairsmem: 22 KB over 0-9-1, 28 KB over 1.0, heap mostly the
connection task's future, the event channel's first block and the socket buffers), with
slack for the messages in flight on a loaded machine. With 64 KiB socket buffers it was
46 KB (0-9-1) and 36 KB (1.0) after 10 s, growing with the run (~70 KB after 20 s): reads
and writes walked through the whole buffers. At h/pairs15 (event channel without a
preallocated block, linger and close waits boxed out of the task's future, tables of one
channel/session/link holding their values boxed): 14.5 and 20.9 KB over 0-9-1, 14.4 KB over
1.0, with a debug build on a machine at load average ~15.

Messages the broker holds are not the connections' cost, and a loaded machine makes it hold
many: at load average 9-15 the debug broker fell behind 10,000 msg/s in and out (achieved
6,900-7,700 msg/s; 8.6 MB of the senders' input unread in its sockets) and held 15,000-25,000
messages confirmed and not yet received at the RSS sample, which read 33-37 KB per connection.
heaptrack of the broker at that instant (24,800 such messages): 43.7 of its 57.6 MiB of heap
were theirs — 12.9 MiB the messages themselves, 13.2 MiB the senders' read buffers their
bodies keep alive (a message body is a slice of the read it arrived in), 9.4 MiB transfers
waiting in the receivers' write buffers, 5.9 MiB deliveries in the connections' event
channels, 3.5 MiB deliveries waiting for credit: ~1.8 KB per message. Over eight runs at
load average 7-11 (2,100-16,700 messages held), the RSS growth fit 15.2 KB per connection
plus 2,730 B per message held (r = 0.96); the runs holding 2,100-3,000 read 15-19 KB
without any accounting, those holding over 9,500 read 29-36. The perf tool counts
those messages (confirmed and not yet received, at most over the window: the RSS keeps its
peak while the broker is busy); `HELD_MESSAGE_BYTES` of RSS each is taken off before dividing
by the connections. What a connection itself costs is not taken off, so a per-connection
regression still shows in full."""
import re
import struct
import subprocess
import tempfile
import time

import pytest

import amqp_raw
from own_broker import WARREN_BIN, Broker, needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]

PAIRS = 1000
CONNECTIONS = 2 * PAIRS
BOUND_PER_CONNECTION = 30 * 1000
# What a message held by the broker costs in RSS (measured ~1.8 KB of heap, 2.7 KB of RSS
# each, see above; less is taken off, so that a loaded run errs towards a higher figure).
HELD_MESSAGE_BYTES = 1500


@pytest.mark.timeout(400)
@pytest.mark.parametrize("protocol", ["amqp091", "amqp10"])
def test_a_connection_carrying_10_msg_per_s_costs_under_30_kb(protocol):
    broker = Broker(tempfile.mkdtemp(prefix="warren-connmem-"))
    try:
        start = broker.rss_bytes()
        report = tempfile.mkdtemp(prefix="warren-connmem-report-")
        out = subprocess.run(
            [WARREN_BIN, "perf", "scenario", "many-pairs", "--uri",
             "amqp://guest:guest@127.0.0.1:%d" % broker.port, "--steps", str(PAIRS),
             "--duration", "20", "--protocol", protocol, "--out", report,
             "--progress", "false"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        text = out.stdout.decode(errors="replace")
        assert out.returncode == 0, text
        # Every client attached and traffic flowed, or the figure below would prove nothing.
        assert "%d senders, %d receivers" % (PAIRS, PAIRS) in text, text
        received = re.search(r"received (\d+)", text)
        assert received and int(received.group(1)) >= PAIRS * 10 * 2, text
        rss = re.search(r"broker RSS (\d+) MiB", text)
        assert rss, text
        during = int(rss.group(1)) * 2**20
        # The most messages confirmed and not yet received up to the sample: the broker's.
        in_flight = re.search(r"at most \d+ and (\d+) before", text)
        assert in_flight, text
        held = int(in_flight.group(1))
        per_connection = (during - start - held * HELD_MESSAGE_BYTES) / CONNECTIONS
        print("%s: RSS %.1f MiB before, %.1f MiB with %d connections and up to %d messages "
              "held (%.1f MiB at %d B): %.1f KB each" % (
                  protocol, start / 2**20, during / 2**20, CONNECTIONS, held,
                  held * HELD_MESSAGE_BYTES / 2**20, HELD_MESSAGE_BYTES, per_connection / 1000))
        assert per_connection <= BOUND_PER_CONNECTION, (
            "%.1f KB per connection (RSS %.1f MiB before, %.1f MiB during, %d messages held)" % (
                per_connection / 1000, start / 2**20, during / 2**20, held))
    finally:
        broker.stop()


IDLE_CONNECTIONS = 2000
# Issue 30's target is 4 KB per idle connection (it was ~6 KB: a 1 KiB read buffer and the
# handshake's ~1 KiB of output kept for good); the bound leaves room for a loaded machine.
BOUND_PER_IDLE_CONNECTION = 5 * 1000
# pika's client properties: what the broker keeps of each connection for the HTTP API.
PIKA_PROPERTIES = {
    "product": "Pika Python Client Library", "platform": "Python 3.11.2",
    "capabilities": {"authentication_failure_close": True, "basic.nack": True,
                     "connection.blocked": True, "consumer_cancel_notify": True,
                     "publisher_confirms": True},
    "information": "See http://pika.rtfd.org", "version": "1.3.2"}


def open_idle_connection(port):
    """A connection opened as pika opens one (its client properties, no heartbeat), left
    idle. Raw, so that 2,000 of them take seconds to open."""
    c = amqp_raw.RawConnection("amqp://guest:guest@127.0.0.1:%d/%%2F" % port, timeout=30)
    c.send(amqp_raw.PROTOCOL_HEADER)
    c.expect(amqp_raw.CONNECTION_START, timeout=30)
    c.send_method(0, amqp_raw.CONNECTION_START_OK,
                  amqp_raw.encode_table(PIKA_PROPERTIES) + amqp_raw.shortstr("PLAIN")
                  + amqp_raw.longstr(b"\0guest\0guest") + amqp_raw.shortstr("en_US"))
    c.expect(amqp_raw.CONNECTION_TUNE, timeout=30)
    c.send_method(0, amqp_raw.CONNECTION_TUNE_OK, struct.pack(">HIH", 2047, 131072, 0))
    c.send_method(0, amqp_raw.CONNECTION_OPEN,
                  amqp_raw.shortstr("/") + amqp_raw.shortstr("") + b"\x00")
    c.expect(amqp_raw.CONNECTION_OPEN_OK, timeout=30)
    return c


@pytest.mark.timeout(300)
def test_an_idle_connection_costs_under_5_kb_and_is_given_back_when_it_goes():
    """2,000 idle connections: the broker's RSS grows by under 5 KB each once it has seen
    them idle (its idle check runs every 5 s), and when the clients leave the broker gives
    back at least two thirds of that growth (it measured 6,000 B per idle connection before
    its idle check gave back the socket buffers, 4,100 B after; 17 % of the growth stayed:
    the runtime's and the registry's tables keep their room)."""
    broker = Broker(tempfile.mkdtemp(prefix="warren-idlemem-"))
    conns = []
    try:
        time.sleep(1)
        start = broker.rss_bytes()
        conns = [open_idle_connection(broker.port) for _ in range(IDLE_CONNECTIONS)]
        # Two idle checks: the first after the handshakes may find a buffer not yet empty.
        time.sleep(11)
        held = broker.rss_bytes()
        per_connection = (held - start) / IDLE_CONNECTIONS
        print("RSS %.1f MiB before, %.1f MiB with %d idle connections: %.0f B each" % (
            start / 2**20, held / 2**20, IDLE_CONNECTIONS, per_connection))
        assert per_connection <= BOUND_PER_IDLE_CONNECTION, (
            "%.0f B per idle connection (RSS %.1f MiB before, %.1f MiB with them)" % (
                per_connection, start / 2**20, held / 2**20))
        for c in conns:
            c.close()
        conns = []
        bound = start + (held - start) / 3
        deadline = time.monotonic() + 60
        while broker.rss_bytes() > bound and time.monotonic() < deadline:
            time.sleep(1)
        after = broker.rss_bytes()
        print("RSS %.1f MiB after they left" % (after / 2**20))
        assert after <= bound, "RSS stayed at %.1f MiB (%.1f MiB before, %.1f MiB held)" % (
            after / 2**20, start / 2**20, held / 2**20)
    finally:
        for c in conns:
            c.close()
        broker.stop()

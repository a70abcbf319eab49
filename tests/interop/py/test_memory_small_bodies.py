"""Small messages kept in a queue hold only their own bytes, not the read buffers they
arrived in (issue 30): a message's body is a slice of the publisher's read buffer (up to
64 KiB), and 5,000 one-byte messages kept in a queue, each read right behind a 60 KB
unroutable one, grew the broker's RSS by 294 MiB (RabbitMQ 3.10.8: +32 MiB). A queue now
copies a small message it keeps into an allocation of its own.

A broker of its own, so that its RSS is this test's alone."""
import tempfile

import pika
import pytest

from own_broker import Broker, needs_warren_bin

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]

MiB = 2**20
MESSAGES = 5000


@pytest.mark.timeout(300)
def test_one_byte_messages_behind_large_unroutable_ones_do_not_pin_read_buffers():
    """Each kept 1-byte message follows a 60 KB unroutable publish on the same connection,
    so it lands in a read buffer that is nearly all the dropped message. The broker's RSS
    grows by under 64 MiB for the 5,000 kept messages (it grew by ~300 MiB when each kept
    its buffer: every buffer then stays, so the bound is far from both)."""
    broker = Broker(tempfile.mkdtemp(prefix="warren-small-bodies-"))
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.queue_declare("kept-small", exclusive=True)
        large = b"x" * 60_000
        # Warm up: the connection's read buffer reaches its full size, and the allocator
        # its steady state, before the baseline is taken.
        for _ in range(20):
            ch.basic_publish("", "no-such-queue", large)
        ch.queue_declare("kept-small", passive=True)
        start = broker.rss_bytes()
        for _ in range(MESSAGES):
            ch.basic_publish("", "no-such-queue", large)
            ch.basic_publish("", "kept-small", b"k")
        kept = ch.queue_declare("kept-small", passive=True).method.message_count
        assert kept == MESSAGES
        grown = broker.rss_bytes() - start
        print("RSS grew by %.1f MiB for %d kept one-byte messages" % (grown / MiB, kept))
        assert grown < 64 * MiB, "RSS grew by %.1f MiB: kept messages pin read buffers" % (
            grown / MiB)
        got = ch.basic_get("kept-small", auto_ack=True)
        assert got[0] is not None and got[2] == b"k"
        conn.close()
    finally:
        broker.stop()

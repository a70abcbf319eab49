"""Shared fixtures for the pika interoperability suite.

Every test talks to the broker named by env AMQP_URL
(default amqp://guest:guest@127.0.0.1:5672/%2F), uses uuid-unique names and
cleans up what it declared through a fresh connection at teardown.
"""
import os
import sys
import time
import uuid

import pika
import pika.exceptions
import pytest

sys.path.insert(0, os.path.dirname(__file__))

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def params(url=None, **overrides):
    p = pika.URLParameters(url or AMQP_URL)
    p.socket_timeout = 5
    p.stack_timeout = 10
    p.blocked_connection_timeout = 10
    p.connection_attempts = 1
    for k, v in overrides.items():
        setattr(p, k, v)
    return p


def connect(url=None, **overrides):
    return pika.BlockingConnection(params(url, **overrides))


def uname(prefix="t"):
    return "interop.%s.%s" % (prefix, uuid.uuid4().hex[:12])


class Names:
    """Hands out unique queue/exchange names and deletes them afterwards."""

    def __init__(self):
        self.queues = []
        self.exchanges = []

    def queue(self, prefix="q"):
        n = uname(prefix)
        self.queues.append(n)
        return n

    def exchange(self, prefix="x"):
        n = uname(prefix)
        self.exchanges.append(n)
        return n

    def track_queue(self, n):
        self.queues.append(n)
        return n

    def cleanup(self):
        if not self.queues and not self.exchanges:
            return
        try:
            c = connect()
        except Exception:
            return
        try:
            for kind, items in (("q", self.queues), ("x", self.exchanges)):
                for n in items:
                    try:
                        ch = c.channel()
                        if kind == "q":
                            ch.queue_delete(n)
                        else:
                            ch.exchange_delete(n)
                        ch.close()
                    except (pika.exceptions.ChannelClosed, pika.exceptions.ChannelWrongStateError):
                        pass
        finally:
            try:
                c.close()
            except Exception:
                pass


@pytest.fixture
def names():
    n = Names()
    yield n
    n.cleanup()


@pytest.fixture
def conn():
    c = connect()
    yield c
    if c.is_open:
        try:
            c.close()
        except Exception:
            pass


@pytest.fixture
def ch(conn):
    return conn.channel()


def channel_error(ch, fn, timeout=5.0):
    """Run fn (which should make the broker close `ch`) and return the
    ChannelClosedByBroker exception. Works for both synchronous methods
    (error raised directly) and asynchronous ones (ack, publish) where the
    channel.close arrives later."""
    try:
        fn()
    except pika.exceptions.ChannelClosedByBroker as e:
        return e
    deadline = time.monotonic() + timeout
    while not ch.is_closed and time.monotonic() < deadline:
        try:
            ch.connection.process_data_events(time_limit=0.05)
        except pika.exceptions.ChannelClosedByBroker as e:
            return e
    assert ch.is_closed, "broker did not close the channel"
    reason = ch._closing_reason  # pika keeps the broker's close reason here
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker), repr(reason)
    return reason


def drain(ch, queue, expected, timeout=5.0, auto_ack=True):
    """basic.get messages until `expected` bodies were received or timeout."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        m, p, body = ch.basic_get(queue, auto_ack=auto_ack)
        if m is None:
            ch.connection.process_data_events(time_limit=0.02)
            continue
        out.append(body)
    return out


def get_one(ch, queue, timeout=3.0, auto_ack=True):
    """basic.get with a short poll: returns (method, props, body) or (None, None, None)."""
    deadline = time.monotonic() + timeout
    while True:
        m, p, b = ch.basic_get(queue, auto_ack=auto_ack)
        if m is not None or time.monotonic() >= deadline:
            return m, p, b
        ch.connection.process_data_events(time_limit=0.02)


def queue_exists(url=None, queue=""):
    c = connect(url)
    try:
        c.channel().queue_declare(queue, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 404, e
        return False
    finally:
        c.close()


def exchange_exists(exchange):
    c = connect()
    try:
        c.channel().exchange_declare(exchange, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 404, e
        return False
    finally:
        c.close()


def wait_for(pred, timeout=5.0, conn=None, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        if conn is not None:
            conn.process_data_events(time_limit=step)
        else:
            time.sleep(step)

"""Hostile AMQP 1.0 peers, over raw sockets (a well-behaved client such as proton cannot be
made to misbehave): each gets the error RabbitMQ 4 documents for it (amqp:* conditions in a
detach, end or close), the connection ends where the specification says so, nothing
published is lost, and the broker keeps serving everyone else (it is still there and still
answers at the end of every test).

- a frame larger than the max-frame-size we announced: close with
  amqp:connection:framing-error;
- a performative no version of AMQP 1.0 defines, and values serde_amqp would misread (a
  map8 of size 0): close with amqp:decode-error;
- a transfer without link credit (ours is withheld during a resource alarm): the link is
  detached with amqp:link:transfer-limit-exceeded and the message goes nowhere;
- SASL: an unknown mechanism, a wrong password: sasl-outcome auth and the connection
  closed; a second sasl-init where the AMQP header belongs: our AMQP header, then closed;
- a peer that grants a large credit and never reads: the broker stops writing to it once a
  bounded buffer is full (its memory does not grow with the queue), and every message is
  still there when the peer goes.

Also here, because it needs raw frames: a client that pipelines its whole handshake (SASL to
attach in one write) is served without waiting for more bytes.
"""
import socket
import struct
import time

import pika  # noqa: F401 (the `ch` fixture's client)

from conftest import connect, wait_for
from own_broker import Broker, needs_warren_bin
from test_amqp10 import HOST, PASSWORD, PORT, USER, amqp10, ready


# ---- a minimal AMQP 1.0 encoder and frame reader -------------------------------------------

def uint(n):
    return b"\x70" + struct.pack(">I", n)


def string(s):
    b = s.encode()
    return b"\xa1" + bytes([len(b)]) + b


def symbol(s):
    b = s.encode()
    return b"\xa3" + bytes([len(b)]) + b


def binary(b):
    return b"\xa0" + bytes([len(b)]) + b


def boolean(v):
    return b"\x41" if v else b"\x42"


NULL = b"\x40"


def described_list(code, *fields):
    body = b"".join(fields)
    return b"\x00\x53" + bytes([code]) + b"\xd0" + struct.pack(">II", 4 + len(body), len(fields)) + body


def frame(body, channel=0, kind=0, payload=b""):
    size = 8 + len(body) + len(payload)
    return struct.pack(">IBBH", size, 2, kind, channel) + body + payload


def open_frame():
    return frame(described_list(0x10, string("hostile"), NULL, uint(65536)))


def begin_frame():
    return frame(described_list(0x11, NULL, uint(0), uint(5000), uint(5000)))


def attach_frame(name, handle, role_receiver, address):
    terminus = described_list(0x28, string(address)) if role_receiver else \
        described_list(0x29, string(address))
    source = terminus if role_receiver else described_list(0x28, NULL)
    target = described_list(0x29, NULL) if role_receiver else terminus
    return frame(described_list(0x12, string(name), uint(handle), boolean(role_receiver),
                                NULL, NULL, source, target))


def flow_frame(handle, credit):
    return frame(described_list(0x13, uint(0), uint(5000), uint(0), uint(5000),
                                uint(handle), uint(0), uint(credit)))


def transfer_frame(handle, delivery_id, body):
    message = b"\x00\x53\x75" + binary(body)
    return frame(described_list(0x14, uint(handle), uint(delivery_id),
                                binary(struct.pack(">I", delivery_id)), uint(0), boolean(True)),
                 payload=message)


class Peer:
    """A raw AMQP 1.0 connection: SASL PLAIN, open, and a frame reader."""

    def __init__(self, port=PORT, login=True):
        self.sock = socket.create_connection((HOST, port), timeout=10)
        self.buf = b""
        if login:
            self.login()

    def send(self, b):
        self.sock.sendall(b)

    def read_exact(self, n, timeout=10):
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("closed by the broker")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self):
        """The next non-empty frame: (kind, channel, performative code, its bytes)."""
        while True:
            size, doff, kind, channel = struct.unpack(">IBBH", self.read_exact(8))
            body = self.read_exact(size - 8)[doff * 4 - 8:]
            if body:
                return kind, channel, body[2], body

    def until(self, code):
        """Reads frames until one with the performative `code`; its bytes."""
        while True:
            _, _, got, body = self.read_frame()
            if got == code:
                return body

    def closed(self, timeout=10):
        """True once the broker has closed the socket (reading what is left)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    def login(self, mechanism="PLAIN", response=None):
        self.send(b"AMQP\x03\x01\x00\x00")
        assert self.read_exact(8) == b"AMQP\x03\x01\x00\x00"
        self.until(0x40)  # sasl-mechanisms
        if response is None:
            response = b"\x00" + USER.encode() + b"\x00" + PASSWORD.encode()
        self.send(frame(described_list(0x41, symbol(mechanism), binary(response)), kind=1))
        outcome = self.until(0x44)
        return outcome[outcome.index(b"\x50") + 1]  # the code, a ubyte

    def open(self):
        self.send(b"AMQP\x00\x01\x00\x00")
        assert self.read_exact(8) == b"AMQP\x00\x01\x00\x00"
        self.send(open_frame())
        self.until(0x10)

    def close(self):
        self.sock.close()


def error_in(body):
    """The condition symbol of the error in a detach, end or close."""
    at = body.index(b"amqp:")
    return body[at:at + body[at - 1]].decode()


def still_serving():
    c10 = amqp10()
    c10.close()


# ---- frames and performatives ---------------------------------------------------------------

def test_a_frame_larger_than_our_max_frame_size_is_a_framing_error():
    peer = Peer()
    try:
        peer.open()
        peer.send(struct.pack(">IBBH", 10_000_000, 2, 0, 0) + b"\x00" * 64)
        assert error_in(peer.until(0x18)) == "amqp:connection:framing-error"
        assert peer.closed()
    finally:
        peer.close()
    still_serving()


def test_an_unknown_performative_and_malformed_values_are_decode_errors():
    for body in (
        described_list(0x1F, uint(1)),  # no such performative
        b"\x00\x53\x10\xc1\x00\x00",  # an open whose fields are a map8 of size 0
        described_list(0x10, string("x"), b"\xe0\x01\x01\x40"),  # an array8 too short
    ):
        peer = Peer()
        try:
            peer.open()
            peer.send(frame(body))
            assert error_in(peer.until(0x18)) == "amqp:decode-error", body
            assert peer.closed()
        finally:
            peer.close()
    still_serving()


# ---- SASL -----------------------------------------------------------------------------------

def test_a_client_that_pipelines_its_whole_handshake_gets_its_links(ch):
    """Not hostile, but raw too: a client may send SASL, open, begin, attach and flow in one
    write without waiting for any answer (the specification allows it and pipelining
    clients do it). Every frame after open must be served from what was already read,
    without waiting for more bytes (the broker used to sit on them until the peer sent
    something else)."""
    ch.queue_declare("pipelined-handshake", auto_delete=True)
    address = "/queues/pipelined-handshake"
    response = b"\x00" + USER.encode() + b"\x00" + PASSWORD.encode()
    peer = Peer(login=False)
    try:
        peer.send(b"AMQP\x03\x01\x00\x00"
                  + frame(described_list(0x41, symbol("PLAIN"), binary(response)), kind=1)
                  + b"AMQP\x00\x01\x00\x00"
                  + open_frame() + begin_frame()
                  + attach_frame("pipelined-sender", 0, False, address)
                  + attach_frame("pipelined-receiver", 1, True, address)
                  + flow_frame(1, 10))
        assert peer.read_exact(8) == b"AMQP\x03\x01\x00\x00"
        outcome = peer.until(0x44)  # sasl-outcome
        assert outcome[outcome.index(b"\x50") + 1] == 0  # ok
        assert peer.read_exact(8) == b"AMQP\x00\x01\x00\x00"
        peer.until(0x10)  # open
        peer.until(0x11)  # begin
        attached = [peer.until(0x12), peer.until(0x12)]
        assert all(b"amqp:" not in body for body in attached)
        # And the links work: the sender's message reaches the receiver.
        peer.send(transfer_frame(0, 0, b"through a pipelined handshake"))
        assert b"through a pipelined handshake" in peer.until(0x14)
    finally:
        peer.close()
    still_serving()


def test_sasl_abuse_is_refused_and_the_connection_closed():
    # An unknown mechanism, then a wrong password: outcome auth (1), closed.
    for mechanism, response in (("CRAM-MD5", b"guest 0123"),
                                ("PLAIN", b"\x00guest\x00not-the-password")):
        peer = Peer(login=False)
        try:
            assert peer.login(mechanism, response) == 1
            assert peer.closed(timeout=15)
        finally:
            peer.close()
    # Logged in, then a second sasl-init where the AMQP header belongs: the broker answers
    # with the header it expected and closes.
    peer = Peer()
    try:
        response = b"\x00guest\x00guest"
        peer.send(frame(described_list(0x41, symbol("PLAIN"), binary(response)), kind=1))
        assert peer.read_exact(8) == b"AMQP\x00\x01\x00\x00"
        assert peer.closed()
    finally:
        peer.close()
    still_serving()


# ---- credit ---------------------------------------------------------------------------------

@needs_warren_bin
def test_a_transfer_without_credit_detaches_the_link_and_goes_nowhere(tmp_path):
    """During a resource alarm a sender gets no credit (as RabbitMQ 4); one that sends
    anyway loses its link (amqp:link:transfer-limit-exceeded), not the connection, and the
    message is not enqueued."""
    broker = Broker(str(tmp_path), "--disk-free-limit-bytes", str(10 ** 18))
    try:
        c = connect(broker.url)
        ch = c.channel()
        ch.queue_declare("no-credit")

        def alarm_on():
            broker.log.flush()
            with open(broker.log.name) as f:
                return "resource alarm set" in f.read()
        assert wait_for(alarm_on, timeout=15), "the disk alarm never came on"
        peer = Peer(port=broker.port)
        try:
            peer.open()
            peer.send(begin_frame())
            peer.until(0x11)
            peer.send(attach_frame("s", 0, False, "/queues/no-credit"))
            peer.until(0x12)
            peer.send(transfer_frame(0, 0, b"uninvited"))
            detach = peer.until(0x16)
            assert error_in(detach) == "amqp:link:transfer-limit-exceeded"
            # The session and the connection go on: a receiver on it still works.
            peer.send(attach_frame("r", 1, True, "/queues/no-credit"))
            peer.until(0x12)
            assert ready(ch, "no-credit") == 0
        finally:
            peer.close()
        c.close()
    finally:
        broker.stop()


@needs_warren_bin
def test_a_peer_that_never_reads_is_not_buffered_without_bound(tmp_path):
    """A receiver with credit for everything that never reads: the broker writes until its
    bounded buffer and the socket's are full, then waits, so its memory does not grow by
    the queue's size; when the peer goes, every message is still in the queue."""
    broker = Broker(str(tmp_path))
    try:
        c = connect(broker.url)
        ch = c.channel()
        ch.queue_declare("never-read")
        body = b"m" * 100_000
        count = 400  # 40 MB
        for _ in range(count):
            ch.basic_publish("", "never-read", body)
        assert wait_for(lambda: ready(ch, "never-read") == count, timeout=30)
        before = broker.rss_bytes()
        peer = Peer(port=broker.port)
        try:
            peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            peer.open()
            peer.send(begin_frame())
            peer.until(0x11)
            peer.send(attach_frame("r", 0, True, "/queues/never-read"))
            peer.until(0x12)
            peer.send(flow_frame(0, 100_000))
            time.sleep(3)  # the broker writes what it can, then its buffer stays full
            grown = broker.rss_bytes() - before
            # Copying the queue into the connection's buffer would take 40 MB more.
            assert grown < 20_000_000, grown
            still = amqp10(port=broker.port)  # the broker still serves others
            still.close()
        finally:
            peer.close()
        # Unsettled, they all go back to the queue.
        assert wait_for(lambda: ready(ch, "never-read") == count, timeout=30)
        c.close()
    finally:
        broker.stop()

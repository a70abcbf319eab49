"""Wire-level behaviour checked with a hand-rolled client (see amqp_raw.py)."""
import socket
import struct
import time

import pytest

import amqp_raw as raw
from conftest import AMQP_URL, connect, uname


def test_valid_header_gets_connection_start():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.send(raw.PROTOCOL_HEADER)
        f = c.read_method()
        assert f.method == raw.CONNECTION_START
        r = f.args
        assert (r.octet(), r.octet()) == (0, 9)
        props = r.table()
        assert props["capabilities"][0] == "F"
        mechs = r.longstr().decode().split()
        assert "PLAIN" in mechs
        locales = r.longstr().decode().split()
        assert "en_US" in locales
    finally:
        c.close()


@pytest.mark.parametrize("header", [
    b"AMQP\x00\x00\x09\x00",   # 0-9 (not 0-9-1)
    b"AMQP\x01\x01\x00\x0a",   # AMQP 0-10
    # (AMQP 1.0 is served on this port: test_amqp10.py checks its headers.)
    b"HTTP/1.1",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
])
def test_bad_protocol_header_gets_supported_header_and_close(header):
    c = raw.RawConnection(AMQP_URL)
    try:
        c.send(header)
        data = c.read_until_closed(timeout=5)
        assert data == b"AMQP\x00\x00\x09\x01", data
    finally:
        c.close()


def test_bad_frame_end_is_501_frame_error():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake()
        # A heartbeat frame with a wrong frame-end octet.
        c.send_frame(raw.FRAME_HEARTBEAT, 0, b"", frame_end=0x00)
        code, text, _, _ = c.read_close()
        assert code == 501, (code, text)
        assert text.startswith("FRAME_ERROR"), text
        c.send_method(0, raw.CONNECTION_CLOSE_OK)
        c.read_until_closed(timeout=5)
    finally:
        c.close()


def test_method_on_unopened_channel_is_504_channel_error():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake()
        # queue.declare on channel 5 which was never opened -> connection error 504
        c.send_method(5, raw.QUEUE_DECLARE, struct.pack(">H", 0) + raw.shortstr("")
                      + b"\x00" + raw.encode_table({}))
        code, text, _, _ = c.read_close()
        assert code == 504, (code, text)
        assert text.startswith("CHANNEL_ERROR"), text
    finally:
        c.close()


def test_immediate_publish_is_540_not_implemented():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake()
        c.open_channel(1)
        q = c.queue_declare(1, "", exclusive=True)
        c.publish(1, "", q, b"hello", immediate=True)
        code, text, cls, meth = c.read_close()
        assert code == 540, (code, text)
        assert text.startswith("NOT_IMPLEMENTED"), text
        assert (cls, meth) == raw.BASIC_PUBLISH
        c.send_method(0, raw.CONNECTION_CLOSE_OK)
        c.read_until_closed(timeout=5)
    finally:
        c.close()


def test_server_sends_heartbeats():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake(heartbeat=1)
        assert c.server_heartbeat == 60
        # With heartbeat=1 the broker must send heartbeat frames on an idle connection.
        seen = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and seen < 2:
            # keep our side alive too
            c.send_frame(raw.FRAME_HEARTBEAT, 0, b"")
            try:
                f = c.read_frame(timeout=0.6)
            except socket.timeout:
                continue
            assert f.type == raw.FRAME_HEARTBEAT and f.channel == 0, f
            seen += 1
        assert seen >= 2
    finally:
        c.close()


def test_silent_client_is_disconnected_after_missed_heartbeats():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake(heartbeat=1)
        t0 = time.monotonic()
        # We never send anything: the broker must drop us (RabbitMQ: after ~2 missed
        # heartbeat intervals). Heartbeats it sends are read and ignored.
        c.sock.settimeout(0.5)
        while True:
            assert time.monotonic() - t0 < 8, "broker kept a silent connection open"
            try:
                c.recv_some(0.5)
            except socket.timeout:
                continue
            except (raw.ConnectionClosed, ConnectionResetError):
                break
        assert time.monotonic() - t0 >= 2.0
    finally:
        c.close()


def test_client_heartbeats_up_to_two_intervals_apart_keep_the_connection():
    """A client that sends a heartbeat only after a whole interval without writing (the Java
    client's HeartbeatSender) leaves gaps of up to two intervals, more on a busy machine.
    RabbitMQ gives up between 2 and 3 intervals of silence; Warren from 2.5."""
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake(heartbeat=1)
        for _ in range(5):
            time.sleep(2.2)
            c.send_frame(raw.FRAME_HEARTBEAT, 0, b"")
        c.open_channel(1)  # still open: a channel opens and answers
    finally:
        c.close()


def test_table_field_types_round_trip():
    """Every AMQP 0-9-1 field type RabbitMQ accepts survives publish -> get unchanged."""
    headers = {
        "bool": ("t", True),
        "i8": ("b", -5),
        "u8": ("B", 200),
        "i16": ("s", -300),
        "u16": ("u", 60000),
        "i32": ("I", -70000),
        "u32": ("i", 4000000000),
        "i64": ("l", -(2 ** 40)),
        "f32": ("f", 1.5),
        "f64": ("d", 2.25),
        "dec": ("D", (2, 12345)),
        "str": ("S", b"hello"),
        "bytes": ("x", b"\x00\x01\xff"),
        "ts": ("T", 1700000000),
        "tbl": ("F", {"a": ("I", 1), "b": ("S", b"x")}),
        "arr": ("A", [("I", 1), ("S", b"two"), ("t", False)]),
        "void": ("V", None),
    }
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake()
        c.open_channel(1)
        q = c.queue_declare(1, "", exclusive=True)
        c.publish(1, "", q, b"body", headers=headers)
        got = None
        for _ in range(50):
            got = c.basic_get(1, q)
            if got:
                break
            time.sleep(0.02)
        assert got is not None
        _, (flags, r), body = got
        assert body == b"body"
        assert flags == 1 << 13
        back = r.table()
        for k, (t, v) in headers.items():
            bt, bv = back[k]
            if k == "f32":
                assert bt == "f" and abs(bv - 1.5) < 1e-9
            elif k == "dec":
                assert bt == "D" and tuple(bv) == (2, 12345)
            else:
                assert (bt, bv) == (t, v), (k, back[k])
    finally:
        c.close()


def test_connection_close_handshake():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake()
        c.send_method(0, raw.CONNECTION_CLOSE, struct.pack(">H", 200) + raw.shortstr("bye")
                      + struct.pack(">HH", 0, 0))
        f = c.read_method()
        assert f.method == raw.CONNECTION_CLOSE_OK
        # Note: after a client-initiated close RabbitMQ leaves closing the TCP
        # socket to the client, so that is not asserted here.
    finally:
        c.close()


def test_server_generated_consumer_tag():
    # pika and most clients generate their own tags; an empty tag makes the
    # broker generate one: RabbitMQ's start with "amq.ctag-".
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake()
        c.open_channel(1)
        q = c.queue_declare(1, "", exclusive=True)
        t1 = c.basic_consume(1, q)
        t2 = c.basic_consume(1, q)
        assert t1.startswith("amq.ctag-"), t1
        assert t2.startswith("amq.ctag-") and t2 != t1
    finally:
        c.close()


def test_server_generated_queue_name_and_empty_name_shortcut():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake()
        c.open_channel(1)
        q = c.queue_declare(1, "", exclusive=True)
        assert q.startswith("amq.gen-"), q
        # empty queue name in basic.consume = last queue declared on this channel
        tag = c.basic_consume(1, "", tag="t-empty")
        assert tag == "t-empty"
    finally:
        c.close()


def test_duplicate_consumer_tag_is_530_connection_error():
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake()
        c.open_channel(1)
        q = c.queue_declare(1, "", exclusive=True)
        c.basic_consume(1, q, tag="dup")
        c.basic_consume(1, q, tag="dup", wait=False)
        code, text, cls, meth = c.read_close()
        assert code == 530, (code, text)
        assert text.startswith("NOT_ALLOWED"), text
        assert (cls, meth) == raw.BASIC_CONSUME
    finally:
        c.close()


# ------------------------------------------------------------ framing errors
def _publish_method(q):
    return struct.pack(">H", 0) + raw.shortstr("") + raw.shortstr(q) + b"\x00"


def _expect_connection_error(setup, code, prefix, method=None, **handshake):
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake(**handshake)
        setup(c)
        got_code, text, cls, meth = c.read_close()
        assert got_code == code, (got_code, text)
        assert text.startswith(prefix), text
        if method is not None:
            assert (cls, meth) == method, (cls, meth, text)
    finally:
        c.close()


def test_frame_larger_than_frame_max_is_501():
    def setup(c):
        c.open_channel(1)
        q = c.queue_declare(1, "", exclusive=True)
        c.send_method(1, raw.BASIC_PUBLISH, _publish_method(q))
        c.send_frame(raw.FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, 8000, 0))
        c.send_frame(raw.FRAME_BODY, 1, b"x" * 8000)  # negotiated frame_max is 4096
    _expect_connection_error(setup, 501, "FRAME_ERROR", frame_max=4096)


def test_unknown_frame_type_is_501():
    _expect_connection_error(lambda c: c.send_frame(7, 0, b""), 501, "FRAME_ERROR")


def test_method_frame_in_the_middle_of_content_is_505():
    def setup(c):
        c.open_channel(1)
        q = c.queue_declare(1, "", exclusive=True)
        c.send_method(1, raw.BASIC_PUBLISH, _publish_method(q))
        c.send_frame(raw.FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, 10, 0))
        c.send_method(1, raw.QUEUE_DECLARE, struct.pack(">H", 0) + raw.shortstr("")
                      + b"\x00" + raw.encode_table({}))
    _expect_connection_error(setup, 505, "UNEXPECTED_FRAME", method=raw.BASIC_PUBLISH)


def test_body_frame_without_publish_is_505():
    def setup(c):
        c.open_channel(1)
        c.send_frame(raw.FRAME_BODY, 1, b"abc")
    _expect_connection_error(setup, 505, "UNEXPECTED_FRAME")


def test_heartbeat_on_nonzero_channel_is_505():
    _expect_connection_error(lambda c: c.send_frame(raw.FRAME_HEARTBEAT, 3, b""),
                             505, "UNEXPECTED_FRAME")


def test_second_channel_open_is_504():
    def setup(c):
        c.open_channel(1)
        c.send_method(1, raw.CHANNEL_OPEN, raw.shortstr(""))
    _expect_connection_error(setup, 504, "CHANNEL_ERROR", method=raw.CHANNEL_OPEN)


def test_non_connection_method_on_channel_zero_is_504():
    def setup(c):
        c.send_method(0, raw.QUEUE_DECLARE, struct.pack(">H", 0) + raw.shortstr("")
                      + b"\x00" + raw.encode_table({}))
    _expect_connection_error(setup, 504, "CHANNEL_ERROR", method=raw.QUEUE_DECLARE)


def test_publish_split_across_many_small_frames():
    # Content split into body frames at an unusual frame_max is reassembled.
    c = raw.RawConnection(AMQP_URL)
    try:
        c.handshake(frame_max=4096)
        c.open_channel(1)
        q = c.queue_declare(1, "", exclusive=True)
        body = bytes(range(256)) * 100  # 25600 bytes
        c.send_method(1, raw.BASIC_PUBLISH, _publish_method(q))
        c.send_frame(raw.FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, len(body), 0))
        for i in range(0, len(body), 1000):  # smaller than frame_max, still fine
            c.send_frame(raw.FRAME_BODY, 1, body[i:i + 1000])
        got = None
        for _ in range(50):
            got = c.basic_get(1, q)
            if got:
                break
            time.sleep(0.02)
        assert got is not None and got[2] == body
    finally:
        c.close()

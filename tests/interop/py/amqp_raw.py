"""Minimal hand-rolled AMQP 0-9-1 client over a raw socket.

Used by tests that need to send things no well-behaved client library sends
(bad protocol headers, corrupt frames, basic.publish with immediate=1, exotic
field-table types) or to observe wire-level behaviour (heartbeat frames).
Only what the tests need is implemented.
"""
import socket
import struct
import time
import urllib.parse
from decimal import Decimal

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

# (class_id, method_id)
CONNECTION_START = (10, 10)
CONNECTION_START_OK = (10, 11)
CONNECTION_TUNE = (10, 30)
CONNECTION_TUNE_OK = (10, 31)
CONNECTION_OPEN = (10, 40)
CONNECTION_OPEN_OK = (10, 41)
CONNECTION_CLOSE = (10, 50)
CONNECTION_CLOSE_OK = (10, 51)
CHANNEL_OPEN = (20, 10)
CHANNEL_OPEN_OK = (20, 11)
CHANNEL_CLOSE = (20, 40)
CHANNEL_CLOSE_OK = (20, 41)
QUEUE_DECLARE = (50, 10)
QUEUE_DECLARE_OK = (50, 11)
QUEUE_DELETE = (50, 40)
QUEUE_DELETE_OK = (50, 41)
BASIC_CONSUME = (60, 20)
BASIC_CONSUME_OK = (60, 21)
BASIC_PUBLISH = (60, 40)
BASIC_GET = (60, 70)
BASIC_GET_OK = (60, 71)
BASIC_GET_EMPTY = (60, 72)


def parse_url(url):
    u = urllib.parse.urlparse(url)
    vhost = urllib.parse.unquote(u.path[1:]) if len(u.path) > 1 else "/"
    return (u.hostname or "127.0.0.1", u.port or 5672,
            urllib.parse.unquote(u.username or "guest"),
            urllib.parse.unquote(u.password or "guest"), vhost)


# ---------------------------------------------------------------- encoding
def shortstr(s):
    if isinstance(s, str):
        s = s.encode()
    return struct.pack(">B", len(s)) + s


def longstr(s):
    if isinstance(s, str):
        s = s.encode()
    return struct.pack(">I", len(s)) + s


def encode_field(tv):
    """tv is (type_char, value): explicit typing so every AMQP type can be sent."""
    t, v = tv
    tb = t.encode()
    if t == "t":
        return tb + struct.pack(">B", 1 if v else 0)
    if t == "b":
        return tb + struct.pack(">b", v)
    if t == "B":
        return tb + struct.pack(">B", v)
    if t == "s":
        return tb + struct.pack(">h", v)
    if t == "u":
        return tb + struct.pack(">H", v)
    if t == "I":
        return tb + struct.pack(">i", v)
    if t == "i":
        return tb + struct.pack(">I", v)
    if t == "l":
        return tb + struct.pack(">q", v)
    if t == "f":
        return tb + struct.pack(">f", v)
    if t == "d":
        return tb + struct.pack(">d", v)
    if t == "D":
        scale, unscaled = v
        return tb + struct.pack(">Bi", scale, unscaled)
    if t == "S":
        return tb + longstr(v)
    if t == "x":
        return tb + longstr(v)
    if t == "T":
        return tb + struct.pack(">Q", v)
    if t == "F":
        return tb + encode_table(v)
    if t == "A":
        body = b"".join(encode_field(x) for x in v)
        return tb + struct.pack(">I", len(body)) + body
    if t == "V":
        return tb
    raise ValueError("unknown field type %r" % t)


def encode_table(d):
    """d maps name -> (type_char, value) or plain python value (str/bool/int/dict)."""
    body = b""
    for k, v in d.items():
        if not isinstance(v, tuple):
            if isinstance(v, bool):
                v = ("t", v)
            elif isinstance(v, int):
                v = ("l", v)
            elif isinstance(v, dict):
                v = ("F", v)
            else:
                v = ("S", v)
        body += shortstr(k) + encode_field(v)
    return struct.pack(">I", len(body)) + body


# ---------------------------------------------------------------- decoding
class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        b = self.data[self.pos:self.pos + n]
        if len(b) != n:
            raise ValueError("short read")
        self.pos += n
        return b

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))

    def octet(self):
        return self.unpack(">B")[0]

    def short(self):
        return self.unpack(">H")[0]

    def long(self):
        return self.unpack(">I")[0]

    def longlong(self):
        return self.unpack(">Q")[0]

    def shortstr(self):
        return self.take(self.octet()).decode()

    def longstr(self):
        return self.take(self.long())

    def field(self):
        t = chr(self.octet())
        if t == "t":
            return t, bool(self.octet())
        fmts = {"b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I",
                "l": ">q", "f": ">f", "d": ">d", "T": ">Q"}
        if t in fmts:
            return t, self.unpack(fmts[t])[0]
        if t == "D":
            return t, self.unpack(">Bi")
        if t in "Sx":
            return t, self.longstr()
        if t == "F":
            return t, self.table()
        if t == "A":
            end = self.pos + 4 + self.long()
            items = []
            while self.pos < end:
                items.append(self.field())
            return t, items
        if t == "V":
            return t, None
        raise ValueError("unknown field type %r" % t)

    def table(self):
        end = self.pos + 4 + self.long()
        out = {}
        while self.pos < end:
            k = self.shortstr()
            out[k] = self.field()
        return out


class Frame:
    def __init__(self, ftype, channel, payload):
        self.type = ftype
        self.channel = channel
        self.payload = payload
        self.method = None
        self.args = None
        if ftype == FRAME_METHOD:
            r = Reader(payload)
            self.method = (r.short(), r.short())
            self.args = r

    def __repr__(self):
        return "Frame(type=%d, ch=%d, method=%r, len=%d)" % (
            self.type, self.channel, self.method, len(self.payload))


class ConnectionClosed(Exception):
    pass


class RawConnection:
    """A raw AMQP connection. `handshake()` performs start/tune/open."""

    def __init__(self, url, timeout=5.0):
        self.host, self.port, self.user, self.password, self.vhost = parse_url(url)
        self.sock = socket.create_connection((self.host, self.port), timeout=timeout)
        self.buf = b""
        self.frame_max = 131072
        self.heartbeat = 0

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        self.sock.sendall(data)

    def recv_some(self, timeout=None):
        if timeout is not None:
            self.sock.settimeout(timeout)
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionClosed("socket closed by peer")
        self.buf += data
        return data

    def read_exact(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out")
            self.recv_some(remaining)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_until_closed(self, timeout=5.0):
        """Read everything until the peer closes. Returns all bytes read."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("peer did not close the socket")
            try:
                self.recv_some(remaining)
            except ConnectionClosed:
                out, self.buf = self.buf, b""
                return out
            except ConnectionResetError:
                out, self.buf = self.buf, b""
                return out

    def read_frame(self, timeout=5.0):
        hdr = self.read_exact(7, timeout)
        ftype, channel, size = struct.unpack(">BHI", hdr)
        payload = self.read_exact(size, timeout)
        end = self.read_exact(1, timeout)
        if end[0] != FRAME_END:
            raise ValueError("bad frame end %r" % end)
        return Frame(ftype, channel, payload)

    def read_method(self, timeout=5.0, skip_heartbeats=True):
        while True:
            f = self.read_frame(timeout)
            if f.type == FRAME_HEARTBEAT and skip_heartbeats:
                continue
            return f

    def expect(self, method, timeout=5.0):
        f = self.read_method(timeout)
        if f.method != method:
            raise AssertionError("expected %r, got %r" % (method, f))
        return f

    # ------------------------------------------------------------ sending
    def send_frame(self, ftype, channel, payload, frame_end=FRAME_END):
        self.send(struct.pack(">BHI", ftype, channel, len(payload)) + payload
                  + bytes([frame_end]))

    def send_method(self, channel, method, args=b""):
        self.send_frame(FRAME_METHOD, channel, struct.pack(">HH", *method) + args)

    def handshake(self, heartbeat=0, frame_max=131072, channel_max=2047):
        self.send(PROTOCOL_HEADER)
        start = self.expect(CONNECTION_START)
        r = start.args
        r.octet(), r.octet()
        self.server_properties = r.table()
        self.mechanisms = r.longstr().decode().split()
        props = encode_table({"product": "warren-interop-raw",
                              "capabilities": {"authentication_failure_close": True}})
        resp = b"\x00" + self.user.encode() + b"\x00" + self.password.encode()
        self.send_method(0, CONNECTION_START_OK,
                         props + shortstr("PLAIN") + longstr(resp) + shortstr("en_US"))
        tune = self.expect(CONNECTION_TUNE)
        r = tune.args
        self.server_channel_max, self.server_frame_max, self.server_heartbeat = (
            r.short(), r.long(), r.short())
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.send_method(0, CONNECTION_TUNE_OK,
                         struct.pack(">HIH", channel_max, frame_max, heartbeat))
        self.send_method(0, CONNECTION_OPEN, shortstr(self.vhost) + shortstr("") + b"\x00")
        self.expect(CONNECTION_OPEN_OK)

    def open_channel(self, ch=1):
        self.send_method(ch, CHANNEL_OPEN, shortstr(""))
        self.expect(CHANNEL_OPEN_OK)

    def queue_declare(self, ch, name, exclusive=False, auto_delete=False):
        bits = (4 if exclusive else 0) | (8 if auto_delete else 0)
        self.send_method(ch, QUEUE_DECLARE, struct.pack(">H", 0) + shortstr(name)
                         + bytes([bits]) + encode_table({}))
        f = self.expect(QUEUE_DECLARE_OK)
        return f.args.shortstr()

    def publish(self, ch, exchange, routing_key, body, mandatory=False, immediate=False,
                headers=None):
        bits = (1 if mandatory else 0) | (2 if immediate else 0)
        self.send_method(ch, BASIC_PUBLISH, struct.pack(">H", 0) + shortstr(exchange)
                         + shortstr(routing_key) + bytes([bits]))
        if headers is not None:
            flags = 1 << 13  # headers present
            props = encode_table(headers)
        else:
            flags = 0
            props = b""
        self.send_frame(FRAME_HEADER, ch,
                        struct.pack(">HHQH", 60, 0, len(body), flags) + props)
        if body:
            self.send_frame(FRAME_BODY, ch, body)

    def basic_consume(self, ch, queue, tag="", no_ack=True, exclusive=False, wait=True):
        bits = (2 if no_ack else 0) | (4 if exclusive else 0)
        self.send_method(ch, BASIC_CONSUME, struct.pack(">H", 0) + shortstr(queue)
                         + shortstr(tag) + bytes([bits]) + encode_table({}))
        if wait:
            return self.expect(BASIC_CONSUME_OK).args.shortstr()

    def basic_get(self, ch, queue, no_ack=True):
        """Returns (get_ok_frame, header_reader, body) or None for get-empty."""
        self.send_method(ch, BASIC_GET, struct.pack(">H", 0) + shortstr(queue)
                         + bytes([1 if no_ack else 0]))
        f = self.read_method()
        if f.method == BASIC_GET_EMPTY:
            return None
        assert f.method == BASIC_GET_OK, f
        h = self.read_method()
        assert h.type == FRAME_HEADER, h
        r = Reader(h.payload)
        r.short(), r.short()
        size = r.longlong()
        flags = r.short()
        body = b""
        while len(body) < size:
            b = self.read_method()
            assert b.type == FRAME_BODY, b
            body += b.payload
        return f, (flags, r), body

    def read_close(self, timeout=5.0):
        """Read frames until a connection.close arrives; return (code, text, class, method)."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_method(max(0.1, deadline - time.monotonic()))
            if f.method == CONNECTION_CLOSE:
                r = f.args
                return r.short(), r.shortstr(), r.short(), r.short()

"""Connection-level behaviour: handshake, capabilities, auth, vhost, tuning, heartbeats."""
import time
import urllib.parse

import pika
import pika.exceptions
import pytest

from conftest import AMQP_URL, connect, params, uname


def _url_with(user=None, password=None, vhost=None):
    u = urllib.parse.urlparse(AMQP_URL)
    user = user if user is not None else urllib.parse.unquote(u.username or "guest")
    password = password if password is not None else urllib.parse.unquote(u.password or "guest")
    netloc = "%s:%s@%s:%d" % (urllib.parse.quote(user, safe=""),
                              urllib.parse.quote(password, safe=""),
                              u.hostname, u.port or 5672)
    path = u.path if vhost is None else "/" + urllib.parse.quote(vhost, safe="")
    return urllib.parse.urlunparse((u.scheme, netloc, path, "", u.query, ""))


def test_connect_and_close():
    c = connect()
    assert c.is_open
    ch = c.channel()
    assert ch.is_open
    c.close()
    assert c.is_closed
    assert ch.is_closed


def test_server_properties_capabilities():
    c = connect()
    try:
        props = c._impl.server_properties
        caps = props["capabilities"]
        for cap in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                    "consumer_cancel_notify", "connection.blocked",
                    "authentication_failure_close", "per_consumer_qos", "direct_reply_to"):
            assert caps.get(cap) is True, "capability %s missing/false: %r" % (cap, caps)
        # A product and version string are always present.
        assert "product" in props and "version" in props
        text = lambda v: v.decode() if isinstance(v, bytes) else v
        if text(props["product"]) == "Warren":
            # One version story (warren_broker::version): `version` is the RabbitMQ release
            # Warren behaves as, the one its HTTP API reports; Warren's own is product_version.
            assert text(props["version"]) == "3.13.7"
            assert text(props["product_version"])
        # pika's own capability helpers agree
        assert c.publisher_confirms_supported
        assert c.basic_nack_supported
        assert c.consumer_cancel_notify_supported
        assert c.exchange_exchange_bindings_supported
    finally:
        c.close()


def test_wrong_password_is_auth_error():
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as ei:
        connect(_url_with(password="definitely-wrong-" + uname()))
    # With authentication_failure_close the broker says so explicitly: 403 ACCESS_REFUSED.
    text = repr(ei.value)
    assert "403" in text and "ACCESS_REFUSED" in text, text


def test_unknown_user_is_auth_error():
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as ei:
        connect(_url_with(user="nobody-" + uname(), password="x"))
    assert "403" in repr(ei.value)


def test_nonexistent_vhost_is_530():
    with pytest.raises(pika.exceptions.AMQPConnectionError) as ei:
        connect(_url_with(vhost="no-such-vhost-" + uname()))
    e = ei.value
    # pika wraps ConnectionClosedByBroker(530, 'NOT_ALLOWED - vhost ... not found')
    inner = e.args[0] if e.args and isinstance(e.args[0], Exception) else e
    if isinstance(inner, pika.exceptions.ConnectionClosedByBroker):
        assert inner.reply_code == 530, inner
        assert inner.reply_text.startswith("NOT_ALLOWED"), inner.reply_text
    else:
        assert "530" in repr(e), repr(e)


def test_tune_negotiation_visible_in_client():
    # Client proposes smaller limits than the broker: the smaller ones win.
    c = connect(frame_max=16384, channel_max=64, heartbeat=30)
    try:
        p = c._impl.params
        assert p.frame_max == 16384
        assert p.channel_max == 64
        assert p.heartbeat == 30
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        body = b"x" * 100_000  # must be split into frames of <= 16384 bytes
        ch.basic_publish("", q, body)
        m, _, got = None, None, None
        for _ in range(100):
            m, _, got = ch.basic_get(q, auto_ack=True)
            if m:
                break
            c.process_data_events(time_limit=0.02)
        assert got == body
    finally:
        c.close()


def test_default_tune_values():
    # Accepting the broker's proposal: RabbitMQ proposes frame_max 131072,
    # channel_max 2047, heartbeat 60.
    c = connect()
    try:
        p = c._impl.params
        assert p.frame_max == 131072
        assert p.channel_max == 2047
        assert p.heartbeat == 60
    finally:
        c.close()


def test_heartbeat_5s_connection_survives_idle():
    c = connect(heartbeat=5)
    try:
        assert c._impl.params.heartbeat == 5
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        c.sleep(6.5)  # idle longer than one heartbeat interval; pika answers heartbeats
        assert c.is_open
        ch.basic_publish("", q, b"after-idle")
        for _ in range(100):
            m, _, body = ch.basic_get(q, auto_ack=True)
            if m:
                break
            c.process_data_events(time_limit=0.02)
        assert body == b"after-idle"
    finally:
        c.close()


def test_many_channels():
    c = connect()
    try:
        chans = [c.channel() for _ in range(20)]
        nums = {x.channel_number for x in chans}
        assert len(nums) == 20
        for x in chans:
            x.queue_declare("", exclusive=True)
        for x in chans[::2]:
            x.close()
        for x in chans[1::2]:
            assert x.is_open
            x.basic_qos(prefetch_count=1)
    finally:
        c.close()


def test_channel_number_beyond_channel_max_closes_connection():
    c = connect(channel_max=4)
    try:
        assert c._impl.params.channel_max == 4
        for _ in range(4):
            c.channel()
        # pika refuses to allocate a 5th channel itself.
        with pytest.raises(pika.exceptions.NoFreeChannels):
            c.channel()
    finally:
        if c.is_open:
            c.close()

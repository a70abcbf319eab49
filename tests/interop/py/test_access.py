"""Vhosts, users and permissions with a real client (pika): connection.open refuses an unknown
vhost or one the user has no permissions on (530 NOT_ALLOWED), each AMQP operation is refused
(403 ACCESS_REFUSED) or allowed by the user's configure/write/read regexes and topic
permissions, and deleting a vhost closes its connections (320).

Users, vhosts and permissions are set up through RabbitMQ's HTTP API at env WARREN_MGMT_URL
(e.g. http://127.0.0.1:15672), with the credentials of AMQP_URL; tests that need it are
skipped when it is unset. The same tests pass against RabbitMQ with its management plugin.
"""
import os
import re
import urllib.parse
import uuid

import pika
import pika.exceptions
import pytest

from conftest import AMQP_URL, connect

MGMT_URL = os.environ.get("WARREN_MGMT_URL")
needs_api = pytest.mark.skipif(not MGMT_URL, reason="needs WARREN_MGMT_URL (the HTTP API)")

_amqp = urllib.parse.urlparse(AMQP_URL)
ADMIN = (urllib.parse.unquote(_amqp.username or "guest"), urllib.parse.unquote(_amqp.password or "guest"))


def url_for(user, password, vhost):
    return "amqp://%s:%s@%s:%d/%s" % (
        urllib.parse.quote(user, safe=""), urllib.parse.quote(password, safe=""),
        _amqp.hostname, _amqp.port or 5672, urllib.parse.quote(vhost, safe=""))


def api(method, path, body=None, expect=(200, 201, 204)):
    import requests
    r = requests.request(method, MGMT_URL.rstrip("/") + "/api/" + path, json=body, auth=ADMIN, timeout=10)
    assert r.status_code in expect, "%s %s: %d %s" % (method, path, r.status_code, r.text)
    return r


def q(s):
    return urllib.parse.quote(s, safe="")


class Tenant:
    """A vhost and a user made through the API, removed afterwards."""

    def __init__(self):
        suffix = uuid.uuid4().hex[:10]
        self.vhost = "interop-v-" + suffix
        self.user = "interop-u-" + suffix
        self.password = "pw-" + suffix
        api("PUT", "vhosts/" + q(self.vhost))
        api("PUT", "users/" + q(self.user), {"password": self.password, "tags": ""})
        # The admin may set things up in the vhost.
        self.permit(ADMIN[0], ".*", ".*", ".*")

    def permit(self, user, configure, write, read):
        api("PUT", "permissions/%s/%s" % (q(self.vhost), q(user)),
            {"configure": configure, "write": write, "read": read})

    def connect(self, user=None, password=None):
        return connect(url_for(user or self.user, password or self.password, self.vhost))

    def admin(self):
        return connect(url_for(ADMIN[0], ADMIN[1], self.vhost))

    def remove(self):
        api("DELETE", "vhosts/" + q(self.vhost), expect=(204, 404))
        api("DELETE", "users/" + q(self.user), expect=(204, 404))


@pytest.fixture
def tenant():
    t = Tenant()
    yield t
    t.remove()


@pytest.fixture
def restricted(tenant):
    """The tenant's user may configure cfg-*, write wr-*, read rd-*, and do all on all-*."""
    tenant.permit(tenant.user, "^(cfg|all)-", "^(wr|all)-", "^(rd|all)-")
    return tenant


def refused_open(url):
    """Opens a connection expecting connection.close during the handshake; (code, text)."""
    with pytest.raises(pika.exceptions.AMQPConnectionError) as info:
        connect(url)
    err = info.value
    if isinstance(err, pika.exceptions.ConnectionClosedByBroker):
        return err.reply_code, err.reply_text
    # pika wraps a close during connection.open in ProbableAccessDeniedError, whose text is
    # "ConnectionClosedByBroker: (530) 'NOT_ALLOWED - ...'".
    match = re.search(r"ConnectionClosedByBroker: \((\d+)\) (['\"])(.*)\2", str(err))
    assert match, repr(err)
    return int(match.group(1)), match.group(3).replace("\\'", "'")


def channel_refused(fn):
    """Runs fn() expecting the channel to be closed; returns (code, text)."""
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        fn()
    return info.value.reply_code, info.value.reply_text


def access_refused(text):
    return 403, "ACCESS_REFUSED - " + text


def test_unknown_vhost_is_refused_with_530():
    vhost = "interop-missing-" + uuid.uuid4().hex[:8]
    assert refused_open(url_for(ADMIN[0], ADMIN[1], vhost)) == (
        530, "NOT_ALLOWED - vhost %s not found" % vhost)


@needs_api
def test_vhost_without_permissions_is_refused_with_530(tenant):
    assert refused_open(url_for(tenant.user, tenant.password, tenant.vhost)) == (
        530, "NOT_ALLOWED - access to vhost '%s' refused for user '%s'" % (tenant.vhost, tenant.user))
    tenant.permit(tenant.user, "", "", "")
    tenant.connect().close()


@needs_api
def test_declare_and_delete_need_configure(restricted):
    t = restricted
    v, u = t.vhost, t.user
    with t.connect() as conn:
        conn.channel().queue_declare("cfg-q")
        assert channel_refused(lambda: conn.channel().queue_declare("rd-q")) == access_refused(
            "access to queue 'rd-q' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().exchange_declare("cfg-x", "direct")
        assert channel_refused(lambda: conn.channel().exchange_declare("wr-x", "direct")) == access_refused(
            "access to exchange 'wr-x' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().queue_delete("cfg-q")
        assert channel_refused(lambda: conn.channel().queue_delete("wr-q")) == access_refused(
            "access to queue 'wr-q' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().exchange_delete("cfg-x")
        assert channel_refused(lambda: conn.channel().exchange_delete("rd-x")) == access_refused(
            "access to exchange 'rd-x' in vhost '%s' refused for user '%s'" % (v, u))


@needs_api
def test_bindings_need_write_on_destination_and_read_on_source(restricted):
    t = restricted
    v, u = t.vhost, t.user
    with t.admin() as admin:
        ch = admin.channel()
        for name in ("wr-q", "rd-q"):
            ch.queue_declare(name)
        for name in ("rd-x", "wr-x"):
            ch.exchange_declare(name, "direct")
    with t.connect() as conn:
        conn.channel().queue_bind("wr-q", "rd-x", "k")
        assert channel_refused(lambda: conn.channel().queue_bind("rd-q", "rd-x", "k")) == access_refused(
            "access to queue 'rd-q' in vhost '%s' refused for user '%s'" % (v, u))
        assert channel_refused(lambda: conn.channel().queue_bind("wr-q", "wr-x", "k")) == access_refused(
            "access to exchange 'wr-x' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().queue_unbind("wr-q", "rd-x", "k")
        conn.channel().exchange_bind("wr-x", "rd-x", "k")
        assert channel_refused(lambda: conn.channel().exchange_bind("rd-x", "rd-x", "k")) == access_refused(
            "access to exchange 'rd-x' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().exchange_unbind("wr-x", "rd-x", "k")


@needs_api
def test_publish_needs_write_on_the_exchange(restricted):
    t = restricted
    v, u = t.vhost, t.user
    with t.admin() as admin:
        ch = admin.channel()
        ch.queue_declare("rd-q")
        for name in ("wr-x", "rd-x"):
            ch.exchange_declare(name, "fanout")
            ch.queue_bind("rd-q", name)
    with t.connect() as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("wr-x", "", b"allowed")
        ch.basic_publish("wr-x", "", b"allowed again")
        assert channel_refused(lambda: ch.basic_publish("rd-x", "", b"refused")) == access_refused(
            "access to exchange 'rd-x' in vhost '%s' refused for user '%s'" % (v, u))
        # The default exchange is checked under the name amq.default.
        ch2 = conn.channel()
        ch2.confirm_delivery()
        assert channel_refused(lambda: ch2.basic_publish("", "rd-q", b"refused")) == access_refused(
            "access to exchange 'amq.default' in vhost '%s' refused for user '%s'" % (v, u))
    with t.admin() as admin:
        assert admin.channel().queue_declare("rd-q", passive=True).method.message_count == 2


@needs_api
def test_get_consume_and_purge_need_read(restricted):
    t = restricted
    v, u = t.vhost, t.user
    with t.admin() as admin:
        ch = admin.channel()
        for name in ("rd-q", "wr-q"):
            ch.queue_declare(name)
        ch.basic_publish("", "rd-q", b"m")
    with t.connect() as conn:
        method, _, body = conn.channel().basic_get("rd-q", auto_ack=True)
        assert body == b"m"
        assert channel_refused(lambda: conn.channel().basic_get("wr-q")) == access_refused(
            "access to queue 'wr-q' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().basic_consume("rd-q", lambda *a: None)
        assert channel_refused(lambda: conn.channel().basic_consume("wr-q", lambda *a: None)) == access_refused(
            "access to queue 'wr-q' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().queue_purge("rd-q")
        assert channel_refused(lambda: conn.channel().queue_purge("wr-q")) == access_refused(
            "access to queue 'wr-q' in vhost '%s' refused for user '%s'" % (v, u))


@needs_api
def test_topic_permissions(tenant):
    t = tenant
    v, u = t.vhost, t.user
    t.permit(u, ".*", ".*", ".*")
    api("PUT", "topic-permissions/%s/%s" % (q(v), q(u)),
        {"exchange": "amq.topic", "write": "^{username}\\.", "read": "^public\\."})
    with t.connect() as conn:
        ch = conn.channel()
        ch.queue_declare("all-q")
        ch.confirm_delivery()
        ch.basic_publish("amq.topic", u + ".news", b"mine")
        assert channel_refused(lambda: ch.basic_publish("amq.topic", "other.news", b"x")) == access_refused(
            "access to topic 'other.news' in exchange 'amq.topic' in vhost '%s' refused for user '%s'" % (v, u))
        # Exchanges without a topic permission are not restricted.
        ch2 = conn.channel()
        ch2.confirm_delivery()
        ch2.basic_publish("amq.direct", "other.news", b"x")
        conn.channel().queue_bind("all-q", "amq.topic", "public.#")
        assert channel_refused(lambda: conn.channel().queue_bind("all-q", "amq.topic", "secret.#")) == access_refused(
            "access to topic 'secret.#' in exchange 'amq.topic' in vhost '%s' refused for user '%s'" % (v, u))


@needs_api
def test_deleting_a_vhost_closes_its_connections(tenant):
    conn = tenant.admin()
    conn.channel().queue_declare("doomed", durable=True)
    api("DELETE", "vhosts/" + q(tenant.vhost))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=5)
        conn.channel()
    # RabbitMQ closes with either text, whichever of its two paths gets there first (3.10
    # usually says "is down"); Warren says "is deleted".
    assert info.value.reply_code == 320
    assert info.value.reply_text in (
        "CONNECTION_FORCED - vhost '%s' is deleted" % tenant.vhost,
        "CONNECTION_FORCED - vhost '%s' is down" % tenant.vhost)
    # Created again, the vhost is empty.
    api("PUT", "vhosts/" + q(tenant.vhost))
    tenant.permit(ADMIN[0], ".*", ".*", ".*")
    with tenant.admin() as again:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            again.channel().queue_declare("doomed", passive=True)
        assert info.value.reply_code == 404


@needs_api
def test_a_fresh_vhost_has_the_predeclared_exchanges(tenant):
    with tenant.admin() as conn:
        for name in ("amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"):
            conn.channel().exchange_declare(name, passive=True)


@needs_api
def test_vhost_limits(tenant):
    api("PUT", "vhost-limits/%s/max-connections" % q(tenant.vhost), {"value": 1})
    api("PUT", "vhost-limits/%s/max-queues" % q(tenant.vhost), {"value": 1})
    with tenant.admin() as conn:
        assert refused_open(url_for(ADMIN[0], ADMIN[1], tenant.vhost)) == (
            530, "NOT_ALLOWED - access to vhost '%s' refused for user '%s': connection limit (1) is reached"
            % (tenant.vhost, ADMIN[0]))
        conn.channel().queue_declare("q1")
        assert channel_refused(lambda: conn.channel().queue_declare("q2")) == (
            406, "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost '%s' (1) is reached"
            % tenant.vhost)


# ---- a broker of our own: the first-boot defaults and a restart --------------------------

from own_broker import Broker, needs_warren_bin  # noqa: E402


@needs_warren_bin
def test_default_user_and_vhost_are_created_on_first_boot_and_survive_a_restart(tmp_path):
    data = str(tmp_path / "data")
    first = Broker(data, "--default-user", "admin", "--default-pass", "s3cret", "--default-vhost", "prod")
    try:
        prod = "amqp://admin:s3cret@127.0.0.1:%d/prod" % first.port
        with connect(prod) as conn:
            ch = conn.channel()
            ch.queue_declare("orders", durable=True)
            ch.confirm_delivery()
            ch.basic_publish("", "orders", b"kept", pika.BasicProperties(delivery_mode=2))
        # guest was not created, and neither was "/".
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            connect(first.url)
        assert refused_open("amqp://admin:s3cret@127.0.0.1:%d/%%2F" % first.port) == (
            530, "NOT_ALLOWED - vhost / not found")
    finally:
        first.stop()

    # Restarted without the flags: what the first boot made is kept, nothing is re-seeded.
    second = Broker(data)
    try:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            connect(second.url)
        with connect("amqp://admin:s3cret@127.0.0.1:%d/prod" % second.port) as conn:
            method, _, body = conn.channel().basic_get("orders", auto_ack=True)
            assert body == b"kept"
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            connect("amqp://admin:wrong@127.0.0.1:%d/prod" % second.port)
    finally:
        second.stop()

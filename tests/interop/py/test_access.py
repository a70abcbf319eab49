"""Vhosts, users and permissions with a real client (pika): connection.open refuses an unknown
vhost or one the user has no permissions on (530 NOT_ALLOWED), each AMQP operation is refused
(403 ACCESS_REFUSED) or allowed by the user's configure/write/read regexes and topic
permissions, and deleting a vhost closes its connections (320).

The permission table, allowed and refused for each (RabbitMQ 3.10.8's texts, checked against
it): queue.declare (configure; a server-named queue under its amq.gen- name; a new queue with
a dead-letter exchange also read on itself and write on that exchange; passive: see
test_passive_declares), exchange.declare (configure; with an alternate exchange read on itself
and write on that one), queue.delete and exchange.delete (configure), queue.bind, queue.unbind,
exchange.bind and exchange.unbind (write on the destination, then read on the source, then topic
read on the routing key), basic.publish (write on the exchange, "amq.default" for the default
one, then topic write), basic.get, basic.consume and queue.purge (read).

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
def test_a_server_named_queue_is_checked_under_its_name(restricted):
    t = restricted
    with t.connect() as conn:
        code, text = channel_refused(lambda: conn.channel().queue_declare(""))
    assert code == 403
    assert re.fullmatch(r"ACCESS_REFUSED - access to queue 'amq\.gen-[\w-]+' in vhost '%s' refused for user '%s'"
                        % (re.escape(t.vhost), re.escape(t.user)), text), text


@needs_api
def test_dead_letter_and_alternate_exchanges_need_read_and_write(restricted):
    """A new queue with a dead-letter exchange needs read on itself and write on that exchange;
    a new exchange with an alternate exchange the same (configure first, as always)."""
    t = restricted
    v, u = t.vhost, t.user
    with t.admin() as admin:
        for name in ("wr-x", "rd-x"):
            admin.channel().exchange_declare(name, "direct")
    with t.connect() as conn:
        conn.channel().queue_declare("all-dlq", arguments={"x-dead-letter-exchange": "wr-x"})
        assert channel_refused(lambda: conn.channel().queue_declare(
            "all-dlq2", arguments={"x-dead-letter-exchange": "rd-x"})) == access_refused(
            "access to exchange 'rd-x' in vhost '%s' refused for user '%s'" % (v, u))
        assert channel_refused(lambda: conn.channel().queue_declare(
            "cfg-dlq", arguments={"x-dead-letter-exchange": "wr-x"})) == access_refused(
            "access to queue 'cfg-dlq' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().exchange_declare("all-ae", "direct", arguments={"alternate-exchange": "wr-x"})
        assert channel_refused(lambda: conn.channel().exchange_declare(
            "all-ae2", "direct", arguments={"alternate-exchange": "rd-x"})) == access_refused(
            "access to exchange 'rd-x' in vhost '%s' refused for user '%s'" % (v, u))
        assert channel_refused(lambda: conn.channel().exchange_declare(
            "cfg-ae", "direct", arguments={"alternate-exchange": "wr-x"})) == access_refused(
            "access to exchange 'cfg-ae' in vhost '%s' refused for user '%s'" % (v, u))
    with t.admin() as admin:
        for name in ("all-dlq2", "cfg-dlq"):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                admin.channel().queue_declare(name, passive=True)
            assert info.value.reply_code == 404
        for name in ("all-ae2", "cfg-ae"):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                admin.channel().exchange_declare(name, passive=True)
            assert info.value.reply_code == 404


def checks_passive_declares(conn):
    """RabbitMQ checked no permission on passive declares before 4.2.6, which asked for
    configure, and 4.2.7/4.3.1, which ask for any one permission (rabbitmq-server#16085,
    #16272); Warren does as the latter, so that passive declares cannot list others' names."""
    props = conn._impl.server_properties
    product = props.get("product")
    product = product.decode() if isinstance(product, bytes) else product
    if product != "RabbitMQ":
        return True
    version = props.get("version")
    version = version.decode() if isinstance(version, bytes) else version
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
    return numbers >= (4, 2, 6)


@needs_api
def test_passive_declares(restricted):
    """Any one permission on a queue or exchange lets a user check it exists (everywhere);
    without any, RabbitMQ 3.x answers (found or 404) and Warren refuses."""
    t = restricted
    v, u = t.vhost, t.user
    with t.admin() as admin:
        for name in ("rd-q", "wr-q", "none-q"):
            admin.channel().queue_declare(name)
        for name in ("rd-x", "wr-x", "none-x"):
            admin.channel().exchange_declare(name, "direct")
    with t.connect() as conn:
        for name in ("rd-q", "wr-q"):
            conn.channel().queue_declare(name, passive=True)
        for name in ("rd-x", "wr-x"):
            conn.channel().exchange_declare(name, passive=True)
        assert channel_refused(lambda: conn.channel().queue_declare("rd-missing", passive=True)) == (
            404, "NOT_FOUND - no queue 'rd-missing' in vhost '%s'" % v)
        assert channel_refused(lambda: conn.channel().exchange_declare("rd-missing", passive=True)) == (
            404, "NOT_FOUND - no exchange 'rd-missing' in vhost '%s'" % v)
        if checks_passive_declares(conn):
            for name in ("none-q", "none-missing"):
                assert channel_refused(lambda: conn.channel().queue_declare(name, passive=True)) == access_refused(
                    "access to queue '%s' in vhost '%s' refused for user '%s'" % (name, v, u))
            for name in ("none-x", "none-missing"):
                assert channel_refused(lambda: conn.channel().exchange_declare(name, passive=True)) == access_refused(
                    "access to exchange '%s' in vhost '%s' refused for user '%s'" % (name, v, u))
        else:
            conn.channel().queue_declare("none-q", passive=True)
            conn.channel().exchange_declare("none-x", passive=True)
            assert channel_refused(lambda: conn.channel().queue_declare("none-missing", passive=True)) == (
                404, "NOT_FOUND - no queue 'none-missing' in vhost '%s'" % v)


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
        assert channel_refused(lambda: conn.channel().exchange_bind("wr-x", "wr-x", "k")) == access_refused(
            "access to exchange 'wr-x' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().exchange_unbind("wr-x", "rd-x", "k")
        # The default exchange takes no bindings, whatever the permissions.
        assert channel_refused(lambda: conn.channel().queue_bind("wr-q", "", "k")) == (
            403, "ACCESS_REFUSED - operation not permitted on the default exchange")
    # Unbinding is checked as binding: bindings the user may not make, it may not remove.
    with t.admin() as admin:
        ch = admin.channel()
        ch.queue_bind("rd-q", "rd-x", "k")
        ch.queue_bind("wr-q", "wr-x", "k")
        ch.exchange_bind("rd-x", "rd-x", "k")
        ch.exchange_bind("wr-x", "wr-x", "k")
    with t.connect() as conn:
        assert channel_refused(lambda: conn.channel().queue_unbind("rd-q", "rd-x", "k")) == access_refused(
            "access to queue 'rd-q' in vhost '%s' refused for user '%s'" % (v, u))
        assert channel_refused(lambda: conn.channel().queue_unbind("wr-q", "wr-x", "k")) == access_refused(
            "access to exchange 'wr-x' in vhost '%s' refused for user '%s'" % (v, u))
        assert channel_refused(lambda: conn.channel().exchange_unbind("rd-x", "rd-x", "k")) == access_refused(
            "access to exchange 'rd-x' in vhost '%s' refused for user '%s'" % (v, u))
        assert channel_refused(lambda: conn.channel().exchange_unbind("wr-x", "wr-x", "k")) == access_refused(
            "access to exchange 'wr-x' in vhost '%s' refused for user '%s'" % (v, u))
    # The bindings are still there: a message to rd-x reaches rd-q once (an exchange bound to
    # itself routes no message twice), one to wr-x reaches wr-q.
    with t.admin() as admin:
        ch = admin.channel()
        ch.confirm_delivery()
        ch.basic_publish("rd-x", "k", b"r")
        ch.basic_publish("wr-x", "k", b"w")
        assert ch.queue_declare("rd-q", passive=True).method.message_count == 1
        assert ch.queue_declare("wr-q", passive=True).method.message_count == 1


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
        # Exchange-to-exchange bindings and unbinding are checked the same way.
        conn.channel().exchange_declare("all-x", "topic")
        conn.channel().exchange_bind("all-x", "amq.topic", "public.news")
        assert channel_refused(lambda: conn.channel().exchange_bind("all-x", "amq.topic", "secret.news")) == access_refused(
            "access to topic 'secret.news' in exchange 'amq.topic' in vhost '%s' refused for user '%s'" % (v, u))
    with t.admin() as admin:
        admin.channel().queue_bind("all-q", "amq.topic", "secret.#")
    with t.connect() as conn:
        assert channel_refused(lambda: conn.channel().queue_unbind("all-q", "amq.topic", "secret.#")) == access_refused(
            "access to topic 'secret.#' in exchange 'amq.topic' in vhost '%s' refused for user '%s'" % (v, u))
        conn.channel().queue_unbind("all-q", "amq.topic", "public.#")


@needs_api
def test_only_an_impersonator_may_publish_as_another_user(tenant):
    """user_id must be the publisher's own name (406 PRECONDITION_FAILED otherwise) unless the
    publisher has the `impersonator` tag (the Java client's UserIDHeader tests)."""
    tenant.permit(tenant.user, ".*", ".*", ".*")
    conn = tenant.connect()
    ch = conn.channel()
    ch.queue_declare("impersonated", exclusive=True)
    ch.confirm_delivery()
    assert channel_refused(lambda: ch.basic_publish(
        "", "impersonated", b"x", pika.BasicProperties(user_id="someone-else"))) == (
        406, "PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated "
             "user was '%s'" % tenant.user)
    conn.close()
    api("PUT", "users/" + q(tenant.user), {"password": tenant.password, "tags": "impersonator"})
    conn = tenant.connect()
    ch = conn.channel()
    ch.queue_declare("impersonated", exclusive=True)
    ch.confirm_delivery()
    ch.basic_publish("", "impersonated", b"x", pika.BasicProperties(user_id="someone-else"))
    m, props, _ = ch.basic_get("impersonated", auto_ack=True)
    assert props.user_id == "someone-else"
    conn.close()


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
        for name in ("amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match",
                     "amq.rabbitmq.trace"):
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


@needs_api
def test_user_limits(tenant):
    """max-connections and max-channels per user (RabbitMQ 3.13's texts): the connection or
    channel over the limit is refused with 530 and closes the connection; whatever ends a
    connection gives its connection and channels back."""
    import requests
    t, u = tenant, tenant.user
    t.permit(u, ".*", ".*", ".*")
    api("PUT", "user-limits/%s/max-connections" % q(u), {"value": 1})
    api("PUT", "user-limits/%s/max-channels" % q(u), {"value": 2})
    limits = {"max-connections": 1, "max-channels": 2}
    assert api("GET", "user-limits/" + q(u)).json() == [{"user": u, "value": limits}]
    assert {"user": u, "value": limits} in api("GET", "user-limits").json()
    assert api("GET", "users/" + q(u)).json()["limits"] == limits

    with t.connect() as conn:
        assert refused_open(url_for(u, t.password, t.vhost)) == (
            530, "NOT_ALLOWED - connection refused for user '%s': user connection limit (1) is reached" % u)
        conn.channel()
        conn.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            conn.channel()
        assert (info.value.reply_code, info.value.reply_text) == (
            530, "NOT_ALLOWED - number of channels opened for user '%s' has reached the maximum "
            "allowed user limit of 2" % u)
    # The closed connection's slot and its channels' are free again.
    with t.connect() as conn:
        conn.channel()
        conn.channel().close()
        conn.channel()
    # Another user is not counted against this one's limits.
    with t.admin() as a, t.admin() as b:
        a.channel(), a.channel(), b.channel()

    api("DELETE", "user-limits/%s/max-connections" % q(u))
    with t.connect(), t.connect():
        pass
    assert api("GET", "user-limits/" + q(u)).json() == [{"user": u, "value": {"max-channels": 2}}]
    api("DELETE", "user-limits/%s/all" % q(u))
    assert api("GET", "user-limits/" + q(u)).json() == []
    assert api("GET", "users/" + q(u)).json()["limits"] == {}

    api("PUT", "user-limits/%s/max-queues" % q(u), {"value": 1}, expect=(400,))
    api("PUT", "user-limits/%s/max-channels" % q(u), {"value": "many"}, expect=(400,))
    api("PUT", "user-limits/nobody-%s/max-channels" % q(u), {"value": 1}, expect=(404,))
    # A user reads its own limits; others' only as an administrator or monitoring user.
    api("PUT", "users/" + q(u), {"password": t.password, "tags": "management"})
    own = requests.get(MGMT_URL.rstrip("/") + "/api/user-limits/" + q(u), auth=(u, t.password), timeout=10)
    assert own.status_code == 200, own.text
    other = requests.get(MGMT_URL.rstrip("/") + "/api/user-limits/" + q(ADMIN[0]), auth=(u, t.password),
                         timeout=10)
    assert other.status_code == 401, other.text


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

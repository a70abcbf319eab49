"""Policies and operator policies, set through RabbitMQ's HTTP API and checked over AMQP.

The API is at env WARREN_MGMT_URL (e.g. http://127.0.0.1:15672; user and password from
WARREN_MGMT_USER / WARREN_MGMT_PASS, default guest/guest); without it every test here is
skipped. RabbitMQ applies a policy change to existing queues asynchronously, so effects on
existing entities are polled for; entities declared after a PUT take the policy at once.
"""
import os
import time
import urllib.parse

import pika
import pytest

from conftest import AMQP_URL, drain, get_one, uname, wait_for

requests = pytest.importorskip("requests")

MGMT_URL = os.environ.get("WARREN_MGMT_URL", "").rstrip("/")
AUTH = (os.environ.get("WARREN_MGMT_USER", "guest"), os.environ.get("WARREN_MGMT_PASS", "guest"))
VHOST = urllib.parse.unquote(urllib.parse.urlparse(AMQP_URL).path[1:] or "/")
VHOST_PATH = urllib.parse.quote(VHOST, safe="")

pytestmark = pytest.mark.skipif(not MGMT_URL, reason="WARREN_MGMT_URL not set: no HTTP API")


class PolicyApi:
    """PUT/DELETE on /api/policies and /api/operator-policies; deletes what it set."""

    def __init__(self):
        self.created = []

    def _url(self, kind, name):
        return "%s/api/%s/%s/%s" % (MGMT_URL, kind, VHOST_PATH, urllib.parse.quote(name, safe=""))

    def put(self, name, pattern, definition, priority=0, apply_to="queues", kind="policies"):
        body = {"pattern": pattern, "definition": definition, "priority": priority,
                "apply-to": apply_to}
        r = requests.put(self._url(kind, name), json=body, auth=AUTH, timeout=10)
        if r.status_code in (200, 201, 204):
            self.created.append((kind, name))
        return r

    def set(self, *args, **kwargs):
        r = self.put(*args, **kwargs)
        assert r.status_code in (201, 204), (r.status_code, r.text)

    def delete(self, name, kind="policies"):
        r = requests.delete(self._url(kind, name), auth=AUTH, timeout=10)
        assert r.status_code == 204, (r.status_code, r.text)
        self.created = [c for c in self.created if c != (kind, name)]

    def get(self, name, kind="policies"):
        return requests.get(self._url(kind, name), auth=AUTH, timeout=10)

    def cleanup(self):
        for kind, name in self.created:
            requests.delete(self._url(kind, name), auth=AUTH, timeout=10)


@pytest.fixture
def policies():
    api = PolicyApi()
    yield api
    api.cleanup()


def exact(name):
    """A pattern that matches exactly one name (names here are uuid-unique)."""
    return "^%s$" % name.replace(".", "\\.")


def depth(ch, queue):
    return ch.queue_declare(queue, passive=True).method.message_count


def publish(ch, queue, bodies):
    for b in bodies:
        ch.basic_publish("", queue, b)


def test_max_length_policy_drops_the_head_of_an_existing_queue(ch, names, policies):
    q = names.queue()
    ch.queue_declare(q)
    publish(ch, q, [b"m%d" % i for i in range(5)])
    policies.set(uname("p"), exact(q), {"max-length": 2})
    assert wait_for(lambda: depth(ch, q) == 2), depth(ch, q)
    assert drain(ch, q, 2) == [b"m3", b"m4"]
    publish(ch, q, [b"n%d" % i for i in range(3)])
    assert drain(ch, q, 3, timeout=1) == [b"n1", b"n2"]


def test_message_ttl_policy_expires_messages_into_the_policy_dlx(ch, names, policies):
    dlx, dead, q = names.exchange(), names.queue(), names.queue()
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(dead)
    ch.queue_bind(dead, dlx)
    policies.set(uname("p"), exact(q), {"message-ttl": 100, "dead-letter-exchange": dlx})
    ch.queue_declare(q)
    publish(ch, q, [b"short-lived"])
    m, props, body = get_one(ch, dead, timeout=5)
    assert body == b"short-lived"
    assert props.headers["x-death"][0]["reason"] == "expired"
    assert depth(ch, q) == 0


def test_dead_letter_policy_receives_what_a_lowered_limit_drops(ch, names, policies):
    dlx, dead, q = names.exchange(), names.queue(), names.queue()
    ch.exchange_declare(dlx, "direct")
    ch.queue_declare(dead)
    ch.queue_bind(dead, dlx, routing_key="dropped")
    ch.queue_declare(q)
    publish(ch, q, [b"m0", b"m1", b"m2"])
    policies.set(uname("p"), exact(q), {"max-length": 1, "dead-letter-exchange": dlx,
                                        "dead-letter-routing-key": "dropped"})
    got = drain(ch, dead, 2)
    assert got == [b"m0", b"m1"]
    assert drain(ch, q, 1) == [b"m2"]


def test_alternate_exchange_policy_takes_unroutables_of_an_existing_exchange(conn, ch, names, policies):
    ae, unrouted, x = names.exchange(), names.queue(), names.exchange()
    ch.exchange_declare(ae, "fanout")
    ch.queue_declare(unrouted)
    ch.queue_bind(unrouted, ae)
    ch.exchange_declare(x, "direct")
    policies.set(uname("p"), exact(x), {"alternate-exchange": ae}, apply_to="exchanges")
    ch.confirm_delivery()
    returned = []
    ch.add_on_return_callback(lambda *a: returned.append(a))

    def routed():
        ch.basic_publish(x, "no-such-key", b"lost?", mandatory=True)
        conn.process_data_events(time_limit=0.05)
        m, _, _ = ch.basic_get(unrouted, auto_ack=True)
        return m is not None

    assert wait_for(routed, timeout=5)
    conn.process_data_events(time_limit=0.1)
    # Once the policy holds, a mandatory publish routed to the AE is not returned.
    returned.clear()
    ch.basic_publish(x, "no-such-key", b"to-ae", mandatory=True)
    assert get_one(ch, unrouted)[2] == b"to-ae"
    assert returned == []


def test_queue_arguments_beat_the_policy(ch, names, policies):
    arg_dlx, pol_dlx = names.exchange(), names.exchange()
    arg_dead, pol_dead = names.queue(), names.queue()
    for x, dq in ((arg_dlx, arg_dead), (pol_dlx, pol_dead)):
        ch.exchange_declare(x, "fanout")
        ch.queue_declare(dq)
        ch.queue_bind(dq, x)
    prefix = uname("argq")
    low, high = names.track_queue(prefix + ".low"), names.track_queue(prefix + ".high")
    policies.set(uname("p"), "^" + prefix.replace(".", "\\."),
                 {"max-length": 3, "dead-letter-exchange": pol_dlx})
    # The argument's dead-letter exchange wins; the lower max-length wins either way.
    ch.queue_declare(low, arguments={"x-max-length": 1, "x-dead-letter-exchange": arg_dlx})
    ch.queue_declare(high, arguments={"x-max-length": 100})
    publish(ch, low, [b"l0", b"l1", b"l2"])
    publish(ch, high, [b"h%d" % i for i in range(5)])
    assert drain(ch, arg_dead, 2) == [b"l0", b"l1"]
    assert drain(ch, pol_dead, 2) == [b"h0", b"h1"]
    assert wait_for(lambda: depth(ch, low) == 1 and depth(ch, high) == 3)


def test_higher_priority_policy_wins(ch, names, policies):
    q = names.queue()
    policies.set(uname("low"), exact(q), {"max-length": 1}, priority=1)
    policies.set(uname("high"), exact(q), {"max-length": 3}, priority=5)
    ch.queue_declare(q)
    publish(ch, q, [b"m%d" % i for i in range(5)])
    assert drain(ch, q, 3) == [b"m2", b"m3", b"m4"]


def test_operator_policy_caps_the_user_policy(ch, names, policies):
    q = names.queue()
    policies.set(uname("user"), exact(q), {"max-length": 10})
    policies.set(uname("op"), exact(q), {"max-length": 2}, kind="operator-policies")
    ch.queue_declare(q)
    publish(ch, q, [b"m%d" % i for i in range(5)])
    assert drain(ch, q, 5, timeout=1) == [b"m3", b"m4"]


def test_operator_policies_refuse_keys_outside_their_set(policies):
    r = policies.put(uname("op"), ".*", {"alternate-exchange": "ae"}, kind="operator-policies")
    assert r.status_code == 400, r.text
    assert "are not recognised policy settings" in r.json()["reason"]


def test_clearing_a_policy_lifts_its_limit(ch, names, policies):
    q = names.queue()
    name = uname("p")
    policies.set(name, exact(q), {"max-length": 1})
    ch.queue_declare(q)
    publish(ch, q, [b"a", b"b"])
    assert wait_for(lambda: depth(ch, q) == 1)
    time.sleep(0.2)
    assert depth(ch, q) == 1
    policies.delete(name)
    assert policies.get(name).status_code == 404

    def grows():
        publish(ch, q, [b"more"])
        return depth(ch, q) >= 2

    assert wait_for(grows, timeout=5)


def test_bad_definitions_get_rabbitmq_texts(policies):
    cases = [
        ({"max-length": "x"}, "is not a valid maximum length"),
        ({"max-length": -1}, "-1 is not a valid maximum length"),
        ({"expires": 0}, "0 is not a valid queue expiry"),
        ({"overflow": "sideways"}, "is not a valid overflow value"),
        ({"no-such-setting": 1}, "are not recognised policy settings"),
        ({}, "no policy provided"),
    ]
    for definition, text in cases:
        r = policies.put(uname("bad"), ".*", definition)
        assert r.status_code == 400, (definition, r.status_code, r.text)
        body = r.json()
        assert body["error"] == "bad_request"
        assert body["reason"].startswith("Validation failed"), body
        assert text in body["reason"], (definition, body)
    r = policies.put(uname("bad"), "(", {"max-length": 1})
    assert r.status_code == 400
    assert "pattern should be regular expression but is invalid" in r.json()["reason"]


def test_policy_is_listed_as_set(policies):
    name = uname("p")
    policies.set(name, "^nothing-matches-this$", {"max-length": 7}, priority=4)
    r = policies.get(name)
    assert r.status_code == 200
    assert r.json() == {"vhost": VHOST, "name": name, "pattern": "^nothing-matches-this$",
                        "apply-to": "queues", "definition": {"max-length": 7}, "priority": 4}


def test_lowered_limit_under_reject_publish_keeps_messages_and_nacks_new_ones(ch, names, policies):
    q = names.queue()
    ch.queue_declare(q, arguments={"x-overflow": "reject-publish"})
    publish(ch, q, [b"m%d" % i for i in range(5)])
    assert wait_for(lambda: depth(ch, q) == 5)
    policies.set(uname("p"), exact(q), {"max-length": 2})
    ch.confirm_delivery()

    def refused():
        try:
            ch.basic_publish("", q, b"over")
        except pika.exceptions.NackError:
            return True
        return False

    assert wait_for(refused, timeout=5)
    # Nothing was dropped: reject-publish only refuses what comes next.
    assert depth(ch, q) >= 5
    assert drain(ch, q, 10, timeout=1)[:5] == [b"m%d" % i for i in range(5)]

"""The HTTP API's permission table: for every endpoint, what each kind of user gets — the
status, the reason of a refusal, for lists which vhosts' (or users') objects it sees, and for
changes whether the change was made. The table is RabbitMQ 3.10.8's (management plugin),
taken from it; the file passes against it and against Warren.

The columns are users made for the module (removed after it), each with a tag and
permissions on the two vhosts made for it, V (the vhost of the rows) and W:

    none           no tags         full permissions on V and W
    monitoring     monitoring      V and W
    management     management      V and W
    policymaker    policymaker     V and W
    administrator  administrator   V and W
    outsider       management      W only: none on V
    restricted     management      V with "^$" for configure, write and read; W
    mon_outsider   monitoring      W only
    pol_outsider   policymaker     W only
    adm_outsider   administrator   W only

What the table shows RabbitMQ does:
- Without a management tag every request is 401 "Not management user".
- A vhost in the path needs permissions in it, or the administrator tag: 401 "User not
  authorised to access virtual host". The monitoring tag does not widen that, nor the lists
  of queues, exchanges, bindings, policies and parameters, which show the vhosts the user
  has permissions in (administrators: all). Monitoring users do see every vhost in
  /api/vhosts, vhost limits and the overview's totals, every connection, channel and
  consumer (others only their own), and the node.
- Another user's connection is 401 "User not authorised to access object" (monitoring
  users may look at it, only administrators close it).
- One policy and runtime parameters are for policymakers with permissions in the vhost
  (and administrators): 401 "User not authorised to access object"; users, vhosts,
  permissions, definitions and operator policies (but their lists) for administrators.
- Acting in a vhost (declare, delete, purge, bind, publish, get, the aliveness test) also
  needs the AMQP permission of the matching method: without any permission in the vhost
  (an administrator's case) 401 "Access refused."; with a permission that does not match,
  declares, deletes, purges and bindings are 401 "Access refused.", a publish 400 with the
  channel's "403 ACCESS_REFUSED - ..." and a get or the aliveness test 401 "ACCESS_REFUSED
  - ..." (test_permission_kinds_through_the_api checks which permission each needs).
"""
import time
import urllib.parse
import uuid

import pika
import pika.exceptions
import pytest

from api_helpers import Api, needs_api, q
from conftest import AMQP_URL, connect

pytestmark = needs_api

SUFFIX = uuid.uuid4().hex[:8]
V = "perm-v-" + SUFFIX
W = "perm-w-" + SUFFIX
PASSWORD = "pw-" + SUFFIX
FULL = {"configure": ".*", "write": ".*", "read": ".*"}
NOTHING = {"configure": "^$", "write": "^$", "read": "^$"}

# column: (tags, permissions on V or None, permissions on W)
USERS = {
    "none": ("", FULL, FULL),
    "monitoring": ("monitoring", FULL, FULL),
    "management": ("management", FULL, FULL),
    "policymaker": ("policymaker", FULL, FULL),
    "administrator": ("administrator", FULL, FULL),
    "outsider": ("management", None, FULL),
    "restricted": ("management", NOTHING, FULL),
    "mon_outsider": ("monitoring", None, FULL),
    "pol_outsider": ("policymaker", None, FULL),
    "adm_outsider": ("administrator", None, FULL),
}
COLUMNS = list(USERS)
# A user whose connections the others try to look at and close.
VICTIM = "victim"


def login(column):
    return "perm-%s-%s" % (column, SUFFIX)


def tags_of(column):
    return USERS[column][0]


def is_admin(column):
    return tags_of(column) == "administrator"


def is_monitor(column):
    return tags_of(column) in ("monitoring", "administrator")


def in_v(column):
    return USERS[column][1] is not None


def used_vhosts(column):
    """The vhosts whose objects the column's lists show (administrators: every one)."""
    return {V, W} if is_admin(column) or in_v(column) else {W}


def seen_vhosts(column):
    """The vhosts /api/vhosts, vhost limits and the overview show (monitoring: every one)."""
    return {V, W} if is_monitor(column) or in_v(column) else {W}


def refusal(kind, name, column):
    return "access to %s '%s' in vhost '%s' refused for user '%s'" % (kind, name, V, login(column))


# ---- the answers ---------------------------------------------------------------------------

def refused(reason):
    return (401, "not_authorised", reason)


NM = refused("Not management user")
NA = refused("Not administrator user")
NMON = refused("Not monitor user")
NV = refused("User not authorised to access virtual host")
NO = refused("User not authorised to access object")
AR = refused("Access refused.")


def publish_refused(scene):
    return (400, "bad_request", "403 ACCESS_REFUSED - " + refusal("exchange", scene.x, scene.column))


def get_refused(scene):
    return refused("ACCESS_REFUSED - " + refusal("queue", scene.q, scene.column))


def aliveness_refused(scene):
    return refused("ACCESS_REFUSED - " + refusal("queue", "aliveness-test", scene.column))


def row_of(expected):
    assert len(expected) == len(COLUMNS), expected
    return dict(zip(COLUMNS, expected))


def everyone(status):
    return row_of([NM] + [status] * (len(COLUMNS) - 1))


def admins(status):
    return row_of([NM, NA, NA, NA, status, NA, NA, NA, NA, status])


def monitors(status):
    return row_of([NM, status, NMON, NMON, status, NMON, NMON, status, NMON, status])


def in_vhost(status):
    """A vhost in the path: its users and administrators."""
    return row_of([NM, status, status, status, status, NV, status, NV, NV, status])


def acting(status, restricted=AR):
    """Acting in the vhost: as in_vhost, then the AMQP permission (none for adm_outsider)."""
    return row_of([NM, status, status, status, status, NV, restricted, NV, NV, AR])


def policymakers(status, outsider=NO):
    """Policymakers (with permissions in the vhost of the path, if any) and administrators."""
    return row_of([NM, NO, NO, status, status, NO, NO, NO, outsider, status])


# ---- the objects of a row ------------------------------------------------------------------

class Scene:
    """One row for one column: fresh names, the objects the row needs, cleaned up after."""

    def __init__(self, world, column):
        self.world = world
        self.admin = world.admin
        self.column = column
        tag = uuid.uuid4().hex[:8]
        self.q, self.x, self.p, self.op, self.new = ("%s-%s" % (k, tag) for k in ("q", "x", "p", "op", "new"))
        self.cleanups = []

    def path(self, template):
        return template.format(v=q(V), q=q(self.q), x=q(self.x), p=q(self.p), op=q(self.op),
                               new=q(self.new), conn=q(self.world.connection_of["management"]))

    def need(self, what):
        a = self.admin
        v = q(V)
        if what == "queue":
            # A queue with one message, a fanout exchange bound to it with key "k".
            ok(a.put("/api/queues/%s/%s" % (v, self.q)))
            ok(a.put("/api/exchanges/%s/%s" % (v, self.x), {"type": "fanout"}))
            ok(a.post("/api/bindings/%s/e/%s/q/%s" % (v, self.x, self.q), {"routing_key": "k"}))
            r = a.post("/api/exchanges/%s/%s/publish" % (v, self.x),
                       {"routing_key": "k", "payload": "m", "payload_encoding": "string", "properties": {}})
            assert r.status_code == 200 and r.json() == {"routed": True}, r.text
            assert settles(lambda: message_count(self.q) == 1)
            self.cleanups += ["/api/queues/%s/%s" % (v, self.q), "/api/exchanges/%s/%s" % (v, self.x)]
        elif what == "policy":
            ok(a.put("/api/policies/%s/%s" % (v, self.p), POLICY))
            self.cleanups.append("/api/policies/%s/%s" % (v, self.p))
        elif what == "operator_policy":
            ok(a.put("/api/operator-policies/%s/%s" % (v, self.op), POLICY))
            self.cleanups.append("/api/operator-policies/%s/%s" % (v, self.op))
        elif what == "vhost":
            ok(a.put("/api/vhosts/" + q(self.new)))
        elif what == "user":
            ok(a.put("/api/users/" + q(self.new), {"password": PASSWORD, "tags": ""}))
        elif what == "permission":
            ok(a.put("/api/permissions/%s/%s" % (v, q(self.new)), FULL))
        elif what == "topic_permission":
            ok(a.put("/api/topic-permissions/%s/%s" % (v, q(self.new)),
                     {"exchange": "amq.topic", "write": ".*", "read": ".*"}))
        else:
            raise AssertionError(what)

    def cleanup(self, extra):
        for path in self.cleanups + [self.path(p) for p in extra]:
            self.admin.delete(path)


POLICY = {"pattern": "^perm-nothing-matches$", "definition": {"max-length": 100}, "apply-to": "queues"}


def ok(response):
    assert response.status_code in (200, 201, 204), (response.request.method, response.url,
                                                     response.status_code, response.text)
    return response


def amqp_url(user, password, vhost):
    parsed = urllib.parse.urlparse(AMQP_URL)
    return "amqp://%s:%s@%s:%d/%s" % (q(user), q(password), parsed.hostname, parsed.port or 5672, q(vhost))


ADMIN_AMQP = urllib.parse.urlparse(AMQP_URL)


def admin_amqp(vhost):
    return amqp_url(urllib.parse.unquote(ADMIN_AMQP.username or "guest"),
                    urllib.parse.unquote(ADMIN_AMQP.password or "guest"), vhost)


def message_count(queue):
    with connect(admin_amqp(V)) as c:
        return c.channel().queue_declare(queue, passive=True).method.message_count


def settles(predicate, timeout=12.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def exists(path):
    def check(scene):
        return scene.admin.get(scene.path(path)).status_code == 200
    return check


def gone(path):
    def check(scene):
        return scene.admin.get(scene.path(path)).status_code == 404
    return check


def count_becomes(n):
    def check(scene):
        return message_count(scene.q) == n
    return check


def binding_keys(scene):
    return {b["routing_key"] for b in
            scene.admin.json("/api/bindings/%s/e/%s/q/%s" % (q(V), q(scene.x), q(scene.q)))}


# ---- the table -----------------------------------------------------------------------------

class Row:
    def __init__(self, method, path, expected, body=None, needs=(), effect=None, cleanup=(),
                 listing=None):
        self.method, self.path, self.expected, self.body = method, path, expected, body
        self.needs, self.effect, self.cleanup, self.listing = needs, effect, cleanup, listing

    def __repr__(self):
        return "%s %s" % (self.method, self.path)


GET_ONE = {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
PUBLISH = {"routing_key": "k", "payload": "m2", "payload_encoding": "string", "properties": {}}

ROWS = [
    Row("GET", "/api/overview", everyone(200), listing="overview"),
    Row("GET", "/api/nodes", monitors(200)),
    Row("GET", "/api/whoami", everyone(200), listing="whoami"),
    Row("GET", "/api/cluster-name", everyone(200)),
    Row("GET", "/api/extensions", everyone(200)),
    Row("GET", "/api/health/checks/alarms", everyone(200)),
    Row("GET", "/api/health/checks/local-alarms", everyone(200)),
    Row("GET", "/api/aliveness-test/{v}", acting(200, restricted=aliveness_refused)),
    # Connections, channels, consumers: the module's, one per column, each consuming.
    Row("GET", "/api/connections", everyone(200), listing="connections"),
    Row("GET", "/api/connections/{conn}", row_of([NM, 200, 200, NO, 200, NO, NO, 200, NO, 200])),
    Row("GET", "/api/connections/{conn}/channels", row_of([NM, 200, 200, NO, 200, NO, NO, 200, NO, 200])),
    Row("GET", "/api/channels", everyone(200), listing="channels"),
    Row("GET", "/api/consumers", everyone(200), listing="consumers"),
    # Exchanges.
    Row("GET", "/api/exchanges", everyone(200), listing="used"),
    Row("GET", "/api/exchanges/{v}", in_vhost(200)),
    Row("GET", "/api/exchanges/{v}/{x}", in_vhost(200), needs=("queue",)),
    Row("PUT", "/api/exchanges/{v}/{new}", acting(201), body={"type": "direct"},
        effect=exists("/api/exchanges/{v}/{new}"), cleanup=("/api/exchanges/{v}/{new}",)),
    Row("DELETE", "/api/exchanges/{v}/{x}", acting(204), needs=("queue",),
        effect=gone("/api/exchanges/{v}/{x}")),
    Row("POST", "/api/exchanges/{v}/{x}/publish", acting(200, restricted=publish_refused), body=PUBLISH,
        needs=("queue",), effect=count_becomes(2)),
    # Queues.
    Row("GET", "/api/queues", everyone(200), listing="used"),
    Row("GET", "/api/queues/{v}", in_vhost(200)),
    Row("GET", "/api/queues/{v}/{q}", in_vhost(200), needs=("queue",)),
    Row("PUT", "/api/queues/{v}/{new}", acting(201), body={"durable": False},
        effect=exists("/api/queues/{v}/{new}"), cleanup=("/api/queues/{v}/{new}",)),
    Row("DELETE", "/api/queues/{v}/{q}", acting(204), needs=("queue",), effect=gone("/api/queues/{v}/{q}")),
    Row("DELETE", "/api/queues/{v}/{q}/contents", acting(204), needs=("queue",), effect=count_becomes(0)),
    Row("POST", "/api/queues/{v}/{q}/get", acting(200, restricted=get_refused), body=GET_ONE,
        needs=("queue",), effect=count_becomes(0)),
    # Bindings.
    Row("GET", "/api/bindings", everyone(200), listing="used"),
    Row("GET", "/api/bindings/{v}", in_vhost(200)),
    Row("POST", "/api/bindings/{v}/e/{x}/q/{q}", acting(201), body={"routing_key": "k2"}, needs=("queue",),
        effect=lambda s: "k2" in binding_keys(s)),
    Row("DELETE", "/api/bindings/{v}/e/{x}/q/{q}/k", acting(204), needs=("queue",),
        effect=lambda s: "k" not in binding_keys(s)),
    # Vhosts.
    Row("GET", "/api/vhosts", everyone(200), listing="seen"),
    Row("GET", "/api/vhosts/{v}", admins(200)),
    Row("PUT", "/api/vhosts/{new}", admins(201), effect=exists("/api/vhosts/{new}"),
        cleanup=("/api/vhosts/{new}",)),
    Row("DELETE", "/api/vhosts/{new}", admins(204), needs=("vhost",), effect=gone("/api/vhosts/{new}"),
        cleanup=("/api/vhosts/{new}",)),
    Row("GET", "/api/vhost-limits", everyone(200), listing="seen"),
    Row("GET", "/api/vhost-limits/{v}", row_of([NM, 200, 200, 200, 200, NV, 200, 200, NV, 200])),
    # Users and permissions.
    Row("GET", "/api/users", admins(200)),
    Row("PUT", "/api/users/{new}", admins(201), body={"password": PASSWORD, "tags": ""},
        effect=exists("/api/users/{new}"), cleanup=("/api/users/{new}",)),
    Row("DELETE", "/api/users/{new}", admins(204), needs=("user",), effect=gone("/api/users/{new}"),
        cleanup=("/api/users/{new}",)),
    Row("GET", "/api/permissions", admins(200)),
    Row("PUT", "/api/permissions/{v}/{new}", admins(201), body=FULL, needs=("user",),
        effect=exists("/api/permissions/{v}/{new}"), cleanup=("/api/users/{new}",)),
    Row("DELETE", "/api/permissions/{v}/{new}", admins(204), needs=("user", "permission"),
        effect=gone("/api/permissions/{v}/{new}"), cleanup=("/api/users/{new}",)),
    Row("GET", "/api/topic-permissions", admins(200)),
    Row("PUT", "/api/topic-permissions/{v}/{new}", admins(201), needs=("user",),
        body={"exchange": "amq.topic", "write": ".*", "read": ".*"},
        effect=exists("/api/topic-permissions/{v}/{new}"), cleanup=("/api/users/{new}",)),
    Row("DELETE", "/api/topic-permissions/{v}/{new}", admins(204), needs=("user", "topic_permission"),
        effect=gone("/api/topic-permissions/{v}/{new}"), cleanup=("/api/users/{new}",)),
    # Policies, operator policies, parameters.
    Row("GET", "/api/policies", everyone(200), listing="used"),
    Row("GET", "/api/policies/{v}", in_vhost(200)),
    Row("GET", "/api/policies/{v}/{p}", policymakers(200), needs=("policy",)),
    Row("PUT", "/api/policies/{v}/{new}", policymakers(201), body=POLICY,
        effect=exists("/api/policies/{v}/{new}"), cleanup=("/api/policies/{v}/{new}",)),
    Row("DELETE", "/api/policies/{v}/{p}", policymakers(204), needs=("policy",),
        effect=gone("/api/policies/{v}/{p}")),
    Row("GET", "/api/operator-policies", everyone(200), listing="used"),
    Row("GET", "/api/operator-policies/{v}", in_vhost(200)),
    Row("GET", "/api/operator-policies/{v}/{op}", admins(200), needs=("operator_policy",)),
    Row("PUT", "/api/operator-policies/{v}/{new}", admins(201), body=POLICY,
        effect=exists("/api/operator-policies/{v}/{new}"), cleanup=("/api/operator-policies/{v}/{new}",)),
    Row("DELETE", "/api/operator-policies/{v}/{op}", admins(204), needs=("operator_policy",),
        effect=gone("/api/operator-policies/{v}/{op}")),
    Row("GET", "/api/parameters", policymakers(200, outsider=200), listing="used-subset"),
    Row("GET", "/api/global-parameters", policymakers(200, outsider=200)),
    # Definitions.
    Row("GET", "/api/definitions", admins(200)),
    Row("GET", "/api/definitions/{v}", admins(200)),
    Row("POST", "/api/definitions", admins(204), body="definitions",
        effect=exists("/api/queues/{v}/{new}"), cleanup=("/api/queues/{v}/{new}",)),
]


# ---- the module's users, vhosts and connections --------------------------------------------

class World:
    def __init__(self):
        self.admin = Api()
        self.connections = []
        self.connection_of = {}


def connected(column, vhost, consume):
    name = "perm-%s-%s" % (column, SUFFIX)
    # No heartbeats: these connections idle through the whole module.
    c = connect(amqp_url(login(column), PASSWORD, vhost), heartbeat=0,
                client_properties={"connection_name": name})
    ch = c.channel()
    if consume:
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_consume(queue, lambda *a: None)
    return c


def our_users(items, user_of):
    """{column: count} of the module's users among items."""
    by_login = {login(c): c for c in COLUMNS}
    seen = {}
    for item in items:
        column = by_login.get(user_of(item))
        if column:
            seen[column] = seen.get(column, 0) + 1
    return seen


def connection_user(item):
    return item.get("user")


def consumer_user(item):
    return item.get("channel_details", {}).get("user")


CONSUMING = [c for c in COLUMNS if c != "restricted"]  # "^$" may declare no queue


@pytest.fixture(scope="module")
def world():
    w = World()
    a = w.admin
    admin_user = a.s.auth[0]
    try:
        for vhost in (V, W):
            ok(a.put("/api/vhosts/" + q(vhost)))
            ok(a.put("/api/permissions/%s/%s" % (q(vhost), q(admin_user)), FULL))
            ok(a.put("/api/queues/%s/shared-q" % q(vhost)))
            ok(a.put("/api/policies/%s/shared-p" % q(vhost), POLICY))
            ok(a.put("/api/operator-policies/%s/shared-op" % q(vhost), POLICY))
            ok(a.put("/api/vhost-limits/%s/max-connections" % q(vhost), {"value": 10000}))
        for column, (tags, on_v, on_w) in list(USERS.items()) + [(VICTIM, ("management", FULL, None))]:
            ok(a.put("/api/users/" + q(login(column)), {"password": PASSWORD, "tags": tags}))
            for vhost, perms in ((V, on_v), (W, on_w)):
                if perms:
                    ok(a.put("/api/permissions/%s/%s" % (q(vhost), q(login(column))), perms))
        for column in COLUMNS:
            w.connections.append(connected(column, V if in_v(column) else W, column in CONSUMING))
        # RabbitMQ lists connections, channels and consumers from its stats events (every 5 s).
        everyone_listed = settles(lambda: (
            set(our_users(a.json("/api/connections"), connection_user)) == set(COLUMNS)
            and set(our_users(a.json("/api/channels"), connection_user)) == set(COLUMNS)
            and set(our_users(a.json("/api/consumers"), consumer_user)) == set(CONSUMING)), timeout=30)
        assert everyone_listed, "the module's connections were not listed"
        for item in a.json("/api/connections"):
            for column in COLUMNS:
                if item.get("user") == login(column):
                    w.connection_of[column] = item["name"]
        yield w
    finally:
        for c in w.connections:
            try:
                c.close()
            except Exception:
                pass
        for column in COLUMNS + [VICTIM]:
            a.delete("/api/users/" + q(login(column)))
        for vhost in (V, W):
            a.delete("/api/vhosts/" + q(vhost))


def as_user(column):
    return Api(login(column), PASSWORD)


# ---- the tests -----------------------------------------------------------------------------

@pytest.mark.timeout(90)
@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("row", ROWS, ids=repr)
def test_endpoint(world, row, column):
    scene = Scene(world, column)
    try:
        for what in row.needs:
            scene.need(what)
        body = row.body
        if body == "definitions":
            body = {"queues": [{"name": scene.new, "vhost": V, "durable": True, "auto_delete": False,
                                "arguments": {}}]}
        path = scene.path(row.path)
        user = as_user(column)
        if row.method in ("PUT", "POST"):
            r = user.s.request(row.method, user.url(path), json=body if body is not None else {}, timeout=10)
        else:
            r = user.s.request(row.method, user.url(path), timeout=10)
        expected = row.expected[column]
        if callable(expected):
            expected = expected(scene)
        if isinstance(expected, tuple):
            status, error, reason = expected
            assert (r.status_code, r.json()) == (status, {"error": error, "reason": reason}), r.text
        else:
            assert r.status_code == expected, r.text
        if row.effect is not None:
            if isinstance(expected, int):
                assert settles(lambda: row.effect(scene)), "allowed, but not done"
            else:
                assert not row.effect(scene), "refused, but done"
        if row.listing and isinstance(expected, int):
            check_listing(row, column, user, r)
    finally:
        scene.cleanup(row.cleanup)


def check_listing(row, column, user, response):
    kind = row.listing
    if kind == "whoami":
        me = response.json()
        assert me["name"] == login(column)
        return
    if kind == "overview":
        own = not is_monitor(column)

        def totals_right():
            totals = user.json("/api/overview")["object_totals"]
            # RabbitMQ counts consumers for monitoring users only.
            if own:
                return "consumers" not in totals and totals["connections"] == 1 and totals["channels"] == 1
            return "consumers" in totals and totals["connections"] >= len(COLUMNS)
        assert settles(totals_right), user.json("/api/overview")["object_totals"]
        return
    items = response.json()
    if kind in ("connections", "channels", "consumers"):
        user_of = consumer_user if kind == "consumers" else connection_user
        everyone_there = CONSUMING if kind == "consumers" else COLUMNS
        if is_monitor(column):
            expected = set(everyone_there)
        else:
            expected = {column} & set(everyone_there)
            assert all(user_of(i) == login(column) for i in items), [user_of(i) for i in items]
        assert set(our_users(items, user_of)) == expected
        return
    vhost_of = (lambda i: i["name"]) if row.path == "/api/vhosts" else (lambda i: i["vhost"])
    allowed = seen_vhosts(column) if kind == "seen" else used_vhosts(column)
    everywhere = is_monitor(column) if kind == "seen" else is_admin(column)
    vhosts = {vhost_of(i) for i in items}
    if not everywhere:
        assert vhosts <= allowed, vhosts - allowed
    if kind != "used-subset":
        assert vhosts & {V, W} == allowed


# ---- closing connections -------------------------------------------------------------------

def listed_connection(admin, name):
    found = {}

    def look():
        for item in admin.json("/api/connections"):
            if item.get("client_properties", {}).get("connection_name") == name:
                found["name"] = item["name"]
                return True
        return False
    assert settles(look, timeout=15), "connection %s not listed" % name
    return found["name"]


def closed_by_broker(conn, timeout=10.0):
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    except pika.exceptions.ConnectionClosedByBroker as e:
        return e.reply_code, e.reply_text
    return None


# Closing another user's connection: administrators only; one's own: every management user.
CLOSE_OTHERS = row_of([NM, NO, NO, NO, 204, NO, NO, NO, NO, 204])
CLOSE_OWN = everyone(204)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("column", COLUMNS)
def test_closing_connections(world, column):
    admin = world.admin
    tag = uuid.uuid4().hex[:8]
    victim = connect(amqp_url(login(VICTIM), PASSWORD, V), heartbeat=0,
                     client_properties={"connection_name": "victim-" + tag})
    own = connect(amqp_url(login(column), PASSWORD, V if in_v(column) else W), heartbeat=0,
                  client_properties={"connection_name": "own-" + tag})
    try:
        user = as_user(column)
        for conn, name, expected in ((victim, "victim-" + tag, CLOSE_OTHERS[column]),
                                     (own, "own-" + tag, CLOSE_OWN[column])):
            listed = listed_connection(admin, name)
            r = user.delete("/api/connections/" + q(listed))
            if isinstance(expected, tuple):
                status, error, reason = expected
                assert (r.status_code, r.json()) == (status, {"error": error, "reason": reason}), r.text
                assert closed_by_broker(conn, timeout=1.0) is None, "refused, but closed"
                assert admin.get("/api/connections/" + q(listed)).status_code == 200
            else:
                assert r.status_code == expected, r.text
                assert closed_by_broker(conn) == (320, "CONNECTION_FORCED - Closed via management plugin")
    finally:
        for c in (victim, own):
            if c.is_open:
                c.close()


# ---- which permission each action needs ----------------------------------------------------

# The user may configure cfg-*, write wr-*, read rd-* (as test_access.py's AMQP table).
PARTIAL = {"configure": "^cfg-", "write": "^wr-", "read": "^rd-"}


@pytest.fixture
def partial(world):
    name = "perm-partial-" + uuid.uuid4().hex[:8]
    a = world.admin
    ok(a.put("/api/users/" + q(name), {"password": PASSWORD, "tags": "management"}))
    ok(a.put("/api/permissions/%s/%s" % (q(V), q(name)), PARTIAL))
    made = []
    try:
        yield name, made
    finally:
        for path in made:
            a.delete(path)
        a.delete("/api/users/" + q(name))


def test_permission_kinds_through_the_api(world, partial):
    """Each action needs what its AMQP method needs: configure to declare and delete, read to
    purge and get, write to publish, write on the destination and read on the source to
    bind and unbind, and for a new queue with a dead-letter exchange or a new exchange with
    an alternate exchange, read on it and write on that exchange."""
    name, made = partial
    a = world.admin
    user = Api(name, PASSWORD)
    t = uuid.uuid4().hex[:6]
    v = q(V)
    queues = {k: "%s-q-%s" % (k, t) for k in ("rd", "wr", "cfg")}
    exchanges = {k: "%s-x-%s" % (k, t) for k in ("rd", "wr", "cfg")}
    for n in queues.values():
        ok(a.put("/api/queues/%s/%s" % (v, n)))
        made.append("/api/queues/%s/%s" % (v, n))
    for n in exchanges.values():
        ok(a.put("/api/exchanges/%s/%s" % (v, n), {"type": "fanout"}))
        made.append("/api/exchanges/%s/%s" % (v, n))
    ok(a.post("/api/bindings/%s/e/%s/q/%s" % (v, exchanges["wr"], queues["rd"]), {"routing_key": "k"}))

    def refused_plain(r):
        assert (r.status_code, r.json()) == (401, {"error": "not_authorised", "reason": "Access refused."}), r.text

    def text(kind, n):
        return "access to %s '%s' in vhost '%s' refused for user '%s'" % (kind, n, V, name)

    # Declare and delete: configure.
    for n in ("cfg-new-q-" + t, "cfg-dl-q-" + t, "cfg-new-x-" + t, "cfg-ae-x-" + t, "rd-new-q-" + t, "wr-new-x-" + t):
        made.append("/api/%s/%s/%s" % ("queues" if "-q-" in n else "exchanges", v, n))
    assert user.put("/api/queues/%s/cfg-new-q-%s" % (v, t)).status_code == 201
    refused_plain(user.put("/api/queues/%s/rd-new-q-%s" % (v, t)))
    assert user.put("/api/exchanges/%s/cfg-new-x-%s" % (v, t), {"type": "direct"}).status_code == 201
    refused_plain(user.put("/api/exchanges/%s/wr-new-x-%s" % (v, t), {"type": "direct"}))
    # A dead-letter exchange needs read on the new queue (cfg-… is not readable) and write
    # on the exchange; an alternate exchange the same for the new exchange.
    refused_plain(user.put("/api/queues/%s/cfg-dl-q-%s" % (v, t),
                           {"arguments": {"x-dead-letter-exchange": exchanges["wr"]}}))
    refused_plain(user.put("/api/exchanges/%s/cfg-ae-x-%s" % (v, t),
                           {"type": "direct", "arguments": {"alternate-exchange": exchanges["wr"]}}))
    assert a.get("/api/queues/%s/cfg-dl-q-%s" % (v, t)).status_code == 404
    assert a.get("/api/exchanges/%s/cfg-ae-x-%s" % (v, t)).status_code == 404
    assert user.delete("/api/queues/%s/cfg-new-q-%s" % (v, t)).status_code == 204
    refused_plain(user.delete("/api/queues/%s/%s" % (v, queues["rd"])))
    assert user.delete("/api/exchanges/%s/cfg-new-x-%s" % (v, t)).status_code == 204
    refused_plain(user.delete("/api/exchanges/%s/%s" % (v, exchanges["wr"])))
    # Publish: write on the exchange (the default one is "amq.default").
    r = user.post("/api/exchanges/%s/%s/publish" % (v, exchanges["wr"]), PUBLISH)
    assert (r.status_code, r.json()) == (200, {"routed": True}), r.text
    for exchange, shown in ((exchanges["rd"], exchanges["rd"]), ("amq.default", "amq.default")):
        r = user.post("/api/exchanges/%s/%s/publish" % (v, exchange), dict(PUBLISH, routing_key=queues["wr"]))
        assert (r.status_code, r.json()) == (400, {"error": "bad_request",
                                                   "reason": "403 ACCESS_REFUSED - " + text("exchange", shown)}), r.text
    # Get and purge: read on the queue.
    r = user.post("/api/queues/%s/%s/get" % (v, queues["rd"]), GET_ONE)
    assert r.status_code == 200 and [m["payload"] for m in r.json()] == ["m2"], r.text
    r = user.post("/api/queues/%s/%s/get" % (v, queues["cfg"]), GET_ONE)
    assert (r.status_code, r.json()) == (401, {"error": "not_authorised",
                                               "reason": "ACCESS_REFUSED - " + text("queue", queues["cfg"])}), r.text
    assert user.delete("/api/queues/%s/%s/contents" % (v, queues["rd"])).status_code == 204
    refused_plain(user.delete("/api/queues/%s/%s/contents" % (v, queues["cfg"])))
    # Bindings: write on the destination, read on the source.
    assert user.post("/api/bindings/%s/e/%s/q/%s" % (v, exchanges["rd"], queues["wr"]), {"routing_key": "b"}).status_code == 201
    assert user.post("/api/bindings/%s/e/%s/e/%s" % (v, exchanges["rd"], exchanges["wr"]), {"routing_key": "b"}).status_code == 201
    refused_plain(user.post("/api/bindings/%s/e/%s/q/%s" % (v, exchanges["wr"], queues["wr"]), {"routing_key": "b"}))
    refused_plain(user.post("/api/bindings/%s/e/%s/q/%s" % (v, exchanges["rd"], queues["rd"]), {"routing_key": "b"}))
    assert user.delete("/api/bindings/%s/e/%s/q/%s/b" % (v, exchanges["rd"], queues["wr"])).status_code == 204
    refused_plain(user.delete("/api/bindings/%s/e/%s/q/%s/k" % (v, exchanges["wr"], queues["rd"])))
    assert "k" in {b["routing_key"] for b in a.json("/api/bindings/%s/e/%s/q/%s" % (v, exchanges["wr"], queues["rd"]))}


def test_topic_permissions_through_the_api(world, partial):
    """Publishing to and binding from a topic exchange through the API obey the topic
    permissions, as basic.publish and queue.bind."""
    name, made = partial
    a = world.admin
    v = q(V)
    ok(a.put("/api/permissions/%s/%s" % (v, q(name)), FULL))
    ok(a.put("/api/topic-permissions/%s/%s" % (v, q(name)),
             {"exchange": "amq.topic", "write": "^ok\\.", "read": "^ok\\."}))
    queue = "topic-q-" + uuid.uuid4().hex[:6]
    ok(a.put("/api/queues/%s/%s" % (v, queue)))
    made.append("/api/queues/%s/%s" % (v, queue))
    user = Api(name, PASSWORD)
    r = user.post("/api/exchanges/%s/amq.topic/publish" % v, dict(PUBLISH, routing_key="ok.a"))
    assert r.status_code == 200, r.text
    r = user.post("/api/exchanges/%s/amq.topic/publish" % v, dict(PUBLISH, routing_key="bad.a"))
    assert (r.status_code, r.json()) == (400, {"error": "bad_request", "reason": (
        "403 ACCESS_REFUSED - access to topic 'bad.a' in exchange 'amq.topic' in vhost '%s' refused for user '%s'"
        % (V, name))}), r.text
    assert user.post("/api/bindings/%s/e/amq.topic/q/%s" % (v, queue), {"routing_key": "ok.#"}).status_code == 201
    r = user.post("/api/bindings/%s/e/amq.topic/q/%s" % (v, queue), {"routing_key": "bad.#"})
    assert (r.status_code, r.json()) == (401, {"error": "not_authorised", "reason": "Access refused."}), r.text
    ok(a.post("/api/bindings/%s/e/amq.topic/q/%s" % (v, queue), {"routing_key": "bad.x"}))
    r = user.delete("/api/bindings/%s/e/amq.topic/q/%s/bad.x" % (v, queue))
    assert (r.status_code, r.json()) == (401, {"error": "not_authorised", "reason": "Access refused."}), r.text
    keys = {b["routing_key"] for b in a.json("/api/bindings/%s/e/amq.topic/q/%s" % (v, queue))}
    assert keys == {"ok.#", "bad.x"}

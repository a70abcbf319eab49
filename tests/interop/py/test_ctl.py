"""`warren ctl` (rabbitmqctl's commands over the HTTP management API), driven as a user
would: the real binary ($WARREN_BIN ctl ...) against the API at $WARREN_MGMT_URL, with pika
on $AMQP_URL (the same broker) to create and observe what the commands act on.

Skipped unless both WARREN_BIN and WARREN_MGMT_URL are set. The same tests run against
RabbitMQ 3.10's management plugin, whose API Warren's reproduces.
"""
import json
import os
import re
import subprocess
import time
import urllib.parse

import pika
import pika.exceptions
import pytest

from api_helpers import Api, q
from conftest import AMQP_URL, connect, uname

WARREN_BIN = os.environ.get("WARREN_BIN")
MGMT_URL = os.environ.get("WARREN_MGMT_URL")

pytestmark = pytest.mark.skipif(
    not (WARREN_BIN and MGMT_URL), reason="needs WARREN_BIN and WARREN_MGMT_URL (the HTTP API)"
)

# rabbitmqctl's exit codes.
EX_USAGE, EX_DATAERR, EX_NOUSER, EX_UNAVAILABLE, EX_SOFTWARE, EX_NOPERM = 64, 65, 67, 69, 70, 77


def ctl(*args, stdin=None):
    return subprocess.run(
        [WARREN_BIN, "ctl", *args], input=stdin, capture_output=True, text=True, timeout=20
    )


def ok(*args, stdin=None):
    r = ctl(*args, stdin=stdin)
    assert r.returncode == 0, "warren ctl %s: exit %d, stderr %r" % (args, r.returncode, r.stderr)
    return r.stdout


def listing(*args):
    """A list command's rows as dicts, through --json."""
    return json.loads(ok(*args, "--json"))


def eventually(check, timeout_s=15.0):
    """RabbitMQ's management API shows counters every few seconds; wait for them."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.3)


def amqp_url(user, password, vhost):
    parsed = urllib.parse.urlparse(AMQP_URL)
    return "amqp://%s:%s@%s:%d/%s" % (
        urllib.parse.quote(user, safe=""),
        urllib.parse.quote(password, safe=""),
        parsed.hostname,
        parsed.port or 5672,
        urllib.parse.quote(vhost, safe=""),
    )


@pytest.fixture
def vhost():
    name = uname("vh")
    ok("add_vhost", name)
    yield name
    ctl("delete_vhost", name)


@pytest.fixture
def user():
    name = uname("user")
    ok("add_user", name, "pw-" + name)
    yield name
    ctl("delete_user", name)


def test_vhost_user_tags_and_permissions_decide_who_may_connect(vhost, user):
    assert vhost in [v["name"] for v in listing("list_vhosts")]
    ok("set_user_tags", user, "monitoring", "policymaker")
    [row] = [u for u in listing("list_users") if u["user"] == user]
    assert sorted(row["tags"]) == ["monitoring", "policymaker"]

    ok("set_permissions", "-p", vhost, user, "^cfg-.*", ".*", ".*")
    # (RabbitMQ also grants the vhost's creator, guest here, full permissions on it.)
    assert [p for p in listing("list_permissions", "-p", vhost) if p["user"] == user] == [
        {"user": user, "configure": "^cfg-.*", "write": ".*", "read": ".*"}
    ]
    password = "pw-" + user
    c = connect(amqp_url(user, password, vhost))
    c.close()

    # change_password keeps the tags; the old password stops working.
    ok("change_password", user, "new-" + password)
    [row] = [u for u in listing("list_users") if u["user"] == user]
    assert sorted(row["tags"]) == ["monitoring", "policymaker"]
    connect(amqp_url(user, "new-" + password, vhost)).close()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(amqp_url(user, password, vhost))

    ok("clear_permissions", "-p", vhost, user)
    assert user not in [p["user"] for p in listing("list_permissions", "-p", vhost)]
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(amqp_url(user, "new-" + password, vhost))

    ok("delete_user", user)
    assert user not in [u["user"] for u in listing("list_users")]
    ok("delete_vhost", vhost)
    assert vhost not in [v["name"] for v in listing("list_vhosts")]


def test_add_user_reads_the_password_from_stdin(vhost):
    name = uname("user")
    try:
        ok("add_user", name, stdin="from-stdin\n")
        ok("set_permissions", "-p", vhost, name, ".*", ".*", ".*")
        connect(amqp_url(name, "from-stdin", vhost)).close()
    finally:
        ctl("delete_user", name)


def test_set_policy_applies_to_matching_queues_and_clear_policy_removes_it(vhost):
    name = uname("pol")
    prefix = uname("pq")
    ok("set_policy", "-p", vhost, "--priority", "7", "--apply-to", "queues",
       name, "^" + prefix, '{"max-length": 2}')
    assert listing("list_policies", "-p", vhost) == [{
        "vhost": vhost, "name": name, "pattern": "^" + prefix, "apply-to": "queues",
        "definition": {"max-length": 2}, "priority": 7,
    }]
    c = connect(amqp_url("guest", "guest", vhost))
    try:
        ch = c.channel()
        ch.queue_declare(prefix + ".a")
        for i in range(5):
            ch.basic_publish("", prefix + ".a", b"m%d" % i)
        # The policy's max-length holds the queue at 2 messages.
        assert eventually(lambda: ch.queue_declare(prefix + ".a", passive=True)
                          .method.message_count == 2)
        assert eventually(lambda: [q for q in listing("list_queues", "-p", vhost, "name", "policy")
                                   if q == {"name": prefix + ".a", "policy": name}])
        ok("clear_policy", "-p", vhost, name)
        assert listing("list_policies", "-p", vhost) == []
        for i in range(3):
            ch.basic_publish("", prefix + ".a", b"n%d" % i)
        assert eventually(lambda: ch.queue_declare(prefix + ".a", passive=True)
                          .method.message_count == 5)
    finally:
        c.close()


def test_list_queues_with_columns_then_purge_queue(names):
    q = names.queue()
    c = connect()
    try:
        ch = c.channel()
        ch.queue_declare(q, durable=True, arguments={"x-max-priority": 3})
        ch.confirm_delivery()
        for i in range(3):
            ch.basic_publish("", q, b"m%d" % i)

        def row():
            rows = [r for r in listing("list_queues", "name,messages", "durable", "arguments")
                    if r["name"] == q]
            return rows and rows[0]["messages"] == 3 and rows[0]
        assert eventually(row) == {
            "name": q, "messages": 3, "durable": True, "arguments": {"x-max-priority": 3},
        }
        # The default table: rabbitmqctl's banner, a tab-separated header, one row per queue.
        lines = ok("list_queues", "name", "messages").splitlines()
        assert lines[0] == "Listing queues for vhost / ..."
        assert lines[1] == "name\tmessages"
        assert "%s\t3" % q in lines[2:]
        assert ok("list_queues", "-q", "--no-table-headers", "name").splitlines().count(q) == 1

        ok("purge_queue", q)
        assert ch.queue_declare(q, passive=True).method.message_count == 0
    finally:
        c.close()


def test_list_exchanges_and_bindings(names):
    x, q = names.exchange(), names.queue()
    c = connect()
    try:
        ch = c.channel()
        ch.exchange_declare(x, "topic", durable=True)
        ch.queue_declare(q)
        ch.queue_bind(q, x, "a.#")
        assert {"name": x, "type": "topic", "durable": True} in listing(
            "list_exchanges", "name", "type", "durable")
        assert {
            "source_name": x, "source_kind": "exchange", "destination_name": q,
            "destination_kind": "queue", "routing_key": "a.#", "arguments": {},
        } in listing("list_bindings")
    finally:
        c.close()


def test_list_connections_reads_as_the_java_clients_test_suite_reads_it():
    """The Java client's suite (com.rabbitmq.tools.Host.listConnections) runs
    `rabbitmqctl list_connections -q pid peer_port client_properties`, splits each line on
    tabs, reads the peer port and finds the connection's name in the Erlang-term client
    properties with a regex; then closes the connection by that pid."""
    label = uname("conn")
    c = connect(client_properties={"connection_name": label})
    name_pattern = re.compile(r'"connection_name","(?P<name>[a-zA-Z0-9\-_.]+)?"')

    def mine():
        out = ok("list_connections", "-q", "pid", "peer_port", "client_properties")
        for line in out.splitlines():
            columns = line.split("\t")
            if len(columns) == 3 and columns[1].isdigit():
                found = name_pattern.search(columns[2])
                if found and found.group("name") == label:
                    return columns
        return None
    pid, peer_port, properties = eventually(mine)
    # The port the client connected from (the suite matches unnamed connections by it).
    assert int(peer_port) == c._impl._transport._sock.getsockname()[1]
    assert properties.startswith("[{") and '{"capabilities",[{' in properties
    ok("close_connection", pid, "Closed via rabbitmqctl")
    assert closed_by_broker(c).reply_code == 320


def test_connections_channels_consumers_are_listed_and_close_connection_closes(names):
    q = names.queue()
    tag = uname("ctag")
    label = uname("conn")
    c = connect(client_properties={"connection_name": label})
    ch = c.channel()
    ch.queue_declare(q)
    ch.basic_qos(prefetch_count=7)
    ch.basic_consume(q, lambda *a: None, consumer_tag=tag)

    def mine():
        rows = [r for r in listing("list_connections", "name", "user", "client_properties")
                if r["client_properties"].get("connection_name") == label]
        return rows and rows[0]
    conn = eventually(mine)
    assert conn and conn["user"] == "guest"
    assert eventually(lambda: [r for r in listing("list_channels", "connection", "prefetch_count")
                               if r == {"connection": conn["name"], "prefetch_count": 7}])
    assert eventually(lambda: [r for r in listing("list_consumers")
                               if r["consumer_tag"] == tag and r["queue_name"] == q
                               and r["prefetch_count"] == 7 and r["ack_required"] is True])

    ok("close_connection", conn["name"], "closed by warren ctl test")
    closed = closed_by_broker(c)
    assert closed.reply_code == 320
    assert "closed by warren ctl test" in closed.reply_text


def closed_by_broker(c):
    """The broker's connection.close as pika raises it, within 10 s."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            c.process_data_events(time_limit=0.2)
    return closed.value


def test_close_all_connections_closes_a_vhosts_connections_only(vhost):
    """rabbitmqctl close_all_connections -p VHOST REASON: every connection of that vhost
    gets 320 with the reason; one in another vhost stays open."""
    inside = [connect(amqp_url("guest", "guest", vhost)) for _ in range(2)]
    outside = connect()
    try:
        assert eventually(lambda: len([r for r in listing("list_connections", "vhost")
                                       if r["vhost"] == vhost]) == 2)
        out = ok("close_all_connections", "-p", vhost, "maintenance by ctl test")
        assert "Closing all connections in vhost %s, reason: maintenance by ctl test" % vhost in out
        for c in inside:
            closed = closed_by_broker(c)
            assert closed.reply_code == 320
            assert "maintenance by ctl test" in closed.reply_text
        outside.process_data_events(time_limit=0.5)
        assert outside.is_open
    finally:
        outside.close()


def test_set_and_clear_topic_permissions(vhost, user):
    ok("set_topic_permissions", "-p", vhost, user, "amq.topic", "^a\\..*", "^b\\..*")
    ok("set_topic_permissions", "-p", vhost, user, "logs", ".*", ".*")

    def mine():
        return sorted((p["exchange"], p["write"], p["read"])
                      for p in Api().json("/api/users/%s/topic-permissions" % q(user))
                      if p["vhost"] == vhost)
    assert mine() == [("amq.topic", "^a\\..*", "^b\\..*"), ("logs", ".*", ".*")]
    ok("clear_topic_permissions", "-p", vhost, user, "logs")
    assert mine() == [("amq.topic", "^a\\..*", "^b\\..*")]
    ok("clear_topic_permissions", "-p", vhost, user)
    assert mine() == []


def test_set_list_and_clear_user_limits(vhost, user):
    ok("set_user_limits", user, '{"max-connections": 1, "max-channels": 4}')
    assert json.loads(ok("list_user_limits", "--user", user, "-q")) == {
        "max-connections": 1, "max-channels": 4}
    [row] = [r for r in listing("list_user_limits", "--global") if r["user"] == user]
    assert json.loads(row["limits"]) == {"max-connections": 1, "max-channels": 4}
    ok("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
    with connect(amqp_url(user, "pw-" + user, vhost)):
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(amqp_url(user, "pw-" + user, vhost))
    ok("clear_user_limits", user, "max-connections")
    assert json.loads(ok("list_user_limits", "--user", user, "-q")) == {"max-channels": 4}
    ok("clear_user_limits", user, "all")
    assert json.loads(ok("list_user_limits", "--user", user, "-q")) == {}
    # rabbitmqctl 3.10.8's codes, side by side: 69 for each of these.
    assert ctl("set_user_limits", user, "{not json").returncode == EX_UNAVAILABLE
    assert ctl("set_user_limits", user, '{"max-queues": 1}').returncode == EX_UNAVAILABLE
    assert ctl("set_user_limits", "nobody-" + user, '{"max-channels": 1}').returncode == \
        EX_UNAVAILABLE
    assert ctl("list_user_limits", "--user", "nobody-" + user).returncode == EX_UNAVAILABLE


def test_vhost_limits_parameters_user_permissions_and_authentication(vhost, user):
    """rabbitmqctl's set/clear/list_vhost_limits, list_user_permissions, authenticate_user
    and the runtime parameter commands, each checked by what it changes (a connection over
    the vhost's limit refused) and its exit codes as rabbitmqctl 3.10.8's."""
    ok("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
    ok("set_vhost_limits", "-p", vhost, '{"max-connections": 1}')
    assert json.loads(ok("list_vhost_limits", "-p", vhost, "-q")) == {"max-connections": 1}
    [row] = [r for r in listing("list_vhost_limits", "--global") if r["vhost"] == vhost]
    assert json.loads(row["limits"]) == {"max-connections": 1}
    with connect(amqp_url(user, "pw-" + user, vhost)):
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(amqp_url(user, "pw-" + user, vhost))
    ok("clear_vhost_limits", "-p", vhost)
    assert json.loads(ok("list_vhost_limits", "-p", vhost, "-q")) == {}
    connect(amqp_url(user, "pw-" + user, vhost)).close()
    assert ctl("set_vhost_limits", "-p", vhost, "{bad").returncode == EX_UNAVAILABLE
    assert ctl("set_vhost_limits", "-p", uname("none"), '{"max-queues": 1}').returncode == \
        EX_DATAERR
    assert ctl("clear_vhost_limits", "-p", uname("none")).returncode == EX_UNAVAILABLE

    rows = [r for r in listing("list_user_permissions", user) if r["vhost"] == vhost]
    assert rows == [{"vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}]
    assert ctl("list_user_permissions", uname("nobody")).returncode == EX_UNAVAILABLE

    assert "Success" in ok("authenticate_user", user, "pw-" + user)
    wrong = ctl("authenticate_user", user, "wrong")
    assert wrong.returncode == EX_DATAERR and "failed to authenticate" in wrong.stderr

    name = uname("gp")
    ok("set_global_parameter", name, '{"a": 1}')
    assert {"name": name, "value": '{"a":1}'} in listing("list_global_parameters")
    ok("clear_global_parameter", name)
    assert ctl("clear_global_parameter", name).returncode == EX_UNAVAILABLE
    assert ctl("set_global_parameter", name, "{bad").returncode == EX_UNAVAILABLE
    ok("set_parameter", "-p", vhost, "federation-upstream", "up", '{"uri": "amqp://x"}')
    rows = listing("list_parameters", "-p", vhost)
    assert rows == [{"component": "federation-upstream", "name": "up",
                     "value": '{"uri":"amqp://x"}'}], rows
    ok("clear_parameter", "-p", vhost, "federation-upstream", "up")
    assert listing("list_parameters", "-p", vhost) == []
    assert ctl("clear_parameter", "-p", vhost, "federation-upstream", "up").returncode == \
        EX_UNAVAILABLE
    # A component nothing registered is refused, as RabbitMQ refuses it (exit 69, its text).
    typo = ctl("set_parameter", "-p", vhost, "federation-upstreams", "up", '{"uri": "amqp://x"}')
    assert typo.returncode == EX_UNAVAILABLE
    assert "component federation-upstreams not found" in typo.stderr, typo.stderr
    assert listing("list_parameters", "-p", vhost) == []


def test_export_then_import_definitions_restores_a_deleted_vhost(vhost, tmp_path):
    q = uname("dq")
    c = connect(amqp_url("guest", "guest", vhost))
    try:
        c.channel().queue_declare(q, durable=True)
    finally:
        c.close()
    ok("set_policy", "-p", vhost, "keep", "^" + q, '{"message-ttl": 60000}')
    path = tmp_path / "definitions.json"
    ok("export_definitions", str(path))
    exported = json.loads(path.read_text())
    assert vhost in [v["name"] for v in exported["vhosts"]]
    assert {"vhost": vhost, "name": q} in [
        {"vhost": d["vhost"], "name": d["name"]} for d in exported["queues"]]
    # "-" writes the same JSON to stdout.
    assert json.loads(ok("export_definitions", "-"))["vhosts"] == exported["vhosts"]

    ok("delete_vhost", vhost)
    assert vhost not in [v["name"] for v in listing("list_vhosts")]
    ok("import_definitions", str(path))
    # RabbitMQ imports asynchronously.
    assert eventually(lambda: q in [r["name"] for r in listing("list_queues", "-p", vhost)])
    assert [p["name"] for p in listing("list_policies", "-p", vhost)] == ["keep"]


def test_import_definitions_warns_about_what_it_left_out(vhost, tmp_path):
    if "Product name: Warren" not in ok("status"):
        pytest.skip("RabbitMQ imports stream queues")
    stream = uname("stream")
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps({"queues": [{"name": stream, "vhost": vhost, "durable": True,
                                            "auto_delete": False,
                                            "arguments": {"x-queue-type": "stream"}}]}))
    r = ctl("import_definitions", str(path))
    assert r.returncode == 0, r.stderr
    assert "not imported" in r.stderr and stream in r.stderr, r.stderr


def test_status_reports_the_node_and_totals(vhost):
    text = ok("status")
    assert text.startswith("Status of node ")
    assert "Virtual host count: " in text
    status = json.loads(ok("status", "--json"))
    assert status["totals"]["virtual_host_count"] >= 2
    assert any(l["protocol"] == "amqp" for l in status["listeners"])


def test_errors_have_rabbitmqctl_exit_codes_and_one_line_reasons(vhost, user):
    """Each code as rabbitmqctl 3.10.8 (Debian) exits for the same command, checked side by
    side against a RabbitMQ node: a missing vhost is 65 for delete_vhost, list_permissions,
    list_policies and set_policy but 69 for set/clear_permissions and clear_policy; bad
    policy JSON or a refused definition is 69."""
    missing = uname("missing")
    cases = [
        (("delete_user", missing), EX_NOUSER, 'User "%s" does not exist' % missing),
        (("set_permissions", missing, ".*", ".*", ".*"), EX_NOUSER, "does not exist"),
        (("set_permissions", "-p", missing, user, ".*", ".*", ".*"), EX_UNAVAILABLE,
         "Virtual host %s does not exist" % missing),
        (("clear_permissions", "-p", missing, user), EX_UNAVAILABLE, "does not exist"),
        (("add_user", user, "x"), EX_SOFTWARE, 'User "%s" already exists' % user),
        (("delete_vhost", missing), EX_DATAERR, "Virtual host '%s' does not exist" % missing),
        (("list_permissions", "-p", missing), EX_DATAERR, "does not exist"),
        (("set_policy", "-p", missing, "p", "^a", '{"max-length": 1}'), EX_DATAERR,
         "does not exist"),
        (("purge_queue", "-p", vhost, missing), EX_UNAVAILABLE, "does not exist"),
        (("clear_policy", "-p", vhost, missing), EX_UNAVAILABLE, "does not exist"),
        (("clear_policy", "-p", missing, "p"), EX_UNAVAILABLE, "does not exist"),
        (("close_connection", missing, "bye"), EX_UNAVAILABLE, "does not exist"),
        (("list_queues", "name", "no_such_column"), EX_USAGE, "no_such_column are not supported"),
        (("set_policy", "p", "^a", "{not json"), EX_UNAVAILABLE, "not valid JSON"),
        (("set_policy", "-p", vhost, "p", "^a", '{"max-length": "many"}'), EX_UNAVAILABLE, ""),
        (("--password", "wrong", "list_users"), EX_NOPERM, 'refused user "guest"'),
        (("--url", "http://127.0.0.1:1", "list_queues"), EX_UNAVAILABLE, "cannot reach"),
    ]
    for args, code, text in cases:
        r = ctl(*args)
        assert r.returncode == code, (args, r.returncode, r.stderr)
        assert text in r.stderr, (args, r.stderr)
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, (args, r.stderr)
    # Listing the queues, exchanges, bindings or consumers of a vhost that is not there
    # lists nothing and succeeds (rabbitmqctl 3.10.8), as closing its connections does.
    for command in ("list_queues", "list_exchanges", "list_bindings", "list_consumers"):
        assert json.loads(ok(command, "-p", missing, "--json")) == [], command
    assert ctl("close_all_connections", "-p", missing, "bye").returncode == 0

"""HTTP API: the node and cross-cutting behaviour — /api/overview, /api/nodes, whoami,
health checks, aliveness, extensions, cluster-name; authentication (401 with a challenge),
unknown paths (404), bad JSON (400), pagination, sorting and columns=."""
import uuid

import pytest

from api_helpers import MGMT_URL, VHOST, Api, needs_api, q, requests

pytestmark = needs_api


@pytest.fixture
def api():
    return Api()


def test_overview_has_what_tools_read(api):
    o = api.json("/api/overview")
    for key in ("management_version", "rabbitmq_version", "cluster_name", "node",
                "message_stats", "queue_totals", "object_totals", "listeners",
                "exchange_types", "rates_mode"):
        assert key in o, key
    for key in ("connections", "channels", "consumers", "exchanges", "queues"):
        assert isinstance(o["object_totals"][key], int), key
    assert {"direct", "fanout", "topic", "headers"} <= {t["name"] for t in o["exchange_types"]}
    assert any(l["protocol"] == "amqp" for l in o["listeners"])


def test_nodes_list_and_one(api):
    nodes = api.json("/api/nodes")
    assert len(nodes) == 1
    n = nodes[0]
    for key in ("name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free",
                "disk_free_limit", "disk_free_alarm", "fd_used", "fd_total", "uptime"):
        assert key in n, key
    assert n["running"] is True
    assert api.json("/api/nodes/" + n["name"])["name"] == n["name"]
    # RabbitMQ 3.10 crashes on an unknown node (500); Warren answers 404.
    assert api.get("/api/nodes/nosuchnode@nowhere").status_code in (404, 500)


def test_whoami_names_the_user_and_tags(api):
    me = api.json("/api/whoami")
    assert me["name"] == "guest"
    tags = me["tags"] if isinstance(me["tags"], list) else me["tags"].split(",")
    assert "administrator" in tags


def test_health_checks_and_aliveness(api):
    assert api.get("/api/health/checks/alarms").json() == {"status": "ok"}
    assert api.get("/api/health/checks/local-alarms").json() == {"status": "ok"}
    r = api.get("/api/aliveness-test/" + VHOST)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert api.get("/api/aliveness-test/no-such-vhost").status_code == 404
    api.delete("/api/queues/%2F/aliveness-test")


def test_extensions_and_cluster_name(api):
    assert api.json("/api/extensions") == [] or isinstance(api.json("/api/extensions"), list)
    assert api.json("/api/cluster-name")["name"]


def test_no_credentials_is_401_with_challenge():
    r = requests.get(MGMT_URL + "/api/overview", timeout=10)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Basic")


def test_wrong_password_is_401():
    r = requests.get(MGMT_URL + "/api/overview", auth=("guest", "wrong"), timeout=10)
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorized", "reason": "Login failed"}


def test_unknown_path_is_404_with_rabbitmq_body(api):
    r = api.get("/api/no-such-thing")
    assert r.status_code == 404
    assert r.json() == {"error": "Object Not Found", "reason": "Not Found"}


def test_bad_json_is_400(api):
    r = api.s.put(api.url("/api/queues/%2F/api.badjson"), data="{bad", timeout=10)
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "reason": "not_json"}


def test_pagination_sorting_and_columns(api):
    prefix = "api.page.%s." % uuid.uuid4().hex[:8]
    names = [prefix + c for c in "cab"]
    try:
        for n in names:
            assert api.put("/api/queues/%2F/" + n, {"durable": False}).status_code == 201
        page = api.json("/api/queues?page=1&page_size=2&name=%s&sort=name" % prefix)
        assert page["filtered_count"] == 3
        assert page["item_count"] == 2
        assert page["page_count"] == 2
        assert page["page"] == 1 and page["page_size"] == 2
        assert page["total_count"] >= 3
        assert [i["name"] for i in page["items"]] == [prefix + "a", prefix + "b"]
        rev = api.json("/api/queues?page=1&page_size=2&name=%s&sort=name&sort_reverse=true" % prefix)
        assert rev["items"][0]["name"] == prefix + "c"
        regex = api.json("/api/queues?page=1&use_regex=true&name=%s" % (prefix.replace(".", "\\.") + "[ab]$"))
        assert sorted(i["name"] for i in regex["items"]) == [prefix + "a", prefix + "b"]
        cols = api.json("/api/queues/%2F?columns=name,messages")
        mine = [c for c in cols if c["name"].startswith(prefix)]
        # RabbitMQ adds "messages" only once its stats have come in.
        assert len(mine) == 3 and all(set(c) <= {"name", "messages"} and "name" in c for c in mine)
        assert api.get("/api/queues?page=99&page_size=2&name=%s" % prefix).status_code == 400
    finally:
        for n in names:
            api.delete("/api/queues/%2F/" + n)


def test_pages_put_together_are_the_whole_list_in_its_order(api):
    """Every page of /api/queues, put together, is the whole list in RabbitMQ's order: by
    vhost then name by default, by name then vhost with sort=name (ties in the sort key fall
    back to the default sort), and exactly reversed with sort_reverse. Names repeat across two
    vhosts and differ in case, so a tie or a byte order shows. Warren finds each page's rows
    from the vhosts' name order (crates/broker/src/named_entries.rs) and the whole list by
    sorting every row: the two must agree, whatever the broker holds besides."""
    tag = uuid.uuid4().hex[:8]
    other = "api.pages." + tag
    names = ["api.pages.%s.%s" % (tag, n) for n in ("b", "a", "B", "a.1", "c", "\u00e9")]
    assert api.put("/api/vhosts/" + q(other)).status_code in (201, 204)
    try:
        perms = {"configure": ".*", "write": ".*", "read": ".*"}
        assert api.put("/api/permissions/%s/guest" % q(other), perms).status_code in (201, 204)
        for vhost, declared in ((VHOST, names), (q(other), names[:4])):
            for n in declared:
                assert api.put("/api/queues/%s/%s" % (vhost, q(n)), {"durable": False}).status_code == 201

        def pages(query):
            first = api.json("/api/queues?page=1&page_size=4&columns=name,vhost&" + query)
            rows = list(first["items"])
            for page in range(2, first["page_count"] + 1):
                at = api.json("/api/queues?page=%d&page_size=4&columns=name,vhost&%s" % (page, query))
                assert at["total_count"] == first["total_count"]
                rows += at["items"]
            assert len(rows) == first["filtered_count"] == first["total_count"]
            return [(r["vhost"], r["name"]) for r in rows]

        every = [(r["vhost"], r["name"]) for r in api.json("/api/queues?columns=name,vhost")]
        assert {(VHOST.replace("%2F", "/"), n) for n in names} <= set(every)
        assert {(other, n) for n in names[:4]} <= set(every)
        by_vhost = sorted(every)
        by_name = sorted(every, key=lambda r: (r[1], r[0]))
        assert pages("") == by_vhost
        assert pages("sort=vhost") == by_vhost
        assert pages("sort_reverse=true") == by_vhost[::-1]
        assert pages("sort=name") == by_name
        assert pages("sort=name&sort_reverse=true") == by_name[::-1]
        # The whole list sorted by name, unpaged: the same order as its pages.
        unpaged = api.json("/api/queues?sort=name&columns=name,vhost")
        assert [(r["vhost"], r["name"]) for r in unpaged] == by_name
    finally:
        for n in names:
            api.delete("/api/queues/%s/%s" % (VHOST, q(n)))
        api.delete("/api/vhosts/" + q(other))


def test_the_console_cannot_be_framed_and_loads_only_its_own_code():
    """The console's pages carry a Content-Security-Policy (own scripts only, no framing)
    and X-Frame-Options, which an operator's security scan looks for."""
    r = requests.get(MGMT_URL.rstrip("/") + "/", timeout=10)
    if "Warren" not in r.text:
        pytest.skip("not Warren's console")
    csp = r.headers.get("content-security-policy", "")
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert r.headers.get("x-frame-options") == "DENY"
    assert r.headers.get("x-content-type-options") == "nosniff"

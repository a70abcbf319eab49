"""HTTP API: users, permissions, topic permissions and vhosts — administration as
rabbitmqadmin and Terraform's provider do it — and what a user's tags let it see and do."""
import uuid

import pika
import pika.exceptions
import pytest

from api_helpers import Api, needs_api, poll, q
from conftest import AMQP_URL, connect

pytestmark = needs_api


@pytest.fixture
def api():
    return Api()


def uid(prefix):
    return "api-%s-%s" % (prefix, uuid.uuid4().hex[:10])


@pytest.fixture
def user(api):
    name = uid("user")
    r = api.put("/api/users/" + q(name), {"password": "s3cret", "tags": "management"})
    assert r.status_code == 201, r.text
    yield name
    api.delete("/api/users/" + q(name))


@pytest.fixture
def vhost(api):
    name = uid("vhost")
    assert api.put("/api/vhosts/" + q(name)).status_code == 201
    yield name
    api.delete("/api/vhosts/" + q(name))


def amqp_url(user, password, vhost):
    host = AMQP_URL.split("@", 1)[1].split("/", 1)[0]
    return "amqp://%s:%s@%s/%s" % (user, password, host, q(vhost))


def test_user_crud(api, user):
    u = api.json("/api/users/" + q(user))
    assert u["name"] == user
    assert u["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert u["password_hash"] and "s3cret" not in u["password_hash"]
    tags = u["tags"] if isinstance(u["tags"], list) else u["tags"].split(",")
    assert tags == ["management"]
    assert user in [x["name"] for x in api.json("/api/users")]
    # Tags as a list (3.13), password kept.
    assert api.put("/api/users/" + q(user), {"password": "s3cret", "tags": ["monitoring", "management"]}).status_code == 204
    me = Api(user, "s3cret").json("/api/whoami")
    assert me["name"] == user
    assert api.delete("/api/users/" + q(user)).status_code == 204
    assert api.get("/api/users/" + q(user)).status_code == 404
    assert api.delete("/api/users/" + q(user)).status_code == 404


def test_password_hash_is_taken_as_is(api):
    name = uid("hashed")
    # RabbitMQ's SHA-256 hash of "test12" with salt 0x908dc60a (its docs' example).
    h = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
    r = api.put("/api/users/" + q(name), {"password_hash": h, "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "administrator"})
    assert r.status_code == 201
    try:
        assert api.json("/api/users/" + q(name))["password_hash"] == h
        assert Api(name, "test12").get("/api/whoami").status_code == 200
        assert Api(name, "wrong").get("/api/whoami").status_code == 401
    finally:
        api.delete("/api/users/" + q(name))


def test_vhost_crud_and_permissions(api, vhost, user):
    v = api.json("/api/vhosts/" + q(vhost))
    assert v["name"] == vhost and v["tracing"] is False
    # Message totals: RabbitMQ shows them once the vhost has had queues and stats.
    default = poll(lambda: (lambda v: v if "messages" in v else None)(api.json("/api/vhosts/%2F")))
    for key in ("messages", "messages_ready", "messages_unacknowledged"):
        assert key in default, key
    assert vhost in [x["name"] for x in api.json("/api/vhosts")]
    assert api.put("/api/vhosts/" + q(vhost)).status_code == 204
    path = "/api/permissions/%s/%s" % (q(vhost), q(user))
    assert api.get(path).status_code == 404
    r = api.put(path, {"configure": "^api-", "write": ".*", "read": ".*"})
    assert r.status_code == 201
    assert api.put(path, {"configure": "^api-", "write": ".*", "read": ".*"}).status_code == 204
    p = api.json(path)
    assert p == {"user": user, "vhost": vhost, "configure": "^api-", "write": ".*", "read": ".*"}
    assert p in api.json("/api/permissions")
    assert p in api.json("/api/users/" + q(user) + "/permissions")
    assert p in api.json("/api/vhosts/" + q(vhost) + "/permissions")
    assert api.put("/api/permissions/%s/%s" % (q(vhost), q(user)), {"configure": "(", "write": "", "read": ""}).status_code == 400
    r = api.put("/api/permissions/no-such-vhost/%s" % q(user), {"configure": ".*", "write": ".*", "read": ".*"})
    assert r.status_code == 400 and r.json()["reason"] == "vhost_or_user_not_found"
    assert api.delete(path).status_code == 204
    assert api.get(path).status_code == 404


def test_a_vhosts_description_and_tags_are_kept(api):
    """As RabbitMQ's API (rabbit_vhost:put_vhost): set at creation, shown in the vhost and
    its metadata, exported; each PUT sets both, what it leaves out becoming empty."""
    name = uid("vhost-meta")
    path = "/api/vhosts/" + q(name)
    try:
        r = api.put(path, {"description": "orders", "tags": "eu,prod"})
        assert r.status_code == 201, r.text
        v = api.json(path)
        assert v["description"] == "orders" and v["tags"] == ["eu", "prod"], v
        assert v["metadata"] == {"description": "orders", "tags": ["eu", "prod"]}, v
        exported = [x for x in api.json("/api/definitions")["vhosts"] if x["name"] == name]
        assert exported and exported[0].get("metadata", {}).get("description") == "orders", \
            exported
        assert api.put(path, {"description": "orders", "tags": ["us"]}).status_code == 204
        v = api.json(path)
        assert v["description"] == "orders" and v["tags"] == ["us"], v
        assert api.put(path, {"tags": ["us"]}).status_code == 204
        assert api.json(path)["description"] == ""
        assert api.put(path, {"tags": 3}).status_code == 400
    finally:
        api.delete(path)


def test_topic_permissions(api, vhost, user):
    path = "/api/topic-permissions/%s/%s" % (q(vhost), q(user))
    r = api.put(path, {"exchange": "amq.topic", "write": "^a", "read": ".*"})
    assert r.status_code == 201
    got = api.json(path)
    assert got == [{"user": user, "vhost": vhost, "exchange": "amq.topic", "write": "^a", "read": ".*"}]
    assert got[0] in api.json("/api/topic-permissions")
    assert got[0] in api.json("/api/users/" + q(user) + "/topic-permissions")
    assert api.delete(path).status_code == 204
    assert api.get(path).status_code == 404


def test_management_user_sees_only_its_vhosts(api, vhost, user):
    other = Api(user, "s3cret")
    assert other.get("/api/whoami").status_code == 200
    # Not an administrator: users and permissions are refused.
    assert other.get("/api/users").status_code == 401
    assert other.put("/api/vhosts/" + q(uid("nope"))).status_code == 401
    assert vhost not in [x["name"] for x in other.json("/api/vhosts")]
    assert api.put("/api/permissions/%s/%s" % (q(vhost), q(user)), {"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
    assert vhost in [x["name"] for x in other.json("/api/vhosts")]
    assert [x["name"] for x in other.json("/api/vhosts")] == [vhost]


def test_user_without_management_tag_is_refused(api):
    name = uid("plain")
    assert api.put("/api/users/" + q(name), {"password": "pw", "tags": ""}).status_code == 201
    try:
        r = Api(name, "pw").get("/api/overview")
        assert r.status_code == 401
    finally:
        api.delete("/api/users/" + q(name))


def test_creator_gets_permissions_on_a_new_vhost(api, vhost):
    assert api.json("/api/vhosts/" + q(vhost) + "/permissions") == [
        {"user": "guest", "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}]


def test_deleting_a_vhost_closes_its_connections(api, vhost):
    c = connect(amqp_url("guest", "guest", vhost))
    c.channel().queue_declare("q-in-" + vhost)
    assert poll(lambda: any(x["vhost"] == vhost for x in api.json("/api/connections")), conn=c)
    assert any(x["name"] == "q-in-" + vhost for x in api.json("/api/queues/" + q(vhost)))
    assert api.delete("/api/vhosts/" + q(vhost)).status_code == 204
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        for _ in range(100):
            c.process_data_events(time_limit=0.1)
    assert api.get("/api/vhosts/" + q(vhost)).status_code == 404
    assert api.delete("/api/vhosts/" + q(vhost)).status_code == 404

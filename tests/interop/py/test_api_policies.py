"""HTTP API: policies and operator policies as objects (the queue's applied policy fields),
runtime and global parameters, and vhost limits — what rabbitmqadmin and Terraform's
provider set."""
import uuid

import pytest

from api_helpers import Api, needs_api, poll, q

pytestmark = needs_api


@pytest.fixture
def api():
    return Api()


def uid(prefix):
    return "api-%s-%s" % (prefix, uuid.uuid4().hex[:10])


def test_policy_crud_and_queue_fields(api):
    name, queue = uid("pol"), uid("polq")
    path = "/api/policies/%2F/" + q(name)
    body = {"pattern": "^" + queue + "$", "apply-to": "queues", "priority": 3, "definition": {"max-length": 5}}
    try:
        assert api.put("/api/queues/%2F/" + q(queue), {"durable": False}).status_code == 201
        assert api.put(path, body).status_code == 201
        assert api.put(path, body).status_code == 204
        p = api.json(path)
        assert p == {"vhost": "/", "name": name, "pattern": "^" + queue + "$", "apply-to": "queues",
                     "definition": {"max-length": 5}, "priority": 3}
        assert p in api.json("/api/policies") and p in api.json("/api/policies/%2F")
        info = poll(lambda: (lambda i: i if i.get("policy") == name else None)(api.json("/api/queues/%2F/" + q(queue))))
        assert info, api.json("/api/queues/%2F/" + q(queue))
        assert info["effective_policy_definition"] == {"max-length": 5}
        bad = api.put("/api/policies/%2F/" + q(uid("bad")), {"pattern": ".*", "definition": {"max-length": "x"}})
        assert bad.status_code == 400 and bad.json()["error"] == "bad_request"
        assert api.delete(path).status_code == 204
        assert api.get(path).status_code == 404
        assert api.delete(path).status_code == 404
        info = poll(lambda: (lambda i: i if i.get("policy") is None else None)(api.json("/api/queues/%2F/" + q(queue))))
        assert info and info["effective_policy_definition"] == {}
    finally:
        api.delete(path)
        api.delete("/api/queues/%2F/" + q(queue))


def test_operator_policy_crud(api):
    name = uid("op")
    path = "/api/operator-policies/%2F/" + q(name)
    body = {"pattern": "^never-matches-" + name, "apply-to": "queues", "priority": 0, "definition": {"max-length": 100}}
    try:
        assert api.put(path, body).status_code == 201
        p = api.json(path)
        assert p["name"] == name and p["definition"] == {"max-length": 100} and p["apply-to"] == "queues"
        assert any(x["name"] == name for x in api.json("/api/operator-policies"))
        assert any(x["name"] == name for x in api.json("/api/operator-policies/%2F"))
        assert api.delete(path).status_code == 204
        assert api.get(path).status_code == 404
    finally:
        api.delete(path)


def test_global_parameters(api):
    name = uid("global")
    path = "/api/global-parameters/" + q(name)
    try:
        assert api.put(path, {"name": name, "value": {"some": "thing"}}).status_code == 201
        assert api.put(path, {"name": name, "value": {"some": "other"}}).status_code == 204
        assert api.json(path) == {"name": name, "value": {"some": "other"}}
        assert any(x["name"] == name for x in api.json("/api/global-parameters"))
        assert api.delete(path).status_code == 204
        assert api.get(path).status_code == 404
    finally:
        api.delete(path)


def test_vhost_limits(api):
    vhost = uid("limits")
    assert api.put("/api/vhosts/" + q(vhost)).status_code == 201
    try:
        assert api.put("/api/vhost-limits/%s/max-connections" % q(vhost), {"value": 100}).status_code == 204
        assert api.put("/api/vhost-limits/%s/max-queues" % q(vhost), {"value": 7}).status_code == 204
        expected = {"vhost": vhost, "value": {"max-connections": 100, "max-queues": 7}}
        assert api.json("/api/vhost-limits/" + q(vhost)) == [expected]
        assert expected in api.json("/api/vhost-limits")
        assert api.delete("/api/vhost-limits/%s/max-queues" % q(vhost)).status_code == 204
        assert api.json("/api/vhost-limits/" + q(vhost)) == [{"vhost": vhost, "value": {"max-connections": 100}}]
    finally:
        api.delete("/api/vhosts/" + q(vhost))


def test_runtime_parameters(api):
    """A component Warren keeps for definitions (RabbitMQ needs the federation plugin)."""
    name = uid("upstream")
    path = "/api/parameters/federation-upstream/%2F/" + q(name)
    value = {"uri": "amqp://remote", "expires": 3600000}
    try:
        r = api.put(path, {"vhost": "/", "component": "federation-upstream", "name": name, "value": value})
        assert r.status_code == 201, r.text
        got = api.json(path)
        assert got == {"vhost": "/", "component": "federation-upstream", "name": name, "value": value}
        assert got in api.json("/api/parameters")
        assert got in api.json("/api/parameters/federation-upstream")
        assert got in api.json("/api/parameters/federation-upstream/%2F")
        assert api.delete(path).status_code == 204
        assert api.get(path).status_code == 404
    finally:
        api.delete(path)


def test_a_parameter_of_an_unknown_component_is_refused(api):
    """RabbitMQ refuses a component no plugin registered: 400 with its validation text."""
    path = "/api/parameters/no-such-component/%2F/" + q(uid("p"))
    r = api.put(path, {"value": {"a": 1}})
    assert r.status_code == 400, r.text
    assert "component no-such-component not found" in r.json()["reason"]
    assert api.get(path).status_code == 404

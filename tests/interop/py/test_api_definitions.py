"""HTTP API: /api/definitions[/VHOST] export and import, as `rabbitmqadmin export/import`
and the console use them."""
import uuid

import pytest

from api_helpers import Api, needs_api, q

pytestmark = needs_api


@pytest.fixture
def api():
    return Api()


def test_import_then_export(api):
    suffix = uuid.uuid4().hex[:10]
    queue, exchange = "defs.q." + suffix, "defs.x." + suffix
    doc = {
        "queues": [{"name": queue, "vhost": "/", "durable": True, "auto_delete": False,
                    "arguments": {"x-max-length": 7}}],
        "exchanges": [{"name": exchange, "vhost": "/", "type": "topic", "durable": True,
                       "auto_delete": False, "internal": False, "arguments": {}}],
        "bindings": [{"source": exchange, "vhost": "/", "destination": queue,
                      "destination_type": "queue", "routing_key": "k.#", "arguments": {}}],
    }
    try:
        assert api.post("/api/definitions", doc).status_code == 204
        assert api.json("/api/queues/%2F/" + q(queue))["arguments"] == {"x-max-length": 7}
        everything = api.json("/api/definitions")
        for key in ("users", "vhosts", "permissions", "queues", "exchanges", "bindings", "policies"):
            assert key in everything, key
        assert any(x["name"] == queue for x in everything["queues"])
        one = api.json("/api/definitions/%2F")
        assert any(b["source"] == exchange and b["routing_key"] == "k.#" for b in one["bindings"])
        assert "users" not in one
        again = api.post("/api/definitions/%2F", {"queues": [{"name": queue + ".2", "durable": False,
                                                               "auto_delete": False, "arguments": {}}]})
        assert again.status_code == 204
        assert api.get("/api/queues/%2F/" + q(queue + ".2")).status_code == 200
        assert api.s.post(api.url("/api/definitions"), data="{bad", timeout=10).status_code in (400, 415)
    finally:
        for n in (queue, queue + ".2"):
            api.delete("/api/queues/%2F/" + q(n))
        api.delete("/api/exchanges/%2F/" + q(exchange))

"""The cluster name and runtime parameters, as RabbitMQ keeps them: the cluster name is the
`cluster_name` global parameter (the node's name until one is set), clients see it in
connection.start, the HTTP API in /api/cluster-name, /api/overview and /api/global-parameters,
Prometheus in rabbitmq_identity_info; it and every runtime parameter survive a restart."""
import json

import pika
import pytest

from own_broker import Broker, free_port, needs_warren_bin

requests = pytest.importorskip("requests")

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]

AUTH = ("guest", "guest")


class Node:
    """An own broker with its HTTP API and Prometheus endpoint on free ports."""

    def __init__(self, data_dir):
        self.api_port = free_port()
        self.prometheus_port = free_port()
        self.data_dir = data_dir
        self.broker = Broker(data_dir, "--management-port", str(self.api_port),
                             "--prometheus-port", str(self.prometheus_port))
        self.api = "http://127.0.0.1:%d" % self.api_port

    def get(self, path):
        r = requests.get(self.api + path, auth=AUTH, timeout=10)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def put(self, path, body):
        return requests.put(self.api + path, auth=AUTH, timeout=10, data=json.dumps(body),
                            headers={"content-type": "application/json"})

    def handshake_cluster_name(self):
        c = pika.BlockingConnection(pika.URLParameters(self.broker.url))
        try:
            return c._impl.server_properties.get("cluster_name")
        finally:
            c.close()

    def identity_cluster(self):
        text = requests.get("http://127.0.0.1:%d/metrics" % self.prometheus_port,
                            timeout=10).text
        line = next(l for l in text.splitlines() if l.startswith("rabbitmq_identity_info{"))
        return line.split('rabbitmq_cluster="', 1)[1].split('"', 1)[0]

    def stop(self):
        self.broker.stop()


def test_cluster_name_is_a_durable_global_parameter_everyone_sees(tmp_path):
    data = str(tmp_path / "data")
    node = Node(data)
    try:
        node_name = node.get("/api/overview")["node"]
        # Unset: the node's name everywhere, and no global parameter for it (RabbitMQ 3.10).
        assert node.get("/api/cluster-name") == {"name": node_name}
        assert node.handshake_cluster_name() == node_name
        assert node.identity_cluster() == node_name
        assert "cluster_name" not in [p["name"] for p in node.get("/api/global-parameters")]

        assert node.put("/api/cluster-name", {"name": "east"}).status_code == 204
        assert node.get("/api/cluster-name") == {"name": "east"}
        assert node.get("/api/overview")["cluster_name"] == "east"
        assert {"name": "cluster_name", "value": "east"} in node.get("/api/global-parameters")
        assert node.handshake_cluster_name() == "east"
        assert node.identity_cluster() == "east"

        long_uri = "amqp://upstream-" + "h" * 300 + ":5672"
        r = node.put("/api/parameters/federation-upstream/%2F/up",
                     {"value": {"uri": long_uri, "expires": 3600000}})
        assert r.status_code in (201, 204), r.text
        assert node.put("/api/global-parameters/my-setting",
                        {"value": {"a": [1, 2]}}).status_code in (201, 204)
    finally:
        node.stop()

    node = Node(data)
    try:
        assert node.get("/api/cluster-name") == {"name": "east"}
        assert node.handshake_cluster_name() == "east"
        assert node.identity_cluster() == "east"
        upstream = node.get("/api/parameters/federation-upstream/%2F/up")
        assert upstream["value"] == {"uri": long_uri, "expires": 3600000}
        assert {"name": "my-setting", "value": {"a": [1, 2]}} in node.get("/api/global-parameters")
        # Clearing the parameter brings the node's name back, as in RabbitMQ.
        r = requests.delete(node.api + "/api/global-parameters/cluster_name", auth=AUTH,
                            timeout=10)
        assert r.status_code == 204
        assert node.get("/api/cluster-name")["name"] == node.get("/api/overview")["node"]
    finally:
        node.stop()

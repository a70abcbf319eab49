"""HTTPS for the HTTP API (--management-tls-port, RabbitMQ's management.ssl.port) and the
Prometheus endpoint (--prometheus-tls-port): the same certificate and client verification as
AMQPS, Basic auth over TLS, what a plain HTTP client gets on the TLS port, the TLS listeners
in /api/overview's `listeners` (protocols "https" and "https/prometheus", as RabbitMQ 3.10.8
lists them), port 0 and a missing certificate turning them off, and a stalled handshake not
holding up other clients, `warren ctl` over HTTPS. Each test starts a Warren of its own with
openssl-made certificates.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from own_broker import WARREN_BIN, Broker, free_port, needs_warren_bin
import tls_certs

requests = pytest.importorskip("requests")

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]
AUTH = ("guest", "guest")
TIMEOUT_S = 15


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="warren-tls-http-")
    yield tls_certs.make(d)
    shutil.rmtree(d, ignore_errors=True)


def wait_listening(port, broker):
    """The AMQP port answers first; the HTTP ones are bound just before serving starts."""
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert broker.proc.poll() is None, "broker exited, see %s" % broker.log.name
            assert time.monotonic() < deadline, "nothing listening on %d" % port
            time.sleep(0.05)


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class HttpsBroker:
    """A Warren with a certificate: HTTPS for the API on `api_tls_port` and for Prometheus
    on `metrics_tls_port`, plain HTTP for the API on `api_port`."""

    def __init__(self, certs, *args, verify=None):
        self.data_dir = tempfile.mkdtemp(prefix="warren-tls-http-data-")
        self.api_port, self.api_tls_port, self.metrics_tls_port = (free_port() for _ in range(3))
        cert, key = certs["server"]
        extra = {None: [],
                 "fail_if_no_peer_cert": ["--tls-verify-peer", "--tls-ca-file", certs["ca"],
                                          "--tls-fail-if-no-peer-cert"]}[verify]
        self.warren = Broker(self.data_dir, "--tls-cert-file", cert, "--tls-key-file", key,
                             "--amqps-port", "0",
                             "--management-port", str(self.api_port),
                             "--management-tls-port", str(self.api_tls_port),
                             "--prometheus-tls-port", str(self.metrics_tls_port),
                             *extra, *args)
        for port in (self.api_port, self.api_tls_port, self.metrics_tls_port):
            wait_listening(port, self.warren)
        self.ca = certs["ca"]

    def https(self, path, port=None):
        return "https://127.0.0.1:%d%s" % (port or self.api_tls_port, path)

    def get(self, path, port=None, **kw):
        kw.setdefault("verify", self.ca)
        kw.setdefault("auth", AUTH)
        return requests.get(self.https(path, port), timeout=TIMEOUT_S, **kw)

    def stop(self):
        self.warren.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.fixture
def started():
    brokers = []

    def start(certs, *args, **kw):
        b = HttpsBroker(certs, *args, **kw)
        brokers.append(b)
        return b
    yield start
    for b in brokers:
        b.stop()


def overview_listeners(url, **kw):
    r = requests.get(url + "/api/overview", auth=AUTH, timeout=TIMEOUT_S, **kw)
    assert r.status_code == 200, r.text
    return {(l["protocol"], l["port"]) for l in r.json()["listeners"]}


def test_api_over_https_verified_with_the_ca(certs, started):
    broker = started(certs)
    r = broker.get("/api/overview")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["product_name"] == "Warren"
    # The server certificate is checked: a client trusting another CA refuses it.
    with pytest.raises(requests.exceptions.SSLError):
        broker.get("/api/overview", verify=certs["stranger"][0])


def test_basic_auth_over_https(certs, started):
    broker = started(certs)
    assert broker.get("/api/whoami").json()["name"] == "guest"
    r = broker.get("/api/whoami", auth=None)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
    assert broker.get("/api/whoami", auth=("guest", "wrong")).status_code == 401
    # A user made over HTTPS logs in over HTTPS.
    r = requests.put(broker.https("/api/users/tls-http-user"), verify=broker.ca, auth=AUTH,
                     json={"password": "s3cret", "tags": "monitoring"}, timeout=TIMEOUT_S)
    assert r.status_code in (201, 204), r.text
    assert broker.get("/api/whoami", auth=("tls-http-user", "s3cret")).json()["name"] \
        == "tls-http-user"


def test_plain_http_on_the_tls_port_fails_cleanly(certs, started):
    broker = started(certs)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get("http://127.0.0.1:%d/api/overview" % broker.api_tls_port, auth=AUTH,
                     timeout=TIMEOUT_S)
    with socket.create_connection(("127.0.0.1", broker.api_tls_port)) as sock:
        sock.sendall(b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\n\r\n")
        reply = tls_certs.read_until_closed(sock, TIMEOUT_S)
    # At most a TLS alert record (content type 21), never an HTTP answer. (RabbitMQ sends
    # the alert too; curl calls it "HTTP/0.9".)
    assert reply == b"" or reply[0] == 21, reply
    assert broker.get("/api/overview").status_code == 200


def test_fail_if_no_peer_cert_requires_a_client_certificate(certs, started):
    broker = started(certs, verify="fail_if_no_peer_cert")
    for cert in (None, certs["stranger"]):
        with pytest.raises(requests.exceptions.ConnectionError):
            broker.get("/api/overview", cert=cert)
    r = broker.get("/api/overview", cert=certs["client"])
    assert r.status_code == 200, r.text
    # The client certificate does not replace the password: Basic auth still decides.
    assert broker.get("/api/overview", cert=certs["client"], auth=None).status_code == 401
    r = broker.get("/metrics", port=broker.metrics_tls_port, cert=certs["client"], auth=None)
    assert r.status_code == 200


def test_prometheus_metrics_over_https(certs, started):
    broker = started(certs)
    r = broker.get("/metrics", port=broker.metrics_tls_port, auth=None)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert "rabbitmq_identity_info{" in r.text
    r = broker.get("/metrics/per-object", port=broker.metrics_tls_port, auth=None)
    assert r.status_code == 200 and "rabbitmq_queues " in r.text


def test_tls_listeners_in_overview(certs, started):
    broker = started(certs)
    expected = {("https", broker.api_tls_port), ("https/prometheus", broker.metrics_tls_port),
                ("http", broker.api_port), ("amqp", broker.warren.port)}
    # The same API, with the same state, behind both ports.
    assert overview_listeners("https://127.0.0.1:%d" % broker.api_tls_port,
                              verify=broker.ca) == expected
    assert overview_listeners("http://127.0.0.1:%d" % broker.api_port) == expected
    r = requests.put(broker.https("/api/cluster-name"), verify=broker.ca, auth=AUTH,
                     json={"name": "set-over-https"}, timeout=TIMEOUT_S)
    assert r.status_code == 204, r.text
    r = requests.get("http://127.0.0.1:%d/api/cluster-name" % broker.api_port, auth=AUTH,
                     timeout=TIMEOUT_S)
    assert r.json()["name"] == "set-over-https"


def test_port_zero_disables_a_tls_listener(certs, tmp_path):
    api_port, amqps_port = free_port(), free_port()
    cert, key = certs["server"]
    broker = Broker(str(tmp_path / "data"), "--tls-cert-file", cert, "--tls-key-file", key,
                    "--management-port", str(api_port), "--amqps-port", str(amqps_port),
                    "--management-tls-port", "0", "--prometheus-tls-port", "0")
    try:
        wait_listening(api_port, broker)
        wait_listening(amqps_port, broker)
        protocols = {p for p, _ in overview_listeners("http://127.0.0.1:%d" % api_port)}
        assert protocols == {"amqp", "amqp/ssl", "http"}
    finally:
        broker.stop()


def test_tls_ports_listen_only_with_a_certificate(tmp_path):
    api_port, api_tls_port, metrics_tls_port = free_port(), free_port(), free_port()
    broker = Broker(str(tmp_path / "data"), "--management-port", str(api_port),
                    "--management-tls-port", str(api_tls_port),
                    "--prometheus-tls-port", str(metrics_tls_port))
    try:
        wait_listening(api_port, broker)
        assert overview_listeners("http://127.0.0.1:%d" % api_port) \
            == {("amqp", broker.port), ("http", api_port)}
        assert not listening(api_tls_port) and not listening(metrics_tls_port)
    finally:
        broker.stop()


def test_stalled_handshakes_do_not_block_other_clients(certs, started):
    broker = started(certs)
    # Raw connections that never send a ClientHello. Were handshakes run one after the
    # other, each would hold the listener for its 5 s timeout and each request below would
    # wait 20 s.
    stalled = [socket.create_connection(("127.0.0.1", port))
               for port in (broker.api_tls_port, broker.metrics_tls_port) for _ in range(4)]
    try:
        time.sleep(0.2)
        started_at = time.monotonic()
        assert broker.get("/api/overview").status_code == 200
        assert broker.get("/metrics", port=broker.metrics_tls_port, auth=None).status_code \
            == 200
        assert time.monotonic() - started_at < TIMEOUT_S
        # The stalled ones are dropped at the handshake timeout.
        for sock in stalled:
            tls_certs.read_until_closed(sock, TIMEOUT_S)
    finally:
        for sock in stalled:
            sock.close()
    assert broker.get("/api/overview").status_code == 200


def test_warren_ctl_over_https(certs, started):
    broker = started(certs)
    run = subprocess.run([WARREN_BIN, "ctl", "--url", broker.https(""), "--cacert", certs["ca"],
                          "status"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert "Interface: 127.0.0.1, port: %d, protocol: https\n" % broker.api_tls_port in run.stdout
    # Without the CA the certificate is not trusted (ctl's default is the public roots).
    run = subprocess.run([WARREN_BIN, "ctl", "--url", broker.https(""), "status"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0

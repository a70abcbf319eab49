"""AMQPS (AMQP over TLS) with pika: the server certificate checked against the test CA, PLAIN
over TLS, client certificates with verify_peer / fail_if_no_peer_cert, the EXTERNAL mechanism
logging in as the certificate's user, and what a plain client or a stalled handshake gets on
the TLS port. Each test starts a Warren of its own with certificates made by openssl.

Against RabbitMQ (3.10.8, rabbitmq.conf with listeners.ssl.default and the same files) set
TLS_BROKER=rabbitmq TLS_CERT_DIR=... TLS_AMQPS_PORT=... TLS_VERIFY=... (tls_rabbitmq.sh does)."""
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time

import pika
import pika.credentials
import pika.exceptions
import pytest

from own_broker import Broker, WARREN_BIN, free_port
import tls_certs

AGAINST_RABBITMQ = os.environ.get("TLS_BROKER") == "rabbitmq"
needs_own_broker = pytest.mark.skipif(
    AGAINST_RABBITMQ or not WARREN_BIN, reason="starts Warren brokers of its own (WARREN_BIN)")
pytestmark = pytest.mark.own_brokers


@pytest.fixture(scope="module")
def certs():
    if AGAINST_RABBITMQ:
        d = os.environ["TLS_CERT_DIR"]
        yield {"ca": os.path.join(d, "ca.pem"),
               "client": (os.path.join(d, "client.pem"), os.path.join(d, "client.key")),
               "stranger": (os.path.join(d, "stranger.pem"), os.path.join(d, "stranger.key")),
               "server": (os.path.join(d, "server.pem"), os.path.join(d, "server.key"))}
        return
    d = tempfile.mkdtemp(prefix="warren-tls-")
    yield tls_certs.make(d)
    shutil.rmtree(d, ignore_errors=True)


class TlsBroker:
    """A broker with an AMQPS listener: a Warren of the test's own, or the RabbitMQ that
    tls_rabbitmq.sh configured (only for the modes it was started in)."""

    def __init__(self, certs, *args, verify=None, login_from=None):
        if AGAINST_RABBITMQ:
            if (verify or "") != os.environ.get("TLS_VERIFY", ""):
                pytest.skip("RabbitMQ was started with TLS_VERIFY=%s" % os.environ.get("TLS_VERIFY"))
            if login_from and login_from != os.environ.get("TLS_LOGIN_FROM"):
                pytest.skip("RabbitMQ was started with ssl_cert_login_from = %s"
                            % os.environ.get("TLS_LOGIN_FROM"))
            self.amqps_port = int(os.environ["TLS_AMQPS_PORT"])
            self.warren = None
            return
        if not WARREN_BIN:
            pytest.skip("needs WARREN_BIN: starts Warren brokers of its own")
        self.amqps_port = free_port()
        cert, key = certs["server"]
        extra = {None: [],
                 "verify_peer": ["--tls-verify-peer", "--tls-ca-file", certs["ca"]],
                 "fail_if_no_peer_cert": ["--tls-verify-peer", "--tls-ca-file", certs["ca"],
                                          "--tls-fail-if-no-peer-cert"]}[verify]
        self.data_dir = tempfile.mkdtemp(prefix="warren-tls-data-")
        if login_from:
            extra += ["--tls-cert-login-from", login_from]
        self.warren = Broker(self.data_dir, "--amqps-port", str(self.amqps_port),
                             "--tls-cert-file", cert, "--tls-key-file", key, *extra, *args)

    def log(self):
        self.warren.log.flush()
        with open(self.warren.log.name) as f:
            return f.read()

    def stop(self):
        if self.warren:
            self.warren.stop()
            shutil.rmtree(self.data_dir, ignore_errors=True)


def context(certs, client=None):
    ctx = ssl.create_default_context(cafile=certs["ca"])
    if client:
        ctx.load_cert_chain(*certs[client])
    return ctx


def tls_params(port, certs, client=None, credentials=None):
    return pika.ConnectionParameters(
        host="127.0.0.1", port=port,
        credentials=credentials or pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(context(certs, client), server_hostname="localhost"),
        socket_timeout=5, stack_timeout=10, connection_attempts=1)


def round_trip(conn):
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"over tls")
    for _ in range(50):
        _, _, body = ch.basic_get(q, auto_ack=True)
        if body is not None:
            return body
        time.sleep(0.05)
    return None


def external_round_trip(broker, certs):
    """Logs in with EXTERNAL and the client certificate; a message's trip through a queue."""
    conn = pika.BlockingConnection(tls_params(broker.amqps_port, certs, client="client",
                                              credentials=pika.credentials.ExternalCredentials()))
    try:
        return round_trip(conn)
    finally:
        conn.close()


@pytest.fixture
def started():
    brokers = []

    def start(certs, *args, verify=None, login_from=None):
        b = TlsBroker(certs, *args, verify=verify, login_from=login_from)
        brokers.append(b)
        return b
    yield start
    for b in brokers:
        b.stop()


def test_pika_publishes_and_gets_over_tls(certs, started):
    broker = started(certs)
    conn = pika.BlockingConnection(tls_params(broker.amqps_port, certs))
    try:
        assert round_trip(conn) == b"over tls"
    finally:
        conn.close()


def test_large_messages_cross_tls_records_intact(certs, started):
    # A 4 MiB body spans many TLS records and AMQP frames both ways.
    broker = started(certs)
    body = bytes(range(256)) * (4 * 4096)
    conn = pika.BlockingConnection(tls_params(broker.amqps_port, certs))
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        for _ in range(3):
            ch.basic_publish("", q, body)
        got = []
        for _ in range(200):
            _, _, b = ch.basic_get(q, auto_ack=True)
            if b is not None:
                got.append(b)
            if len(got) == 3:
                break
            time.sleep(0.02)
        assert [len(b) for b in got] == [len(body)] * 3 and all(b == body for b in got)
    finally:
        conn.close()


def test_server_certificate_is_checked_by_the_client(certs, started):
    broker = started(certs)
    wrong_ca = ssl.create_default_context(cafile=certs["stranger"][0])  # not our CA
    params = tls_params(broker.amqps_port, certs)
    params.ssl_options = pika.SSLOptions(wrong_ca, server_hostname="localhost")
    with pytest.raises(ssl.SSLCertVerificationError):
        pika.BlockingConnection(params)


def test_external_logs_in_as_the_certificate_user(certs, started):
    # The user named by the certificate's CN exists (common_name mode; on RabbitMQ the
    # runner creates it and sets ssl_cert_login_from = common_name).
    broker = started(certs, "--user", "%s:unused-password" % tls_certs.CLIENT_CN,
                     verify="verify_peer", login_from="common_name")
    assert external_round_trip(broker, certs) == b"over tls"


def test_external_logs_in_as_the_certificate_dn(certs, started):
    # ssl_cert_login_from = distinguished_name, the user created under CLIENT_DN (on Warren
    # as the first boot's default user, as --user splits its list at ','). Passing on
    # RabbitMQ proves CLIENT_DN is the string RabbitMQ makes of the certificate.
    broker = started(certs, "--default-user", tls_certs.CLIENT_DN,
                     "--default-pass", "unused-password",
                     verify="verify_peer", login_from="distinguished_name")
    assert external_round_trip(broker, certs) == b"over tls"


@needs_own_broker
def test_external_user_name_is_the_certificate_dn(certs, started):
    # Default ssl_cert_login_from = distinguished_name. No such user exists: the login is
    # refused, and the broker's log names the user it looked for, in RabbitMQ's DN format.
    broker = started(certs, verify="verify_peer")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(tls_params(broker.amqps_port, certs, client="client",
                                           credentials=pika.credentials.ExternalCredentials()))
    assert "user '%s' (from the client certificate) does not exist" % tls_certs.CLIENT_DN \
        in broker.log()


def test_external_without_a_client_certificate_is_refused(certs, started):
    # Warren does not offer EXTERNAL there (pika: AuthenticationError, no common mechanism);
    # RabbitMQ offers it and refuses the login (ProbableAuthenticationError).
    broker = started(certs, verify="verify_peer")
    with pytest.raises((pika.exceptions.AuthenticationError,
                        pika.exceptions.ProbableAuthenticationError)):
        pika.BlockingConnection(tls_params(broker.amqps_port, certs,
                                           credentials=pika.credentials.ExternalCredentials()))
    # verify_peer without fail_if_no_peer_cert: a client without a certificate may log in
    # with a password.
    conn = pika.BlockingConnection(tls_params(broker.amqps_port, certs))
    conn.close()


def test_fail_if_no_peer_cert_refuses_clients_without_a_valid_certificate(certs, started):
    broker = started(certs, verify="fail_if_no_peer_cert")
    for client in (None, "stranger"):
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(tls_params(broker.amqps_port, certs, client=client))
    conn = pika.BlockingConnection(tls_params(broker.amqps_port, certs, client="client"))
    try:
        assert round_trip(conn) == b"over tls"
    finally:
        conn.close()


def test_plain_amqp_client_on_the_tls_port_fails_cleanly(certs, started):
    broker = started(certs)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika.ConnectionParameters(
            host="127.0.0.1", port=broker.amqps_port, socket_timeout=5, stack_timeout=10,
            connection_attempts=1))
    with socket.create_connection(("127.0.0.1", broker.amqps_port)) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        reply = tls_certs.read_until_closed(sock, 3)
    # At most a TLS alert record (content type 21), never AMQP.
    assert reply == b"" or reply[0] == 21, reply


def test_stalled_tls_handshake_is_dropped(certs, started):
    broker = started(certs)
    started_at = time.monotonic()
    with socket.create_connection(("127.0.0.1", broker.amqps_port)) as sock:
        tls_certs.read_until_closed(sock, 9)
    waited = time.monotonic() - started_at
    assert 4 < waited < 8, waited  # the 5 s TLS handshake timeout
    # The broker still serves TLS clients.
    pika.BlockingConnection(tls_params(broker.amqps_port, certs)).close()


@needs_own_broker
def test_stop_app_closes_the_tls_listener_and_start_app_opens_it_again(certs, started):
    mgmt_port = free_port()
    broker = started(certs, "--management-port", str(mgmt_port))

    def ctl(command):
        r = subprocess.run([WARREN_BIN, "ctl", "--url", "http://127.0.0.1:%d" % mgmt_port,
                            command], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr

    conn = pika.BlockingConnection(tls_params(broker.amqps_port, certs))
    ctl("stop_app")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
    assert closed.value.reply_code == 320
    for port in (broker.amqps_port, broker.warren.port):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    ctl("start_app")
    conn = pika.BlockingConnection(tls_params(broker.amqps_port, certs))
    try:
        assert round_trip(conn) == b"over tls"
    finally:
        conn.close()

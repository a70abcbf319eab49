"""`warren server --config FILE` (TOML): its values are used, environment variables and flags
override them, and bad keys or values stop the broker with an error naming the key."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pika
import pytest
import requests

from own_broker import WARREN_BIN, free_port, needs_warren_bin
import tls_certs
from test_tls import round_trip, tls_params

pytestmark = [pytest.mark.own_brokers, needs_warren_bin]


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="warren-config-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


class Server:
    """`warren server` with only the given arguments and environment (no --amqp-port etc.)."""

    def __init__(self, workdir, args, env=None, wait_port=None):
        self.log_path = os.path.join(workdir, "warren.log")
        self.log = open(self.log_path, "w")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("WARREN_")}
        full_env.update(env or {})
        self.proc = subprocess.Popen([WARREN_BIN, "server", *args], env=full_env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if wait_port is None:
            return
        deadline = time.monotonic() + 10
        while not listening(wait_port):
            assert self.proc.poll() is None, "broker exited: %s" % self.output()
            assert time.monotonic() < deadline, "broker did not start"
            time.sleep(0.05)

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()


def write_config(workdir, text):
    path = os.path.join(workdir, "warren.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_values_come_from_the_file(workdir):
    certs = tls_certs.make(os.path.join(workdir, "certs"))
    amqp_port, amqps_port, https_port = free_port(), free_port(), free_port()
    path = write_config(workdir, f"""
bind = "127.0.0.1"
amqp-port = {amqp_port}
amqps-port = {amqps_port}
management-port = 0
management-tls-port = {https_port}
prometheus-port = 0
prometheus-tls-port = 0
data-dir = "{workdir}/data"
user = ["from-file:file-pass"]

[tls]
cert-file = "{certs['server'][0]}"
key-file = "{certs['server'][1]}"
""")
    server = Server(workdir, ["--config", path], wait_port=amqp_port)
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", amqp_port, credentials=pika.PlainCredentials("from-file", "file-pass"),
            connection_attempts=1, socket_timeout=5))
        conn.close()
        conn = pika.BlockingConnection(tls_params(amqps_port, certs))
        assert round_trip(conn) == b"over tls"
        conn.close()
        deadline = time.monotonic() + 10
        while not listening(https_port):
            assert time.monotonic() < deadline, "no HTTPS listener: %s" % server.output()
            time.sleep(0.05)
        r = requests.get("https://127.0.0.1:%d/api/whoami" % https_port, verify=certs["ca"],
                         auth=("from-file", "file-pass"), timeout=15)
        assert r.status_code == 200 and r.json()["name"] == "from-file", r.text
    finally:
        server.stop()


def test_environment_and_flags_override_the_file(workdir):
    file_port, env_port, flag_port = free_port(), free_port(), free_port()
    path = write_config(workdir, f"""
bind = "127.0.0.1"
amqp-port = {file_port}
data-dir = "{workdir}/data"
user = ["from-file:file-pass"]
""")
    # The file named by WARREN_CONFIG; WARREN_USERS replaces the file's users; the flag's
    # port wins over both.
    server = Server(workdir, ["--amqp-port", str(flag_port)],
                    env={"WARREN_CONFIG": path, "WARREN_USERS": "from-env:env-pass",
                         "WARREN_AMQP_PORT": str(env_port)},
                    wait_port=flag_port)
    try:
        assert not listening(file_port) and not listening(env_port)
        params = lambda user, password: pika.ConnectionParameters(  # noqa: E731
            "127.0.0.1", flag_port, credentials=pika.PlainCredentials(user, password),
            connection_attempts=1, socket_timeout=5)
        pika.BlockingConnection(params("from-env", "env-pass")).close()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(params("from-file", "file-pass"))
    finally:
        server.stop()


@pytest.mark.parametrize("text, expected", [
    ("amqp-prot = 5672", "unknown key 'amqp-prot'"),
    ("frame-max = 'five'", "key 'frame-max' = 'five': invalid value"),
    ("channel-max = 70000", "key 'channel-max' = '70000'"),
    ("sync = 'sometimes'", "key 'sync' = 'sometimes'"),
    ("amqp-port = [1, 2]", "key 'amqp-port' takes one value"),
    ("[tls]\ncert-file = '/nonexistent/cert.pem'\nkey-file = '/nonexistent/key.pem'",
     "/nonexistent/cert.pem"),
    ("amqp-port = ", "TOML parse error"),
])
def test_bad_keys_and_values_stop_the_broker_naming_them(workdir, text, expected):
    # (amqp-port comes from a flag here, which wins over the file without reading it.)
    path = write_config(workdir, f"data-dir = '{workdir}/data'\n{text}\n")
    server = Server(workdir, ["--config", path, "--bind", "127.0.0.1",
                              "--amqp-port", str(free_port())])
    try:
        assert server.proc.wait(10) != 0
        assert expected in server.output()
        assert path in server.output() or "cert.pem" in expected
    finally:
        server.stop()

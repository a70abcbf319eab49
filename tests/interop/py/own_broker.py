"""A Warren broker process of a test's own, for tests that need limits or a data directory
the shared broker does not have. Needs the broker binary in WARREN_BIN (test.sh sets it)."""
import os
import random
import socket
import subprocess
import tempfile
import time

import pytest

WARREN_BIN = os.environ.get("WARREN_BIN")
needs_warren_bin = pytest.mark.skipif(
    not WARREN_BIN, reason="needs WARREN_BIN: starts Warren brokers of its own"
)


_HANDED_OUT = set()


def free_port():
    """A port free right now, outside the kernel's ephemeral range (32768–60999 by default):
    a port the kernel handed out for `bind(0)` may be taken again for an outgoing connection
    before the broker binds it, which made a node fail to start now and then."""
    low, high = 20000, 32767
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
        high = min(high, ephemeral_low - 1)
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(200 if high > low else 0):
        port = random.randint(low, high)
        if port in _HANDED_OUT:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _HANDED_OUT.add(port)
        return port
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Broker:
    def __init__(self, data_dir, *args):
        self.port = free_port()
        self.log = open(os.path.join(tempfile.gettempdir(), "warren-alarm-%d.log" % self.port), "w")
        self.proc = subprocess.Popen(
            [WARREN_BIN, "server", "--bind", "127.0.0.1", "--amqp-port", str(self.port),
             *self.default_ports(args), "--data-dir", data_dir, *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                assert self.proc.poll() is None, "broker exited, see %s" % self.log.name
                assert time.monotonic() < deadline, "broker did not start"
                time.sleep(0.05)
        self.url = "amqp://guest:guest@127.0.0.1:%d/%%2F" % self.port

    @staticmethod
    def default_ports(args):
        """The HTTP ports are off unless the test asks for one (several brokers share the
        machine, and 15672/15692, or 15671/15691 with a certificate, may well be taken)."""
        ports = []
        for flag in ("--management-port", "--prometheus-port",
                     "--management-tls-port", "--prometheus-tls-port"):
            if flag not in args:
                ports += [flag, "0"]
        return ports

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    def rss_bytes(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


def mount_tmpfs(prefix, size):
    """Mounts a fresh tmpfs of `size` ("64m"); skips the test where that is not allowed."""
    mount_point = tempfile.mkdtemp(prefix=prefix)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", mount_point],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here: %s" % mounted.stderr.decode().strip())
    return mount_point

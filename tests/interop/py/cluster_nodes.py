"""Real `warren server` cluster nodes for tests: start, stop, kill -9, SIGSTOP/SIGCONT, restart
and wipe-and-restart N processes, wait until they agree on one membership and leader, read
their status. Two network modes:

- loopback (always): every node on 127.0.0.1 with free-picked ports;
- network namespaces (`Cluster(..., netns=True)`, root only): every node in its own `ip netns`,
  its cluster traffic on a veth pair into one bridge, so a partition is real — `partition(node)`
  takes the node's bridge-side veth down (packets are dropped, connections go silent, nothing is
  reset), `heal(node)` brings it up. The test reaches every node on a second veth pair of its
  own (the client link), which a partition leaves alone: the test can talk to both sides.
  `netns_unavailable()` says why a machine cannot (not root, no `ip netns`, no bridge, bridged
  traffic filtered), for the netns tests to skip with that reason. With `proxy=True` every
  cluster connection also crosses a fault-injecting proxy (`fault_proxy.py`) in the root
  namespace, for faults between two nodes: `cut(a, b)` (both ways or one way; the third node
  then bridges the halves), `delay(a, b, ms)`, `reset(node)`.

Needs WARREN_BIN (see own_broker.py)."""
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from urllib.parse import quote

import pika
import requests

from fault_proxy import FaultProxy
from own_broker import WARREN_BIN, free_port

SETTLE_S = 30
# cgroup v1's write throttle for a block device (what `Node.slow_disk` sets).
BLKIO_WRITE_IOPS = "/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device"


def eventually(what, check, timeout=SETTLE_S, interval_s=0.3):
    """Polls `check` until it returns something truthy (returned), or fails after `timeout`
    seconds naming `what` and the last answer or error."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (requests.RequestException, ValueError, KeyError, subprocess.SubprocessError,
                json.JSONDecodeError, AssertionError) as e:
            last = e
        time.sleep(interval_s)
    raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))


class NodeExited(Exception):
    """A node's process ended while a test waited for it. `port_taken`: it could not bind one
    of its ports, which another process took between `free_port` and the node's bind."""

    def __init__(self, message, port_taken=False):
        super().__init__(message)
        self.port_taken = port_taken


class Node:
    """One cluster node: its own data directory, AMQP, HTTP API and cluster ports. In a network
    namespace (`netns`) it listens on the standard ports, reached at `host` (its client link);
    otherwise on free loopback ports."""

    def __init__(self, root, name, secret_file, extra=(), netns=None, host="127.0.0.1",
                 cluster_host=None, env=None, advertise=None):
        """`secret_file` None: the node uses its default secret (`~/.warren-cluster-secret`,
        HOME from `env`); `env`: the process's environment (default: the test's)."""
        self.name = name
        self.env = env
        self.extra = list(extra)
        self.data_dir = os.path.join(root, name.replace("@", "-"))
        self.secret_file = secret_file
        self.netns = netns
        self.host = host
        # `guest` may only log in from loopback (as in RabbitMQ): a node in a namespace, reached
        # over its client link, gets another default user.
        self.user, self.password = ("chaos", "chaos-pw") if netns else ("guest", "guest")
        if netns:
            self.extra += ["--default-user", self.user, "--default-pass", self.password]
        if netns:
            self.amqp_port, self.http_port, self.cluster_port, self.prometheus_port = (
                5672, 15672, 25672, 15692)
        else:
            self.amqp_port = free_port()
            self.http_port = free_port()
            self.cluster_port = free_port()
            self.prometheus_port = free_port()
        # What the other nodes dial: the node's cluster port, or the fault proxy's port for it.
        self.address = advertise or "%s:%d" % (cluster_host or host, self.cluster_port)
        self.proc = None
        self.paused = False
        self.log_path = os.path.join(root, name.replace("@", "-") + ".log")

    @property
    def amqp_url(self):
        return "amqp://%s:%s@%s:%d/%%2F" % (self.user, self.password, self.host, self.amqp_port)

    @property
    def api_url(self):
        return "http://%s:%d" % (self.host, self.http_port)

    def command(self, peers):
        bind = "0.0.0.0" if self.netns else "127.0.0.1"
        command = [
            WARREN_BIN, "server", "--bind", bind,
            "--amqp-port", str(self.amqp_port), "--management-port", str(self.http_port),
            "--prometheus-port", str(self.prometheus_port), "--management-tls-port", "0",
            "--prometheus-tls-port", "0", "--data-dir", self.data_dir,
            "--node-name", self.name, "--cluster-port", str(self.cluster_port),
            "--cluster-advertise", self.address]
        if self.secret_file is not None:
            command += ["--cluster-secret-file", self.secret_file]
        # None: the peers come from elsewhere (a configuration file in `extra`).
        if peers is not None:
            command += ["--cluster-peers", ",".join(p.address for p in peers)]
        command += self.extra
        # `ip netns exec` execs the command: the child's pid is the broker's, signals reach it.
        return (["ip", "netns", "exec", self.netns] if self.netns else []) + command

    def start(self, peers, wait=True):
        """Starts the broker with `peers` as its seeds; waits for its HTTP API."""
        assert not self.running(), "%s is already running" % self.name
        with open(self.log_path, "a") as log:
            log.write("\n==== start %s\n" % time.strftime("%H:%M:%S"))
            log.flush()
            self.proc = subprocess.Popen(self.command(peers), stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env)
        self.paused = False
        if wait:
            try:
                eventually("%s's HTTP API" % self.name, self._answers, timeout=60)
            except AssertionError as e:
                tail = "\n".join(self.last_start_log().splitlines()[-15:])
                raise AssertionError("%s; %s's log ends:\n%s%s" % (
                    e, self.name, tail, self.dump_threads())) from None

    def _answers(self):
        if self.proc.poll() is not None:
            last_start = self.last_start_log()
            # The error's last lines, without the backtrace frames after them.
            lines = [l for l in last_start.splitlines()
                     if not re.match(r"\s+(\d+: |at )", l)]
            tail = "\n".join(lines[-8:])
            raise NodeExited("%s exited (%s), see %s; its log ends:\n%s" % (
                self.name, self.proc.returncode, self.log_path, tail),
                port_taken="Address already in use" in last_start)
        return self.get("/api/overview")

    def dump_threads(self):
        """Where every thread of a running node is (gdb's backtraces, into a file beside
        its log), for a node that hangs; a line saying where, or nothing without gdb."""
        if not self.running() or shutil.which("gdb") is None:
            return ""
        path = self.log_path + ".threads-%d" % self.proc.pid
        with open(path, "w") as out:
            subprocess.run(["gdb", "-p", str(self.proc.pid), "-batch", "-ex",
                            "thread apply all bt"], stdout=out, stderr=subprocess.STDOUT,
                           timeout=120, check=False)
        return "\n(its threads' backtraces: %s)" % path

    def last_start_log(self):
        """What the node logged since it was last started."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read().rsplit("\n==== start ", 1)[-1]
        except OSError:
            return ""

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """kill -9: no shutdown, whatever was not on disk is lost."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.paused = False

    def pause(self):
        """SIGSTOP: the process is frozen, its sockets stay open (a hung node, a long GC)."""
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.paused = False

    def wipe(self):
        """Removes the node's data directory (the node must be down): a node replaced by a
        fresh machine under the same name."""
        assert not self.running(), "wipe a stopped node"
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # A disk of its own (root only), mounted on the data directory, that a test fills up (a
    # full disk) and frees again, or slows down: an ext4 file system on a loop device when the
    # machine has them (its writes can then be throttled through the root blkio cgroup, v1:
    # `slow_disk`), else a tmpfs.

    def mount_disk(self, size_mb):
        os.makedirs(self.data_dir, exist_ok=True)
        self.loop_device = None
        image = self.data_dir.rstrip("/") + ".img"
        try:
            with open(image, "wb") as f:
                f.truncate(size_mb << 20)
            device = subprocess.run(["losetup", "-f", "--show", image], check=True,
                                    capture_output=True, text=True).stdout.strip()
            self.loop_device = device
            subprocess.run(["mkfs.ext4", "-q", device], check=True, capture_output=True)
            subprocess.run(["mount", device, self.data_dir], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            if self.loop_device:
                subprocess.run(["losetup", "-d", self.loop_device], capture_output=True)
            self.loop_device = None
            with contextlib.suppress(OSError):
                os.remove(image)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % size_mb, "tmpfs",
                            self.data_dir], check=True, capture_output=True)
        self.disk_image = image
        self.disk_mounted = True

    def can_slow_disk(self):
        return (getattr(self, "loop_device", None) is not None
                and os.path.exists(BLKIO_WRITE_IOPS))

    def slow_disk(self, write_iops):
        """At most `write_iops` writes a second reach the node's disk (0: no limit): an fsync
        then takes a good fraction of a second."""
        majmin = subprocess.run(["lsblk", "-no", "MAJ:MIN", self.loop_device], check=True,
                                capture_output=True, text=True).stdout.strip()
        with open(BLKIO_WRITE_IOPS, "w") as f:
            f.write("%s %d\n" % (majmin, write_iops))

    def fill_disk(self, leave_mb=0):
        """Takes every free byte of the node's disk but `leave_mb` (with 0, writes then fail
        with ENOSPC)."""
        stat = os.statvfs(self.data_dir)
        room = stat.f_bavail * stat.f_frsize - leave_mb * (1 << 20)
        with open(os.path.join(self.data_dir, "filler"), "wb") as f:
            chunk = b"\0" * (1 << 20)
            try:
                while leave_mb == 0 or room > 0:
                    f.write(chunk[:room] if leave_mb else chunk)
                    f.flush()
                    room -= len(chunk)
            except OSError:
                pass

    def free_disk(self):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self.data_dir, "filler"))

    def unmount_disk(self):
        if getattr(self, "disk_mounted", False):
            if self.loop_device:
                with contextlib.suppress(OSError, subprocess.CalledProcessError):
                    self.slow_disk(0)
            subprocess.run(["umount", "-l", self.data_dir], capture_output=True)
            if self.loop_device:
                subprocess.run(["losetup", "-d", self.loop_device], capture_output=True)
            with contextlib.suppress(OSError):
                os.remove(self.disk_image)
            self.disk_mounted = False

    def request(self, method, path, timeout=10, **kwargs):
        return requests.request(method, self.api_url + path, auth=(self.user, self.password),
                                timeout=timeout, **kwargs)

    def connect(self):
        """An AMQP 0-9-1 connection to this node (pika, a few attempts: it may be starting)."""
        return pika.BlockingConnection(pika.ConnectionParameters(
            host=self.host, port=self.amqp_port, connection_attempts=3, retry_delay=1))

    def queue(self, name, vhost="/"):
        """The queue's object from this node's HTTP API, None when it answers otherwise."""
        response = self.request("GET", "/api/queues/%s/%s" % (quote(vhost, safe=""),
                                                               quote(name, safe="")))
        return response.json() if response.status_code == 200 else None

    def get(self, path, timeout=5):
        response = self.request("GET", path, timeout=timeout)
        response.raise_for_status()
        return response.json()

    def ctl(self, *args, timeout=90):
        return subprocess.run([WARREN_BIN, "ctl", "--url", self.api_url, "--username", self.user,
                               "--password", self.password, *args],
                              capture_output=True, text=True, timeout=timeout)

    def forget(self, name):
        """`forget_cluster_node NAME` through this node; whether it was done."""
        return self.ctl("forget_cluster_node", name).returncode == 0

    def status(self):
        """`warren ctl cluster_status` as JSON."""
        result = self.ctl("cluster_status", "--formatter", "json", timeout=20)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def api_status(self):
        """GET /api/cluster/status."""
        return self.get("/api/cluster/status")

    def metrics(self):
        response = requests.get("http://%s:%d/metrics" % (self.host, self.prometheus_port),
                                timeout=5)
        response.raise_for_status()
        return response.text

    def log(self):
        with open(self.log_path) as f:
            return f.read()


def members(status):
    return sorted(m["name"] for m in status["members"])


def agreed(nodes, expected_names):
    """Every node's cluster_status lists `expected_names` and names the same leader (its name),
    else None."""
    statuses = [n.status() for n in nodes]
    leaders = {s["leader"] for s in statuses}
    if len(leaders) != 1 or None in leaders:
        return None
    if any(members(s) != sorted(expected_names) for s in statuses):
        return None
    return statuses[0]["leader"]


def agreed_queue_leader(nodes, name, members=None, member_count=None):
    """The leader of quorum queue `name` once every node's API names the same one and shows
    the same members: exactly `members` (names) when given, else any `member_count` of them
    (the leader among them); None until then."""
    infos = [n.queue(name) for n in nodes]
    if any(i is None for i in infos):
        return None
    leaders = {i.get("leader") for i in infos}
    if len(leaders) != 1 or None in leaders:
        return None
    shown = {tuple(sorted(i.get("members") or [])) for i in infos}
    if len(shown) != 1:
        return None
    shown = list(shown.pop())
    if members is not None and shown != sorted(members):
        return None
    if member_count is not None and len(shown) != member_count:
        return None
    leader = leaders.pop()
    return leader if leader in shown else None


def all_up_and_caught_up(nodes, expected_names):
    """The nodes agree on `expected_names` and a leader, the leader sees every member running
    and no member behind (lag 0); the leader's name, else None."""
    leader = agreed(nodes, expected_names)
    if leader is None:
        return None
    by_name = {n.name: n for n in nodes}
    if leader not in by_name:
        return None
    status = by_name[leader].api_status()
    if not all(m["running"] for m in status["members"]):
        return None
    if any(m.get("lag") not in (0, None) for m in status["members"]):
        return None
    return leader


def netns_unavailable():
    """Why network-namespace clusters cannot run here (None when they can): needs root, `ip
    netns`, a bridge, and bridged traffic that no firewall drops (br_netfilter + a FORWARD DROP
    policy, as Docker hosts have, would silently cut the cluster). Probed once with two
    namespaces and a TCP connection between them."""
    global _NETNS_PROBE
    if _NETNS_PROBE is not None:
        return _NETNS_PROBE or None
    reason = ""
    if os.geteuid() != 0:
        reason = "network namespaces need root"
    elif shutil.which("ip") is None:
        reason = "no `ip` command (iproute2)"
    else:
        net = None
        try:
            net = NetnsNetwork(2)
            net.setup()
            probe = ("import socket,sys; s=socket.socket(); s.settimeout(3); "
                     "s.connect((sys.argv[1], int(sys.argv[2]))); s.close()")
            listener = subprocess.Popen(
                ["ip", "netns", "exec", net.namespaces[1], "python3", "-c",
                 "import socket; s=socket.socket(); s.bind(('0.0.0.0', 25999)); s.listen(1); "
                 "s.settimeout(10); s.accept()"])
            try:
                connected = None
                for _ in range(30):
                    connected = subprocess.run(
                        ["ip", "netns", "exec", net.namespaces[0], "python3", "-c", probe,
                         net.cluster_ip(1), "25999"], capture_output=True, text=True)
                    if connected.returncode == 0:
                        break
                    time.sleep(0.2)
                if connected.returncode != 0:
                    reason = ("bridged traffic between network namespaces does not get through "
                              "(a firewall on the bridge?): %s" % connected.stderr.strip()[-200:])
            finally:
                listener.kill()
                listener.wait()
        except (subprocess.CalledProcessError, OSError) as e:
            detail = getattr(e, "stderr", None) or str(e)
            reason = "cannot set up network namespaces here: %s" % str(detail).strip()[-200:]
        finally:
            if net is not None:
                net.teardown()
    _NETNS_PROBE = reason
    return reason or None


_NETNS_PROBE = None


class NetnsNetwork:
    """N network namespaces: each with `eth0` on a veth pair into one bridge (the cluster
    network, 10.R.0.0/24) and `cl0` on a veth pair to the root namespace (the client link,
    10.R.i.0/24, point to point). Names carry a random tag so concurrent runs do not collide;
    the namespaces have no route between the client links, so cluster traffic only ever crosses
    the bridge."""

    def __init__(self, size):
        self.size = size
        self.tag = "%04x" % random.randrange(0x10000)
        self.octet = random.randrange(100, 250)
        self.bridge = "wcbr%s" % self.tag
        self.namespaces = ["wc%s-%d" % (self.tag, i) for i in range(size)]
        self._made = []

    def cluster_ip(self, i):
        return "10.%d.0.%d" % (self.octet, 10 + i)

    def client_ip(self, i):
        return "10.%d.%d.2" % (self.octet, 1 + i)

    def cluster_veth(self, i):
        """The bridge-side end of node i's cluster link: what a partition takes down."""
        return "wc%sc%d" % (self.tag, i)

    def _ip(self, *args, netns=None):
        command = (["ip", "netns", "exec", netns, "ip"] if netns else ["ip"]) + list(args)
        subprocess.run(command, check=True, capture_output=True, text=True)

    def setup(self):
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", self.bridge))
        self._ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            self._ip("netns", "add", ns)
            self._made.append(("netns", ns))
            self._ip("link", "set", "lo", "up", netns=ns)
            cluster_veth, client_veth = self.cluster_veth(i), "wc%sl%d" % (self.tag, i)
            self._ip("link", "add", cluster_veth, "type", "veth", "peer", "name", "eth0",
                     "netns", ns)
            self._made.append(("link", cluster_veth))
            self._ip("link", "set", cluster_veth, "master", self.bridge)
            self._ip("link", "set", cluster_veth, "up")
            self._ip("addr", "add", self.cluster_ip(i) + "/24", "dev", "eth0", netns=ns)
            self._ip("link", "set", "eth0", "up", netns=ns)
            self._ip("link", "add", client_veth, "type", "veth", "peer", "name", "cl0",
                     "netns", ns)
            self._made.append(("link", client_veth))
            self._ip("addr", "add", "10.%d.%d.1/24" % (self.octet, 1 + i), "dev", client_veth)
            self._ip("link", "set", client_veth, "up")
            self._ip("addr", "add", self.client_ip(i) + "/24", "dev", "cl0", netns=ns)
            self._ip("link", "set", "cl0", "up", netns=ns)

    def proxy_ip(self):
        """The root namespace's address on the bridge, where the fault proxy listens."""
        return "10.%d.0.1" % self.octet

    def node_of_cluster_ip(self, ip):
        for i in range(self.size):
            if self.cluster_ip(i) == ip:
                return i
        return None

    def add_proxy_address(self):
        self._ip("addr", "add", self.proxy_ip() + "/24", "dev", self.bridge)

    def partition(self, i):
        self._ip("link", "set", self.cluster_veth(i), "down")

    def heal(self, i):
        self._ip("link", "set", self.cluster_veth(i), "up")

    def teardown(self):
        # Deleting a namespace deletes the veth ends in it, and with them their peers.
        for kind, name in reversed(self._made):
            if kind == "netns":
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
            else:
                subprocess.run(["ip", "link", "del", name], capture_output=True)
        self._made = []


class Cluster:
    """`size` nodes sharing a secret, under one temporary directory, each seeded with the
    others' addresses; loopback or (`netns=True`) one network namespace per node."""

    # How long a harness waits for the cluster to heal after a fault: each look at a Warren
    # node is one HTTP request.
    heal_timeout_s = 120

    def __init__(self, prefix, size=3, netns=False, extra=(), proxy=False, disk_mb=None,
                 spares=0):
        """`proxy` (with `netns`): every cluster connection crosses a `FaultProxy`
        (`self.proxy`), for faults between two nodes (`cut`, `delay`, `reset`). `disk_mb`
        (root): each node's data directory is a tmpfs of that size (`Node.fill_disk`).
        `spares`: that many more nodes, made ready (names, ports, namespace, disk) but not
        started nor in `nodes`/`names`: `add_spare` joins one, `forget_spare` takes it out."""
        self.root = tempfile.mkdtemp(prefix="warren-%s-" % prefix)
        self.secret_file = os.path.join(self.root, "secret")
        with open(self.secret_file, "w") as f:
            f.write("%s-cluster-secret\n" % prefix)
        self.net = None
        self.proxy = None
        total = size + spares
        if netns:
            self.net = NetnsNetwork(total)
            self.net.setup()
            advertise = [None] * total
            if proxy:
                self.net.add_proxy_address()
                self.proxy = FaultProxy(
                    self.net.proxy_ip(),
                    {i: (self.net.cluster_ip(i), 25672) for i in range(total)},
                    self.net.node_of_cluster_ip).start()
                advertise = ["%s:%d" % (self.net.proxy_ip(), self.proxy.port(i))
                             for i in range(total)]
            self.nodes = [Node(self.root, "%s%d@%s" % (prefix, i + 1, self.net.cluster_ip(i)),
                               self.secret_file, extra, netns=self.net.namespaces[i],
                               host=self.net.client_ip(i), cluster_host=self.net.cluster_ip(i),
                               advertise=advertise[i])
                          for i in range(total)]
        else:
            self.nodes = [Node(self.root, "%s%d@127.0.0.1" % (prefix, i + 1), self.secret_file,
                               extra) for i in range(total)]
        # Every node ever made, in network order (the proxy's and the namespaces' index).
        self.all_nodes = list(self.nodes)
        self.nodes, self.spares = self.nodes[:size], self.nodes[size:]
        self.names = [n.name for n in self.nodes]
        if disk_mb:
            for node in self.all_nodes:
                node.mount_disk(disk_mb)

    def peers_of(self, node):
        return [p for p in self.nodes if p is not node]

    def node(self, name):
        return next(n for n in self.all_nodes if n.name == name)

    def start(self, timeout=90):
        """Starts every node and waits (generously: debug builds on a loaded machine) until
        they agree on the membership and a leader; returns the leader's name."""
        for node in self.nodes:
            node.start(self.peers_of(node))
        return self.wait_agreed(timeout=timeout)

    def wait_agreed(self, nodes=None, timeout=60, caught_up=False, names=None):
        """Waits until `nodes` (default: all) list every member (`names`, default: every
        node's) and name one leader (and, with `caught_up`, the leader sees every member
        running and at lag 0); the leader's name."""
        nodes = nodes or self.nodes
        names = names or self.names
        check = all_up_and_caught_up if caught_up else agreed
        return eventually("%s agreeing on %s" % ([n.name for n in nodes], names),
                          lambda: check(nodes, names), timeout=timeout)

    def queue_leader_caught_up(self, queue, lag):
        """The node leading quorum queue `queue` once every node names it with every node as a
        member, and it sees every member online and at most `lag` entries behind; else None."""
        name = agreed_queue_leader(self.nodes, queue, members=self.names)
        if name is None:
            return None
        raft = (self.node(name).queue(queue) or {}).get("raft") or {}
        members = raft.get("members") or []
        ok = (raft.get("state") == "leader" and len(members) == len(self.names)
              and all(m.get("online") and (m.get("lag") or 0) <= lag for m in members))
        return self.node(name) if ok else None

    def add_spare(self, timeout=120):
        """Starts a spare node seeded with the members, and waits until it and every member
        list it as one more member: a node added to a running cluster. Returns it."""
        spare = self.spares[0]
        spare.start(self.nodes)
        self.wait_agreed(self.nodes + [spare], names=self.names + [spare.name],
                         timeout=timeout)
        return spare

    def forget_spare(self, spare, via, timeout=120):
        """Stops the added `spare`, forgets it through member `via` (`forget_cluster_node`,
        retried while the members still see it connected) and waits until the members list
        only themselves; its data is wiped, so that it can be added again as a new node."""
        spare.stop()
        eventually("%s forgetting %s" % (via.name, spare.name), lambda: via.forget(spare.name),
                   timeout=timeout, interval_s=1)
        spare.wipe()
        self.wait_agreed(timeout=timeout)

    def wipe_and_rejoin(self, node, via, hold_s, timeout=120):
        """`node` replaced by a fresh machine under its old name: killed, its data wiped,
        started again (the members refuse it: a new incarnation), forgotten through `via` after
        `hold_s`, after which it joins as a new node."""
        node.kill()
        node.wipe()
        node.start(self.peers_of(node))
        time.sleep(hold_s)
        eventually("%s forgetting %s" % (via.name, node.name), lambda: via.forget(node.name),
                   timeout=timeout, interval_s=1)
        self.wait_agreed(timeout=timeout)

    def restart(self, node, wipe=False):
        """Stops (cleanly, unless already down) and starts `node` again; with `wipe`, its data
        directory is removed in between."""
        node.stop()
        if wipe:
            node.wipe()
        node.start(self.peers_of(node))

    def partition(self, node):
        assert self.net, "partitions need netns=True"
        self.net.partition(self.all_nodes.index(node))

    def heal(self, node):
        assert self.net, "partitions need netns=True"
        self.net.heal(self.all_nodes.index(node))

    def cut(self, a, b, one_way=False):
        """Nothing crosses between nodes a and b (with `one_way`, from a to b only); the
        other pairs are left alone (`FaultProxy.cut`)."""
        assert self.proxy, "faults between two nodes need proxy=True"
        self.proxy.cut(self.all_nodes.index(a), self.all_nodes.index(b), one_way=one_way)

    def heal_pair(self, a, b):
        self.proxy.heal(self.all_nodes.index(a), self.all_nodes.index(b))

    def delay(self, a, b, ms):
        """What crosses between a and b waits `ms` (0: no more delay)."""
        self.proxy.delay(self.all_nodes.index(a), self.all_nodes.index(b), ms)

    def reset(self, node):
        """Every cluster connection of `node` gets a TCP reset."""
        self.proxy.reset(self.all_nodes.index(node))

    def close(self, keep_logs=False):
        """Stops every node and removes the network and the data, except the nodes' logs
        and data when `keep_logs` (or WARREN_KEEP_CLUSTER_LOGS) is set: a failed run's
        evidence."""
        for node in self.all_nodes:
            try:
                node.stop()
            except (OSError, subprocess.SubprocessError):
                pass
        keep = keep_logs or os.environ.get("WARREN_KEEP_CLUSTER_LOGS") is not None
        for node in self.all_nodes:
            if keep and getattr(node, "disk_mounted", False):
                # A node's own disk goes with its image: its data is copied out first.
                with contextlib.suppress(OSError, shutil.Error):
                    shutil.copytree(node.data_dir, node.data_dir + ".kept", dirs_exist_ok=True)
            node.unmount_disk()
        if self.proxy is not None:
            self.proxy.close()
        if self.net is not None:
            self.net.teardown()
        self.discard_root(keep_logs)

    def discard_root(self, keep_logs):
        if not keep_logs and os.environ.get("WARREN_KEEP_CLUSTER_LOGS") is None:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            print("cluster logs kept in %s" % self.root, flush=True)


@contextlib.contextmanager
def started_cluster(prefix, size=3, netns=False, extra=(), timeout=90):
    """A `Cluster(prefix, size, netns, extra)` whose nodes agree on one membership and leader
    (waited for generously: debug builds forming on a loaded 2-core CI machine), closed when
    the block ends however it ends: every cluster test's fixture. Node names are `PREFIXi@…`;
    each test keeps its own prefix (formation once stalled with some names)."""
    cluster = _formed_cluster(prefix, size, netns, extra, timeout)
    try:
        yield cluster
    finally:
        cluster.close()


def _formed_cluster(prefix, size, netns, extra, timeout, tries=3):
    """A started `Cluster`. A loopback node whose port another process took between
    `free_port` and its bind (the suites run beside each other) exits at once: the whole
    cluster is then made again on fresh ports, since every node was seeded with the old
    address."""
    for attempt in range(tries):
        cluster = Cluster(prefix, size=size, netns=netns, extra=extra)
        try:
            cluster.start(timeout=timeout)
            return cluster
        except NodeExited as e:
            cluster.close()
            if netns or not e.port_taken or attempt == tries - 1:
                raise
            print("a port was taken before its node bound it; the cluster starts again: %s" % e)
        except BaseException:
            cluster.close()
            raise

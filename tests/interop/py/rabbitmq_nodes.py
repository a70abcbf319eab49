"""RabbitMQ nodes (Debian's rabbitmq-server package, 3.10 here) as a cluster of real processes,
each in its own network namespace, driven through the same interface as `cluster_nodes.Cluster`
so that tools/jepsen.py runs one fault schedule against RabbitMQ beside Warren.

Each node is `rabbit@<its cluster address>` (Erlang long names), with its own epmd in its
namespace; the three form one cluster at start through classic config peer discovery (one
configuration listing every node, as Warren's nodes are given one peer list). A partition takes
the node's bridge-side veth down as for Warren's nodes. What RabbitMQ offers no seam for here is
left out: the Erlang distribution is not proxied (its peers find each other's ports through
epmd), so the faults between two nodes that cross Warren's fault proxy do not run against it.

Where RabbitMQ 3.10 asks the operator for a step Warren takes by itself, the driver takes it as
an operator would, and says so: a quorum queue does not grow back onto a node that rejoined
after being forgotten (continuous membership reconciliation came in 3.13), so after a
wipe-and-rejoin the driver runs `rabbitmq-queues grow`.

Runs as root (namespaces), the nodes too (their Erlang cookie is root's)."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from cluster_nodes import Cluster, NetnsNetwork, Node, eventually

RABBITMQ_BIN = "/usr/lib/rabbitmq/bin"
USER, PASSWORD = "chaos", "chaos-pw"


def rabbitmq_unavailable():
    """Why RabbitMQ nodes cannot run here (None when they can)."""
    if not os.path.exists(os.path.join(RABBITMQ_BIN, "rabbitmq-server")):
        return "no RabbitMQ (Debian's rabbitmq-server package: ../shared/tools/rabbitmq.sh " \
               "installs it)"
    return None


class RabbitNode(Node):
    """One RabbitMQ node in network namespace `netns`: AMQP on 5672 at `host` (its client
    link), distribution on 25672 at `cluster_host`. Inherits the process and disk handling of
    a Warren `Node` (kill, pause, stop, disks); answers its status with rabbitmqctl."""

    def __init__(self, root, netns, host, cluster_host, seeds):
        super().__init__(root, "rabbit@%s" % cluster_host, None, netns=netns, host=host,
                         cluster_host=cluster_host)
        self.seeds = seeds
        self.base = self.data_dir

    def _env(self):
        env = dict(os.environ, HOME="/root", RABBITMQ_NODENAME=self.name,
                   RABBITMQ_USE_LONGNAME="true", RABBITMQ_NODE_PORT="5672",
                   RABBITMQ_DIST_PORT="25672",
                   RABBITMQ_MNESIA_BASE=os.path.join(self.base, "db"),
                   RABBITMQ_LOG_BASE=os.path.join(self.base, "log"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(self.base, "enabled_plugins"),
                   RABBITMQ_CONFIG_FILE=os.path.join(self.base, "rabbitmq.conf"),
                   ERL_CRASH_DUMP=os.path.join(self.base, "erl_crash.dump"))
        return env

    def _write_config(self):
        os.makedirs(os.path.join(self.base, "log"), exist_ok=True)
        with open(os.path.join(self.base, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        lines = ["loopback_users = none", "default_user = %s" % USER,
                 "default_pass = %s" % PASSWORD, "log.console = true",
                 "log.file = false",
                 "cluster_formation.peer_discovery_backend = classic_config"]
        lines += ["cluster_formation.classic_config.nodes.%d = %s" % (i + 1, seed)
                  for i, seed in enumerate(self.seeds)]
        with open(os.path.join(self.base, "rabbitmq.conf"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def command(self, peers):
        return ["ip", "netns", "exec", self.netns, os.path.join(RABBITMQ_BIN, "rabbitmq-server")]

    def start(self, peers, wait=True):
        """Starts the node (it joins the nodes its configuration lists, or rejoins its
        cluster); waits until it has booted."""
        assert not self.running(), "%s is already running" % self.name
        self._write_config()
        with open(self.log_path, "a") as log:
            log.write("\n==== start %s\n" % time.strftime("%H:%M:%S"))
            log.flush()
            self.proc = subprocess.Popen(self.command(peers), stdout=log,
                                         stderr=subprocess.STDOUT, env=self._env(),
                                         start_new_session=True)
        self.paused = False
        if wait:
            eventually("%s booted" % self.name, self._booted, timeout=120, interval_s=1)

    def _booted(self):
        if self.proc.poll() is not None:
            raise AssertionError("%s exited (%s), see %s" % (self.name, self.proc.returncode,
                                                            self.log_path))
        return self.rabbitmqctl("await_startup", "--timeout", "5", timeout=20).returncode == 0

    def _beam_pid(self):
        """The Erlang VM's pid: `rabbitmq-server` is a script that runs it as a child."""
        answer = subprocess.run(["pgrep", "-s", str(self.proc.pid), "beam.smp"],
                                capture_output=True, text=True)
        pids = answer.stdout.split()
        return int(pids[0]) if pids else None

    def _signal(self, sig):
        pid = self._beam_pid()
        if pid is not None:
            os.kill(pid, sig)

    def kill(self):
        self._signal(signal.SIGKILL)
        # The script and the VM's helpers (erl_child_setup) end with it.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        self.paused = False

    def pause(self):
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self._signal(signal.SIGCONT)
        self.paused = False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.rabbitmqctl("stop", timeout=60)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        self.paused = False

    def wipe(self):
        assert not self.running(), "wipe a stopped node"
        shutil.rmtree(os.path.join(self.base, "db"), ignore_errors=True)

    def rabbitmqctl(self, *args, tool="rabbitmqctl", timeout=60):
        """A RabbitMQ CLI tool run inside the node's namespace, against this node."""
        return subprocess.run(["ip", "netns", "exec", self.netns,
                               os.path.join(RABBITMQ_BIN, tool), "-n", self.name, "-l", *args],
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, HOME="/root"))

    def forget(self, name):
        """`rabbitmqctl forget_cluster_node NAME` through this node; whether it was done."""
        return self.rabbitmqctl("forget_cluster_node", name).returncode == 0

    def running_nodes(self):
        answer = self.rabbitmqctl("cluster_status", "--formatter", "json", timeout=30)
        if answer.returncode != 0:
            return None
        return sorted(json.loads(answer.stdout).get("running_nodes") or [])

    def queue(self, name, vhost="/"):
        """Quorum queue `name` as this node sees its members (`rabbitmq-queues
        quorum_status`), in the shape of Warren's HTTP API object: `leader`, `members`,
        `online` (leader or follower), and `lag` (each member's log index behind the
        leader's). (`list_queues` is not used: in a namespace the other nodes cannot call the
        CLI back, and it never returns.)"""
        answer = self.rabbitmqctl("quorum_status", "-p", vhost, name, "--formatter", "json",
                                  tool="rabbitmq-queues", timeout=30)
        if answer.returncode != 0:
            return None
        rows = json.loads(answer.stdout or "[]")
        leaders = [r["Node Name"] for r in rows if r.get("Raft State") == "leader"]
        top = max((r.get("Log Index") for r in rows if isinstance(r.get("Log Index"), int)),
                  default=0)
        return {"leader": leaders[0] if len(leaders) == 1 else None,
                "members": [r["Node Name"] for r in rows],
                "online": [r["Node Name"] for r in rows
                           if r.get("Raft State") in ("leader", "follower")],
                "lag": {r["Node Name"]: top - r["Log Index"] for r in rows
                        if isinstance(r.get("Log Index"), int)}}


class RabbitCluster(Cluster):
    """`size` RabbitMQ nodes in network namespaces (and `spares` more, made ready but not
    started): a `Cluster` whose start, agreement, joining and queue views are RabbitMQ's
    (partitions, spares forgotten, node lookup are the `Cluster`'s own)."""

    # Each look at a RabbitMQ node is a CLI call that starts an Erlang VM (a second or two
    # on a quiet machine, tens of seconds on a loaded one): more patience for the same views.
    heal_timeout_s = 300

    def __init__(self, size=3, spares=0, disk_mb=None):
        self.root = tempfile.mkdtemp(prefix="rabbitmq-jepsen-")
        self.net = NetnsNetwork(size + spares)
        self.net.setup()
        seeds = ["rabbit@%s" % self.net.cluster_ip(i) for i in range(size)]
        self.all_nodes = [RabbitNode(self.root, self.net.namespaces[i], self.net.client_ip(i),
                                     self.net.cluster_ip(i), seeds)
                          for i in range(size + spares)]
        self.nodes, self.spares = self.all_nodes[:size], self.all_nodes[size:]
        self.names = [n.name for n in self.nodes]
        self.proxy = None
        if disk_mb:
            for node in self.all_nodes:
                node.mount_disk(disk_mb)

    def start(self, timeout=120):
        for node in self.nodes:
            node.start(None, wait=False)
        for node in self.nodes:
            eventually("%s booted" % node.name, node._booted, timeout=timeout, interval_s=1)
        return self.wait_agreed(timeout=timeout)

    def wait_agreed(self, nodes=None, timeout=60, names=None):
        """Waits until every node in `nodes` (default: all) runs with every one of `names`
        (default: every node's) in its cluster."""
        nodes = nodes or self.nodes
        names = sorted(names or self.names)
        eventually("%s running together" % names,
                   lambda: all(n.running_nodes() == names for n in nodes),
                   timeout=timeout, interval_s=1)
        return names[0]

    def add_spare(self, timeout=120):
        """A spare node started and joined to the running cluster (`join_cluster`)."""
        spare = self.spares[0]
        spare.start(None)
        for step in (("stop_app",), ("join_cluster", self.nodes[0].name), ("start_app",)):
            answer = spare.rabbitmqctl(*step, timeout=120)
            assert answer.returncode == 0, (step, answer.stdout, answer.stderr)
        self.wait_agreed(self.nodes + [spare], names=self.names + [spare.name],
                         timeout=timeout)
        return spare

    def wipe_and_rejoin(self, node, via, hold_s, timeout=120):
        """Killed, wiped, forgotten through `via`, started again (it joins through its
        configuration as a new node), then `rabbitmq-queues grow` onto it (RabbitMQ 3.10 does
        not grow quorum queues by itself)."""
        node.kill()
        node.wipe()
        time.sleep(hold_s)
        eventually("%s forgetting %s" % (via.name, node.name), lambda: via.forget(node.name),
                   timeout=timeout, interval_s=1)
        node.start(None)
        self.wait_agreed(timeout=timeout)
        grown = via.rabbitmqctl("grow", node.name, "all", tool="rabbitmq-queues", timeout=120)
        assert grown.returncode == 0, grown.stdout + grown.stderr

    def queue_leader_caught_up(self, queue, lag):
        """The node leading `queue` once every running node names the same leader, every
        member is online and none is more than `lag` entries behind; None until then."""
        views = [n.queue(queue) for n in self.nodes]
        if any(v is None for v in views):
            return None
        leaders = {v.get("leader") for v in views}
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        view = views[0]
        if sorted(view["members"]) != sorted(self.names) or \
                sorted(view["online"]) != sorted(self.names) or \
                any(behind > lag for behind in view["lag"].values()):
            return None
        return self.node(leader) if leader in self.names else None

    def close(self, keep_logs=False):
        for node in self.all_nodes:
            if node.running():
                try:
                    node.kill()
                except (OSError, subprocess.SubprocessError):
                    pass
        # epmd daemons live on in the namespaces: end everything there.
        for ns in self.net.namespaces:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for node in self.all_nodes:
            node.unmount_disk()
        self.net.teardown()
        self.discard_root(keep_logs)

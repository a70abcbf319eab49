"""A definitions workload for cluster chaos tests: it keeps declaring and deleting exchanges,
queues, bindings, users and vhosts through whichever nodes it is given, alternating AMQP (pika)
and the HTTP API, and records what became of every change:

- acknowledged: the broker said done (declare-ok, 2xx) — it must be on every node afterwards;
- refused: the client got no acknowledgement from a node cut off from the majority — it must
  never appear;
- uncertain: the node failed while answering (connection reset, timeout) — either outcome is
  fine, but every node must agree on it.

`snapshot(node)` reads one node's definitions through its HTTP API; `check(nodes)` compares
every node's with the record: missing (acknowledged but absent), unexpected (present but never
acknowledged, or refused, or acknowledged deleted) and whether the nodes agree with each other."""
import json
import threading
import time
import urllib.parse

import pika
import pika.exceptions
import requests

# Errors a client sees from a node that is down, frozen, cut off or failing over.
CLIENT_ERRORS = (pika.exceptions.AMQPError, requests.RequestException, OSError,
                 json.JSONDecodeError)

PRESENT, ABSENT, UNCERTAIN, REFUSED = "present", "absent", "uncertain", "refused"
KINDS = ("exchange", "queue", "binding", "user", "vhost")
# Bindings bind the workload's anchor queue to this exchange, each with its own routing key.
BINDING_EXCHANGE = "amq.topic"


def quote(name):
    return urllib.parse.quote(name, safe="")


class Rejected(Exception):
    """A change the broker answered with an error status (not a transport failure)."""


class DefinitionsWorkload:
    """Changes with names starting `prefix`; `record[(kind, name)]` is the change's fate."""

    def __init__(self, prefix, amqp_timeout_s=45, http_timeout_s=45):
        self.prefix = prefix
        self.anchor = prefix + "anchor"
        self.record = {}
        self.sequence = 0
        self.acknowledged = 0
        self.retries = 0
        self.errors = []
        self.amqp_timeout_s = amqp_timeout_s
        self.http_timeout_s = http_timeout_s
        # Refused attempts may run in a thread beside the majority's changes.
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ changes

    def _amqp(self, node, action):
        params = pika.URLParameters(node.amqp_url)
        params.socket_timeout = 5
        params.blocked_connection_timeout = self.amqp_timeout_s
        params.stack_timeout = self.amqp_timeout_s
        params.connection_attempts = 1
        connection = pika.BlockingConnection(params)
        try:
            # A change the node cannot commit is answered with an error once its own deadline
            # passes (30 s): the call does not hang for ever.
            action(connection.channel())
        finally:
            try:
                connection.close()
            except CLIENT_ERRORS:
                pass

    def _http(self, node, method, path, timeout=None, **kwargs):
        response = node.request(method, path, timeout=timeout or self.http_timeout_s, **kwargs)
        if response.status_code == 404 and method == "DELETE":
            return  # already gone: an earlier, unacknowledged attempt did it
        if response.status_code >= 300:
            raise Rejected("%s %s: %d %s" % (method, path, response.status_code,
                                             response.text[:300]))

    def _apply(self, node, kind, name, create, via, timeout=None):
        """Carries out one change on `node` (raises on failure)."""
        if kind == "exchange":
            if via == "amqp":
                self._amqp(node, (lambda ch: ch.exchange_declare(name, "direct", durable=True))
                           if create else (lambda ch: ch.exchange_delete(name)))
            elif create:
                self._http(node, "PUT", "/api/exchanges/%2F/" + quote(name), timeout,
                           json={"type": "direct", "durable": True})
            else:
                self._http(node, "DELETE", "/api/exchanges/%2F/" + quote(name), timeout)
        elif kind == "queue":
            if via == "amqp":
                self._amqp(node, (lambda ch: ch.queue_declare(name, durable=True))
                           if create else (lambda ch: ch.queue_delete(name)))
            elif create:
                self._http(node, "PUT", "/api/queues/%2F/" + quote(name), timeout,
                           json={"durable": True})
            else:
                self._http(node, "DELETE", "/api/queues/%2F/" + quote(name), timeout)
        elif kind == "binding":
            path = "/api/bindings/%%2F/e/%s/q/%s" % (quote(BINDING_EXCHANGE), quote(self.anchor))
            if via == "amqp":
                self._amqp(node, (lambda ch: ch.queue_bind(self.anchor, BINDING_EXCHANGE, name))
                           if create else
                           (lambda ch: ch.queue_unbind(self.anchor, BINDING_EXCHANGE, name)))
            elif create:
                self._http(node, "POST", path, timeout, json={"routing_key": name})
            else:
                self._http(node, "DELETE", path + "/" + quote(name), timeout)
        elif kind == "user":
            if create:
                self._http(node, "PUT", "/api/users/" + quote(name), timeout,
                           json={"password": "pw-" + name, "tags": ""})
            else:
                self._http(node, "DELETE", "/api/users/" + quote(name), timeout)
        elif kind == "vhost":
            self._http(node, "PUT" if create else "DELETE", "/api/vhosts/" + quote(name),
                       timeout)

    def setup(self, node):
        """Declares the anchor queue the bindings go to (acknowledged, never deleted)."""
        self._apply(node, "queue", self.anchor, True, "http")

    def next_change(self):
        """The next change (kind, name, create, its number): mostly a new object of the next
        kind, every third a deletion of the oldest acknowledged object of that kind (so deletes
        are exercised as much as creates). Even numbers go through AMQP where the kind can."""
        with self.lock:
            self.sequence += 1
            sequence = self.sequence
        kind = KINDS[sequence % len(KINDS)]
        if sequence % 3 == 0:
            present = [key for key, state in self.record.items()
                       if state == PRESENT and key[0] == kind]
            if present:
                return kind, present[0][1], False, sequence
        return kind, "%s%s%d" % (self.prefix, kind[0], sequence), True, sequence

    def change(self, nodes, attempts=6, pause_s=1.0):
        """Makes the next change through `nodes` (one by the change's number, then the next on
        failure), up to `attempts` times: the change is acknowledged, or left uncertain.
        Returns its key."""
        kind, name, create, sequence = self.next_change()
        via = "amqp" if sequence % 2 == 0 and kind in ("exchange", "queue", "binding") else "http"
        for attempt in range(attempts):
            node = nodes[(sequence + attempt) % len(nodes)]
            try:
                self._apply(node, kind, name, create, via)
            except (Rejected, *CLIENT_ERRORS) as e:
                self.errors.append("%s %s %s on %s via %s: %s" % (
                    "create" if create else "delete", kind, name, node.name, via, e))
                self.record[(kind, name)] = UNCERTAIN
                if attempt + 1 < attempts:
                    self.retries += 1
                    time.sleep(pause_s)
                continue
            self.record[(kind, name)] = PRESENT if create else ABSENT
            self.acknowledged += 1
            break
        return kind, name

    def attempt_refused(self, node, via, client_timeout_s=None):
        """A change through `node`, which is cut off from the majority, via "amqp" or "http"
        (waiting at most `client_timeout_s` for the HTTP answer): it must not be acknowledged.
        Returns (key, the error the client saw)."""
        with self.lock:
            self.sequence += 1
            sequence = self.sequence
        kind = "queue" if via == "amqp" else KINDS[sequence % len(KINDS)]
        name = "%srefused%d" % (self.prefix, sequence)
        try:
            self._apply(node, kind, name, True, via, timeout=client_timeout_s)
        except (Rejected, *CLIENT_ERRORS) as e:
            self.record[(kind, name)] = REFUSED
            return (kind, name), "%s: %s" % (type(e).__name__, e)
        self.record[(kind, name)] = PRESENT
        self.acknowledged += 1
        raise AssertionError("%s %s was acknowledged by %s, a node cut off from the majority"
                             % (kind, name, node.name))

    # ------------------------------------------------------------------ checks

    def snapshot(self, node):
        """The workload's definitions as `node` has them: {kind: set(names)}."""
        def names(path, key="name"):
            return {item[key] for item in node.get(path, timeout=10)
                    if str(item[key]).startswith(self.prefix)}
        bindings = node.get("/api/bindings/%%2F/e/%s/q/%s" % (
            quote(BINDING_EXCHANGE), quote(self.anchor)), timeout=10)
        return {
            "exchange": names("/api/exchanges/%2F"),
            "queue": names("/api/queues/%2F") - {self.anchor},
            "binding": {b["routing_key"] for b in bindings
                        if b["routing_key"].startswith(self.prefix)},
            "user": names("/api/users"),
            "vhost": names("/api/vhosts"),
        }

    def differences(self, snapshot):
        """(missing, unexpected) of one node's snapshot against the record."""
        missing, unexpected = [], []
        for (kind, name), state in self.record.items():
            there = name in snapshot[kind]
            if state == PRESENT and not there:
                missing.append((kind, name))
            if state in (ABSENT, REFUSED) and there:
                unexpected.append((kind, name, state))
        for kind, names in snapshot.items():
            for name in names:
                if (kind, name) not in self.record:
                    unexpected.append((kind, name, "never made"))
        return missing, unexpected

    def check(self, nodes):
        """One check of every node: None when all agree and none misses or has more than the
        record says, else what is wrong."""
        snapshots, problems = {}, {}
        for node in nodes:
            # A node that cannot answer (down, or missing the anchor queue the bindings are
            # read from) is a problem to report, not the end of the check.
            try:
                snapshots[node.name] = self.snapshot(node)
            except (requests.RequestException, ValueError) as e:
                problems[node.name] = {"unreadable": repr(e)}
        for name, snapshot in snapshots.items():
            missing, unexpected = self.differences(snapshot)
            if missing or unexpected:
                problems[name] = {"missing": missing, "unexpected": unexpected}
        first = next(iter(snapshots.values()), None)
        if any(s != first for s in snapshots.values()):
            problems["disagree"] = {
                name: {kind: sorted(names ^ first[kind]) for kind, names in s.items()
                       if names != first[kind]}
                for name, s in snapshots.items()}
        return problems or None

    def summary(self):
        states = {}
        for state in self.record.values():
            states[state] = states.get(state, 0) + 1
        return {"objects": len(self.record), "acknowledged_changes": self.acknowledged,
                "retries": self.retries, "states": states}


class ContinuousChanges:
    """Runs `workload.change(nodes)` over and over in a thread until stopped, so failures hit
    changes in flight (a change on a node that dies is retried on the next one)."""

    def __init__(self, workload, nodes, pause_s=0.05):
        self.workload = workload
        self.nodes = list(nodes)
        self.pause_s = pause_s
        self.running = threading.Event()
        self.thread = None

    def __enter__(self):
        self.running.set()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while self.running.is_set():
            self.workload.change(self.nodes, pause_s=0.5)
            time.sleep(self.pause_s)

    def __exit__(self, *_):
        self.running.clear()
        # A change in flight finishes within its attempts' timeouts.
        self.thread.join(6 * self.workload.http_timeout_s)
        assert not self.thread.is_alive(), "the workload's thread did not stop"


"""Prometheus endpoint (15692): the scrape parses, names/types/HELP are RabbitMQ's, RabbitMQ's
own Grafana dashboard (RabbitMQ-Overview) finds every metric it queries, and the numbers move
with what a pika client does.

Reads env WARREN_PROMETHEUS_URL (e.g. http://127.0.0.1:15692); skipped without it. Passes
against RabbitMQ 3.10 with its rabbitmq_prometheus plugin too (point WARREN_PROMETHEUS_URL at
it), except what 3.10 does not have: the message-size histogram (4.x) and Warren's own
warren_store_* families. RabbitMQ refreshes per-object metrics every 5 s, hence the polling.
"""
import json
import os
import re
import time

import pika
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import connect, uname

MGMT_URL = os.environ.get("WARREN_MGMT_URL")
from own_broker import Broker, free_port, needs_warren_bin

PROM_URL = os.environ.get("WARREN_PROMETHEUS_URL", "").rstrip("/")
pytestmark = [
    pytest.mark.skipif(not PROM_URL, reason="WARREN_PROMETHEUS_URL not set"),
    pytest.mark.timeout(90),
]

GRAFANA = os.path.join(os.path.dirname(__file__), "..", "grafana")
DASHBOARD = os.path.join(GRAFANA, "RabbitMQ-Overview.json")
# RabbitMQ's own dashboards, current and as 3.10.8 shipped them (tests/interop/grafana).
OVERVIEWS = ("RabbitMQ-Overview.json", "RabbitMQ-Overview-3.10.8.json")
RAFT_DASHBOARDS = ("RabbitMQ-Quorum-Queues-Raft.json", "RabbitMQ-Quorum-Queues-Raft-3.10.8.json")
# Names only RabbitMQ 4 serves (its Ra counters): the current Raft dashboard queries them
# beside 3.x's, so a 3.x node is not asked for them.
RABBITMQ_4_RAFT = {"rabbitmq_raft_term", "rabbitmq_raft_commit_index", "rabbitmq_raft_snapshot_index",
                   "rabbitmq_raft_last_written_index", "rabbitmq_raft_commit_latency_seconds"}

# Type and HELP of each family, as RabbitMQ 3.10.8's rabbitmq_prometheus serves them
# (copied from a live node's /metrics).
RABBITMQ_FAMILIES = {
    "rabbitmq_alarms_file_descriptor_limit": ("untyped", "is 1 if file descriptor limit alarm is in effect"),
    "rabbitmq_alarms_free_disk_space_watermark": ("untyped", "is 1 if free disk space watermark alarm is in effect"),
    "rabbitmq_alarms_memory_used_watermark": ("untyped", "is 1 if VM memory watermark alarm is in effect"),
    "rabbitmq_connections_opened_total": ("counter", "Total number of connections opened"),
    "rabbitmq_connections_closed_total": ("counter", "Total number of connections closed or terminated"),
    "rabbitmq_channels_opened_total": ("counter", "Total number of channels opened"),
    "rabbitmq_channels_closed_total": ("counter", "Total number of channels closed"),
    "rabbitmq_queues_declared_total": ("counter", "Total number of queues declared"),
    "rabbitmq_queues_created_total": ("counter", "Total number of queues created"),
    "rabbitmq_queues_deleted_total": ("counter", "Total number of queues deleted"),
    "rabbitmq_process_open_fds": ("gauge", "Open file descriptors"),
    "rabbitmq_auth_attempts_total": ("counter", "Total number of authentication attempts"),
    "rabbitmq_auth_attempts_succeeded_total": ("counter", "Total number of successful authentication attempts"),
    "rabbitmq_auth_attempts_failed_total": ("counter", "Total number of failed authentication attempts"),
    # The 3.10 Overview dashboard's "TCP sockets available" panel reads these two.
    "rabbitmq_process_open_tcp_sockets": ("gauge", "Open TCP sockets"),
    "rabbitmq_process_max_tcp_sockets": ("gauge", "Open TCP sockets limit"),
    "rabbitmq_process_resident_memory_bytes": ("gauge", "Memory used in bytes"),
    "rabbitmq_disk_space_available_bytes": ("gauge", "Disk space available in bytes"),
    "rabbitmq_process_max_fds": ("gauge", "Open file descriptors limit"),
    "rabbitmq_resident_memory_limit_bytes": ("gauge", "Memory high watermark in bytes"),
    "rabbitmq_disk_space_available_limit_bytes": ("gauge", "Free disk space low watermark in bytes"),
    "rabbitmq_erlang_uptime_seconds": ("gauge", "Node uptime"),
    "rabbitmq_queue_messages_ready": ("gauge", "Messages ready to be delivered to consumers"),
    "rabbitmq_queue_messages_unacked": ("gauge", "Messages delivered to consumers but not yet acknowledged"),
    "rabbitmq_queue_messages": ("gauge", "Sum of ready and unacknowledged messages - total queue depth"),
    "rabbitmq_queue_consumers": ("gauge", "Consumers on a queue"),
    "rabbitmq_queue_consumer_capacity": ("gauge", "Consumer capacity"),
    "rabbitmq_queue_consumer_utilisation": ("gauge", "Same as consumer capacity"),
    "rabbitmq_queue_messages_ready_ram": ("gauge", "Ready messages stored in memory"),
    "rabbitmq_queue_messages_unacked_ram": ("gauge", "Unacknowledged messages stored in memory"),
    "rabbitmq_queue_messages_ram": ("gauge", "Ready and unacknowledged messages stored in memory"),
    "rabbitmq_queue_messages_ready_bytes": ("gauge", "Size in bytes of ready messages"),
    "rabbitmq_queue_messages_paged_out": ("gauge", "Messages paged out to disk"),
    "rabbitmq_queue_messages_paged_out_bytes": ("gauge", "Size in bytes of messages paged out to disk"),
    "rabbitmq_channel_consumers": ("gauge", "Consumers on a channel"),
    "rabbitmq_channel_messages_unacked": ("gauge", "Delivered but not yet acknowledged messages"),
    "rabbitmq_channel_messages_unconfirmed": ("gauge", "Published but not yet confirmed messages"),
    "rabbitmq_consumer_prefetch": ("gauge", "Limit of unacknowledged messages for each consumer"),
    "rabbitmq_channel_messages_published_total": ("counter", "Total number of messages published into an exchange on a channel"),
    "rabbitmq_channel_messages_confirmed_total": ("counter", "Total number of messages published into an exchange and confirmed on the channel"),
    "rabbitmq_channel_messages_unroutable_returned_total": ("counter", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable"),
    "rabbitmq_channel_messages_unroutable_dropped_total": ("counter", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable"),
    "rabbitmq_channel_get_ack_total": ("counter", "Total number of messages fetched with basic.get in manual acknowledgement mode"),
    "rabbitmq_channel_get_total": ("counter", "Total number of messages fetched with basic.get in automatic acknowledgement mode"),
    "rabbitmq_channel_messages_delivered_ack_total": ("counter", "Total number of messages delivered to consumers in manual acknowledgement mode"),
    "rabbitmq_channel_messages_delivered_total": ("counter", "Total number of messages delivered to consumers in automatic acknowledgement mode"),
    "rabbitmq_channel_messages_redelivered_total": ("counter", "Total number of messages redelivered to consumers"),
    "rabbitmq_channel_messages_acked_total": ("counter", "Total number of messages acknowledged by consumers"),
    "rabbitmq_channel_get_empty_total": ("counter", "Total number of times basic.get operations fetched no message"),
    "rabbitmq_connection_incoming_bytes_total": ("counter", "Total number of bytes received on a connection"),
    "rabbitmq_connection_outgoing_bytes_total": ("counter", "Total number of bytes sent on a connection"),
    "rabbitmq_connection_incoming_packets_total": ("counter", "Total number of packets received on a connection"),
    "rabbitmq_connection_outgoing_packets_total": ("counter", "Total number of packets sent on a connection"),
    "rabbitmq_connection_channels": ("gauge", "Channels on a connection"),
    "rabbitmq_connections": ("gauge", "Connections currently open"),
    "rabbitmq_channels": ("gauge", "Channels currently open"),
    "rabbitmq_consumers": ("gauge", "Consumers currently connected"),
    "rabbitmq_queues": ("gauge", "Queues available"),
    "rabbitmq_build_info": ("untyped", "RabbitMQ & Erlang/OTP version info"),
    "rabbitmq_identity_info": ("untyped", "RabbitMQ node & cluster identity info"),
    "rabbitmq_global_consumers": ("gauge", "Current number of consumers"),
    "rabbitmq_global_messages_acknowledged_total": ("counter", "Total number of messages acknowledged by consumers"),
    "rabbitmq_global_messages_confirmed_total": ("counter", "Total number of messages confirmed to publishers"),
    "rabbitmq_global_messages_delivered_consume_auto_ack_total": ("counter", "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment"),
    "rabbitmq_global_messages_delivered_consume_manual_ack_total": ("counter", "Total number of messages delivered to consumers using basic.consume with manual acknowledgment"),
    "rabbitmq_global_messages_delivered_get_auto_ack_total": ("counter", "Total number of messages delivered to consumers using basic.get with automatic acknowledgment"),
    "rabbitmq_global_messages_delivered_get_manual_ack_total": ("counter", "Total number of messages delivered to consumers using basic.get with manual acknowledgment"),
    "rabbitmq_global_messages_delivered_total": ("counter", "Total number of messages delivered to consumers"),
    "rabbitmq_global_messages_get_empty_total": ("counter", "Total number of times basic.get operations fetched no message"),
    "rabbitmq_global_messages_received_confirm_total": ("counter", "Total number of messages received from publishers expecting confirmations"),
    "rabbitmq_global_messages_received_total": ("counter", "Total number of messages received from publishers"),
    "rabbitmq_global_messages_redelivered_total": ("counter", "Total number of messages redelivered to consumers"),
    "rabbitmq_global_messages_routed_total": ("counter", "Total number of messages routed to queues or streams"),
    "rabbitmq_global_messages_unroutable_dropped_total": ("counter", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable"),
    "rabbitmq_global_messages_unroutable_returned_total": ("counter", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable"),
    "rabbitmq_global_publishers": ("gauge", "Current number of publishers"),
    "rabbitmq_global_messages_dead_lettered_expired_total": ("counter", "Total number of messages dead-lettered due to message TTL exceeded"),
    "rabbitmq_global_messages_dead_lettered_maxlen_total": ("counter", "Total number of messages dead-lettered due to overflow drop-head or reject-publish-dlx"),
    "rabbitmq_global_messages_dead_lettered_rejected_total": ("counter", "Total number of messages dead-lettered due to basic.reject or basic.nack"),
    # ra_metrics: quorum queues' Raft groups (summed; present with 0 without any).
    "rabbitmq_raft_term_total": ("counter", "Current Raft term number"),
    "rabbitmq_raft_log_snapshot_index": ("gauge", "Raft log snapshot index"),
    "rabbitmq_raft_log_last_applied_index": ("gauge", "Raft log last applied index"),
    "rabbitmq_raft_log_commit_index": ("gauge", "Raft log commit index"),
    "rabbitmq_raft_log_last_written_index": ("gauge", "Raft log last written index"),
}

# Families RabbitMQ added after 3.10 (the Overview dashboard of today reads this one).
NEWER_THAN_3_10 = {"rabbitmq_message_size_bytes"}


class Scrape:
    """One scrape of an endpoint, checked by the prometheus_client text parser."""

    def __init__(self, path, base_url=None):
        r = requests.get((base_url or PROM_URL) + path, timeout=10)
        assert r.status_code == 200, (path, r.status_code, r.text[:200])
        assert r.headers["content-type"].startswith("text/plain"), r.headers
        self.text = r.text
        self.families = {}  # sample-family name as written in "# TYPE" -> (type, help)
        for line in self.text.splitlines():
            m = re.match(r"# (TYPE|HELP) (\S+) ?(.*)", line)
            if m:
                kind, name, rest = m.groups()
                entry = self.families.setdefault(name, {})
                assert kind not in entry, "family %s declared twice" % name
                entry[kind] = rest
        self.samples = []  # (name, labels, value)
        for family in text_string_to_metric_families(self.text):
            for s in family.samples:
                self.samples.append((s.name, s.labels, s.value))
        self.names = {name for name, _, _ in self.samples}

    def values(self, name, **labels):
        return [
            v for n, l, v in self.samples
            if n == name and all(l.get(k) == want for k, want in labels.items())
        ]

    def total(self, name, **labels):
        values = self.values(name, **labels)
        assert values, "no %s%s in the scrape" % (name, labels or "")
        return sum(values)

    def labelled(self, name):
        return [l for n, l, _ in self.samples if n == name]

    def build(self):
        (labels,) = self.labelled("rabbitmq_build_info")
        return labels


def is_warren(scrape):
    return scrape.build().get("product_name") == "Warren"


def rabbitmq_3_x(scrape):
    return not is_warren(scrape) and scrape.build()["rabbitmq_version"].startswith("3.")


def dashboard_metric_names(dashboard_file=DASHBOARD):
    """Every metric name a dashboard's PromQL reads."""
    with open(os.path.join(GRAFANA, dashboard_file)) as f:
        dashboard = json.load(f)
    exprs = []

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ("expr", "query", "definition") and isinstance(v, str):
                    exprs.append(v)
                else:
                    walk(v)
        elif isinstance(o, list):
            for x in o:
                walk(x)

    walk(dashboard)
    names = set()
    for expr in exprs:
        # Label lists and matchers name labels, not metrics: drop them first.
        expr = re.sub(r"\b(on|by|without|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
        expr = re.sub(r"\{[^}]*\}", " ", expr)
        expr = re.sub(r"label_values\(([^,)]*)(,[^)]*)?\)", r"\1", expr)
        names.update(re.findall(r"\b(rabbitmq_[a-z0-9_]+)\b", expr))
    return names


def wait_until(check, timeout=20.0, step=0.5):
    """Polls `check` (which asserts) until it passes; RabbitMQ updates some metrics every 5 s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(step)


def test_scrapes_parse_with_every_family_typed_once():
    for path in ("/metrics", "/metrics/per-object"):
        scrape = Scrape(path)
        assert scrape.samples, path
        for name, entry in scrape.families.items():
            assert set(entry) == {"TYPE", "HELP"}, (path, name, entry)
        declared = set(scrape.families)
        for line in scrape.text.splitlines():
            if line and not line.startswith("#"):
                name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert name in declared or base in declared, (path, line)


def test_names_types_and_help_are_rabbitmqs():
    scrape = Scrape("/metrics")
    for name, (kind, help_text) in RABBITMQ_FAMILIES.items():
        assert name in scrape.families, "no family %s" % name
        assert scrape.families[name] == {"TYPE": kind, "HELP": help_text}, name
    # Warren keeps its own store figures under its own prefix.
    if is_warren(scrape):
        for name in ("warren_store_fsyncs_total", "warren_store_bytes_written_total",
                     "warren_store_records_written_total"):
            assert scrape.families[name]["TYPE"] == "counter", name


@pytest.mark.parametrize("dashboard_file", OVERVIEWS)
def test_overview_dashboard_finds_every_metric_it_queries(dashboard_file):
    names = dashboard_metric_names(dashboard_file)
    assert len(names) >= 30, sorted(names)  # the extraction itself works
    for path in ("/metrics", "/metrics/per-object"):
        scrape = Scrape(path)
        # Prometheus scrapes /metrics; per-object families have no samples without objects.
        for name in sorted(names) if path == "/metrics" else []:
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            if family in NEWER_THAN_3_10 and rabbitmq_3_x(scrape):
                continue
            assert name in scrape.names, "%s: the dashboard queries %s" % (path, name)
        # Every panel joins with `* on(instance, job) group_left(rabbitmq_cluster,
        # rabbitmq_node) rabbitmq_identity_info`: one such series per target, with both labels;
        # the node table also takes rabbitmq_version from rabbitmq_build_info.
        (identity,) = scrape.labelled("rabbitmq_identity_info")
        assert identity["rabbitmq_node"] and identity["rabbitmq_cluster"], identity
        assert scrape.build()["rabbitmq_version"], scrape.build()
        if not rabbitmq_3_x(scrape):
            endpoint = "aggregated" if path == "/metrics" else "per-object"
            assert identity["rabbitmq_endpoint"] == endpoint, identity
        # The size buckets the dashboard selects by their exact `le` strings.
        if not rabbitmq_3_x(scrape):
            les = {l["le"] for l in scrape.labelled("rabbitmq_message_size_bytes_bucket")}
            for le in ("100.0", "1000.0", "10000.0", "100000.0", "1e+06", "1e+07", "5e+07",
                       "1e+08", "+Inf"):
                assert le in les, (le, les)


@pytest.mark.parametrize("dashboard_file", RAFT_DASHBOARDS)
def test_quorum_queues_raft_dashboard_finds_every_metric_it_queries(dashboard_file):
    """With a quorum queue that committed something, every metric the Quorum-Queues-Raft
    dashboard queries is scraped, per queue and aggregated, the commit latency included."""
    names = dashboard_metric_names(dashboard_file)
    assert {"rabbitmq_raft_log_commit_index", "rabbitmq_identity_info"} <= names, names
    q = uname("prom-raft")
    c = connect()
    try:
        ch = c.channel()
        ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish("", q, b"m%d" % i)

        def latency_reported():
            scrape = Scrape("/metrics/per-object")
            (latency,) = scrape.values("rabbitmq_raft_entry_commit_latency_seconds", queue=q)
            assert 0 < latency < 5, latency
            return scrape
        per_object = wait_until(latency_reported)
        for path, scrape in (("/metrics", Scrape("/metrics")), ("/metrics/per-object", per_object)):
            for name in sorted(names):
                if name in RABBITMQ_4_RAFT and rabbitmq_3_x(scrape):
                    continue
                assert name in scrape.names, "%s: the dashboard queries %s" % (path, name)
        if is_warren(per_object):
            (commit,) = per_object.values("rabbitmq_raft_commit_index", queue=q)
            assert commit >= 5
    finally:
        try:
            c.channel().queue_delete(q)
        finally:
            c.close()


def test_node_resources_are_reported():
    scrape = Scrape("/metrics")
    assert scrape.total("rabbitmq_process_resident_memory_bytes") > 1_000_000
    assert scrape.total("rabbitmq_resident_memory_limit_bytes") > 0
    assert 0 < scrape.total("rabbitmq_process_open_fds") < scrape.total("rabbitmq_process_max_fds")
    # This scrape's own connection and the AMQP listener at least.
    sockets = scrape.total("rabbitmq_process_open_tcp_sockets")
    assert 2 <= sockets < scrape.total("rabbitmq_process_max_tcp_sockets")
    free = scrape.total("rabbitmq_disk_space_available_bytes")
    assert free > scrape.total("rabbitmq_disk_space_available_limit_bytes") > 0
    for alarm in ("memory_used_watermark", "free_disk_space_watermark", "file_descriptor_limit"):
        assert scrape.total("rabbitmq_alarms_" + alarm) == 0, alarm
    assert scrape.total("rabbitmq_erlang_uptime_seconds") > 0


def test_queue_depth_per_object_and_aggregated():
    q = uname("prom")
    c = connect()
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare(q)
        for body in (b"one", b"two", b"three"):
            ch.basic_publish("", q, body)
        m, _, _ = ch.basic_get(q, auto_ack=False)
        assert m is not None

        def per_object_depth():
            scrape = Scrape("/metrics/per-object")
            assert scrape.values("rabbitmq_queue_messages_ready", vhost="/", queue=q) == [2]
            assert scrape.values("rabbitmq_queue_messages_unacked", vhost="/", queue=q) == [1]
            assert scrape.values("rabbitmq_queue_messages", vhost="/", queue=q) == [3]
            assert scrape.values("rabbitmq_queue_consumers", vhost="/", queue=q) == [0]
            for labels in scrape.labelled("rabbitmq_queue_messages_ready"):
                assert set(labels) == {"vhost", "queue"}, labels
            # The channel that holds the unacked message shows it.
            assert sum(scrape.values("rabbitmq_channel_messages_unacked")) >= 1
            assert all("channel" in l for l in scrape.labelled("rabbitmq_channel_messages_unacked"))

        wait_until(per_object_depth)
        aggregated = Scrape("/metrics")
        for name in ("rabbitmq_queue_messages_ready", "rabbitmq_queue_messages_unacked"):
            (labels,) = aggregated.labelled(name)
            assert labels == {}, (name, labels)
        assert aggregated.total("rabbitmq_queue_messages_ready") >= 2
        assert aggregated.total("rabbitmq_queues") >= 1
        assert aggregated.total("rabbitmq_connections") >= 1
        ch.queue_delete(q)
    finally:
        c.close()


def test_queue_bytes_persistent_messages_and_head_timestamp():
    """RabbitMQ's queue_metrics byte families, its persistent counts (persistent messages of
    a durable queue; a transient queue keeps none) and the head message's timestamp, per
    queue; the HTTP API shows the same figures."""
    durable, transient = uname("prom-bytes"), uname("prom-transient")
    c = connect()
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare(durable, durable=True)
        ch.queue_declare(transient)
        for q in (durable, transient):
            # 10 + 100 bytes persistent, 1000 transient; the head carries a timestamp.
            ch.basic_publish("", q, b"p" * 10, pika.BasicProperties(delivery_mode=2,
                                                                      timestamp=1700000000))
            ch.basic_publish("", q, b"q" * 100, pika.BasicProperties(delivery_mode=2))
            ch.basic_publish("", q, b"t" * 1000, pika.BasicProperties(delivery_mode=1))
        # The head goes to a consumer (unacknowledged): 10 bytes unacked.
        m, properties, _ = ch.basic_get(durable, auto_ack=False)
        assert m is not None and properties.timestamp == 1700000000
        ch2 = c.channel()
        ch2.basic_get(transient, auto_ack=False)

        def families():
            scrape = Scrape("/metrics/per-object")

            def one(name, q):
                (value,) = scrape.values(name, vhost="/", queue=q)
                return value
            assert one("rabbitmq_queue_messages_bytes", durable) == 1110
            assert one("rabbitmq_queue_messages_ready_bytes", durable) == 1100
            assert one("rabbitmq_queue_messages_unacked_bytes", durable) == 10
            assert one("rabbitmq_queue_messages_ram_bytes", durable) == 1110
            assert one("rabbitmq_queue_messages_persistent", durable) == 2
            assert one("rabbitmq_queue_messages_persistent_bytes", durable) == 110
            assert one("rabbitmq_queue_messages_persistent", transient) == 0
            # The head is now the 100-byte message, without a timestamp: no sample.
            assert scrape.values("rabbitmq_queue_head_message_timestamp", queue=durable) == []
            return scrape
        wait_until(families)
        if MGMT_URL:
            api = requests.get(MGMT_URL + "/api/queues/%2F/" + durable, auth=("guest", "guest"),
                               timeout=5).json()
            assert api["message_bytes"] == 1110 and api["messages_persistent"] == 2, api
            assert api["message_bytes_unacknowledged"] == 10, api
    finally:
        try:
            ch = c.channel()
            ch.queue_delete(durable)
            ch.queue_delete(transient)
        finally:
            c.close()


def test_the_head_message_timestamp_is_the_heads():
    q = uname("prom-head")
    c = connect()
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare(q)
        ch.basic_publish("", q, b"first", pika.BasicProperties(timestamp=1700000000))
        ch.basic_publish("", q, b"second", pika.BasicProperties(timestamp=1800000000))

        def head(expected):
            def check():
                values = Scrape("/metrics/per-object").values(
                    "rabbitmq_queue_head_message_timestamp", vhost="/", queue=q)
                assert values == expected, values
            return check
        wait_until(head([1700000000]))
        ch.basic_get(q, auto_ack=True)
        wait_until(head([1800000000]))
        ch.basic_get(q, auto_ack=True)
        wait_until(head([]))
    finally:
        try:
            c.channel().queue_delete(q)
        finally:
            c.close()


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_consumer_capacity_falls_while_consumers_are_full(queue_type):
    """RabbitMQ's consumer capacity: 0 without consumers, 1 while they keep up, falling
    while messages wait behind a consumer whose prefetch is full."""
    idle, busy = uname("cap-idle"), uname("cap-busy")
    c = connect()
    try:
        ch = c.channel()
        ch.confirm_delivery()
        for q in (idle, busy):
            ch.queue_declare(q, durable=True, arguments={"x-queue-type": queue_type})

        def capacity(q):
            scrape = Scrape("/metrics/per-object")
            (value,) = scrape.values("rabbitmq_queue_consumer_capacity", vhost="/", queue=q)
            (same,) = scrape.values("rabbitmq_queue_consumer_utilisation", vhost="/", queue=q)
            assert value == same
            return value

        assert capacity(idle) == 0 and capacity(busy) == 0
        # A consumer with room and nothing waiting: full capacity.
        ch.basic_consume(idle, lambda *a: None, auto_ack=True)
        # A consumer that takes one message and never acknowledges it.
        stuck = c.channel()
        stuck.basic_qos(prefetch_count=1)
        stuck.basic_consume(busy, lambda *a: None, auto_ack=False)
        for _ in range(10):
            ch.basic_publish("", busy, b"x")
        # Full for a few half-lives (1 s each), the average falls toward the share of the
        # time the consumer had room (RabbitMQ's moving average).
        def falls():
            assert capacity(busy) < 0.5, capacity(busy)
        wait_until(falls, timeout=15)
        c.process_data_events(0)
        assert capacity(idle) > 0.999, capacity(idle)
        if MGMT_URL:
            api = requests.get(MGMT_URL + "/api/queues/%2F/" + busy, auth=("guest", "guest"),
                               timeout=5).json()
            assert api["consumer_capacity"] < 0.5 and api["consumer_utilisation"] < 0.5, api
    finally:
        try:
            ch = c.channel()
            ch.queue_delete(idle)
            ch.queue_delete(busy)
        finally:
            c.close()


def counters():
    scrape = Scrape("/metrics")
    names = [
        "rabbitmq_connections_opened_total", "rabbitmq_connections_closed_total",
        "rabbitmq_channels_opened_total", "rabbitmq_channels_closed_total",
        "rabbitmq_queues_declared_total", "rabbitmq_queues_created_total",
        "rabbitmq_queues_deleted_total",
        "rabbitmq_global_messages_received_total",
        "rabbitmq_global_messages_received_confirm_total",
        "rabbitmq_global_messages_confirmed_total",
        "rabbitmq_global_messages_routed_total",
        "rabbitmq_global_messages_unroutable_dropped_total",
        "rabbitmq_global_messages_unroutable_returned_total",
        "rabbitmq_global_messages_delivered_total",
        "rabbitmq_global_messages_delivered_consume_manual_ack_total",
        "rabbitmq_global_messages_delivered_consume_auto_ack_total",
        "rabbitmq_global_messages_delivered_get_manual_ack_total",
        "rabbitmq_global_messages_delivered_get_auto_ack_total",
        "rabbitmq_global_messages_get_empty_total",
        "rabbitmq_global_messages_redelivered_total",
        "rabbitmq_global_messages_acknowledged_total",
    ]
    values = {n: scrape.total(n) for n in names}
    if not rabbitmq_3_x(scrape):
        for le in ("100.0", "10000.0", "+Inf"):
            values["size<=" + le] = scrape.total("rabbitmq_message_size_bytes_bucket", le=le)
    return values


def test_counters_follow_what_a_client_does():
    before = counters()
    q = uname("prom")
    c = connect()
    ch = c.channel()
    ch.confirm_delivery()
    ch.queue_declare(q)
    ch.queue_declare(q)  # declared again: declared +2, created +1
    ch.basic_publish("", q, b"x" * 50)
    ch.basic_publish("", q, b"y" * 5000)
    ch.basic_publish("", q, b"z")
    ch.basic_publish("amq.direct", uname("nowhere"), b"dropped")
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", uname("nowhere"), b"returned", mandatory=True)
    m, _, _ = ch.basic_get(q, auto_ack=False)
    ch.basic_nack(m.delivery_tag, requeue=True)
    m, _, _ = ch.basic_get(q, auto_ack=False)  # the requeued one: redelivered
    assert m.redelivered
    ch.basic_ack(m.delivery_tag)
    assert ch.basic_get(q, auto_ack=True)[0] is not None
    got = []
    ch.basic_consume(q, lambda ch_, m_, p_, b_: got.append(m_.delivery_tag))
    deadline = time.monotonic() + 5
    while len(got) < 1 and time.monotonic() < deadline:
        c.process_data_events(time_limit=0.05)
    assert len(got) == 1
    ch.basic_ack(got[0])
    ch.cancel()
    assert ch.basic_get(q, auto_ack=True)[0] is None  # empty
    ch.queue_delete(q)
    c.close()

    def moved():
        after = counters()
        delta = {k: after[k] - before[k] for k in before}
        expected = {
            "rabbitmq_connections_opened_total": 1, "rabbitmq_connections_closed_total": 1,
            "rabbitmq_channels_opened_total": 1, "rabbitmq_channels_closed_total": 1,
            "rabbitmq_queues_declared_total": 2, "rabbitmq_queues_created_total": 1,
            "rabbitmq_queues_deleted_total": 1,
            "rabbitmq_global_messages_received_total": 5,
            "rabbitmq_global_messages_received_confirm_total": 5,
            # Unroutable messages are confirmed too.
            "rabbitmq_global_messages_confirmed_total": 5,
            "rabbitmq_global_messages_routed_total": 3,
            "rabbitmq_global_messages_unroutable_dropped_total": 1,
            "rabbitmq_global_messages_unroutable_returned_total": 1,
            "rabbitmq_global_messages_delivered_total": 4,
            "rabbitmq_global_messages_delivered_consume_manual_ack_total": 1,
            "rabbitmq_global_messages_delivered_consume_auto_ack_total": 0,
            "rabbitmq_global_messages_delivered_get_manual_ack_total": 2,
            "rabbitmq_global_messages_delivered_get_auto_ack_total": 1,
            "rabbitmq_global_messages_get_empty_total": 1,
            "rabbitmq_global_messages_redelivered_total": 1,
            "rabbitmq_global_messages_acknowledged_total": 2,
        }
        if "size<=+Inf" in delta:
            expected.update({"size<=100.0": 4, "size<=10000.0": 5, "size<=+Inf": 5})
        assert delta == expected
        return delta

    wait_until(moved)


def test_detailed_without_families_is_identity_only():
    scrape = Scrape("/metrics/detailed")
    rabbitmq = {n for n, _, _ in scrape.samples if n.startswith("rabbitmq_")}
    assert rabbitmq == {"rabbitmq_identity_info", "rabbitmq_build_info"}


def test_detailed_serves_the_families_asked_for():
    q = uname("prom")
    c = connect()
    try:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare(q)
        ch.basic_publish("", q, b"one")
        query = "family=queue_coarse_metrics&family=connection_churn_metrics&vhost=%2F"

        def served():
            scrape = Scrape("/metrics/detailed?" + query)
            ready = scrape.values("rabbitmq_detailed_queue_messages_ready", vhost="/", queue=q)
            assert ready == [1], ready
            assert scrape.total("rabbitmq_detailed_connections_opened_total") >= 1
            assert not scrape.values("rabbitmq_detailed_queue_consumers")  # not asked for
            assert not scrape.values("rabbitmq_queue_messages_ready")
            (identity,) = scrape.labelled("rabbitmq_identity_info")
            if not rabbitmq_3_x(scrape):
                assert identity["rabbitmq_endpoint"] == "detailed", identity

        wait_until(served)
        other = Scrape("/metrics/detailed?family=queue_coarse_metrics&vhost=no-such-vhost")
        assert not other.values("rabbitmq_detailed_queue_messages_ready", queue=q)
        ch.queue_delete(q)
    finally:
        c.close()


def auth_attempts(protocol):
    scrape = Scrape("/metrics")
    return [sum(scrape.values("rabbitmq_auth_attempts%s_total" % outcome, protocol=protocol))
            for outcome in ("", "_succeeded", "_failed")]


def test_auth_attempts_are_counted_by_protocol_and_outcome():
    import urllib.parse
    from conftest import AMQP_URL
    before = auth_attempts("amqp091")
    connect(AMQP_URL).close()
    url = urllib.parse.urlparse(AMQP_URL)
    wrong = url._replace(netloc="%s:not-the-password@%s:%d" % (
        url.username or "guest", url.hostname, url.port or 5672)).geturl()
    for _ in range(2):
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            connect(wrong)

    def moved():
        after = auth_attempts("amqp091")
        assert [a - b for a, b in zip(after, before)] == [3, 1, 2], (before, after)
    wait_until(moved)
    if not is_warren(Scrape("/metrics")):
        return
    # AMQP 1.0 logins are counted apart (RabbitMQ 4 labels them amqp10).
    from proton import ConnectionException
    from proton.utils import BlockingConnection
    before = auth_attempts("amqp10")
    with pytest.raises(ConnectionException):
        BlockingConnection("amqp://%s:%d" % (url.hostname, url.port or 5672), timeout=10,
                           user=url.username or "guest", password="not-the-password",
                           allowed_mechs="PLAIN")
    assert [a - b for a, b in zip(auth_attempts("amqp10"), before)] == [1, 0, 1]


def dead_lettered():
    scrape = Scrape("/metrics")
    return {
        (reason, strategy): scrape.total(
            "rabbitmq_global_messages_dead_lettered_%s_total" % reason,
            queue_type="rabbit_classic_queue", dead_letter_strategy=strategy)
        for reason in ("expired", "maxlen", "rejected")
        for strategy in ("at_most_once", "disabled")
    }


def test_dead_lettered_by_reason_and_strategy():
    before = dead_lettered()
    with_dlx, plain, target = uname("prom-dlx"), uname("prom-plain"), uname("prom-target")
    c = connect()
    try:
        ch = c.channel()
        ch.queue_declare(target)
        ch.queue_declare(with_dlx, arguments={"x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": target,
                                              "x-message-ttl": 60000})
        ch.queue_declare(plain, arguments={"x-max-length": 1})
        ch.basic_publish("", with_dlx, b"rejected")
        m, _, _ = ch.basic_get(with_dlx, auto_ack=False)
        ch.basic_reject(m.delivery_tag, requeue=False)
        ch.basic_publish("", with_dlx, b"expires",
                         pika.BasicProperties(expiration="1"))
        ch.basic_publish("", plain, b"dropped")
        ch.basic_publish("", plain, b"kept")  # drops the head: maxlen, no exchange
        ch.basic_publish("", plain, b"kept too")
        m, _, _ = ch.basic_get(plain, auto_ack=False)
        ch.basic_reject(m.delivery_tag, requeue=False)  # rejected, no exchange
        time.sleep(0.1)
        ch.queue_declare(with_dlx, passive=True)  # lets an idle queue notice the expiry

        def counted():
            after = dead_lettered()
            delta = {k: after[k] - before[k] for k in before}
            assert delta == {
                ("expired", "at_most_once"): 1, ("expired", "disabled"): 0,
                ("maxlen", "at_most_once"): 0, ("maxlen", "disabled"): 2,
                ("rejected", "at_most_once"): 1, ("rejected", "disabled"): 1,
            }, delta

        wait_until(counted)
        for q in (with_dlx, plain, target):
            ch.queue_delete(q)
    finally:
        c.close()


def quorum_dead_lettered():
    scrape = Scrape("/metrics")
    counts = {
        (reason, strategy): scrape.total(
            "rabbitmq_global_messages_dead_lettered_%s_total" % reason,
            queue_type="rabbit_quorum_queue", dead_letter_strategy=strategy)
        for reason in ("rejected", "delivery_limit")
        for strategy in ("at_least_once", "at_most_once", "disabled")
    }
    counts["confirmed"] = scrape.total(
        "rabbitmq_global_messages_dead_lettered_confirmed_total",
        queue_type="rabbit_quorum_queue", dead_letter_strategy="at_least_once")
    return counts


def test_quorum_dead_lettered_by_strategy_and_confirmed():
    """Quorum queues' dead letters are counted under their own queue type: at-least-once ones
    once each, and again as confirmed once their copy is in the target queue."""
    before = quorum_dead_lettered()
    alo, amo, target = uname("prom-alo"), uname("prom-amo"), uname("prom-qtarget")
    c = connect()
    try:
        ch = c.channel()
        ch.queue_declare(target)
        common = {"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                  "x-dead-letter-routing-key": target, "x-overflow": "reject-publish"}
        ch.queue_declare(alo, durable=True,
                         arguments=dict(common, **{"x-dead-letter-strategy": "at-least-once"}))
        ch.queue_declare(amo, durable=True, arguments=common)
        ch.confirm_delivery()
        for q in (alo, amo):
            ch.basic_publish("", q, b"rejected")
            m = None
            for _ in range(100):
                m, _, _ = ch.basic_get(q, auto_ack=False)
                if m:
                    break
                time.sleep(0.05)
            ch.basic_reject(m.delivery_tag, requeue=False)

        def counted():
            after = quorum_dead_lettered()
            delta = {k: after[k] - before[k] for k in before}
            assert delta == {
                ("rejected", "at_least_once"): 1, ("rejected", "at_most_once"): 1,
                ("rejected", "disabled"): 0, ("delivery_limit", "at_least_once"): 0,
                ("delivery_limit", "at_most_once"): 0, ("delivery_limit", "disabled"): 0,
                "confirmed": 1,
            }, delta

        wait_until(counted)
        assert ch.queue_declare(target, passive=True).method.message_count == 2
        for q in (alo, amo, target):
            ch.queue_delete(q)
    finally:
        c.close()


@needs_warren_bin
def test_alarms_limits_and_identity_follow_the_brokers_settings(tmp_path):
    """A broker of our own whose limits are already crossed: both alarm flags read 1 and the
    limits are the ones it was given; the cluster name is the server property."""
    prometheus_port = free_port()
    disk_limit = 10 ** 18
    broker = Broker(str(tmp_path / "data"), "--prometheus-port", str(prometheus_port),
                    "--memory-high-watermark-bytes", "1",
                    "--disk-free-limit-bytes", str(disk_limit),
                    "--server-property", "cluster_name=prom-test")
    try:
        url = "http://127.0.0.1:%d" % prometheus_port

        def alarmed():
            scrape = Scrape("/metrics", base_url=url)
            assert scrape.total("rabbitmq_alarms_memory_used_watermark") == 1
            assert scrape.total("rabbitmq_alarms_free_disk_space_watermark") == 1
            assert scrape.total("rabbitmq_alarms_file_descriptor_limit") == 0
            assert scrape.total("rabbitmq_resident_memory_limit_bytes") == 1
            assert scrape.total("rabbitmq_disk_space_available_limit_bytes") == disk_limit
            (identity,) = scrape.labelled("rabbitmq_identity_info")
            assert identity["rabbitmq_cluster"] == "prom-test", identity

        wait_until(alarmed, timeout=10)
    finally:
        broker.stop()

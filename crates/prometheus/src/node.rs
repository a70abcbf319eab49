//! Node-wide families: identity and build info, churn totals, memory, disk, file
//! descriptors, alarms, uptime, and the message store's own counters (`warren_store_*`).
//! Names, types and HELP texts are rabbitmq_prometheus's (3.10 checked against a live node,
//! 3.13/4.x from its sources).

use crate::exposition::{Exposition, Kind};
use crate::process;
use warren_broker::auth_attempts::AuthProtocol;
use warren_broker::churn::read;
use warren_broker::version::{PRODUCT_NAME, PRODUCT_VERSION, RABBITMQ_VERSION};
use warren_broker::{Alarm, Broker};

/// Which endpoint is being scraped; RabbitMQ 3.13+ names it in `rabbitmq_identity_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Aggregated,
    PerObject,
    Detailed,
}

impl Endpoint {
    fn label(self) -> &'static str {
        match self {
            Endpoint::Aggregated => "aggregated",
            Endpoint::PerObject => "per-object",
            Endpoint::Detailed => "detailed",
        }
    }
}

/// `rabbitmq_build_info` and `rabbitmq_identity_info`: the series dashboards join every
/// other one with (`* on(instance, job) group_left(rabbitmq_cluster, rabbitmq_node)`).
pub fn identity(out: &mut Exposition, broker: &Broker, endpoint: Endpoint) {
    out.group(None);
    out.family(
        "rabbitmq_build_info",
        Kind::Untyped,
        "RabbitMQ & Erlang/OTP version info",
    );
    out.sample(
        "rabbitmq_build_info",
        &[
            ("product_name", PRODUCT_NAME),
            ("product_version", PRODUCT_VERSION),
            ("rabbitmq_version", RABBITMQ_VERSION),
            ("prometheus_plugin_version", RABBITMQ_VERSION),
        ],
        1u64,
    );
    out.family(
        "rabbitmq_identity_info",
        Kind::Untyped,
        "RabbitMQ node & cluster identity info",
    );
    out.sample(
        "rabbitmq_identity_info",
        &[
            ("rabbitmq_node", broker.node_name()),
            ("rabbitmq_cluster", &broker.cluster_name()),
            ("rabbitmq_endpoint", endpoint.label()),
        ],
        1u64,
    );
}

/// Connections, channels and queues opened and closed (RabbitMQ's
/// `connection_churn_metrics`).
pub fn churn(out: &mut Exposition, broker: &Broker) {
    out.group(Some(&["connection_churn_metrics"]));
    let c = &broker.counters.connections;
    let q = &broker.counters.queues;
    let counters = [
        (
            "rabbitmq_connections_opened_total",
            "Total number of connections opened",
            read(&c.connections_opened),
        ),
        (
            "rabbitmq_connections_closed_total",
            "Total number of connections closed or terminated",
            read(&c.connections_closed),
        ),
        (
            "rabbitmq_channels_opened_total",
            "Total number of channels opened",
            read(&c.channels_opened),
        ),
        (
            "rabbitmq_channels_closed_total",
            "Total number of channels closed",
            read(&c.channels_closed),
        ),
        (
            "rabbitmq_queues_declared_total",
            "Total number of queues declared",
            read(&q.declared),
        ),
        (
            "rabbitmq_queues_created_total",
            "Total number of queues created",
            read(&q.created),
        ),
        (
            "rabbitmq_queues_deleted_total",
            "Total number of queues deleted",
            read(&q.deleted),
        ),
    ];
    for (name, help, value) in counters {
        out.single(name, Kind::Counter, help, value);
    }
}

/// Login attempts by protocol (RabbitMQ's `auth_attempt_metrics`): a sample for each
/// protocol that has had one.
pub fn auth_attempts(out: &mut Exposition, broker: &Broker) {
    out.group(Some(&["auth_attempt_metrics"]));
    let attempts = &broker.counters.auth_attempts;
    let tried: Vec<(AuthProtocol, u64, u64)> = AuthProtocol::ALL
        .iter()
        .map(|&p| (p, attempts.succeeded(p), attempts.failed(p)))
        .filter(|(_, succeeded, failed)| succeeded + failed > 0)
        .collect();
    // Each family's value from (succeeded, failed).
    type Value = fn(u64, u64) -> u64;
    let families: [(&str, &str, Value); 3] = [
        (
            "rabbitmq_auth_attempts_total",
            "Total number of authentication attempts",
            |succeeded, failed| succeeded + failed,
        ),
        (
            "rabbitmq_auth_attempts_succeeded_total",
            "Total number of successful authentication attempts",
            |succeeded, _| succeeded,
        ),
        (
            "rabbitmq_auth_attempts_failed_total",
            "Total number of failed authentication attempts",
            |_, failed| failed,
        ),
    ];
    for (name, help, value) in families {
        out.family(name, Kind::Counter, help);
        for &(protocol, succeeded, failed) in &tried {
            out.sample(
                name,
                &[("protocol", protocol.label())],
                value(succeeded, failed),
            );
        }
    }
}

/// Memory, disk, file descriptors and uptime (RabbitMQ's `node_coarse_metrics` and
/// `node_metrics`).
pub fn resources(out: &mut Exposition, broker: &Broker) {
    out.group(Some(&["node_coarse_metrics"]));
    if let Some(open) = process::open_fds() {
        out.single(
            "rabbitmq_process_open_fds",
            Kind::Gauge,
            "Open file descriptors",
            open,
        );
    }
    if let Some(open) = process::open_tcp_sockets() {
        out.single(
            "rabbitmq_process_open_tcp_sockets",
            Kind::Gauge,
            "Open TCP sockets",
            open,
        );
    }
    if let Some(resident) = warren_broker::memory::resident_set_bytes() {
        out.single(
            "rabbitmq_process_resident_memory_bytes",
            Kind::Gauge,
            "Memory used in bytes",
            resident as u64,
        );
    }
    let disk = broker.disk_monitor();
    if let Some(disk) = disk {
        out.single(
            "rabbitmq_disk_space_available_bytes",
            Kind::Gauge,
            "Disk space available in bytes",
            disk.free_bytes(),
        );
    }
    out.group(Some(&["node_metrics"]));
    if let Some(max) = process::max_fds() {
        out.single(
            "rabbitmq_process_max_fds",
            Kind::Gauge,
            "Open file descriptors limit",
            max,
        );
    }
    if let Some(max) = process::max_tcp_sockets() {
        out.single(
            "rabbitmq_process_max_tcp_sockets",
            Kind::Gauge,
            "Open TCP sockets limit",
            max,
        );
    }
    out.single(
        "rabbitmq_resident_memory_limit_bytes",
        Kind::Gauge,
        "Memory high watermark in bytes",
        broker.memory.high_watermark_bytes() as u64,
    );
    if let Some(disk) = disk {
        out.single(
            "rabbitmq_disk_space_available_limit_bytes",
            Kind::Gauge,
            "Free disk space low watermark in bytes",
            disk.limit_bytes(),
        );
    }
    // RabbitMQ's name for node uptime; the Overview dashboard's node table reads it.
    out.single(
        "rabbitmq_erlang_uptime_seconds",
        Kind::Gauge,
        "Node uptime",
        broker.started_at.elapsed().as_secs_f64(),
    );
}

/// `rabbitmq_alarms_*`: 1 while the alarm is in effect. Warren raises no file descriptor
/// alarm (it is never blocked on descriptors), so that one stays 0, as on a RabbitMQ node
/// far from its limit.
pub fn alarms(out: &mut Exposition, broker: &Broker) {
    let active = broker.alarms.local();
    out.single(
        "rabbitmq_alarms_file_descriptor_limit",
        Kind::Untyped,
        "is 1 if file descriptor limit alarm is in effect",
        0u64,
    );
    out.single(
        "rabbitmq_alarms_free_disk_space_watermark",
        Kind::Untyped,
        "is 1 if free disk space watermark alarm is in effect",
        u64::from(active.contains(Alarm::Disk)),
    );
    out.single(
        "rabbitmq_alarms_memory_used_watermark",
        Kind::Untyped,
        "is 1 if VM memory watermark alarm is in effect",
        u64::from(active.contains(Alarm::Memory)),
    );
}

/// Warren's message store (docs/STORAGE.md): what the writer did since the store opened.
pub fn store(out: &mut Exposition, broker: &Broker) {
    let Some(store) = broker.store() else {
        return;
    };
    let s = store.stats();
    let counters = [
        (
            "warren_store_records_written_total",
            "Records (publishes and acks) written to the message store",
            s.records_written,
        ),
        (
            "warren_store_bytes_written_total",
            "Bytes written to the message store's segment files",
            s.bytes_written,
        ),
        (
            "warren_store_batches_total",
            "Group-commit batches written by the message store",
            s.batches,
        ),
        (
            "warren_store_fsyncs_total",
            "fdatasync calls on the message store's segment files",
            s.fsyncs,
        ),
        (
            "warren_store_segments_created_total",
            "Segment files created",
            s.segments_created,
        ),
        (
            "warren_store_segments_removed_total",
            "Segment files removed once nothing in them was live",
            s.segments_removed,
        ),
    ];
    for (name, help, value) in counters {
        out.single(name, Kind::Counter, help, value);
    }
    out.single(
        "warren_store_segments",
        Kind::Gauge,
        "Segment files on disk",
        s.segments,
    );
    out.single(
        "warren_store_live_references",
        Kind::Gauge,
        "Messages the store keeps for queues (one per queue holding a message)",
        s.live_references,
    );
}

/// The cluster as this node sees it (cluster nodes only): each member up or down as the
/// failure detector sees it, and the metadata Raft group's term, indexes and per-member lag.
/// rabbitmq_prometheus has no node-membership families, and its `rabbitmq_raft_*` ones are
/// per quorum queue (3.10: `term_total`, `log_last_written_index`, `log_last_applied_index`,
/// …); the metadata group's carry the same suffixes under `warren_raft_metadata_`.
pub fn cluster(out: &mut Exposition, broker: &Broker) {
    let Some(cluster) = broker.cluster() else {
        return;
    };
    let status = cluster.status();
    out.group(None);
    out.family(
        "warren_cluster_node_up",
        Kind::Gauge,
        "1 if the cluster member is running as this node's failure detector sees it, else 0",
    );
    for member in &status.members {
        out.sample(
            "warren_cluster_node_up",
            &[("node", &member.name)],
            u64::from(member.running),
        );
    }
    out.family(
        "warren_raft_metadata_term_total",
        Kind::Counter,
        "The current Raft term of the cluster's metadata group on this node",
    );
    out.sample("warren_raft_metadata_term_total", &[], status.term);
    out.family(
        "warren_raft_metadata_is_leader",
        Kind::Gauge,
        "1 if this node leads the cluster's metadata group",
    );
    out.sample(
        "warren_raft_metadata_is_leader",
        &[],
        u64::from(status.leader.as_deref() == Some(cluster.name())),
    );
    out.family(
        "warren_raft_metadata_log_last_written_index",
        Kind::Gauge,
        "The last index of the metadata group's log on this node",
    );
    out.sample(
        "warren_raft_metadata_log_last_written_index",
        &[],
        status.last_log_index.unwrap_or(0),
    );
    out.family(
        "warren_raft_metadata_log_last_applied_index",
        Kind::Gauge,
        "The last metadata log index this node applied",
    );
    out.sample(
        "warren_raft_metadata_log_last_applied_index",
        &[],
        status.last_applied_index.unwrap_or(0),
    );
    out.family(
        "warren_raft_metadata_member_lag",
        Kind::Gauge,
        "Entries a member is behind the leader's log (reported by the leader only)",
    );
    for member in &status.members {
        if let Some(lag) = member.lag {
            out.sample(
                "warren_raft_metadata_member_lag",
                &[("node", &member.name)],
                lag,
            );
        }
    }
}

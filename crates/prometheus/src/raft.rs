//! Quorum queues' Raft groups as rabbitmq_prometheus reports them (its `ra_metrics` group,
//! checked against 3.10.8): `rabbitmq_raft_term_total` and the log's commit, applied,
//! written and snapshot indexes, one sample per quorum queue (`vhost`, `queue`) on
//! `/metrics/per-object` and `/metrics/detailed?family=ra_metrics`, summed over all quorum
//! queues on `/metrics` as RabbitMQ sums them. RabbitMQ's
//! `rabbitmq_raft_entry_commit_latency_seconds` is left out: Warren does not measure it.
//!
//! Warren adds `warren_raft_member_lag` (per object only: a sum of lags says nothing): how
//! many entries each member is behind its leader, reported by the leader.
//!
//! Read from each group's openraft metrics (`QuorumQueue::group_status`), one read per
//! quorum queue per scrape; nothing on the message path.

use crate::exposition::{Exposition, Kind};
use warren_broker::quorum::status::{GroupStatus, NodeNames};
use warren_broker::Broker;

struct RaftReading {
    vhost: String,
    queue: String,
    status: GroupStatus,
}

/// Every running quorum queue group of this node, read once for the whole scrape.
pub struct RaftReadings {
    groups: Vec<RaftReading>,
    names: NodeNames,
}

impl RaftReadings {
    pub fn take(broker: &Broker) -> RaftReadings {
        let mut groups = Vec::new();
        for vhost in broker.vhosts() {
            for queue in vhost.queues() {
                if let Some(status) = queue.replicas().and_then(|replicas| replicas.group) {
                    groups.push(RaftReading {
                        vhost: vhost.name.clone(),
                        queue: queue.name.to_string(),
                        status,
                    });
                }
            }
        }
        groups.sort_by(|a, b| (&a.vhost, &a.queue).cmp(&(&b.vhost, &b.queue)));
        RaftReadings {
            groups,
            names: broker.node_names(),
        }
    }
}

type Read = fn(&GroupStatus) -> u64;

const GROUP: &[&str] = &["ra_metrics"];

const FAMILIES: &[(&str, Kind, &str, Read)] = &[
    (
        "rabbitmq_raft_term_total",
        Kind::Counter,
        "Current Raft term number",
        |s| s.term,
    ),
    (
        "rabbitmq_raft_log_snapshot_index",
        Kind::Gauge,
        "Raft log snapshot index",
        |s| s.snapshot_index.unwrap_or(0),
    ),
    (
        "rabbitmq_raft_log_last_applied_index",
        Kind::Gauge,
        "Raft log last applied index",
        |s| s.last_applied_index.unwrap_or(0),
    ),
    (
        "rabbitmq_raft_log_commit_index",
        Kind::Gauge,
        "Raft log commit index",
        |s| s.commit_index.unwrap_or(0),
    ),
    (
        "rabbitmq_raft_log_last_written_index",
        Kind::Gauge,
        "Raft log last written index",
        |s| s.last_log_index.unwrap_or(0),
    ),
];

pub fn families(out: &mut Exposition, readings: &RaftReadings, per_object: bool) {
    out.group(Some(GROUP));
    for &(name, kind, help, read) in FAMILIES {
        out.family(name, kind, help);
        if per_object {
            for g in &readings.groups {
                out.sample(
                    name,
                    &[("vhost", &g.vhost), ("queue", &g.queue)],
                    read(&g.status),
                );
            }
        } else {
            let sum: u64 = readings.groups.iter().map(|g| read(&g.status)).sum();
            out.sample(name, &[], sum);
        }
    }
    if per_object {
        let name = "warren_raft_member_lag";
        out.family(
            name,
            Kind::Gauge,
            "Entries a quorum queue's member is behind its leader's log (reported by the leader)",
        );
        for g in &readings.groups {
            for member in &g.status.members {
                if let Some(lag) = member.lag {
                    let node = readings.names.name(member.node);
                    out.sample(
                        name,
                        &[("vhost", &g.vhost), ("queue", &g.queue), ("node", &node)],
                        lag,
                    );
                }
            }
        }
    }
}

//! Quorum queues' Raft groups as rabbitmq_prometheus reports them (its `ra_metrics` group,
//! checked against 3.10.8): `rabbitmq_raft_term_total` and the log's commit, applied,
//! written and snapshot indexes, one sample per quorum queue (`vhost`, `queue`) on
//! `/metrics/per-object` and `/metrics/detailed?family=ra_metrics`, summed over all quorum
//! queues on `/metrics` as RabbitMQ sums them; `rabbitmq_raft_entry_commit_latency_seconds`,
//! how long the last entry a leader proposed took to commit, per queue whose member here
//! led and committed one, averaged over them on `/metrics` (3.13's rule). RabbitMQ 4 renamed
//! the families after Ra's counters (`rabbitmq_raft_term`, `_commit_index`,
//! `_last_written_index`, `_snapshot_index`, `_commit_latency_seconds`), and its current Quorum-Queues-Raft
//! dashboard queries both names: Warren serves both, the same samples under each.
//!
//! Warren adds `warren_raft_member_lag` (per object only: a sum of lags says nothing): how
//! many entries each member is behind its leader, reported by the leader.
//!
//! Read from each group's openraft metrics (`QuorumQueue::group_status`), one read per
//! quorum queue per scrape; nothing on the message path.

use crate::exposition::{Exposition, Kind};
use std::sync::Arc;
use warren_broker::quorum::status::{GroupStatus, NodeNames};
use warren_broker::{Broker, Queue, VHost};

struct RaftReading {
    vhost: String,
    queue: String,
    status: GroupStatus,
    commit_latency_s: Option<f64>,
}

/// Every running quorum queue group of this node, read once for the whole scrape.
pub struct RaftReadings {
    groups: Vec<RaftReading>,
    names: NodeNames,
}

impl RaftReadings {
    /// Every queue of every vhost.
    pub fn take(broker: &Broker) -> RaftReadings {
        let queues = broker.vhosts().into_iter().flat_map(|vhost| {
            let queues = vhost.queues();
            queues.into_iter().map(move |q| (vhost.clone(), q))
        });
        RaftReadings::of(broker, queues)
    }

    /// The groups of `queues` (those that are not replicated have none).
    pub fn of(
        broker: &Broker,
        queues: impl IntoIterator<Item = (Arc<VHost>, Arc<Queue>)>,
    ) -> RaftReadings {
        let mut groups = Vec::new();
        for (vhost, queue) in queues {
            let Some(replicas) = queue.replicas() else {
                continue;
            };
            if let Some(status) = replicas.group {
                groups.push(RaftReading {
                    vhost: vhost.name.clone(),
                    queue: queue.name.to_string(),
                    status,
                    commit_latency_s: replicas.commit_latency.map(|d| d.as_secs_f64()),
                });
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
    // RabbitMQ 4's names for the same readings.
    ("rabbitmq_raft_term", Kind::Gauge, "The current term", |s| {
        s.term
    }),
    (
        "rabbitmq_raft_snapshot_index",
        Kind::Gauge,
        "The last index the latest snapshot covers",
        |s| s.snapshot_index.unwrap_or(0),
    ),
    (
        "rabbitmq_raft_commit_index",
        Kind::Gauge,
        "The current commit index",
        |s| s.commit_index.unwrap_or(0),
    ),
    (
        "rabbitmq_raft_last_written_index",
        Kind::Gauge,
        "The last fully written and fsynced index of the log",
        |s| s.last_log_index.unwrap_or(0),
    ),
];

/// The commit latency, under 3.13's name and RabbitMQ 4's.
const LATENCY: &[&str] = &[
    "rabbitmq_raft_entry_commit_latency_seconds",
    "rabbitmq_raft_commit_latency_seconds",
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
    for &name in LATENCY {
        out.family(
            name,
            Kind::Gauge,
            "Time taken for a log entry to be committed",
        );
        let latencies = readings
            .groups
            .iter()
            .filter_map(|g| Some((g, g.commit_latency_s?)));
        if per_object {
            for (g, seconds) in latencies {
                out.sample(name, &[("vhost", &g.vhost), ("queue", &g.queue)], seconds);
            }
        } else {
            let (count, sum) = latencies.fold((0u32, 0.0), |(n, sum), (_, s)| (n + 1, sum + s));
            let average = if count == 0 {
                0.0
            } else {
                sum / f64::from(count)
            };
            out.sample(name, &[], average);
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

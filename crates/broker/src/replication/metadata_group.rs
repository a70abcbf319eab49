//! The cluster's metadata Raft group as the broker's definitions log: [`ClusterReplicator`]
//! submits each definitions op to the group (from any member; a follower forwards it to the
//! leader), and [`BrokerMetadata`] is the group's machine on every node, applying each
//! committed op in log order through `Broker::apply_replicated` and snapshotting the node's
//! durable definitions (`Broker::snapshot`), which `Broker::restore_replicated` brings a node
//! back to.

use super::{ReplicationError, Replicator, Submitted};
use crate::broker::Broker;
use crate::quorum::cluster::ClusterNode;
use std::sync::{Arc, Weak};
use warren_quorum::metadata::MetadataMachine;

/// The metadata group's machine: the broker's definitions.
pub struct BrokerMetadata {
    broker: Weak<Broker>,
}

impl BrokerMetadata {
    /// Weak: the broker owns the cluster node, which owns this machine.
    pub fn new(broker: &Arc<Broker>) -> Arc<BrokerMetadata> {
        Arc::new(BrokerMetadata {
            broker: Arc::downgrade(broker),
        })
    }
}

impl MetadataMachine for BrokerMetadata {
    fn apply(&self, _index: u64, op: &[u8]) -> Vec<u8> {
        match self.broker.upgrade() {
            Some(broker) => broker.apply_replicated(op),
            // Shutting down: nobody waits for the answer.
            None => Vec::new(),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        self.broker
            .upgrade()
            .map(|broker| broker.snapshot().encode().to_vec())
            .unwrap_or_default()
    }

    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        match self.broker.upgrade() {
            Some(broker) => broker.restore_replicated(snapshot),
            None => Ok(()),
        }
    }
}

/// Definitions changes through the cluster's metadata group.
pub struct ClusterReplicator {
    cluster: Arc<ClusterNode>,
}

impl ClusterReplicator {
    pub fn new(cluster: Arc<ClusterNode>) -> Arc<ClusterReplicator> {
        Arc::new(ClusterReplicator { cluster })
    }
}

impl Replicator for ClusterReplicator {
    fn submit(&self, op: Vec<u8>) -> Submitted {
        let cluster = self.cluster.clone();
        Box::pin(async move {
            cluster
                .metadata()
                .propose(op)
                .await
                .map_err(|e| ReplicationError(e.to_string()))
        })
    }
}

//! The node's quorum-queue host: one [`QuorumNode`] (one shared write-ahead log under
//! `<data>/quorum`) for every quorum queue of every vhost, and the stable group id each queue's
//! Raft group has in it.
//!
//! A queue's group id is derived from its vhost and name, so a restart finds the group's log
//! and snapshot again without storing the id anywhere; deleting the queue drops both, so a
//! queue declared again under the same name starts empty.

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use warren_quorum::network::InProcessNetwork;
use warren_quorum::node::QueueGroup;
use warren_quorum::node::{default_raft_config, QuorumNode};
use warren_quorum::types::{GroupId, NodeId};
use warren_quorum::wal::WalOptions;

/// This node's id in its queue groups. One node: every group has this one member.
pub const LOCAL_NODE_ID: NodeId = 1;

/// The quorum-queue side of a broker with a data directory.
pub struct QuorumHost {
    node: QuorumNode<InProcessNetwork>,
    /// Groups whose data is being removed (their queue was deleted); a queue declared again
    /// under the same name waits for that before it starts the group afresh.
    removing: Mutex<HashSet<GroupId>>,
}

impl std::fmt::Debug for QuorumHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumHost")
            .field("wal", &self.node.wal().dir())
            .finish()
    }
}

impl QuorumHost {
    /// Opens (or recovers) the shared log in `dir`. Groups come back one by one as their
    /// queues are recreated from the durable definitions.
    pub fn open(dir: &Path) -> std::io::Result<Arc<QuorumHost>> {
        let network = InProcessNetwork::new();
        let node = QuorumNode::open(
            LOCAL_NODE_ID,
            dir,
            WalOptions::default(),
            default_raft_config(),
            network.clone(),
        )
        .map_err(std::io::Error::other)?;
        network.add_node(LOCAL_NODE_ID, node.registry());
        Ok(Arc::new(QuorumHost {
            node,
            removing: Mutex::default(),
        }))
    }

    pub fn node(&self) -> &QuorumNode<InProcessNetwork> {
        &self.node
    }

    /// The group id of queue `queue` in vhost `vhost`: the first 8 bytes of a SHA-256 over
    /// both names, stable across restarts.
    pub fn group_id(vhost: &str, queue: &str) -> GroupId {
        let mut hasher = Sha256::new();
        hasher.update(vhost.as_bytes());
        hasher.update([0u8]);
        hasher.update(queue.as_bytes());
        let digest = hasher.finalize();
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(id)
    }

    /// Stops the group and removes its log and snapshot (its queue was deleted), in a task;
    /// the removal counts as under way from this call on (see [`QuorumHost::removed`]).
    pub fn remove_group(self: &Arc<Self>, group: Arc<QueueGroup>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.removing.lock().insert(group.group());
        let host = self.clone();
        runtime.spawn(async move {
            if let Err(e) = host.node.remove_group(&group).await {
                tracing::warn!(group = group.group(), error = %e, "removing a quorum queue's data failed");
            }
            host.removing.lock().remove(&group.group());
        });
    }

    /// Waits until no removal of `group` is under way.
    pub async fn removed(&self, group: GroupId) {
        while self.removing.lock().contains(&group) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops every group and closes the log (what was submitted is flushed).
    pub async fn shutdown(&self) {
        self.node.shutdown().await;
    }
}

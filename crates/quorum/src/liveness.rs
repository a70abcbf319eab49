//! The node-level failure detector's view: per peer node, up or down and when it was last heard
//! from. One heartbeat per peer connection feeds it (see [`crate::tcp`]), however many queue
//! groups the node hosts, so later code (cluster status, leader failover) reads one table
//! instead of each group keeping its own heartbeats.
//!
//! A peer is up while an authenticated connection to it exists and frames (Raft traffic or
//! heartbeats) keep arriving; it is down from the moment its connection closes or stays silent
//! past the transport's `peer_down_after`. Every change bumps a version on a watch channel, so a
//! reader can wait for the next change instead of polling.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::types::NodeId;

/// What the failure detector knows of one peer node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    pub node: NodeId,
    /// Where this node dials it; `None` for a peer known only because it dialled in.
    pub addr: Option<SocketAddr>,
    pub up: bool,
    /// When a frame last arrived from it, if ever.
    pub last_seen: Option<Instant>,
    /// When `up` last changed (or the peer became known).
    pub since: Instant,
    /// Authenticated connections established with it so far.
    pub connections: u64,
}

impl PeerStatus {
    /// How long ago the peer was last heard from.
    pub fn silent_for(&self) -> Option<Duration> {
        self.last_seen.map(|seen| seen.elapsed())
    }
}

/// The table of peers, shared by a transport's connections and its readers.
pub struct Liveness {
    peers: Mutex<BTreeMap<NodeId, PeerStatus>>,
    changes: watch::Sender<u64>,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            peers: Mutex::default(),
            changes: watch::channel(0).0,
        }
    }
}

impl Liveness {
    /// Makes a peer known (down until a connection comes up), or updates its address.
    pub fn know(&self, node: NodeId, addr: Option<SocketAddr>) {
        let mut peers = self.peers.lock();
        let status = peers.entry(node).or_insert_with(|| PeerStatus {
            node,
            addr: None,
            up: false,
            last_seen: None,
            since: Instant::now(),
            connections: 0,
        });
        if addr.is_some() {
            status.addr = addr;
        }
    }

    /// A connection to `node` was authenticated.
    pub fn connected(&self, node: NodeId) {
        self.know(node, None);
        let now = Instant::now();
        if let Some(status) = self.peers.lock().get_mut(&node) {
            status.connections += 1;
            status.last_seen = Some(now);
            if !status.up {
                status.up = true;
                status.since = now;
            }
        }
        self.changes.send_modify(|version| *version += 1);
    }

    /// A frame arrived from `node`.
    pub fn seen(&self, node: NodeId, at: Instant) {
        if let Some(status) = self.peers.lock().get_mut(&node) {
            status.last_seen = Some(at);
        }
    }

    /// `node`'s connection closed or went silent.
    pub fn down(&self, node: NodeId) {
        let changed = match self.peers.lock().get_mut(&node) {
            Some(status) if status.up => {
                status.up = false;
                status.since = Instant::now();
                true
            }
            _ => false,
        };
        if changed {
            self.changes.send_modify(|version| *version += 1);
        }
    }

    pub fn status(&self, node: NodeId) -> Option<PeerStatus> {
        self.peers.lock().get(&node).cloned()
    }

    pub fn all(&self) -> Vec<PeerStatus> {
        self.peers.lock().values().cloned().collect()
    }

    pub fn is_up(&self, node: NodeId) -> bool {
        self.peers.lock().get(&node).is_some_and(|status| status.up)
    }

    /// A receiver whose value changes whenever a peer goes up or down.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

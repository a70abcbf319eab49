//! The broker the operations run against: in memory, or with a message store (and for quorum
//! queues a quorum log) in a temporary directory, opened as `warren server` opens them, with
//! fsync on every group commit (the default), so a persistent publish pays what it pays in a
//! server. fsync is a system call, not an instruction: callgrind counts the instructions
//! around it only.

use std::sync::Arc;
use warren_broker::Broker;

use crate::client::Result;

/// What the broker keeps on disk.
#[derive(Clone, Copy, PartialEq)]
pub enum Storage {
    /// Nothing: no store.
    Memory,
    /// A message store: durable classic queues and persistent messages.
    Classic,
    /// A message store and a quorum log.
    Quorum,
}

/// A broker and the directory its files are in (removed when this is dropped).
pub struct Node {
    pub broker: Arc<Broker>,
    _dir: Option<tempfile::TempDir>,
}

impl Node {
    /// Ends the run without dropping the broker: tearing down the queues and bindings the
    /// operations made is not their cost (the process exits next; the directory is removed).
    pub fn leave_to_exit(self) {
        std::mem::forget(self.broker);
    }
}

pub fn start(storage: Storage) -> Result<Node> {
    if storage == Storage::Memory {
        return Ok(Node {
            broker: Broker::new(usize::MAX, None),
            _dir: None,
        });
    }
    let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let (store, recovered) =
        warren_store::Store::open(&dir.path().join("store"), Default::default())
            .map_err(|e| format!("opening the store: {e}"))?;
    let broker = Broker::new(usize::MAX, Some(store));
    if storage == Storage::Quorum {
        let quorum = warren_broker::quorum::QuorumHost::open(&dir.path().join("quorum"))
            .map_err(|e| format!("opening the quorum log: {e}"))?;
        broker.enable_quorum(quorum);
    }
    if broker.recover(recovered) {
        broker.seed_defaults("guest", "guest", "/")?;
    }
    Ok(Node {
        broker,
        _dir: Some(dir),
    })
}

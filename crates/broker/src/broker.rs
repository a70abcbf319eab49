//! `Broker`: the process-wide root — the virtual hosts, the memory monitor shared by every
//! queue, and connection ids.

use crate::consumer::ConnectionId;
use crate::memory::MemoryMonitor;
use crate::vhost::VHost;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use warren_store::Store;

pub struct Broker {
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    pub memory: Arc<MemoryMonitor>,
    next_connection_id: AtomicU64,
}

impl Broker {
    /// A broker with the default vhost "/".
    /// Without a store everything is in memory; with one, durable definitions and persistent
    /// messages are kept in it (call `recover` with what opening it returned).
    pub fn new(memory_high_watermark_bytes: usize, store: Option<Store>) -> Arc<Broker> {
        let memory = Arc::new(MemoryMonitor::new(memory_high_watermark_bytes));
        let mut vhosts = HashMap::new();
        vhosts.insert("/".to_owned(), VHost::new("/", memory.clone(), store));
        Arc::new(Broker {
            vhosts: RwLock::new(vhosts),
            memory,
            next_connection_id: AtomicU64::new(1),
        })
    }

    /// Brings back what the store kept (all in the default vhost, the only one so far).
    pub fn recover(&self, recovered: warren_store::Recovered) {
        if let Some(vhost) = self.vhost("/") {
            vhost.recover(recovered);
        }
    }

    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    pub fn next_connection_id(&self) -> ConnectionId {
        self.next_connection_id.fetch_add(1, Relaxed)
    }
}

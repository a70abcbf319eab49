//! `Broker`: the process-wide root — the virtual hosts, the users and permissions, the
//! resource alarms and the memory monitor shared by every queue, and connection ids.

use crate::access::{AccessControl, Permission};
use crate::alarm::Alarms;
use crate::churn::NodeCounters;
use crate::connection_id::ConnectionId;
use crate::definition_op::DefinitionOp;
use crate::definitions::Definitions;
use crate::definitions_journal::{DefinitionRecord, DurableChange, PendingChanges};
use crate::disk::DiskMonitor;
use crate::memory::MemoryMonitor;
use crate::parameters::RuntimeParameters;
use crate::persist::{DefinitionsWriter, Urgency};
use crate::quorum::status::NodeNames;
use crate::quorum::QuorumQueue;
use crate::registry::Registry;
use crate::replication::Replicator;
use crate::snapshot::{AccessSnapshot, Snapshot, VHostSnapshot};
use crate::user_usage::UserUsage;
use crate::vhost::VHost;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use warren_store::{RoaringTreemap, Store};

/// The global runtime parameter holding the cluster's name, where RabbitMQ keeps it too.
pub const CLUSTER_NAME_PARAMETER: &str = "cluster_name";

/// "warren@HOSTNAME", as RabbitMQ's "rabbit@HOSTNAME".
pub fn default_node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    format!("warren@{host}")
}

/// The user a fresh broker has (password "guest", loopback only: see the server's config).
pub const DEFAULT_USER: &str = "guest";

/// RabbitMQ's default `channel_max`.
pub const DEFAULT_CHANNEL_MAX: u16 = 2047;

pub struct Broker {
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    /// Users, permissions and topic permissions (RabbitMQ's internal auth backend).
    pub access: Arc<AccessControl>,
    /// Each user's open connections and channels on this node, against its limits.
    pub user_usage: Arc<UserUsage>,
    /// Runtime parameters of components Warren keeps for definitions (federation, shovel…).
    pub parameters: Arc<RuntimeParameters>,
    /// The message store, when the broker has a data directory.
    store: Option<Store>,
    pub memory: Arc<MemoryMonitor>,
    /// Memory and disk alarms; every connection watches them.
    pub alarms: Arc<Alarms>,
    /// Whether the AMQP side runs (rabbitmqctl's stop_app / start_app).
    pub app: crate::app_switch::AppSwitch,
    /// The most channels an AMQP 0-9-1 connection may open, offered in connection.tune to
    /// the connections that start from now on (RabbitMQ's `channel_max`, 2047; 0: no limit).
    /// Set at start (`--channel-max`) and at runtime (PUT /api/nodes/NODE/channel-max).
    pub channel_max: std::sync::atomic::AtomicU16,
    next_connection_id: AtomicU64,
    /// Open connections, their channels and consumers (the HTTP API's view).
    pub registry: Registry,
    /// When the broker started, for uptime.
    pub started_at: std::time::Instant,
    /// Set once `recover` has run: snapshots written before would miss what it restores.
    persisting: AtomicBool,
    /// When the definitions blob is written (`persist.rs`): shared by concurrent changes, in
    /// the background in a cluster.
    definitions_writer: Arc<DefinitionsWriter>,
    /// Changes the next definitions write records (`definitions_journal.rs`).
    pending_changes: parking_lot::Mutex<PendingChanges>,
    /// Handed to vhosts and the access database for their change hooks.
    self_ref: OnceLock<Weak<Broker>>,
    /// Connections, channels and queues opened and closed, and what was published (the
    /// monitoring endpoints read them); shared with every vhost.
    pub counters: Arc<NodeCounters>,
    /// The disk alarm's monitor, once the binary has started one.
    disk: OnceLock<Arc<DiskMonitor>>,
    /// This node's name (`warren@host` unless the binary names it).
    node_name: OnceLock<String>,
    /// Where quorum queues run, once `enable_quorum` opened it.
    quorum: OnceLock<Arc<crate::quorum::QuorumHost>>,
    /// This node's cluster membership, when it runs as a cluster node.
    cluster: OnceLock<Arc<crate::quorum::cluster::ClusterNode>>,
    /// The metadata log definitions changes go through, in a cluster (`replication.rs`).
    replicator: OnceLock<Arc<dyn Replicator>>,
    /// Forwarding links to the nodes serving this node's remote queue records.
    forward_peers: Arc<crate::remote::ForwardPeers>,
    /// Quorum groups per cluster node as placement last counted them, and when
    /// (`replication.rs`, `with_quorum_members`).
    pub(crate) groups_per_node: parking_lot::Mutex<Option<GroupsPerNode>>,
}

/// When placement counted, and the groups each node is a member of.
pub(crate) type GroupsPerNode = (tokio::time::Instant, HashMap<u64, usize>);

impl Broker {
    /// A broker with the default vhost "/".
    /// Without a store everything is in memory; with one, durable definitions and persistent
    /// messages are kept in it (call `recover` with what opening it returned).
    pub fn new(memory_high_watermark_bytes: usize, store: Option<Store>) -> Arc<Broker> {
        let alarms = Arc::new(Alarms::default());
        let memory = Arc::new(MemoryMonitor::new(
            memory_high_watermark_bytes,
            alarms.clone(),
        ));
        let counters = Arc::new(NodeCounters::default());
        let broker = Arc::new(Broker {
            vhosts: RwLock::new(HashMap::new()),
            access: Arc::new(AccessControl::new()),
            user_usage: Arc::new(UserUsage::default()),
            parameters: Arc::new(RuntimeParameters::default()),
            store: store.clone(),
            memory,
            alarms,
            app: Default::default(),
            channel_max: std::sync::atomic::AtomicU16::new(DEFAULT_CHANNEL_MAX),
            next_connection_id: AtomicU64::new(1),
            persisting: AtomicBool::new(false),
            definitions_writer: Arc::default(),
            pending_changes: Default::default(),
            self_ref: OnceLock::new(),
            registry: Registry::default(),
            started_at: std::time::Instant::now(),
            counters,
            disk: OnceLock::new(),
            node_name: OnceLock::new(),
            quorum: OnceLock::new(),
            forward_peers: Arc::default(),
            cluster: OnceLock::new(),
            replicator: OnceLock::new(),
            groups_per_node: parking_lot::Mutex::new(None),
        });
        let _ = broker.self_ref.set(Arc::downgrade(&broker));
        let weak = Arc::downgrade(&broker);
        broker.access.set_change_hook(move || {
            if let Some(broker) = weak.upgrade() {
                broker.persist_with(Urgency::Soon);
            }
        });
        let weak = Arc::downgrade(&broker);
        broker.parameters.set_change_hook(move || {
            if let Some(broker) = weak.upgrade() {
                broker.persist_with(Urgency::Soon);
            }
        });
        let weak = Arc::downgrade(&broker);
        broker.access.set_user_deleted_hook(move |user| {
            if let Some(broker) = weak.upgrade() {
                broker.user_deleted(user);
            }
        });
        if let Some(store) = store {
            broker.forget_failed_publishes(&store);
        }
        broker
            .seed_defaults(DEFAULT_USER, DEFAULT_USER, "/")
            .expect("the built-in defaults are valid");
        broker
    }

    /// What a first boot starts with, as RabbitMQ's default_user/default_pass/default_vhost:
    /// the vhost, and the user tagged administrator with full permissions on it. Other users
    /// go (a broker is born with guest/guest on "/"; other defaults replace them), and so does
    /// "/" when another default vhost is asked for and it holds no queue (a data directory
    /// from before vhosts keeps its queues there). For a first boot only: `recover` says
    /// whether it was one.
    pub fn seed_defaults(&self, user: &str, password: &str, vhost: &str) -> Result<(), String> {
        for op in self.seed_ops(user, password, vhost) {
            self.apply(op).map_err(|e| e.text)?;
        }
        Ok(())
    }

    /// The definitions changes `seed_defaults` applies, for a node that has them made
    /// through its metadata log instead (a cluster's first node). The password is hashed
    /// (with its salt) here, once, so every node keeps the same hash.
    pub fn seed_ops(&self, user: &str, password: &str, vhost: &str) -> Vec<DefinitionOp> {
        let mut ops = Vec::new();
        for existing in self.access.users() {
            if existing.name != user {
                ops.push(DefinitionOp::UserDelete {
                    name: existing.name.clone(),
                });
            }
        }
        for existing in self.vhosts() {
            if existing.name != vhost && existing.queues().is_empty() {
                ops.push(DefinitionOp::VhostDelete {
                    name: existing.name.clone(),
                });
            }
        }
        ops.push(DefinitionOp::VhostAdd {
            name: vhost.to_owned(),
            grant_full_to: None,
        });
        ops.push(DefinitionOp::UserPut {
            name: user.to_owned(),
            password_hash: crate::access::Hashing::Sha256.hash(password),
            hashing_algorithm: crate::access::SHA256.to_owned(),
            tags: vec!["administrator".to_owned()],
        });
        ops.push(DefinitionOp::permission_set(
            vhost,
            user,
            Permission::full(),
        ));
        ops
    }

    /// A task that drops, from every queue's paged tail, the messages whose store write
    /// failed (docs/STORAGE.md §11). Without a runtime (some tests) it does not run; a
    /// queue then drops them when reading its tail back finds the log's end first.
    fn forget_failed_publishes(self: &Arc<Self>, store: &Store) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut failures = store.failed_publishes();
        let broker = Arc::downgrade(self);
        runtime.spawn(async move {
            while let Some(failed) = failures.recv().await {
                let Some(broker) = broker.upgrade() else {
                    return;
                };
                let vhosts: Vec<Arc<VHost>> = broker.vhosts.read().values().cloned().collect();
                for queue in vhosts.iter().flat_map(|v| v.queues()) {
                    queue.forget_failed(&failed);
                }
            }
        });
    }

    /// Writes the snapshot of every vhost and the user database to the store (atomic
    /// replace, fsync'd), or finds that a write made since the change covers it. Called on
    /// durable changes; a no-op without a store and before `recover`.
    pub fn persist(&self) {
        self.persist_with(Urgency::Now);
    }

    /// A durable change was made: written now, or (`Urgency::Soon` on a cluster node, whose
    /// metadata log holds every change) shortly, by the background writer (`persist.rs`).
    pub fn persist_with(&self, urgency: Urgency) {
        self.persist_change(urgency, DurableChange::Whole);
    }

    /// As `persist_with`, for a change the definitions journal can record on its own.
    pub fn persist_change(&self, urgency: Urgency, change: DurableChange) {
        if self.store.is_none() || !self.persisting.load(Ordering::Acquire) {
            return;
        }
        // Noted before the change takes its number, so the write that covers the number
        // records it.
        self.pending_changes.lock().add(change);
        let written = self
            .definitions_writer
            .changed(urgency, &|| self.write_definitions());
        if written && !crate::persist::defer_sync() {
            self.sync_definitions();
        }
    }

    /// Fsyncs the definitions (and queue table) written so far: blocking.
    fn sync_definitions(&self) {
        if let Some(store) = &self.store {
            if let Err(e) = store.sync_metadata(store.metadata_ticket()) {
                tracing::error!(error = %e, "syncing definitions failed");
            }
        }
    }

    /// Writes every change not written yet (at shutdown, before the store closes).
    pub fn flush_definitions(&self) {
        if self.store.is_none() || !self.persisting.load(Ordering::Acquire) {
            return;
        }
        self.definitions_writer.flush(&|| self.write_definitions());
        self.sync_definitions();
    }

    /// From now on changes the metadata log holds are written in the background: once this
    /// node's definitions changes go through the log (`set_replicator`), and before its
    /// member of the metadata group starts (`quorum::join`), whose start re-applies every
    /// change since the group's last snapshot (up to 4,096; each written at once, they kept a
    /// restarted node from serving for minutes on a slow disk). Only the first call counts.
    pub fn write_definitions_in_background(&self) {
        let weak = self.weak();
        self.definitions_writer.start_background(move || {
            let Some(broker) = weak.upgrade() else {
                return false;
            };
            broker.write_definitions();
            broker.sync_definitions();
            true
        });
    }

    /// Records the changes made since the last write: a journal record per changed queue
    /// as it now stands, or the whole blob (`definitions_journal.rs`).
    fn write_definitions(&self) {
        let Some(store) = &self.store else {
            return;
        };
        let pending = std::mem::take(&mut *self.pending_changes.lock());
        let written = if pending.whole {
            store.save_definitions(&self.snapshot().encode())
        } else {
            let records: Vec<Vec<u8>> = pending
                .entries
                .iter()
                .filter_map(|change| Some(self.record_as_it_stands(change)?.encode()))
                .collect();
            // `Vec::from` takes the encoded buffer over where it can, rather than copying it.
            store.append_definitions(&records, &|| Vec::from(self.snapshot().encode()))
        };
        if let Err(e) = written {
            tracing::error!(error = %e, "saving definitions failed");
            // What this write should have recorded is written whole next time.
            self.pending_changes.lock().add(DurableChange::Whole);
        }
    }

    /// The journal record of what `change` touched, as the blob would hold it now (None for
    /// `Whole`, which is never pending with entries).
    fn record_as_it_stands(&self, change: &DurableChange) -> Option<DefinitionRecord> {
        let vhost_of = |name: &str| self.vhost(name);
        Some(match change {
            DurableChange::Whole => return None,
            DurableChange::Queue { vhost, name } => {
                let entry = vhost_of(vhost)
                    .and_then(|v| v.queue(name))
                    .and_then(|q| crate::vhost::durable_queue_definition(&q));
                match entry {
                    Some(queue) => DefinitionRecord::Queue {
                        vhost: vhost.clone(),
                        queue,
                    },
                    None => DefinitionRecord::QueueAbsent {
                        vhost: vhost.clone(),
                        name: name.clone(),
                    },
                }
            }
            DurableChange::Exchange { vhost, name } => {
                let entry = vhost_of(vhost)
                    .and_then(|v| v.exchange(name))
                    .and_then(|e| crate::vhost::durable_exchange_definition(&e));
                match entry {
                    Some(exchange) => DefinitionRecord::Exchange {
                        vhost: vhost.clone(),
                        exchange,
                    },
                    None => DefinitionRecord::ExchangeAbsent {
                        vhost: vhost.clone(),
                        name: name.clone(),
                    },
                }
            }
            DurableChange::Binding { vhost, binding } => {
                let present = vhost_of(vhost).is_some_and(|v| v.has_durable_binding(binding));
                let (vhost, binding) = (vhost.clone(), binding.clone());
                if present {
                    DefinitionRecord::Bound { vhost, binding }
                } else {
                    DefinitionRecord::Unbound { vhost, binding }
                }
            }
        })
    }

    /// Everything durable, as the store keeps it.
    pub fn snapshot(&self) -> Snapshot {
        let vhosts = self
            .vhosts()
            .iter()
            .map(|v| VHostSnapshot {
                name: v.name.clone(),
                metadata: v.metadata(),
                limits: v.limits(),
                tracing: v.tracing(),
                definitions: self.with_homes(v.durable_definitions()),
            })
            .collect();
        let access = AccessSnapshot {
            users: self.access.users().iter().map(|u| (**u).clone()).collect(),
            permissions: self.access.permissions(),
            topic_permissions: self.access.topic_permissions(),
        };
        Snapshot {
            vhosts,
            access: Some(access),
            parameters: self.parameters.list(),
            global_parameters: self.parameters.list_global(),
        }
    }

    /// `definitions` with this node as the home of the classic queues it serves, in a
    /// cluster: every node's snapshot then says where each classic queue lives (a node
    /// installing it makes the same queues and records as the others). On a single node
    /// queues have no home, so a node renamed between restarts keeps serving its queues.
    fn with_homes(&self, mut definitions: Definitions) -> Definitions {
        // The quorum host says so from start-up on, before the metadata member (whose
        // snapshots these are) has started and `cluster()` is set.
        let clustered = self.cluster().is_some()
            || self.quorum.get().is_some_and(|host| host.is_cluster_node());
        if !clustered {
            return definitions;
        }
        for q in &mut definitions.queues {
            if q.home.is_none()
                && q.members.is_empty()
                && !crate::queue_args::is_quorum(&q.arguments)
            {
                q.home = Some(self.node_name().to_owned());
            }
        }
        definitions
    }

    /// Names this node; the first name given sticks (before it, the node is
    /// `default_node_name()`).
    pub fn name_node(&self, name: &str) {
        let _ = self.node_name.set(name.to_owned());
    }

    pub fn node_name(&self) -> &str {
        self.node_name.get_or_init(default_node_name)
    }

    /// The cluster's name: the `cluster_name` global parameter, else this node's name (as
    /// RabbitMQ). Clients see it in connection.start, the HTTP API in /api/cluster-name and
    /// /api/overview, Prometheus in `rabbitmq_identity_info`.
    pub fn cluster_name(&self) -> String {
        self.parameters
            .global(CLUSTER_NAME_PARAMETER)
            .and_then(|json| serde_json::from_str::<String>(&json).ok())
            .unwrap_or_else(|| self.node_name().to_owned())
    }

    /// Renames the cluster on this node (a durable change; start-up's `--cluster-name`).
    /// The HTTP API makes the same change through `change`.
    pub fn set_cluster_name(&self, name: &str) {
        let value_json = serde_json::Value::String(name.to_owned()).to_string();
        let rename = DefinitionOp::GlobalParameterSet {
            name: CLUSTER_NAME_PARAMETER.to_owned(),
            value_json,
        };
        // Setting a global parameter cannot be refused.
        let _ = self.apply(rename);
    }

    /// Brings back what the store kept: the vhosts with their durable topology, each durable
    /// queue's messages, and the user database. Returns true when the store held no user
    /// database (a first boot, or a data directory from before vhosts): the caller then
    /// seeds the configured defaults (`seed_defaults`).
    pub fn recover(&self, recovered: warren_store::Recovered) -> bool {
        let decoded = recovered
            .definitions
            .as_deref()
            .map(Snapshot::decode_versioned);
        let (mut snapshot, blob_current) = match decoded {
            None => (Snapshot::default(), false),
            Some(Ok(decoded)) => decoded,
            Some(Err(e)) => {
                tracing::error!(error = %e, "stored definitions unreadable; starting without them");
                (Snapshot::default(), false)
            }
        };
        crate::definitions_journal::replay(&mut snapshot, &recovered.definitions_changes);
        let first_boot = snapshot.access.is_none();
        if let Some(access) = snapshot.access {
            self.restore_access(access);
            for vhost in self.vhosts() {
                if !snapshot.vhosts.iter().any(|v| v.name == vhost.name) {
                    self.delete_vhost(&vhost.name);
                }
            }
        }
        for v in snapshot.vhosts {
            let vhost = match self.add_vhost(&v.name) {
                Ok(vhost) => vhost,
                Err(e) => {
                    tracing::error!(vhost = %v.name, error = %e, "could not recreate vhost");
                    continue;
                }
            };
            vhost.set_limits(v.limits);
            vhost.set_metadata(v.metadata);
            // `v.tracing` is left: the firehose is off at boot, as RabbitMQ's is (a cluster
            // node gets the cluster's flag from the metadata group after this).
            vhost.restore_definitions(v.definitions, self.node_name());
        }
        self.parameters
            .restore(snapshot.parameters, snapshot.global_parameters);
        self.restore_messages(recovered.queues);
        self.persisting.store(true, Ordering::Release);
        // An older blob is written in the current version at once. A current one, with the
        // journal that follows it, already says what was recovered: rewriting it would cost
        // seconds at a million queues (issue 30) for nothing.
        if !blob_current {
            self.persist();
        }
        first_boot
    }

    fn restore_access(&self, access: AccessSnapshot) {
        for user in self.access.users() {
            self.access.delete_user(&user.name);
        }
        for u in access.users {
            if let Err(e) = self.access.put_user_with_hash(
                &u.name,
                &u.password_hash,
                &u.hashing_algorithm,
                u.tags,
            ) {
                tracing::error!(user = %u.name, error = %e, "could not restore user");
                continue;
            }
            if !u.limits.is_empty() {
                let _ = self.access.set_user_limits(&u.name, u.limits);
            }
        }
        for (vhost, user, p) in access.permissions {
            if let Err(e) = self.access.set_permission(&vhost, &user, p) {
                tracing::error!(%vhost, %user, error = %e, "could not restore permission");
            }
        }
        for (vhost, user, p) in access.topic_permissions {
            if let Err(e) = self.access.set_topic_permission(&vhost, &user, p) {
                tracing::error!(%vhost, %user, error = %e, "could not restore topic permission");
            }
        }
    }

    /// Hands every durable queue the messages the store kept for it, by store id (the vhost
    /// found each queue's id by name as it recreated the queue); the store's queues no vhost
    /// knows any more are dropped with their messages. The store reports only queues holding
    /// messages, so an empty queue costs one bit here.
    fn restore_messages(
        &self,
        mut recovered: HashMap<warren_store::QueueId, warren_store::RecoveredQueue>,
    ) {
        let mut known = roaring::RoaringBitmap::new();
        let mut restored = 0u64;
        let mut durable_queues = 0u64;
        for vhost in self.vhosts() {
            for queue in vhost.queues() {
                let Some(stored) = &queue.stored else {
                    continue;
                };
                known.insert(stored.id.0);
                durable_queues += 1;
                if let Some(rq) = recovered.remove(&stored.id) {
                    restored += rq.live.len();
                    queue.restore(rq);
                }
            }
        }
        if let Some(store) = &self.store {
            for id in store.queue_ids() {
                if !known.contains(id.0) {
                    let _ = store.delete_queue(id);
                }
            }
        }
        tracing::info!(
            restored_messages = restored,
            queues = durable_queues,
            vhosts = self.vhosts.read().len(),
            "recovered durable state"
        );
    }

    /// For the store's clean-shutdown record, once clients are gone: per durable queue, the
    /// store ids of its messages never delivered (`QueueType::undelivered_in_store`).
    pub fn undelivered_in_store(&self) -> Vec<(warren_store::QueueId, RoaringTreemap)> {
        self.vhosts()
            .iter()
            .flat_map(|vhost| vhost.queues())
            .filter_map(|queue| queue.undelivered_in_store())
            // An empty queue has nothing to mark: left out, it costs the next open nothing.
            .filter(|(_, never)| !never.is_empty())
            .collect()
    }

    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// Every vhost, by name.
    pub fn vhosts(&self) -> Vec<Arc<VHost>> {
        let mut all: Vec<Arc<VHost>> = self.vhosts.read().values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Creates a vhost with the predeclared exchanges, or returns the existing one
    /// (idempotent, like RabbitMQ's PUT /api/vhosts/NAME).
    pub fn add_vhost(&self, name: &str) -> Result<Arc<VHost>, String> {
        if name.is_empty() {
            return Err("vhost name must not be empty".into());
        }
        if name.len() > warren_codec::ShortStr::MAX_LEN {
            return Err(format!(
                "vhost name is longer than {} bytes",
                warren_codec::ShortStr::MAX_LEN
            ));
        }
        let (vhost, created) = {
            let mut vhosts = self.vhosts.write();
            match vhosts.get(name) {
                Some(existing) => (existing.clone(), false),
                None => {
                    let vhost = VHost::new(
                        name,
                        self.memory.clone(),
                        self.store.clone(),
                        self.counters.clone(),
                    );
                    if let Some(host) = self.quorum.get() {
                        vhost.set_quorum_host(host.clone());
                    }
                    vhost.set_forward_peers(self.forward_peers.clone());
                    let weak = self.weak();
                    vhost.set_durable_change_hook(move |urgency, change| {
                        if let Some(broker) = weak.upgrade() {
                            broker.persist_change(urgency, change);
                        }
                    });
                    vhosts.insert(name.to_owned(), vhost.clone());
                    (vhost, true)
                }
            }
        };
        if created {
            self.persist_with(Urgency::Soon);
        }
        Ok(vhost)
    }

    /// Deletes a vhost: its connections are closed, its queues (with their stored messages),
    /// exchanges and bindings go, and so do the permissions on it. False if there was none.
    pub fn delete_vhost(&self, name: &str) -> bool {
        let Some(vhost) = self.vhosts.write().remove(name) else {
            return false;
        };
        vhost.shut_down();
        // Forgetting the permissions persists the snapshot, now without the vhost.
        self.access.forget_vhost(name);
        self.parameters.forget_vhost(name);
        true
    }

    /// Deletes a user; `AccessControl::delete_user` does the same (the broker's hook closes
    /// the user's connections either way). False if there was none.
    pub fn delete_user(&self, name: &str) -> bool {
        self.access.delete_user(name)
    }

    /// Closes the connections of a deleted user ("user 'u' is deleted", as RabbitMQ).
    fn user_deleted(&self, name: &str) {
        let reason = format!("user '{name}' is deleted");
        for vhost in self.vhosts() {
            vhost.force_close_connections(Some(name), &reason);
        }
    }

    /// Lets every vhost (present and future) create quorum queues on `host`. Call before
    /// `recover`, so the quorum queues it recreates find their groups' logs.
    pub fn enable_quorum(&self, host: Arc<crate::quorum::QuorumHost>) {
        if self.quorum.set(host.clone()).is_err() {
            return;
        }
        for vhost in self.vhosts() {
            vhost.set_quorum_host(host.clone());
        }
    }

    pub fn quorum(&self) -> Option<&Arc<crate::quorum::QuorumHost>> {
        self.quorum.get()
    }

    /// Makes this node a cluster node (the first call sticks).
    pub fn enable_cluster(&self, cluster: Arc<crate::quorum::cluster::ClusterNode>) {
        if let Some(quorum) = self.quorum.get() {
            quorum.set_cluster(&cluster);
        }
        let _ = self.cluster.set(cluster);
    }

    /// Waits (at most `patience`) until every quorum queue's member on this node runs and
    /// has applied the log it found (`QuorumQueue::recovered`): a single node's boot, before
    /// it accepts clients.
    pub async fn quorum_queues_recovered(&self, patience: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        for vhost in self.vhosts() {
            for queue in vhost.queues() {
                if let Some(qq) = QuorumQueue::of(&queue) {
                    qq.recovered(deadline).await;
                }
            }
        }
    }

    /// This node's forwarding links, by peer node name (`remote/peers.rs`).
    pub fn forward_peers(&self) -> &Arc<crate::remote::ForwardPeers> {
        &self.forward_peers
    }

    /// This node's cluster membership; None on a single node.
    pub fn cluster(&self) -> Option<&Arc<crate::quorum::cluster::ClusterNode>> {
        self.cluster.get()
    }

    /// The node names this broker knows, for the views of quorum queues' groups: its own,
    /// and in a cluster every member's with whether the failure detector sees it up.
    pub fn node_names(&self) -> NodeNames {
        match self.cluster() {
            Some(cluster) => NodeNames::new(
                cluster.id(),
                cluster.name().to_owned(),
                cluster
                    .status()
                    .members
                    .into_iter()
                    .filter(|member| member.id != cluster.id())
                    .map(|member| (member.id, (member.name, member.running)))
                    .collect(),
            ),
            None => NodeNames::new(
                self.quorum()
                    .map_or(crate::quorum::LOCAL_NODE_ID, |host| host.node_id()),
                self.node_name().to_owned(),
                HashMap::new(),
            ),
        }
    }

    /// Makes definitions changes go through `replicator` from now on (`replication.rs`).
    /// Only the first call counts.
    pub fn set_replicator(&self, replicator: Arc<dyn Replicator>) {
        if self.replicator.set(replicator).is_ok() {
            self.write_definitions_in_background();
        }
    }

    /// A handle to this broker for tasks that must not keep it alive.
    pub(crate) fn weak(&self) -> Weak<Broker> {
        self.self_ref.get().cloned().unwrap_or_default()
    }

    pub fn replicator(&self) -> Option<&Arc<dyn Replicator>> {
        self.replicator.get()
    }

    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// Hands the broker the disk monitor the binary started, so that free space and the
    /// limit can be reported. Only the first call counts.
    pub fn set_disk_monitor(&self, disk: Arc<DiskMonitor>) {
        let _ = self.disk.set(disk);
    }

    pub fn disk_monitor(&self) -> Option<&Arc<DiskMonitor>> {
        self.disk.get()
    }

    pub fn next_connection_id(&self) -> ConnectionId {
        self.next_connection_id.fetch_add(1, Relaxed)
    }
}

/// Membership changes record a group's new members through the broker's definitions
/// changes.
impl crate::quorum::membership::MembersRecord for Broker {
    fn record(
        &self,
        op: DefinitionOp,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            self.change(op)
                .result()
                .await
                .map(|_| ())
                .map_err(|e| e.text)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConnectionEvent, QueueDeclaration};
    use warren_codec::{FieldTable, ReplyCode};

    fn declare(vhost: &Arc<VHost>, name: &str) {
        declare_with(vhost, name, false);
    }

    fn declare_with(vhost: &Arc<VHost>, name: &str, durable: bool) {
        vhost
            .declare_queue(
                QueueDeclaration {
                    durable,
                    ..QueueDeclaration::plain(name)
                },
                1,
            )
            .unwrap();
    }

    #[test]
    fn vhosts_are_created_idempotently_with_their_own_entities() {
        let broker = Broker::new(usize::MAX, None);
        assert_eq!(broker.vhosts().len(), 1);
        let v = broker.add_vhost("v1").unwrap();
        assert_eq!(v.name(), "v1");
        assert!(Arc::ptr_eq(&v, &broker.add_vhost("v1").unwrap()));
        assert!(broker.add_vhost("").is_err());
        assert!(v.exchange("amq.topic").is_some(), "predeclared exchanges");
        declare(&v, "q");
        assert!(v.queue("q").is_some());
        assert!(broker.vhost("/").unwrap().queue("q").is_none());
        let names: Vec<String> = broker.vhosts().iter().map(|v| v.name.clone()).collect();
        assert_eq!(names, ["/", "v1"]);
    }

    #[test]
    fn deleting_a_vhost_removes_everything_and_closes_connections() {
        let broker = Broker::new(usize::MAX, None);
        let v = broker.add_vhost("v1").unwrap();
        declare(&v, "q");
        broker
            .access
            .set_permission("v1", "guest", crate::access::Permission::full())
            .unwrap();
        let (tx, mut rx) = crate::event_channel::event_channel();
        v.open_connection(7, "guest", String::new(), tx).unwrap();
        assert!(broker.delete_vhost("v1"));
        assert!(!broker.delete_vhost("v1"));
        assert!(broker.vhost("v1").is_none());
        assert!(v.queues().is_empty() && v.exchanges().is_empty());
        assert!(broker.access.permission("v1", "guest").is_none());
        match rx.try_recv() {
            Ok(ConnectionEvent::Close { code, text }) => {
                assert_eq!(code, ReplyCode::ConnectionForced);
                assert_eq!(text, "vhost 'v1' is deleted");
            }
            other => panic!("expected a close, got {other:?}"),
        }
        let (tx, _rx) = crate::event_channel::event_channel();
        assert!(
            v.open_connection(8, "guest", String::new(), tx).is_err(),
            "deleted vhost"
        );
    }

    #[test]
    fn a_version_1_blob_is_read_as_the_default_vhost_and_rewritten() {
        use crate::definitions::{Definitions, QueueDefinition};
        use warren_store::{Backend, FaultyBackend, StoreOptions};
        let disk = Arc::new(FaultyBackend::new(3));
        let backend: Arc<dyn Backend> = disk.clone();
        let (store, _) = Store::open_with_backend(backend, StoreOptions::default()).unwrap();
        let v1 = Definitions {
            queues: vec![QueueDefinition {
                name: "legacy".into(),
                auto_delete: false,
                arguments: FieldTable::new(),
                members: Vec::new(),
                home: None,
            }],
            ..Definitions::default()
        };
        store.save_definitions(&v1.encode()).unwrap();
        store.close().unwrap();

        let backend: Arc<dyn Backend> = disk.clone();
        let (store, recovered) =
            Store::open_with_backend(backend, StoreOptions::default()).unwrap();
        let broker = Broker::new(usize::MAX, Some(store.clone()));
        assert!(
            broker.recover(recovered),
            "no user database yet: a first boot"
        );
        // Another default vhost does not take "/" and its queue away.
        broker.seed_defaults("admin", "pw", "prod").unwrap();
        assert!(broker.vhost("/").unwrap().queue("legacy").is_some());
        assert!(broker.vhost("prod").is_some());
        let stored = store.load_definitions().unwrap().blob.unwrap();
        let snapshot = crate::snapshot::Snapshot::decode(&stored).unwrap();
        let access = snapshot.access.expect("rewritten as version 2");
        assert_eq!(access.users.len(), 1);
        assert_eq!(access.users[0].name, "admin");
        assert_eq!(snapshot.vhosts.len(), 2);
    }

    /// Issue 30: a restart with a million empty durable queues took 15-30 s, mostly per-queue
    /// work that an empty queue does not need. Counted, not timed: the store reports no
    /// empty queue, the clean-shutdown record holds none, and the boot writes no metadata.
    #[test]
    fn a_restart_does_no_per_queue_store_work_for_empty_durable_queues() {
        use warren_store::{Backend, FaultyBackend, StoreOptions};
        let disk = Arc::new(FaultyBackend::new(7));
        let open = || {
            let backend: Arc<dyn Backend> = disk.clone();
            Store::open_with_backend(backend, StoreOptions::default()).unwrap()
        };
        let (store, recovered) = open();
        let broker = Broker::new(usize::MAX, Some(store.clone()));
        assert!(broker.recover(recovered));
        broker.seed_defaults("guest", "guest", "/").unwrap();
        let vhost = broker.vhost("/").unwrap();
        for i in 0..300 {
            declare_with(&vhost, &format!("q{i}"), true);
        }
        // A store queue no definition names (its declare's definitions write was lost).
        let orphan = store
            .register_queue(&vhost.store_queue_name("orphan"))
            .unwrap();
        broker.flush_definitions();
        let undelivered = broker.undelivered_in_store();
        assert!(undelivered.is_empty(), "{undelivered:?}");
        drop((vhost, broker));
        store.close_clean(&undelivered).unwrap();

        let (store, recovered) = open();
        assert!(recovered.queues.is_empty(), "empty queues are not reported");
        assert_eq!(store.queue_ids().len(), 301);
        let written = store.metadata_ticket();
        let broker = Broker::new(usize::MAX, Some(store.clone()));
        assert!(!broker.recover(recovered), "the user database came back");
        let vhost = broker.vhost("/").unwrap();
        for i in 0..300 {
            let queue = vhost.queue(&format!("q{i}")).expect("recovered");
            assert!(queue.durable && queue.stored.is_some());
        }
        // Only the orphan's deletion was written: the definitions blob was not rewritten.
        assert_eq!(store.metadata_ticket(), written + 1);
        assert!(!store.queue_ids().contains(&orphan));
        assert_eq!(store.queue_ids().len(), 300);
    }

    #[test]
    fn connection_limit() {
        let broker = Broker::new(usize::MAX, None);
        let v = broker.add_vhost("v1").unwrap();
        v.set_limits(crate::VHostLimits {
            max_connections: Some(1),
            max_queues: None,
        });
        let (tx, _rx) = crate::event_channel::event_channel();
        v.open_connection(1, "u", String::new(), tx.clone())
            .unwrap();
        let refused = v
            .open_connection(2, "u", String::new(), tx.clone())
            .unwrap_err();
        assert_eq!(refused.code, ReplyCode::NotAllowed);
        assert_eq!(
            refused.text,
            "access to vhost 'v1' refused for user 'u': connection limit (1) is reached"
        );
        v.close_connection(1);
        v.open_connection(2, "u", String::new(), tx).unwrap();
    }
}

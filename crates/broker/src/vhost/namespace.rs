//! `VHost` itself: the namespace of exchanges and queues with their bindings and policies,
//! and the declare, delete, bind, unbind and route operations clients run on them, with
//! RabbitMQ's checks and reply codes. The rest of the vhost's work is in the sibling files
//! (publish, dead letters, policies, durability, lifecycle, remote queues, mirroring, the
//! firehose's trace).

use super::properties::{VHostLimits, VHostMetadata};
use crate::churn::{self, NodeCounters};
use crate::classic::ClassicQueue;
use crate::consumer::{ConnectionEvent, ConnectionId, Consumer};
use crate::equivalence::{check_args, check_flags, inequivalent};
use crate::error::{AmqpError, AmqpResult};
use crate::exchange::{Binding, Destination, Exchange, ExchangeKind};
use crate::headers_match::XMatch;
use crate::memory::MemoryMonitor;
use crate::named_entries::InOrder;
use crate::names;
use crate::persist::Urgency;
use crate::policy::{EntityKind, Policies};
use crate::queue::{Queue, QueueHome, StoredQueue};
use crate::queue_activity::{Changed, QueueActivity, ReaderId};
use crate::queue_args::{
    check_declare_arguments, is_quorum, queue_limits, CLASSIC_QUEUE_ARGS, QUORUM_QUEUE_ARGS,
};
use crate::quorum::{QuorumHost, QuorumQueue};
use crate::remote::RemoteQueue;
use crate::versioned_map::{LastLookup, VersionedMap};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use warren_codec::{FieldTable, FieldValue, ReplyCode, ShortStr};
use warren_store::Store;

/// How deep exchange-to-exchange bindings are followed; deeper chains are cut (and cycles
/// are caught earlier by the visited list).
const MAX_EXCHANGE_HOPS: usize = 64;

/// How long a protocol session waits for the link to a queue's serving node that is not held
/// down (`VHost::link_to_await`): a link is made within a few dial attempts of the node
/// being up (the dialler wakes on liveness changes), well inside this.
pub const LINK_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct ExchangeDeclaration {
    pub name: ShortStr,
    pub kind: String,
    pub passive: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
}

#[derive(Debug, Clone)]
pub struct QueueDeclaration {
    /// Empty asks for a server-named queue.
    pub name: ShortStr,
    pub passive: bool,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    pub arguments: FieldTable,
}

impl QueueDeclaration {
    /// A plain declare of `name`: transient, not exclusive, no auto-delete, no arguments
    /// (what tests and tools that only need a queue ask for).
    pub fn plain(name: &str) -> QueueDeclaration {
        QueueDeclaration {
            name: ShortStr::from(name),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        }
    }
}

pub struct VHost {
    pub name: String,
    /// Exchanges and queues by name; every write advances the map's generation, which
    /// publishing channels' `LastLookup`s check (`versioned_map.rs`).
    pub(super) exchanges: VersionedMap<Exchange>,
    pub(super) queues: VersionedMap<Queue>,
    /// The queues changed since each monitoring reader last looked (`queue_activity.rs`).
    pub(super) queue_activity: QueueActivity,
    /// Policies and operator policies (`vhost/policies.rs`); taken before `queues` and
    /// `exchanges` when both are.
    pub(super) policies: RwLock<Policies>,
    /// Direct reply-to consumers by the address suffix handed out in `reply_to`.
    pub(super) reply_consumers: Mutex<HashMap<String, Weak<Consumer>>>,
    pub memory: Arc<MemoryMonitor>,
    /// The message store, when the broker runs with a data directory.
    pub store: Option<Store>,
    /// Where quorum queues' Raft groups run, when the broker has a data directory.
    pub(super) quorum: OnceLock<Arc<QuorumHost>>,
    /// The node's forwarding links by peer, for remote queue records (set by the broker).
    pub(super) forward_peers: OnceLock<Arc<crate::remote::ForwardPeers>>,
    /// How durable changes reach the store: the owning broker's snapshot writer.
    #[allow(clippy::type_complexity)]
    pub(super) on_durable_change: OnceLock<
        Box<
            dyn Fn(crate::persist::Urgency, crate::definitions_journal::DurableChange)
                + Send
                + Sync,
        >,
    >,
    pub(super) connections: Mutex<HashMap<ConnectionId, super::lifecycle::OpenConnection>>,
    pub(super) limits: RwLock<VHostLimits>,
    pub(super) metadata: RwLock<VHostMetadata>,
    pub(super) deleted: AtomicBool,
    /// The firehose (`vhost/trace.rs`): off unless an operator turned it on; the one check
    /// the publish and deliver paths make.
    pub(super) tracing: AtomicBool,
    /// The node name a traced copy's `node` header gives, set when tracing is turned on.
    pub(super) trace_node: RwLock<Arc<str>>,
    /// The broker's monitoring counters: queue churn and publish sizes are counted here.
    pub counters: Arc<NodeCounters>,
}

impl std::fmt::Debug for VHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VHost").field("name", &self.name).finish()
    }
}

pub(super) fn not_found_queue(vhost: &str, name: &str) -> AmqpError {
    AmqpError::not_found(format!("no queue '{name}' in vhost '{vhost}'"))
}

pub(super) fn not_found_exchange(vhost: &str, name: &str) -> AmqpError {
    AmqpError::not_found(format!("no exchange '{name}' in vhost '{vhost}'"))
}

pub(super) fn locked(vhost: &str, queue: &str) -> AmqpError {
    AmqpError::resource_locked(format!(
        "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
    ))
}

impl VHost {
    pub fn new(
        name: &str,
        memory: Arc<MemoryMonitor>,
        store: Option<Store>,
        counters: Arc<NodeCounters>,
    ) -> Arc<VHost> {
        let vhost = VHost {
            name: name.to_owned(),
            exchanges: VersionedMap::default(),
            queues: VersionedMap::default(),
            queue_activity: QueueActivity::default(),
            policies: RwLock::new(Policies::default()),
            reply_consumers: Mutex::new(HashMap::new()),
            memory,
            store,
            quorum: OnceLock::new(),
            forward_peers: OnceLock::new(),
            on_durable_change: OnceLock::new(),
            connections: Mutex::new(HashMap::new()),
            limits: RwLock::new(VHostLimits::default()),
            metadata: RwLock::new(VHostMetadata::default()),
            deleted: AtomicBool::new(false),
            tracing: AtomicBool::new(false),
            trace_node: RwLock::new(Arc::from("")),
            counters,
        };
        {
            let mut ex = vhost.exchanges.write();
            // (name, kind, internal): RabbitMQ's predeclared exchanges. The firehose's
            // is internal, so that only the broker publishes to it (`vhost/trace.rs`).
            for (name, kind, internal) in [
                ("", ExchangeKind::Direct, false),
                ("amq.direct", ExchangeKind::Direct, false),
                ("amq.fanout", ExchangeKind::Fanout, false),
                ("amq.topic", ExchangeKind::Topic, false),
                ("amq.headers", ExchangeKind::Headers, false),
                ("amq.match", ExchangeKind::Headers, false),
                (names::TRACE_EXCHANGE, ExchangeKind::Topic, true),
            ] {
                ex.insert(Arc::new(Exchange::new(
                    ShortStr::from_static(name),
                    kind,
                    true,
                    false,
                    internal,
                    FieldTable::new(),
                )));
            }
        }
        Arc::new(vhost)
    }

    pub fn exchange(&self, name: &str) -> Option<Arc<Exchange>> {
        self.exchanges.get(name)
    }

    /// `exchange`, answered from `last` while no exchange of the vhost changed since it was
    /// filled (a publishing channel's memory of its exchange).
    pub fn exchange_via(
        &self,
        name: &str,
        last: &mut LastLookup<Exchange>,
    ) -> Option<Arc<Exchange>> {
        self.exchanges.get_via(name, last)
    }

    pub fn queue(&self, name: &str) -> Option<Arc<Queue>> {
        self.queues.get(name)
    }

    /// The queues, in name order.
    pub fn queues(&self) -> Vec<Arc<Queue>> {
        self.queues.read().in_name_order().cloned().collect()
    }

    /// The exchanges, in name order.
    pub fn exchanges(&self) -> Vec<Arc<Exchange>> {
        self.exchanges.read().in_name_order().cloned().collect()
    }

    /// Calls `read` with the queues in name order, under the map's read lock (no declare or
    /// delete meanwhile): a page of a list reads the queues from its offset on, and no other.
    pub fn read_queues_in_order<R>(
        &self,
        read: impl for<'a> FnOnce(&mut dyn InOrder<'a, Arc<Queue>>) -> R,
    ) -> R {
        read(&mut self.queues.read().in_name_order())
    }

    /// `read_queues_in_order` for the exchanges.
    pub fn read_exchanges_in_order<R>(
        &self,
        read: impl for<'a> FnOnce(&mut dyn InOrder<'a, Arc<Exchange>>) -> R,
    ) -> R {
        read(&mut self.exchanges.read().in_name_order())
    }

    /// The queues changed since `reader` last asked (`queue_activity.rs`).
    pub fn changed_queues(&self, reader: ReaderId) -> Changed {
        self.queue_activity.take(reader)
    }

    /// See [`QueueActivity::forget`](crate::queue_activity::QueueActivity::forget).
    pub fn forget_reader(&self, reader: ReaderId) {
        self.queue_activity.forget(reader);
    }

    /// How many queues `queues` would give, without copying them out (the overview's count).
    pub fn queue_count(&self) -> usize {
        self.queues.read().len()
    }

    pub fn exchange_count(&self) -> usize {
        self.exchanges.read().len()
    }

    // ---- exchanges -------------------------------------------------------------------

    pub fn declare_exchange(&self, d: ExchangeDeclaration) -> AmqpResult<()> {
        if d.name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        let existing = self.exchange(&d.name);
        if d.passive {
            return existing
                .map(|_| ())
                .ok_or_else(|| not_found_exchange(&self.name, &d.name));
        }
        // The type is checked before anything else, for an existing exchange too. An
        // unknown one closes the connection (503) as RabbitMQ 3.x did up to 3.12; 3.13 made
        // it a 406 channel error.
        let Some(kind) = ExchangeKind::parse(&d.kind) else {
            return Err(AmqpError::new(
                ReplyCode::CommandInvalid,
                format!("unknown exchange type '{}'", d.kind),
            ));
        };
        if let Some(existing) = existing {
            let name = &d.name;
            if existing.kind != kind {
                return Err(inequivalent(
                    ("exchange", name, &self.name),
                    "type",
                    kind.as_str(),
                    existing.kind.as_str(),
                ));
            }
            check_flags(
                ("exchange", name, &self.name),
                &[
                    ("durable", d.durable, existing.durable),
                    ("auto_delete", d.auto_delete, existing.auto_delete),
                    ("internal", d.internal, existing.internal),
                ],
            )?;
            return check_args(
                ("exchange", name, &self.name),
                &["alternate-exchange"],
                &d.arguments,
                &existing.arguments,
            );
        }
        if names::has_reserved_prefix(&d.name) {
            return Err(AmqpError::access_refused(format!(
                "exchange name '{}' contains reserved prefix 'amq.*'",
                d.name
            )));
        }
        match d.arguments.get("alternate-exchange") {
            None | Some(FieldValue::LongStr(_)) => {}
            Some(other) => {
                return Err(AmqpError::precondition(format!(
                    "invalid type '{}' for arg 'alternate-exchange' in exchange '{}' in vhost '{}'",
                    other.type_name(),
                    d.name,
                    self.name
                )))
            }
        }
        let exchange = Exchange::new(
            d.name.clone(),
            kind,
            d.durable,
            d.auto_delete,
            d.internal,
            d.arguments,
        );
        let durable = exchange.durable;
        {
            let policies = self.policies.read();
            exchange.apply_policies(policies.applied(EntityKind::Exchange, &d.name));
            self.exchanges.write().get_or_insert(Arc::new(exchange));
        }
        if durable {
            self.persist_exchange(&d.name);
        }
        Ok(())
    }

    /// exchange.delete: the exchange goes with its bindings, those that lead to it too, and
    /// auto-delete exchanges this leaves without bindings (see `remove_exchanges`).
    pub fn delete_exchange(&self, name: &str, if_unused: bool) -> AmqpResult<()> {
        if name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        if names::has_reserved_prefix(name) {
            return Err(AmqpError::access_refused(format!(
                "deletion of system exchange '{name}' in vhost '{}' not allowed",
                self.name
            )));
        }
        let Some(exchange) = self.exchange(name) else {
            // RabbitMQ treats deleting a missing exchange as success.
            return Ok(());
        };
        // In use means: the source of a binding. Being a destination does not count.
        if if_unused && exchange.has_bindings() {
            return Err(AmqpError::precondition(format!(
                "exchange '{name}' in vhost '{}' in use",
                self.name
            )));
        }
        if self.remove_exchanges(vec![exchange]) {
            self.persist_definitions();
        }
        Ok(())
    }

    // ---- queues ----------------------------------------------------------------------

    /// Checks an exclusive queue is used only by the connection that owns it.
    /// Lets this vhost create quorum queues on `host` (set once, by the broker).
    pub fn set_quorum_host(&self, host: Arc<QuorumHost>) {
        let _ = self.quorum.set(host);
    }

    /// Shares the node's forwarding links with this vhost's remote records (set once, by
    /// the broker; a vhost made alone gets its own, empty).
    pub fn set_forward_peers(&self, peers: Arc<crate::remote::ForwardPeers>) {
        let _ = self.forward_peers.set(peers);
    }

    pub fn forward_peers(&self) -> Arc<crate::remote::ForwardPeers> {
        self.forward_peers.get_or_init(Arc::default).clone()
    }

    pub fn check_exclusive(&self, queue: &Queue, connection: ConnectionId) -> AmqpResult<()> {
        match queue.exclusive_owner {
            Some(owner) if owner != connection => Err(locked(&self.name, &queue.name)),
            _ => Ok(()),
        }
    }

    /// A queue the connection may use, or 404/405.
    pub fn queue_for(&self, name: &str, connection: ConnectionId) -> AmqpResult<Arc<Queue>> {
        let queue = self
            .queue(name)
            .ok_or_else(|| not_found_queue(&self.name, name))?;
        self.check_exclusive(&queue, connection)?;
        Ok(queue)
    }

    /// `queue_for` for what needs the queue's messages now (basic.consume, basic.get,
    /// queue.purge): a queue whose serving node is unreachable answers 404 too. (Bindings,
    /// applied on every node from the metadata log, do not look: whether a node's link is
    /// up must not change what the log makes of an op.)
    pub fn queue_to_use(&self, name: &str, connection: ConnectionId) -> AmqpResult<Arc<Queue>> {
        let queue = self.queue_for(name, connection)?;
        self.check_reachable(&queue)?;
        Ok(queue)
    }

    /// The node to wait for before using queue `name` (basic.consume, basic.get,
    /// queue.purge, queue.declare): the queue is served by a node that is not held down but
    /// is not linked yet — nodes still forming, or a link being made again. The protocol
    /// session waits at most [`LINK_WAIT`] for the link, then goes on (and answers 404 if it
    /// is still not up, `check_reachable`): a client declaring and consuming while the
    /// cluster forms is not refused for a link that comes a moment later.
    pub fn link_to_await(&self, name: &str) -> Option<Arc<crate::remote::PeerLink>> {
        let queue = self.queue(name)?;
        let peer = RemoteQueue::of(&queue)?.peer();
        peer.link_pending().then(|| peer.clone())
    }

    /// A queue whose serving node is unreachable answers 404, as RabbitMQ answers for a
    /// durable classic queue whose home node is down.
    pub fn check_reachable(&self, queue: &Queue) -> AmqpResult<()> {
        match RemoteQueue::of(queue) {
            Some(r) if !r.is_reachable() => Err(AmqpError::not_found(format!(
                "home node '{}' of durable queue '{}' in vhost '{}' is down or inaccessible",
                r.node(),
                queue.name,
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// queue.declare; returns the queue's name with its message and consumer counts. The
    /// checks run in RabbitMQ's order: the reserved prefix, then (for an existing queue)
    /// exclusivity before flags and arguments, or (for a new one) the arguments.
    pub fn declare_queue(
        self: &Arc<Self>,
        d: QueueDeclaration,
        connection: ConnectionId,
    ) -> AmqpResult<(ShortStr, u32, u32)> {
        self.declare_queue_named(d, connection, false)
    }

    /// queue.declare where `server_named` says the name (an `amq.gen-` one) was chosen by
    /// this node before the declaration became a definitions change, so that every node
    /// applying it creates the same queue; an empty name still gets a fresh one here.
    pub fn declare_queue_named(
        self: &Arc<Self>,
        d: QueueDeclaration,
        connection: ConnectionId,
        server_named: bool,
    ) -> AmqpResult<(ShortStr, u32, u32)> {
        self.declare_queue_at(d, connection, server_named, None, Vec::new())
    }

    /// `declare_queue_named` in a cluster: a classic queue created here is served by `home`
    /// when given (another node, its queue's home: this node holds a remote record of it),
    /// else by this node; a quorum queue's Raft group spans `members` (node ids, chosen by
    /// the declaring node in `Broker::change`; empty: a group of this node alone). Every
    /// check runs the same either way, so every node applying a declaration reaches the
    /// same answer.
    pub fn declare_queue_at(
        self: &Arc<Self>,
        d: QueueDeclaration,
        connection: ConnectionId,
        server_named: bool,
        home: Option<&Arc<crate::remote::PeerLink>>,
        members: Vec<u64>,
    ) -> AmqpResult<(ShortStr, u32, u32)> {
        if d.name.starts_with(names::DIRECT_REPLY_TO) {
            // Passive or not, a declare of a direct reply-to name only asks whether it is
            // there: the pseudo-queue is, and so is the address of a live reply consumer,
            // each with its one consumer.
            let live =
                d.name.as_str() == names::DIRECT_REPLY_TO || self.reply_consumer(&d.name).is_some();
            return match live {
                true => Ok((d.name, 0, 1)),
                false => Err(not_found_queue(&self.name, &d.name)),
            };
        }
        if d.passive {
            let existing = self
                .queue(&d.name)
                .ok_or_else(|| not_found_queue(&self.name, &d.name))?;
            self.check_exclusive(&existing, connection)?;
            self.check_reachable(&existing)?;
            existing.touch();
            let (m, c) = (existing.message_count(), existing.consumer_count());
            return Ok((d.name, m, c));
        }
        let name = if d.name.is_empty() {
            ShortStr::from(names::generated_queue_name())
        } else if server_named {
            d.name
        } else if names::has_reserved_prefix(&d.name) {
            // Even for a queue that exists (a server-named one): only passive may name it.
            return Err(AmqpError::access_refused(format!(
                "queue name '{}' contains reserved prefix 'amq.*'",
                d.name
            )));
        } else {
            d.name
        };
        churn::bump(&self.counters.queues.declared);
        let owner = d.exclusive.then_some(connection);
        // An exclusive queue never outlives its connection, so it is never durable.
        let durable = d.durable && !d.exclusive;
        if let Some(existing) = self.queue(&name) {
            // Exclusive to another connection, or exclusive on one side only: 405, before
            // any other difference is looked at.
            if existing.exclusive_owner != owner {
                return Err(locked(&self.name, &existing.name));
            }
            check_flags(
                ("queue", &name, &self.name),
                &[
                    ("durable", durable, existing.durable),
                    ("auto_delete", d.auto_delete, existing.auto_delete),
                ],
            )?;
            // By the type served (a remote record of a quorum queue is checked as one).
            let is_quorum = existing.type_name() == "quorum";
            let type_args = match is_quorum {
                true => QUORUM_QUEUE_ARGS,
                false => CLASSIC_QUEUE_ARGS,
            };
            let redeclared = self.as_redeclared(&name, is_quorum, &d.arguments);
            check_args(
                ("queue", &name, &self.name),
                type_args,
                redeclared.as_ref().unwrap_or(&d.arguments),
                &existing.arguments,
            )?;
            self.check_reachable(&existing)?;
            existing.touch();
            let (m, c) = (existing.message_count(), existing.consumer_count());
            return Ok((name, m, c));
        }
        let mut arguments = d.arguments;
        if self.quorum.get().is_some_and(|host| host.is_cluster_node()) {
            // In a cluster the declaring node decided (`Broker::change`): a replicated queue
            // reaches here as a quorum queue with its members. Made one here, every node would
            // start a group of its own; so a declaration its node made before that node
            // applied the policy stays what it was declared as, on every node alike.
            self.warn_mirroring_not_applied(&name, &arguments);
        } else {
            self.mirror_as_quorum(&name, d.durable, d.exclusive, d.auto_delete, &mut arguments);
        }
        check_declare_arguments(&name, &self.name, &arguments)?;
        if is_quorum(&arguments) {
            // rabbit_quorum_queue:declare's checks, in its order.
            let invalid = [
                (d.auto_delete, "auto-delete"),
                (d.exclusive, "exclusive-owner"),
                (!d.durable, "non-durable"),
            ]
            .into_iter()
            .find_map(|(refused, property)| refused.then_some(property));
            if let Some(property) = invalid {
                return Err(AmqpError::precondition(format!(
                    "invalid property '{property}' for queue '{name}' in vhost '{}'",
                    self.name
                )));
            }
            if self.quorum.get().is_none() {
                return Err(AmqpError::precondition(format!(
                    "cannot declare quorum queue '{name}' in vhost '{}': the broker has no data directory",
                    self.name
                )));
            }
        }
        if let Some(limit) = self.limits().max_queues {
            if self.queues.read().len() >= limit as usize {
                return Err(AmqpError::precondition(format!(
                    "cannot declare queue '{name}': queue limit in vhost '{}' ({limit}) is reached",
                    self.name
                )));
            }
        }
        let queue = match home {
            Some(peer) if owner.is_none() && !is_quorum(&arguments) => {
                self.install_remote_queue(name, durable, d.auto_delete, arguments, peer, "classic")?
            }
            _ => self.create_queue(name, durable, owner, d.auto_delete, arguments, members)?,
        };
        churn::bump(&self.counters.queues.created);
        if queue.stored.is_some() {
            // Recovery drops a stored queue the definitions do not name, with its messages.
            self.persist_queue(&queue.name, Urgency::Now);
        } else if super::durability::is_durable_queue(&queue) {
            self.persist_queue(&queue.name, Urgency::Soon);
        }
        Ok((queue.name.clone(), 0, 0))
    }

    /// Creates and registers a queue (durable, non-exclusive ones in the store too). The
    /// default exchange needs no binding: it routes by looking the name up.
    pub(super) fn create_queue(
        self: &Arc<Self>,
        name: ShortStr,
        durable: bool,
        owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
        members: Vec<u64>,
    ) -> AmqpResult<Arc<Queue>> {
        let queue = self.build_queue(
            name.clone(),
            durable,
            owner,
            auto_delete,
            arguments,
            members,
        )?;
        let queue = {
            let policies = self.policies.read();
            queue.apply_policies(policies.applied(EntityKind::Queue, &name));
            self.queues.write().get_or_insert(queue)
        };
        self.queue_activity.note(&queue.name);
        // A quorum queue's Raft group starts once the queue is registered (recovered from the
        // shared log when the queue existed before a restart); once only, nothing for others.
        crate::quorum::start(&queue);
        if queue.expires_ms().is_some() {
            self.watch_expiry(&queue);
        }
        Ok(queue)
    }

    /// A queue as declared, not registered yet: a classic one (in the store when durable and
    /// not exclusive), or a quorum queue whose group is not started yet (`quorum::start`).
    pub(crate) fn build_queue(
        self: &Arc<Self>,
        name: ShortStr,
        durable: bool,
        owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
        members: Vec<u64>,
    ) -> AmqpResult<Arc<Queue>> {
        let limits = queue_limits(&arguments).shared();
        if is_quorum(&arguments) {
            return self.build_quorum_queue(name, arguments, limits, members);
        }
        let stored = match (&self.store, durable && owner.is_none()) {
            (Some(store), true) => {
                let id = store
                    .register_queue(&self.store_queue_name(&name))
                    .map_err(|e| {
                        AmqpError::new(ReplyCode::InternalError, format!("message store: {e}"))
                    })?;
                Some(StoredQueue {
                    store: store.clone(),
                    id,
                })
            }
            _ => None,
        };
        let classic = ClassicQueue::new(
            limits.clone(),
            self.memory.clone(),
            stored.is_some(),
            self.store.clone(),
        );
        Ok(Arc::new(Queue::new(
            name,
            durable,
            owner,
            auto_delete,
            arguments,
            limits,
            Arc::downgrade(self) as Weak<dyn QueueHome>,
            stored,
            Box::new(classic),
        )))
    }

    fn build_quorum_queue(
        self: &Arc<Self>,
        name: ShortStr,
        arguments: FieldTable,
        limits: Arc<crate::queue::QueueLimits>,
        members: Vec<u64>,
    ) -> AmqpResult<Arc<Queue>> {
        let Some(host) = self.quorum.get() else {
            return Err(AmqpError::precondition(format!(
                "cannot declare quorum queue '{name}' in vhost '{}': the broker has no data directory",
                self.name
            )));
        };
        let policies = self.policies.read().applied(EntityKind::Queue, &name);
        let config = crate::quorum::queue_config(&arguments, &policies);
        let at_least_once = crate::quorum::dead_letter_at_least_once(
            &arguments,
            &policies,
            &config,
            limits.dead_letter_exchange.is_some(),
        );
        let quorum = QuorumQueue::new(
            host.clone(),
            self.forward_peers(),
            QuorumHost::group_id(&self.name, &name),
            config,
            at_least_once,
            members,
        );
        let queue = Arc::new(Queue::new(
            name.clone(),
            true,
            None,
            false,
            arguments,
            limits,
            Arc::downgrade(self) as Weak<dyn QueueHome>,
            None,
            Box::new(quorum),
        ));
        Ok(queue)
    }

    /// Deletes the queue once it has been unused for its `expires` (argument or policy).
    /// One task per queue at most; it ends when the queue goes or no longer expires.
    pub(super) fn watch_expiry(self: &Arc<Self>, queue: &Arc<Queue>) {
        if queue.expiry_watched.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            queue.expiry_watched.store(false, Ordering::Release);
            return;
        };
        let vhost = Arc::downgrade(self);
        let weak_queue = Arc::downgrade(queue);
        runtime.spawn(async move {
            loop {
                let Some(expires_ms) = weak_queue.upgrade().and_then(|q| q.expires_ms()) else {
                    let Some(queue) = weak_queue.upgrade() else {
                        return;
                    };
                    // A policy may set expires again between the read and the store: look
                    // once more after giving up the watch.
                    queue.expiry_watched.store(false, Ordering::Release);
                    if queue.expires_ms().is_none()
                        || queue.expiry_watched.swap(true, Ordering::AcqRel)
                    {
                        return;
                    }
                    continue;
                };
                // Check a few times per period so expiry lands close to the deadline.
                let step = Duration::from_millis((expires_ms / 4).clamp(10, 1000));
                tokio::time::sleep(step).await;
                let (Some(vhost), Some(queue)) = (vhost.upgrade(), weak_queue.upgrade()) else {
                    return;
                };
                if queue.is_deleted() {
                    return;
                }
                if queue.expired() {
                    tracing::debug!(queue = %queue.name, "queue expired (x-expires)");
                    vhost.remove_queue(&queue);
                    return;
                }
            }
        });
    }

    /// queue.delete; returns how many ready messages were dropped.
    pub fn delete_queue(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: ConnectionId,
    ) -> AmqpResult<u32> {
        match self.check_queue_delete(name, if_unused, if_empty, connection)? {
            Some(queue) => Ok(self.remove_queue(&queue)),
            // Deleting a missing queue succeeds with zero messages, as in RabbitMQ.
            None => Ok(0),
        }
    }

    /// queue.delete's refusals: another connection's exclusive queue (405), and `if_unused`
    /// / `if_empty` against the queue's live consumers and messages (406). The queue to
    /// remove, or None when there is none (a success).
    pub fn check_queue_delete(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: ConnectionId,
    ) -> AmqpResult<Option<Arc<Queue>>> {
        let Some(queue) = self.queue(name) else {
            return Ok(None);
        };
        self.check_exclusive(&queue, connection)?;
        if if_unused && queue.consumer_count() > 0 {
            return Err(AmqpError::precondition(format!(
                "queue '{name}' in vhost '{}' in use",
                self.name
            )));
        }
        if if_empty && queue.message_count() > 0 {
            return Err(AmqpError::precondition(format!(
                "queue '{name}' in vhost '{}' is not empty",
                self.name
            )));
        }
        Ok(Some(queue))
    }

    /// Removes a queue and its bindings and tells its consumers; returns its ready count.
    pub fn remove_queue(&self, queue: &Arc<Queue>) -> u32 {
        {
            let mut queues = self.queues.write();
            match queues.get(&queue.name) {
                Some(q) if Arc::ptr_eq(q, queue) => {
                    queues.remove(&queue.name);
                }
                _ => return 0,
            }
        }
        self.queue_activity.note(&queue.name);
        churn::bump(&self.counters.queues.deleted);
        let (consumers, count) = queue.mark_deleted();
        for c in consumers {
            let _ = c.send(ConnectionEvent::ConsumerCancelled {
                channel: c.channel,
                consumer_tag: c.tag.clone(),
            });
        }
        let dest = Destination::Queue(queue.clone());
        // A deleted queue's record takes its bindings with it; an auto-delete exchange it
        // leaves without bindings needs the whole blob.
        let mut cascaded = false;
        for exchange in self.exchanges() {
            if exchange.unbind_destination(&dest) > 0 {
                cascaded |= self.source_lost_bindings(&exchange);
            }
        }
        if cascaded {
            self.persist_definitions();
        } else if super::durability::is_durable_queue(queue) {
            self.persist_queue(&queue.name, Urgency::Soon);
        }
        count
    }

    /// Drops the exclusive queues a closing connection owned.
    pub fn connection_closed(&self, connection: ConnectionId) {
        let owned: Vec<Arc<Queue>> = self
            .queues
            .read()
            .values()
            .filter(|q| q.exclusive_owner == Some(connection))
            .cloned()
            .collect();
        for q in owned {
            self.remove_queue(&q);
        }
    }

    // ---- bindings --------------------------------------------------------------------

    /// Refuses the default exchange in a binding, on either side (403).
    fn check_not_default(names: &[&str]) -> AmqpResult<()> {
        if names.iter().any(|n| n.is_empty()) {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        Ok(())
    }

    fn check_headers_args(exchange: &Exchange, args: &FieldTable) -> AmqpResult<()> {
        if exchange.kind == ExchangeKind::Headers {
            if let Err(v) = XMatch::from_arguments(args) {
                return Err(AmqpError::precondition(format!(
                    "Invalid x-match field value {v}; expected all, any, all-with-x, or any-with-x"
                )));
            }
        }
        Ok(())
    }

    /// queue.bind: the exchange must exist (checked first, as RabbitMQ does), then the queue,
    /// which this connection must be allowed to use.
    pub fn bind_queue(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: ShortStr,
        arguments: FieldTable,
        connection: ConnectionId,
    ) -> AmqpResult<()> {
        Self::check_not_default(&[exchange])?;
        let source = self
            .exchange(exchange)
            .ok_or_else(|| not_found_exchange(&self.name, exchange))?;
        let q = self.queue_for(queue, connection)?;
        self.add_binding(&source, Destination::Queue(q), routing_key, arguments)
    }

    /// queue.unbind: unbind-ok when the queue, the exchange or the binding does not exist
    /// (RabbitMQ 3.x); 405 only for a binding that exists on another connection's exclusive
    /// queue.
    pub fn unbind_queue(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: ShortStr,
        arguments: FieldTable,
        connection: ConnectionId,
    ) -> AmqpResult<()> {
        Self::check_not_default(&[exchange])?;
        let (Some(source), Some(q)) = (self.exchange(exchange), self.queue(queue)) else {
            return Ok(());
        };
        let binding = Binding {
            destination: Destination::Queue(q.clone()),
            routing_key,
            arguments,
        };
        if self.check_exclusive(&q, connection).is_err() && source.has_binding(&binding) {
            return self.check_exclusive(&q, connection);
        }
        self.remove_binding(&source, binding);
        Ok(())
    }

    /// exchange.bind: source checked before destination, as RabbitMQ does.
    pub fn bind_exchange(
        &self,
        destination: &str,
        source: &str,
        routing_key: ShortStr,
        arguments: FieldTable,
    ) -> AmqpResult<()> {
        Self::check_not_default(&[destination, source])?;
        let src = self
            .exchange(source)
            .ok_or_else(|| not_found_exchange(&self.name, source))?;
        let dest = self
            .exchange(destination)
            .ok_or_else(|| not_found_exchange(&self.name, destination))?;
        self.add_binding(
            &src,
            Destination::Exchange(dest.name.clone()),
            routing_key,
            arguments,
        )
    }

    /// exchange.unbind: unbind-ok when either exchange or the binding does not exist.
    pub fn unbind_exchange(
        &self,
        destination: &str,
        source: &str,
        routing_key: ShortStr,
        arguments: FieldTable,
    ) -> AmqpResult<()> {
        Self::check_not_default(&[destination, source])?;
        let (Some(src), Some(dest)) = (self.exchange(source), self.exchange(destination)) else {
            return Ok(());
        };
        let binding = Binding {
            destination: Destination::Exchange(dest.name.clone()),
            routing_key,
            arguments,
        };
        self.remove_binding(&src, binding);
        Ok(())
    }

    /// Binds and, when both ends are durable, persists the definitions.
    fn add_binding(
        &self,
        source: &Exchange,
        destination: Destination,
        routing_key: ShortStr,
        arguments: FieldTable,
    ) -> AmqpResult<()> {
        Self::check_headers_args(source, &arguments)?;
        let durable = self.is_durable_binding(source, &destination);
        let binding = Binding {
            destination,
            routing_key,
            arguments,
        };
        // Cloned only when it is to be recorded (the cheap part: names and an argument table).
        let recorded = durable.then(|| binding.clone());
        let added = source.bind(binding);
        if let (true, Some(binding)) = (added, recorded) {
            self.persist_binding(&source.name, binding);
        }
        Ok(())
    }

    /// Unbinds (a missing binding is fine, as in RabbitMQ), deletes an auto-delete source it
    /// leaves without bindings (cascading), and persists what durable changed.
    fn remove_binding(&self, source: &Arc<Exchange>, binding: Binding) {
        let durable = self.is_durable_binding(source, &binding.destination);
        if !source.unbind(&binding) {
            return;
        }
        if self.source_lost_bindings(source) {
            // An auto-delete exchange went with it (and maybe more): the blob, whole.
            self.persist_definitions();
        } else if durable {
            self.persist_binding(&source.name, binding);
        }
    }

    // ---- routing ---------------------------------------------------------------------

    /// Collects the queues a message published to `exchange` with one routing key reaches.
    pub fn route(
        &self,
        exchange: &Arc<Exchange>,
        routing_key: &str,
        headers: Option<&FieldTable>,
        out: &mut Vec<Arc<Queue>>,
    ) {
        self.route_keys(exchange, &[routing_key], headers, out, None)
    }

    /// Collects the queues a message published to `exchange` reaches with any of
    /// `routing_keys` (the publish key, then those of its CC and BCC headers), following
    /// exchange-to-exchange bindings and alternate exchanges. Each queue appears once.
    /// A publishing channel passes its `last_queue`: on the default exchange the queue
    /// lookup is answered from it while no queue of the vhost changed since it was filled.
    /// A classic queue whose home node is down is left out (`Queue::home_is_down`): the
    /// message is unroutable there, as in RabbitMQ.
    pub fn route_keys(
        &self,
        exchange: &Arc<Exchange>,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<Arc<Queue>>,
        last_queue: Option<&mut LastLookup<Queue>>,
    ) {
        self.collect_routes(exchange, routing_keys, headers, out, last_queue);
        // A read-only pass first: the common publish (no queue on a down node) moves nothing.
        if out.iter().any(|q| q.home_is_down()) {
            out.retain(|q| !q.home_is_down());
        }
    }

    fn collect_routes(
        &self,
        exchange: &Arc<Exchange>,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<Arc<Queue>>,
        mut last_queue: Option<&mut LastLookup<Queue>>,
    ) {
        if exchange.name.is_empty() {
            // The default exchange: a direct lookup, no binding table walk.
            for key in routing_keys {
                let found = match last_queue.as_deref_mut() {
                    Some(last) => self.queues.get_via(key, last),
                    None => self.queue(key),
                };
                if let Some(q) = found {
                    if !out.iter().any(|x| Arc::ptr_eq(x, &q)) {
                        out.push(q);
                    }
                }
            }
            return;
        }
        // The first exchange is walked without the hop bookkeeping, so the common publish
        // (one exchange, queue destinations) allocates nothing here.
        let mut pending: Vec<Arc<Exchange>> = Vec::new();
        self.route_one(exchange, routing_keys, headers, out, &mut pending);
        if pending.is_empty() {
            return;
        }
        let mut visited: Vec<ShortStr> = vec![exchange.name.clone()];
        while let Some(ex) = pending.pop() {
            if visited.contains(&ex.name) || visited.len() >= MAX_EXCHANGE_HOPS {
                continue;
            }
            visited.push(ex.name.clone());
            self.route_one(&ex, routing_keys, headers, out, &mut pending);
        }
    }

    /// Adds the queues `ex`'s own bindings select to `out` (once each), and to `pending` the
    /// exchanges its bindings lead to, or its alternate exchange when nothing was routed.
    fn route_one(
        &self,
        ex: &Exchange,
        routing_keys: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<Arc<Queue>>,
        pending: &mut Vec<Arc<Exchange>>,
    ) {
        let before = out.len();
        let mut hops: Vec<ShortStr> = Vec::new();
        ex.route(routing_keys, headers, |dest| match dest {
            Destination::Queue(q) => {
                if !out.iter().any(|x| Arc::ptr_eq(x, q)) {
                    out.push(q.clone());
                }
            }
            Destination::Exchange(name) => hops.push(name.clone()),
        });
        let mut routed = out.len() > before;
        for name in hops {
            if let Some(next) = self.exchange(&name) {
                pending.push(next);
                routed = true;
            }
        }
        if !routed {
            if let Some(ae) = ex.alternate_exchange().and_then(|n| self.exchange(&n)) {
                pending.push(ae);
            }
        }
    }

    // ---- direct reply-to -------------------------------------------------------------

    /// Registers a direct reply-to consumer and returns the address suffix for `reply_to`.
    pub fn register_reply_consumer(&self, consumer: &Arc<Consumer>) -> String {
        let key = names::random_suffix();
        self.reply_consumers
            .lock()
            .insert(key.clone(), Arc::downgrade(consumer));
        key
    }

    pub fn unregister_reply_consumer(&self, key: &str) {
        self.reply_consumers.lock().remove(key);
    }

    /// The live consumer behind a `amq.rabbitmq.reply-to.KEY` routing key.
    pub fn reply_consumer(&self, routing_key: &str) -> Option<Arc<Consumer>> {
        let key = routing_key.strip_prefix(names::DIRECT_REPLY_TO_PREFIX)?;
        self.reply_consumers.lock().get(key)?.upgrade()
    }
}

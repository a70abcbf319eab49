//! `VHost`: the namespace of exchanges and queues, and the operations clients run on them —
//! declare, delete, bind, unbind, route — with RabbitMQ's checks and reply codes.

mod durability;

use crate::consumer::{ConnectionEvent, ConnectionId, Consumer};
use crate::error::{AmqpError, AmqpResult};
use crate::exchange::{Binding, Destination, Exchange, ExchangeKind};
use crate::headers_match::XMatch;
use crate::memory::MemoryMonitor;
use crate::names;
use crate::queue::{Queue, QueueLimits, StoredQueue};
use crate::queue_args::queue_limits;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use warren_codec::{FieldTable, FieldValue, ReplyCode, ShortStr};
use warren_store::Store;

/// How deep exchange-to-exchange bindings are followed; deeper chains are cut (and cycles
/// are caught earlier by the visited list).
const MAX_EXCHANGE_HOPS: usize = 64;

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

pub struct VHost {
    pub name: String,
    exchanges: RwLock<HashMap<ShortStr, Arc<Exchange>>>,
    queues: RwLock<HashMap<ShortStr, Arc<Queue>>>,
    /// Direct reply-to consumers by the address suffix handed out in `reply_to`.
    reply_consumers: Mutex<HashMap<String, Weak<Consumer>>>,
    pub memory: Arc<MemoryMonitor>,
    /// The message store, when the broker runs with a data directory.
    pub store: Option<Store>,
    /// Serializes definition snapshots so an older one never overwrites a newer one.
    definitions_lock: Mutex<()>,
}

impl std::fmt::Debug for VHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VHost").field("name", &self.name).finish()
    }
}

fn not_found_queue(name: &str) -> AmqpError {
    AmqpError::not_found(format!("no queue '{name}' in vhost '/'"))
}

fn not_found_exchange(name: &str) -> AmqpError {
    AmqpError::not_found(format!("no exchange '{name}' in vhost '/'"))
}

fn inequivalent(
    what: &str,
    arg: &str,
    name: &str,
    received: impl std::fmt::Display,
    current: impl std::fmt::Display,
) -> AmqpError {
    AmqpError::precondition(format!(
        "inequivalent arg '{arg}' for {what} '{name}' in vhost '/': received '{received}' but current is '{current}'"
    ))
}

/// The first flag that differs between a redeclaration and what exists, as RabbitMQ's 406.
fn check_flags(what: &str, name: &str, flags: &[(&str, bool, bool)]) -> AmqpResult<()> {
    match flags
        .iter()
        .find(|(_, received, current)| received != current)
    {
        Some(&(arg, received, current)) => Err(inequivalent(what, arg, name, received, current)),
        None => Ok(()),
    }
}

/// Queue arguments whose values must match on redeclare (RabbitMQ's equivalence list).
const QUEUE_EQUIVALENCE_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-priority",
    "x-queue-mode",
    "x-queue-type",
    "x-single-active-consumer",
];

pub(crate) fn describe(v: Option<&FieldValue>) -> String {
    match v {
        None => "none".to_owned(),
        Some(v) => match (v.as_i64(), v.as_str(), v.as_bool()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(s), _) => s.to_owned(),
            (_, _, Some(b)) => b.to_string(),
            _ => format!("{v:?}"),
        },
    }
}

fn same_arg(a: Option<&FieldValue>, b: Option<&FieldValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => describe(Some(a)) == describe(Some(b)),
        _ => false,
    }
}

impl VHost {
    pub fn new(name: &str, memory: Arc<MemoryMonitor>, store: Option<Store>) -> Arc<VHost> {
        let vhost = VHost {
            name: name.to_owned(),
            exchanges: RwLock::new(HashMap::new()),
            queues: RwLock::new(HashMap::new()),
            reply_consumers: Mutex::new(HashMap::new()),
            memory,
            store,
            definitions_lock: Mutex::new(()),
        };
        {
            let mut ex = vhost.exchanges.write();
            for (name, kind) in [
                ("", ExchangeKind::Direct),
                ("amq.direct", ExchangeKind::Direct),
                ("amq.fanout", ExchangeKind::Fanout),
                ("amq.topic", ExchangeKind::Topic),
                ("amq.headers", ExchangeKind::Headers),
                ("amq.match", ExchangeKind::Headers),
            ] {
                let name = ShortStr::from_static(name);
                ex.insert(
                    name.clone(),
                    Arc::new(Exchange::new(
                        name,
                        kind,
                        true,
                        false,
                        false,
                        FieldTable::new(),
                    )),
                );
            }
        }
        Arc::new(vhost)
    }

    pub fn exchange(&self, name: &str) -> Option<Arc<Exchange>> {
        self.exchanges.read().get(name).cloned()
    }

    pub fn queue(&self, name: &str) -> Option<Arc<Queue>> {
        self.queues.read().get(name).cloned()
    }

    pub fn queues(&self) -> Vec<Arc<Queue>> {
        self.queues.read().values().cloned().collect()
    }

    pub fn exchanges(&self) -> Vec<Arc<Exchange>> {
        self.exchanges.read().values().cloned().collect()
    }

    // ---- exchanges -------------------------------------------------------------------

    pub fn declare_exchange(&self, d: ExchangeDeclaration) -> AmqpResult<()> {
        if d.name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        if let Some(existing) = self.exchange(&d.name) {
            if d.passive {
                return Ok(());
            }
            let name = &d.name;
            if existing.kind.as_str() != d.kind {
                return Err(inequivalent(
                    "exchange",
                    "type",
                    name,
                    &d.kind,
                    existing.kind.as_str(),
                ));
            }
            check_flags(
                "exchange",
                name,
                &[
                    ("durable", d.durable, existing.durable),
                    ("auto_delete", d.auto_delete, existing.auto_delete),
                    ("internal", d.internal, existing.internal),
                ],
            )?;
            let (a, b) = (
                d.arguments.get("alternate-exchange"),
                existing.arguments.get("alternate-exchange"),
            );
            if !same_arg(a, b) {
                return Err(inequivalent(
                    "exchange",
                    "alternate-exchange",
                    name,
                    describe(a),
                    describe(b),
                ));
            }
            return Ok(());
        }
        if d.passive {
            return Err(not_found_exchange(&d.name));
        }
        let Some(kind) = ExchangeKind::parse(&d.kind) else {
            return Err(AmqpError::new(
                ReplyCode::CommandInvalid,
                format!("invalid exchange type '{}'", d.kind),
            ));
        };
        if names::has_reserved_prefix(&d.name) {
            return Err(AmqpError::access_refused(format!(
                "exchange name '{}' contains reserved prefix 'amq.*'",
                d.name
            )));
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
        self.exchanges
            .write()
            .entry(d.name)
            .or_insert_with(|| Arc::new(exchange));
        if durable {
            self.persist_definitions();
        }
        Ok(())
    }

    pub fn delete_exchange(&self, name: &str, if_unused: bool) -> AmqpResult<()> {
        if name.is_empty() || names::has_reserved_prefix(name) {
            return Err(AmqpError::access_refused(format!(
                "operation not permitted on exchange '{name}'"
            )));
        }
        let Some(exchange) = self.exchange(name) else {
            // RabbitMQ treats deleting a missing exchange as success.
            return Ok(());
        };
        if if_unused && exchange.has_bindings() {
            return Err(AmqpError::precondition(format!(
                "exchange '{name}' in vhost '/' in use"
            )));
        }
        self.exchanges.write().remove(name);
        let dest = Destination::Exchange(exchange.name.clone());
        for other in self.exchanges() {
            other.unbind_destination(&dest);
        }
        if exchange.durable {
            self.persist_definitions();
        }
        Ok(())
    }

    /// Deletes an auto-delete exchange once its last binding is gone.
    fn auto_delete_exchange(&self, exchange: &Exchange) {
        if exchange.auto_delete && !exchange.has_bindings() {
            let _ = self.delete_exchange(&exchange.name, true);
        }
    }

    // ---- queues ----------------------------------------------------------------------

    /// Checks an exclusive queue is used only by the connection that owns it.
    pub fn check_exclusive(&self, queue: &Queue, connection: ConnectionId) -> AmqpResult<()> {
        match queue.exclusive_owner {
            Some(owner) if owner != connection => Err(AmqpError::resource_locked(format!(
                "cannot obtain exclusive access to locked queue '{}' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.",
                queue.name
            ))),
            _ => Ok(()),
        }
    }

    /// A queue the connection may use, or 404/405.
    pub fn queue_for(&self, name: &str, connection: ConnectionId) -> AmqpResult<Arc<Queue>> {
        let queue = self.queue(name).ok_or_else(|| not_found_queue(name))?;
        self.check_exclusive(&queue, connection)?;
        Ok(queue)
    }

    /// queue.declare; returns the queue with its message and consumer counts.
    pub fn declare_queue(
        self: &Arc<Self>,
        d: QueueDeclaration,
        connection: ConnectionId,
    ) -> AmqpResult<(Arc<Queue>, u32, u32)> {
        if d.name.as_str() == names::DIRECT_REPLY_TO && d.passive {
            // Clients check the pseudo-queue exists before consuming from it.
            let q = Arc::new(Queue::new(
                d.name,
                false,
                None,
                false,
                FieldTable::new(),
                QueueLimits::default(),
                self.memory.clone(),
                Weak::new(),
                None,
                None,
            ));
            return Ok((q, 0, 0));
        }
        if let Some(existing) = self.queue(&d.name) {
            self.check_exclusive(&existing, connection)?;
            if !d.passive {
                let name = &d.name;
                check_flags(
                    "queue",
                    name,
                    &[
                        ("durable", d.durable, existing.durable),
                        ("auto_delete", d.auto_delete, existing.auto_delete),
                        ("exclusive", d.exclusive, existing.exclusive_owner.is_some()),
                    ],
                )?;
                for arg in QUEUE_EQUIVALENCE_ARGS {
                    let (a, b) = (d.arguments.get(arg), existing.arguments.get(arg));
                    if !same_arg(a, b) {
                        return Err(inequivalent("queue", arg, name, describe(a), describe(b)));
                    }
                }
            }
            existing.touch();
            let (m, c) = (existing.message_count(), existing.consumer_count());
            return Ok((existing, m, c));
        }
        if d.passive {
            return Err(not_found_queue(&d.name));
        }
        let name = if d.name.is_empty() {
            ShortStr::from(names::generated_queue_name())
        } else if names::has_reserved_prefix(&d.name) {
            return Err(AmqpError::access_refused(format!(
                "queue name '{}' contains reserved prefix 'amq.*'",
                d.name
            )));
        } else {
            d.name
        };
        let owner = d.exclusive.then_some(connection);
        let queue = self.create_queue(name, d.durable, owner, d.auto_delete, d.arguments)?;
        if queue.stored.is_some() {
            self.persist_definitions();
        }
        Ok((queue, 0, 0))
    }

    /// Creates and registers a queue (durable, non-exclusive ones in the store too). The
    /// default exchange needs no binding: it routes by looking the name up.
    fn create_queue(
        self: &Arc<Self>,
        name: ShortStr,
        durable: bool,
        owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
    ) -> AmqpResult<Arc<Queue>> {
        let limits = queue_limits(&name, &arguments)?;
        let expires_ms = limits.expires_ms;
        let stored = match (&self.store, durable && owner.is_none()) {
            (Some(store), true) => {
                let id = store.register_queue(&name).map_err(|e| {
                    AmqpError::new(ReplyCode::InternalError, format!("message store: {e}"))
                })?;
                Some(StoredQueue {
                    store: store.clone(),
                    id,
                })
            }
            _ => None,
        };
        let queue = Arc::new(Queue::new(
            name.clone(),
            durable,
            owner,
            auto_delete,
            arguments,
            limits,
            self.memory.clone(),
            Arc::downgrade(self),
            stored,
            self.store.clone(),
        ));
        let queue = self.queues.write().entry(name).or_insert(queue).clone();
        if let Some(expires_ms) = expires_ms {
            self.watch_expiry(&queue, expires_ms);
        }
        Ok(queue)
    }

    /// Deletes the queue once it has been unused for its `x-expires`.
    fn watch_expiry(self: &Arc<Self>, queue: &Arc<Queue>, expires_ms: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let vhost = Arc::downgrade(self);
        let weak_queue = Arc::downgrade(queue);
        runtime.spawn(async move {
            // Check a few times per period so expiry lands close to the deadline.
            let step = Duration::from_millis((expires_ms / 4).clamp(10, 1000));
            loop {
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
        let Some(queue) = self.queue(name) else {
            // Deleting a missing queue succeeds with zero messages, as in RabbitMQ.
            return Ok(0);
        };
        self.check_exclusive(&queue, connection)?;
        if if_unused && queue.consumer_count() > 0 {
            return Err(AmqpError::precondition(format!(
                "queue '{name}' in vhost '/' in use"
            )));
        }
        if if_empty && queue.message_count() > 0 {
            return Err(AmqpError::precondition(format!(
                "queue '{name}' in vhost '/' is not empty"
            )));
        }
        Ok(self.remove_queue(&queue))
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
        let (consumers, count) = queue.mark_deleted();
        for c in consumers {
            let _ = c.send(ConnectionEvent::ConsumerCancelled {
                channel: c.channel,
                consumer_tag: c.tag.clone(),
            });
        }
        let dest = Destination::Queue(queue.clone());
        for exchange in self.exchanges() {
            if exchange.unbind_destination(&dest) > 0 && !exchange.name.is_empty() {
                self.auto_delete_exchange(&exchange);
            }
        }
        if queue.stored.is_some() {
            self.persist_definitions();
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

    fn destination_exchange(&self, name: &str) -> AmqpResult<Arc<Exchange>> {
        self.exchange(name).ok_or_else(|| not_found_exchange(name))
    }

    /// An exchange a binding may name: any but the default exchange.
    fn bindable_exchange(&self, name: &str) -> AmqpResult<Arc<Exchange>> {
        if name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        self.destination_exchange(name)
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

    pub fn bind_queue(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: ShortStr,
        arguments: FieldTable,
        connection: ConnectionId,
    ) -> AmqpResult<()> {
        let q = self.queue_for(queue, connection)?;
        let ex = self.bindable_exchange(exchange)?;
        self.add_binding(&ex, Destination::Queue(q), routing_key, arguments)
    }

    pub fn unbind_queue(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: ShortStr,
        arguments: FieldTable,
        connection: ConnectionId,
    ) -> AmqpResult<()> {
        let q = self.queue_for(queue, connection)?;
        let ex = self.bindable_exchange(exchange)?;
        self.remove_binding(&ex, Destination::Queue(q), routing_key, arguments);
        Ok(())
    }

    pub fn bind_exchange(
        &self,
        destination: &str,
        source: &str,
        routing_key: ShortStr,
        arguments: FieldTable,
    ) -> AmqpResult<()> {
        let dest = self.bindable_exchange(destination)?;
        let src = self.bindable_exchange(source)?;
        self.add_binding(
            &src,
            Destination::Exchange(dest.name.clone()),
            routing_key,
            arguments,
        )
    }

    pub fn unbind_exchange(
        &self,
        destination: &str,
        source: &str,
        routing_key: ShortStr,
        arguments: FieldTable,
    ) -> AmqpResult<()> {
        let dest = self.bindable_exchange(destination)?;
        let src = self.bindable_exchange(source)?;
        let destination = Destination::Exchange(dest.name.clone());
        self.remove_binding(&src, destination, routing_key, arguments);
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
        let added = source.bind(Binding {
            destination,
            routing_key,
            arguments,
        });
        if added && durable {
            self.persist_definitions();
        }
        Ok(())
    }

    /// Unbinds (a missing binding is fine, as in RabbitMQ), persists if it was durable, and
    /// deletes an auto-delete source left without bindings.
    fn remove_binding(
        &self,
        source: &Exchange,
        destination: Destination,
        routing_key: ShortStr,
        arguments: FieldTable,
    ) {
        let durable = self.is_durable_binding(source, &destination);
        let removed = source.unbind(&Binding {
            destination,
            routing_key,
            arguments,
        });
        if removed && durable {
            self.persist_definitions();
        }
        self.auto_delete_exchange(source);
    }

    // ---- routing ---------------------------------------------------------------------

    /// Collects the queues a message published to `exchange` reaches, following
    /// exchange-to-exchange bindings and alternate exchanges. Each queue appears once.
    pub fn route(
        &self,
        exchange: &Arc<Exchange>,
        routing_key: &str,
        headers: Option<&FieldTable>,
        out: &mut Vec<Arc<Queue>>,
    ) {
        if exchange.name.is_empty() {
            // The default exchange: a direct lookup, no binding table walk.
            if let Some(q) = self.queue(routing_key) {
                out.push(q);
            }
            return;
        }
        let mut pending: Vec<Arc<Exchange>> = vec![exchange.clone()];
        let mut visited: Vec<ShortStr> = Vec::new();
        while let Some(ex) = pending.pop() {
            if visited.contains(&ex.name) || visited.len() >= MAX_EXCHANGE_HOPS {
                continue;
            }
            visited.push(ex.name.clone());
            let before = out.len();
            let mut hops: Vec<ShortStr> = Vec::new();
            ex.route(routing_key, headers, |dest| match dest {
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
                if let Some(ae) = ex
                    .alternate_exchange
                    .as_ref()
                    .and_then(|n| self.exchange(n))
                {
                    pending.push(ae);
                }
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

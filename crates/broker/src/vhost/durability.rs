//! The durable side of a vhost: snapshotting durable exchanges, queues and bindings into the
//! store's definitions blob on every durable change, and rebuilding them (with each queue's
//! stored messages) when the broker starts.

use super::VHost;
use crate::definitions::{BindingDefinition, Definitions, ExchangeDefinition, QueueDefinition};
use crate::definitions_journal::DurableChange;
use crate::exchange::{Binding, Destination, Exchange, ExchangeKind};
use crate::names;
use crate::persist::Urgency;
use crate::queue::Queue;
use crate::quorum::QuorumQueue;
use std::sync::Arc;
use warren_codec::ShortStr;

/// Where a durable classic queue another node serves is served: its record's node (None
/// for a queue served here, a quorum queue's record, and a transient queue's).
fn classic_home(q: &Queue) -> Option<&str> {
    q.home_node()
        .filter(|_| q.durable && q.type_name() == "classic")
}

/// Whether queue `q` is part of the durable definitions: a durable queue served here, or the
/// record of a durable classic queue served elsewhere.
pub(super) fn is_durable_queue(q: &Queue) -> bool {
    q.stored.is_some() || QuorumQueue::of(q).is_some() || classic_home(q).is_some()
}

/// Queue `q`'s entry in the durable definitions, None when it is not durable. A durable
/// classic queue another node serves is kept with where it is, so that a restart or a
/// snapshot install forwards there rather than forgetting it or making a local queue of its
/// own.
pub fn durable_queue_definition(q: &Queue) -> Option<QueueDefinition> {
    if !is_durable_queue(q) {
        return None;
    }
    Some(QueueDefinition {
        name: q.name.clone(),
        auto_delete: q.auto_delete,
        arguments: q.arguments.clone(),
        members: QuorumQueue::of(q)
            .map(|qq| qq.members())
            .unwrap_or_default(),
        home: classic_home(q).map(str::to_owned),
    })
}

/// Exchange `e`'s entry in the durable definitions, None when it is not part of them
/// (transient, the default exchange, the `amq.*` ones every vhost has).
pub fn durable_exchange_definition(e: &Exchange) -> Option<ExchangeDefinition> {
    if !e.durable || e.name.is_empty() || names::has_reserved_prefix(&e.name) {
        return None;
    }
    Some(ExchangeDefinition {
        name: e.name.clone(),
        kind: e.kind.as_str().to_owned(),
        auto_delete: e.auto_delete,
        internal: e.internal,
        arguments: e.arguments.clone(),
    })
}

/// Binding `b` of exchange `source` as the definitions hold it.
fn binding_definition(source: &ShortStr, b: Binding) -> BindingDefinition {
    BindingDefinition {
        source: source.clone(),
        destination: b.destination.name().clone(),
        to_exchange: !b.destination.is_queue(),
        routing_key: b.routing_key,
        arguments: b.arguments,
    }
}

impl VHost {
    /// Whether binding `def` exists now between durable ends (what a journal record of it
    /// says as it stands, `definitions_journal.rs`).
    pub(crate) fn has_durable_binding(&self, def: &BindingDefinition) -> bool {
        let Some(source) = self.exchange(&def.source) else {
            return false;
        };
        let destination = if def.to_exchange {
            Destination::Exchange(def.destination.clone())
        } else {
            match self.queue(&def.destination) {
                Some(q) => Destination::Queue(q),
                None => return false,
            }
        };
        self.is_durable_binding(&source, &destination)
            && source.has_binding(&Binding {
                destination,
                routing_key: def.routing_key.clone(),
                arguments: def.arguments.clone(),
            })
    }

    fn is_durable_destination(&self, dest: &Destination) -> bool {
        match dest {
            Destination::Queue(q) => is_durable_queue(q),
            Destination::Exchange(name) => self.exchange(name).is_some_and(|e| e.durable),
        }
    }

    /// A binding survives restarts when its source and destination both do.
    pub(super) fn is_durable_binding(&self, source: &Exchange, dest: &Destination) -> bool {
        source.durable && self.is_durable_destination(dest)
    }

    /// The durable part of this vhost: what a restart must bring back.
    pub fn durable_definitions(&self) -> Definitions {
        let mut defs = Definitions::default();
        // By name (as the vhost lists them), so that nodes holding the same definitions have
        // the same snapshot.
        let exchanges = self.exchanges();
        let queues = self.queues();
        defs.exchanges.extend(
            exchanges
                .iter()
                .filter_map(|e| durable_exchange_definition(e)),
        );
        defs.queues
            .extend(queues.iter().filter_map(|q| durable_queue_definition(q)));
        defs.policies = self.policies();
        defs.policies.extend(self.operator_policies());
        for e in exchanges.iter().filter(|e| e.durable && !e.name.is_empty()) {
            for b in e.bindings() {
                if self.is_durable_destination(&b.destination) {
                    defs.bindings.push(binding_definition(&e.name, b));
                }
            }
        }
        defs
    }

    /// Asks the broker to write its snapshot (every vhost and the user database) to the
    /// store after a durable change here: at once on a single node, soon in a cluster (whose
    /// metadata log holds the change, `persist.rs`). A vhost outside a broker (tests) keeps
    /// nothing.
    pub(super) fn persist_definitions(&self) {
        self.persist_change(Urgency::Soon, DurableChange::Whole);
    }

    /// After durable queue `name` was declared or deleted with nothing else (no binding but
    /// its own, no auto-delete exchange): recorded on its own, at `urgency` (`Now` for a
    /// queue whose messages go to the store: recovery drops a stored queue the definitions
    /// do not name, with its messages).
    pub(super) fn persist_queue(&self, name: &ShortStr, urgency: Urgency) {
        let change = DurableChange::Queue {
            vhost: self.name.to_string(),
            name: name.clone(),
        };
        self.persist_change(urgency, change);
    }

    /// After durable exchange `name` was declared: recorded on its own (a delete writes the
    /// blob whole, its bindings going with it).
    pub(super) fn persist_exchange(&self, name: &ShortStr) {
        let change = DurableChange::Exchange {
            vhost: self.name.to_string(),
            name: name.clone(),
        };
        self.persist_change(Urgency::Soon, change);
    }

    /// After a binding between durable ends was added, or removed with nothing cascading:
    /// recorded on its own.
    pub(super) fn persist_binding(&self, source: &ShortStr, binding: Binding) {
        let change = DurableChange::Binding {
            vhost: self.name.to_string(),
            binding: binding_definition(source, binding),
        };
        self.persist_change(Urgency::Soon, change);
    }

    fn persist_change(&self, urgency: Urgency, change: DurableChange) {
        if self.store.is_none() {
            return;
        }
        if let Some(persist) = self.on_durable_change.get() {
            persist(urgency, change);
        }
    }

    /// Called once by the broker that owns this vhost: how durable changes are persisted.
    pub(crate) fn set_durable_change_hook(
        &self,
        hook: impl Fn(Urgency, DurableChange) + Send + Sync + 'static,
    ) {
        let _ = self.on_durable_change.set(Box::new(hook));
    }

    /// The name this vhost's queue `queue` has in the store's queue table.
    pub fn store_queue_name(&self, queue: &str) -> String {
        crate::names::store_queue_name(&self.name, queue)
    }

    /// Recreates durable exchanges, queues and bindings (the queues empty: the broker hands
    /// each its stored messages afterwards). A classic queue whose home is another node than
    /// `this_node` comes back as a record forwarding there.
    pub fn restore_definitions(self: &Arc<Self>, defs: Definitions, this_node: &str) {
        // Policies first: the entities below take them as they are created.
        {
            let mut policies = self.policies.write();
            for p in defs.policies {
                policies.set(p);
            }
        }
        // The built-in exchanges exist already.
        for exchange in self.exchanges() {
            self.apply_exchange_policies(&exchange);
        }
        for e in defs.exchanges {
            let Some(kind) = ExchangeKind::parse(&e.kind) else {
                continue;
            };
            let exchange = Exchange::new(
                e.name.clone(),
                kind,
                true,
                e.auto_delete,
                e.internal,
                e.arguments,
            );
            self.apply_exchange_policies(&exchange);
            self.exchanges.write().insert(Arc::new(exchange));
        }
        for q in defs.queues {
            if let Some(home) = q.home.as_deref().filter(|home| *home != this_node) {
                let peer = self.forward_peers().peer(home);
                let installed = self.install_remote_queue(
                    q.name.clone(),
                    true,
                    q.auto_delete,
                    q.arguments,
                    &peer,
                    "classic",
                );
                if let Err(e) = installed {
                    tracing::error!(queue = %q.name, error = %e, "could not recreate the record of a queue served elsewhere");
                }
                continue;
            }
            let created = self.create_queue(
                q.name.clone(),
                true,
                None,
                q.auto_delete,
                q.arguments,
                q.members,
            );
            if let Err(e) = created {
                tracing::error!(queue = %q.name, error = %e, "could not recreate queue");
            }
        }
        for b in defs.bindings {
            let Some(source) = self.exchange(&b.source) else {
                continue;
            };
            let destination = if b.to_exchange {
                Destination::Exchange(b.destination)
            } else {
                match self.queue(&b.destination) {
                    Some(q) => Destination::Queue(q),
                    None => continue,
                }
            };
            source.bind(Binding {
                destination,
                routing_key: b.routing_key,
                arguments: b.arguments,
            });
        }
    }
}

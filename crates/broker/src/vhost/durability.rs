//! The durable side of a vhost: snapshotting durable exchanges, queues and bindings into the
//! store's definitions blob on every durable change, and rebuilding them (with each queue's
//! stored messages) when the broker starts.

use super::VHost;
use crate::definitions::{BindingDefinition, Definitions, ExchangeDefinition, QueueDefinition};
use crate::exchange::{Binding, Destination, Exchange, ExchangeKind};
use crate::names;
use std::sync::Arc;

impl VHost {
    fn is_durable_destination(&self, dest: &Destination) -> bool {
        match dest {
            Destination::Queue(q) => q.stored.is_some(),
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
        let exchanges = self.exchanges();
        for e in &exchanges {
            if e.durable && !e.name.is_empty() && !names::has_reserved_prefix(&e.name) {
                defs.exchanges.push(ExchangeDefinition {
                    name: e.name.clone(),
                    kind: e.kind.as_str().to_owned(),
                    auto_delete: e.auto_delete,
                    internal: e.internal,
                    arguments: e.arguments.clone(),
                });
            }
        }
        for q in self.queues() {
            if q.stored.is_some() {
                defs.queues.push(QueueDefinition {
                    name: q.name.clone(),
                    auto_delete: q.auto_delete,
                    arguments: q.arguments.clone(),
                });
            }
        }
        for e in exchanges.iter().filter(|e| e.durable && !e.name.is_empty()) {
            for b in e.bindings() {
                if self.is_durable_destination(&b.destination) {
                    defs.bindings.push(BindingDefinition {
                        source: e.name.clone(),
                        destination: b.destination.name().clone(),
                        to_exchange: !b.destination.is_queue(),
                        routing_key: b.routing_key,
                        arguments: b.arguments,
                    });
                }
            }
        }
        defs
    }

    /// Writes the durable definitions to the store (atomic replace, fsync'd).
    pub(super) fn persist_definitions(&self) {
        let Some(store) = &self.store else {
            return;
        };
        let _serial = self.definitions_lock.lock();
        let blob = self.durable_definitions().encode();
        if let Err(e) = store.save_definitions(&blob) {
            tracing::error!(error = %e, "saving definitions failed");
        }
    }

    /// Recreates durable definitions and the messages the store kept for each queue.
    pub fn recover(self: &Arc<Self>, recovered: warren_store::Recovered) {
        let defs = match recovered.definitions.as_deref().map(Definitions::decode) {
            None => Definitions::default(),
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                tracing::error!(error = %e, "stored definitions unreadable; starting without them");
                Definitions::default()
            }
        };
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
            self.exchanges.write().insert(e.name, Arc::new(exchange));
        }
        for q in defs.queues {
            if let Err(e) =
                self.create_queue(q.name.clone(), true, None, q.auto_delete, q.arguments)
            {
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
        let mut restored = 0u64;
        for (_, rq) in recovered.queues {
            let Some(queue) = self.queue(&rq.name) else {
                // The store knew a queue the definitions do not: drop its messages.
                if let Some(store) = &self.store {
                    if let Some((id, _)) = store.queues().into_iter().find(|(_, n)| *n == rq.name) {
                        let _ = store.delete_queue(id);
                    }
                }
                continue;
            };
            restored += rq.live.len();
            queue.restore(rq.live, rq.live_body_bytes, rq.first);
        }
        tracing::info!(
            restored_messages = restored,
            queues = self.queues.read().len(),
            "recovered durable state"
        );
    }
}

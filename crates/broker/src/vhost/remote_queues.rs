//! Remote queue records and a queue's serving nodes: how a node that does not serve a queue
//! holds it (see `crate::remote`), [`VHost::set_serving`], which moves a queue between
//! "served here" and "a record forwarding to node N" in place, and
//! [`VHost::set_quorum_members`], which records the nodes a quorum queue's group runs on
//! after they changed. The cluster's definitions apply installs a record on every node but
//! the queue's home node, so routing, declare-ok and the API find the queue everywhere.

use super::VHost;
use crate::consumer::{ConnectionEvent, Consumer};
use crate::error::{AmqpError, AmqpResult};
use crate::exchange::{Binding, Destination};
use crate::policy::EntityKind;
use crate::queue::{Queue, QueueHome};
use crate::queue_args::queue_limits;
use crate::quorum::QuorumQueue;
use crate::remote::{PeerLink, RemoteQueue};
use std::sync::{Arc, Weak};
use warren_codec::{FieldTable, ShortStr};

/// Where a queue is served, for [`VHost::set_serving`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serving {
    /// This node serves the queue: it holds the real queue.
    Here,
    /// The node of that name serves it; this node forwards to it.
    Node(String),
}

impl VHost {
    /// Registers queue `name` as served by `peer` (`served_type`: `classic` or `quorum`, as
    /// that node declared it). Fails when a queue of that name is already here: a record
    /// never silently replaces a queue (bindings point at the queue they were made for;
    /// [`VHost::set_serving`] is the way to move one).
    #[allow(clippy::too_many_arguments)]
    pub fn install_remote_queue(
        self: &Arc<Self>,
        name: ShortStr,
        durable: bool,
        auto_delete: bool,
        arguments: FieldTable,
        peer: &Arc<PeerLink>,
        served_type: &'static str,
    ) -> AmqpResult<Arc<Queue>> {
        // Policies before queues: the vhost's lock order.
        let policies = self.policies.read();
        let mut queues = self.queues.write();
        if queues.contains_key(&name) {
            return Err(AmqpError::precondition(format!(
                "queue '{name}' in vhost '{}' already exists",
                self.name
            )));
        }
        let queue = self.remote_record(
            name.clone(),
            durable,
            auto_delete,
            arguments,
            peer,
            served_type,
        );
        queue.apply_policies(policies.applied(EntityKind::Queue, &name));
        queues.insert(queue.clone());
        // Under the write lock: a reader that takes the name finds the record.
        self.queue_activity.note(&queue.name);
        Ok(queue)
    }

    fn remote_record(
        self: &Arc<Self>,
        name: ShortStr,
        durable: bool,
        auto_delete: bool,
        arguments: FieldTable,
        peer: &Arc<PeerLink>,
        served_type: &'static str,
    ) -> Arc<Queue> {
        let remote = RemoteQueue::new(peer, &self.name, &name, served_type, Arc::default());
        Arc::new(Queue::new(
            name,
            durable,
            None,
            auto_delete,
            arguments.clone(),
            queue_limits(&arguments).shared(),
            Arc::downgrade(self) as Weak<dyn QueueHome>,
            None,
            Box::new(remote),
        ))
    }

    /// Changes where queue `name` is served, in place: its bindings and policies stay.
    ///
    /// - [`Serving::Here`] turns a remote record into the real queue: a classic queue as
    ///   declared, empty (a classic queue's messages stay on the node that held them: this
    ///   is for a queue whose data is replicated, or a fresh start); a quorum queue as this
    ///   node's member of its group, started here (the group's log has its messages).
    /// - [`Serving::Node`] turns the real queue or a record for another node into a record
    ///   for that node. The real queue's data is left where it is (a classic queue's store,
    ///   a quorum queue's log): only this node stops serving it.
    ///
    /// Either way this node's consumers of the queue get basic.cancel (RabbitMQ's
    /// consumer_cancel_notify when a queue's leader moves), publishes awaiting the old
    /// serving side's answer are nacked, and messages the consumers held go back to the
    /// queue on the old serving side. Meant for a classic queue's home node; a quorum queue's
    /// leader moves are followed by its `QuorumQueue` (a delegate to the leader's node, the
    /// group member kept), not here. Nothing to do when the queue
    /// is already served as asked; an unknown queue is a 404.
    pub fn set_serving(self: &Arc<Self>, name: &str, serving: Serving) -> AmqpResult<()> {
        let old = self
            .queue(name)
            .ok_or_else(|| super::namespace::not_found_queue(&self.name, name))?;
        let served_type = old.type_name();
        let new = match (&serving, RemoteQueue::of(&old)) {
            (Serving::Here, None) => return Ok(()),
            (Serving::Node(node), Some(r)) if r.node() == node => return Ok(()),
            (Serving::Here, Some(_)) => self.real_queue(&old)?,
            (Serving::Node(node), _) => {
                let peer = self.forward_peers().peer(node);
                self.remote_record(
                    old.name.clone(),
                    old.durable,
                    old.auto_delete,
                    old.arguments.clone(),
                    &peer,
                    served_type,
                )
            }
        };
        new.apply_policies(old.policies());
        {
            let mut queues = self.queues.write();
            match queues.get(&old.name) {
                Some(q) if Arc::ptr_eq(q, &old) => {
                    queues.insert(new.clone());
                    self.queue_activity.note(&old.name);
                }
                // Deleted or replaced meanwhile: the newer change wins.
                _ => return Ok(()),
            }
        }
        let old_dest = Destination::Queue(old.clone());
        for exchange in self.exchanges() {
            let moved: Vec<Binding> = exchange
                .bindings()
                .into_iter()
                .filter(|b| b.destination == old_dest)
                .collect();
            if moved.is_empty() {
                continue;
            }
            exchange.unbind_destination(&old_dest);
            for b in moved {
                exchange.bind(Binding {
                    destination: Destination::Queue(new.clone()),
                    ..b
                });
            }
        }
        if QuorumQueue::of(&new).is_some() {
            crate::quorum::start(&new);
        }
        for c in old.detach() {
            cancel(&c);
        }
        if new.expires_ms().is_some() {
            self.watch_expiry(&new);
        }
        Ok(())
    }

    /// Records quorum queue `name`'s group members after a membership change (see
    /// `DefinitionOp::QueueSetMembers`), persisted with the definitions: what a node that is
    /// no member shows, and what every node starts the queue with after a restart. A 404 for
    /// an unknown queue, a 406 for one that is not a quorum queue.
    pub fn set_quorum_members(&self, name: &str, members: Vec<u64>) -> AmqpResult<()> {
        let queue = self
            .queue(name)
            .ok_or_else(|| super::namespace::not_found_queue(&self.name, name))?;
        let quorum = QuorumQueue::of(&queue).ok_or_else(|| {
            AmqpError::precondition(format!(
                "queue '{name}' in vhost '{}' is not a quorum queue",
                self.name
            ))
        })?;
        quorum.set_members(members);
        self.persist_definitions();
        Ok(())
    }

    /// The real queue for a record, as its serving node declared it.
    fn real_queue(self: &Arc<Self>, record: &Arc<Queue>) -> AmqpResult<Arc<Queue>> {
        self.build_queue(
            record.name.clone(),
            record.durable,
            None,
            record.auto_delete,
            record.arguments.clone(),
            // A quorum record turned into the real queue: its group members come with the
            // group's own state (a member found in the shared log keeps its membership).
            Vec::new(),
        )
    }
}

fn cancel(c: &Consumer) {
    let _ = c.send(ConnectionEvent::ConsumerCancelled {
        channel: c.channel,
        consumer_tag: c.tag.clone(),
    });
}

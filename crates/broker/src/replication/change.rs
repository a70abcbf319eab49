//! `Broker::change` and the types around it: a change applied at once (a single node) or
//! submitted to the cluster's metadata log through a `Replicator` and awaited (see the
//! folder's index, `replication.rs`).

use crate::broker::Broker;
use crate::consumer::{ConnectionId, Consumer};
use crate::definition_op::{decode_result, encode_result, DefinitionOp, Outcome};
use crate::error::AmqpError;
use crate::queue::Queue;
use crate::queue::QueueHandle;
use crate::quorum::placement;
use crate::quorum::QuorumQueue;
use crate::vhost::VHost;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use warren_codec::ReplyCode;
use warren_quorum::metadata::METADATA_OP_TIMEOUT;

/// Why an op did not get through the log (no leader, a lost quorum, a shut-down node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationError(pub String);

impl std::fmt::Display for ReplicationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Submitted = Pin<Box<dyn Future<Output = Result<Vec<u8>, ReplicationError>> + Send>>;

/// A metadata log: `submit` proposes an encoded op and resolves, once the op is committed
/// and this node has applied it (through `Broker::apply_replicated`), with the bytes that
/// application returned.
pub trait Replicator: Send + Sync {
    fn submit(&self, op: Vec<u8>) -> Submitted;
}

/// How long the placement's count of groups per node is reused (`with_quorum_members`): a
/// count looks at every queue, which for each of 10,000 declarations in a row made declaring
/// O(queues²). The groups this node places meanwhile are added to it; other nodes' are
/// seen at the next count.
const GROUPS_PER_NODE_RECOUNT: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest a protocol session holds a lookup for `Broker::catch_up_wait`: as long as it
/// waits for a link to a queue's node (`vhost::LINK_WAIT`), the other wait before a 404.
pub const CATCH_UP_WAIT: std::time::Duration = crate::vhost::LINK_WAIT;

/// A queue or exchange name a client's command or link looks up, and is refused for (404,
/// amqp:not-found) when this node does not know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameLookup<'a> {
    Queue(&'a str),
    Exchange(&'a str),
}

/// A wait for this node to catch up with the metadata log (`Broker::catch_up_wait`).
pub type CaughtUp = Pin<Box<dyn Future<Output = ()> + Send>>;

pub type PendingChange = Pin<Box<dyn Future<Output = Result<Outcome, AmqpError>> + Send>>;

/// Resolves once what a change wrote to the store is durable (fsync'd).
pub type DurableWait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A change made: done at once, made with its durability to wait for, or waiting for the
/// metadata log.
pub enum Change {
    Done(Result<Outcome, AmqpError>),
    /// Made here; what it wrote to the store is durable once `durable` resolves. The answer
    /// may be prepared now, but must not reach the client before (a connection holds its
    /// output back meanwhile and goes on reading: pipelined declares share one fsync). A
    /// later wait covers every earlier one.
    Unsynced {
        result: Result<Outcome, AmqpError>,
        durable: DurableWait,
    },
    Pending(PendingChange),
}

impl Change {
    /// The result, however it comes (once durable).
    pub async fn result(self) -> Result<Outcome, AmqpError> {
        match self {
            Change::Done(result) => result,
            Change::Unsynced { result, durable } => {
                durable.await;
                result
            }
            Change::Pending(pending) => pending.await,
        }
    }
}

impl std::fmt::Debug for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Done(result) => f.debug_tuple("Done").field(result).finish(),
            Change::Unsynced { result, .. } => f.debug_tuple("Unsynced").field(result).finish(),
            Change::Pending(_) => f.write_str("Pending"),
        }
    }
}

impl Broker {
    /// A read barrier: resolves once every definitions change committed so far is applied
    /// on this node (`DefinitionOp::Barrier` through the metadata log). None without a log
    /// (a single node's view is the truth). Called before an answer that rests on a name
    /// being absent: this node may be behind the log (an op another node has just answered
    /// for, a node back from a partition), while a client takes 404 as "not there".
    pub fn catch_up(&self) -> Option<PendingChange> {
        let replicator = self.replicator()?;
        Some(Box::pin(submit(replicator.as_ref(), DefinitionOp::Barrier)))
    }

    /// What a protocol session holds a method or an attach for when it names a queue or
    /// exchange this node does not know: `catch_up`, over when the barrier is applied, when
    /// it fails (no quorum: this node's view is all there is) or after [`CATCH_UP_WAIT`].
    /// None without a log.
    pub fn catch_up_wait(&self) -> Option<CaughtUp> {
        let barrier = self.catch_up()?;
        Some(Box::pin(async move {
            let _ = tokio::time::timeout(CATCH_UP_WAIT, barrier).await;
        }))
    }

    /// The wait a protocol session holds a lookup of `name` in `vhost` for: `catch_up_wait`
    /// when this node has a log and does not know the name (another node may have just
    /// declared it and answered for it), None otherwise. Direct reply-to and the default
    /// exchange are always known. Checks for a log first: a single node looks nothing up.
    pub fn catch_up_unless_known(&self, vhost: &VHost, name: NameLookup<'_>) -> Option<CaughtUp> {
        self.replicator()?;
        let known = match name {
            NameLookup::Queue(queue) => {
                queue.starts_with(crate::names::DIRECT_REPLY_TO) || vhost.queue(queue).is_some()
            }
            NameLookup::Exchange(exchange) => {
                exchange.is_empty() || vhost.exchange(exchange).is_some()
            }
        };
        match known {
            true => None,
            false => self.catch_up_wait(),
        }
    }

    /// Makes one definitions change: applied here and now on a single node, submitted to
    /// the metadata log when the broker has a replicator (see the module's comment).
    pub fn change(&self, mut op: DefinitionOp) -> Change {
        let Some(replicator) = self.replicator() else {
            return self.apply_here(op);
        };
        if self.is_node_local(&op) {
            return self.apply_here(op);
        }
        self.mirror_new_queue_as_quorum(&mut op);
        if self.needs_quorum_members(&op) {
            return self.declare_quorum_queue(op, replicator.clone());
        }
        if let DefinitionOp::QueueDeclare {
            home: home @ None,
            vhost,
            name,
            arguments,
            ..
        } = &mut op
        {
            // Chosen here, by the proposing node, so every node agrees (`placement.rs`). A
            // quorum queue has members instead, and counting every queue's home (a look at
            // each queue) would cost each of 10,000 declarations as much as the queues.
            if !crate::queue_args::is_quorum(arguments) {
                *home = self.queue_home(vhost, name, arguments);
            }
        }
        Change::Pending(Box::pin(submit(replicator.as_ref(), op)))
    }

    /// Applies `op` on this node now. What it wrote to the store is fsync'd after, off the
    /// async thread, and answered for once that is done (`Change::Unsynced`): changes made
    /// side by side (declares in flight on many channels and connections) share the fsync
    /// (`persist::deferring_sync`). A change that wrote nothing answers at once.
    fn apply_here(&self, op: DefinitionOp) -> Change {
        let (result, unsynced) = crate::persist::deferring_sync(|| self.apply(op));
        let store = match self.store() {
            Some(store) if unsynced && result.is_ok() => store.clone(),
            _ => return Change::Done(result),
        };
        let ticket = store.metadata_ticket();
        if store.metadata_durable() >= ticket {
            return Change::Done(result);
        }
        // Lazy: nothing is spawned until the wait is polled, so a connection that replaces
        // it with a later one (the next declare of the same read) never spawns this one.
        let durable = Box::pin(async move {
            let synced = tokio::task::spawn_blocking(move || store.sync_metadata(ticket)).await;
            match synced {
                Ok(Ok(())) => {}
                // As a failed write of the definitions: logged, and the change stands (it is
                // written whole at the next change, `Journal::sync_failed`).
                Ok(Err(e)) => tracing::error!(error = %e, "syncing definitions failed"),
                Err(e) => tracing::error!(error = %e, "syncing definitions failed"),
            }
        });
        Change::Unsynced { result, durable }
    }

    /// A new quorum queue's declaration in a cluster: its group's members are chosen among
    /// the cluster's voters, this node first (`quorum::placement`), so a node still forming
    /// or joining its cluster first waits to be a voter — placed before, the queue would get
    /// a group of whatever this node saw then (nobody, or itself alone), which every node
    /// would then start as a group of its own. Refused, never applied here alone, when the
    /// node is not a voter within the metadata group's time for a change.
    fn declare_quorum_queue(&self, op: DefinitionOp, replicator: Arc<dyn Replicator>) -> Change {
        let cluster = self.cluster().cloned();
        if cluster.as_ref().is_none_or(|c| c.is_voter()) {
            // The usual case, placed and submitted now: changes keep the order they were
            // made in (a no-wait declare and the bind after it).
            let op = self.with_quorum_members(op);
            return Change::Pending(Box::pin(submit(replicator.as_ref(), op)));
        }
        let weak = self.weak();
        Change::Pending(Box::pin(async move {
            if let Some(cluster) = cluster {
                let joined = tokio::time::timeout(METADATA_OP_TIMEOUT, cluster.wait_voter()).await;
                if joined.is_err() {
                    return Err(AmqpError::new(
                        ReplyCode::InternalError,
                        format!(
                            "definitions change not committed: this node did not join its \
                             cluster within {}s (are its --cluster-peers running and reachable, \
                             with the same secret?)",
                            METADATA_OP_TIMEOUT.as_secs()
                        ),
                    ));
                }
            }
            let Some(broker) = weak.upgrade() else {
                return Err(AmqpError::new(
                    ReplyCode::InternalError,
                    "definitions change not committed: the broker is shutting down",
                ));
            };
            let op = broker.with_quorum_members(op);
            drop(broker);
            submit(replicator.as_ref(), op).await
        }))
    }

    /// A new queue that a classic mirroring policy makes a quorum queue becomes one here, on
    /// the proposing node (`vhost/mirroring.rs`), so that its declaration carries the type and
    /// the group's members: decided where it is applied, every node would start a group of
    /// its own.
    fn mirror_new_queue_as_quorum(&self, op: &mut DefinitionOp) {
        let DefinitionOp::QueueDeclare {
            vhost,
            name,
            durable,
            exclusive,
            auto_delete,
            arguments,
            ..
        } = op
        else {
            return;
        };
        if let Some(vhost) = self.vhost(vhost).filter(|v| v.queue(name).is_none()) {
            vhost.mirror_as_quorum(name, *durable, *exclusive, *auto_delete, arguments);
        }
    }

    /// Whether `op` declares a quorum queue whose members the proposing node must choose.
    fn needs_quorum_members(&self, op: &DefinitionOp) -> bool {
        let DefinitionOp::QueueDeclare {
            vhost,
            name,
            arguments,
            members,
            ..
        } = op
        else {
            return false;
        };
        self.cluster().is_some()
            && members.is_empty()
            && crate::queue_args::is_quorum(arguments)
            && self.vhost(vhost).is_none_or(|v| v.queue(name).is_none())
    }

    /// Stops a consumer (basic.cancel, a detached link, a forwarded consumer cancelled):
    /// removes it from its queue and, when it was an auto-delete queue's last consumer,
    /// deletes the queue (`delete_unused_queue`). Every protocol stops consumers here.
    /// Returns the consumer, None when the queue had no such one.
    pub fn stop_consuming(
        &self,
        vhost: &Arc<VHost>,
        queue: &QueueHandle,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<Arc<Consumer>> {
        let (consumer, unused) = queue.queue().remove_consumer(connection, channel, tag)?;
        if unused {
            self.delete_unused_queue(vhost, queue.queue());
        }
        Some(consumer)
    }

    /// Deletes an auto-delete queue its last consumer left. An exclusive queue is this
    /// node's own and goes at once, as does any queue on a single node; in a cluster any
    /// other queue's deletion is a definitions change that nobody waits for (it runs as a
    /// task of its own).
    pub fn delete_unused_queue(&self, vhost: &Arc<VHost>, queue: &Arc<Queue>) {
        if queue.exclusive_owner.is_some() || self.replicator().is_none() {
            vhost.remove_queue(queue);
            return;
        }
        let op = DefinitionOp::QueueDelete {
            vhost: vhost.name.clone(),
            name: queue.name.to_string(),
            connection: 0,
        };
        let Change::Pending(pending) = self.change(op) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let name = queue.name.clone();
        runtime.spawn(async move {
            if let Err(e) = pending.await {
                tracing::warn!(queue = %name, error = %e, "deleting an unused auto-delete queue failed");
            }
        });
    }

    /// What the replicator calls on every node for every committed op, in log order:
    /// applies it and answers the result's bytes (the proposer's go back to its caller).
    pub fn apply_replicated(&self, op: &[u8]) -> Vec<u8> {
        let result = DefinitionOp::decode(op).and_then(|op| self.apply(op));
        if let Err(e) = &result {
            tracing::debug!(code = e.code as u16, text = %e.text, "replicated definitions op refused");
        }
        encode_result(&result)
    }

    /// A new quorum queue's declaration with its group's members chosen here, the declaring
    /// node (`quorum::placement`). An existing queue keeps its group (the op then only checks
    /// equivalence), and an op that already names members keeps them.
    fn with_quorum_members(&self, mut op: DefinitionOp) -> DefinitionOp {
        let DefinitionOp::QueueDeclare {
            vhost,
            name,
            arguments,
            members,
            ..
        } = &mut op
        else {
            return op;
        };
        let Some(cluster) = self.cluster() else {
            return op;
        };
        let exists = self.vhost(vhost).is_some_and(|v| v.queue(name).is_some());
        if !members.is_empty() || exists || !crate::queue_args::is_quorum(arguments) {
            return op;
        }
        let Some(size) = placement::initial_group_size(arguments) else {
            return op;
        };
        let mut counted = self.groups_per_node.lock();
        let fresh = counted
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < GROUPS_PER_NODE_RECOUNT);
        if !fresh {
            let mut groups: HashMap<u64, usize> = HashMap::new();
            for queue in self.vhosts().iter().flat_map(|v| v.queues()) {
                if let Some(qq) = QuorumQueue::of(&queue) {
                    for member in qq.members() {
                        *groups.entry(member).or_default() += 1;
                    }
                }
            }
            *counted = Some((tokio::time::Instant::now(), groups));
        }
        let Some((_, groups)) = counted.as_mut() else {
            return op;
        };
        let candidates: Vec<placement::Candidate> = cluster
            .status()
            .members
            .iter()
            .filter(|m| m.voter)
            .map(|m| placement::Candidate {
                node: m.id,
                running: m.running,
            })
            .collect();
        *members = placement::choose_members(cluster.id(), &candidates, groups, size);
        // Counted until the next recount, so a burst of declarations here spreads too.
        for member in members.iter() {
            *groups.entry(*member).or_default() += 1;
        }
        op
    }

    /// Ops about exclusive queues, which live on this node only: a declaration of one, or a
    /// deletion or binding naming a queue that is exclusive here.
    fn is_node_local(&self, op: &DefinitionOp) -> bool {
        use DefinitionOp::*;
        let (vhost, queue) = match op {
            QueueDeclare {
                exclusive: true, ..
            } => return true,
            QueueDeclare { vhost, name, .. } | QueueDelete { vhost, name, .. } => (vhost, name),
            QueueBind { vhost, queue, .. } | QueueUnbind { vhost, queue, .. } => (vhost, queue),
            _ => return false,
        };
        self.vhost(vhost)
            .and_then(|v| v.queue(queue))
            .is_some_and(|q| q.exclusive_owner.is_some())
    }
}

/// Submits `op` to the metadata log now (so changes keep the order they were made in); its
/// result once committed and applied on this node.
fn submit(
    replicator: &dyn Replicator,
    op: DefinitionOp,
) -> impl Future<Output = Result<Outcome, AmqpError>> + Send + 'static {
    let submitted = replicator.submit(op.without_connection().encode());
    async move {
        match submitted.await {
            Ok(bytes) => decode_result(&bytes),
            Err(e) => Err(AmqpError::new(
                ReplyCode::InternalError,
                format!("definitions change not committed: {e}"),
            )),
        }
    }
}

//! The seam between definitions changes and a cluster's metadata log. `Broker::change` is
//! how every caller makes a change:
//!
//! - Without a `Replicator` (a single node) the op is applied at once, synchronously, as
//!   changes always were: `Change::Done`.
//! - With one, the op's bytes are submitted and the caller gets `Change::Pending`, which
//!   resolves once the op is committed and applied on this node. The replicator hands every
//!   committed op to `Broker::apply_replicated` on every node, the proposing one included,
//!   in log order; the proposer's result travels back to it as bytes.
//!
//! A queue declaration carries its home node, chosen by the proposing node (`placement.rs`):
//! the home node creates the classic queue, every other node a remote record forwarding to
//! it (`crate::remote`). Deleting it from any node deletes the queue and every record.
//!
//! Exclusive queues stay node-local: they live and die with one connection to one node, so
//! their declaration, deletion and bindings (which only their owner may make) are applied
//! locally, never proposed. Every other queue op is replicated. (So another node knows
//! nothing of them: a replicated queue given the name of an exclusive queue on some node
//! is refused there, 405, and exists everywhere else. RabbitMQ keeps exclusive queues in
//! its cluster-wide metadata; server-named queues, the usual exclusive ones, cannot clash.) What a connection closing
//! deletes (its exclusive queues) is therefore local too. A non-exclusive auto-delete queue
//! whose last consumer (on this node) leaves is deleted by a change like any other
//! (`delete_unused_queue`). `x-expires` is judged from the node's own clock and removes the
//! queue on that node only (`VHost::remove_queue`): a node-local trigger the metadata log
//! does not see yet.

mod change;
pub mod metadata_group;
mod restore;

#[cfg(test)]
mod tests;

pub use change::{
    CaughtUp, Change, DurableWait, NameLookup, PendingChange, ReplicationError, Replicator,
    Submitted,
};

//! The quorum queue type: a `Queue` whose messages live in a Raft group of
//! `warren-quorum` (rabbit_fifo-style state machine, the node's shared write-ahead log) instead
//! of the classic ready list and message store.
//!
//! The AMQP side talks to it through the same `Queue` methods as to a classic queue (publish,
//! add/remove consumer, settle, purge, delete, counts); each becomes a command proposed to the
//! group. Three tasks per queue do the asynchronous work, none per message:
//! - the proposer takes commands in arrival order, everything that waits at once in one log
//!   entry (`Command::Batch`: one append, one fsync and one apply for all of them), and hands
//!   it to openraft without waiting for the answer (`QueueGroup::propose_ff`);
//! - the completer awaits the answers in log order and settles publisher confirms
//!   (`QueueAnswers`): a confirm is an ack only once the group committed (fsync'd) the
//!   enqueue, a nack when the queue refused it (`reject-publish`) or the group failed;
//! - the effects task acts on what the applied commands produced: deliveries to consumers
//!   (where the consumer is attached: the leader's node; on one node that is this node)
//!   and dead-letters (from the leader only), routed to the queue's dead-letter exchange by
//!   the queue record's dead-lettering (`Queue::dead_letter`), shared by every type.
//!
//! Consumers are identified to the group by a key; which consumer holds which message id is
//! kept here so an ack, nack or reject (which names messages) becomes the group's settle,
//! retur
//!
//! The files by job: `queue.rs` (the queue as this node holds it, its consumers and its
//! delegate to the leader), `adapter.rs` (it as a `QueueType`), `group.rs` (the tasks that
//! drive its group), `dead_letters.rs`, `config.rs` (arguments and policies to the group's
//! configuration), `codec.rs` (messages in the log); and the cluster around the groups:
//! `host.rs` (the node's groups over one write-ahead log), `cluster.rs`, `join.rs`,
//! `membership.rs`, `placement.rs`, `reconcile.rs`, `status.rs`.n or discard for the right consumer.

mod adapter;
pub mod cluster;
pub(crate) mod codec;
mod config;
mod dead_letters;
mod group;
mod host;
pub mod join;
pub mod membership;
pub mod placement;
mod queue;
pub mod reconcile;
pub mod status;

pub use config::{dead_letter_at_least_once, queue_config};
pub(crate) use group::start;
pub use host::{LeaderChange, QuorumHost, LOCAL_NODE_ID};
pub use queue::{MemberStatus, QuorumQueue};

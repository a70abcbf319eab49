//! Warren's quorum queues below the AMQP layer: the replicated queue type's core, its
//! storage and network, and the cluster's transport and metadata group. The broker's quorum
//! queue type (`warren-broker`'s `quorum/`) runs on it.
//!
//! A quorum queue is one Raft group (openraft) whose state machine is a [`machine::QueueState`],
//! modelled on RabbitMQ's `rabbit_fifo`: enqueue, checkout (a consumer with a prefetch), settle,
//! return (requeue, counting delivery attempts against `x-delivery-limit`, default 20), discard,
//! purge, `x-max-length` with drop-head or reject-publish, and message TTL. The machine is pure:
//! the proposer stamps the time on each log entry and the machine returns [`machine::Effect`]s
//! (deliveries, dead-letters) instead of acting, so every replica computes the same state and
//! only the leader acts.
//!
//! Every group on a node keeps its Raft log in the node's one [`wal::Wal`]: records tagged with
//! the group id, appended by one writer thread that fsyncs once per batch, so one fsync covers
//! the appends of all groups in the batch. [`storage`] implements openraft's log storage over
//! it and the state machine over `QueueState`, with snapshots in a file per group so the log
//! is purged and the WAL checkpointed down to its live data. [`network`] defines the
//! node-to-node [`network::Transport`] (Raft RPCs tagged with the group id) with an in-process
//! implementation for tests; [`tcp`] is the real one between nodes (one authenticated
//! connection per peer node, [`wire`] frames, the [`handshake`] over a shared secret, and the
//! node-level failure detector's [`liveness`] table, which [`failover`] turns into elections in
//! place of per-group heartbeats), and [`node`] hosts groups: [`node::QueueGroup::propose`] returns
//! once the command is committed by a majority and applied on the leader — a publisher
//! confirm.
//!
//! The storage glue is written once against [`backend::LogBackend`] and
//! [`backend::SnapshotStore`]: the WAL and snapshot files on a real node, [`memlog`]'s in-memory
//! disk with explicit flush points in the deterministic simulation (`tests/sim.rs`), whose
//! election timeouts follow its seed through [`runtime::QuorumRuntime`] (and whose wake-ups
//! keep a deterministic order through its [`watch::OrderedWatch`]).
//!
//! Besides one group per queue, a cluster runs one [`metadata`] group: an ordered log of the
//! application's opaque operations (the broker's definitions), proposable from any node, whose
//! membership is the cluster's.
//!
//! openraft is pinned at 0.10.0-alpha.37 (0.10 is published only as alphas; the pin is exact
//! because its API still changes between them).

pub mod backend;
pub mod boxed_mpsc;
pub mod error;
pub mod failover;
pub mod handshake;
mod leader;
pub mod liveness;
pub mod machine;
pub mod member;
pub mod memlog;
pub mod metadata;
pub mod network;
pub mod node;
pub mod node_log;
pub mod runtime;
pub mod sockets;
pub mod status;
pub mod storage;
pub mod tcp;
pub mod transport;
pub mod types;
pub mod wal;
pub mod watch;
pub mod wire;

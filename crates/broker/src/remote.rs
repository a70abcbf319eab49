//! The remote queue type: the record a node keeps for a queue another node serves (a
//! classic queue's home node, a quorum queue's leader), forwarding every operation to it.
//!
//! A client may connect to any node and use any queue. Definitions are the same on every
//! node, so every node has a [`Queue`] for every queue; on the serving node it is the real
//! queue, on the others its type is a [`RemoteQueue`] that sends what the channel asks over the [`ForwardLink`] to the serving
//! node. The channel and publish paths see the same `Queue` methods as for the other types
//! (the queue-type interface); a remote queue answers them as a quorum queue does:
//! - publish: forwarded; with a publisher confirm, the confirm (the publish's
//!   `RoutedConfirm`, joined as a quorum queue joins it, so the channel keeps one kind of
//!   pending confirm) is answered when the serving queue accepted the
//!   message by its own rule — fsync'd for a durable queue's persistent message, committed
//!   for a quorum queue — and nacked when it refused it or the link is lost;
//! - consume: the serving node registers a consumer with the same prefetch, no-ack and
//!   exclusive flags; its deliveries come back and are handed to the local consumer as
//!   `ConnectionEvent::Deliver` (redelivered flag and headers as the serving queue set
//!   them), carrying the serving queue's message id, so ack / nack / reject name the
//!   serving node's message without a translation table, and the number of the binding it
//!   came over (`QueuedMessage::via`: the record on one link), so they go back over that
//!   binding or nowhere — after a reconnect, or through another delegate of a quorum queue,
//!   the same id may name another consumer's hold;
//! - basic.get: answered asynchronously (`ConnectionEvent::GetAnswered`), as for quorum;
//! - purge, message and consumer counts: the serving node reports its counts over the link
//!   whenever they change (a declare-ok on a forwarding node shows them as of the last
//!   report); purge answers the last count and forwards.
//!
//! The serving side (`remote/serve.rs`) acts toward the real queue as a connection does:
//! its consumers are registered with the link's own connection id and an events channel the
//! link drains into frames, so the queue types need no notion of remote peers. The link
//! (`remote/link.rs`) is one connection per node pair, carrying both directions' requests
//! for all queues and consumers (`remote/frame.rs`). A record holds its serving node's
//! [`PeerLink`] (`remote/peers.rs`), not a link: after a reconnect it binds itself on the
//! new link.
//!
//! Failures: while the serving node is unreachable (no live link), queue.declare,
//! basic.consume, basic.get and queue.purge of the queue answer 404 as RabbitMQ does for a
//! durable classic queue whose home node is down (`VHost::check_reachable`) — at once when
//! the failure detector holds the node down, after waiting for the link (at most
//! `vhost::LINK_WAIT`) while it is only being made (`VHost::link_to_await`) — and a publish
//! routed to it is nacked when confirmed (dropped otherwise). When the link is lost, local consumers of remote classic queues get basic.cancel
//! (`ConnectionEvent::ConsumerCancelled`, RabbitMQ's consumer_cancel_notify when a queue's
//! node goes down), unconfirmed publishes are nacked, acks of messages the client held
//! become no-ops — the serving node requeues those (redelivered) as a closing channel's are.
//! A serving queue deleted cancels its remote consumers the same way.

pub mod ask;
mod count_watch;
mod frame;
mod link;
pub mod peers;
mod queue;
mod serve;

pub use ask::{ask_peer, ask_peers, PeerAnswer};
pub use frame::{Frame, FrameError, SettleKind, MAX_FRAME_BYTES};
pub use link::ForwardLink;
pub use link::RemoteCounts;
pub use peers::{AnswerFuture, ForwardPeers, PeerAnswers, PeerLink};
pub use queue::RemoteQueue;
pub use serve::open;

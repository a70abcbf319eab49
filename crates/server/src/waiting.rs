//! What a channel method that waits is (see `pending.rs` for when and why they wait): the
//! reply it owes once its definitions change is made (`Reply`, `PendingReply`), or a method
//! held before it is handled (`Held`): until the link to its queue's node is up, or until
//! this node has caught up with the metadata log. Plain data, so that the connection's
//! context holds it without the channel.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use warren_broker::remote::PeerLink;
use warren_broker::vhost::LINK_WAIT;
use warren_broker::{CaughtUp, PendingChange};
use warren_codec::*;

/// What a channel method answers once its change is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    ExchangeDeclare {
        no_wait: bool,
    },
    ExchangeDelete {
        no_wait: bool,
    },
    ExchangeBind {
        no_wait: bool,
    },
    ExchangeUnbind {
        no_wait: bool,
    },
    QueueDeclare {
        no_wait: bool,
    },
    QueueBind {
        no_wait: bool,
    },
    /// queue.unbind has no no-wait.
    QueueUnbind,
    QueueDelete {
        no_wait: bool,
    },
}

impl Reply {
    /// The class and method ids of the method that waits (an error names them).
    pub fn method_ids(self) -> (u16, u16) {
        match self {
            Reply::ExchangeDeclare { .. } => {
                (ExchangeDeclare::CLASS_ID, ExchangeDeclare::METHOD_ID)
            }
            Reply::ExchangeDelete { .. } => (ExchangeDelete::CLASS_ID, ExchangeDelete::METHOD_ID),
            Reply::ExchangeBind { .. } => (ExchangeBind::CLASS_ID, ExchangeBind::METHOD_ID),
            Reply::ExchangeUnbind { .. } => (ExchangeUnbind::CLASS_ID, ExchangeUnbind::METHOD_ID),
            Reply::QueueDeclare { .. } => (QueueDeclare::CLASS_ID, QueueDeclare::METHOD_ID),
            Reply::QueueBind { .. } => (QueueBind::CLASS_ID, QueueBind::METHOD_ID),
            Reply::QueueUnbind => (QueueUnbind::CLASS_ID, QueueUnbind::METHOD_ID),
            Reply::QueueDelete { .. } => (QueueDelete::CLASS_ID, QueueDelete::METHOD_ID),
        }
    }
}

/// A channel method waiting for its definitions change.
pub struct PendingReply {
    pub channel: u16,
    pub reply: Reply,
    pub change: PendingChange,
}

/// What a held channel method waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldUntil {
    /// The link to its queue's serving node is up, the node is held down, or [`LINK_WAIT`]
    /// passed.
    Linked,
    /// This node has applied every definitions change committed so far
    /// (`Broker::catch_up_wait`), or its wait passed: the method names a queue or exchange
    /// this node does not know, which another node may just have answered a declare for.
    CaughtUp,
}

/// A channel method held before it is handled.
pub struct Held {
    pub channel: u16,
    pub method: Method,
    pub until: HeldUntil,
    /// Resolves when the wait is over.
    pub ready: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Held {
    pub fn for_link(channel: u16, method: Method, peer: Arc<PeerLink>) -> Box<Held> {
        tracing::debug!(peer = %peer.name(), method = method.name(), "waiting for the link to the queue's node");
        Box::new(Held {
            channel,
            method,
            until: HeldUntil::Linked,
            ready: Box::pin(async move {
                peer.linked(LINK_WAIT).await;
            }),
        })
    }

    /// Held until `caught_up` (`Broker::catch_up_wait`) is over.
    pub fn for_catch_up(channel: u16, method: Method, caught_up: CaughtUp) -> Box<Held> {
        tracing::debug!(method = method.name(), "catching up with the metadata log");
        Box::new(Held {
            channel,
            method,
            until: HeldUntil::CaughtUp,
            ready: caught_up,
        })
    }
}

/// What `method` looks up by name: passive declares, and the methods that use a queue's
/// messages now (an empty queue name is the channel's last declared queue). The methods
/// that change definitions go through the metadata log, which orders them after every
/// change committed before.
pub fn looked_up(method: &Method) -> Option<(&ShortStr, Looks)> {
    match method {
        Method::QueueDeclare(m) if m.passive => Some((&m.queue, Looks::Queue)),
        Method::ExchangeDeclare(m) if m.passive => Some((&m.exchange, Looks::Exchange)),
        Method::BasicConsume(m) => Some((&m.queue, Looks::Queue)),
        Method::BasicGet(m) => Some((&m.queue, Looks::Queue)),
        Method::QueuePurge(m) => Some((&m.queue, Looks::Queue)),
        _ => None,
    }
}

/// Whether a name `looked_up` returns is a queue's or an exchange's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Looks {
    Queue,
    Exchange,
}

/// The queue whose messages `method` uses now (what waits for its node's link); an empty
/// name is the channel's last declared queue.
pub fn queue_used(method: &Method) -> Option<&ShortStr> {
    match method {
        Method::QueueDeclare(m) => Some(&m.queue),
        _ => match looked_up(method)? {
            (queue, Looks::Queue) => Some(queue),
            (_, Looks::Exchange) => None,
        },
    }
}

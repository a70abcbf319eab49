//! What a channel method that waits is (see `pending.rs` for when and why they wait): the
//! reply it owes once its definitions change is made (`Reply`, `PendingReply`), or a method
//! held until the link to its queue's node is up (`HeldForLink`). Plain data, so that the
//! connection's context holds it without the channel.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use warren_broker::remote::PeerLink;
use warren_broker::vhost::LINK_WAIT;
use warren_broker::PendingChange;
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

/// A channel method held until the link to its queue's serving node is up.
pub struct HeldForLink {
    pub channel: u16,
    pub method: Method,
    /// Resolves when the link is up, the node is held down, or [`LINK_WAIT`] passed.
    pub linked: Pin<Box<dyn Future<Output = bool> + Send>>,
}

impl HeldForLink {
    pub fn new(channel: u16, method: Method, peer: Arc<PeerLink>) -> Box<HeldForLink> {
        tracing::debug!(peer = %peer.name(), method = method.name(), "waiting for the link to the queue's node");
        Box::new(HeldForLink {
            channel,
            method,
            linked: Box::pin(async move { peer.linked(LINK_WAIT).await }),
        })
    }
}

/// The queue whose messages `method` uses now (what waits for its node's link); an empty
/// name is the channel's last declared queue.
pub fn queue_used(method: &Method) -> Option<&ShortStr> {
    match method {
        Method::BasicConsume(m) => Some(&m.queue),
        Method::BasicGet(m) => Some(&m.queue),
        Method::QueuePurge(m) => Some(&m.queue),
        Method::QueueDeclare(m) => Some(&m.queue),
        _ => None,
    }
}

//! Channel methods that change definitions (exchange.declare/delete/bind/unbind,
//! queue.declare/bind/unbind/delete) make their change through `Broker::change`. On a single
//! node the change is done at once and the method answers as it always did, within the
//! same call. In a cluster the change waits for the metadata log: the method leaves a
//! `PendingReply` in its context and the connection awaits it before it handles this
//! connection's next frame (deliveries and writes go on meanwhile), then answers — the ok
//! method, or the channel or connection error the change was refused with.
//!
//! A method that uses a queue's messages now (basic.consume, basic.get, queue.purge,
//! queue.declare) while the link to the queue's serving node is still being made (nodes
//! forming, a reconnect; the node is not held down) waits the same way, before it is
//! handled: the connection holds it (`HeldForLink`) until the link is up or
//! [`LINK_WAIT`] passed, then handles it as if it had just arrived (a queue still
//! unreachable answers 404 then, as for a node that is down).

use crate::channel::Channel;
use crate::context::Ctx;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use warren_broker::remote::PeerLink;
use warren_broker::vhost::LINK_WAIT;
use warren_broker::{AmqpResult, Change, DefinitionOp, Outcome, PendingChange};
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

impl Channel {
    /// Makes `op`'s change and answers with `reply` when it is done: now, or (in a
    /// cluster) once the connection has awaited the `PendingReply` this leaves in `ctx`.
    pub(crate) fn change(
        &mut self,
        ctx: &mut Ctx,
        op: DefinitionOp,
        reply: Reply,
    ) -> AmqpResult<()> {
        match ctx.broker.change(op) {
            Change::Done(result) => {
                self.finish_change(reply, result?, ctx);
                Ok(())
            }
            Change::Pending(change) => {
                *ctx.pending = Some(PendingReply {
                    channel: self.id,
                    reply,
                    change,
                });
                Ok(())
            }
        }
    }

    /// The ok method of a change made.
    pub(crate) fn finish_change(&mut self, reply: Reply, outcome: Outcome, ctx: &mut Ctx) {
        let ch = self.id;
        match reply {
            Reply::ExchangeDeclare { no_wait } => {
                if !no_wait {
                    ctx.send(ch, ExchangeDeclareOk);
                }
            }
            Reply::ExchangeDelete { no_wait } => {
                if !no_wait {
                    ctx.send(ch, ExchangeDeleteOk);
                }
            }
            Reply::ExchangeBind { no_wait } => {
                if !no_wait {
                    ctx.send(ch, ExchangeBindOk);
                }
            }
            Reply::ExchangeUnbind { no_wait } => {
                if !no_wait {
                    ctx.send(ch, ExchangeUnbindOk);
                }
            }
            Reply::QueueDeclare { no_wait } => {
                let Outcome::QueueDeclared {
                    name,
                    message_count,
                    consumer_count,
                    ..
                } = outcome
                else {
                    return;
                };
                let queue = ShortStr::from(name);
                self.last_queue = Some(queue.clone());
                if !no_wait {
                    ctx.send(
                        ch,
                        QueueDeclareOk {
                            queue,
                            message_count,
                            consumer_count,
                        },
                    );
                }
            }
            Reply::QueueBind { no_wait } => {
                if !no_wait {
                    ctx.send(ch, QueueBindOk);
                }
            }
            Reply::QueueUnbind => ctx.send(ch, QueueUnbindOk),
            Reply::QueueDelete { no_wait } => {
                let message_count = match outcome {
                    Outcome::QueueDeleted { message_count } => message_count,
                    _ => 0,
                };
                if !no_wait {
                    ctx.send(ch, QueueDeleteOk { message_count });
                }
            }
        }
    }
}

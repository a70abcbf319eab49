//! Channel methods that change definitions (exchange.declare/delete/bind/unbind,
//! queue.declare/bind/unbind/delete) make their change through `Broker::change`. On a single
//! node the change is done at once and the method answers within the same call; when the
//! change wrote to the store, the answer is held back with the rest of the connection's
//! output until the store has fsync'd it (`Ctx::hold_output_until`), while the connection
//! reads on, so pipelined changes share an fsync. In a cluster the change waits for the metadata log: the method leaves a
//! `PendingReply` in its context and the connection awaits it before it handles this
//! connection's next frame (deliveries and writes go on meanwhile), then answers — the ok
//! method, or the channel or connection error the change was refused with.
//!
//! A method that uses a queue's messages now (basic.consume, basic.get, queue.purge,
//! queue.declare) while the link to the queue's serving node is still being made (nodes
//! forming, a reconnect; the node is not held down) waits the same way, before it is
//! handled: the connection holds it (`Held::for_link`) until the link is up or
//! `LINK_WAIT` passed, then handles it as if it had just arrived (a queue still
//! unreachable answers 404 then, as for a node that is down). A method that looks up a
//! queue or exchange this node does not know yet (passive declares, basic.consume,
//! basic.get, queue.purge) first waits for this node to catch up with the metadata log
//! (`Held::for_catch_up`): another node may have just answered its declare-ok, and a
//! client that moved nodes must find what it declared there, not a 404.

use crate::channel::Channel;
use crate::context::Ctx;
use crate::waiting::{PendingReply, Reply};
use warren_broker::{AmqpResult, Change, DefinitionOp, Outcome};
use warren_codec::*;

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
            Change::Unsynced { result, durable } => {
                let answer_from = ctx.out.len();
                self.finish_change(reply, result?, ctx);
                ctx.hold_output_until(answer_from, durable);
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

//! The consume side of a channel: basic.consume/cancel/get, turning queue deliveries into
//! frames with delivery tags, and settling them (ack, nack, reject, recover, channel close).

use crate::channel::{Channel, ChannelState, ConsumerEntry};
use crate::context::Ctx;
use crate::publish::TxOp;
use std::sync::Arc;
use warren_broker::names::{generated_consumer_tag, DIRECT_REPLY_TO};
use warren_broker::queue::QueuedMessage;
use warren_broker::{AmqpError, AmqpResult, Consumer, Delivery, Queue};
use warren_codec::*;

/// What happens to settled deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settlement {
    Ack,
    Requeue,
    /// Rejected without requeue: dead-lettered if the queue has a dead-letter exchange.
    Reject,
}

/// A delivery the client has not acknowledged yet.
pub struct Unacked {
    pub tag: u64,
    pub queue: Arc<Queue>,
    pub message: QueuedMessage,
    /// None for basic.get deliveries (no consumer credit to give back).
    pub consumer: Option<Arc<Consumer>>,
}

impl Channel {
    pub fn consume(&mut self, m: BasicConsume, ctx: &mut Ctx) -> AmqpResult<()> {
        let tag = if m.consumer_tag.is_empty() {
            ShortStr::from(generated_consumer_tag())
        } else {
            m.consumer_tag.clone()
        };
        if self.consumers.contains_key(&tag) {
            return Err(AmqpError::new(
                ReplyCode::NotAllowed,
                format!("attempt to reuse consumer tag '{tag}'"),
            ));
        }
        if m.queue.as_str() == DIRECT_REPLY_TO {
            if !m.no_ack {
                return Err(AmqpError::precondition("reply consumer cannot acknowledge"));
            }
            if self.reply_to_key.is_some() {
                return Err(AmqpError::precondition("reply consumer already set"));
            }
            let consumer = Arc::new(Consumer::new(
                tag.clone(),
                self.id,
                ctx.connection,
                true,
                false,
                0,
                self.flow.clone(),
                std::sync::Weak::new(),
                ctx.events.clone(),
            ));
            self.reply_to_key = Some(ctx.vhost.register_reply_consumer(&consumer));
            self.consumers.insert(
                tag.clone(),
                ConsumerEntry {
                    consumer,
                    queue: None,
                },
            );
            if !m.no_wait {
                ctx.send(self.id, BasicConsumeOk { consumer_tag: tag });
            }
            return Ok(());
        }
        let name = self.queue_name(m.queue)?;
        let queue = ctx.vhost.queue_for(&name, ctx.connection)?;
        let consumer = Arc::new(Consumer::new(
            tag.clone(),
            self.id,
            ctx.connection,
            m.no_ack,
            m.exclusive,
            self.consumer_prefetch,
            self.flow.clone(),
            Arc::downgrade(&queue),
            ctx.events.clone(),
        ));
        queue.touch();
        queue.add_consumer(consumer.clone())?;
        // Deliveries the queue made just now wait in the connection's event channel, which it
        // reads after this call, so consume-ok still reaches the client first.
        if !m.no_wait {
            ctx.send(
                self.id,
                BasicConsumeOk {
                    consumer_tag: tag.clone(),
                },
            );
        }
        self.consumers.insert(
            tag,
            ConsumerEntry {
                consumer,
                queue: Some(queue),
            },
        );
        Ok(())
    }

    pub fn cancel(&mut self, m: BasicCancel, ctx: &mut Ctx) {
        self.remove_consumer(&m.consumer_tag, ctx);
        if !m.no_wait {
            ctx.send(
                self.id,
                BasicCancelOk {
                    consumer_tag: m.consumer_tag,
                },
            );
        }
    }

    /// Detaches a consumer from its queue (deleting an auto-delete queue it leaves unused).
    fn remove_consumer(&mut self, tag: &str, ctx: &mut Ctx) {
        let Some(entry) = self.consumers.remove(tag) else {
            return;
        };
        match entry.queue {
            Some(queue) => {
                let removed = queue.remove_consumer(ctx.connection, self.id, tag);
                if let Some((_, true)) = removed {
                    ctx.vhost.remove_queue(&queue);
                }
            }
            None => {
                if let Some(key) = self.reply_to_key.take() {
                    ctx.vhost.unregister_reply_consumer(&key);
                }
            }
        }
    }

    /// The queue deleted a consumer under us: forget it and tell the client.
    pub fn consumer_cancelled_by_broker(&mut self, tag: ShortStr, ctx: &mut Ctx) {
        if self.consumers.remove(&tag).is_some()
            && ctx.cancel_notify
            && self.state == ChannelState::Open
        {
            ctx.send(
                self.id,
                BasicCancel {
                    consumer_tag: tag,
                    no_wait: true,
                },
            );
        }
    }

    pub fn get(&mut self, m: BasicGet, ctx: &mut Ctx) -> AmqpResult<()> {
        let name = self.queue_name(m.queue)?;
        let queue = ctx.vhost.queue_for(&name, ctx.connection)?;
        let Some((message, message_count)) = queue.get(m.no_ack) else {
            ctx.send(self.id, BasicGetEmpty);
            return Ok(());
        };
        self.next_delivery_tag += 1;
        let tag = self.next_delivery_tag;
        let msg = &message.message;
        ctx.send_content(
            self.id,
            BasicGetOk {
                delivery_tag: tag,
                redelivered: message.redelivered,
                exchange: msg.exchange.clone(),
                routing_key: msg.routing_key.clone(),
                message_count,
            },
            &msg.properties_raw,
            &msg.body,
        );
        if !m.no_ack {
            self.unacked.push_back(Unacked {
                tag,
                queue,
                message,
                consumer: None,
            });
        }
        Ok(())
    }

    /// Writes one queue delivery to the client, or hands it back if its consumer is gone.
    pub fn deliver(&mut self, d: Delivery, ctx: &mut Ctx) {
        let consumer = d.consumer;
        let live = self.state == ChannelState::Open
            && self
                .consumers
                .get(&consumer.tag)
                .is_some_and(|e| Arc::ptr_eq(&e.consumer, &consumer));
        if !live {
            return_delivery(Delivery {
                consumer,
                queue: d.queue,
                message: d.message,
            });
            return;
        }
        self.next_delivery_tag += 1;
        let tag = self.next_delivery_tag;
        let msg = &d.message.message;
        ctx.send_content(
            self.id,
            BasicDeliver {
                consumer_tag: consumer.tag.clone(),
                delivery_tag: tag,
                redelivered: d.message.redelivered,
                exchange: msg.exchange.clone(),
                routing_key: msg.routing_key.clone(),
            },
            &msg.properties_raw,
            &msg.body,
        );
        consumer.delivered(1);
        if !consumer.no_ack {
            if let Some(queue) = d.queue {
                self.unacked.push_back(Unacked {
                    tag,
                    queue,
                    message: d.message,
                    consumer: Some(consumer),
                });
            }
        }
    }

    pub fn ack(&mut self, tag: u64, multiple: bool, ctx: &mut Ctx) -> AmqpResult<()> {
        if let Some(ops) = self.tx.as_mut() {
            ops.push(TxOp::Ack { tag, multiple });
            return Ok(());
        }
        self.settle(tag, multiple, None, ctx)
    }

    pub fn nack(
        &mut self,
        tag: u64,
        multiple: bool,
        requeue: bool,
        ctx: &mut Ctx,
    ) -> AmqpResult<()> {
        if let Some(ops) = self.tx.as_mut() {
            ops.push(TxOp::Nack {
                tag,
                multiple,
                requeue,
            });
            return Ok(());
        }
        self.settle(tag, multiple, Some(requeue), ctx)
    }

    /// Takes the deliveries an ack/nack names off the unacked list: `tag` alone, or with
    /// `multiple` every tag up to it (tag 0 with multiple means all).
    fn take_unacked(&mut self, tag: u64, multiple: bool) -> AmqpResult<Vec<Unacked>> {
        let unknown = || AmqpError::precondition(format!("unknown delivery tag {tag}"));
        if multiple {
            let upto = if tag == 0 { u64::MAX } else { tag };
            if tag != 0 && !self.unacked.iter().any(|u| u.tag == tag) {
                return Err(unknown());
            }
            let n = self.unacked.partition_point(|u| u.tag <= upto);
            return Ok(self.unacked.drain(..n).collect());
        }
        let at = self
            .unacked
            .binary_search_by_key(&tag, |u| u.tag)
            .map_err(|_| unknown())?;
        Ok(vec![self.unacked.remove(at).expect("index from search")])
    }

    /// Acks (`requeue` None) or rejects (`Some(requeue)`) deliveries, grouped per queue.
    pub fn settle(
        &mut self,
        tag: u64,
        multiple: bool,
        requeue: Option<bool>,
        _ctx: &mut Ctx,
    ) -> AmqpResult<()> {
        let settled = self.take_unacked(tag, multiple)?;
        let outcome = match requeue {
            None => Settlement::Ack,
            Some(true) => Settlement::Requeue,
            Some(false) => Settlement::Reject,
        };
        self.release(settled, outcome);
        Ok(())
    }

    /// Returns settled deliveries' credit to their consumers and tells their queues, one
    /// call per run of the same queue.
    fn release(&mut self, settled: Vec<Unacked>, outcome: Settlement) {
        let mut run: Option<(Arc<Queue>, Vec<QueuedMessage>)> = None;
        let flush = |queue: Arc<Queue>, messages: Vec<QueuedMessage>| match outcome {
            Settlement::Ack => queue.settle(messages, Vec::new(), Vec::new()),
            Settlement::Requeue => queue.settle(Vec::new(), messages, Vec::new()),
            Settlement::Reject => queue.settle(Vec::new(), Vec::new(), messages),
        };
        for u in settled {
            if let Some(c) = &u.consumer {
                c.settled(1);
            }
            match &mut run {
                Some((q, messages)) if Arc::ptr_eq(q, &u.queue) => messages.push(u.message),
                _ => {
                    if let Some((q, messages)) = run.take() {
                        flush(q, messages);
                    }
                    run = Some((u.queue, vec![u.message]));
                }
            }
        }
        if let Some((q, messages)) = run {
            flush(q, messages);
        }
        self.wake_consumers();
    }

    pub fn recover(&mut self, requeue: bool) -> AmqpResult<()> {
        if !requeue {
            return Err(AmqpError::new(ReplyCode::NotImplemented, "requeue=false"));
        }
        let all: Vec<Unacked> = self.unacked.drain(..).collect();
        self.release(all, Settlement::Requeue);
        Ok(())
    }

    /// Channel teardown: cancel consumers, requeue unacked deliveries, drop a half publish.
    pub fn release_all(&mut self, ctx: &mut Ctx) {
        let tags: Vec<ShortStr> = self.consumers.keys().cloned().collect();
        for tag in tags {
            self.remove_consumer(&tag, ctx);
        }
        let all: Vec<Unacked> = self.unacked.drain(..).collect();
        self.release(all, Settlement::Requeue);
        self.pending_publish = None;
        self.tx = None;
    }
}

/// Hands a delivery that never reached its client back to its queue, with its credit.
pub fn return_delivery(d: Delivery) {
    let consumer = d.consumer;
    if let Some(queue) = d.queue {
        if !consumer.no_ack {
            consumer.settled(1);
        }
        queue.return_undelivered(vec![d.message], !consumer.no_ack);
    }
    consumer.delivered(1);
}

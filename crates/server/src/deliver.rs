//! The consume side of a channel: basic.consume/cancel/get, turning queue deliveries into
//! frames with delivery tags (each traced when the vhost's firehose is on), and settling
//! them (ack, nack, reject, recover, channel close).

use crate::channel::{Channel, ChannelState, ConsumerEntry};
use crate::context::Ctx;
use crate::publish_state::TxOp;
use crate::unacked::Unacked;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use warren_broker::consumer::pipeline_cost;
use warren_broker::message_pool;
use warren_broker::names::{generated_consumer_tag, DIRECT_REPLY_TO};
use warren_broker::queue::QueueHandle;
use warren_broker::queue::QueuedMessage;
use warren_broker::queue_args::check_consume_arguments;
use warren_broker::vhost::TraceOrigin;
use warren_broker::{
    AmqpError, AmqpResult, ConnectionEvent, Consumer, ConsumerInfo, Delivery, HandedOut,
    MessageStats, Queue,
};
use warren_codec::*;

/// What happens to settled deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settlement {
    Ack,
    /// The client requeued (nack/reject with requeue, basic.recover).
    Requeue,
    /// The channel went away with the deliveries unacked (see `Queue::release`).
    Release,
    /// Rejected without requeue: dead-lettered if the queue has a dead-letter exchange.
    Reject,
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
        crate::permissions::check_read_queue(ctx, &name)?;
        let queue = ctx.vhost.queue_to_use(&name, ctx.connection)?;
        check_consume_arguments(&name, ctx.vhost.name(), &m.arguments)?;
        if !queue.supports_global_qos()
            && self.flow.has_global_limit()
            && !ctx.vhost.mirrored_as_quorum(&name)
        {
            // RabbitMQ 3.10's quorum queues refuse a consumer on a channel with a global
            // prefetch limit, closing the connection (540); one a mirroring policy made
            // takes it, as the mirrored classic queue its application asked for would.
            return Err(AmqpError::new(
                ReplyCode::NotImplemented,
                format!(
                    "queue '{}' in vhost '{}' does not support global qos",
                    name,
                    ctx.vhost.name()
                ),
            ));
        }
        let priority = m
            .arguments
            .get("x-priority")
            .and_then(|p| p.as_i64())
            .unwrap_or(0);
        let consumer = Arc::new(
            Consumer::new(
                tag.clone(),
                self.id,
                ctx.connection,
                m.no_ack,
                m.exclusive,
                self.consumer_prefetch,
                self.flow.clone(),
                Arc::downgrade(&queue),
                ctx.events.clone(),
            )
            .with_priority(priority),
        );
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
        self.info.add_consumer(ConsumerInfo {
            tag: tag.to_string(),
            queue: queue.name.to_string(),
            ack_required: !m.no_ack,
            exclusive: m.exclusive,
            prefetch_count: self.consumer_prefetch,
            arguments: m.arguments,
        });
        self.consumers.insert(
            tag,
            ConsumerEntry {
                consumer,
                queue: Some(QueueHandle::new(queue)),
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
        entry.consumer.detach();
        self.info.remove_consumer(tag);
        match entry.queue {
            Some(queue) => {
                ctx.broker
                    .stop_consuming(ctx.vhost, &queue, ctx.connection, self.id, tag);
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
        self.info.remove_consumer(&tag);
        let Some(entry) = self.consumers.remove(&tag) else {
            return;
        };
        entry.consumer.detach();
        if ctx.cancel_notify && self.state == ChannelState::Open {
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
        crate::permissions::check_read_queue(ctx, &name)?;
        let queue = ctx.vhost.queue_to_use(&name, ctx.connection)?;
        if queue.answers_get_later() {
            // Answered asynchronously: the connection gets the result as an event
            // (`ConnectionEvent::GetAnswered`) and `answer_get` replies then.
            let (events, channel, no_ack) = (ctx.events.clone(), self.id, m.no_ack);
            tokio::spawn(async move {
                let got = queue.get_later(no_ack).await;
                let _ = events.send(ConnectionEvent::GetAnswered {
                    channel,
                    queue,
                    no_ack,
                    got,
                });
            });
            return Ok(());
        }
        let got = queue.get(m.no_ack);
        self.answer_get(queue, m.no_ack, got, ctx);
        Ok(())
    }

    /// basic.get-ok with the message (an unacked delivery unless no-ack), or get-empty.
    pub fn answer_get(
        &mut self,
        queue: Arc<Queue>,
        no_ack: bool,
        got: Option<(QueuedMessage, u32)>,
        ctx: &mut Ctx,
    ) {
        let Some((message, message_count)) = got else {
            MessageStats::add(&self.info.stats.get_empty, 1);
            ctx.send(self.id, BasicGetEmpty);
            return;
        };
        MessageStats::add(self.info.stats.got(no_ack), 1);
        MessageStats::add(queue.stats.got(no_ack), 1);
        if message.redelivered {
            MessageStats::add(&self.info.stats.redeliver, 1);
            MessageStats::add(&queue.stats.redeliver, 1);
        }
        // Counted after the get marked the queue: mark it again for the monitoring readers.
        queue.note_change();
        self.next_delivery_tag += 1;
        let tag = self.next_delivery_tag;
        let msg = &message.message;
        ctx.send_content(
            self.id,
            BasicGetOk {
                delivery_tag: tag,
                redelivered: message.redelivered,
                exchange: msg.exchange_name(),
                routing_key: msg.routing_key_name(),
                message_count,
            },
            msg.properties_raw(),
            msg.body(),
        );
        if ctx.vhost.tracing() {
            ctx.vhost
                .trace_deliver(&queue.name, &message, self.trace_origin(ctx));
        }
        if !no_ack {
            self.unacked.push_back(Unacked {
                tag,
                queue: QueueHandle::new(queue),
                message,
                consumer: None,
            });
            self.note_unacked();
        }
    }

    /// Writes one queue delivery to the client, or hands it back if its consumer is gone.
    pub fn deliver(&mut self, d: Delivery, ctx: &mut Ctx) {
        let consumer = d.consumer;
        // The consumer is still this channel's: it is detached when the channel forgets it
        // (no tag lookup per delivery). A channel number opened again is a new channel, and
        // the old one's consumers were detached when it closed.
        let live = self.state == ChannelState::Open && consumer.is_attached();
        if !live {
            return_delivery(Delivery {
                consumer,
                queue: d.queue,
                message: d.message,
            });
            // Its credit came back: with a global limit, that is room for the others.
            if self.flow.has_global_limit() {
                self.wake_consumers();
            }
            return;
        }
        self.next_delivery_tag += 1;
        let tag = self.next_delivery_tag;
        let msg = &d.message.message;
        write_deliver(
            ctx.out,
            self.id,
            &DeliverFields {
                consumer_tag: &consumer.tag,
                delivery_tag: tag,
                redelivered: d.message.redelivered,
                exchange: msg.exchange(),
                routing_key: msg.routing_key(),
            },
            msg.content(),
            ctx.frame_max,
        );
        consumer.delivered(pipeline_cost(msg));
        if ctx.vhost.tracing() {
            self.trace_delivery(d.queue.as_ref(), &d.message, ctx);
        }
        // The channel's own counters are written by this task only (`add_own`); a queue's
        // by every channel consuming from it.
        MessageStats::add_own(self.info.stats.delivered(consumer.no_ack), 1);
        if let Some(queue) = &d.queue {
            MessageStats::add(queue.stats().delivered(consumer.no_ack), 1);
            if d.message.redelivered {
                MessageStats::add(&queue.stats().redeliver, 1);
            }
        }
        if d.message.redelivered {
            MessageStats::add(&self.info.stats.redeliver, 1);
        }
        if !consumer.no_ack {
            if let Some(queue) = d.queue {
                self.unacked.push_back(Unacked {
                    tag,
                    queue,
                    message: d.message,
                    consumer: Some(consumer),
                });
                self.note_unacked();
                return;
            }
        }
        // Written and settled: the message's allocation serves a later publish.
        message_pool::recycle(d.message.message);
    }

    /// The firehose's copy of a delivery, out of line: with tracing off the delivery path
    /// carries only the check. A direct reply-to delivery (no queue) is not traced, as
    /// RabbitMQ's is not.
    #[cold]
    #[inline(never)]
    fn trace_delivery(&self, queue: Option<&QueueHandle>, message: &QueuedMessage, ctx: &Ctx) {
        if let Some(queue) = queue {
            ctx.vhost
                .trace_deliver(queue.name(), message, self.trace_origin(ctx));
        }
    }

    /// Who this channel is, for the firehose's copies of its publishes and deliveries.
    pub fn trace_origin<'a>(&self, ctx: &Ctx<'a>) -> TraceOrigin<'a> {
        TraceOrigin {
            connection: ctx.connection,
            channel: self.id,
            user: ctx.user,
        }
    }

    /// Keeps the API's unacked gauge current (a relaxed store, nothing more).
    pub fn note_unacked(&self) {
        self.info
            .messages_unacknowledged
            .store(self.unacked.len() as u32, Relaxed);
    }

    pub fn ack(&mut self, tag: u64, multiple: bool, ctx: &mut Ctx) -> AmqpResult<()> {
        self.settle(tag, multiple, None, ctx)
    }

    pub fn nack(
        &mut self,
        tag: u64,
        multiple: bool,
        requeue: bool,
        ctx: &mut Ctx,
    ) -> AmqpResult<()> {
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

    /// Acks (`requeue` None) or rejects (`Some(requeue)`) deliveries, grouped per queue. The
    /// tags leave the unacked list at once, in a transaction too (an unknown or already
    /// settled tag is 406 now, not at commit); a transaction applies them at commit.
    pub fn settle(
        &mut self,
        tag: u64,
        multiple: bool,
        requeue: Option<bool>,
        _ctx: &mut Ctx,
    ) -> AmqpResult<()> {
        let deliveries = self.take_unacked(tag, multiple)?;
        self.note_unacked();
        match self.tx.as_mut() {
            Some(ops) => ops.push(TxOp::Settle {
                deliveries,
                requeue,
            }),
            None => self.settle_taken(deliveries, requeue),
        }
        Ok(())
    }

    /// Settles deliveries already taken off the unacked list.
    pub fn settle_taken(&mut self, deliveries: Vec<Unacked>, requeue: Option<bool>) {
        if requeue.is_none() {
            MessageStats::add(&self.info.stats.ack, deliveries.len() as u64);
        }
        let outcome = match requeue {
            None => Settlement::Ack,
            Some(true) => Settlement::Requeue,
            Some(false) => Settlement::Reject,
        };
        self.release(deliveries, outcome);
    }

    /// Puts deliveries taken off the unacked list back, in tag order (tx.rollback gives back
    /// its uncommitted acks so they can be acked again, as RabbitMQ does).
    pub fn restore_unacked(&mut self, deliveries: Vec<Unacked>) {
        if deliveries.is_empty() {
            return;
        }
        let mut all: Vec<Unacked> = self.unacked.drain(..).chain(deliveries).collect();
        all.sort_by_key(|u| u.tag);
        self.unacked = all.into();
        self.note_unacked();
    }

    /// tx.rollback: drops the uncommitted publishes and restores the uncommitted acks.
    pub fn rollback(&mut self) -> AmqpResult<()> {
        let Some(ops) = self.tx.replace(Vec::new()) else {
            return Err(AmqpError::precondition("channel is not transactional"));
        };
        for op in ops {
            if let TxOp::Settle { deliveries, .. } = op {
                self.restore_unacked(deliveries);
            }
        }
        Ok(())
    }

    /// Returns settled deliveries' credit to their consumers and tells their queues, one
    /// call per run of the same queue.
    ///
    /// With a global prefetch and several consumers, the channel's room is given back only
    /// after the queues were told: otherwise the queue of the acked message, dispatching at
    /// once, would take that room every time and starve the channel's other queues. The
    /// consumers are then woken in turn (`ChannelFlow::wake_in_turn`).
    fn release(&mut self, settled: Vec<Unacked>, outcome: Settlement) {
        let defer_room = self.flow.has_global_limit() && self.consumers.len() > 1;
        let mut room_freed = 0;
        let mut run: Option<(QueueHandle, Vec<QueuedMessage>)> = None;
        let flush = |queue: QueueHandle, messages: Vec<QueuedMessage>| match outcome {
            Settlement::Ack => {
                MessageStats::add(&queue.stats().ack, messages.len() as u64);
                queue.settle(messages, Vec::new(), Vec::new())
            }
            Settlement::Requeue => queue.settle(Vec::new(), messages, Vec::new()),
            Settlement::Release => queue.release(messages),
            Settlement::Reject => {
                // A discard is a failed delivery for RabbitMQ 4's classic queue: the
                // dead-lettered copy carries the count to an AMQP 1.0 consumer.
                let mut messages = messages;
                for m in &mut messages {
                    m.delivery_count = m.delivery_count.saturating_add(1);
                }
                queue.settle(Vec::new(), Vec::new(), messages)
            }
        };
        for u in settled {
            if let Some(c) = &u.consumer {
                if defer_room {
                    c.settled_own(1);
                    room_freed += 1;
                } else {
                    c.settled(1);
                }
            }
            match &mut run {
                Some((q, messages)) if q.same_queue(&u.queue) => messages.push(u.message),
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
        self.note_unacked();
        if room_freed > 0 {
            self.flow.settled(room_freed);
        }
        self.wake_consumers();
    }

    /// basic.recover: requeues every unacked delivery. Deliveries an uncommitted ack took are
    /// not among them (RabbitMQ): the commit acks them, a rollback makes them unacked again.
    pub fn recover(&mut self, requeue: bool) -> AmqpResult<()> {
        if !requeue {
            return Err(AmqpError::new(ReplyCode::NotImplemented, "requeue=false"));
        }
        let all: Vec<Unacked> = self.unacked.drain(..).collect();
        self.release(all, Settlement::Requeue);
        Ok(())
    }

    /// Channel teardown: cancel consumers, requeue unacked deliveries (those of uncommitted
    /// acks too), drop a half publish and the transaction.
    pub fn release_all(&mut self, ctx: &mut Ctx) {
        let tags: Vec<ShortStr> = self.consumers.keys().cloned().collect();
        for tag in tags {
            self.remove_consumer(&tag, ctx);
        }
        if self.tx.is_some() {
            let _ = self.rollback();
        }
        let mut all: Vec<Unacked> = self.unacked.drain(..).collect();
        // Still unacked when the channel goes: a failed delivery for RabbitMQ 4's classic
        // queue (`requeue_and_run/3`), which an AMQP 1.0 consumer's delivery-count shows.
        // basic.recover and nack/reject with requeue are not.
        for u in &mut all {
            u.message.delivery_count = u.message.delivery_count.saturating_add(1);
        }
        self.release(all, Settlement::Release);
        self.pending_publish = None;
        self.tx = None;
    }
}

/// Hands a delivery that never reached its client back to its queue, with its credit.
pub fn return_delivery(d: Delivery) {
    let consumer = d.consumer;
    let cost = pipeline_cost(&d.message.message);
    if let Some(queue) = d.queue {
        if !consumer.no_ack {
            consumer.settled(1);
        }
        queue.return_undelivered(vec![d.message], !consumer.no_ack);
    }
    consumer.delivered(cost);
}

//! The publish path: basic.publish, its content header and body frames assembled into one
//! message, routed, enqueued, and confirmed or returned.
//!
//! A body that arrives in one frame (every body up to frame_max) is kept as the `Bytes` slice
//! of the read buffer it came in; only multi-frame bodies are joined, once.

use crate::channel::Channel;
use crate::context::Ctx;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::Arc;
use warren_broker::names::{DIRECT_REPLY_TO, DIRECT_REPLY_TO_PREFIX};
use warren_broker::queue::{QueuedMessage, StoreRef};
use warren_broker::{AmqpError, AmqpResult, ConnectionEvent, Delivery, Enqueued, Message};
use warren_codec::*;

/// A basic.publish whose content is still arriving.
pub struct PendingPublish {
    pub method: BasicPublish,
    pub header: Option<ContentHeader>,
    /// Body frames so far; a single frame stays a zero-copy slice.
    pub body: BodyParts,
}

#[derive(Default)]
pub enum BodyParts {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl BodyParts {
    fn len(&self) -> usize {
        match self {
            BodyParts::Empty => 0,
            BodyParts::One(b) => b.len(),
            BodyParts::Many(b) => b.len(),
        }
    }

    fn push(&mut self, part: Bytes) {
        *self = match std::mem::take(self) {
            BodyParts::Empty => BodyParts::One(part),
            BodyParts::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + part.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&part);
                BodyParts::Many(joined)
            }
            BodyParts::Many(mut joined) => {
                joined.extend_from_slice(&part);
                BodyParts::Many(joined)
            }
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            BodyParts::Empty => Bytes::new(),
            BodyParts::One(b) => b,
            BodyParts::Many(b) => b.freeze(),
        }
    }
}

/// A complete message as published, before routing.
pub struct Published {
    pub method: BasicPublish,
    pub header: ContentHeader,
    pub body: Bytes,
}

/// Publisher confirms: sequence numbers given to publishes and those not yet confirmed.
///
/// A persistent message routed to a durable queue is confirmed only once the store has
/// fsync'd it (its store sequence is durable); others need nothing (store sequence 0).
/// Confirms go out in publish order, so a run of ready acks is one basic.ack(multiple).
#[derive(Debug, Default)]
pub struct ConfirmState {
    pub next_seq: u64,
    /// (publish seq, store seq that must be durable first, ack (true) or nack).
    pending: VecDeque<(u64, u64, bool)>,
}

impl ConfirmState {
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Work a transaction holds until commit.
pub enum TxOp {
    Publish(Published),
    Ack {
        tag: u64,
        multiple: bool,
    },
    Nack {
        tag: u64,
        multiple: bool,
        requeue: bool,
    },
}

fn unexpected(what: &str) -> AmqpError {
    AmqpError::new(ReplyCode::UnexpectedFrame, what.to_owned())
}

impl Channel {
    pub fn start_publish(&mut self, method: BasicPublish, _ctx: &mut Ctx) -> AmqpResult<()> {
        self.pending_publish = Some(PendingPublish {
            method,
            header: None,
            body: BodyParts::Empty,
        });
        Ok(())
    }

    pub fn content_header(&mut self, payload: Bytes, ctx: &mut Ctx) -> AmqpResult<()> {
        let Some(pending) = self.pending_publish.as_mut() else {
            return Err(unexpected("content header frame without a publish"));
        };
        if pending.header.is_some() {
            return Err(unexpected("second content header for one publish"));
        }
        let header = ContentHeader::decode(payload)
            .map_err(|e| AmqpError::new(e.reply_code(), e.to_string()))?;
        if header.class_id != BASIC_CLASS_ID {
            return Err(unexpected("content header for a class other than basic"));
        }
        if header.body_size > ctx.config.max_message_size_bytes {
            let size = header.body_size;
            self.pending_publish = None;
            return Err(AmqpError::precondition(format!(
                "message size {size} is larger than configured max size {}",
                ctx.config.max_message_size_bytes
            )));
        }
        let done = header.body_size == 0;
        pending.header = Some(header);
        if done {
            self.finish_publish(ctx)?;
        }
        Ok(())
    }

    pub fn content_body(&mut self, payload: Bytes, ctx: &mut Ctx) -> AmqpResult<()> {
        let Some(pending) = self.pending_publish.as_mut() else {
            return Err(unexpected("content body frame without a publish"));
        };
        let Some(header) = pending.header.as_ref() else {
            return Err(unexpected("content body frame before its header"));
        };
        let expected = header.body_size;
        pending.body.push(payload);
        let received = pending.body.len() as u64;
        if received > expected {
            return Err(unexpected("content body longer than its header said"));
        }
        if received == expected {
            self.finish_publish(ctx)?;
        }
        Ok(())
    }

    /// True while a publish waits for its header or body (other frames are then illegal).
    pub fn expecting_content(&self) -> bool {
        self.pending_publish.is_some()
    }

    fn finish_publish(&mut self, ctx: &mut Ctx) -> AmqpResult<()> {
        let pending = self.pending_publish.take().expect("publish in progress");
        let published = Published {
            method: pending.method,
            header: pending.header.expect("header before body"),
            body: pending.body.into_bytes(),
        };
        match self.tx.as_mut() {
            Some(ops) => {
                ops.push(TxOp::Publish(published));
                Ok(())
            }
            None => self.route_and_enqueue(published, ctx).map(|_| ()),
        }
    }

    /// Routes one message and confirms it (or returns it, or nacks it). Returns the store
    /// sequence that must be durable before the publish counts as safe (0: nothing stored).
    pub fn route_and_enqueue(&mut self, p: Published, ctx: &mut Ctx) -> AmqpResult<u64> {
        if p.method.immediate {
            return Err(AmqpError::new(ReplyCode::NotImplemented, "immediate=true"));
        }
        let exchange = ctx.vhost.exchange(&p.method.exchange).ok_or_else(|| {
            AmqpError::not_found(format!("no exchange '{}' in vhost '/'", p.method.exchange))
        })?;
        if exchange.internal {
            return Err(AmqpError::access_refused(format!(
                "cannot publish to internal exchange '{}' in vhost '/'",
                exchange.name
            )));
        }
        let mut props = p
            .header
            .properties()
            .map_err(|e| AmqpError::new(e.reply_code(), e.to_string()))?;
        if let Some(user_id) = &props.user_id {
            if user_id.as_str() != ctx.user {
                return Err(AmqpError::precondition(format!(
                    "user_id property set to '{user_id}' but authenticated user was '{}'",
                    ctx.user
                )));
            }
        }
        let mut properties_raw = p.header.properties.clone();
        if props
            .reply_to
            .as_ref()
            .is_some_and(|r| r.as_str() == DIRECT_REPLY_TO)
        {
            let Some(key) = &self.reply_to_key else {
                return Err(AmqpError::precondition(
                    "fast reply consumer does not exist",
                ));
            };
            props.reply_to = Some(ShortStr::from(format!("{DIRECT_REPLY_TO_PREFIX}{key}")));
            properties_raw = ContentHeader::new(BASIC_CLASS_ID, 0, &props).properties;
        }
        let message = Arc::new(Message::new(
            p.method.exchange.clone(),
            p.method.routing_key.clone(),
            &props,
            properties_raw,
            p.body,
        ));
        let seq = self.confirm.as_mut().map(|c| {
            c.next_seq += 1;
            c.next_seq
        });

        let mut routed = false;
        let mut rejected = false;
        let mut store_seq = 0;
        if exchange.name.is_empty() && p.method.routing_key.starts_with(DIRECT_REPLY_TO_PREFIX) {
            if let Some(consumer) = ctx.vhost.reply_consumer(&p.method.routing_key) {
                // Replies bypass queues and credit, as RabbitMQ's direct reply-to does.
                consumer.take_credit();
                let delivery = Delivery {
                    consumer: consumer.clone(),
                    queue: None,
                    message: QueuedMessage {
                        id: 0,
                        message: message.clone(),
                        redelivered: false,
                        expires_at: None,
                        store_ref: None,
                    },
                };
                routed = consumer.send(ConnectionEvent::Deliver(delivery)).is_ok();
            }
        } else {
            let mut queues = std::mem::take(&mut self.route_buf);
            ctx.vhost.route(
                &exchange,
                &p.method.routing_key,
                props.headers.as_ref(),
                &mut queues,
            );
            routed = !queues.is_empty();
            let stored = self.persist(&message, &queues, ctx)?;
            if let Some(appended) = stored {
                store_seq = appended.seq;
            }
            for queue in queues.drain(..) {
                let store_ref = stored.filter(|_| queue.stored.is_some()).map(|a| StoreRef {
                    id: a.id,
                    location: a.location,
                });
                if queue.publish(message.clone(), store_ref) == Enqueued::Rejected {
                    rejected = true;
                }
            }
            self.route_buf = queues;
        }

        if !routed && p.method.mandatory {
            ctx.send_content(
                self.id,
                BasicReturn {
                    reply_code: ReplyCode::NoRoute as u16,
                    reply_text: ShortStr::from_static("NO_ROUTE"),
                    exchange: p.method.exchange,
                    routing_key: p.method.routing_key,
                },
                &message.properties_raw,
                &message.body,
            );
        }
        if let (Some(seq), Some(c)) = (seq, self.confirm.as_mut()) {
            c.pending.push_back((seq, store_seq, !rejected));
        }
        Ok(store_seq)
    }

    /// Writes a persistent message once to the store for all the durable queues it reached;
    /// returns where, or None when nothing needed storing.
    fn persist(
        &mut self,
        message: &Message,
        queues: &[Arc<warren_broker::Queue>],
        ctx: &mut Ctx,
    ) -> AmqpResult<Option<warren_store::Appended>> {
        let Some(store) = ctx.vhost.store.as_ref().filter(|_| message.persistent) else {
            return Ok(None);
        };
        self.store_ids_buf.clear();
        self.store_ids_buf.extend(
            queues
                .iter()
                .filter_map(|q| q.stored.as_ref().map(|s| s.id)),
        );
        if self.store_ids_buf.is_empty() {
            return Ok(None);
        }
        store
            .append(&self.store_ids_buf, &message.to_stored())
            .map(Some)
            .map_err(|e| AmqpError::new(ReplyCode::InternalError, format!("message store: {e}")))
    }

    /// Writes the confirms that are ready: everything in order up to the first publish whose
    /// store write is not durable yet. A run of acks becomes one basic.ack(multiple).
    pub fn flush_confirms(&mut self, ctx: &mut Ctx) {
        let durable_seq = ctx
            .vhost
            .store
            .as_ref()
            .map_or(u64::MAX, |s| s.durable_seq());
        if self.commit_waits_for.is_some_and(|seq| seq <= durable_seq) {
            self.commit_waits_for = None;
            ctx.send(self.id, TxCommitOk);
        }
        let Some(c) = self.confirm.as_mut() else {
            return;
        };
        if c.pending.is_empty() {
            return;
        }
        let mut run: Option<(u64, u64)> = None; // (first, last) acked publish seq
        while let Some(&(seq, store_seq, ok)) = c.pending.front() {
            if store_seq > durable_seq {
                break;
            }
            c.pending.pop_front();
            if ok {
                run = Some((run.map_or(seq, |r| r.0), seq));
                continue;
            }
            if let Some((first, last)) = run.take() {
                ctx.send(
                    self.id,
                    BasicAck {
                        delivery_tag: last,
                        multiple: last > first,
                    },
                );
            }
            ctx.send(
                self.id,
                BasicNack {
                    delivery_tag: seq,
                    multiple: false,
                    requeue: false,
                },
            );
        }
        if let Some((first, last)) = run {
            ctx.send(
                self.id,
                BasicAck {
                    delivery_tag: last,
                    multiple: last > first,
                },
            );
        }
    }

    /// tx.commit: applies the buffered publishes and acks in order. commit-ok is sent once
    /// every persistent message of the transaction is durable (`flush_confirms` sends it).
    pub fn commit(&mut self, ctx: &mut Ctx) -> AmqpResult<()> {
        let Some(ops) = self.tx.replace(Vec::new()) else {
            return Err(AmqpError::precondition("channel is not transactional"));
        };
        let mut store_seq = 0;
        for op in ops {
            match op {
                TxOp::Publish(p) => store_seq = store_seq.max(self.route_and_enqueue(p, ctx)?),
                TxOp::Ack { tag, multiple } => self.settle(tag, multiple, None, ctx)?,
                TxOp::Nack {
                    tag,
                    multiple,
                    requeue,
                } => self.settle(tag, multiple, Some(requeue), ctx)?,
            }
        }
        self.commit_waits_for = Some(store_seq);
        self.flush_confirms(ctx);
        Ok(())
    }

    /// True while a confirm or a commit-ok waits for the store.
    pub fn awaits_durability(&self) -> bool {
        self.commit_waits_for.is_some() || self.confirm.as_ref().is_some_and(|c| c.has_pending())
    }
}

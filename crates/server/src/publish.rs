//! The publish path: basic.publish, its content header and body frames assembled into one
//! message, routed, enqueued, and confirmed or returned.
//!
//! A body that arrives in one frame (every body up to frame_max) is kept as the `Bytes` slice
//! of the read buffer it came in; only multi-frame bodies are joined, once.
//!
//! When the store cannot write (a full disk, an I/O error: docs/STORAGE.md §11), a
//! persistent message for durable queues is not enqueued in them and its publisher gets a
//! nack at once; a confirm waiting for a batch that failed becomes a nack; a transaction
//! with such a publish fails its commit as RabbitMQ does (406 "partial tx completion").

use crate::channel::{Channel, ChannelState};
use crate::context::Ctx;
use crate::publish_state::{BodyParts, PendingPublish, Published, TxOp};
use bytes::Bytes;
use std::sync::atomic::Ordering::Relaxed;
use warren_broker::confirm::ConfirmTo;
use warren_broker::message::parse_expiration;
use warren_broker::message_pool;
use warren_broker::names::{DIRECT_REPLY_TO, DIRECT_REPLY_TO_PREFIX};
use warren_broker::routing_keys::{header_routes_into, strip_bcc, PublishKeys};
use warren_broker::vhost::Publish;
use warren_broker::{AmqpError, AmqpResult, Message, MessageStats};
use warren_codec::*;
use warren_store::Outcome;

/// What became of a routed publish.
pub struct Routed {
    /// The store sequence that must be durable before the publish counts as safe (0:
    /// nothing stored).
    pub store_seq: u64,
    /// Some queue did not take it (`x-overflow=reject-publish`, or a store that cannot
    /// write): a confirming publisher gets a nack, a transaction fails its commit.
    pub refused: bool,
}

fn unexpected(what: &str) -> AmqpError {
    AmqpError::new(ReplyCode::UnexpectedFrame, what.to_owned())
}

/// RabbitMQ's error for a transaction some of whose work failed (rabbit_channel
/// `complete_tx`).
fn partial_tx_completion() -> AmqpError {
    AmqpError::precondition("partial tx completion")
}

/// Class and method ids of tx.commit, for the channel.close of a failed commit.
const TX_COMMIT: (u16, u16) = (TxCommit::CLASS_ID, TxCommit::METHOD_ID);

/// A publish's content header, checked as RabbitMQ checks it: it decodes, it is basic's, and
/// the body it announces is within the configured maximum.
#[inline]
fn checked_header(payload: Bytes, ctx: &Ctx) -> AmqpResult<ContentHeader> {
    let header = ContentHeader::decode(payload)
        .map_err(|e| AmqpError::new(e.reply_code(), e.to_string()))?;
    check_header(header.class_id, header.body_size, ctx)?;
    Ok(header)
}

/// The checks on a decoded content header's class and body size (`checked_header`).
#[inline]
fn check_header(class_id: u16, body_size: u64, ctx: &Ctx) -> AmqpResult<()> {
    if class_id != BASIC_CLASS_ID {
        return Err(unexpected("content header for a class other than basic"));
    }
    if body_size > ctx.config.max_message_size_bytes {
        return Err(AmqpError::precondition(format!(
            "message size {} is larger than configured max size {}",
            body_size, ctx.config.max_message_size_bytes
        )));
    }
    Ok(())
}

impl Channel {
    /// A publish whose header and whole body came with it (`split_publish`): what
    /// `start_publish`, `content_header` and `content_body` do with its three frames, with
    /// the same checks and errors, without holding it as pending between them. The header
    /// said `class_id` and `body_size`, the body's length (split_publish checked).
    #[inline]
    pub fn publish_whole(
        &mut self,
        whole: WholePublish,
        class_id: u16,
        body_size: u64,
        ctx: &mut Ctx,
    ) -> AmqpResult<()> {
        check_header(class_id, body_size, ctx)?;
        debug_assert_eq!(body_size, whole.message.body().len() as u64);
        self.publish_complete(
            Published {
                message: whole.message,
                mandatory: whole.mandatory,
                immediate: whole.immediate,
            },
            ctx,
        )
    }

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
        let header = match checked_header(payload, ctx) {
            Ok(header) => header,
            Err(error) => {
                self.pending_publish = None;
                return Err(error);
            }
        };
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
        let header = pending.header.expect("header before body");
        let method = pending.method;
        let published = Published {
            message: MessageBytes::joined(
                &method.exchange,
                &method.routing_key,
                &header.properties,
                pending.body.into_bytes(),
            ),
            mandatory: method.mandatory,
            immediate: method.immediate,
        };
        self.publish_complete(published, ctx)
    }

    /// A message whole: routed now, or held by the transaction.
    #[inline]
    fn publish_complete(&mut self, published: Published, ctx: &mut Ctx) -> AmqpResult<()> {
        // Checked as RabbitMQ does, when the message is whole and before a transaction
        // takes it: write on the exchange (cached per channel).
        self.publish_grants
            .check_write(ctx, published.message.exchange())?;
        match self.tx.as_mut() {
            Some(ops) => {
                ops.push(TxOp::Publish(published));
                Ok(())
            }
            None => self.route_and_enqueue(published, ctx).map(|_| ()),
        }
    }

    /// Routes one message and confirms it (or returns it, or nacks it).
    pub fn route_and_enqueue(&mut self, p: Published, ctx: &mut Ctx) -> AmqpResult<Routed> {
        if p.immediate {
            return Err(AmqpError::new(ReplyCode::NotImplemented, "immediate=true"));
        }
        let exchange = ctx
            .vhost
            .exchange_via(p.message.exchange(), &mut self.last_published_exchange)
            .ok_or_else(|| {
                AmqpError::not_found(format!(
                    "no exchange '{}' in vhost '{}'",
                    p.message.exchange(),
                    ctx.vhost.name()
                ))
            })?;
        if let Some(refusal) = exchange.publish_refusal(ctx.vhost.name()) {
            return Err(AmqpError::access_refused(refusal));
        }
        // Only what routing and the checks below need is read; the properties go to
        // consumers as the publisher's bytes unless one of them has to change.
        let mut props = p
            .message
            .publish_properties()
            .map_err(|e| AmqpError::new(e.reply_code(), e.to_string()))?;
        // RabbitMQ's order: the reply-to rewrite, user-id, expiration, then the CC/BCC headers.
        let mut reply_to_rewrite = None;
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
            reply_to_rewrite = Some(ShortStr::from(format!("{DIRECT_REPLY_TO_PREFIX}{key}")));
        }
        if let Some(refusal) = ctx
            .access
            .user_id_refusal(props.user_id.as_deref(), ctx.user)
        {
            return Err(AmqpError::precondition(refusal));
        }
        if let Some(expiration) = &props.expiration {
            if let Err(why) = parse_expiration(expiration) {
                return Err(AmqpError::precondition(format!(
                    "invalid expiration '{expiration}': {why}"
                )));
            }
        }
        // Sender-selected distribution: empty (no allocation) unless CC or BCC is present.
        header_routes_into(props.headers.as_ref(), &mut self.cc_routes)?;
        // Routing (a headers exchange) sees the headers without BCC, as consumers do.
        let bcc_removed = props
            .headers
            .as_mut()
            .is_some_and(|h| h.remove("BCC").is_some());
        let bytes = if reply_to_rewrite.is_some() || bcc_removed {
            // Only a rewritten reply-to or a removed BCC costs a full decode and re-encode;
            // every other message keeps the properties exactly as published.
            let published = ContentHeader {
                class_id: BASIC_CLASS_ID,
                body_size: 0,
                properties: p.message.properties_bytes(),
            };
            let mut full = published
                .properties()
                .map_err(|e| AmqpError::new(e.reply_code(), e.to_string()))?;
            if let Some(reply_to) = reply_to_rewrite {
                full.reply_to = Some(reply_to);
            }
            strip_bcc(&mut full);
            let rewritten = ContentHeader::new(BASIC_CLASS_ID, 0, &full).properties;
            p.message.with_properties(&rewritten)
        } else {
            p.message
        };
        let mandatory = p.mandatory;
        // Its allocation is a recycled one when a delivery gave one back.
        let message = message_pool::shared(Message::from_publish(bytes, &props));
        // The channel's own counters are written by this task only (`add_own`).
        MessageStats::add_own(&self.info.stats.publish, 1);
        ctx.vhost.counters.published.observe(
            ctx.connection,
            message.body().len(),
            self.confirm.is_some(),
        );
        let seq = self.confirm.as_mut().map(|c| {
            c.next_seq += 1;
            c.next_seq
        });

        let keys = PublishKeys::new(message.routing_key(), &self.cc_routes);
        let routing_keys = keys.all();
        self.publish_grants
            .check_topic_write(ctx, &exchange, routing_keys)?;
        let confirm_to = match seq {
            Some(_) => ConfirmTo::Connection(ctx.events),
            None => ConfirmTo::Nobody,
        };
        let outcome = ctx
            .vhost
            .publish(
                Publish {
                    exchange: &exchange,
                    message: &message,
                    routing_keys,
                    headers: props.headers.as_ref(),
                    confirm_to,
                    origin: self.trace_origin(ctx),
                },
                &mut self.publish_scratch,
            )
            .map_err(|e| AmqpError::new(ReplyCode::InternalError, format!("message store: {e}")))?;
        if !self.cc_routes.is_empty() {
            self.cc_routes.clear();
        }
        let routed = outcome.queues > 0;
        let confirm = outcome.confirm;
        if !routed && !mandatory {
            MessageStats::add(&self.info.stats.drop_unroutable, 1);
        }
        if !routed && mandatory {
            MessageStats::add(&self.info.stats.return_unroutable, 1);
            ctx.send_content(
                self.id,
                BasicReturn {
                    reply_code: ReplyCode::NoRoute as u16,
                    reply_text: ShortStr::from_static("NO_ROUTE"),
                    exchange: message.exchange_name(),
                    routing_key: message.routing_key_name(),
                },
                message.properties_raw(),
                message.body(),
            );
        }
        let routed = Routed {
            store_seq: confirm.store_seq(),
            refused: confirm.refused(),
        };
        if let (Some(seq), Some(c)) = (seq, self.confirm.as_mut()) {
            c.pending.push_back((seq, confirm));
            self.info
                .messages_unconfirmed
                .store(c.pending.len() as u32, Relaxed);
        }
        Ok(routed)
    }

    /// Writes the confirms that are ready: everything in order up to the first publish whose
    /// store write is not settled yet (a failed one is a nack). A run of acks becomes one
    /// basic.ack(multiple). Also answers a tx.commit waiting for the store.
    pub fn flush_confirms(&mut self, ctx: &mut Ctx) {
        if !self.awaits_durability() {
            return;
        }
        let durable = ctx.vhost.store.as_ref().map(|s| s.durable_state());
        let outcome = |store_seq: u64| {
            durable
                .as_ref()
                .map_or(Outcome::Durable, |d| d.outcome(store_seq))
        };
        if let Some(seq) = self.commit_waits_for {
            match outcome(seq) {
                Outcome::Pending => {}
                Outcome::Durable => {
                    self.commit_waits_for = None;
                    ctx.send(self.id, TxCommitOk);
                }
                Outcome::Failed => {
                    self.commit_waits_for = None;
                    if self.state == ChannelState::Open {
                        self.close_with_error(&partial_tx_completion(), TX_COMMIT, ctx);
                    }
                }
            }
        }
        let Some(c) = self.confirm.as_mut() else {
            return;
        };
        let mut run: Option<(u64, u64)> = None; // (first, last) acked publish seq
        let pending_before = c.pending.len();
        while let Some((seq, confirm)) = c.pending.front() {
            let seq = *seq;
            let Some(ok) = confirm.outcome(durable.as_ref()) else {
                break;
            };
            c.pending.pop_front();
            if ok {
                MessageStats::add(&self.info.stats.confirm, 1);
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
        if c.pending.len() != pending_before {
            self.info
                .messages_unconfirmed
                .store(c.pending.len() as u32, Relaxed);
        }
    }

    /// tx.commit: applies the buffered publishes, then the acks, each in order (RabbitMQ's
    /// order). commit-ok is sent once every persistent message of the transaction is durable
    /// (`flush_confirms` sends it). A publish some queue refused fails the commit, as in
    /// RabbitMQ (whose channel fails a transaction that saw a nack): 406 "partial tx
    /// completion", channel closed, the acks not applied; so does a store batch of the
    /// transaction that fails.
    pub fn commit(&mut self, ctx: &mut Ctx) -> AmqpResult<()> {
        let Some(ops) = self.tx.replace(Vec::new()) else {
            return Err(AmqpError::precondition("channel is not transactional"));
        };
        let mut store_seq = 0;
        let mut refused = false;
        let mut settles = Vec::new();
        let mut ops = ops.into_iter();
        while let Some(op) = ops.next() {
            match op {
                TxOp::Publish(p) => match self.route_and_enqueue(p, ctx) {
                    Ok(routed) => {
                        store_seq = store_seq.max(routed.store_seq);
                        refused |= routed.refused;
                    }
                    Err(e) => {
                        // The channel closes: deliveries the commit would have settled go
                        // back to the unacked list, which the close requeues.
                        for op in ops {
                            if let TxOp::Settle { deliveries, .. } = op {
                                settles.push((deliveries, None));
                            }
                        }
                        for (deliveries, _) in settles {
                            self.restore_unacked(deliveries);
                        }
                        return Err(e);
                    }
                },
                TxOp::Settle {
                    deliveries,
                    requeue,
                } => settles.push((deliveries, requeue)),
            }
        }
        if refused {
            for (deliveries, _) in settles {
                self.restore_unacked(deliveries);
            }
            return Err(partial_tx_completion());
        }
        for (deliveries, requeue) in settles {
            self.settle_taken(deliveries, requeue);
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

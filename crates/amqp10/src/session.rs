//! One AMQP 1.0 session and its links, over the broker core.
//!
//! Incoming links (the client sends) publish: each whole delivery is converted
//! (`convert`), routed like a 0-9-1 publish to the link's fixed destination or the message's
//! `to`, stored once for its durable queues, and settled with RabbitMQ 4's outcomes —
//! accepted, released when no queue took it, rejected when a queue refused it
//! (`x-overflow=reject-publish`, the store cannot write) or the address in `to` is bad. An
//! unsettled durable message is accepted only once the store has fsync'd it.
//!
//! Outgoing links (the client receives) are consumers of a queue. Link credit is the
//! consumer's flow control, expressed with the broker's per-channel limit (`ChannelFlow`,
//! one per link): its limit is 1 + the link's credit and its count 1 + the deliveries the
//! queue handed over that are not yet sent, so the queue stops exactly when the deliveries
//! in flight would use up the credit (the 1 keeps a credit of 0 from reading as "no
//! limit"). Deliveries beyond what the session window allows wait on the link. Outcomes:
//! accepted → ack, rejected → dead-letter (or drop), released → requeue, modified →
//! requeue, or dead-letter with undeliverable-here (RabbitMQ 4 for classic queues).

use crate::address::{self, Destination, TargetAddress};
use crate::codec::{self, *};
use crate::convert;
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use warren_broker::access::{AccessControl, AccessKind};
use warren_broker::consumer::{pipeline_cost, ChannelFlow};
use warren_broker::queue::QueuedMessage;
use warren_broker::{
    ConnectionEvent, ConnectionId, Consumer, Delivery, Enqueued, ExchangeKind, Message,
    MessageStats, Queue, VHost,
};
use warren_codec::{ContentHeader, ShortStr, BASIC_CLASS_ID};
use warren_store::{Outcome, StoreError};

/// Credit given to each incoming link; topped up once half is used (RabbitMQ 4 grants
/// 128 and tops up the same way).
const INCOMING_LINK_CREDIT: u32 = 256;
/// Transfer frames the session takes before the client must wait for our flow.
const INCOMING_WINDOW: u32 = 4096;
/// What we announce as our outgoing window (informational in the spec).
const OUTGOING_WINDOW: u32 = u32::MAX;

/// What a session handler may touch of its connection for one call.
pub struct Env<'a> {
    pub vhost: &'a Arc<VHost>,
    pub access: &'a AccessControl,
    pub user: &'a str,
    pub connection: ConnectionId,
    pub events: &'a UnboundedSender<ConnectionEvent>,
    pub out: &'a mut BytesMut,
    /// The client's max-frame-size: transfers are split to fit it.
    pub peer_max_frame: u32,
    pub max_message_size: u64,
    /// A resource alarm is on: incoming links get no new credit (RabbitMQ 4 blocks AMQP
    /// 1.0 publishers this way).
    pub publishing_blocked: bool,
}

/// How a handler failed: the link, the session or the whole connection ends with the error.
#[derive(Debug)]
pub enum Fail {
    Link(u32, Error),
    Session(Error),
    Connection(Error),
}

enum Link {
    In(IncomingLink),
    Out(OutgoingLink),
}

struct IncomingLink {
    target: TargetAddress,
    delivery_count: u32,
    credit: u32,
    /// A delivery whose transfer frames are still arriving.
    partial: Option<Partial>,
}

struct Partial {
    delivery_id: u32,
    settled: bool,
    payload: BytesMut,
}

struct OutgoingLink {
    queue: Arc<Queue>,
    consumer: Arc<Consumer>,
    flow: Arc<ChannelFlow>,
    /// The client attached with snd-settle-mode settled: deliveries are settled as sent.
    settle_on_send: bool,
    delivery_count: u32,
    credit: u32,
    /// The client asked to drain: use up the credit or give it back.
    drain: bool,
    /// Handed over by the queue, not yet sent (no credit or session window left).
    pending: VecDeque<Delivery>,
    next_tag: u64,
}

/// A delivery sent to the client and not yet settled by it.
struct Unsettled {
    handle: u32,
    consumer: Arc<Consumer>,
    queue: Arc<Queue>,
    message: QueuedMessage,
}

/// What becomes of a published delivery.
enum PublishOutcome {
    Settled(DeliveryState),
    /// Accepted once the store has made this sequence durable.
    AwaitingFsync(u64),
}

pub struct Session {
    pub channel: u16,
    next_incoming_id: u32,
    incoming_window: u32,
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    next_delivery_id: u32,
    links: HashMap<u32, Link>,
    /// Consumer tag → link handle, to route queue deliveries.
    by_tag: HashMap<ShortStr, u32>,
    unsettled: BTreeMap<u32, Unsettled>,
    /// Incoming deliveries waiting for the store's fsync: (delivery id, store seq).
    awaiting_fsync: VecDeque<(u32, u64)>,
    /// Dispositions to send at the end of the read batch (runs of ids share one frame).
    dispositions: Vec<(u32, DeliveryState)>,
}

fn accepted() -> DeliveryState {
    DeliveryState::Accepted(Accepted {})
}

fn rejected(condition: impl Into<ErrorCondition>, text: impl Into<String>) -> DeliveryState {
    DeliveryState::Rejected(Rejected {
        error: Some(codec::error(condition, text)),
    })
}

/// The name permissions see: RabbitMQ checks the default exchange as "amq.default".
fn permission_name(exchange: &str) -> &str {
    if exchange.is_empty() {
        "amq.default"
    } else {
        exchange
    }
}

impl Session {
    /// A session for the client's begin on `channel`; answers it.
    pub fn begin(channel: u16, begin: &Begin, out: &mut BytesMut) -> Session {
        let session = Session {
            channel,
            next_incoming_id: begin.next_outgoing_id,
            incoming_window: INCOMING_WINDOW,
            next_outgoing_id: 0,
            remote_incoming_window: begin.incoming_window,
            next_delivery_id: 0,
            links: HashMap::new(),
            by_tag: HashMap::new(),
            unsettled: BTreeMap::new(),
            awaiting_fsync: VecDeque::new(),
            dispositions: Vec::new(),
        };
        let reply = Begin {
            remote_channel: Some(channel),
            next_outgoing_id: 0,
            incoming_window: INCOMING_WINDOW,
            outgoing_window: OUTGOING_WINDOW,
            handle_max: begin.handle_max.clone(),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        write_performative(out, channel, &Performative::Begin(reply), &[]);
        session
    }

    fn send(&self, env: &mut Env, p: Performative) {
        write_performative(env.out, self.channel, &p, &[]);
    }

    /// Our session-level flow state, with a link's when given.
    fn flow_frame(&self, link: Option<(u32, u32, u32, bool)>) -> Flow {
        let (handle, delivery_count, link_credit, drain) = match link {
            Some((h, dc, c, d)) => (Some(h.into()), Some(dc), Some(c), d),
            None => (None, None, None, false),
        };
        Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: self.incoming_window,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: OUTGOING_WINDOW,
            handle,
            delivery_count,
            link_credit,
            available: None,
            drain,
            echo: false,
            properties: None,
        }
    }

    pub fn has_awaiting_fsync(&self) -> bool {
        !self.awaiting_fsync.is_empty()
    }

    // ---- attach ----------------------------------------------------------------------

    pub fn attach(&mut self, a: Attach, env: &mut Env) -> Result<(), Fail> {
        let handle = a.handle.0;
        if self.links.contains_key(&handle) {
            return Err(Fail::Session(codec::error(
                SessionError::HandleInUse,
                format!("handle {handle} is in use"),
            )));
        }
        match a.role {
            // The client sends: we are the receiver.
            Role::Sender => self.attach_incoming(a, env),
            Role::Receiver => self.attach_outgoing(a, env),
        }
    }

    /// Refuses a link as the spec asks: an attach without the terminus, then a detach with
    /// the error.
    fn refuse(&mut self, mut reply: Attach, error: Error, env: &mut Env) {
        let handle = reply.handle.0;
        // The spec nulls the terminus the refusing side would have provided; some clients
        // (go-amqp) look for both null, which is as valid.
        reply.target = None;
        reply.source = None;
        tracing::info!(user = env.user, error = ?error.description, "AMQP 1.0 link refused");
        self.send(env, Performative::Attach(reply));
        self.send(
            env,
            Performative::Detach(Detach {
                handle: handle.into(),
                closed: true,
                error: Some(error),
            }),
        );
    }

    fn attach_incoming(&mut self, a: Attach, env: &mut Env) -> Result<(), Fail> {
        let handle = a.handle.0;
        let address = match a.target.as_deref() {
            Some(TargetArchetype::Target(t)) => t.address.clone(),
            _ => None,
        };
        let reply = Attach {
            name: a.name.clone(),
            handle: a.handle.clone(),
            role: Role::Receiver,
            snd_settle_mode: a.snd_settle_mode.clone(),
            rcv_settle_mode: ReceiverSettleMode::First,
            source: a.source.clone(),
            target: a.target.clone(),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: Some(env.max_message_size),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let target = match address::parse_target(address.as_deref()) {
            Ok(t) => t,
            Err(why) => {
                self.refuse(reply, codec::error(AmqpError::InvalidField, why), env);
                return Ok(());
            }
        };
        if let TargetAddress::Fixed(dest) = &target {
            if let Err(error) = check_destination(dest, env) {
                self.refuse(reply, error, env);
                return Ok(());
            }
        }
        self.send(env, Performative::Attach(reply));
        // During a resource alarm the link starts without credit; it gets some when the
        // alarms clear (`resume_publishers`).
        let credit = if env.publishing_blocked {
            0
        } else {
            INCOMING_LINK_CREDIT
        };
        let link = IncomingLink {
            target,
            delivery_count: a.initial_delivery_count.unwrap_or(0),
            credit,
            partial: None,
        };
        let flow = self.flow_frame(Some((handle, link.delivery_count, credit, false)));
        self.links.insert(handle, Link::In(link));
        self.send(env, Performative::Flow(flow));
        Ok(())
    }

    fn attach_outgoing(&mut self, a: Attach, env: &mut Env) -> Result<(), Fail> {
        let handle = a.handle.0;
        let address = a.source.as_ref().and_then(|s| s.address.clone());
        let settle_on_send = matches!(a.snd_settle_mode, SenderSettleMode::Settled);
        let reply = Attach {
            name: a.name.clone(),
            handle: a.handle.clone(),
            role: Role::Sender,
            snd_settle_mode: if settle_on_send {
                SenderSettleMode::Settled
            } else {
                SenderSettleMode::Unsettled
            },
            rcv_settle_mode: ReceiverSettleMode::First,
            source: a.source.clone(),
            target: a.target.clone(),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let queue_name = match address::parse_source(address.as_deref()) {
            Ok(q) => q,
            Err(why) => {
                self.refuse(reply, codec::error(AmqpError::InvalidField, why), env);
                return Ok(());
            }
        };
        let queue = match env.vhost.queue_for(&queue_name, env.connection) {
            Ok(q) => q,
            Err(e) => {
                let condition = if env.vhost.queue(&queue_name).is_some() {
                    AmqpError::ResourceLocked
                } else {
                    AmqpError::NotFound
                };
                self.refuse(reply, codec::error(condition, e.text.to_string()), env);
                return Ok(());
            }
        };
        if !env
            .access
            .check(env.user, &env.vhost.name, AccessKind::Read, &queue_name)
        {
            let text = format!(
                "read access to queue '{queue_name}' in vhost '{}' refused for user '{}'",
                env.vhost.name, env.user
            );
            self.refuse(
                reply,
                codec::error(AmqpError::UnauthorizedAccess, text),
                env,
            );
            return Ok(());
        }
        // Credit 0 until the client's flow: limit 1, count 1 (see the module comment).
        let flow = Arc::new(ChannelFlow::default());
        flow.prefetch_count.store(1, SeqCst);
        flow.unacked.store(1, SeqCst);
        let tag = ShortStr::from(format!("amqp10-{}-{handle}", self.channel));
        let consumer = Arc::new(Consumer::new(
            tag.clone(),
            self.channel,
            env.connection,
            false,
            false,
            0,
            flow.clone(),
            Arc::downgrade(&queue),
            env.events.clone(),
        ));
        if let Err(e) = queue.add_consumer(consumer.clone()) {
            self.refuse(
                reply,
                codec::error(AmqpError::ResourceLocked, e.text.to_string()),
                env,
            );
            return Ok(());
        }
        self.send(env, Performative::Attach(reply));
        self.by_tag.insert(tag, handle);
        self.links.insert(
            handle,
            Link::Out(OutgoingLink {
                queue,
                consumer,
                flow,
                settle_on_send,
                delivery_count: 0,
                credit: 0,
                drain: false,
                pending: VecDeque::new(),
                next_tag: 0,
            }),
        );
        Ok(())
    }

    // ---- detach / end ----------------------------------------------------------------

    /// The client detached a link: we detach too (closed as the client asked).
    pub fn detach(&mut self, d: Detach, env: &mut Env) {
        let handle = d.handle.0;
        if let Some(error) = &d.error {
            tracing::debug!(handle, error = ?error, "AMQP 1.0 client detached with an error");
        }
        if !self.links.contains_key(&handle) {
            // The answer to our own detach (a refused link, or one we ended with an error).
            return;
        }
        self.remove_link(handle, env);
        self.send(
            env,
            Performative::Detach(Detach {
                handle: handle.into(),
                closed: d.closed,
                error: None,
            }),
        );
    }

    /// Ends a link on our side with `error` (the client answers with its detach).
    pub fn detach_with_error(&mut self, handle: u32, error: Error, env: &mut Env) {
        tracing::info!(handle, error = ?error.description, "AMQP 1.0 link detached");
        self.remove_link(handle, env);
        self.send(
            env,
            Performative::Detach(Detach {
                handle: handle.into(),
                closed: true,
                error: Some(error),
            }),
        );
    }

    /// Forgets a link: a consumer leaves its queue (an auto-delete queue it leaves unused
    /// goes); what it was handed but had not sent, and what the client had not settled,
    /// go back to the queue.
    fn remove_link(&mut self, handle: u32, env: &mut Env) {
        let Some(link) = self.links.remove(&handle) else {
            return;
        };
        let Link::Out(link) = link else {
            return;
        };
        self.by_tag.remove(&link.consumer.tag);
        if let Some((_, true)) =
            link.queue
                .remove_consumer(env.connection, self.channel, &link.consumer.tag)
        {
            env.vhost.remove_queue(&link.queue);
        }
        for d in link.pending {
            return_delivery(d);
        }
        let ids: Vec<u32> = self
            .unsettled
            .iter()
            .filter(|(_, u)| u.handle == handle)
            .map(|(id, _)| *id)
            .collect();
        let requeue: Vec<Unsettled> = ids
            .into_iter()
            .filter_map(|id| self.unsettled.remove(&id))
            .collect();
        settle_all(requeue.into_iter().map(|u| (u, Settle::Requeue)));
    }

    /// The session ends (end, close, or the connection is gone): every link goes.
    pub fn release(&mut self, env: &mut Env) {
        let handles: Vec<u32> = self.links.keys().copied().collect();
        for handle in handles {
            self.remove_link(handle, env);
        }
        let rest = std::mem::take(&mut self.unsettled);
        settle_all(rest.into_values().map(|u| (u, Settle::Requeue)));
    }

    // ---- flow ------------------------------------------------------------------------

    /// The client's flow: the session window, and a link's credit when it names one. True
    /// when a drain needs the connection to hand over the deliveries already under way
    /// and then call `finish_drain`.
    pub fn flow(&mut self, f: Flow, env: &mut Env) -> Result<Option<u32>, Fail> {
        tracing::trace!(channel = self.channel, flow = ?f, "AMQP 1.0 flow");
        self.remote_incoming_window = f
            .next_incoming_id
            .unwrap_or(0)
            .wrapping_add(f.incoming_window)
            .wrapping_sub(self.next_outgoing_id);
        let mut drain_handle = None;
        if let Some(handle) = f.handle.as_ref().map(|h| h.0) {
            match self.links.get_mut(&handle) {
                None => {
                    return Err(Fail::Session(codec::error(
                        SessionError::UnattachedHandle,
                        format!("flow for unattached handle {handle}"),
                    )))
                }
                Some(Link::In(link)) => {
                    if f.echo {
                        let flow = (handle, link.delivery_count, link.credit, false);
                        let frame = self.flow_frame(Some(flow));
                        self.send(env, Performative::Flow(frame));
                    }
                }
                Some(Link::Out(link)) => {
                    let their_count = f.delivery_count.unwrap_or(0);
                    let limit = their_count.wrapping_add(f.link_credit.unwrap_or(0));
                    // Credit as the sender computes it; a receiver behind us has none.
                    let credit = limit.wrapping_sub(link.delivery_count);
                    link.credit = if credit > u32::MAX / 2 { 0 } else { credit };
                    link.drain = f.drain;
                    link.flow
                        .prefetch_count
                        .store(link.credit.saturating_add(1), SeqCst);
                    if f.drain {
                        drain_handle = Some(handle);
                    }
                    if f.echo {
                        let flow = (handle, link.delivery_count, link.credit, link.drain);
                        let frame = self.flow_frame(Some(flow));
                        self.send(env, Performative::Flow(frame));
                    }
                }
            }
        }
        // The window may have opened: every link sends what waits.
        let handles: Vec<u32> = self.links.keys().copied().collect();
        for h in handles {
            self.pump(h, env);
        }
        if let Some(handle) = drain_handle {
            // Nothing new from the queue: a dispatch under way finishes under the queue's
            // lock, which `message_count` takes, so afterwards every delivery the queue
            // made is in the connection's event channel.
            if let Some(Link::Out(link)) = self.links.get(&handle) {
                link.flow.prefetch_count.store(1, SeqCst);
                let _ = link.queue.message_count();
            }
        }
        Ok(drain_handle)
    }

    /// Completes a drain once the deliveries under way were handed over: sends what the
    /// credit allows straight from the queue, then gives the rest of the credit back
    /// (delivery-count advanced, credit 0) with a flow, as the spec's drain asks.
    pub fn finish_drain(&mut self, handle: u32, env: &mut Env) {
        self.pump(handle, env);
        loop {
            let Some(Link::Out(link)) = self.links.get_mut(&handle) else {
                return;
            };
            if !link.drain || !link.pending.is_empty() {
                // Waiting for the session window; the drain ends when it opens.
                return;
            }
            if link.credit == 0 {
                break;
            }
            let Some((message, _)) = link.queue.get(false) else {
                break;
            };
            link.consumer.take_credit(pipeline_cost(&message.message));
            link.pending.push_back(Delivery {
                consumer: link.consumer.clone(),
                queue: Some(link.queue.clone()),
                message,
            });
            self.pump(handle, env);
        }
        let Some(Link::Out(link)) = self.links.get_mut(&handle) else {
            return;
        };
        link.delivery_count = link.delivery_count.wrapping_add(link.credit);
        link.credit = 0;
        link.drain = false;
        link.flow.prefetch_count.store(1, SeqCst);
        let state = (handle, link.delivery_count, 0, true);
        let frame = self.flow_frame(Some(state));
        self.send(env, Performative::Flow(frame));
    }

    // ---- outgoing deliveries ---------------------------------------------------------

    /// A delivery from a queue for one of this session's links.
    pub fn on_delivery(&mut self, d: Delivery, env: &mut Env) {
        let handle = self.by_tag.get(&d.consumer.tag).copied();
        let live = handle.and_then(|h| match self.links.get_mut(&h) {
            Some(Link::Out(link)) if Arc::ptr_eq(&link.consumer, &d.consumer) => Some(link),
            _ => None,
        });
        match live {
            Some(link) => link.pending.push_back(d),
            None => {
                return_delivery(d);
                return;
            }
        }
        if let Some(h) = handle {
            self.pump(h, env);
        }
    }

    /// Sends a link's waiting deliveries while it has credit and the session window room.
    fn pump(&mut self, handle: u32, env: &mut Env) {
        let channel = self.channel;
        let Some(Link::Out(link)) = self.links.get_mut(&handle) else {
            return;
        };
        let max_payload = (env.peer_max_frame as usize)
            .saturating_sub(TRANSFER_OVERHEAD_BYTES)
            .max(256);
        while link.credit > 0 {
            let Some(d) = link.pending.front() else { break };
            let payload = convert::to_amqp10(&d.message.message, d.message.redelivered);
            let frames = payload.len().div_ceil(max_payload).max(1) as u32;
            if self.remote_incoming_window < frames {
                break;
            }
            let Some(d) = link.pending.pop_front() else {
                break;
            };
            let delivery_id = self.next_delivery_id;
            self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
            link.next_tag += 1;
            let tag = serde_bytes::ByteBuf::from(link.next_tag.to_be_bytes().to_vec());
            let mut chunks = payload.chunks(max_payload).peekable();
            let mut first = true;
            loop {
                let chunk = chunks.next().unwrap_or(&[]);
                let more = chunks.peek().is_some();
                let transfer = Transfer {
                    handle: handle.into(),
                    delivery_id: first.then_some(delivery_id),
                    delivery_tag: first.then(|| tag.clone()),
                    message_format: first.then_some(0),
                    settled: first.then_some(link.settle_on_send),
                    more,
                    rcv_settle_mode: None,
                    state: None,
                    resume: false,
                    aborted: false,
                    batchable: false,
                };
                write_performative(env.out, channel, &Performative::Transfer(transfer), chunk);
                first = false;
                if !more {
                    break;
                }
            }
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(frames);
            self.remote_incoming_window -= frames;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            link.credit -= 1;
            // Limit down first, then the count: the queue never sees more room than credit.
            link.flow
                .prefetch_count
                .store(link.credit.saturating_add(1), SeqCst);
            link.flow.settled(1);
            let consumer = d.consumer;
            consumer.delivered(pipeline_cost(&d.message.message));
            let Some(queue) = d.queue else { continue };
            MessageStats::add(&queue.stats.deliver, 1);
            if d.message.redelivered {
                MessageStats::add(&queue.stats.redeliver, 1);
            }
            if link.settle_on_send {
                consumer.settled_own(1);
                queue.settle(vec![d.message], Vec::new(), Vec::new());
            } else {
                self.unsettled.insert(
                    delivery_id,
                    Unsettled {
                        handle,
                        consumer,
                        queue,
                        message: d.message,
                    },
                );
            }
        }
        if link.credit > 0 && link.pending.is_empty() {
            link.consumer.wake_if_starved();
        }
    }

    /// The client settled deliveries we sent (role receiver), or told us its outcome.
    pub fn disposition(&mut self, d: Disposition, env: &mut Env) {
        if d.role == Role::Sender {
            // About deliveries the client sent: we settle those at once, nothing to do.
            return;
        }
        let last = d.last.unwrap_or(d.first);
        let settle = match &d.state {
            Some(DeliveryState::Accepted(_)) => Settle::Ack,
            Some(DeliveryState::Rejected(_)) => Settle::DeadLetter,
            Some(DeliveryState::Released(_)) => Settle::Requeue,
            Some(DeliveryState::Modified(m)) if m.undeliverable_here == Some(true) => {
                Settle::DeadLetter
            }
            Some(DeliveryState::Modified(_)) => Settle::Requeue,
            // Settled without an outcome: the source's default outcome, released.
            None if d.settled => Settle::Requeue,
            // Received (a non-terminal state) or no state yet: nothing to do.
            _ => return,
        };
        let mut settled = Vec::new();
        let ids: Vec<u32> = if last >= d.first {
            self.unsettled
                .range(d.first..=last)
                .map(|(id, _)| *id)
                .collect()
        } else {
            // The range wraps around the serial numbers.
            self.unsettled
                .range(d.first..)
                .chain(self.unsettled.range(..=last))
                .map(|(id, _)| *id)
                .collect()
        };
        for id in ids {
            if let Some(u) = self.unsettled.remove(&id) {
                settled.push((u, settle));
            }
        }
        if !d.settled && !settled.is_empty() {
            // The client waits for us to settle (rcv-settle-mode second is not offered,
            // but a client may still leave the delivery unsettled).
            self.send(
                env,
                Performative::Disposition(Disposition {
                    role: Role::Sender,
                    first: d.first,
                    last: d.last,
                    settled: true,
                    state: d.state.clone(),
                    batchable: false,
                }),
            );
        }
        settle_all(settled.into_iter());
    }

    // ---- incoming transfers ------------------------------------------------------------

    pub fn transfer(&mut self, t: Transfer, payload: Bytes, env: &mut Env) -> Result<(), Fail> {
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        if self.incoming_window == 0 {
            return Err(Fail::Session(codec::error(
                SessionError::WindowViolation,
                "transfer beyond the session's incoming window",
            )));
        }
        self.incoming_window -= 1;
        let handle = t.handle.0;
        let Some(Link::In(link)) = self.links.get_mut(&handle) else {
            return Err(Fail::Session(codec::error(
                SessionError::UnattachedHandle,
                format!("transfer on handle {handle}, which is not a link we receive on"),
            )));
        };
        let mut partial = match link.partial.take() {
            Some(p) => p,
            None => {
                let Some(delivery_id) = t.delivery_id else {
                    return Err(Fail::Connection(codec::error(
                        AmqpError::InvalidField,
                        "first transfer of a delivery without a delivery-id",
                    )));
                };
                link.delivery_count = link.delivery_count.wrapping_add(1);
                link.credit = link.credit.saturating_sub(1);
                if !t.more && !t.aborted {
                    // One frame: the payload stays a slice of the read buffer.
                    let settled = t.settled.unwrap_or(false);
                    self.after_transfer(handle, env);
                    return self.publish(handle, delivery_id, settled, payload, env);
                }
                Partial {
                    delivery_id,
                    settled: false,
                    payload: BytesMut::new(),
                }
            }
        };
        if t.aborted {
            // The sender gave up on this delivery: nothing of it is kept.
            self.after_transfer(handle, env);
            return Ok(());
        }
        partial.settled |= t.settled.unwrap_or(false);
        partial.payload.extend_from_slice(&payload);
        if partial.payload.len() as u64 > env.max_message_size {
            return Err(Fail::Link(
                handle,
                codec::error(
                    LinkError::MessageSizeExceeded,
                    format!(
                        "message larger than max-message-size {}",
                        env.max_message_size
                    ),
                ),
            ));
        }
        if t.more {
            if let Some(Link::In(link)) = self.links.get_mut(&handle) {
                link.partial = Some(partial);
            }
            return Ok(());
        }
        self.after_transfer(handle, env);
        self.publish(
            handle,
            partial.delivery_id,
            partial.settled,
            partial.payload.freeze(),
            env,
        )
    }

    /// Tops up the link's credit and the session window once half is used.
    fn after_transfer(&mut self, handle: u32, env: &mut Env) {
        if self.incoming_window < INCOMING_WINDOW / 2 {
            self.incoming_window = INCOMING_WINDOW;
            let frame = self.flow_frame(None);
            self.send(env, Performative::Flow(frame));
        }
        if env.publishing_blocked {
            return;
        }
        self.top_up_credit(handle, env);
    }

    /// Gives an incoming link its credit back once half is used.
    fn top_up_credit(&mut self, handle: u32, env: &mut Env) {
        if let Some(Link::In(link)) = self.links.get_mut(&handle) {
            if link.credit < INCOMING_LINK_CREDIT / 2 {
                link.credit = INCOMING_LINK_CREDIT;
                let state = (handle, link.delivery_count, link.credit, false);
                let frame = self.flow_frame(Some(state));
                self.send(env, Performative::Flow(frame));
            }
        }
    }

    /// The resource alarms cleared: publishers that ran low get credit again.
    pub fn resume_publishers(&mut self, env: &mut Env) {
        let handles: Vec<u32> = self.links.keys().copied().collect();
        for handle in handles {
            self.top_up_credit(handle, env);
        }
    }

    fn publish(
        &mut self,
        handle: u32,
        delivery_id: u32,
        settled: bool,
        payload: Bytes,
        env: &mut Env,
    ) -> Result<(), Fail> {
        if payload.len() as u64 > env.max_message_size {
            return Err(Fail::Link(
                handle,
                codec::error(
                    LinkError::MessageSizeExceeded,
                    format!(
                        "message larger than max-message-size {}",
                        env.max_message_size
                    ),
                ),
            ));
        }
        let Some(Link::In(link)) = self.links.get(&handle) else {
            return Ok(());
        };
        let outcome = route_and_enqueue(&link.target, &payload, settled, env);
        if settled {
            return Ok(());
        }
        match outcome {
            PublishOutcome::Settled(state) => self.dispositions.push((delivery_id, state)),
            PublishOutcome::AwaitingFsync(seq) => self.awaiting_fsync.push_back((delivery_id, seq)),
        }
        Ok(())
    }

    /// Settles the incoming deliveries whose store write is now durable (accepted) or
    /// failed (rejected).
    pub fn check_durable(&mut self, env: &mut Env) {
        let Some(store) = env.vhost.store.as_ref() else {
            let all: Vec<(u32, u64)> = self.awaiting_fsync.drain(..).collect();
            self.dispositions
                .extend(all.into_iter().map(|(id, _)| (id, accepted())));
            return;
        };
        if self.awaiting_fsync.is_empty() {
            return;
        }
        let durable = store.durable_state();
        let mut still = VecDeque::new();
        for (id, seq) in self.awaiting_fsync.drain(..) {
            match durable.outcome(seq) {
                Outcome::Pending => still.push_back((id, seq)),
                Outcome::Durable => self.dispositions.push((id, accepted())),
                Outcome::Failed => self.dispositions.push((
                    id,
                    rejected(
                        AmqpError::InternalError,
                        "the message store failed to write",
                    ),
                )),
            }
        }
        self.awaiting_fsync = still;
    }

    /// Sends the dispositions gathered in this batch: runs of consecutive delivery ids with
    /// the same outcome share one frame.
    pub fn flush_dispositions(&mut self, env: &mut Env) {
        if self.dispositions.is_empty() {
            return;
        }
        let mut all = std::mem::take(&mut self.dispositions);
        all.sort_by_key(|(id, _)| *id);
        let mut run: Option<(u32, u32, DeliveryState)> = None;
        for (id, state) in all {
            match &mut run {
                Some((_, last, s)) if *s == state && last.wrapping_add(1) == id => *last = id,
                _ => {
                    if let Some(r) = run.take() {
                        self.send_disposition(r, env);
                    }
                    run = Some((id, id, state));
                }
            }
        }
        if let Some(r) = run {
            self.send_disposition(r, env);
        }
    }

    fn send_disposition(&self, (first, last, state): (u32, u32, DeliveryState), env: &mut Env) {
        self.send(
            env,
            Performative::Disposition(Disposition {
                role: Role::Receiver,
                first,
                last: (last != first).then_some(last),
                settled: true,
                state: Some(state),
                batchable: false,
            }),
        );
    }
}

/// Whether the user may publish to `dest`: the exchange exists, is not internal, and the
/// user has write on it (and the topic permission for the routing key).
fn check_destination(dest: &Destination, env: &Env) -> Result<(), Error> {
    let vhost = &env.vhost.name;
    let Some(exchange) = env.vhost.exchange(&dest.exchange) else {
        return Err(codec::error(
            AmqpError::NotFound,
            format!("no exchange '{}' in vhost '{vhost}'", dest.exchange),
        ));
    };
    if dest.exchange.is_empty() && env.vhost.queue(&dest.routing_key).is_none() {
        return Err(codec::error(
            AmqpError::NotFound,
            format!("no queue '{}' in vhost '{vhost}'", dest.routing_key),
        ));
    }
    if exchange.internal {
        return Err(codec::error(
            AmqpError::UnauthorizedAccess,
            format!(
                "cannot publish to internal exchange '{}' in vhost '{vhost}'",
                dest.exchange
            ),
        ));
    }
    let name = permission_name(&dest.exchange);
    if !env.access.check(env.user, vhost, AccessKind::Write, name) {
        return Err(codec::error(
            AmqpError::UnauthorizedAccess,
            format!(
                "write access to exchange '{name}' in vhost '{vhost}' refused for user '{}'",
                env.user
            ),
        ));
    }
    if exchange.kind == ExchangeKind::Topic
        && !env.access.check_topic(
            env.user,
            vhost,
            &dest.exchange,
            AccessKind::Write,
            &dest.routing_key,
        )
    {
        return Err(codec::error(
            AmqpError::UnauthorizedAccess,
            format!(
                "write access to topic '{}' in exchange '{name}' in vhost '{vhost}' refused for user '{}'",
                dest.routing_key, env.user
            ),
        ));
    }
    Ok(())
}

/// Routes one published message and enqueues it, as the 0-9-1 publish path does.
fn route_and_enqueue(
    target: &TargetAddress,
    payload: &Bytes,
    settled: bool,
    env: &mut Env,
) -> PublishOutcome {
    let incoming = match convert::from_amqp10(payload) {
        Ok(m) => m,
        Err(why) => return PublishOutcome::Settled(rejected(AmqpError::DecodeError, why)),
    };
    let dest = match target {
        TargetAddress::Fixed(dest) => dest.clone(),
        TargetAddress::PerMessage => {
            let Some(to) = incoming.to.as_deref() else {
                return PublishOutcome::Settled(rejected(
                    AmqpError::PreconditionFailed,
                    "the message has no 'to' for the null target",
                ));
            };
            match address::parse_destination(to) {
                Ok(d) => d,
                Err(why) => return PublishOutcome::Settled(rejected(AmqpError::InvalidField, why)),
            }
        }
    };
    // Checked per message for `to`; for a fixed target again, as the exchange may have
    // gone since the attach.
    if let Err(error) = check_destination(&dest, env) {
        return PublishOutcome::Settled(DeliveryState::Rejected(Rejected { error: Some(error) }));
    }
    let Some(exchange) = env.vhost.exchange(&dest.exchange) else {
        return PublishOutcome::Settled(rejected(AmqpError::NotFound, "exchange gone"));
    };
    let props = incoming.properties;
    if let Some(user_id) = &props.user_id {
        if user_id.as_str() != env.user {
            return PublishOutcome::Settled(rejected(
                AmqpError::UnauthorizedAccess,
                format!(
                    "user_id property set to '{user_id}' but authenticated user was '{}'",
                    env.user
                ),
            ));
        }
    }
    let raw = ContentHeader::new(BASIC_CLASS_ID, 0, &props).properties;
    let Some(routing_key) = ShortStr::from_bytes(Bytes::from(dest.routing_key.clone())) else {
        return PublishOutcome::Settled(rejected(
            AmqpError::InvalidField,
            "routing key longer than 255 bytes",
        ));
    };
    let message = Arc::new(Message::new(
        exchange.name.clone(),
        routing_key,
        &props,
        raw,
        incoming.body,
    ));
    MessageStats::add(&exchange.stats.publish_in, 1);
    env.vhost
        .counters
        .published
        .observe(env.connection, message.body.len(), !settled);
    let mut queues = Vec::new();
    env.vhost.route_keys(
        &exchange,
        &[dest.routing_key.as_str()],
        props.headers.as_ref(),
        &mut queues,
    );
    if queues.is_empty() {
        return PublishOutcome::Settled(DeliveryState::Released(Released {}));
    }
    MessageStats::add(&exchange.stats.publish_out, 1);
    let mut refused = false;
    let mut store_seq = 0;
    let mut stored = None;
    if let Some(store) = env.vhost.store.as_ref().filter(|_| message.persistent) {
        let ids: Vec<_> = queues
            .iter()
            .filter_map(|q| q.stored.as_ref().map(|s| s.id))
            .collect();
        if !ids.is_empty() {
            match store.append(&ids, &message.to_stored()) {
                Ok(appended) => {
                    store_seq = appended.seq;
                    stored = Some(appended);
                }
                Err(e) => {
                    if !matches!(e, StoreError::Unavailable(_)) {
                        tracing::warn!(error = %e, "message store append failed");
                    }
                    // The durable queues cannot take it; the others do.
                    refused = true;
                    queues.retain(|q| q.stored.is_none());
                }
            }
        }
    }
    for queue in queues {
        let stored = stored.filter(|_| queue.stored.is_some());
        if queue.publish(message.clone(), stored) == Enqueued::Rejected {
            refused = true;
        }
    }
    if refused {
        return PublishOutcome::Settled(rejected(
            AmqpError::ResourceLimitExceeded,
            "a queue refused the message",
        ));
    }
    if store_seq > 0 {
        return PublishOutcome::AwaitingFsync(store_seq);
    }
    PublishOutcome::Settled(accepted())
}

/// What the client's outcome does with a delivery.
#[derive(Debug, Clone, Copy)]
enum Settle {
    Ack,
    Requeue,
    DeadLetter,
}

/// Settles deliveries with their queues: one `Queue::settle` per queue.
fn settle_all(items: impl Iterator<Item = (Unsettled, Settle)>) {
    type PerQueue = (
        Arc<Queue>,
        Vec<QueuedMessage>,
        Vec<QueuedMessage>,
        Vec<QueuedMessage>,
    );
    let mut per_queue: Vec<PerQueue> = Vec::new();
    let mut consumers: Vec<Arc<Consumer>> = Vec::new();
    for (u, settle) in items {
        u.consumer.settled_own(1);
        if !consumers.iter().any(|c| Arc::ptr_eq(c, &u.consumer)) {
            consumers.push(u.consumer.clone());
        }
        let entry = match per_queue
            .iter_mut()
            .position(|e| Arc::ptr_eq(&e.0, &u.queue))
        {
            Some(i) => &mut per_queue[i],
            None => {
                per_queue.push((u.queue.clone(), Vec::new(), Vec::new(), Vec::new()));
                let last = per_queue.len() - 1;
                &mut per_queue[last]
            }
        };
        match settle {
            Settle::Ack => entry.1.push(u.message),
            Settle::Requeue => entry.2.push(u.message),
            Settle::DeadLetter => entry.3.push(u.message),
        }
    }
    for (queue, acked, requeued, rejected) in per_queue {
        MessageStats::add(&queue.stats.ack, acked.len() as u64);
        queue.settle(acked, requeued, rejected);
    }
}

/// Gives a delivery that never reached the client back to its queue, with its credit.
pub fn return_delivery(d: Delivery) {
    let cost = pipeline_cost(&d.message.message);
    if let Some(queue) = d.queue {
        d.consumer.settled(1);
        queue.return_undelivered(vec![d.message], true);
    }
    d.consumer.delivered(cost);
}

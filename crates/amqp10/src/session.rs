//! One AMQP 1.0 session and its links, over the broker core: begin, attach, detach and
//! flow here; the publish side in `publish.rs`, the consume side in `deliver.rs`.
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

mod deliver;
mod dynamic;
mod link_pair;
mod pair;
mod publish;

pub use deliver::return_delivery;
use deliver::{settle_all, Settle};
pub use pair::LaterAnswer;
use pair::{is_management, LinkPair, ReplyLink};
use publish::check_destination;

use crate::address::{self, TargetAddress};
use crate::codec::{self, *};
use bytes::BytesMut;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use warren_broker::access::{AccessControl, AccessKind};
use warren_broker::confirm::Confirm;
use warren_broker::consumer::ChannelFlow;
use warren_broker::queue::QueueHandle;
use warren_broker::queue::QueuedMessage;
use warren_broker::vhost::{PublishScratch, TraceOrigin};
use warren_broker::EventSender;
use warren_broker::{Broker, ConnectionEvent, ConnectionId, Consumer, Delivery, VHost};
use warren_codec::ShortStr;

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
    /// For definitions changes (a temporary queue's declaration).
    pub broker: &'a Broker,
    /// The client's container id.
    pub container_id: &'a str,
    pub access: &'a AccessControl,
    pub user: &'a str,
    pub connection: ConnectionId,
    pub events: &'a EventSender<ConnectionEvent>,
    pub out: &'a mut BytesMut,
    /// The client's max-frame-size: transfers are split to fit it.
    pub peer_max_frame: u32,
    pub max_message_size: u64,
    /// A resource alarm is on: incoming links get no new credit (RabbitMQ 4 blocks AMQP
    /// 1.0 publishers this way).
    pub publishing_blocked: bool,
    /// A management request whose answer waits for a change (`link_pair.rs`): the
    /// connection reads nothing more until it is answered.
    pub later: &'a mut Option<Box<LaterAnswer>>,
}

impl<'a> Env<'a> {
    /// Who publishes or consumes on the session at `channel`, for the firehose's copies.
    pub fn trace_origin(&self, channel: u16) -> TraceOrigin<'a> {
        TraceOrigin {
            connection: self.connection,
            channel,
            user: self.user,
        }
    }
}

/// How a handler failed: the link, the session or the whole connection ends with the error.
#[derive(Debug)]
pub enum Fail {
    Link(u32, Error),
    Session(Error),
    Connection(Error),
}

/// Both kinds boxed: a hash table keeps room for four entries from its first insert, and
/// the usual session has one link (issue 12: memory per connection).
enum Link {
    In(Box<IncomingLink>),
    Out(Box<OutgoingLink>),
    /// The management node's answers (`link_pair.rs`).
    Reply(Box<ReplyLink>),
}

struct IncomingLink {
    target: TargetAddress,
    delivery_count: u32,
    credit: u32,
    /// A delivery whose transfer frames are still arriving.
    partial: Option<Partial>,
    /// The temporary queue made for this link (`dynamic.rs`): it goes with the link.
    temporary: Option<String>,
}

struct Partial {
    delivery_id: u32,
    settled: bool,
    payload: BytesMut,
}

struct OutgoingLink {
    queue: QueueHandle,
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
    /// Consumes a temporary queue made for this link (`dynamic.rs`): it goes with the link.
    dynamic: bool,
}

/// A delivery sent to the client and not yet settled by it.
struct Unsettled {
    handle: u32,
    consumer: Arc<Consumer>,
    queue: QueueHandle,
    message: QueuedMessage,
}

/// The source a sending link answers with: what is in force, not what was asked for
/// ("the sending endpoint sets the filter actually in place", 3.5.3). Warren's queues hand
/// each message to one receiver, so the distribution mode is `move` whatever the client asked
/// (a JMS QueueBrowser that asked for `copy` learns it is not browsing, as from RabbitMQ 4);
/// no filter is applied, so none is listed.
fn in_force(mut source: Box<Source>) -> Box<Source> {
    source.distribution_mode = Some(DistributionMode::Move);
    source.filter = None;
    source
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
    /// Values boxed: a B-tree's first node has room for eleven entries, and a receiver
    /// with one delivery in flight would otherwise carry eleven `Unsettled`s' worth (~1 KB).
    unsettled: BTreeMap<u32, Box<Unsettled>>,
    /// Incoming deliveries whose outcome waits for the store's fsync or for the queues that
    /// confirm on their own, in arrival order: (delivery id, its confirm).
    awaiting_confirm: VecDeque<(u32, Confirm)>,
    /// Dispositions to send at the end of the read batch (runs of ids share one frame).
    dispositions: Vec<(u32, DeliveryState)>,
    /// Reused by every transfer's publish.
    publish_scratch: PublishScratch,
    /// The management node's link pairs (few: a Vec).
    pairs: Vec<LinkPair>,
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
            awaiting_confirm: VecDeque::new(),
            dispositions: Vec::new(),
            publish_scratch: PublishScratch::default(),
            pairs: Vec::new(),
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

    /// Whether a delivery waits for the store (only its progress can settle it then).
    pub fn awaits_store(&self) -> bool {
        self.awaiting_confirm
            .iter()
            .any(|(_, confirm)| confirm.waits_for_store())
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
        let management = match a.role {
            Role::Sender => match a.target.as_deref() {
                Some(TargetArchetype::Target(t)) => is_management(t.address.as_deref()),
                _ => false,
            },
            Role::Receiver => is_management(a.source.as_ref().and_then(|s| s.address.as_deref())),
        };
        if management {
            return self.attach_pair_half(a, env);
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
        // A transaction coordinator: transactions are not supported, and only this link is
        // refused (RabbitMQ 4's answer), not the session or connection.
        if let Some(TargetArchetype::Coordinator(_)) = a.target.as_deref() {
            let error = codec::error(AmqpError::NotImplemented, "Transactions not supported");
            self.refuse(reply, error, env);
            return Ok(());
        }
        let mut reply = reply;
        let mut temporary = None;
        if let Some(TargetArchetype::Target(t)) = a.target.as_deref() {
            if t.dynamic {
                let caps = t.capabilities.as_ref();
                match self.temporary_queue(caps, t.address.is_some(), &a.name, env) {
                    Ok(name) => {
                        reply.target = Some(dynamic::temporary_target(&name));
                        temporary = Some(name);
                    }
                    Err(error) => {
                        self.refuse(reply, error, env);
                        return Ok(());
                    }
                }
            }
        }
        let address = match &temporary {
            Some(name) => Some(address::queue_address(name)),
            None => address,
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
            temporary,
        };
        let flow = self.flow_frame(Some((handle, link.delivery_count, credit, false)));
        self.links.insert(handle, Link::In(Box::new(link)));
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
            source: a.source.clone().map(in_force),
            target: a.target.clone(),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let mut reply = reply;
        let dynamic = a.source.as_ref().is_some_and(|s| s.dynamic);
        let queue_name = match a.source.as_deref() {
            Some(source) if source.dynamic => {
                let caps = source.capabilities.as_ref();
                match self.temporary_queue(caps, source.address.is_some(), &a.name, env) {
                    Ok(name) => {
                        reply.source = Some(dynamic::temporary_source(&name));
                        name
                    }
                    Err(error) => {
                        self.refuse(reply, error, env);
                        return Ok(());
                    }
                }
            }
            _ => match address::parse_source(address.as_deref()) {
                Ok(q) => q,
                Err(why) => {
                    self.refuse(reply, codec::error(AmqpError::InvalidField, why), env);
                    return Ok(());
                }
            },
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
            Link::Out(Box::new(OutgoingLink {
                queue: QueueHandle::new(queue),
                consumer,
                flow,
                settle_on_send,
                delivery_count: 0,
                credit: 0,
                drain: false,
                pending: VecDeque::new(),
                next_tag: 0,
                dynamic,
            })),
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
        self.forget_pair_half(handle);
        let link = match link {
            Link::Out(link) => link,
            Link::Reply(_) => return,
            Link::In(link) => {
                // Its lifetime policy is delete-on-close: the queue goes with its link.
                if let Some(queue) = link.temporary.and_then(|name| env.vhost.queue(&name)) {
                    env.vhost.remove_queue(&queue);
                }
                return;
            }
        };
        self.by_tag.remove(&link.consumer.tag);
        // The session no longer holds it: a queue that moves its consumers (a quorum queue's
        // leader change) must not attach it again.
        link.consumer.detach();
        env.broker.stop_consuming(
            env.vhost,
            &link.queue,
            env.connection,
            self.channel,
            &link.consumer.tag,
        );
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
            .map(|u| *u)
            .collect();
        settle_all(requeue.into_iter().map(|u| (u, Settle::Gone)));
        if link.dynamic {
            // Its lifetime policy is delete-on-close: the queue goes with its link.
            if let Some(queue) = env.vhost.queue(link.queue.name()) {
                env.vhost.remove_queue(&queue);
            }
        }
    }

    /// The session ends (end, close, or the connection is gone): every link goes.
    pub fn release(&mut self, env: &mut Env) {
        let handles: Vec<u32> = self.links.keys().copied().collect();
        for handle in handles {
            self.remove_link(handle, env);
        }
        let rest = std::mem::take(&mut self.unsettled);
        settle_all(rest.into_values().map(|u| (*u, Settle::Gone)));
    }

    // ---- flow ------------------------------------------------------------------------

    /// The client's flow: the session window, and a link's credit when it names one. Returns
    /// the link's handle when the client asked to drain: the connection then hands over the
    /// deliveries already under way and calls `finish_drain`.
    pub fn flow(&mut self, f: Flow, env: &mut Env) -> Result<Option<u32>, Fail> {
        tracing::trace!(channel = self.channel, flow = ?f, "AMQP 1.0 flow");
        self.remote_incoming_window = f
            .next_incoming_id
            .unwrap_or(0)
            .wrapping_add(f.incoming_window)
            .wrapping_sub(self.next_outgoing_id);
        let mut drain_handle = None;
        let mut reply_flow = None;
        if f.handle.is_none() && f.echo {
            let frame = self.flow_frame(None);
            self.send(env, Performative::Flow(frame));
        }
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
                Some(Link::Reply(_)) => reply_flow = Some(handle),
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
        if let Some(handle) = reply_flow {
            self.reply_link_flow(handle, &f, env);
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
}

//! One AMQP channel: its state and the dispatch of every channel-level method. Publishing
//! lives in `publish.rs`, deliveries and acknowledgements in `deliver.rs`; this file holds the
//! state they share and the exchange, queue, qos and flow methods.
//!
//! Handlers return `AmqpResult`; the connection turns an error into channel.close or
//! connection.close in one place, by the reply code's class.

use crate::context::Ctx;
use crate::permissions::{self, PublishGrants, Resource};
use crate::publish_state::{ConfirmState, PendingPublish, TxOp};
use crate::unacked::Unacked;
use crate::waiting::Reply;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use warren_broker::access::{required, AccessKind};
use warren_broker::name_map::NameMap;
use warren_broker::names::{self, strip_cr_lf};
use warren_broker::queue::QueueHandle;
use warren_broker::user_usage::UsageSlot;
use warren_broker::versioned_map::LastLookup;
use warren_broker::vhost::PublishScratch;
use warren_broker::{
    AmqpError, AmqpResult, ChannelFlow, ChannelInfo, Consumer, DefinitionOp, Exchange,
    ExchangeDeclaration, QueueDeclaration,
};
use warren_codec::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelState {
    Open,
    /// We sent channel.close and wait for close-ok; everything else is dropped.
    Closing,
}

pub struct ConsumerEntry {
    pub consumer: Arc<Consumer>,
    /// None for the direct reply-to pseudo-consumer.
    pub queue: Option<QueueHandle>,
}

pub struct Channel {
    pub id: u16,
    pub state: ChannelState,
    pub flow: Arc<ChannelFlow>,
    /// basic.qos(global=false): prefetch for consumers created from now on.
    pub consumer_prefetch: u32,
    pub consumers: NameMap<ConsumerEntry>,
    /// The direct reply-to address key, when this channel consumes amq.rabbitmq.reply-to.
    pub reply_to_key: Option<String>,
    pub next_delivery_tag: u64,
    /// Deliveries awaiting ack, in delivery-tag order.
    pub unacked: VecDeque<Unacked>,
    /// The last queue declared here; an empty queue name in later methods means it.
    pub last_queue: Option<ShortStr>,
    pub pending_publish: Option<PendingPublish>,
    pub confirm: Option<ConfirmState>,
    pub tx: Option<Vec<TxOp>>,
    /// A tx.commit-ok owed once this store sequence is durable.
    pub commit_waits_for: Option<u64>,
    /// Reused by every publish (routing result, store ids, the last queue looked up).
    pub publish_scratch: PublishScratch,
    /// The routing keys of the last publish's CC and BCC headers (`header_routes_into`),
    /// emptied once it is routed: they slice its read buffer.
    pub cc_routes: Vec<Bytes>,
    /// What the HTTP API shows of this channel: its counters and gauges, kept current here.
    pub info: Arc<ChannelInfo>,
    /// Exchanges and topic routing keys this channel may publish to (cached checks).
    pub publish_grants: PublishGrants,
    /// The exchange this channel last published to: answered without a name lookup while
    /// the vhost's exchanges are unchanged (`warren_broker::versioned_map`).
    pub last_published_exchange: LastLookup<Exchange>,
    /// Counts this channel against its user's `max-channels` while it lives.
    pub user_slot: Option<UsageSlot>,
}

impl Channel {
    pub fn new(id: u16) -> Channel {
        let flow = Arc::new(ChannelFlow::default());
        Channel {
            id,
            state: ChannelState::Open,
            info: ChannelInfo::new(id, flow.clone()),
            flow,
            consumer_prefetch: 0,
            consumers: NameMap::default(),
            reply_to_key: None,
            next_delivery_tag: 0,
            unacked: VecDeque::new(),
            last_queue: None,
            pending_publish: None,
            confirm: None,
            tx: None,
            commit_waits_for: None,
            publish_scratch: PublishScratch::default(),
            cc_routes: Vec::new(),
            publish_grants: PublishGrants::default(),
            last_published_exchange: LastLookup::default(),
            user_slot: None,
        }
    }

    /// Closes the channel with `error` (channel.close naming the method that failed, given
    /// as class and method ids): consumers cancelled, unacked deliveries requeued. Nothing
    /// more is processed until close-ok. A channel closing already is left alone.
    pub fn close_with_error(&mut self, error: &AmqpError, method: (u16, u16), ctx: &mut Ctx) {
        if self.state == ChannelState::Closing {
            return;
        }
        self.release_all(ctx);
        self.state = ChannelState::Closing;
        ctx.send(
            self.id,
            ChannelClose {
                reply_code: error.code as u16,
                reply_text: ShortStr::from(error.reply_text()),
                class_id: method.0,
                method_id: method.1,
            },
        );
    }

    /// Resolves an empty queue name to the channel's last declared queue (RabbitMQ's
    /// shortcut, taken before anything else is checked).
    pub fn queue_name(&self, name: ShortStr) -> AmqpResult<ShortStr> {
        if !name.is_empty() {
            return Ok(name);
        }
        self.last_queue
            .clone()
            .ok_or_else(|| AmqpError::not_found("no previously declared queue"))
    }

    /// queue.bind and queue.unbind with an empty queue name and an empty routing key bind
    /// with the last declared queue's name as the key.
    fn binding_key(&self, queue: &ShortStr, routing_key: ShortStr) -> AmqpResult<ShortStr> {
        match queue.is_empty() && routing_key.is_empty() {
            true => self.queue_name(routing_key),
            false => Ok(routing_key),
        }
    }

    /// Dispatches one channel method (not content frames, not channel.open/close).
    pub fn handle(&mut self, method: Method, ctx: &mut Ctx) -> AmqpResult<()> {
        let ch = self.id;
        match method {
            Method::ChannelFlow(m) => {
                // RabbitMQ no longer lets a client pause deliveries this way (use qos).
                if !m.active {
                    return Err(AmqpError::new(ReplyCode::NotImplemented, "active=false"));
                }
                ctx.send(ch, ChannelFlowOk { active: true });
            }
            Method::ChannelFlowOk(_) => {}
            Method::BasicQos(m) => {
                if m.prefetch_size != 0 {
                    return Err(AmqpError::new(
                        ReplyCode::NotImplemented,
                        format!("prefetch_size!=0 ({})", m.prefetch_size),
                    ));
                }
                if m.global {
                    self.flow
                        .prefetch_count
                        .store(m.prefetch_count.into(), SeqCst);
                } else {
                    self.consumer_prefetch = m.prefetch_count.into();
                    self.info
                        .prefetch_count
                        .store(self.consumer_prefetch, Relaxed);
                    // As RabbitMQ 3.10 (`rabbit_limiter:unlimit_prefetch`): a per-consumer qos
                    // lifts the channel's global limit.
                    self.flow.prefetch_count.store(0, SeqCst);
                }
                ctx.send(ch, BasicQosOk);
                self.wake_consumers();
            }
            Method::ExchangeDeclare(m) => {
                let no_wait = m.no_wait;
                let name = strip_cr_lf(m.exchange);
                check_exchange_declare(ctx, &name, m.passive, &m.exchange_type, &m.arguments)?;
                if m.passive {
                    // Only asks whether it is there: not a change.
                    ctx.vhost.declare_exchange(ExchangeDeclaration {
                        name,
                        kind: m.exchange_type.to_string(),
                        passive: true,
                        durable: m.durable,
                        auto_delete: m.auto_delete,
                        internal: m.internal,
                        arguments: m.arguments,
                    })?;
                    if !no_wait {
                        ctx.send(ch, ExchangeDeclareOk);
                    }
                    return Ok(());
                }
                let op = DefinitionOp::ExchangeDeclare {
                    vhost: ctx.vhost.name.clone(),
                    name: name.to_string(),
                    kind: m.exchange_type.to_string(),
                    durable: m.durable,
                    auto_delete: m.auto_delete,
                    internal: m.internal,
                    arguments: m.arguments,
                };
                self.change(ctx, op, Reply::ExchangeDeclare { no_wait })?;
            }
            Method::ExchangeDelete(m) => {
                let name = strip_cr_lf(m.exchange);
                // The default and amq.* exchanges are refused first, by the vhost.
                if !name.is_empty() && !names::has_reserved_prefix(&name) {
                    permissions::check(ctx, AccessKind::Configure, Resource::Exchange, &name)?;
                }
                let op = DefinitionOp::ExchangeDelete {
                    vhost: ctx.vhost.name.clone(),
                    name: name.to_string(),
                    if_unused: m.if_unused,
                };
                let no_wait = m.no_wait;
                self.change(ctx, op, Reply::ExchangeDelete { no_wait })?;
            }
            Method::ExchangeBind(m) => {
                let (destination, source) = (strip_cr_lf(m.destination), strip_cr_lf(m.source));
                let dest = (Resource::Exchange, destination.as_str());
                check_binding(ctx, dest, &source, &m.routing_key)?;
                let op = DefinitionOp::ExchangeBind {
                    vhost: ctx.vhost.name.clone(),
                    destination: destination.to_string(),
                    source: source.to_string(),
                    routing_key: m.routing_key.to_string(),
                    arguments: m.arguments,
                };
                let no_wait = m.no_wait;
                self.change(ctx, op, Reply::ExchangeBind { no_wait })?;
            }
            Method::ExchangeUnbind(m) => {
                let (destination, source) = (strip_cr_lf(m.destination), strip_cr_lf(m.source));
                let dest = (Resource::Exchange, destination.as_str());
                check_binding(ctx, dest, &source, &m.routing_key)?;
                let op = DefinitionOp::ExchangeUnbind {
                    vhost: ctx.vhost.name.clone(),
                    destination: destination.to_string(),
                    source: source.to_string(),
                    routing_key: m.routing_key.to_string(),
                    arguments: m.arguments,
                };
                let no_wait = m.no_wait;
                self.change(ctx, op, Reply::ExchangeUnbind { no_wait })?;
            }
            Method::QueueDeclare(m) => {
                let no_wait = m.no_wait;
                let name = strip_cr_lf(m.queue);
                check_queue_declare(ctx, &name, m.passive, &m.arguments)?;
                if m.passive || name.starts_with(names::DIRECT_REPLY_TO) {
                    // Only asks whether it is there (a direct reply-to name, passive or
                    // not, does too): not a change.
                    let (queue, message_count, consumer_count) = ctx.vhost.declare_queue(
                        QueueDeclaration {
                            name,
                            passive: m.passive,
                            durable: m.durable,
                            exclusive: m.exclusive,
                            auto_delete: m.auto_delete,
                            arguments: m.arguments,
                        },
                        ctx.connection,
                    )?;
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
                    return Ok(());
                }
                // A server-named queue's name is chosen here, before the change, so that
                // every node applying it creates the same queue.
                let server_named = name.is_empty();
                let name = match server_named {
                    true => names::generated_queue_name(),
                    false => name.to_string(),
                };
                let op = DefinitionOp::QueueDeclare {
                    vhost: ctx.vhost.name.clone(),
                    name,
                    server_named,
                    durable: m.durable,
                    exclusive: m.exclusive,
                    auto_delete: m.auto_delete,
                    arguments: m.arguments,
                    connection: ctx.connection,
                    members: Vec::new(),
                    // In a cluster, `Broker::change` picks the home node.
                    home: None,
                };
                self.change(ctx, op, Reply::QueueDeclare { no_wait })?;
            }
            Method::QueueBind(m) => {
                let routing_key = self.binding_key(&m.queue, m.routing_key)?;
                let queue = strip_cr_lf(self.queue_name(m.queue)?);
                let exchange = strip_cr_lf(m.exchange);
                check_binding(ctx, (Resource::Queue, &queue), &exchange, &routing_key)?;
                let op = DefinitionOp::QueueBind {
                    vhost: ctx.vhost.name.clone(),
                    queue: queue.to_string(),
                    exchange: exchange.to_string(),
                    routing_key: routing_key.to_string(),
                    arguments: m.arguments,
                    connection: ctx.connection,
                };
                let no_wait = m.no_wait;
                self.change(ctx, op, Reply::QueueBind { no_wait })?;
            }
            Method::QueueUnbind(m) => {
                let routing_key = self.binding_key(&m.queue, m.routing_key)?;
                let queue = strip_cr_lf(self.queue_name(m.queue)?);
                let exchange = strip_cr_lf(m.exchange);
                check_binding(ctx, (Resource::Queue, &queue), &exchange, &routing_key)?;
                let op = DefinitionOp::QueueUnbind {
                    vhost: ctx.vhost.name.clone(),
                    queue: queue.to_string(),
                    exchange: exchange.to_string(),
                    routing_key: routing_key.to_string(),
                    arguments: m.arguments,
                    connection: ctx.connection,
                };
                self.change(ctx, op, Reply::QueueUnbind)?;
            }
            Method::QueuePurge(m) => {
                let name = self.queue_name(m.queue)?;
                permissions::check_read_queue(ctx, &name)?;
                let queue = ctx.vhost.queue_to_use(&name, ctx.connection)?;
                let message_count = queue.purge();
                if !m.no_wait {
                    ctx.send(ch, QueuePurgeOk { message_count });
                }
            }
            Method::QueueDelete(m) => {
                let name = strip_cr_lf(self.queue_name(m.queue)?);
                permissions::check(ctx, AccessKind::Configure, Resource::Queue, &name)?;
                // if-unused and if-empty look at the queue's live consumers and messages,
                // which are this node's own: judged here, before the change is made.
                ctx.vhost
                    .check_queue_delete(&name, m.if_unused, m.if_empty, ctx.connection)?;
                let op = DefinitionOp::QueueDelete {
                    vhost: ctx.vhost.name.clone(),
                    name: name.to_string(),
                    connection: ctx.connection,
                };
                let no_wait = m.no_wait;
                self.change(ctx, op, Reply::QueueDelete { no_wait })?;
            }
            Method::BasicPublish(m) => self.start_publish(m, ctx)?,
            Method::BasicConsume(m) => self.consume(m, ctx)?,
            Method::BasicCancel(m) => self.cancel(m, ctx),
            Method::BasicGet(m) => self.get(m, ctx)?,
            Method::BasicAck(m) => self.ack(m.delivery_tag, m.multiple, ctx)?,
            Method::BasicNack(m) => self.nack(m.delivery_tag, m.multiple, m.requeue, ctx)?,
            Method::BasicReject(m) => self.nack(m.delivery_tag, false, m.requeue, ctx)?,
            Method::BasicRecover(m) => {
                self.recover(m.requeue)?;
                ctx.send(ch, BasicRecoverOk);
            }
            Method::BasicRecoverAsync(m) => self.recover(m.requeue)?,
            Method::ConfirmSelect(m) => {
                if self.tx.is_some() {
                    return Err(AmqpError::precondition(
                        "cannot switch from tx to confirm mode",
                    ));
                }
                if self.confirm.is_none() {
                    self.confirm = Some(ConfirmState::default());
                    self.info.confirm.store(true, Relaxed);
                }
                if !m.nowait {
                    ctx.send(ch, ConfirmSelectOk);
                }
            }
            Method::TxSelect(_) => {
                if self.confirm.is_some() {
                    return Err(AmqpError::precondition(
                        "cannot switch from confirm to tx mode",
                    ));
                }
                self.tx.get_or_insert_with(Vec::new);
                self.info.transactional.store(true, Relaxed);
                ctx.send(ch, TxSelectOk);
            }
            Method::TxCommit(_) => self.commit(ctx)?,
            Method::TxRollback(_) => {
                self.rollback()?;
                ctx.send(ch, TxRollbackOk);
            }
            other => {
                return Err(AmqpError::new(
                    ReplyCode::CommandInvalid,
                    format!("unexpected method {} on a channel", other.name()),
                ))
            }
        }
        Ok(())
    }

    /// After qos or acks: lets queues that skipped our consumers try again, in turn.
    pub fn wake_consumers(&self) {
        self.flow
            .wake_in_turn(self.consumers.values().map(|e| &e.consumer));
    }
}

/// exchange.declare's permissions (rabbit_channel): configure on the exchange, and for a new
/// one with an alternate exchange, read on it and write on the alternate; a passive declare
/// needs any permission. What the vhost refuses first (the default exchange, an unknown
/// type, an amq.* name) is left to it.
fn check_exchange_declare(
    ctx: &Ctx,
    name: &str,
    passive: bool,
    kind: &str,
    arguments: &FieldTable,
) -> AmqpResult<()> {
    if name.is_empty() {
        return Ok(());
    }
    if passive {
        return permissions::check_any(ctx, Resource::Exchange, name);
    }
    if warren_broker::ExchangeKind::parse(kind).is_none() {
        return Ok(());
    }
    let exists = ctx.vhost.exchange(name).is_some() || names::has_reserved_prefix(name);
    permissions::check_all(ctx, &required::exchange_declare(name, exists, arguments))
}

/// queue.declare's permissions: configure on the queue (a server-named one is checked under
/// a fresh amq.gen- name, as RabbitMQ checks the name it is about to use), and for a new one
/// with a dead-letter exchange, read on the queue and write on that exchange; a passive
/// declare needs any permission. Direct reply-to names and amq.* names are the vhost's.
fn check_queue_declare(
    ctx: &Ctx,
    name: &str,
    passive: bool,
    arguments: &FieldTable,
) -> AmqpResult<()> {
    if name.starts_with(names::DIRECT_REPLY_TO) {
        return Ok(());
    }
    if passive {
        return permissions::check_any(ctx, Resource::Queue, name);
    }
    if names::has_reserved_prefix(name) {
        return Ok(());
    }
    let generated;
    let name = if name.is_empty() {
        generated = names::generated_queue_name();
        generated.as_str()
    } else {
        name
    };
    let exists = ctx.vhost.queue(name).is_some();
    permissions::check_all(ctx, &required::queue_declare(name, exists, arguments))
}

/// Binding permissions (queue.bind/unbind, exchange.bind/unbind): write on the destination,
/// read on the source exchange, and topic read on the routing key when the source is a topic
/// exchange. A binding that names the default exchange is refused by the vhost first.
fn check_binding(
    ctx: &Ctx,
    (kind, destination): (Resource, &str),
    source: &str,
    routing_key: &str,
) -> AmqpResult<()> {
    permissions::check_all(ctx, &required::binding((kind, destination), source))?;
    if let Some(exchange) = ctx.vhost.exchange(source) {
        permissions::check_topic(ctx, &exchange, AccessKind::Read, routing_key)?;
    }
    Ok(())
}

//! One AMQP channel: its state and the dispatch of every channel-level method. Publishing
//! lives in `publish.rs`, deliveries and acknowledgements in `deliver.rs`; this file holds the
//! state they share and the exchange, queue, qos and flow methods.
//!
//! Handlers return `AmqpResult`; the connection turns an error into channel.close or
//! connection.close in one place, by the reply code's class.

use crate::context::Ctx;
use crate::deliver::Unacked;
use crate::publish::{ConfirmState, PendingPublish, TxOp};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use warren_broker::{
    AmqpError, AmqpResult, ChannelFlow, Consumer, ExchangeDeclaration, Queue, QueueDeclaration,
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
    pub queue: Option<Arc<Queue>>,
}

pub struct Channel {
    pub id: u16,
    pub state: ChannelState,
    pub flow: Arc<ChannelFlow>,
    /// basic.qos(global=false): prefetch for consumers created from now on.
    pub consumer_prefetch: u32,
    pub consumers: HashMap<ShortStr, ConsumerEntry>,
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
    /// Reused for every publish's routing result.
    pub route_buf: Vec<Arc<Queue>>,
    /// Reused for the store ids of a persistent publish's durable queues.
    pub store_ids_buf: Vec<warren_store::QueueId>,
}

impl Channel {
    pub fn new(id: u16) -> Channel {
        Channel {
            id,
            state: ChannelState::Open,
            flow: Arc::new(ChannelFlow::default()),
            consumer_prefetch: 0,
            consumers: HashMap::new(),
            reply_to_key: None,
            next_delivery_tag: 0,
            unacked: VecDeque::new(),
            last_queue: None,
            pending_publish: None,
            confirm: None,
            tx: None,
            commit_waits_for: None,
            route_buf: Vec::new(),
            store_ids_buf: Vec::new(),
        }
    }

    /// Resolves an empty queue name to the channel's last declared queue.
    pub fn queue_name(&self, name: ShortStr) -> AmqpResult<ShortStr> {
        if !name.is_empty() {
            return Ok(name);
        }
        self.last_queue
            .clone()
            .ok_or_else(|| AmqpError::not_found("no previously declared queue"))
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
                }
                ctx.send(ch, BasicQosOk);
                self.wake_consumers();
            }
            Method::ExchangeDeclare(m) => {
                let no_wait = m.no_wait;
                ctx.vhost.declare_exchange(ExchangeDeclaration {
                    name: m.exchange,
                    kind: m.exchange_type.to_string(),
                    passive: m.passive,
                    durable: m.durable,
                    auto_delete: m.auto_delete,
                    internal: m.internal,
                    arguments: m.arguments,
                })?;
                if !no_wait {
                    ctx.send(ch, ExchangeDeclareOk);
                }
            }
            Method::ExchangeDelete(m) => {
                ctx.vhost.delete_exchange(&m.exchange, m.if_unused)?;
                if !m.no_wait {
                    ctx.send(ch, ExchangeDeleteOk);
                }
            }
            Method::ExchangeBind(m) => {
                ctx.vhost
                    .bind_exchange(&m.destination, &m.source, m.routing_key, m.arguments)?;
                if !m.no_wait {
                    ctx.send(ch, ExchangeBindOk);
                }
            }
            Method::ExchangeUnbind(m) => {
                ctx.vhost
                    .unbind_exchange(&m.destination, &m.source, m.routing_key, m.arguments)?;
                if !m.no_wait {
                    ctx.send(ch, ExchangeUnbindOk);
                }
            }
            Method::QueueDeclare(m) => {
                let no_wait = m.no_wait;
                let (queue, message_count, consumer_count) = ctx.vhost.declare_queue(
                    QueueDeclaration {
                        name: m.queue,
                        passive: m.passive,
                        durable: m.durable,
                        exclusive: m.exclusive,
                        auto_delete: m.auto_delete,
                        arguments: m.arguments,
                    },
                    ctx.connection,
                )?;
                self.last_queue = Some(queue.name.clone());
                if !no_wait {
                    ctx.send(
                        ch,
                        QueueDeclareOk {
                            queue: queue.name.clone(),
                            message_count,
                            consumer_count,
                        },
                    );
                }
            }
            Method::QueueBind(m) => {
                let queue = self.queue_name(m.queue)?;
                ctx.vhost.bind_queue(
                    &queue,
                    &m.exchange,
                    m.routing_key,
                    m.arguments,
                    ctx.connection,
                )?;
                if !m.no_wait {
                    ctx.send(ch, QueueBindOk);
                }
            }
            Method::QueueUnbind(m) => {
                let queue = self.queue_name(m.queue)?;
                ctx.vhost.unbind_queue(
                    &queue,
                    &m.exchange,
                    m.routing_key,
                    m.arguments,
                    ctx.connection,
                )?;
                ctx.send(ch, QueueUnbindOk);
            }
            Method::QueuePurge(m) => {
                let name = self.queue_name(m.queue)?;
                let queue = ctx.vhost.queue_for(&name, ctx.connection)?;
                let message_count = queue.purge();
                if !m.no_wait {
                    ctx.send(ch, QueuePurgeOk { message_count });
                }
            }
            Method::QueueDelete(m) => {
                let name = self.queue_name(m.queue)?;
                let message_count =
                    ctx.vhost
                        .delete_queue(&name, m.if_unused, m.if_empty, ctx.connection)?;
                if !m.no_wait {
                    ctx.send(ch, QueueDeleteOk { message_count });
                }
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
                ctx.send(ch, TxSelectOk);
            }
            Method::TxCommit(_) => self.commit(ctx)?,
            Method::TxRollback(_) => {
                let Some(ops) = self.tx.as_mut() else {
                    return Err(AmqpError::precondition("channel is not transactional"));
                };
                ops.clear();
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

    /// After qos or acks: lets queues that skipped our consumers try again.
    pub fn wake_consumers(&self) {
        for entry in self.consumers.values() {
            entry.consumer.wake_if_starved();
        }
    }
}

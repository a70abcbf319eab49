//! The vhost's one publish. Every way a message enters the broker ends here: 0-9-1's
//! basic.publish, AMQP 1.0's transfer, the HTTP API's publish and a dead-lettered copy. It
//! routes the message with its routing keys (the caller's: the message's own, then those of
//! its CC and BCC headers), writes a persistent message once to the store for every durable
//! queue it reached, enqueues it in each queue whatever its type, and hands back the
//! [`Confirm`] that completes when every queue has it safe (`crate::confirm`).
//!
//! With the firehose on in the vhost, the publish is also copied to its trace exchange
//! (`vhost/trace.rs`); off, that costs one load of a flag.
//!
//! Callers check what their protocol checks before (permissions, user-id, sizes) and
//! translate the outcome after (basic.ack or basic.return, accepted or released, the API's
//! `routed`); none of them routes or enqueues by itself.

use std::sync::Arc;

use warren_codec::FieldTable;
use warren_store::{QueueId, Store, StoreError};

use super::VHost;
use crate::confirm::{Confirm, ConfirmTo, RoutedConfirm};
use crate::connection_id::ConnectionId;
use crate::consumer::{pipeline_cost, ConnectionEvent, Delivery};
use crate::exchange::Exchange;
use crate::message::Message;
use crate::names::DIRECT_REPLY_TO_PREFIX;
use crate::queue::{Enqueued, Queue};
use crate::queued_message::QueuedMessage;
use crate::stats::MessageStats;
use crate::versioned_map::LastLookup;

/// One message to publish.
pub struct Publish<'a> {
    pub exchange: &'a Arc<Exchange>,
    pub message: &'a Arc<Message>,
    /// The message's routing key first, then those of its CC and BCC headers.
    pub routing_keys: &'a [&'a str],
    /// The headers a headers exchange matches: the message's, without BCC.
    pub headers: Option<&'a FieldTable>,
    pub confirm_to: ConfirmTo<'a>,
    /// Who publishes, for the firehose's copy (`vhost/trace.rs`).
    pub origin: TraceOrigin<'a>,
}

/// Who published or consumed a message, as a traced copy's headers name them. What the
/// publish and deliver paths already hold, so that building one costs them nothing: the
/// connection's name is looked up only when a copy is made (`vhost/trace.rs`).
#[derive(Debug, Clone, Copy)]
pub struct TraceOrigin<'a> {
    /// The connection, open on the vhost; 0 is none (the HTTP API, `http_api`).
    pub connection: ConnectionId,
    /// The 0-9-1 channel or AMQP 1.0 session channel; 0 where there is none.
    pub channel: u16,
    pub user: &'a str,
}

impl TraceOrigin<'_> {
    /// A message the broker itself moves (a dead-lettered copy): never traced, as RabbitMQ
    /// traces client publishes only.
    pub const BROKER: TraceOrigin<'static> = TraceOrigin {
        connection: 0,
        channel: 0,
        user: "",
    };

    /// The HTTP API's own publishes and gets, as `user`: RabbitMQ's API makes them through a
    /// channel of a connection inside the broker.
    pub fn http_api(user: &str) -> TraceOrigin<'_> {
        TraceOrigin {
            connection: 0,
            channel: 0,
            user,
        }
    }
}

/// What became of a publish.
#[derive(Debug)]
pub struct Routed {
    /// How many queues (or direct reply-to consumers) it reached: 0 is unroutable, which a
    /// mandatory 0-9-1 publish returns and AMQP 1.0 releases.
    pub queues: usize,
    /// Its confirm: settled at once unless a store write or a queue's answer is awaited.
    pub confirm: Confirm,
}

/// A publisher's reusable buffers, so that a publish allocates nothing of its own; a
/// channel or session keeps one.
#[derive(Default)]
pub struct PublishScratch {
    queues: Vec<Arc<Queue>>,
    store_ids: Vec<QueueId>,
    /// The default exchange's last queue lookup: a publisher that keeps publishing to one
    /// queue finds it without a map lookup while the vhost's queues do not change.
    last_queue: LastLookup<Queue>,
}

/// A reply to a direct reply-to requester: a publish to the default exchange with a key
/// the broker handed out in `reply_to`.
#[inline]
pub(super) fn is_direct_reply(publish: &Publish<'_>) -> bool {
    publish.exchange.name.is_empty()
        && publish
            .message
            .routing_key()
            .starts_with(DIRECT_REPLY_TO_PREFIX)
}

/// A filter on the routed queues ahead of the enqueue (dead-lettering's cycle rule; the
/// firehose's, which keeps all and notes their names).
pub(crate) type KeepQueue<'a> = &'a dyn Fn(&Queue) -> bool;

impl VHost {
    /// Publishes one message: routes it, stores it once for the durable queues it reached,
    /// enqueues it in each, and returns how many it reached with its confirm. Err only for a
    /// store that failed for good (the caller closes with its protocol's internal error); a
    /// store that cannot write for now (a full disk) leaves the durable queues out and the
    /// confirm refused. Counts the exchange's publish_in and publish_out.
    #[inline]
    pub fn publish(
        &self,
        publish: Publish<'_>,
        scratch: &mut PublishScratch,
    ) -> Result<Routed, StoreError> {
        MessageStats::add(&publish.exchange.stats.publish_in, 1);
        let routed = match self.tracing() {
            false => self.route_and_enqueue(&publish, scratch, None)?,
            true => self.publish_traced(&publish, scratch)?,
        };
        if routed.queues > 0 {
            MessageStats::add(&publish.exchange.stats.publish_out, 1);
        }
        Ok(routed)
    }

    /// The publish without the exchange's counters (RabbitMQ counts those per publishing
    /// channel, which a dead-lettered copy has none of) and with a filter on the queues
    /// routed to.
    pub(crate) fn route_and_enqueue(
        &self,
        publish: &Publish<'_>,
        scratch: &mut PublishScratch,
        keep: Option<KeepQueue<'_>>,
    ) -> Result<Routed, StoreError> {
        let (exchange, message) = (publish.exchange, publish.message);
        if is_direct_reply(publish) {
            return Ok(self.reply(message));
        }
        let PublishScratch {
            queues,
            store_ids,
            last_queue,
        } = scratch;
        debug_assert!(queues.is_empty());
        self.route_keys(
            exchange,
            publish.routing_keys,
            publish.headers,
            queues,
            Some(last_queue),
        );
        if let Some(keep) = keep {
            queues.retain(|q| keep(q));
        }
        let reached = queues.len();
        if reached == 0 {
            return Ok(Routed {
                queues: 0,
                confirm: Confirm::settled(false),
            });
        }
        let confirm = self.enqueue(message, queues, store_ids, publish.confirm_to);
        // Drained on success; a store failure leaves them to be dropped here.
        queues.clear();
        Ok(Routed {
            queues: reached,
            confirm: confirm?,
        })
    }

    /// A reply to a direct reply-to requester: straight to its consumer, bypassing queues
    /// and credit, as RabbitMQ's direct reply-to does. Unroutable when the requester is gone.
    fn reply(&self, message: &Arc<Message>) -> Routed {
        let mut reached = 0;
        if let Some(consumer) = self.reply_consumer(message.routing_key()) {
            consumer.take_credit(pipeline_cost(message));
            let delivery = Delivery {
                consumer: consumer.clone(),
                queue: None,
                message: QueuedMessage {
                    id: 0,
                    message: message.clone(),
                    redelivered: false,
                    delivery_count: 0,
                    expires_at: None,
                    via: 0,
                    store_ref: None,
                },
            };
            if consumer.send(ConnectionEvent::Deliver(delivery)).is_ok() {
                reached = 1;
            }
        }
        Routed {
            queues: reached,
            confirm: Confirm::settled(false),
        }
    }

    fn enqueue(
        &self,
        message: &Arc<Message>,
        queues: &mut Vec<Arc<Queue>>,
        store_ids: &mut Vec<QueueId>,
        confirm_to: ConfirmTo<'_>,
    ) -> Result<Confirm, StoreError> {
        enqueue(self.store.as_ref(), message, queues, store_ids, confirm_to)
    }
}

/// A message another node routed to `queue`, served here (a publish forwarded over a link,
/// `remote/serve.rs`): stored and enqueued as any publish's queues are, with the same
/// confirm. `store` is the broker's.
pub fn publish_to_queue(
    store: Option<&Store>,
    queue: &Arc<Queue>,
    message: &Arc<Message>,
    confirm_to: ConfirmTo<'_>,
    scratch: &mut PublishScratch,
) -> Result<Confirm, StoreError> {
    debug_assert!(scratch.queues.is_empty());
    scratch.queues.push(queue.clone());
    let confirm = enqueue(
        store,
        message,
        &mut scratch.queues,
        &mut scratch.store_ids,
        confirm_to,
    );
    scratch.queues.clear();
    confirm
}

/// Stores `message` once for the durable queues of `queues` (when it is persistent), then
/// enqueues it in every queue of `queues` (drained). A copy that brings a delivery count
/// along (a dead-lettered one) has it recorded for each durable queue.
fn enqueue(
    store: Option<&Store>,
    message: &Arc<Message>,
    queues: &mut Vec<Arc<Queue>>,
    store_ids: &mut Vec<QueueId>,
    confirm_to: ConfirmTo<'_>,
) -> Result<Confirm, StoreError> {
    let mut refused = false;
    let mut store_seq = 0;
    let mut stored = None;
    if let Some(store) = store.filter(|_| message.persistent) {
        store_ids.clear();
        store_ids.extend(
            queues
                .iter()
                .filter_map(|q| q.stored.as_ref().map(|s| s.id)),
        );
        if !store_ids.is_empty() {
            match store.append(store_ids, &message.to_stored()) {
                Ok(appended) => {
                    store_seq = appended.seq;
                    stored = Some(appended);
                    if message.inherited_delivery_count > 0 {
                        for id in store_ids.iter() {
                            // A queue deleted meanwhile has no count to keep.
                            let _ = store.set_delivery_count(
                                *id,
                                appended.id,
                                message.inherited_delivery_count,
                            );
                        }
                    }
                }
                // A write failed and the store retries (the store logs it, once): the
                // durable queues cannot take the message, the others do.
                Err(StoreError::Unavailable(_)) => {
                    refused = true;
                    queues.retain(|q| q.stored.is_none());
                }
                Err(e) => return Err(e),
            }
        }
    }
    let mut routed_confirm = RoutedConfirm::new(confirm_to);
    for queue in queues.iter() {
        if queue.publish_routed(message, stored, routed_confirm.as_mut()) == Enqueued::Rejected {
            refused = true;
        }
    }
    queues.clear();
    Ok(Confirm::new(
        store_seq,
        refused,
        routed_confirm.and_then(RoutedConfirm::finish),
    ))
}

//! The consume side of a session: deliveries from queues sent within link credit and the
//! session window, the client's dispositions (RabbitMQ 4's outcomes), and drain.

use super::{Env, Link, Session, Unsettled};
use crate::codec::*;
use crate::convert;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use warren_broker::consumer::pipeline_cost;
use warren_broker::queue::QueueHandle;
use warren_broker::queue::QueuedMessage;
use warren_broker::{Consumer, Delivery, MessageStats};

impl Session {
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
    pub(super) fn pump(&mut self, handle: u32, env: &mut Env) {
        if let Some(Link::Reply(_)) = self.links.get(&handle) {
            return self.pump_replies(handle, env);
        }
        let channel = self.channel;
        let Some(Link::Out(link)) = self.links.get_mut(&handle) else {
            return;
        };
        let max_payload = max_payload(env);
        while link.credit > 0 {
            let Some(d) = link.pending.front() else { break };
            let payload = convert::to_amqp10(
                &d.message.message,
                d.message.redelivered,
                d.message.delivery_count,
            );
            let frames = frames_for(payload.len(), max_payload);
            if self.remote_incoming_window < frames {
                break;
            }
            let Some(d) = link.pending.pop_front() else {
                break;
            };
            let delivery_id = self.next_delivery_id;
            self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
            link.next_tag += 1;
            let first = first_transfer(handle, delivery_id, link.next_tag, link.settle_on_send);
            write_transfer(env, channel, first, &payload, max_payload);
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
            if env.vhost.tracing() {
                env.vhost
                    .trace_deliver(queue.name(), &d.message, env.trace_origin(channel));
            }
            MessageStats::add(&queue.stats().deliver, 1);
            if d.message.redelivered {
                MessageStats::add(&queue.stats().redeliver, 1);
            }
            if link.settle_on_send {
                consumer.settled_own(1);
                queue.settle(vec![d.message], Vec::new(), Vec::new());
            } else {
                self.unsettled.insert(
                    delivery_id,
                    Box::new(Unsettled {
                        handle,
                        consumer,
                        queue,
                        message: d.message,
                    }),
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
        // A failed delivery counts in the header's delivery-count of the queue's copy (its
        // next deliveries, or the dead-lettered copy): modified with delivery-failed, and
        // rejected (RabbitMQ 4's classic queue discards with DelFailed = true); released
        // (and a 0-9-1 requeue) does not.
        let failed = match &d.state {
            Some(DeliveryState::Modified(m)) => m.delivery_failed == Some(true),
            Some(DeliveryState::Rejected(_)) => true,
            _ => false,
        };
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
            if let Some(mut u) = self.unsettled.remove(&id) {
                if failed {
                    u.message.delivery_count = u.message.delivery_count.saturating_add(1);
                }
                settled.push((*u, settle));
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
}

/// What the client's outcome does with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settle {
    Ack,
    Requeue,
    DeadLetter,
    /// Still unsettled when its link or session went: requeued as a failed delivery, as
    /// RabbitMQ 4's classic queue does when a consumer goes (`requeue_and_run/3`).
    Gone,
}

/// Settles deliveries with their queues: one settle per queue.
pub(super) fn settle_all(items: impl Iterator<Item = (Unsettled, Settle)>) {
    type PerQueue = (
        QueueHandle,
        Vec<QueuedMessage>,
        Vec<QueuedMessage>,
        Vec<QueuedMessage>,
    );
    let mut per_queue: Vec<PerQueue> = Vec::new();
    let mut consumers: Vec<Arc<Consumer>> = Vec::new();
    for (mut u, settle) in items {
        if settle == Settle::Gone {
            u.message.delivery_count = u.message.delivery_count.saturating_add(1);
        }
        u.consumer.settled_own(1);
        if !consumers.iter().any(|c| Arc::ptr_eq(c, &u.consumer)) {
            consumers.push(u.consumer.clone());
        }
        let entry = match per_queue.iter_mut().position(|e| e.0.same_queue(&u.queue)) {
            Some(i) => &mut per_queue[i],
            None => {
                per_queue.push((u.queue.clone(), Vec::new(), Vec::new(), Vec::new()));
                let last = per_queue.len() - 1;
                &mut per_queue[last]
            }
        };
        match settle {
            Settle::Ack => entry.1.push(u.message),
            Settle::Requeue | Settle::Gone => entry.2.push(u.message),
            Settle::DeadLetter => entry.3.push(u.message),
        }
    }
    for (queue, acked, requeued, rejected) in per_queue {
        MessageStats::add(&queue.stats().ack, acked.len() as u64);
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

/// The most payload one transfer frame carries for this client.
pub(super) fn max_payload(env: &Env) -> usize {
    (env.peer_max_frame as usize)
        .saturating_sub(TRANSFER_OVERHEAD_BYTES)
        .max(256)
}

/// The transfer frames a payload of `len` bytes takes.
pub(super) fn frames_for(len: usize, max_payload: usize) -> u32 {
    len.div_ceil(max_payload).max(1) as u32
}

/// A delivery's first transfer: its id, its tag (`tag`'s bytes) and whether it is settled.
pub(super) fn first_transfer(handle: u32, delivery_id: u32, tag: u64, settled: bool) -> Transfer {
    Transfer {
        handle: handle.into(),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(serde_bytes::ByteBuf::from(tag.to_be_bytes().to_vec())),
        message_format: Some(0),
        settled: Some(settled),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

/// Writes one delivery: `first` (its delivery-id, tag, format and settled) with the first
/// part of `payload`, then continuation transfers with the rest, `more` on all but the last.
pub(super) fn write_transfer(
    env: &mut Env,
    channel: u16,
    first: Transfer,
    payload: &[u8],
    max_payload: usize,
) {
    let handle = first.handle.clone();
    let mut chunks = payload.chunks(max_payload).peekable();
    let mut transfer = first;
    loop {
        let chunk = chunks.next().unwrap_or(&[]);
        transfer.more = chunks.peek().is_some();
        let more = transfer.more;
        write_performative(env.out, channel, &Performative::Transfer(transfer), chunk);
        if !more {
            break;
        }
        transfer = Transfer {
            handle: handle.clone(),
            delivery_id: None,
            delivery_tag: None,
            message_format: None,
            settled: None,
            more: true,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
    }
}

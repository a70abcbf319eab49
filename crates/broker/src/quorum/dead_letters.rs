//! A quorum queue's dead letters: the copies of messages that died in the group, routed
//! at most once (handed to the queue record's dead-lettering) or at least once (held by
//! the group until every copy is safe, retried every `DEAD_LETTER_RETRY`).

use super::codec;
use super::queue::{QuorumQueue, Requeued};
use crate::confirm::QueueAnswers;
use crate::consumer::{pipeline_cost, ConnectionEvent, Delivery};
use crate::dead_letter::DeathReason;
use crate::event_channel::event_channel;
use crate::message::Message;
use crate::queue::QueueHandle;
use crate::queue::{Queue, QueuedMessage};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::oneshot;
use warren_quorum::machine::{Command, ConsumerKey, DeadLetterReason, MsgId};

/// How long at-least-once dead-lettering waits before sending again the copies that reached
/// no queue or that a target refused.
const DEAD_LETTER_RETRY: Duration = Duration::from_secs(3);

/// The group's reason as the dead-lettering code names it, and whether it is a rejection.
pub(super) fn dead_reason(reason: DeadLetterReason) -> (bool, DeathReason) {
    match reason {
        DeadLetterReason::Rejected => (true, DeathReason::Rejected),
        DeadLetterReason::Expired => (false, DeathReason::Expired),
        DeadLetterReason::MaxLength => (false, DeathReason::MaxLen),
        DeadLetterReason::DeliveryLimit => (false, DeathReason::DeliveryLimit),
    }
}

/// A dead message of the group as the dead-lettering code takes it: decoded, with the failed
/// deliveries it brings along (`None`: a body that does not decode, which no publish makes).
pub(super) fn dead_copy(
    reason: DeadLetterReason,
    message: warren_quorum::machine::Message,
) -> Option<(QueuedMessage, DeathReason)> {
    let decoded = codec::decode(message.body, 0, false)?;
    // The copy brings the failed deliveries along, as a classic queue's does; the rejection
    // that kills it is one (the group does not count a discard as a return).
    let (rejected, reason) = dead_reason(reason);
    let delivery_count = failed_deliveries(
        &decoded,
        message.delivery_count.saturating_add(u32::from(rejected)),
    );
    Some((
        QueuedMessage {
            id: message.id,
            message: Arc::new(decoded),
            redelivered: message.delivered_before,
            delivery_count,
            expires_at: None,
            via: 0,
            store_ref: None,
        },
        reason,
    ))
}

/// At-least-once dead-lettering (what RabbitMQ's `rabbit_fifo_dlx_worker` does): the leader
/// routes the copies of dead messages `ids` that the group holds with a confirm, waits until
/// every target has its copy (quorum and remote targets committed it, durable classic ones'
/// store write is durable), then lets the group drop them (`SettleDeadLetters`). Copies that
/// reached no queue, or that a target refused, are sent again every `DEAD_LETTER_RETRY`
/// while this member leads and the group still holds them; a new leader sends whatever is
/// still held (`take_over`), so a target may get a copy twice, never none.
pub(super) async fn forward_dead_letters(weak: Weak<Queue>, mut ids: Vec<MsgId>) {
    /// The messages a task claimed, given back when it ends however it ends.
    struct Claim(Arc<Mutex<HashSet<MsgId>>>, Vec<MsgId>);
    impl Drop for Claim {
        fn drop(&mut self) {
            let mut forwarding = self.0.lock();
            for id in &self.1 {
                forwarding.remove(id);
            }
        }
    }
    let _claim = {
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        let forwarding = qq.dead_letters_forwarding.clone();
        {
            let mut claimed = forwarding.lock();
            ids.retain(|id| claimed.insert(*id));
        }
        Claim(forwarding, ids.clone())
    };
    ids.sort_unstable();
    loop {
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        let Some(group) = qq.group.get().cloned() else {
            return;
        };
        if !qq.is_leading() {
            return;
        }
        let (held, dead): (Vec<MsgId>, Vec<_>) = group.with_queue(|q| {
            q.dead_letters_held()
                .filter(|(_, m)| ids.binary_search(&m.id).is_ok())
                .filter_map(|(reason, m)| Some((m.id, dead_copy(reason, m.clone())?)))
                .unzip()
        });
        if held.is_empty() {
            return;
        }
        ids = held;
        let (wake, mut woken) = event_channel();
        let confirm = QueueAnswers::new(wake);
        let routed = queue.dead_letter_confirmed(dead, Some(&confirm));
        confirm.routed();
        drop(group);
        drop(queue);
        let accepted = loop {
            if let Some(accepted) = confirm.outcome() {
                break accepted;
            }
            if woken.recv().await.is_none() {
                break false;
            }
        };
        let durable = match routed.stored {
            Some((store, seq)) => store.wait_durable(seq).await.is_ok(),
            None => true,
        };
        let Some(queue) = weak.upgrade() else { return };
        let Some(qq) = QuorumQueue::of(&queue) else {
            return;
        };
        if accepted && durable && routed.all_routed {
            // The claim lasts until the group applied the settle: a take-over in between
            // must not see them still held and send them again.
            let (answered, settled) = oneshot::channel();
            qq.propose_answered(
                Command::SettleDeadLetters {
                    msg_ids: ids.clone(),
                },
                None,
                Some(answered),
            );
            if let Some(home) = queue.home() {
                home.dead_lettered().add_confirmed(ids.len() as u64);
            }
            drop(queue);
            let _ = settled.await;
            return;
        }
        tokio::time::sleep(DEAD_LETTER_RETRY).await;
    }
}

impl QuorumQueue {
    /// Hands a message the group checked out to consumer `key` over to it; false when no
    /// consumer (nor basic.get) of that key is attached here, so nobody received it.
    pub(super) fn deliver(
        &self,
        queue: &Arc<Queue>,
        key: ConsumerKey,
        message: warren_quorum::machine::Message,
        auto_settle: &mut HashMap<ConsumerKey, Vec<MsgId>>,
    ) -> bool {
        let consumer = {
            let mut consumers = self.consumers.lock();
            if let Some(get) = consumers.gets.remove(&key) {
                drop(consumers);
                let id = message.id;
                if let Some(decoded) = codec::decode(message.body, message.delivery_count, true) {
                    let taken = get.send(QueuedMessage {
                        id,
                        delivery_count: failed_deliveries(&decoded, message.delivery_count),
                        message: Arc::new(decoded),
                        redelivered: message.delivered_before,
                        expires_at: None,
                        via: 0,
                        store_ref: None,
                    });
                    if taken.is_err() {
                        // The basic.get gave up (its client went, or it waited too long):
                        // the message goes back and its one-message consumer leaves.
                        self.propose(
                            Command::ReleaseDisconnected {
                                consumer: key,
                                msg_ids: vec![id],
                            },
                            None,
                        );
                        self.propose(Command::Cancel { consumer: key }, None);
                    }
                }
                return true;
            }
            let Some(consumer) = consumers.by_key.get(&key).cloned() else {
                // Handed over in the group just before the consumer's removal reached it (or
                // to a consumer of another node or an earlier run): the client never sees it.
                return false;
            };
            if !consumer.no_ack {
                consumers.held.insert(message.id, key);
            }
            consumer
        };
        if consumer.no_ack {
            auto_settle.entry(key).or_default().push(message.id);
        }
        let Some(decoded) = codec::decode(message.body, message.delivery_count, false) else {
            tracing::warn!(queue = %queue.name, "unreadable message in a quorum queue's log");
            return true;
        };
        let delivery_count = failed_deliveries(&decoded, message.delivery_count);
        let decoded = Arc::new(decoded);
        let cost = pipeline_cost(&decoded);
        consumer.take_credit(cost);
        let delivery = Delivery {
            consumer: consumer.clone(),
            queue: Some(QueueHandle::new(queue.clone())),
            message: QueuedMessage {
                id: message.id,
                message: decoded,
                redelivered: message.delivered_before,
                delivery_count,
                expires_at: None,
                via: 0,
                store_ref: None,
            },
        };
        if let Err(ConnectionEvent::Deliver(returned)) =
            consumer.send(ConnectionEvent::Deliver(delivery))
        {
            // The connection went between the consumer's lookup above and this hand-over: its
            // teardown released what its channels held and removed the consumer (suspended,
            // as it held this one) before this message could reach it, so nobody will ever
            // settle it. It goes back now, and the consumer leaves the group once it holds
            // nothing; left held, it would stay checked out to a consumer nobody reads.
            consumer.return_credit(cost);
            if !consumer.no_ack {
                self.settle(&[], &[returned.message], &[], Requeued::NeverReached);
            }
            // A consumer whose connection is gone takes nothing more (its teardown, if still
            // to come, then finds it removed).
            self.remove_consumer(consumer.connection, consumer.channel, &consumer.tag);
        }
        true
    }
}

/// The AMQP 1.0 header's delivery-count for a message of the group: the returns the group
/// counted (the count 0-9-1 consumers see as `x-delivery-count` and the delivery limit
/// checks, as RabbitMQ 4's quorum queue maps its `delivery_count` into the header), on top
/// of what a dead-lettered copy brought along from the queue it died in.
fn failed_deliveries(message: &Message, returned: u32) -> u32 {
    message.inherited_delivery_count.saturating_add(returned)
}

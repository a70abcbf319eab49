//! Consumers and the events a queue hands to the connection that owns a consumer.
//!
//! A queue delivers by pushing an event into the owning connection's unbounded channel: no
//! intermediate task, one hop from the publisher's task straight to the consumer's. What
//! bounds that channel is credit, checked by the queue before each push:
//! - `in_flight` < `PIPELINE_LIMIT`: deliveries handed over but not yet encoded by the
//!   connection (RabbitMQ's credit flow), each weighing one unit per started 4 KiB of body
//!   (`pipeline_cost`), so a consumer that stops reading holds at most ~8 MiB of large
//!   messages in its pipeline, or 2000 small ones, never the whole queue;
//! - the consumer's prefetch, for acking consumers;
//! - its channel's global prefetch (basic.qos global=true): acking consumers' deliveries
//!   count against it, and while it is full no consumer on the channel receives, no-ack ones
//!   included — RabbitMQ's limiter refuses every `can_send` of a channel at its limit.
//!
//! A queue that finds no credit sets a `starved_*` flag (and parks the consumer,
//! `ConsumerSet`); whoever frees credit (the connection after encoding, the channel after
//! acks) clears it, notes the consumer as woken and kicks the queue. The flag is set before the
//! queue re-checks credit, and credit is freed before the flag is read, so with SeqCst one of
//! the two always sees the other and no wake-up is lost.

use crate::confirm::{AnswersFor, ConfirmWake, QueueAnswers};
use crate::event_channel::EventSender;
use crate::queue::Queue;
use crate::queue::QueueHandle;
use crate::queued_message::QueuedMessage;
use crate::woken_consumers::{ConsumerKey, WokenConsumers};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, OnceLock, Weak};
use warren_codec::{ReplyCode, ShortStr};

pub use crate::connection_id::ConnectionId;

/// Pipeline units a consumer may have handed to its connection and not yet encoded.
pub const PIPELINE_LIMIT: u32 = 2000;
/// Body bytes per pipeline unit beyond the first.
const PIPELINE_UNIT_BYTES: usize = 4096;

/// What one delivery of `message` weighs in a consumer's pipeline: 1 for a body up to 4 KiB,
/// one more per 4 KiB after that. The pipeline then bounds bytes as well as messages.
pub fn pipeline_cost(message: &crate::message::Message) -> u32 {
    let extra = message.body().len() / PIPELINE_UNIT_BYTES;
    1 + u32::try_from(extra)
        .unwrap_or(u32::MAX - 1)
        .min(PIPELINE_LIMIT)
}

/// State a channel shares with every queue that delivers to it.
#[derive(Debug)]
pub struct ChannelFlow {
    /// basic.qos with global=true: a limit for all consumers on the channel (0 = none).
    pub prefetch_count: AtomicU32,
    /// Deliveries to the channel's acking consumers not yet settled.
    pub unacked: AtomicU32,
    /// Where the next `wake_in_turn` starts (only the channel's own task touches it).
    wake_from: AtomicUsize,
}

impl Default for ChannelFlow {
    fn default() -> Self {
        ChannelFlow {
            prefetch_count: AtomicU32::new(0),
            unacked: AtomicU32::new(0),
            wake_from: AtomicUsize::new(0),
        }
    }
}

impl ChannelFlow {
    /// The global limit is set and reached: no consumer on the channel may receive.
    pub fn full(&self) -> bool {
        let limit = self.prefetch_count.load(SeqCst);
        limit != 0 && self.unacked.load(SeqCst) >= limit
    }

    /// basic.qos global=true set a limit. Room freed by an ack is then the whole channel's:
    /// the server gives it back only after the queues were told (`Channel::release`), so the
    /// acked queue cannot grab it before the others are woken in turn.
    pub fn has_global_limit(&self) -> bool {
        self.prefetch_count.load(SeqCst) != 0
    }

    /// `n` deliveries to acking consumers of this channel were settled.
    pub fn settled(&self, n: u32) {
        self.unacked.fetch_sub(n, SeqCst);
    }

    /// After credit came back: wakes the starved consumers of this channel (given in a fixed
    /// order), starting after the one that took the channel's last room the previous time, and
    /// stopping as soon as the channel is full again. The consumers not reached stay marked
    /// starved, so the next wake reaches them first: room shared by several queues goes to
    /// each in turn, none starves another (RabbitMQ wakes them in random order for the same
    /// reason).
    pub fn wake_in_turn<'a, I>(&self, consumers: I)
    where
        I: IntoIterator<Item = &'a Arc<Consumer>>,
        I::IntoIter: ExactSizeIterator + Clone,
    {
        let consumers = consumers.into_iter();
        let n = consumers.len();
        if n == 0 || self.full() {
            // Nobody could take anything; whoever frees room calls this again.
            return;
        }
        let from = self.wake_from.load(Relaxed) % n;
        for (i, c) in consumers.cycle().skip(from).take(n).enumerate() {
            c.wake_if_starved();
            if self.full() {
                self.wake_from.store((from + i + 1) % n, Relaxed);
                return;
            }
        }
        self.wake_from.store((from + 1) % n, Relaxed);
    }
}

/// A connection's event sender is how the queues that confirm on their own wake it.
impl ConfirmWake for EventSender<ConnectionEvent> {
    fn confirms_settled(&self) {
        // The connection may be gone; its confirms are then moot.
        let _ = self.send(ConnectionEvent::ConfirmsSettled);
    }
}

impl AnswersFor for EventSender<ConnectionEvent> {
    fn answers(&self) -> Arc<QueueAnswers> {
        QueueAnswers::new(self.clone())
    }
}

/// What a connection task receives from queues.
#[derive(Debug)]
pub enum ConnectionEvent {
    Deliver(Delivery),
    /// The queue went away: tell the client with basic.cancel (consumer_cancel_notify).
    ConsumerCancelled {
        channel: u16,
        consumer_tag: ShortStr,
    },
    /// The broker closes the connection (its vhost or user was deleted, an operator asked):
    /// connection.close with this code and text.
    Close {
        code: ReplyCode,
        text: String,
    },
    /// The queues that confirm on their own (quorum, remote) answered the last of some
    /// publish's confirms: the channels send the confirms that are now ready.
    ConfirmsSettled,
    /// The answer of a queue that answers basic.get later (`Queue::answers_get_later`) to
    /// basic.get on `channel`: the message (held by the channel
    /// unless `no_ack`) and how many remain, or none.
    GetAnswered {
        channel: u16,
        queue: Arc<Queue>,
        no_ack: bool,
        got: Option<(QueuedMessage, u32)>,
    },
}

#[derive(Debug)]
pub struct Delivery {
    pub consumer: Arc<Consumer>,
    /// The queue the message came from; none for direct reply-to deliveries.
    pub queue: Option<QueueHandle>,
    pub message: QueuedMessage,
}

#[derive(Debug)]
pub struct Consumer {
    pub tag: ShortStr,
    pub channel: u16,
    pub connection: ConnectionId,
    pub no_ack: bool,
    pub exclusive: bool,
    /// Per-consumer prefetch (basic.qos global=false at consume time; 0 = none).
    pub prefetch_count: u32,
    /// `x-priority` of basic.consume (default 0): see `ConsumerSet`.
    pub priority: i64,
    pub unacked: AtomicU32,
    pub in_flight: AtomicU32,
    /// Skipped because the pipeline was full; cleared by `delivered`.
    pub starved_pipeline: AtomicBool,
    /// Skipped for prefetch; cleared by `wake_if_starved` after acks or qos/flow changes.
    pub starved_credit: AtomicBool,
    pub channel_flow: Arc<ChannelFlow>,
    /// The queue consumed from; weak so a consumer never keeps a deleted queue alive.
    pub queue: Weak<Queue>,
    /// Still registered with its channel (set until the channel forgets it: basic.cancel,
    /// the queue cancelling it, the channel closing). The channel checks it for each
    /// delivery instead of looking the consumer tag up; only the channel's task writes it.
    attached: AtomicBool,
    /// Where this consumer tells its queue's `ConsumerSet` that its credit came back, and
    /// its key there; set when it joins the set.
    woken: OnceLock<(Arc<WokenConsumers>, ConsumerKey)>,
    sink: EventSender<ConnectionEvent>,
}

impl Consumer {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        tag: ShortStr,
        channel: u16,
        connection: ConnectionId,
        no_ack: bool,
        exclusive: bool,
        prefetch_count: u32,
        channel_flow: Arc<ChannelFlow>,
        queue: Weak<Queue>,
        sink: EventSender<ConnectionEvent>,
    ) -> Consumer {
        Consumer {
            tag,
            channel,
            connection,
            no_ack,
            exclusive,
            prefetch_count,
            priority: 0,
            unacked: AtomicU32::new(0),
            in_flight: AtomicU32::new(0),
            starved_pipeline: AtomicBool::new(false),
            starved_credit: AtomicBool::new(false),
            channel_flow,
            queue,
            attached: AtomicBool::new(true),
            woken: OnceLock::new(),
            sink,
        }
    }

    /// Channel side: the channel forgot this consumer; deliveries still on their way to it
    /// go back to the queue.
    pub fn detach(&self) {
        self.attached.store(false, Relaxed);
    }

    /// Channel side: the channel still has this consumer (see `attached`).
    pub fn is_attached(&self) -> bool {
        self.attached.load(Relaxed)
    }

    pub fn with_priority(mut self, priority: i64) -> Consumer {
        self.priority = priority;
        self
    }

    fn pipeline_open(&self) -> bool {
        self.in_flight.load(SeqCst) < PIPELINE_LIMIT
    }

    fn credit_available(&self) -> bool {
        let own = self.no_ack
            || self.prefetch_count == 0
            || self.unacked.load(SeqCst) < self.prefetch_count;
        own && !self.channel_flow.full()
    }

    /// Queue side: may this consumer take one more message? If not, marks it starved (see the
    /// module comment for why the mark comes before the second look).
    pub fn has_credit(&self) -> bool {
        if !self.pipeline_open() {
            self.starved_pipeline.store(true, SeqCst);
            if !self.pipeline_open() {
                return false;
            }
        }
        if self.credit_available() {
            return true;
        }
        self.starved_credit.store(true, SeqCst);
        self.credit_available()
    }

    /// Queue side: charges the credit for one delivery weighing `cost` (`pipeline_cost`).
    pub fn take_credit(&self, cost: u32) {
        self.in_flight.fetch_add(cost, SeqCst);
        if !self.no_ack {
            self.unacked.fetch_add(1, SeqCst);
            self.channel_flow.unacked.fetch_add(1, SeqCst);
        }
    }

    /// Undoes `take_credit` for a delivery that could not be handed over.
    pub fn return_credit(&self, cost: u32) {
        self.in_flight.fetch_sub(cost, SeqCst);
        if !self.no_ack {
            self.unacked.fetch_sub(1, SeqCst);
            self.channel_flow.unacked.fetch_sub(1, SeqCst);
        }
    }

    /// Connection side: deliveries weighing `cost` left the pipeline (encoded for the
    /// socket). The queue is woken once the pipeline is half empty, not on every message, so
    /// a fast consumer does not cost a queue lock per delivery. Inline: every protocol's
    /// connection calls it per delivery, from another crate.
    #[inline]
    pub fn delivered(&self, cost: u32) {
        let left = self.in_flight.fetch_sub(cost, SeqCst) - cost;
        if left <= PIPELINE_LIMIT / 2 && self.starved_pipeline.swap(false, SeqCst) {
            self.kick_queue();
        }
    }

    /// Channel side: `n` deliveries of this consumer were acked, rejected or requeued.
    pub fn settled(&self, n: u32) {
        self.settled_own(n);
        self.channel_flow.settled(n);
    }

    /// Like `settled` for this consumer's own prefetch only; the caller gives the channel's
    /// room back itself (`ChannelFlow::settled`).
    pub fn settled_own(&self, n: u32) {
        self.unacked.fetch_sub(n, SeqCst);
        // The caller tells the queue next (`Queue::settle`, which dispatches): a consumer the
        // queue parked for its prefetch is back among those it serves by then, so the acked
        // room goes to it before any lower-priority consumer. Credit freed before the flag is
        // read, as `wake_if_starved`.
        if self.starved_credit.load(SeqCst) && self.starved_credit.swap(false, SeqCst) {
            self.note_woken();
        }
    }

    /// After acks or qos changes: wakes the queue if it had skipped this consumer.
    pub fn wake_if_starved(&self) {
        if self.starved_credit.swap(false, SeqCst) {
            self.kick_queue();
        }
    }

    /// Queue side: the consumer joined a `ConsumerSet` as `key`; its wake-ups are noted in
    /// `woken`. A consumer joins one set once.
    pub(crate) fn joined(&self, woken: Arc<WokenConsumers>, key: ConsumerKey) {
        let _ = self.woken.set((woken, key));
    }

    /// A starved flag was cleared: the set learns which consumer to serve again before the
    /// queue dispatches (see `woken_consumers.rs` for why in this order).
    fn note_woken(&self) {
        if let Some((woken, key)) = self.woken.get() {
            woken.note(*key);
        }
    }

    fn kick_queue(&self) {
        self.note_woken();
        if let Some(queue) = self.queue.upgrade() {
            queue.kick();
        }
    }

    /// Hands an event to the owning connection; gives it back if the connection is gone.
    pub fn send(&self, event: ConnectionEvent) -> Result<(), ConnectionEvent> {
        self.sink.send(event).map_err(|e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_channel::{event_channel, EventReceiver};
    use crate::message::Message;
    use bytes::Bytes;
    use warren_codec::BasicProperties;

    fn queue(name: &str) -> Arc<Queue> {
        crate::classic::standalone(name)
    }

    fn message() -> Arc<Message> {
        Arc::new(Message::new(
            ShortStr::from(""),
            ShortStr::from("k"),
            &BasicProperties::default(),
            Bytes::new(),
            Bytes::from_static(b"m"),
        ))
    }

    fn consumer(
        queue: &Arc<Queue>,
        flow: &Arc<ChannelFlow>,
        no_ack: bool,
    ) -> (Arc<Consumer>, EventReceiver<ConnectionEvent>) {
        let (tx, rx) = event_channel();
        let c = Arc::new(Consumer::new(
            ShortStr::from(queue.name.as_str()),
            1,
            1,
            no_ack,
            false,
            0,
            flow.clone(),
            Arc::downgrade(queue),
            tx,
        ));
        queue.add_consumer(c.clone()).unwrap();
        (c, rx)
    }

    fn take(rx: &mut EventReceiver<ConnectionEvent>) -> Option<Delivery> {
        match rx.try_recv().ok()? {
            ConnectionEvent::Deliver(d) => Some(d),
            _ => None,
        }
    }

    /// A channel with global prefetch 1 consuming from two busy queues, acking each delivery
    /// the way `Channel::release` does (own credit, queue told, then the channel's room, then
    /// the consumers woken in turn): the room alternates between the queues. (Settling
    /// before giving the room back matters: the acked queue would take it at once.)
    #[test]
    fn channel_room_goes_to_each_queue_in_turn() {
        let flow = Arc::new(ChannelFlow::default());
        flow.prefetch_count.store(1, SeqCst);
        let (qa, qb) = (queue("a"), queue("b"));
        for _ in 0..20 {
            qa.publish(message(), None);
            qb.publish(message(), None);
        }
        let (ca, mut ra) = consumer(&qa, &flow, false);
        let (cb, mut rb) = consumer(&qb, &flow, false);
        let mut order = String::new();
        for _ in 0..20 {
            let (name, d) = match (take(&mut ra), take(&mut rb)) {
                (Some(d), None) => ('a', d),
                (None, Some(d)) => ('b', d),
                other => panic!("expected exactly one delivery, got {other:?}"),
            };
            order.push(name);
            let (consumer, queue) = (d.consumer, d.queue.unwrap());
            consumer.delivered(1);
            consumer.settled_own(1);
            queue.settle(vec![d.message], Vec::new(), Vec::new());
            flow.settled(1);
            flow.wake_in_turn([&ca, &cb]);
        }
        // The first wake starts at the first consumer; from then on the room alternates.
        assert_eq!(order, format!("a{}", "ab".repeat(9)) + "a");
    }

    /// RabbitMQ's limiter: a no-ack delivery takes no room, but a full channel holds back
    /// its no-ack consumers too until room comes back.
    #[test]
    fn no_ack_consumers_wait_while_the_channel_is_full() {
        let flow = Arc::new(ChannelFlow::default());
        flow.prefetch_count.store(1, SeqCst);
        let (qa, qb) = (queue("a"), queue("b"));
        let (no_ack, mut rn) = consumer(&qb, &flow, true);
        for _ in 0..3 {
            qb.publish(message(), None);
        }
        let mut got = 0;
        while let Some(d) = take(&mut rn) {
            d.consumer.delivered(1);
            got += 1;
        }
        assert_eq!(got, 3, "no-ack deliveries take no room");
        let (acking, mut ra) = consumer(&qa, &flow, false);
        qa.publish(message(), None);
        let d = take(&mut ra).expect("room for one");
        qb.publish(message(), None);
        assert!(take(&mut rn).is_none(), "the channel is full");
        acking.settled(1);
        d.queue
            .unwrap()
            .settle(vec![d.message], Vec::new(), Vec::new());
        flow.wake_in_turn([&acking, &no_ack]);
        assert!(take(&mut rn).is_some(), "woken once room came back");
    }
}

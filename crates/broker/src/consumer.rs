//! Consumers and the events a queue hands to the connection that owns a consumer.
//!
//! A queue delivers by pushing an event into the owning connection's unbounded channel: no
//! intermediate task, one hop from the publisher's task straight to the consumer's. What
//! bounds that channel is credit, checked by the queue before each push:
//! - `in_flight` < `PIPELINE_LIMIT`: deliveries handed over but not yet encoded by the
//!   connection (for no-ack consumers this is the only bound, as RabbitMQ's credit flow is);
//! - the consumer's prefetch and its channel's global prefetch, for acking consumers.
//!
//! A queue that finds no credit sets a `starved_*` flag; whoever frees credit (the connection
//! after encoding, the channel after acks) clears it and kicks the queue. The flag is set before the
//! queue re-checks credit, and credit is freed before the flag is read, so with SeqCst one of
//! the two always sees the other and no wake-up is lost.

use crate::queue::{Queue, QueuedMessage};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Weak};
use tokio::sync::mpsc::UnboundedSender;
use warren_codec::ShortStr;

pub type ConnectionId = u64;

/// Deliveries a consumer may have handed to its connection and not yet encoded.
pub const PIPELINE_LIMIT: u32 = 2000;

/// State a channel shares with every queue that delivers to it.
#[derive(Debug)]
pub struct ChannelFlow {
    /// basic.qos with global=true: a limit for all consumers on the channel (0 = none).
    pub prefetch_count: AtomicU32,
    pub unacked: AtomicU32,
}

impl Default for ChannelFlow {
    fn default() -> Self {
        ChannelFlow {
            prefetch_count: AtomicU32::new(0),
            unacked: AtomicU32::new(0),
        }
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
}

#[derive(Debug)]
pub struct Delivery {
    pub consumer: Arc<Consumer>,
    /// The queue the message came from; none for direct reply-to deliveries.
    pub queue: Option<Arc<Queue>>,
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
    pub unacked: AtomicU32,
    pub in_flight: AtomicU32,
    /// Skipped because the pipeline was full; cleared by `delivered`.
    pub starved_pipeline: AtomicBool,
    /// Skipped for prefetch; cleared by `wake_if_starved` after acks or qos/flow changes.
    pub starved_credit: AtomicBool,
    pub channel_flow: Arc<ChannelFlow>,
    /// The queue consumed from; weak so a consumer never keeps a deleted queue alive.
    pub queue: Weak<Queue>,
    sink: UnboundedSender<ConnectionEvent>,
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
        sink: UnboundedSender<ConnectionEvent>,
    ) -> Consumer {
        Consumer {
            tag,
            channel,
            connection,
            no_ack,
            exclusive,
            prefetch_count,
            unacked: AtomicU32::new(0),
            in_flight: AtomicU32::new(0),
            starved_pipeline: AtomicBool::new(false),
            starved_credit: AtomicBool::new(false),
            channel_flow,
            queue,
            sink,
        }
    }

    fn pipeline_open(&self) -> bool {
        self.in_flight.load(SeqCst) < PIPELINE_LIMIT
    }

    fn credit_available(&self) -> bool {
        if self.no_ack {
            return true;
        }
        let own = self.prefetch_count == 0 || self.unacked.load(SeqCst) < self.prefetch_count;
        let global = self.channel_flow.prefetch_count.load(SeqCst);
        own && (global == 0 || self.channel_flow.unacked.load(SeqCst) < global)
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

    /// Queue side: charges the credit for one delivery.
    pub fn take_credit(&self) {
        self.in_flight.fetch_add(1, SeqCst);
        if !self.no_ack {
            self.unacked.fetch_add(1, SeqCst);
            self.channel_flow.unacked.fetch_add(1, SeqCst);
        }
    }

    /// Undoes `take_credit` for a delivery that could not be handed over.
    pub fn return_credit(&self) {
        self.in_flight.fetch_sub(1, SeqCst);
        if !self.no_ack {
            self.unacked.fetch_sub(1, SeqCst);
            self.channel_flow.unacked.fetch_sub(1, SeqCst);
        }
    }

    /// Connection side: `n` deliveries left the pipeline (encoded for the socket). The queue
    /// is woken once the pipeline is half empty, not on every message, so a fast consumer
    /// does not cost a queue lock per delivery.
    pub fn delivered(&self, n: u32) {
        let left = self.in_flight.fetch_sub(n, SeqCst) - n;
        if left <= PIPELINE_LIMIT / 2 && self.starved_pipeline.swap(false, SeqCst) {
            self.kick_queue();
        }
    }

    /// Channel side: `n` deliveries of this consumer were acked, rejected or requeued.
    pub fn settled(&self, n: u32) {
        self.unacked.fetch_sub(n, SeqCst);
        self.channel_flow.unacked.fetch_sub(n, SeqCst);
    }

    /// After acks or qos changes: wakes the queue if it had skipped this consumer.
    pub fn wake_if_starved(&self) {
        if self.starved_credit.swap(false, SeqCst) {
            self.kick_queue();
        }
    }

    fn kick_queue(&self) {
        if let Some(queue) = self.queue.upgrade() {
            queue.kick();
        }
    }

    /// Hands an event to the owning connection; gives it back if the connection is gone.
    pub fn send(&self, event: ConnectionEvent) -> Result<(), ConnectionEvent> {
        self.sink.send(event).map_err(|e| e.0)
    }
}

//! The quorum queue state machine: pure, deterministic queue logic modelled on RabbitMQ's
//! `rabbit_fifo`.
//!
//! Every replica applies the same committed [`Command`]s in the same order and must reach the same
//! state, so nothing here reads a clock, a random number or anything outside its arguments: the
//! time a command counts as happening at (`now_ms`) is stamped by the proposer and travels in the
//! log. The machine never calls up into the broker either; what the outside world has to do —
//! hand a message to a consumer, dead-letter a message — comes back as [`Effect`]s, and only the
//! replica that leads the group acts on them (followers compute and drop them).
//!
//! Messages live in one of three places: the ready queue (`ready`), the returned queue
//! (`returns`, served before `ready`: what a consumer that went away held goes back near the
//! head) or checked out to exactly one consumer. A message the client requeues (basic.nack or
//! basic.reject with requeue) goes to the back of `ready` instead, as in RabbitMQ 3.10, so a
//! message that keeps failing does not block the ones behind it. They leave by settle, discard (dead-letter
//! `rejected`), purge, delivery limit (dead-letter `delivery_limit`), max-length drop-head
//! (dead-letter `maxlen`) or TTL (dead-letter `expired`).
//!
//! Dead-lettering is at-most-once by default: the leader routes the dead copy once and the
//! message is gone. With at-least-once (RabbitMQ's `x-dead-letter-strategy=at-least-once`,
//! which the broker turns on only with `reject-publish` overflow and a dead-letter exchange,
//! as RabbitMQ does) a dead message stays in the group, held in `dead_held`, until the leader
//! reports that its copy reached every target queue (`SettleDeadLetters`); a new leader sends
//! again whatever is still held, so a copy may arrive twice but is never lost.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// RabbitMQ 4's default `x-delivery-limit` for quorum queues.
pub const DEFAULT_DELIVERY_LIMIT: u32 = 20;

/// A consumer as the caller identifies it (e.g. a hash of node, channel and consumer tag).
pub type ConsumerKey = u64;

/// A message's identity inside one queue; assigned by the machine in enqueue order.
pub type MsgId = u64;

/// What happens when a publish would take the queue over `x-max-length` / `x-max-length-bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Overflow {
    /// Drop (dead-letter with reason `maxlen`) the oldest ready messages.
    #[default]
    DropHead,
    /// Refuse the new message; the publisher gets a nack.
    RejectPublish,
}

/// The queue's arguments that change its behaviour (from `x-*` arguments and policies).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// Returns (requeues) a message may take before it is dead-lettered; `None` is unlimited.
    pub delivery_limit: Option<u32>,
    /// Cap on ready messages (checked-out ones do not count, as in RabbitMQ).
    pub max_length: Option<u64>,
    /// Cap on the body bytes of ready messages.
    pub max_length_bytes: Option<u64>,
    pub overflow: Overflow,
    /// Queue-wide message TTL; a message's own TTL applies when shorter.
    pub message_ttl_ms: Option<u64>,
    /// `x-single-active-consumer`: only the longest-registered consumer gets messages; the
    /// next in line takes over when it goes.
    pub single_active_consumer: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            delivery_limit: Some(DEFAULT_DELIVERY_LIMIT),
            max_length: None,
            max_length_bytes: None,
            overflow: Overflow::DropHead,
            message_ttl_ms: None,
            single_active_consumer: false,
        }
    }
}

/// A publisher's sequence number, so that a publish retried after a leader change is
/// recognised and not enqueued twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublisherSeq {
    pub publisher: u64,
    pub seq: u64,
}

/// One message as the queue holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub id: MsgId,
    pub body: Bytes,
    /// How many times the message was returned to the queue (RabbitMQ's `x-delivery-count`).
    pub delivery_count: u32,
    /// True once the message has been handed to a consumer (the AMQP `redelivered` flag).
    pub delivered_before: bool,
    /// Absolute expiry in the proposers' clock; the message expires once `now_ms` is past it.
    pub expires_at_ms: Option<u64>,
}

/// A state change, as proposed through the Raft log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Enqueue {
        publisher: Option<PublisherSeq>,
        body: Bytes,
        /// Per-message TTL (the AMQP `expiration` property).
        ttl_ms: Option<u64>,
    },
    /// Register a consumer, or change its prefetch; `prefetch` 0 means unlimited.
    Checkout {
        consumer: ConsumerKey,
        prefetch: u32,
    },
    /// Remove a consumer; what it holds is returned near the head, in id order (and counts as
    /// a delivery attempt).
    Cancel { consumer: ConsumerKey },
    /// The consumer is done with these messages (basic.ack).
    Settle {
        consumer: ConsumerKey,
        msg_ids: Vec<MsgId>,
    },
    /// Requeue these messages (basic.nack/reject with requeue): to the back of the queue.
    Return {
        consumer: ConsumerKey,
        msg_ids: Vec<MsgId>,
    },
    /// Reject these messages without requeue: dead-lettered with reason `rejected`.
    Discard {
        consumer: ConsumerKey,
        msg_ids: Vec<MsgId>,
    },
    /// Drop every ready message (checked-out ones stay with their consumers).
    Purge,
    /// Let time pass: expires messages whose TTL ran out, without any other change. The leader
    /// proposes it periodically while messages with a TTL are queued.
    Tick,
    /// The publisher is gone; forget its deduplication sequence.
    PublisherDown { publisher: u64 },
    /// A policy changed the queue's arguments (all but `single_active_consumer`, which stays).
    SetConfig(QueueConfig),
    /// Stop handing messages to a consumer (basic.cancel) while it keeps what it holds until
    /// it settles or returns them; a later `Cancel` removes it.
    Suspend { consumer: ConsumerKey },
    /// Several commands in one log entry (one append, one fsync, one apply), applied in order;
    /// the reply is `Reply::Batch`.
    Batch(Vec<Command>),
    /// Requeue these messages because the client's channel went away: back near the head, in
    /// id order, as for a cancelled consumer (RabbitMQ returns a downed consumer's messages
    /// there), not behind the ready ones as a client's requeue.
    Release {
        consumer: ConsumerKey,
        msg_ids: Vec<MsgId>,
    },
    /// An operation of the cluster's metadata group, opaque here: the application's
    /// [`crate::metadata::MetadataMachine`] applies it and answers `Reply::Metadata`. It shares
    /// the log entry type with queue commands so both kinds of group use one WAL record format
    /// and one wire encoding; a queue group refuses it (`Reply::Rejected`). Last in the enum so
    /// logs written before it existed decode unchanged.
    Metadata(Bytes),
    /// Turn at-least-once dead-lettering on or off (on: dead messages are held until
    /// `SettleDeadLetters`; off: held ones are dropped, as RabbitMQ drops them on switching to
    /// at-most-once). After `Metadata`, so logs written before it decode unchanged.
    SetDeadLetterAtLeastOnce(bool),
    /// The leader's report that these held dead messages reached their targets.
    SettleDeadLetters { msg_ids: Vec<MsgId> },
    /// Requeue these messages because they never reached the client or its node is gone (a
    /// link to the node lost, a hand-over to a connection that went, a basic.get that gave
    /// up): back near the head as `Release`, but not a failed delivery, so they do not count
    /// toward the delivery limit (RabbitMQ's `noconnection`). After `SettleDeadLetters`, so
    /// logs written before it decode unchanged.
    ReleaseDisconnected {
        consumer: ConsumerKey,
        msg_ids: Vec<MsgId>,
    },
    /// Remove a consumer that went with its node or with the leader that served it (a new
    /// leader's take-over cancels the consumers it does not serve; they attach again): what
    /// it holds goes back near the head as for `Cancel`, not counted toward the delivery
    /// limit. Last, so logs written before it decode unchanged.
    Disconnect { consumer: ConsumerKey },
}

/// Whether a return counts as a failed delivery toward the delivery limit, as in RabbitMQ 4
/// (rabbit_fifo's `delivery_failed`): a client's requeue or a consumer whose channel went
/// does; a consumer whose node went, or a message that never reached its client, does not
/// (RabbitMQ's `noconnection` returns). Without the distinction a message held across a
/// run of leader changes or node failures reached the default limit of 20 and was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    Failed,
    NotCounted,
}

/// Why a message is dead-lettered (RabbitMQ's `x-death` reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeadLetterReason {
    Rejected,
    Expired,
    MaxLength,
    DeliveryLimit,
}

/// Something the leader has to do in the world after applying a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Effect {
    /// Hand `message` to `consumer`; it stays checked out until settled, returned or discarded.
    Deliver {
        consumer: ConsumerKey,
        message: Message,
    },
    /// The message left the queue without being consumed. The caller routes it to the
    /// dead-letter exchange, or drops it when the queue has none.
    DeadLetter {
        reason: DeadLetterReason,
        message: Message,
    },
    /// Delivery stopped with messages ready because every consumer was full (true), or
    /// handed out all that was ready again (false): what the queue's consumer capacity
    /// averages. Only on a change.
    ConsumersFull(bool),
}

impl Effect {
    /// Whether every member computes this effect alike for the same entry: all but
    /// `ConsumersFull`, which follows what this member reported before (not replicated
    /// state: a member restored from a snapshot reports afresh).
    pub fn is_replicated(&self) -> bool {
        !matches!(self, Effect::ConsumersFull(_))
    }
}

/// The answer to the proposer of a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The message is in the queue (publisher confirm: ack).
    Enqueued {
        msg_id: MsgId,
    },
    /// The publisher sequence was seen before; the first copy stands (ack).
    Duplicate,
    /// `reject-publish` overflow refused it (publisher confirm: nack).
    Rejected,
    /// Settle/return/discard: how many of the named messages the consumer actually held.
    Handled {
        count: usize,
    },
    Purged {
        count: usize,
    },
    UnknownConsumer,
    Ok,
    /// The replies to a `Command::Batch`, in order.
    Batch(Vec<Reply>),
    /// The metadata machine's answer to a `Command::Metadata`.
    Metadata(Bytes),
}

/// Where a returned message goes.
#[derive(Clone, Copy)]
enum Requeue {
    /// Among the returned messages served before the rest (a consumer went away).
    Head,
    /// Behind every ready message (the client requeued it).
    Back,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Consumer {
    /// 0 = unlimited.
    prefetch: u32,
    checked_out: BTreeMap<MsgId, Message>,
}

impl Consumer {
    fn has_capacity(&self) -> bool {
        self.prefetch == 0 || self.checked_out.len() < self.prefetch as usize
    }
}

/// A queue's whole replicated state. Equal commands in equal order give equal states.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueState {
    config: QueueConfig,
    next_msg_id: MsgId,
    returns: VecDeque<Message>,
    ready: VecDeque<Message>,
    /// Body bytes of `returns` + `ready` (what `x-max-length-bytes` limits).
    ready_bytes: u64,
    consumers: BTreeMap<ConsumerKey, Consumer>,
    /// Round-robin order in which consumers get the next message.
    service_order: VecDeque<ConsumerKey>,
    /// Highest sequence seen per publisher.
    publishers: BTreeMap<u64, u64>,
    /// At-least-once dead-lettering. Not in the derived encoding (snapshots written before it
    /// existed must still decode): [`QueueState::to_snapshot`] appends it.
    #[serde(skip)]
    dead_letters: DeadLetterHold,
    /// Whether this member last told its owner that every consumer was full with messages
    /// ready (`Effect::ConsumersFull`). Not replicated state: no snapshot carries it.
    #[serde(skip)]
    reported_full: ReportedFull,
}

/// What a member last reported of its consumers' room; equal in every state, since it is
/// not part of what the group replicates (a restored member reports afresh).
#[derive(Clone, Copy, Debug, Default)]
struct ReportedFull(bool);

impl PartialEq for ReportedFull {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ReportedFull {}

/// The at-least-once dead-lettering state, encoded after the rest of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct DeadLetterHold {
    at_least_once: bool,
    /// Dead messages whose copies the leader has not yet reported delivered, by id.
    held: BTreeMap<MsgId, (DeadLetterReason, Message)>,
    /// Body bytes of `held` (what `x-max-length-bytes` counts of it): kept, not summed per
    /// publish.
    held_bytes: u64,
}

impl DeadLetterHold {
    fn hold(&mut self, reason: DeadLetterReason, message: Message) {
        self.held_bytes += message.body.len() as u64;
        if let Some((_, replaced)) = self.held.insert(message.id, (reason, message)) {
            self.held_bytes -= replaced.body.len() as u64;
        }
    }

    /// Lets the named messages go; how many of them were held.
    fn settle(&mut self, msg_ids: &[MsgId]) -> usize {
        let mut count = 0;
        for id in msg_ids {
            if let Some((_, message)) = self.held.remove(id) {
                self.held_bytes -= message.body.len() as u64;
                count += 1;
            }
        }
        count
    }

    fn clear(&mut self) {
        self.held.clear();
        self.held_bytes = 0;
    }
}

impl QueueState {
    pub fn new(config: QueueConfig) -> Self {
        Self {
            config,
            next_msg_id: 0,
            returns: VecDeque::new(),
            ready: VecDeque::new(),
            ready_bytes: 0,
            consumers: BTreeMap::new(),
            service_order: VecDeque::new(),
            publishers: BTreeMap::new(),
            dead_letters: DeadLetterHold::default(),
            reported_full: ReportedFull::default(),
        }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Messages waiting for a consumer.
    pub fn ready_count(&self) -> usize {
        self.returns.len() + self.ready.len()
    }

    pub fn ready_bytes(&self) -> u64 {
        self.ready_bytes
    }

    /// Messages checked out and not yet settled, over all consumers.
    /// Body bytes of the checked-out messages (summed when asked: a metrics scrape).
    pub fn checked_out_bytes(&self) -> u64 {
        self.consumers
            .values()
            .flat_map(|c| c.checked_out.values())
            .map(|m| m.body.len() as u64)
            .sum()
    }

    pub fn checked_out_count(&self) -> usize {
        self.consumers.values().map(|c| c.checked_out.len()).sum()
    }

    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    /// The ids of the ready messages in the order they will be delivered.
    pub fn ready_ids(&self) -> Vec<MsgId> {
        self.returns
            .iter()
            .chain(self.ready.iter())
            .map(|m| m.id)
            .collect()
    }

    /// The ready messages in delivery order.
    pub fn ready_messages(&self) -> impl Iterator<Item = &Message> {
        self.returns.iter().chain(self.ready.iter())
    }

    /// The ids a consumer holds, ascending; `None` for an unknown consumer.
    pub fn checked_out_ids(&self, consumer: ConsumerKey) -> Option<Vec<MsgId>> {
        self.consumers
            .get(&consumer)
            .map(|c| c.checked_out.keys().copied().collect())
    }

    /// The messages a consumer holds, by ascending id (none for an unknown consumer).
    pub fn checked_out_messages(&self, consumer: ConsumerKey) -> impl Iterator<Item = &Message> {
        self.consumers
            .get(&consumer)
            .into_iter()
            .flat_map(|c| c.checked_out.values())
    }

    /// The consumers, ascending.
    pub fn consumer_keys(&self) -> Vec<ConsumerKey> {
        self.consumers.keys().copied().collect()
    }

    /// Whether dead messages are held until their copies are reported delivered.
    pub fn dead_letters_at_least_once(&self) -> bool {
        self.dead_letters.at_least_once
    }

    /// The dead messages held for at-least-once dead-lettering, by ascending id: what a new
    /// leader sends again.
    pub fn dead_letters_held(&self) -> impl Iterator<Item = (DeadLetterReason, &Message)> {
        self.dead_letters.held.values().map(|(r, m)| (*r, m))
    }

    /// Encodes the state for a Raft snapshot: the state, then its at-least-once hold.
    pub fn to_snapshot(&self) -> Vec<u8> {
        // Encoding plain owned data into a Vec cannot fail.
        let mut bytes = bincode::serialize(self).unwrap_or_default();
        bytes.extend(bincode::serialize(&self.dead_letters).unwrap_or_default());
        bytes
    }

    /// Decodes a state encoded by [`QueueState::to_snapshot`], or by a build from before the
    /// at-least-once hold (the state alone: nothing held).
    pub fn from_snapshot(mut bytes: &[u8]) -> Result<Self, bincode::Error> {
        let mut state: QueueState = bincode::deserialize_from(&mut bytes)?;
        if !bytes.is_empty() {
            state.dead_letters = bincode::deserialize_from(&mut bytes)?;
        }
        Ok(state)
    }

    /// Applies one command as happening at `now_ms`.
    pub fn apply(&mut self, now_ms: u64, command: Command) -> (Reply, Vec<Effect>) {
        let mut effects = Vec::new();
        self.expire_heads(now_ms, &mut effects);
        let reply = match command {
            Command::Enqueue {
                publisher,
                body,
                ttl_ms,
            } => self.enqueue(now_ms, publisher, body, ttl_ms, &mut effects),
            Command::Checkout { consumer, prefetch } => {
                match self.consumers.get_mut(&consumer) {
                    Some(existing) => existing.prefetch = prefetch,
                    None => {
                        self.consumers.insert(
                            consumer,
                            Consumer {
                                prefetch,
                                checked_out: BTreeMap::new(),
                            },
                        );
                        self.service_order.push_back(consumer);
                    }
                }
                Reply::Ok
            }
            Command::Cancel { consumer } => {
                self.remove_consumer(consumer, Attempt::Failed, &mut effects)
            }
            Command::Disconnect { consumer } => {
                self.remove_consumer(consumer, Attempt::NotCounted, &mut effects)
            }
            Command::Settle { consumer, msg_ids } => {
                self.take_checked_out(consumer, &msg_ids, |_, _, _| {}, &mut effects)
            }
            Command::Return { consumer, msg_ids } => self.take_checked_out(
                consumer,
                &msg_ids,
                |state, message, effects| {
                    state.return_one(message, Requeue::Back, Attempt::Failed, effects)
                },
                &mut effects,
            ),
            Command::Release { consumer, msg_ids } => {
                self.release(consumer, msg_ids, Attempt::Failed, &mut effects)
            }
            Command::ReleaseDisconnected { consumer, msg_ids } => {
                self.release(consumer, msg_ids, Attempt::NotCounted, &mut effects)
            }
            Command::Discard { consumer, msg_ids } => self.take_checked_out(
                consumer,
                &msg_ids,
                |state, message, effects| {
                    state.dead_letter(DeadLetterReason::Rejected, message, effects)
                },
                &mut effects,
            ),
            Command::Purge => {
                let count = self.ready_count();
                self.returns.clear();
                self.ready.clear();
                self.ready_bytes = 0;
                // RabbitMQ's purge drops the held dead letters too (not counted in the reply).
                self.dead_letters.clear();
                Reply::Purged { count }
            }
            Command::Tick => Reply::Ok,
            Command::PublisherDown { publisher } => {
                self.publishers.remove(&publisher);
                Reply::Ok
            }
            Command::SetConfig(config) => {
                // Single-active-consumer is fixed at declaration (an argument, never a policy
                // in RabbitMQ): switching it would make "first in line" ambiguous.
                self.config = QueueConfig {
                    single_active_consumer: self.config.single_active_consumer,
                    ..config
                };
                self.enforce_drop_head(&mut effects);
                Reply::Ok
            }
            Command::Batch(commands) => {
                let mut replies = Vec::with_capacity(commands.len());
                for command in commands {
                    let (reply, more) = self.apply(now_ms, command);
                    effects.extend(more);
                    replies.push(reply);
                }
                Reply::Batch(replies)
            }
            // Not a queue's command: a misrouted metadata operation changes nothing.
            Command::Metadata(_) => Reply::Rejected,
            Command::SetDeadLetterAtLeastOnce(on) => {
                self.dead_letters.at_least_once = on;
                if !on {
                    self.dead_letters.clear();
                }
                Reply::Ok
            }
            Command::SettleDeadLetters { msg_ids } => Reply::Handled {
                count: self.dead_letters.settle(&msg_ids),
            },
            Command::Suspend { consumer } => {
                if !self.consumers.contains_key(&consumer) {
                    Reply::UnknownConsumer
                } else {
                    // Out of the round-robin: `deliver` only serves consumers listed there.
                    self.service_order.retain(|c| *c != consumer);
                    Reply::Ok
                }
            }
        };
        self.deliver(now_ms, &mut effects);
        (reply, effects)
    }

    fn enqueue(
        &mut self,
        now_ms: u64,
        publisher: Option<PublisherSeq>,
        body: Bytes,
        ttl_ms: Option<u64>,
        effects: &mut Vec<Effect>,
    ) -> Reply {
        if let Some(PublisherSeq { publisher, seq }) = publisher {
            if self
                .publishers
                .get(&publisher)
                .is_some_and(|last| seq <= *last)
            {
                return Reply::Duplicate;
            }
        }
        let size = body.len() as u64;
        if self.config.overflow == Overflow::RejectPublish && self.is_over_limit() {
            // A refused publish still consumes its sequence number: the retry must not slip in.
            if let Some(PublisherSeq { publisher, seq }) = publisher {
                self.publishers.insert(publisher, seq);
            }
            return Reply::Rejected;
        }
        if let Some(PublisherSeq { publisher, seq }) = publisher {
            self.publishers.insert(publisher, seq);
        }
        let ttl_ms = match (self.config.message_ttl_ms, ttl_ms) {
            (Some(queue), Some(message)) => Some(queue.min(message)),
            (queue, message) => queue.or(message),
        };
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        self.ready.push_back(Message {
            id,
            body,
            delivery_count: 0,
            delivered_before: false,
            expires_at_ms: ttl_ms.map(|ttl| now_ms.saturating_add(ttl)),
        });
        self.ready_bytes += size;
        // A consumer waiting with spare prefetch takes the message before the length is
        // enforced, as with RabbitMQ (a queue with max-length 0 still feeds waiting consumers).
        self.deliver(now_ms, effects);
        self.enforce_drop_head(effects);
        Reply::Enqueued { msg_id: id }
    }

    /// Whether the queue is already past its length limits. As in RabbitMQ's quorum queues
    /// (checked against 3.10), `reject-publish` refuses a publish only once the queue is *over*
    /// the limit, so the message that reaches it is accepted and a queue with `x-max-length` 2
    /// takes 3 before nacking.
    ///
    /// Dead messages held for at-least-once dead-lettering count too, as in RabbitMQ
    /// (`rabbit_fifo:is_over_limit`): with `reject-publish` — which at-least-once requires —
    /// a queue whose dead letters cannot be delivered refuses publishes instead of growing
    /// without bound.
    fn is_over_limit(&self) -> bool {
        let held = &self.dead_letters;
        let over_count = self
            .config
            .max_length
            .is_some_and(|max| (self.ready_count() + held.held.len()) as u64 > max);
        let over_bytes = self
            .config
            .max_length_bytes
            .is_some_and(|max| self.ready_bytes + held.held_bytes > max);
        over_count || over_bytes
    }

    fn enforce_drop_head(&mut self, effects: &mut Vec<Effect>) {
        if self.config.overflow != Overflow::DropHead {
            return;
        }
        loop {
            if !self.is_over_limit() {
                return;
            }
            match self.pop_head() {
                Some(message) => self.dead_letter(DeadLetterReason::MaxLength, message, effects),
                None => return,
            }
        }
    }

    fn pop_head(&mut self) -> Option<Message> {
        let message = self
            .returns
            .pop_front()
            .or_else(|| self.ready.pop_front())?;
        self.ready_bytes -= message.body.len() as u64;
        Some(message)
    }

    fn head(&self) -> Option<&Message> {
        self.returns.front().or_else(|| self.ready.front())
    }

    /// Dead-letters expired messages at the head of the queue. Like RabbitMQ, only the head is
    /// examined: a message with a short per-message TTL behind a longer-lived one waits.
    fn expire_heads(&mut self, now_ms: u64, effects: &mut Vec<Effect>) {
        while self
            .head()
            .and_then(|m| m.expires_at_ms)
            .is_some_and(|expires_at_ms| now_ms > expires_at_ms)
        {
            if let Some(message) = self.pop_head() {
                self.dead_letter(DeadLetterReason::Expired, message, effects);
            }
        }
    }

    /// Returns messages a consumer held near the head, in id order (so they keep their
    /// relative order), counted as `attempt` says.
    fn release(
        &mut self,
        consumer: ConsumerKey,
        mut msg_ids: Vec<MsgId>,
        attempt: Attempt,
        effects: &mut Vec<Effect>,
    ) -> Reply {
        msg_ids.sort_unstable();
        self.take_checked_out(
            consumer,
            &msg_ids,
            |state, message, effects| state.return_one(message, Requeue::Head, attempt, effects),
            effects,
        )
    }

    /// Removes a consumer; what it held goes back near the head, in id order (so the
    /// requeued messages keep their relative order), counted as `attempt` says.
    fn remove_consumer(
        &mut self,
        consumer: ConsumerKey,
        attempt: Attempt,
        effects: &mut Vec<Effect>,
    ) -> Reply {
        let Some(removed) = self.consumers.remove(&consumer) else {
            return Reply::UnknownConsumer;
        };
        self.service_order.retain(|c| *c != consumer);
        for (_, message) in removed.checked_out {
            self.return_one(message, Requeue::Head, attempt, effects);
        }
        Reply::Ok
    }

    /// Requeues a message a consumer held, or dead-letters it past the delivery limit; a
    /// return that is not a failed delivery never counts toward it.
    fn return_one(
        &mut self,
        mut message: Message,
        to: Requeue,
        attempt: Attempt,
        effects: &mut Vec<Effect>,
    ) {
        if attempt == Attempt::Failed {
            message.delivery_count = message.delivery_count.saturating_add(1);
        }
        if attempt == Attempt::Failed
            && self
                .config
                .delivery_limit
                .is_some_and(|limit| message.delivery_count > limit)
        {
            self.dead_letter(DeadLetterReason::DeliveryLimit, message, effects);
            return;
        }
        self.ready_bytes += message.body.len() as u64;
        match to {
            Requeue::Head => self.returns.push_back(message),
            Requeue::Back => self.ready.push_back(message),
        }
    }

    /// A message leaves the queue dead: the leader routes its copy (the effect); under
    /// at-least-once the group also holds it until that copy is reported delivered.
    fn dead_letter(
        &mut self,
        reason: DeadLetterReason,
        message: Message,
        effects: &mut Vec<Effect>,
    ) {
        if self.dead_letters.at_least_once {
            self.dead_letters.hold(reason, message.clone());
        }
        effects.push(Effect::DeadLetter { reason, message });
    }

    fn take_checked_out(
        &mut self,
        consumer: ConsumerKey,
        msg_ids: &[MsgId],
        mut then: impl FnMut(&mut Self, Message, &mut Vec<Effect>),
        effects: &mut Vec<Effect>,
    ) -> Reply {
        let Some(holder) = self.consumers.get_mut(&consumer) else {
            return Reply::UnknownConsumer;
        };
        let taken: Vec<Message> = msg_ids
            .iter()
            .filter_map(|id| holder.checked_out.remove(id))
            .collect();
        let count = taken.len();
        for message in taken {
            then(self, message, effects);
        }
        Reply::Handled { count }
    }

    fn report_full(&mut self, full: bool, effects: &mut Vec<Effect>) {
        if self.reported_full.0 != full {
            self.reported_full.0 = full;
            effects.push(Effect::ConsumersFull(full));
        }
    }

    /// Hands ready messages to consumers with spare prefetch, round-robin.
    fn deliver(&mut self, now_ms: u64, effects: &mut Vec<Effect>) {
        loop {
            self.expire_heads(now_ms, effects);
            if self.head().is_none() {
                self.report_full(false, effects);
                return;
            }
            let mut chosen = None;
            if self.config.single_active_consumer {
                // Only the first in line is served, and it keeps its place.
                chosen = self
                    .service_order
                    .front()
                    .copied()
                    .filter(|key| self.consumers.get(key).is_some_and(Consumer::has_capacity));
            }
            let candidates = match self.config.single_active_consumer {
                true => 0,
                false => self.service_order.len(),
            };
            for _ in 0..candidates {
                let Some(key) = self.service_order.pop_front() else {
                    break;
                };
                self.service_order.push_back(key);
                if self.consumers.get(&key).is_some_and(Consumer::has_capacity) {
                    chosen = Some(key);
                    break;
                }
            }
            let Some(key) = chosen else {
                let full = !self.consumers.is_empty();
                self.report_full(full, effects);
                return;
            };
            let Some(mut message) = self.pop_head() else {
                return;
            };
            let redelivery = message.clone();
            message.delivered_before = true;
            if let Some(consumer) = self.consumers.get_mut(&key) {
                consumer.checked_out.insert(message.id, message);
            }
            effects.push(Effect::Deliver {
                consumer: key,
                message: redelivery,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enqueue(body: &'static str) -> Command {
        Command::Enqueue {
            publisher: None,
            body: Bytes::from_static(body.as_bytes()),
            ttl_ms: None,
        }
    }

    fn delivered(effects: &[Effect]) -> Vec<(ConsumerKey, MsgId, u32, bool)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Deliver { consumer, message } => Some((
                    *consumer,
                    message.id,
                    message.delivery_count,
                    message.delivered_before,
                )),
                _ => None,
            })
            .collect()
    }

    fn dead(effects: &[Effect]) -> Vec<(DeadLetterReason, MsgId)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::DeadLetter { reason, message } => Some((*reason, message.id)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn consumers_share_round_robin_within_prefetch() {
        let mut q = QueueState::new(QueueConfig::default());
        for body in ["a", "b", "c", "d", "e"] {
            q.apply(0, enqueue(body));
        }
        let (_, e1) = q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 2,
            },
        );
        assert_eq!(delivered(&e1), vec![(1, 0, 0, false), (1, 1, 0, false)]);
        let (_, e2) = q.apply(
            0,
            Command::Checkout {
                consumer: 2,
                prefetch: 2,
            },
        );
        assert_eq!(delivered(&e2), vec![(2, 2, 0, false), (2, 3, 0, false)]);
        assert_eq!(q.ready_ids(), vec![4]);
        let (reply, e3) = q.apply(
            0,
            Command::Settle {
                consumer: 1,
                msg_ids: vec![0, 99],
            },
        );
        assert_eq!(reply, Reply::Handled { count: 1 });
        assert_eq!(delivered(&e3), vec![(1, 4, 0, false)]);
        assert_eq!(q.checked_out_count(), 4);
    }

    #[test]
    fn requeued_messages_go_to_the_back_and_count_attempts() {
        let mut q = QueueState::new(QueueConfig::default());
        for body in ["a", "b", "c"] {
            q.apply(0, enqueue(body));
        }
        q.apply(
            0,
            Command::Checkout {
                consumer: 7,
                prefetch: 1,
            },
        );
        let (_, effects) = q.apply(
            0,
            Command::Return {
                consumer: 7,
                msg_ids: vec![0],
            },
        );
        // Message 0 goes behind 1 and 2 (1 is delivered in its place), counted.
        assert_eq!(delivered(&effects), vec![(7, 1, 0, false)]);
        assert_eq!(q.ready_ids(), vec![2, 0]);
        q.apply(
            0,
            Command::Settle {
                consumer: 7,
                msg_ids: vec![1],
            },
        );
        let (_, effects) = q.apply(
            0,
            Command::Settle {
                consumer: 7,
                msg_ids: vec![2],
            },
        );
        assert_eq!(delivered(&effects), vec![(7, 0, 1, true)]);
    }

    #[test]
    fn a_cancelled_consumers_messages_go_back_to_the_head_in_order() {
        let mut q = QueueState::new(QueueConfig::default());
        for body in ["a", "b", "c"] {
            q.apply(0, enqueue(body));
        }
        q.apply(
            0,
            Command::Checkout {
                consumer: 7,
                prefetch: 2,
            },
        );
        q.apply(0, Command::Cancel { consumer: 7 });
        assert_eq!(q.ready_ids(), vec![0, 1, 2]);
        let (_, effects) = q.apply(
            0,
            Command::Checkout {
                consumer: 8,
                prefetch: 1,
            },
        );
        assert_eq!(delivered(&effects), vec![(8, 0, 1, true)]);
    }

    #[test]
    fn released_messages_go_back_to_the_head_in_id_order() {
        let mut q = QueueState::new(QueueConfig::default());
        for body in ["a", "b", "c"] {
            q.apply(0, enqueue(body));
        }
        q.apply(
            0,
            Command::Checkout {
                consumer: 7,
                prefetch: 2,
            },
        );
        q.apply(0, Command::Suspend { consumer: 7 });
        let (reply, _) = q.apply(
            0,
            Command::Release {
                consumer: 7,
                msg_ids: vec![1, 0],
            },
        );
        assert_eq!(reply, Reply::Handled { count: 2 });
        assert_eq!(q.ready_ids(), vec![0, 1, 2]);
        assert_eq!(q.ready_messages().next().map(|m| m.delivery_count), Some(1));
    }

    #[test]
    fn single_active_consumer_serves_the_first_in_line_until_it_goes() {
        let mut q = QueueState::new(QueueConfig {
            single_active_consumer: true,
            ..QueueConfig::default()
        });
        for consumer in [5, 3] {
            q.apply(
                0,
                Command::Checkout {
                    consumer,
                    prefetch: 1,
                },
            );
        }
        let (_, e1) = q.apply(0, enqueue("a"));
        let (_, e2) = q.apply(0, enqueue("b"));
        assert_eq!(delivered(&e1), vec![(5, 0, 0, false)]);
        assert!(delivered(&e2).is_empty(), "3 waits while 5 is active");
        // A policy cannot switch it off.
        q.apply(0, Command::SetConfig(QueueConfig::default()));
        assert!(q.config().single_active_consumer);
        let (_, e3) = q.apply(0, Command::Cancel { consumer: 5 });
        // 3 takes over: "b" was first in line, then "a" came back to the head.
        assert_eq!(delivered(&e3), vec![(3, 0, 1, true)]);
        assert_eq!(q.ready_ids(), vec![1]);
    }

    #[test]
    fn default_delivery_limit_dead_letters_the_21st_return() {
        let mut q = QueueState::new(QueueConfig::default());
        q.apply(0, enqueue("poison"));
        q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 1,
            },
        );
        for attempt in 1..=DEFAULT_DELIVERY_LIMIT {
            let (_, effects) = q.apply(
                0,
                Command::Return {
                    consumer: 1,
                    msg_ids: vec![0],
                },
            );
            assert_eq!(delivered(&effects), vec![(1, 0, attempt, true)]);
        }
        let (_, effects) = q.apply(
            0,
            Command::Return {
                consumer: 1,
                msg_ids: vec![0],
            },
        );
        assert_eq!(dead(&effects), vec![(DeadLetterReason::DeliveryLimit, 0)]);
        assert!(delivered(&effects).is_empty());
        assert_eq!(q.ready_count() + q.checked_out_count(), 0);
    }

    #[test]
    fn cancel_returns_held_messages_counting_the_attempt() {
        let mut q = QueueState::new(QueueConfig {
            delivery_limit: Some(0),
            ..QueueConfig::default()
        });
        q.apply(0, enqueue("a"));
        q.apply(0, enqueue("b"));
        q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 1,
            },
        );
        let (reply, effects) = q.apply(0, Command::Cancel { consumer: 1 });
        assert_eq!(reply, Reply::Ok);
        assert_eq!(dead(&effects), vec![(DeadLetterReason::DeliveryLimit, 0)]);
        assert_eq!(q.ready_ids(), vec![1]);
        assert_eq!(
            q.apply(0, Command::Cancel { consumer: 1 }).0,
            Reply::UnknownConsumer
        );
    }

    #[test]
    fn consumers_gone_with_their_node_never_use_up_the_delivery_limit() {
        // A message held across a run of leader changes and node failures (a chaos run's
        // hundreds of faults): its consumers are disconnected and it is released by lost
        // links far more often than the limit; it is never dead-lettered, and each time goes
        // out again redelivered with its failed-delivery count unchanged.
        let mut q = QueueState::new(QueueConfig {
            delivery_limit: Some(0),
            ..QueueConfig::default()
        });
        q.apply(0, enqueue("a"));
        for consumer in 1..=3 * u64::from(DEFAULT_DELIVERY_LIMIT) {
            let (_, effects) = q.apply(
                0,
                Command::Checkout {
                    consumer,
                    prefetch: 1,
                },
            );
            assert_eq!(delivered(&effects), vec![(consumer, 0, 0, consumer > 1)]);
            let gone = match consumer % 2 {
                0 => Command::Disconnect { consumer },
                _ => Command::ReleaseDisconnected {
                    consumer,
                    msg_ids: vec![0],
                },
            };
            let (_, effects) = q.apply(0, gone);
            assert!(
                dead(&effects).is_empty(),
                "dead-lettered after {consumer} consumers"
            );
            q.apply(0, Command::Disconnect { consumer });
        }
        assert_eq!(q.ready_ids(), vec![0]);
        // A consumer whose channel went holding it is a failed delivery: with limit 0, dead.
        q.apply(
            0,
            Command::Checkout {
                consumer: 100,
                prefetch: 1,
            },
        );
        let (_, effects) = q.apply(0, Command::Cancel { consumer: 100 });
        assert_eq!(dead(&effects), vec![(DeadLetterReason::DeliveryLimit, 0)]);
    }

    #[test]
    fn suspended_consumer_keeps_what_it_holds_and_gets_nothing_more() {
        let mut q = QueueState::new(QueueConfig::default());
        q.apply(0, enqueue("a"));
        q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 1,
            },
        );
        assert_eq!(q.apply(0, Command::Suspend { consumer: 1 }).0, Reply::Ok);
        q.apply(0, enqueue("b"));
        let (_, effects) = q.apply(
            0,
            Command::Settle {
                consumer: 1,
                msg_ids: vec![0],
            },
        );
        assert!(delivered(&effects).is_empty(), "no delivery after suspend");
        assert_eq!(q.ready_ids(), vec![1]);
        assert_eq!(q.apply(0, Command::Cancel { consumer: 1 }).0, Reply::Ok);
        assert_eq!(
            q.apply(0, Command::Suspend { consumer: 1 }).0,
            Reply::UnknownConsumer
        );
    }

    #[test]
    fn a_batch_applies_like_its_commands_one_by_one() {
        let commands = vec![
            enqueue("a"),
            Command::Checkout {
                consumer: 1,
                prefetch: 1,
            },
            enqueue("b"),
        ];
        let mut one_by_one = QueueState::new(QueueConfig::default());
        let mut replies = Vec::new();
        let mut effects = Vec::new();
        for c in commands.clone() {
            let (r, e) = one_by_one.apply(0, c);
            replies.push(r);
            effects.extend(e);
        }
        let mut batched = QueueState::new(QueueConfig::default());
        let (reply, batch_effects) = batched.apply(0, Command::Batch(commands));
        assert_eq!(reply, Reply::Batch(replies));
        assert_eq!(batch_effects, effects);
        assert_eq!(batched, one_by_one);
    }

    fn held(q: &QueueState) -> Vec<(DeadLetterReason, MsgId)> {
        q.dead_letters_held().map(|(r, m)| (r, m.id)).collect()
    }

    #[test]
    fn at_least_once_holds_dead_messages_until_settled_and_snapshots_keep_them() {
        let mut q = QueueState::new(QueueConfig {
            message_ttl_ms: Some(10),
            ..QueueConfig::default()
        });
        // At-most-once (the default): the dead message is routed once and gone.
        q.apply(0, enqueue("a"));
        let (_, effects) = q.apply(20, Command::Tick);
        assert_eq!(dead(&effects), vec![(DeadLetterReason::Expired, 0)]);
        assert!(held(&q).is_empty());

        q.apply(20, Command::SetDeadLetterAtLeastOnce(true));
        assert!(q.dead_letters_at_least_once());
        q.apply(20, enqueue("b"));
        q.apply(20, enqueue("c"));
        let (_, effects) = q.apply(40, Command::Tick);
        assert_eq!(
            dead(&effects),
            vec![
                (DeadLetterReason::Expired, 1),
                (DeadLetterReason::Expired, 2)
            ]
        );
        assert_eq!(
            held(&q),
            vec![
                (DeadLetterReason::Expired, 1),
                (DeadLetterReason::Expired, 2)
            ]
        );
        assert_eq!(q.ready_count(), 0);

        // A snapshot keeps what is held (a new leader restored from it sends them again).
        let restored = QueueState::from_snapshot(&q.to_snapshot()).expect("decodes");
        assert_eq!(restored, q);

        let (reply, _) = q.apply(
            40,
            Command::SettleDeadLetters {
                msg_ids: vec![1, 7],
            },
        );
        assert_eq!(reply, Reply::Handled { count: 1 });
        assert_eq!(held(&q), vec![(DeadLetterReason::Expired, 2)]);

        // Back to at-most-once: what is still held is dropped, as RabbitMQ does.
        q.apply(40, Command::SetDeadLetterAtLeastOnce(false));
        assert!(held(&q).is_empty());
    }

    #[test]
    fn every_way_to_die_is_held_under_at_least_once() {
        let mut q = QueueState::new(QueueConfig {
            delivery_limit: Some(0),
            max_length: Some(0),
            ..QueueConfig::default()
        });
        q.apply(0, Command::SetDeadLetterAtLeastOnce(true));
        q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 0,
            },
        );
        q.apply(0, enqueue("rejected"));
        q.apply(0, enqueue("returned"));
        q.apply(
            0,
            Command::Discard {
                consumer: 1,
                msg_ids: vec![0],
            },
        );
        q.apply(
            0,
            Command::Return {
                consumer: 1,
                msg_ids: vec![1],
            },
        );
        q.apply(0, Command::Cancel { consumer: 1 });
        let (_, effects) = q.apply(0, enqueue("over the limit"));
        assert_eq!(dead(&effects), vec![(DeadLetterReason::MaxLength, 2)]);
        assert_eq!(
            held(&q),
            vec![
                (DeadLetterReason::Rejected, 0),
                (DeadLetterReason::DeliveryLimit, 1),
                (DeadLetterReason::MaxLength, 2)
            ]
        );
    }

    /// A queue holding its dead letters (at-least-once) with consumer 1 checked out,
    /// unlimited prefetch.
    fn at_least_once_with_a_consumer(config: QueueConfig) -> QueueState {
        let mut q = QueueState::new(config);
        q.apply(0, Command::SetDeadLetterAtLeastOnce(true));
        q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 0,
            },
        );
        q
    }

    #[test]
    fn held_dead_letters_count_toward_the_length_limit_and_purge_drops_them() {
        let mut q = at_least_once_with_a_consumer(QueueConfig {
            max_length: Some(1),
            overflow: Overflow::RejectPublish,
            ..QueueConfig::default()
        });
        for body in ["a", "b"] {
            q.apply(0, enqueue(body));
        }
        q.apply(
            0,
            Command::Discard {
                consumer: 1,
                msg_ids: vec![0, 1],
            },
        );
        q.apply(0, Command::Cancel { consumer: 1 });
        assert_eq!(q.ready_count(), 0);
        // Two held, over the limit of one: the publish is refused, as RabbitMQ refuses it.
        let (reply, _) = q.apply(0, enqueue("c"));
        assert_eq!(reply, Reply::Rejected);
        q.apply(0, Command::SettleDeadLetters { msg_ids: vec![0] });
        let (reply, _) = q.apply(0, enqueue("d"));
        assert_eq!(reply, Reply::Enqueued { msg_id: 2 });
        let (reply, _) = q.apply(0, Command::Purge);
        assert_eq!(reply, Reply::Purged { count: 1 });
        assert!(held(&q).is_empty());

        // The held bytes count toward x-max-length-bytes, and stop counting once settled.
        let mut q = at_least_once_with_a_consumer(QueueConfig {
            max_length_bytes: Some(3),
            overflow: Overflow::RejectPublish,
            ..QueueConfig::default()
        });
        q.apply(0, enqueue("four"));
        q.apply(
            0,
            Command::Discard {
                consumer: 1,
                msg_ids: vec![0],
            },
        );
        q.apply(0, Command::Cancel { consumer: 1 });
        assert_eq!(q.apply(0, enqueue("x")).0, Reply::Rejected);
        q.apply(0, Command::SettleDeadLetters { msg_ids: vec![0] });
        assert_eq!(q.apply(0, enqueue("x")).0, Reply::Enqueued { msg_id: 1 });
    }

    #[test]
    fn a_snapshot_from_before_the_dead_letter_hold_still_decodes() {
        let mut q = QueueState::new(QueueConfig::default());
        q.apply(0, enqueue("a"));
        // What earlier builds wrote: the derived encoding alone.
        let old = bincode::serialize(&q).expect("encodes");
        let restored = QueueState::from_snapshot(&old).expect("decodes");
        assert_eq!(restored, q);
        assert!(!restored.dead_letters_at_least_once());
    }

    #[test]
    fn discard_dead_letters_as_rejected() {
        let mut q = QueueState::new(QueueConfig::default());
        q.apply(0, enqueue("a"));
        q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 0,
            },
        );
        let (reply, effects) = q.apply(
            0,
            Command::Discard {
                consumer: 1,
                msg_ids: vec![0],
            },
        );
        assert_eq!(reply, Reply::Handled { count: 1 });
        assert_eq!(dead(&effects), vec![(DeadLetterReason::Rejected, 0)]);
        assert_eq!(q.checked_out_count(), 0);
    }

    #[test]
    fn max_length_drop_head_dead_letters_the_oldest() {
        let mut q = QueueState::new(QueueConfig {
            max_length: Some(2),
            ..QueueConfig::default()
        });
        q.apply(0, enqueue("a"));
        q.apply(0, enqueue("b"));
        let (reply, effects) = q.apply(0, enqueue("c"));
        assert_eq!(reply, Reply::Enqueued { msg_id: 2 });
        assert_eq!(dead(&effects), vec![(DeadLetterReason::MaxLength, 0)]);
        assert_eq!(q.ready_ids(), vec![1, 2]);
    }

    #[test]
    fn max_length_bytes_drop_head() {
        let mut q = QueueState::new(QueueConfig {
            max_length_bytes: Some(4),
            ..QueueConfig::default()
        });
        q.apply(0, enqueue("aa"));
        q.apply(0, enqueue("bb"));
        let (_, effects) = q.apply(0, enqueue("c"));
        assert_eq!(dead(&effects), vec![(DeadLetterReason::MaxLength, 0)]);
        assert_eq!(q.ready_bytes(), 3);
    }

    #[test]
    fn reject_publish_refuses_when_full_and_accepts_after_space_frees() {
        let mut q = QueueState::new(QueueConfig {
            max_length: Some(1),
            overflow: Overflow::RejectPublish,
            ..QueueConfig::default()
        });
        // RabbitMQ's quorum queue accepts the publish that takes it over the limit.
        assert_eq!(q.apply(0, enqueue("a")).0, Reply::Enqueued { msg_id: 0 });
        assert_eq!(q.apply(0, enqueue("b")).0, Reply::Enqueued { msg_id: 1 });
        let (reply, effects) = q.apply(0, enqueue("c"));
        assert_eq!(reply, Reply::Rejected);
        assert!(effects.is_empty());
        // A consumer takes "a": checked-out messages do not count towards the length.
        q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 1,
            },
        );
        assert_eq!(q.apply(0, enqueue("d")).0, Reply::Enqueued { msg_id: 2 });
    }

    #[test]
    fn ttl_expires_at_the_head_and_the_shorter_ttl_wins() {
        let mut q = QueueState::new(QueueConfig {
            message_ttl_ms: Some(1000),
            ..QueueConfig::default()
        });
        q.apply(0, enqueue("queue-ttl"));
        q.apply(
            0,
            Command::Enqueue {
                publisher: None,
                body: Bytes::from_static(b"own-ttl"),
                ttl_ms: Some(5000),
            },
        );
        q.apply(
            500,
            Command::Enqueue {
                publisher: None,
                body: Bytes::from_static(b"short"),
                ttl_ms: Some(10),
            },
        );
        assert!(dead(&q.apply(1000, Command::Tick).1).is_empty());
        let (_, effects) = q.apply(1001, Command::Tick);
        // 0 and 1 (capped at the queue's 1000 ms) expired; 2 expired long ago at the head now.
        assert_eq!(
            dead(&effects),
            vec![
                (DeadLetterReason::Expired, 0),
                (DeadLetterReason::Expired, 1),
                (DeadLetterReason::Expired, 2)
            ]
        );
    }

    #[test]
    fn consumers_full_is_reported_on_each_change_only() {
        let mut q = QueueState::new(QueueConfig::default());
        let full = |effects: &[Effect]| -> Vec<bool> {
            effects
                .iter()
                .filter_map(|e| match e {
                    Effect::ConsumersFull(full) => Some(*full),
                    _ => None,
                })
                .collect()
        };
        let consumer: ConsumerKey = 1;
        q.apply(
            0,
            Command::Checkout {
                consumer,
                prefetch: 1,
            },
        );
        assert_eq!(full(&q.apply(1, enqueue("a")).1), Vec::<bool>::new());
        assert_eq!(full(&q.apply(2, enqueue("b")).1), vec![true]);
        assert_eq!(full(&q.apply(3, enqueue("c")).1), Vec::<bool>::new());
        let settle = |id| Command::Settle {
            consumer,
            msg_ids: vec![id],
        };
        // Each settle lets the consumer take the next; the last one empties the queue.
        assert_eq!(full(&q.apply(4, settle(0)).1), Vec::<bool>::new());
        assert_eq!(full(&q.apply(5, settle(1)).1), vec![false]);
        assert_eq!(full(&q.apply(6, settle(2)).1), Vec::<bool>::new());
    }

    #[test]
    fn expired_messages_are_not_delivered() {
        let mut q = QueueState::new(QueueConfig::default());
        q.apply(
            0,
            Command::Enqueue {
                publisher: None,
                body: Bytes::from_static(b"x"),
                ttl_ms: Some(100),
            },
        );
        q.apply(0, enqueue("y"));
        let (_, effects) = q.apply(
            200,
            Command::Checkout {
                consumer: 1,
                prefetch: 0,
            },
        );
        assert_eq!(dead(&effects), vec![(DeadLetterReason::Expired, 0)]);
        assert_eq!(delivered(&effects), vec![(1, 1, 0, false)]);
    }

    #[test]
    fn purge_drops_ready_messages_only() {
        let mut q = QueueState::new(QueueConfig::default());
        for body in ["a", "b", "c"] {
            q.apply(0, enqueue(body));
        }
        q.apply(
            0,
            Command::Checkout {
                consumer: 1,
                prefetch: 1,
            },
        );
        let (reply, effects) = q.apply(0, Command::Purge);
        assert_eq!(reply, Reply::Purged { count: 2 });
        // Nothing delivered or dead-lettered; the full consumer has nothing waiting now.
        assert_eq!(effects, vec![Effect::ConsumersFull(false)]);
        assert_eq!(q.checked_out_ids(1), Some(vec![0]));
        assert_eq!(q.ready_bytes(), 0);
    }

    #[test]
    fn publisher_sequence_deduplicates_retries() {
        let mut q = QueueState::new(QueueConfig::default());
        let publish = |seq| Command::Enqueue {
            publisher: Some(PublisherSeq { publisher: 9, seq }),
            body: Bytes::from_static(b"m"),
            ttl_ms: None,
        };
        assert_eq!(q.apply(0, publish(1)).0, Reply::Enqueued { msg_id: 0 });
        assert_eq!(q.apply(0, publish(1)).0, Reply::Duplicate);
        assert_eq!(q.apply(0, publish(2)).0, Reply::Enqueued { msg_id: 1 });
        q.apply(0, Command::PublisherDown { publisher: 9 });
        assert_eq!(q.apply(0, publish(1)).0, Reply::Enqueued { msg_id: 2 });
    }

    #[test]
    fn snapshot_round_trips() {
        let mut q = QueueState::new(QueueConfig::default());
        q.apply(0, enqueue("a"));
        q.apply(
            0,
            Command::Checkout {
                consumer: 3,
                prefetch: 5,
            },
        );
        q.apply(0, enqueue("b"));
        let restored = QueueState::from_snapshot(&q.to_snapshot()).expect("decodes");
        assert_eq!(restored, q);
        assert!(QueueState::from_snapshot(b"\xff\xff").is_err());
    }
}

//! Queues: ordered ready messages, the consumers that take them, and the limits RabbitMQ
//! users set with `x-` arguments.
//!
//! All state sits behind one short-held `parking_lot::Mutex` (never held across an await).
//! Publishing delivers straight to a consumer with credit when nothing is waiting ahead of
//! it, so the common case never stores the message at all. Messages carry a per-queue id
//! that only grows; `ready` stays sorted by it, which is how a requeued message gets its
//! old place back.
//!
//! This in-memory queue is the first queue type; the durable store and a replicated (Raft)
//! queue type will sit behind the same methods: publish, consume, get, settle, purge, delete.

use crate::consumer::{ConnectionEvent, ConnectionId, Consumer, Delivery};
use crate::error::{AmqpError, AmqpResult};
use crate::memory::MemoryMonitor;
use crate::message::Message;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;
use warren_codec::{FieldTable, ShortStr};

#[derive(Debug, Clone)]
pub struct QueuedMessage {
    pub id: u64,
    pub message: Arc<Message>,
    pub redelivered: bool,
}

/// What `x-overflow` asks for when `x-max-length(-bytes)` is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    DropHead,
    RejectPublish,
    RejectPublishDlx,
}

#[derive(Debug, Clone, Default)]
pub struct QueueLimits {
    pub max_length: Option<u64>,
    pub max_length_bytes: Option<u64>,
    pub overflow: Option<Overflow>,
    pub expires_ms: Option<u64>,
    pub message_ttl_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Stored or handed to a consumer.
    Accepted,
    /// Refused by `x-overflow=reject-publish`: a confirming publisher gets a nack.
    Rejected,
}

#[derive(Debug, Default)]
struct QueueState {
    ready: VecDeque<QueuedMessage>,
    ready_bytes: usize,
    unacked: usize,
    consumers: Vec<Arc<Consumer>>,
    next_consumer: usize,
    next_message_id: u64,
    had_consumer: bool,
    deleted: bool,
}

#[derive(Debug)]
pub struct Queue {
    pub name: ShortStr,
    pub durable: bool,
    pub exclusive_owner: Option<ConnectionId>,
    pub auto_delete: bool,
    pub arguments: FieldTable,
    pub limits: QueueLimits,
    memory: Arc<MemoryMonitor>,
    last_used: Mutex<Instant>,
    state: Mutex<QueueState>,
}

impl Queue {
    pub fn new(
        name: ShortStr,
        durable: bool,
        exclusive_owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
        limits: QueueLimits,
        memory: Arc<MemoryMonitor>,
    ) -> Queue {
        Queue {
            name,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            limits,
            memory,
            last_used: Mutex::new(Instant::now()),
            state: Mutex::new(QueueState::default()),
        }
    }

    /// Routes one message into the queue: straight to a consumer with credit if none are
    /// waiting ahead of it, otherwise onto the ready list (applying `x-max-length`).
    pub fn publish(self: &Arc<Self>, message: Arc<Message>) -> Enqueued {
        let mut st = self.state.lock();
        if st.deleted {
            return Enqueued::Accepted;
        }
        let id = st.next_message_id;
        st.next_message_id += 1;
        let queued = QueuedMessage {
            id,
            message,
            redelivered: false,
        };
        if st.ready.is_empty() {
            match self.hand_to_consumer(&mut st, queued) {
                None => return Enqueued::Accepted,
                Some(back) => return self.push_ready(&mut st, back),
            }
        }
        let outcome = self.push_ready(&mut st, queued);
        self.dispatch(&mut st);
        outcome
    }

    fn over_limit(&self, st: &QueueState, extra_messages: usize, extra_bytes: usize) -> bool {
        let len = (st.ready.len() + extra_messages) as u64;
        let bytes = (st.ready_bytes + extra_bytes) as u64;
        self.limits.max_length.is_some_and(|m| len > m)
            || self.limits.max_length_bytes.is_some_and(|m| bytes > m)
    }

    fn push_ready(&self, st: &mut QueueState, queued: QueuedMessage) -> Enqueued {
        let size = queued.message.size_bytes();
        let overflow = self.limits.overflow.unwrap_or(Overflow::DropHead);
        if overflow != Overflow::DropHead && self.over_limit(st, 1, size) {
            return Enqueued::Rejected;
        }
        st.ready_bytes += size;
        self.memory.add(size);
        st.ready.push_back(queued);
        while self.over_limit(st, 0, 0) {
            match st.ready.pop_front() {
                Some(dropped) => self.forget(st, &dropped),
                None => break,
            }
        }
        Enqueued::Accepted
    }

    /// Puts a message back where its id says it belongs (usually the head).
    fn insert_ready(&self, st: &mut QueueState, m: QueuedMessage) {
        let size = m.message.size_bytes();
        st.ready_bytes += size;
        self.memory.add(size);
        let at = st.ready.partition_point(|x| x.id < m.id);
        st.ready.insert(at, m);
    }

    fn forget(&self, st: &mut QueueState, dropped: &QueuedMessage) {
        let size = dropped.message.size_bytes();
        st.ready_bytes -= size;
        self.memory.sub(size);
    }

    /// Offers one message to the consumers round-robin; gives it back if none has credit.
    fn hand_to_consumer(
        self: &Arc<Self>,
        st: &mut QueueState,
        mut queued: QueuedMessage,
    ) -> Option<QueuedMessage> {
        loop {
            let n = st.consumers.len();
            let start = st.next_consumer;
            let Some(pick) = (0..n)
                .map(|i| (start + i) % n)
                .find(|&i| st.consumers[i].has_credit())
            else {
                return Some(queued);
            };
            st.next_consumer = pick + 1;
            let consumer = st.consumers[pick].clone();
            consumer.take_credit();
            if !consumer.no_ack {
                st.unacked += 1;
            }
            let event = ConnectionEvent::Deliver(Delivery {
                consumer: consumer.clone(),
                queue: Some(self.clone()),
                message: queued,
            });
            match consumer.send(event) {
                Ok(()) => return None,
                Err(ConnectionEvent::Deliver(d)) => {
                    // The connection is gone: drop its consumer, try the next one.
                    consumer.return_credit();
                    if !consumer.no_ack {
                        st.unacked -= 1;
                    }
                    st.consumers.retain(|c| !Arc::ptr_eq(c, &consumer));
                    queued = d.message;
                }
                Err(_) => unreachable!("send returns the event it was given"),
            }
        }
    }

    /// Moves ready messages to consumers while any has credit.
    fn dispatch(self: &Arc<Self>, st: &mut QueueState) {
        while let Some(next) = st.ready.pop_front() {
            if st.consumers.is_empty() {
                st.ready.push_front(next);
                return;
            }
            let size = next.message.size_bytes();
            match self.hand_to_consumer(st, next) {
                None => {
                    st.ready_bytes -= size;
                    self.memory.sub(size);
                }
                Some(back) => {
                    st.ready.push_front(back);
                    return;
                }
            }
        }
    }

    /// Re-runs dispatch after credit was freed somewhere.
    pub fn kick(self: &Arc<Self>) {
        let mut st = self.state.lock();
        if !st.ready.is_empty() {
            self.dispatch(&mut st);
        }
    }

    /// Settles `acked` deliveries and puts `requeued` back in their old places (marked
    /// redelivered), then dispatches.
    pub fn settle(self: &Arc<Self>, acked: usize, requeued: Vec<QueuedMessage>) {
        let mut st = self.state.lock();
        st.unacked = st.unacked.saturating_sub(acked + requeued.len());
        if st.deleted {
            return;
        }
        for mut m in requeued {
            m.redelivered = true;
            self.insert_ready(&mut st, m);
        }
        self.dispatch(&mut st);
    }

    /// Puts back messages that were handed to a connection but never reached the client
    /// (its channel closed first). They were not counted as unacked for no-ack consumers.
    pub fn return_undelivered(self: &Arc<Self>, messages: Vec<QueuedMessage>, were_unacked: bool) {
        if were_unacked {
            self.settle(0, messages);
            return;
        }
        let mut st = self.state.lock();
        if st.deleted {
            return;
        }
        for m in messages {
            self.insert_ready(&mut st, m);
        }
        self.dispatch(&mut st);
    }

    pub fn add_consumer(self: &Arc<Self>, consumer: Arc<Consumer>) -> AmqpResult<()> {
        let mut st = self.state.lock();
        if st.deleted {
            return Err(AmqpError::not_found(format!(
                "no queue '{}' in vhost '/'",
                self.name
            )));
        }
        if st.consumers.iter().any(|c| c.exclusive)
            || (consumer.exclusive && !st.consumers.is_empty())
        {
            return Err(AmqpError::access_refused(format!(
                "queue '{}' in vhost '/' in exclusive use",
                self.name
            )));
        }
        st.consumers.push(consumer);
        st.had_consumer = true;
        self.dispatch(&mut st);
        Ok(())
    }

    /// Removes a consumer by channel and tag. Returns it, and whether the queue is now an
    /// auto-delete queue that lost its last consumer (the caller deletes it).
    pub fn remove_consumer(
        &self,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<(Arc<Consumer>, bool)> {
        let mut st = self.state.lock();
        let at = st.consumers.iter().position(|c| {
            c.connection == connection && c.channel == channel && c.tag.as_str() == tag
        })?;
        let consumer = st.consumers.remove(at);
        let now_unused = self.auto_delete && st.had_consumer && st.consumers.is_empty();
        drop(st);
        self.touch();
        Some((consumer, now_unused))
    }

    /// basic.get: the next ready message and how many remain.
    pub fn get(&self, no_ack: bool) -> Option<(QueuedMessage, u32)> {
        self.touch();
        let mut st = self.state.lock();
        let m = st.ready.pop_front()?;
        self.forget(&mut st, &m);
        if !no_ack {
            st.unacked += 1;
        }
        Some((m, st.ready.len() as u32))
    }

    pub fn purge(&self) -> u32 {
        let mut st = self.state.lock();
        let n = st.ready.len() as u32;
        self.memory.sub(st.ready_bytes);
        st.ready.clear();
        st.ready_bytes = 0;
        n
    }

    /// Marks the queue deleted and empties it; returns the consumers to notify and how many
    /// ready messages it held.
    pub fn mark_deleted(&self) -> (Vec<Arc<Consumer>>, u32) {
        let mut st = self.state.lock();
        st.deleted = true;
        let n = st.ready.len() as u32;
        self.memory.sub(st.ready_bytes);
        st.ready.clear();
        st.ready_bytes = 0;
        (std::mem::take(&mut st.consumers), n)
    }

    pub fn message_count(&self) -> u32 {
        self.state.lock().ready.len() as u32
    }

    pub fn consumer_count(&self) -> u32 {
        self.state.lock().consumers.len() as u32
    }

    pub fn unacked_count(&self) -> u32 {
        self.state.lock().unacked as u32
    }

    pub fn is_deleted(&self) -> bool {
        self.state.lock().deleted
    }

    /// Records use (consume, get, declare) for `x-expires`.
    pub fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }

    /// True when the queue has had no consumers and no use for its whole `x-expires`.
    pub fn expired(&self) -> bool {
        let Some(expires_ms) = self.limits.expires_ms else {
            return false;
        };
        let idle = self.last_used.lock().elapsed().as_millis() as u64;
        idle >= expires_ms && self.state.lock().consumers.is_empty()
    }
}

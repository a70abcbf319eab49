//! One forwarding link between two nodes, over any byte stream the cluster transport has
//! already authenticated: [`open`] runs both halves on it — this node's remote queues
//! forwarding to the peer ([`ForwardLink`]), and the peer's remote queues served by this
//! node's real queues (`serve.rs`).
//!
//! Writes are batched: every producer (connection tasks publishing, the link task
//! delivering) appends its frames to one shared buffer under a short lock, and a writer task
//! swaps the buffer out and writes everything that piled up in one `write_all` — one
//! syscall for many frames, no allocation per frame. The link task stops taking deliveries
//! while that buffer is over [`HIGH_WATER_BYTES`], so a slow peer backs up into the serving
//! queues' consumer credit instead of into memory.

use super::frame::{self, Frame, SettleKind};
use crate::confirm::QueueAnswers;
use crate::consumer::{pipeline_cost, ConnectionEvent, ConnectionId, Consumer, Delivery};
use crate::message::Message;
use crate::queue::QueueHandle;
use crate::queue::QueuedMessage;
use bytes::BytesMut;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, Notify};

/// The serving queue's counts as last reported over the link.
#[derive(Debug, Default)]
pub struct RemoteCounts {
    pub(super) messages: AtomicU32,
    pub(super) consumers: AtomicU32,
}

/// Outgoing bytes beyond which the link task waits for the writer before taking more
/// deliveries.
pub(super) const HIGH_WATER_BYTES: usize = 4 * 1024 * 1024;

/// How often the serving side looks whether its queues' counts changed.
pub(super) const COUNTS_INTERVAL: Duration = Duration::from_millis(100);

/// The frames waiting for the writer.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    buf: Mutex<BytesMut>,
    /// The writer has something to write.
    ready: Notify,
    /// The writer wrote a batch (for a producer waiting under `HIGH_WATER_BYTES`).
    drained: Notify,
    closed: AtomicBool,
}

impl Outbox {
    /// Appends frames with `write`; false (nothing written) once the link is closed.
    pub(super) fn push(&self, write: impl FnOnce(&mut BytesMut)) -> bool {
        let mut buf = self.buf.lock();
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let was_empty = buf.is_empty();
        write(&mut buf);
        drop(buf);
        if was_empty {
            self.ready.notify_one();
        }
        true
    }

    pub(super) fn frame(&self, f: &Frame) -> bool {
        self.push(|buf| frame::put(buf, f))
    }

    pub(super) fn len(&self) -> usize {
        self.buf.lock().len()
    }

    /// Waits until the writer took what is queued (or the link closed).
    pub(super) async fn wait_below_high_water(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.len() <= HIGH_WATER_BYTES || self.closed.load(Ordering::Acquire) {
                return;
            }
            drained.await;
        }
    }

    pub(super) fn close(&self) {
        let _guard = self.buf.lock();
        self.closed.store(true, Ordering::Release);
        drop(_guard);
        self.ready.notify_one();
        self.drained.notify_waiters();
    }
}

pub(super) async fn write_batches<W: AsyncWrite + Unpin>(mut writer: W, outbox: Arc<Outbox>) {
    let mut spare = BytesMut::with_capacity(64 * 1024);
    loop {
        {
            let mut buf = outbox.buf.lock();
            std::mem::swap(&mut *buf, &mut spare);
        }
        if spare.is_empty() {
            if outbox.closed.load(Ordering::Acquire) {
                break;
            }
            outbox.ready.notified().await;
            continue;
        }
        let written = writer.write_all(&spare).await;
        spare.clear();
        outbox.drained.notify_waiters();
        if written.is_err() || writer.flush().await.is_err() {
            break;
        }
    }
    outbox.close();
    let _ = writer.shutdown().await;
}

/// What this node forwards over the link: its remote queues, their consumers, and the
/// confirms and gets waiting for the peer's answer.
#[derive(Default)]
struct Forwarding {
    counts: HashMap<u64, Arc<RemoteCounts>>,
    /// Consumers by link id, with their queue's link id and the number their deliveries are
    /// stamped with (`QueuedMessage::via`).
    consumers: HashMap<u64, (u64, u16, Arc<Consumer>)>,
    confirms: HashMap<u64, Arc<QueueAnswers>>,
    /// Gets waiting for their answer, with the number the message is stamped with.
    gets: HashMap<u64, (u16, GetAnswer)>,
    /// Questions waiting for the peer's answer (`ask.rs`).
    asks: HashMap<u64, oneshot::Sender<bytes::Bytes>>,
}

/// Where a forwarded basic.get's answer goes: the message and the ready count, or none.
type GetAnswer = oneshot::Sender<Option<(QueuedMessage, u32)>>;

/// This node's end of a link to one peer, as the remote queues use it.
pub struct ForwardLink {
    pub(super) outbox: Arc<Outbox>,
    state: Mutex<Forwarding>,
    /// Queue, consumer, publish and get ids on this link (one counter: never 0).
    next_id: AtomicU64,
    /// Set once, when the link is lost.
    lost: AtomicBool,
    /// Asks the link task to stop (`close`).
    pub(super) closing: Notify,
    /// Told when the link is lost.
    lost_notify: Notify,
}

impl std::fmt::Debug for ForwardLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardLink")
            .field("lost", &self.lost.load(Ordering::Relaxed))
            .finish()
    }
}

/// A link's end: the forwarding half this node's remote queues send through; its reader and
/// writer tasks are started by `serve::open`, whose reader also serves the peer's requests.
pub(super) fn new_link() -> Arc<ForwardLink> {
    Arc::new(ForwardLink {
        outbox: Arc::default(),
        state: Mutex::default(),
        next_id: AtomicU64::new(1),
        lost: AtomicBool::new(false),
        closing: Notify::new(),
        lost_notify: Notify::new(),
    })
}

/// How long a consumer the serving node moved (`Frame::Moved`) waits before it is attached
/// again: about a heartbeat, time for this node to learn the new leader.
const MOVED_RETRY: Duration = Duration::from_millis(50);

impl Outbox {
    /// Resolves once the writer gave up (the peer stopped reading or the socket failed).
    pub(super) async fn ready_closed(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            drained.await;
        }
    }
}

impl ForwardLink {
    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the link is up (not yet lost or closed).
    pub fn is_alive(&self) -> bool {
        !self.lost.load(Ordering::Acquire)
    }

    /// Closes the link (the peer left the cluster; tests): both halves act as on a loss.
    pub fn close(&self) {
        self.closing.notify_one();
    }

    /// Resolves once the link is lost or closed and both halves have cleaned up.
    pub async fn closed(&self) {
        loop {
            let lost = self.lost_notify.notified();
            tokio::pin!(lost);
            lost.as_mut().enable();
            if !self.is_alive() {
                return;
            }
            lost.await;
        }
    }

    /// Gives queue `queue` of `vhost` a link id; the peer reports its counts into `counts`.
    pub(super) fn bind(&self, vhost: &str, queue: &str, counts: Arc<RemoteCounts>) -> u64 {
        let qid = self.next_id();
        self.state.lock().counts.insert(qid, counts);
        self.outbox.frame(&Frame::Bind {
            qid,
            vhost: vhost.to_owned(),
            queue: queue.to_owned(),
        });
        qid
    }

    /// The record is gone: cancels its consumers at the peer and returns them.
    pub(super) fn unbind(&self, qid: u64) -> Vec<Arc<Consumer>> {
        let consumers = {
            let mut st = self.state.lock();
            st.counts.remove(&qid);
            let cids: Vec<u64> = st
                .consumers
                .iter()
                .filter(|(_, (q, _, _))| *q == qid)
                .map(|(cid, _)| *cid)
                .collect();
            cids.into_iter()
                .filter_map(|cid| st.consumers.remove(&cid).map(|(_, _, c)| (cid, c)))
                .collect::<Vec<_>>()
        };
        self.outbox.push(|buf| {
            for (cid, _) in &consumers {
                frame::put(buf, &Frame::Cancel { cid: *cid });
            }
            frame::put(buf, &Frame::Unbind { qid });
        });
        consumers.into_iter().map(|(_, c)| c).collect()
    }

    pub(super) fn publish(&self, qid: u64, message: &Message, confirm: Option<&Arc<QueueAnswers>>) {
        let seq = match confirm {
            None => 0,
            Some(c) => {
                c.expect_one();
                let seq = self.next_id();
                self.state.lock().confirms.insert(seq, c.clone());
                seq
            }
        };
        let sent = self.is_alive()
            && self
                .outbox
                .push(|buf| frame::put_publish(buf, qid, seq, message));
        if !sent && seq != 0 {
            // Never left hanging: a publish the peer cannot get is nacked.
            if let Some(c) = self.state.lock().confirms.remove(&seq) {
                c.answered(false);
            }
        }
    }

    /// Registers `consumer` at the peer; its deliveries are stamped `via`. Gives the consumer
    /// back when the link is lost meanwhile (its caller decides: cancel it, or wait for the
    /// next link).
    pub(super) fn consume(
        &self,
        qid: u64,
        via: u16,
        consumer: Arc<Consumer>,
    ) -> Result<(), Arc<Consumer>> {
        let cid = self.next_id();
        let (prefetch, no_ack, exclusive) =
            (consumer.prefetch_count, consumer.no_ack, consumer.exclusive);
        if !self.is_alive() {
            return Err(consumer);
        }
        let kept = consumer.clone();
        self.state
            .lock()
            .consumers
            .insert(cid, (qid, via, consumer));
        let sent = self.outbox.frame(&Frame::Consume {
            cid,
            qid,
            prefetch,
            no_ack,
            exclusive,
        });
        if !sent && self.state.lock().consumers.remove(&cid).is_some() {
            return Err(kept);
        }
        Ok(())
    }

    pub(super) fn cancel(
        &self,
        qid: u64,
        connection: ConnectionId,
        channel: u16,
        tag: &str,
    ) -> Option<Arc<Consumer>> {
        let (cid, consumer) = {
            let mut st = self.state.lock();
            let cid = st.consumers.iter().find_map(|(cid, (q, _, c))| {
                (*q == qid
                    && c.connection == connection
                    && c.channel == channel
                    && c.tag.as_str() == tag)
                    .then_some(*cid)
            })?;
            st.consumers.remove(&cid).map(|(_, _, c)| (cid, c))?
        };
        self.outbox.frame(&Frame::Cancel { cid });
        Some(consumer)
    }

    /// Settles messages the client held; after a loss there is nothing left to settle (the
    /// peer requeued them).
    pub(super) fn settle(&self, qid: u64, kind: SettleKind, ids: Vec<u64>) {
        if self.is_alive() {
            self.outbox.frame(&Frame::Settle { qid, kind, ids });
        }
    }

    /// basic.get at the peer; the message is stamped `via`.
    pub(super) async fn get(
        &self,
        qid: u64,
        no_ack: bool,
        via: u16,
    ) -> Option<(QueuedMessage, u32)> {
        let req = self.next_id();
        let (tx, rx) = oneshot::channel();
        self.state.lock().gets.insert(req, (via, tx));
        if !self.is_alive() || !self.outbox.frame(&Frame::Get { req, qid, no_ack }) {
            self.state.lock().gets.remove(&req);
            return None;
        }
        rx.await.ok().flatten()
    }

    /// Asks the peer `topic` (`ask.rs`); None when no answer came within `timeout` or the
    /// link went.
    pub(super) async fn ask(
        &self,
        topic: &str,
        body: bytes::Bytes,
        timeout: Duration,
    ) -> Option<bytes::Bytes> {
        let req = self.next_id();
        let (tx, rx) = oneshot::channel();
        self.state.lock().asks.insert(req, tx);
        let asked = Frame::Ask {
            req,
            topic: topic.to_owned(),
            body,
        };
        if !self.is_alive() || !self.outbox.frame(&asked) {
            self.state.lock().asks.remove(&req);
            return None;
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(answer) => answer.ok(),
            Err(_) => {
                self.state.lock().asks.remove(&req);
                None
            }
        }
    }

    pub(super) fn purge(&self, qid: u64) {
        self.outbox.frame(&Frame::Purge { qid });
    }

    /// Handles a frame that answers this node's requests; gives back the peer's requests.
    pub(super) fn on_answer(&self, f: Frame) -> Option<Frame> {
        match f {
            Frame::Confirm { seq, ok } => {
                if let Some(c) = self.state.lock().confirms.remove(&seq) {
                    c.answered(ok);
                }
            }
            Frame::Deliver {
                cid,
                qid,
                id,
                redelivered,
                message,
            } => self.deliver(cid, qid, id, redelivered, message),
            Frame::Cancelled { cid } => {
                let consumer = self.state.lock().consumers.remove(&cid);
                if let Some((_, _, c)) = consumer {
                    tracing::debug!(consumer = %c.tag, "the serving node cancelled a forwarded consumer");
                    cancel_locally(&c);
                }
            }
            Frame::Moved { cid } => {
                let consumer = self.state.lock().consumers.remove(&cid);
                if let Some((_, _, c)) = consumer {
                    // After a short pause: the peer may have answered before this node learnt
                    // the new leader, and attaching at once would go back to the same peer.
                    tokio::spawn(async move {
                        tokio::time::sleep(MOVED_RETRY).await;
                        crate::queue::reattach_or_cancel(vec![c]);
                    });
                }
            }
            Frame::Got { req, got } => {
                let (via, waiting) = self.state.lock().gets.remove(&req)?;
                let got = got.and_then(|(id, redelivered, count, message)| {
                    Some((
                        QueuedMessage {
                            id,
                            message: Arc::new(frame::message(message)?),
                            redelivered,
                            // AMQP 1.0's per-copy count stays on the serving node.
                            delivery_count: 0,
                            expires_at: None,
                            via,
                            store_ref: None,
                        },
                        count,
                    ))
                });
                let _ = waiting.send(got);
            }
            Frame::Answer { req, body } => {
                if let Some(waiting) = self.state.lock().asks.remove(&req) {
                    let _ = waiting.send(body);
                }
            }
            Frame::Counts {
                qid,
                messages,
                consumers,
            } => {
                if let Some(counts) = self.state.lock().counts.get(&qid) {
                    counts.messages.store(messages, Ordering::Relaxed);
                    counts.consumers.store(consumers, Ordering::Relaxed);
                }
            }
            request => return Some(request),
        }
        None
    }

    fn deliver(&self, cid: u64, qid: u64, id: u64, redelivered: bool, message: bytes::Bytes) {
        let consumer = self
            .state
            .lock()
            .consumers
            .get(&cid)
            .map(|(_, via, c)| (*via, c.clone()));
        let decoded = frame::message(message);
        let (Some((via, consumer)), Some(decoded)) = (consumer, decoded) else {
            // Cancelled while the delivery was on its way (or unreadable): back to the queue.
            // (For a no-ack consumer the peer holds nothing and ignores this.)
            self.settle(qid, SettleKind::Requeue, vec![id]);
            return;
        };
        let decoded = Arc::new(decoded);
        let cost = pipeline_cost(&decoded);
        consumer.take_credit(cost);
        let delivery = Delivery {
            consumer: consumer.clone(),
            queue: consumer.queue.upgrade().map(QueueHandle::new),
            message: QueuedMessage {
                id,
                message: decoded,
                redelivered,
                delivery_count: 0,
                expires_at: None,
                via,
                store_ref: None,
            },
        };
        if consumer.send(ConnectionEvent::Deliver(delivery)).is_err() {
            // The connection is gone; its channel close cancels the consumer.
            consumer.return_credit(cost);
            if !consumer.no_ack {
                self.settle(qid, SettleKind::Requeue, vec![id]);
            }
        }
    }

    /// The link is gone: consumers are cancelled, confirms nacked, gets answered empty.
    pub(super) fn link_lost(&self) {
        let (consumers, confirms) = {
            let mut st = self.state.lock();
            self.lost.store(true, Ordering::Release);
            st.gets.clear();
            st.asks.clear();
            (
                std::mem::take(&mut st.consumers),
                std::mem::take(&mut st.confirms),
            )
        };
        // A classic queue's consumers are cancelled (its home node went); a quorum queue's
        // wait for its next leader.
        crate::queue::reattach_or_cancel(consumers.into_values().map(|(_, _, c)| c).collect());
        for (_, c) in confirms {
            c.answered(false);
        }
        self.lost_notify.notify_waiters();
        tracing::info!("forwarding link lost");
    }
}

/// Tells the consumer's connection that the consumer is gone (basic.cancel).
fn cancel_locally(consumer: &Consumer) {
    let _ = consumer.send(ConnectionEvent::ConsumerCancelled {
        channel: consumer.channel,
        consumer_tag: consumer.tag.clone(),
    });
}

//! The serving half of a forwarding link: the peer's remote queues, acted out on this
//! node's real queues the way a client connection would. Consumers are registered on the
//! queue with the link's own connection id and events channel; the link task drains that
//! channel into frames, so a queue hands its deliveries outward exactly as to a local
//! connection and knows nothing of peers. Messages the peer's clients hold stay held here;
//! when the link is lost they are requeued (redelivered), as a closing channel's are.

use super::count_watch::{CountWatch, QUIET_AFTER_CHECKS};
use super::frame::{self, Frame, SettleKind};
use super::link::{new_link, write_batches, ForwardLink, Outbox, COUNTS_INTERVAL};
use crate::alarm::AlarmSet;
use crate::broker::Broker;
use crate::confirm::{Confirm, ConfirmTo};
use crate::consumer::{pipeline_cost, ChannelFlow, ConnectionEvent, ConnectionId, Consumer};
use crate::event_channel::{event_channel, EventReceiver, EventSender};
use crate::queue::QueueHandle;
use crate::queue::{Queue, QueuedMessage};
use crate::quorum::QuorumQueue;
use crate::remote::RemoteQueue;
use crate::vhost::{publish_to_queue, PublishScratch};
use bytes::BytesMut;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;
use warren_codec::ShortStr;
use warren_store::{DurableState, Store};

/// Runs a forwarding link over `stream` (already authenticated by the cluster transport):
/// serves the peer's requests against `broker`'s queues and returns the end this node's
/// remote queues forward through. Both nodes call it on their end of the connection.
pub fn open<S>(stream: S, broker: Arc<Broker>) -> Arc<ForwardLink>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let link = new_link();
    let (reader, writer) = tokio::io::split(stream);
    tokio::spawn(write_batches(writer, link.outbox.clone()));
    tokio::spawn(run(reader, broker, link.clone()));
    link
}

async fn run<R: AsyncRead + Unpin>(mut reader: R, broker: Arc<Broker>, link: Arc<ForwardLink>) {
    let connection: ConnectionId = broker.next_connection_id();
    // This node's alarms, told to the peer now and on every change (`alarm.rs`).
    let alarms = broker.clone();
    let mut local_alarms = alarms.alarms.subscribe_local();
    let tell_alarms = |bits: u8| Frame::Alarms {
        node: alarms.node_name().to_owned(),
        bits,
    };
    link.outbox
        .frame(&tell_alarms(local_alarms.borrow_and_update().bits()));
    let (mut serving, mut events, mut gets) = Serving::new(broker, connection, link.outbox.clone());
    let mut incoming = BytesMut::with_capacity(64 * 1024);
    let mut counts = tokio::time::interval(COUNTS_INTERVAL);
    counts.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut durable = serving.durable_watch();
    'link: loop {
        let waits_store = serving.waits_for_store();
        tokio::select! {
            read = reader.read_buf(&mut incoming) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
                loop {
                    match frame::take(&mut incoming) {
                        Ok(Some(Frame::Alarms { node, bits })) => {
                            alarms.alarms.set_remote(connection, &node, AlarmSet::from_bits(bits));
                        }
                        Ok(Some(f)) => {
                            if let Some(f) = link.on_answer(f) {
                                serving.on_request(f).await;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "forwarding link: unreadable frame");
                            break 'link;
                        }
                    }
                }
            }
            Some(event) = events.recv() => {
                link.outbox.wait_below_high_water().await;
                serving.on_event(event);
            }
            Some(got) = gets.recv() => serving.on_got(got),
            _ = counts.tick() => serving.report_counts(),
            Ok(()) = local_alarms.changed() => {
                link.outbox.frame(&tell_alarms(local_alarms.borrow_and_update().bits()));
            }
            changed = async {
                match durable.as_mut() {
                    Some(d) => d.changed().await,
                    None => std::future::pending().await,
                }
            }, if waits_store => {
                if changed.is_err() {
                    durable = None;
                }
                serving.flush_confirms();
            }
            _ = link.closing.notified() => break,
            _ = link.outbox.ready_closed() => break,
        }
    }
    link.outbox.close();
    alarms.alarms.forget_remote(connection);
    serving.link_lost(&mut events);
    link.link_lost();
}

/// The channel number the link's consumers have on the serving queues (the link is one
/// connection; consumer tags tell its consumers apart).
const LINK_CHANNEL: u16 = 0;

/// A basic.get answered by a queue (asynchronously for quorum and remote queues).
pub(super) struct Got {
    req: u64,
    qid: u64,
    queue: Arc<Queue>,
    no_ack: bool,
    got: Option<(QueuedMessage, u32)>,
}

/// A queue the peer named.
struct Bound {
    vhost: String,
    name: ShortStr,
    /// The queue last found under the name (looked up again once it is deleted).
    queue: Option<Arc<Queue>>,
    /// The counts last reported.
    reported: Option<(u32, u32)>,
    /// Count checks in a row that found the counts as reported (see [`QUIET_AFTER_CHECKS`]).
    unchanged_checks: u32,
}

/// A message a peer's client holds.
struct Held {
    queue: Arc<Queue>,
    message: QueuedMessage,
    /// The consumer it was delivered to (none for basic.get).
    consumer: Option<Arc<Consumer>>,
}

/// A publish waiting for its confirm: the peer's sequence number and the publish's confirm
/// (`crate::confirm`, the same as any channel's).
type PendingConfirm = (u64, Confirm);

pub(super) struct Serving {
    broker: Arc<Broker>,
    connection: ConnectionId,
    outbox: Arc<Outbox>,
    events: EventSender<ConnectionEvent>,
    gets: UnboundedSender<Got>,
    queues: HashMap<u64, Bound>,
    /// The link's consumers by the peer's id: their queue and its link id.
    consumers: HashMap<u64, (u64, Arc<Queue>, Arc<Consumer>)>,
    held: HashMap<(u64, u64), Held>,
    pending: VecDeque<PendingConfirm>,
    /// The publish path's buffers (`publish_to_queue`).
    publish_scratch: PublishScratch,
    /// Which bound queues a count round looks at (`report_counts`).
    count_watch: CountWatch,
}

impl Serving {
    pub(super) fn new(
        broker: Arc<Broker>,
        connection: ConnectionId,
        outbox: Arc<Outbox>,
    ) -> (
        Serving,
        EventReceiver<ConnectionEvent>,
        UnboundedReceiver<Got>,
    ) {
        let (events, events_rx) = event_channel();
        let (gets, gets_rx) = unbounded_channel();
        let serving = Serving {
            broker,
            connection,
            outbox,
            events,
            gets,
            queues: HashMap::new(),
            consumers: HashMap::new(),
            held: HashMap::new(),
            pending: VecDeque::new(),
            publish_scratch: PublishScratch::default(),
            count_watch: CountWatch::default(),
        };
        (serving, events_rx, gets_rx)
    }

    fn store(&self) -> Option<&Store> {
        self.broker.store()
    }

    /// Where the store reports durable records, for confirms waiting on fsync.
    pub(super) fn durable_watch(&self) -> Option<watch::Receiver<DurableState>> {
        self.store().map(Store::durable_watch)
    }

    pub(super) fn waits_for_store(&self) -> bool {
        self.pending
            .iter()
            .any(|(_, confirm)| confirm.waits_for_store())
    }

    /// The live queue bound as `qid`, which the peer acts on: its counts are checked every
    /// round again for a while.
    fn queue(&mut self, qid: u64) -> Option<Arc<Queue>> {
        if let Some(bound) = self.queues.get_mut(&qid) {
            bound.unchanged_checks = 0;
            self.count_watch.heat(qid);
        }
        self.live_queue(qid)
    }

    /// The live queue bound as `qid`.
    fn live_queue(&mut self, qid: u64) -> Option<Arc<Queue>> {
        let bound = self.queues.get_mut(&qid)?;
        if let Some(q) = &bound.queue {
            if !q.is_deleted() && QuorumQueue::of(q).is_none_or(|qq| qq.serves_here()) {
                return Some(q.clone());
            }
        }
        bound.queue = self
            .broker
            .vhost(&bound.vhost)
            .and_then(|v| v.queue(&bound.name))
            // A remote record here is not a queue this node serves: no loops.
            .filter(|q| RemoteQueue::of(q).is_none())
            // Nor a quorum queue another node leads: its leader serves it.
            .filter(|q| QuorumQueue::of(q).is_none_or(|qq| qq.serves_here()));
        bound.queue.clone()
    }

    /// A quorum queue bound as `qid` with a member here that does not serve it now: its
    /// group is still starting, or another member leads, or an election is on. It takes the
    /// publish all the same — its proposer keeps it until this member leads or forwards it to
    /// the leader, confirmed once the leader committed it — where treating it as gone would
    /// confirm a publish nobody enqueued.
    fn member_quorum_queue(&self, qid: u64) -> Option<Arc<Queue>> {
        let bound = self.queues.get(&qid)?;
        self.broker
            .vhost(&bound.vhost)
            .and_then(|v| v.queue(&bound.name))
            .filter(|q| RemoteQueue::of(q).is_none())
            .filter(|q| QuorumQueue::of(q).is_some_and(|qq| !qq.is_deleted()))
    }

    pub(super) async fn on_request(&mut self, f: Frame) {
        match f {
            Frame::Bind { qid, vhost, queue } => {
                let name = ShortStr::from(queue.as_str());
                self.count_watch.bind(qid, &vhost, &name);
                let bound = Bound {
                    vhost,
                    name,
                    queue: None,
                    reported: None,
                    unchanged_checks: 0,
                };
                if let Some(old) = self.queues.insert(qid, bound) {
                    self.count_watch.unbind(qid, &old.vhost, &old.name);
                    self.count_watch.heat(qid);
                }
                self.report_counts();
            }
            Frame::Unbind { qid } => {
                if let Some(old) = self.queues.remove(&qid) {
                    self.count_watch.unbind(qid, &old.vhost, &old.name);
                }
            }
            Frame::Publish { qid, seq, message } => self.publish(qid, seq, message).await,
            Frame::Consume {
                cid,
                qid,
                prefetch,
                no_ack,
                exclusive,
            } => self.consume(cid, qid, prefetch, no_ack, exclusive),
            Frame::Cancel { cid } => self.cancel(cid),
            Frame::Settle { qid, kind, ids } => self.settle(qid, kind, ids),
            Frame::Get { req, qid, no_ack } => {
                let Some(queue) = self.queue(qid) else {
                    self.outbox.frame(&Frame::Got { req, got: None });
                    return;
                };
                let gets = self.gets.clone();
                tokio::spawn(async move {
                    let got = match queue.answers_get_later() {
                        true => queue.get_later(no_ack).await,
                        false => queue.get(no_ack),
                    };
                    let answer = Got {
                        req,
                        qid,
                        queue,
                        no_ack,
                        got,
                    };
                    if let Err(lost) = gets.send(answer) {
                        // The link went meanwhile: a message taken for it goes back.
                        let Got { queue, got, .. } = lost.0;
                        if let (Some((message, _)), false) = (got, no_ack) {
                            queue.settle(Vec::new(), vec![message], Vec::new());
                        }
                    }
                });
            }
            Frame::Purge { qid } => {
                if let Some(queue) = self.queue(qid) {
                    queue.purge();
                }
            }
            Frame::Ask { req, topic, body } => {
                let answer = super::ask::answer(self.broker.forward_peers(), &topic, body);
                let outbox = self.outbox.clone();
                tokio::spawn(async move {
                    let body = answer.await;
                    outbox.frame(&Frame::Answer { req, body });
                });
            }
            // Answers are the forwarding half's (`ForwardLink::on_answer`).
            _ => {}
        }
    }

    /// A publish forwarded by the peer, which routed it to queue `qid`: stored and
    /// enqueued by the one publish path (`publish_to_queue`), its confirm (if the peer asked,
    /// `seq` not 0) sent back in publish order once it is settled.
    async fn publish(&mut self, qid: u64, seq: u64, framed: bytes::Bytes) {
        let Some(message) = frame::message(framed) else {
            if seq != 0 {
                self.pending.push_back((seq, Confirm::settled(true)));
                self.flush_confirms();
            }
            return;
        };
        let message = Arc::new(message);
        // A queue deleted meanwhile takes the message as a deleted local queue does. A quorum
        // queue this member does not serve right now is not gone (`member_quorum_queue`):
        // starting a group takes openraft long enough, 100 ms in a debug build, and a member
        // just initialized or in an election does not lead yet, for publishes to arrive.
        let Some(queue) = self.queue(qid).or_else(|| self.member_quorum_queue(qid)) else {
            if seq != 0 {
                self.pending.push_back((seq, Confirm::settled(false)));
                self.flush_confirms();
            }
            return;
        };
        let confirm_to = match seq {
            0 => ConfirmTo::Nobody,
            _ => ConfirmTo::Connection(&self.events),
        };
        let confirm = publish_to_queue(
            self.broker.store(),
            &queue,
            &message,
            confirm_to,
            &mut self.publish_scratch,
        )
        .unwrap_or_else(|e| {
            tracing::warn!(queue = %queue.name, error = %e, "store: a forwarded publish could not be stored");
            Confirm::settled(true)
        });
        if seq != 0 {
            self.pending.push_back((seq, confirm));
            self.flush_confirms();
        }
    }

    /// Sends the confirms that are settled, in publish order (as a channel does).
    pub(super) fn flush_confirms(&mut self) {
        let durable = self.store().map(Store::durable_state);
        let mut answers = Vec::new();
        while let Some((seq, confirm)) = self.pending.front() {
            let Some(ok) = confirm.outcome(durable.as_ref()) else {
                break;
            };
            answers.push(Frame::Confirm { seq: *seq, ok });
            self.pending.pop_front();
        }
        if !answers.is_empty() {
            self.outbox.push(|buf| {
                for a in &answers {
                    frame::put(buf, a);
                }
            });
        }
    }

    fn tag(cid: u64) -> ShortStr {
        ShortStr::from(format!("warren.link-{cid}").as_str())
    }

    fn cid_of(tag: &str) -> Option<u64> {
        tag.strip_prefix("warren.link-")?.parse().ok()
    }

    fn consume(&mut self, cid: u64, qid: u64, prefetch: u32, no_ack: bool, exclusive: bool) {
        let Some(queue) = self.queue(qid) else {
            // A quorum queue whose member here does not lead now (its group still starting
            // after a restart, an election on, another member leading): the peer attaches the
            // consumer again a moment later, through the leader it knows by then — never
            // cancelled for it, as RabbitMQ's quorum queue consumers are not.
            let moved = self.member_quorum_queue(qid).is_some();
            tracing::debug!(qid, moved, "forwarded consume of a queue not served here");
            self.outbox.frame(&match moved {
                true => Frame::Moved { cid },
                false => Frame::Cancelled { cid },
            });
            return;
        };
        let consumer = Arc::new(Consumer::new(
            Self::tag(cid),
            LINK_CHANNEL,
            self.connection,
            no_ack,
            exclusive,
            prefetch,
            Arc::new(ChannelFlow::default()),
            Arc::downgrade(&queue),
            self.events.clone(),
        ));
        // No client channel holds it: when its queue stops being served here it is cancelled
        // (and the peer told), never attached again from this node (`reattach_or_cancel`).
        consumer.detach();
        // Registered first: deliveries may start inside add_consumer.
        self.consumers
            .insert(cid, (qid, queue.clone(), consumer.clone()));
        if let Err(e) = queue.add_consumer(consumer) {
            // Exclusive use elsewhere, or the queue just went: the peer cancels its consumer.
            tracing::debug!(queue = %queue.name, error = %e.text, "forwarded consume refused");
            self.consumers.remove(&cid);
            self.outbox.frame(&Frame::Cancelled { cid });
        }
    }

    fn cancel(&mut self, cid: u64) {
        if let Some((_, queue, _)) = self.consumers.remove(&cid) {
            self.remove_consumer(&queue, cid);
        }
    }

    fn remove_consumer(&self, queue: &Arc<Queue>, cid: u64) {
        let vhost = queue.home().and_then(|h| self.broker.vhost(h.vhost_name()));
        match vhost {
            Some(vhost) => {
                let handle = QueueHandle::new(queue.clone());
                let tag = Self::tag(cid);
                self.broker
                    .stop_consuming(&vhost, &handle, self.connection, LINK_CHANNEL, &tag);
            }
            // The vhost is gone, and its queues with it.
            None => {
                queue.remove_consumer(self.connection, LINK_CHANNEL, &Self::tag(cid));
            }
        }
    }

    fn settle(&mut self, qid: u64, kind: SettleKind, ids: Vec<u64>) {
        let mut by_queue: Vec<(Arc<Queue>, Vec<QueuedMessage>)> = Vec::new();
        let mut consumers: Vec<Arc<Consumer>> = Vec::new();
        for id in ids {
            // Unknown ids were settled already (a duplicate, a no-ack delivery): no-ops.
            let Some(held) = self.held.remove(&(qid, id)) else {
                continue;
            };
            if let Some(c) = held.consumer {
                c.settled(1);
                if !consumers.iter().any(|k| Arc::ptr_eq(k, &c)) {
                    consumers.push(c);
                }
            }
            match by_queue
                .iter_mut()
                .find(|(q, _)| Arc::ptr_eq(q, &held.queue))
            {
                Some((_, messages)) => messages.push(held.message),
                None => by_queue.push((held.queue, vec![held.message])),
            }
        }
        for (queue, messages) in by_queue {
            match kind {
                SettleKind::Ack => queue.settle(messages, Vec::new(), Vec::new()),
                SettleKind::Requeue => queue.settle(Vec::new(), messages, Vec::new()),
                SettleKind::Reject => {
                    // A discard is a failed delivery (as a client channel counts it).
                    let mut messages = messages;
                    for m in &mut messages {
                        m.delivery_count = m.delivery_count.saturating_add(1);
                    }
                    queue.settle(Vec::new(), Vec::new(), messages)
                }
            }
        }
        for c in consumers {
            c.wake_if_starved();
        }
    }

    pub(super) fn on_event(&mut self, event: ConnectionEvent) {
        match event {
            ConnectionEvent::Deliver(d) => {
                let cid = Self::cid_of(&d.consumer.tag);
                let cost = pipeline_cost(&d.message.message);
                let target = cid.and_then(|cid| self.consumers.get(&cid).map(|(q, ..)| (cid, *q)));
                let (Some((cid, qid)), Some(queue)) = (target, d.queue.clone()) else {
                    // Its consumer was cancelled meanwhile: an unacked delivery goes back.
                    d.consumer.delivered(cost);
                    if let (Some(queue), false) = (d.queue, d.consumer.no_ack) {
                        queue.settle(Vec::new(), vec![d.message], Vec::new());
                    }
                    return;
                };
                let m = &d.message;
                self.outbox
                    .push(|buf| frame::put_deliver(buf, cid, qid, m.id, m.redelivered, &m.message));
                d.consumer.delivered(cost);
                if !d.consumer.no_ack {
                    self.held.insert(
                        (qid, d.message.id),
                        Held {
                            queue: queue.into_queue(),
                            message: d.message,
                            consumer: Some(d.consumer),
                        },
                    );
                }
            }
            ConnectionEvent::ConsumerCancelled { consumer_tag, .. } => {
                if let Some(cid) = Self::cid_of(&consumer_tag) {
                    if let Some((_, queue, _)) = self.consumers.remove(&cid) {
                        // A quorum queue keeps its consumers whatever ended this one here
                        // (the leadership moved away — and may be back already, a restarted
                        // leader electing itself again — or a refusal while it did not lead):
                        // the peer attaches them again through the leader. Only a deleted
                        // queue cancels them, as in RabbitMQ.
                        let moved = QuorumQueue::of(&queue).is_some_and(|qq| !qq.is_deleted());
                        tracing::debug!(queue = %queue.name, moved, "a forwarded consumer ended here");
                        self.outbox.frame(&match moved {
                            true => Frame::Moved { cid },
                            false => Frame::Cancelled { cid },
                        });
                    }
                }
            }
            ConnectionEvent::ConfirmsSettled => self.flush_confirms(),
            // basic.get is answered through `gets`; the link is no client connection to close.
            ConnectionEvent::GetAnswered { .. } | ConnectionEvent::Close { .. } => {}
        }
    }

    pub(super) fn on_got(&mut self, got: Got) {
        let Got {
            req,
            qid,
            queue,
            no_ack,
            got,
        } = got;
        let Some((message, count)) = got else {
            self.outbox.frame(&Frame::Got { req, got: None });
            return;
        };
        self.outbox.push(|buf| {
            frame::put_got(
                buf,
                req,
                Some((message.id, message.redelivered, count, &message.message)),
            )
        });
        if !no_ack {
            self.held.insert(
                (qid, message.id),
                Held {
                    queue,
                    message,
                    consumer: None,
                },
            );
        }
    }

    /// Reports the counts of the queues the peer named that changed since the last report,
    /// looking only at the hot and the marked ones ([`CountWatch`]).
    pub(super) fn report_counts(&mut self) {
        let qids = self.count_watch.due(&self.broker);
        let mut reports = Vec::new();
        for qid in qids {
            // Cleared before the read, served here or not (a quorum queue whose leadership
            // comes here is marked then): a change from here on marks the queue again.
            let record = self
                .queues
                .get(&qid)
                .and_then(|bound| self.broker.vhost(&bound.vhost)?.queue(&bound.name));
            if let Some(record) = record {
                record.begin_reading();
            }
            let counts = self
                .live_queue(qid)
                .map_or((0, 0), |q| (q.message_count(), q.consumer_count()));
            let Some(bound) = self.queues.get_mut(&qid) else {
                continue;
            };
            if bound.reported == Some(counts) {
                bound.unchanged_checks = bound.unchanged_checks.saturating_add(1);
            } else {
                bound.unchanged_checks = 0;
                bound.reported = Some(counts);
                reports.push(Frame::Counts {
                    qid,
                    messages: counts.0,
                    consumers: counts.1,
                });
            }
            match bound.unchanged_checks >= QUIET_AFTER_CHECKS && counts.1 == 0 {
                true => self.count_watch.cool(qid),
                false => self.count_watch.heat(qid),
            }
        }
        if !reports.is_empty() {
            self.outbox.push(|buf| {
                for r in &reports {
                    frame::put(buf, r);
                }
            });
        }
    }

    /// The peer is gone: its consumers leave their queues, and what its clients held goes
    /// back (redelivered), as when a client connection closes.
    pub(super) fn link_lost(&mut self, events: &mut EventReceiver<ConnectionEvent>) {
        self.count_watch.forget(&self.broker);
        for (cid, (_, queue, _)) in std::mem::take(&mut self.consumers) {
            self.remove_consumer(&queue, cid);
        }
        let mut held: Vec<(Arc<Queue>, QueuedMessage)> = self
            .held
            .drain()
            .map(|(_, h)| (h.queue, h.message))
            .collect();
        // Deliveries handed over before the consumers left go back too.
        while let Ok(event) = events.try_recv() {
            if let ConnectionEvent::Deliver(d) = event {
                d.consumer.delivered(pipeline_cost(&d.message.message));
                if let (Some(queue), false) = (d.queue, d.consumer.no_ack) {
                    held.push((queue.into_queue(), d.message));
                }
            }
        }
        held.sort_by_key(|(_, m)| m.id);
        let mut by_queue: Vec<(Arc<Queue>, Vec<QueuedMessage>)> = Vec::new();
        for (queue, message) in held {
            match by_queue.iter_mut().find(|(q, _)| Arc::ptr_eq(q, &queue)) {
                Some((_, messages)) => messages.push(message),
                None => by_queue.push((queue, vec![message])),
            }
        }
        for (queue, mut messages) in by_queue {
            // As a client channel's teardown: still unacked is a failed delivery.
            for m in &mut messages {
                m.delivery_count = m.delivery_count.saturating_add(1);
            }
            // Their client's node is gone: not a failed delivery for a type that counts them.
            queue.release_disconnected(messages);
        }
        self.pending.clear();
    }
}

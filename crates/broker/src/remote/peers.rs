//! This node's forwarding links by peer node: [`ForwardPeers`] holds one [`PeerLink`] per
//! node, and a remote queue record holds the [`PeerLink`] of its serving node, never a link
//! itself — so when a link is lost and the pair reconnects, every record reaches the new
//! link (each record binds itself on it again, `RemoteQueue::bound`).
//!
//! Links come and go here: the cluster transport hands this node every forwarding connection
//! it accepts, and the membership watcher dials the peers this node dials (the lower node id
//! of a pair dials, as for the Raft link) with [`PeerLink::may_dial`]'s backoff while the peer
//! is away. A link is one connection per node pair carrying both directions (`link.rs`).

use super::link::{ForwardLink, RemoteCounts};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

/// An answer being worked out (see `ask.rs`).
pub type AnswerFuture = std::pin::Pin<Box<dyn std::future::Future<Output = bytes::Bytes> + Send>>;

/// What answers the other nodes' questions on this node (`ask.rs`).
pub trait PeerAnswers: Send + Sync {
    /// The answer to `topic` with argument `body` (empty when the topic is unknown).
    fn answer(&self, topic: &str, body: bytes::Bytes) -> AnswerFuture;
}

/// Registered answerers are kept as `Arc<dyn PeerAnswers>`.
pub(super) type Answers = Arc<dyn PeerAnswers>;

/// The first wait between failed dials to a peer; it doubles up to [`DIAL_BACKOFF_MAX`].
const DIAL_BACKOFF_MIN: Duration = Duration::from_millis(500);
const DIAL_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// A remote queue's binding: its id on the link it was last bound on.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) vhost: String,
    pub(super) queue: String,
    pub(super) counts: Arc<RemoteCounts>,
    /// The link and id it was last bound on, and the binding's number (what the messages
    /// delivered over it are stamped with, `QueuedMessage::via`); a retired record keeps them
    /// (unbound at the peer) so that messages delivered through it can still be settled there.
    pub(super) bound: Mutex<Option<(Arc<ForwardLink>, u64, u16)>>,
    /// Where binding numbers come from: the record's own, or shared by a quorum queue's
    /// delegates, so that no two bindings of one queue that may still be settled through share
    /// a number (it wraps after 65,535; 0 is never one).
    pub(super) vias: Arc<AtomicU16>,
    /// Set once the record went (`RemoteQueue::mark_deleted`): it never binds again, so no
    /// consumer can be registered through a record nobody settles through.
    pub(super) retired: AtomicBool,
}

impl Record {
    /// The record's link id on `link` and the binding's number, binding it there first if
    /// needed; None once retired.
    pub(super) fn bind_on(&self, link: &Arc<ForwardLink>) -> Option<(u64, u16)> {
        let mut bound = self.bound.lock();
        if self.retired.load(Ordering::Acquire) {
            return None;
        }
        if let Some((current, qid, via)) = &*bound {
            if Arc::ptr_eq(current, link) {
                return Some((*qid, *via));
            }
        }
        let qid = link.bind(&self.vhost, &self.queue, self.counts.clone());
        let via = next_via(&self.vias);
        *bound = Some((link.clone(), qid, via));
        Some((qid, via))
    }

    /// Retires the record (under the binding's lock, so a bind in progress either completes
    /// first or never happens); answers the binding to unbind at the peer, if any.
    pub(super) fn retire(&self) -> Option<(Arc<ForwardLink>, u64)> {
        let bound = self.bound.lock();
        if self.retired.swap(true, Ordering::AcqRel) {
            return None;
        }
        bound.as_ref().map(|(link, qid, _)| (link.clone(), *qid))
    }
}

/// The next number from `vias`, never 0 (0 stamps what a node's own queue delivered).
fn next_via(vias: &AtomicU16) -> u16 {
    loop {
        let via = vias.fetch_add(1, Ordering::Relaxed);
        if via != 0 {
            return via;
        }
    }
}

#[derive(Debug, Default)]
struct Dialing {
    in_progress: bool,
    not_before: Option<Instant>,
    backoff: Duration,
}

/// One peer node as the remote queues served there see it: its current link, if any.
#[derive(Debug)]
pub struct PeerLink {
    name: String,
    current: Mutex<Option<Arc<ForwardLink>>>,
    /// The records forwarding here, bound again on every new link (so their counts flow).
    records: Mutex<Vec<Weak<Record>>>,
    dialing: Mutex<Dialing>,
    /// The cluster's failure detector holds the node down (not merely its link being
    /// re-dialled): set by the cluster layer (`set_node_down`).
    node_down: AtomicBool,
    /// Told when a link comes up or the node is held down (what `linked` waits for).
    changed: tokio::sync::Notify,
}

impl PeerLink {
    /// A peer named `name` without a link yet.
    pub fn new(name: &str) -> Arc<PeerLink> {
        Arc::new(PeerLink {
            name: name.to_owned(),
            current: Mutex::default(),
            records: Mutex::default(),
            dialing: Mutex::default(),
            node_down: AtomicBool::new(false),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// A peer reached over `link` (tests, and links made outside a cluster).
    pub fn with_link(name: &str, link: &Arc<ForwardLink>) -> Arc<PeerLink> {
        let peer = PeerLink::new(name);
        *peer.current.lock() = Some(link.clone());
        peer
    }

    /// The peer's node name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The live link to the peer, if there is one.
    pub fn current(&self) -> Option<Arc<ForwardLink>> {
        self.current
            .lock()
            .as_ref()
            .filter(|link| link.is_alive())
            .cloned()
    }

    pub fn is_up(&self) -> bool {
        self.current().is_some()
    }

    /// Whether the cluster's failure detector holds the node down.
    pub fn node_down(&self) -> bool {
        self.node_down.load(Ordering::Relaxed)
    }

    /// What the cluster's failure detector says of the node.
    pub fn set_node_down(&self, down: bool) {
        if self.node_down.swap(down, Ordering::Relaxed) != down {
            tracing::info!(peer = %self.name, down, "the failure detector changed its view of the node");
            self.changed.notify_waiters();
        }
    }

    /// Whether an operation on a queue served there should wait for the link rather than
    /// fail: no live link, but the node is not held down — the link is still being made
    /// (nodes forming, a reconnect under way).
    pub fn link_pending(&self) -> bool {
        !self.is_up() && !self.node_down()
    }

    /// Waits until the peer is linked (true), held down, or `timeout` passed (false).
    pub async fn linked(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read, so a change in between is not missed.
            changed.as_mut().enable();
            if !self.link_pending() {
                return self.is_up();
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.is_up();
            }
        }
    }

    /// Makes `link` the peer's link (a previous live one is closed) and binds every record
    /// on it.
    pub fn set(&self, link: Arc<ForwardLink>) {
        let previous = self.current.lock().replace(link.clone());
        // Linked: the node is up, whatever the detector's view said last.
        self.node_down.store(false, Ordering::Relaxed);
        if let Some(previous) = previous.filter(|p| !Arc::ptr_eq(p, &link)) {
            previous.close();
        }
        {
            let mut dialing = self.dialing.lock();
            dialing.backoff = Duration::ZERO;
            dialing.not_before = None;
        }
        let records: Vec<Arc<Record>> = {
            let mut records = self.records.lock();
            records.retain(|r| r.strong_count() > 0);
            records.iter().filter_map(Weak::upgrade).collect()
        };
        for record in records {
            // Retired records stay unbound.
            let _ = record.bind_on(&link);
        }
        tracing::info!(peer = %self.name, "forwarding link up");
        self.changed.notify_waiters();
    }

    pub(super) fn register(&self, record: &Arc<Record>) {
        let mut records = self.records.lock();
        records.retain(|r| r.strong_count() > 0);
        records.push(Arc::downgrade(record));
    }

    /// Whether a dial may start now (no live link, none in progress, backoff over); marks
    /// one in progress when so. The dialer reports with [`PeerLink::dialed`].
    pub fn may_dial(&self) -> bool {
        if self.is_up() {
            return false;
        }
        let mut dialing = self.dialing.lock();
        let waiting = dialing.not_before.is_some_and(|t| Instant::now() < t);
        if dialing.in_progress || waiting {
            return false;
        }
        dialing.in_progress = true;
        true
    }

    /// The dial started by `may_dial` ended; a failure doubles the wait before the next.
    pub fn dialed(&self, ok: bool) {
        let mut dialing = self.dialing.lock();
        dialing.in_progress = false;
        if !ok {
            dialing.backoff = (dialing.backoff * 2).clamp(DIAL_BACKOFF_MIN, DIAL_BACKOFF_MAX);
            dialing.not_before = Some(Instant::now() + dialing.backoff);
        }
    }
}

/// Every peer this node forwards to, by node name, and what answers their questions
/// (`ask.rs`).
#[derive(Default)]
pub struct ForwardPeers {
    peers: Mutex<HashMap<String, Arc<PeerLink>>>,
    answers: parking_lot::RwLock<Option<Answers>>,
}

impl std::fmt::Debug for ForwardPeers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardPeers")
            .field("peers", &self.peers)
            .finish_non_exhaustive()
    }
}

impl ForwardPeers {
    /// The peer `name` (created without a link on first use).
    pub fn peer(&self, name: &str) -> Arc<PeerLink> {
        self.peers
            .lock()
            .entry(name.to_owned())
            .or_insert_with(|| PeerLink::new(name))
            .clone()
    }

    /// The peer `name` if this node knows it.
    pub fn get(&self, name: &str) -> Option<Arc<PeerLink>> {
        self.peers.lock().get(name).cloned()
    }

    /// Every peer this node knows, with a link or not.
    pub fn all(&self) -> Vec<Arc<PeerLink>> {
        self.peers.lock().values().cloned().collect()
    }

    /// Makes `answers` answer the peers' questions from now on.
    pub fn set_answers(&self, answers: Arc<dyn PeerAnswers>) {
        *self.answers.write() = Some(answers);
    }

    pub(super) fn answers(&self) -> Option<Answers> {
        self.answers.read().clone()
    }
}

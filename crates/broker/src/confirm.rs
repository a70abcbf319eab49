//! Publisher confirms, for every protocol and queue type alike: a publish is confirmed only
//! once every queue it reached has it safe — the store's fsync for a durable classic queue,
//! the group's commit for a quorum queue, the serving node's answer for a remote one — and
//! refused if any queue or the store refused it. 0-9-1 turns the outcome into basic.ack or
//! basic.nack, AMQP 1.0 into accepted or rejected, the HTTP API into its answer; the rule is
//! here once.
//!
//! A [`Confirm`] is what the publisher's channel (or session) keeps per publish: the store
//! write to wait for and, when queues that confirm on their own took the message, their
//! shared [`QueueAnswers`]. The last of those queues to answer wakes the publisher's
//! connection (`ConfirmWake`: for a client connection, `ConnectionEvent::ConfirmsSettled` on its
//! event channel), which then reads the outcomes in order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use warren_store::{DurableState, Outcome, Store};

use crate::event_channel::EventReceiver;

/// A routed publish's confirm: whether it may be confirmed, once it may be told.
#[derive(Debug)]
pub struct Confirm {
    /// The store write that must be durable first (0: nothing was stored).
    store_seq: u64,
    /// A queue refused the message, or the store could not take it for the durable ones.
    refused: bool,
    /// The answer of the queues that confirm on their own (quorum, remote), when any joined.
    queues: Option<Arc<QueueAnswers>>,
}

impl Confirm {
    /// A confirm with nothing to wait for: accepted, or (`refused`) a nack.
    pub fn settled(refused: bool) -> Confirm {
        Confirm {
            store_seq: 0,
            refused,
            queues: None,
        }
    }

    pub(crate) fn new(store_seq: u64, refused: bool, queues: Option<Arc<QueueAnswers>>) -> Self {
        Confirm {
            store_seq,
            refused,
            queues,
        }
    }

    /// The store write this confirm waits for (0: none): a transaction's commit waits for
    /// its last one.
    pub fn store_seq(&self) -> u64 {
        self.store_seq
    }

    /// Whether some queue (or the store) refused the message: the confirm will be a nack.
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// Whether it waits for a store write (only a store's progress can settle it then).
    pub fn waits_for_store(&self) -> bool {
        self.store_seq != 0
    }

    /// None while the store or a queue has not answered; then whether the publish is
    /// confirmed (true) or refused (false). `durable` is the store's progress (None: no store).
    pub fn outcome(&self, durable: Option<&DurableState>) -> Option<bool> {
        let stored = match durable.map(|d| d.outcome(self.store_seq)) {
            None | Some(Outcome::Durable) => true,
            Some(Outcome::Pending) => return None,
            Some(Outcome::Failed) => false,
        };
        let queues = match self.queues.as_ref().map(|q| q.outcome()) {
            None => true,
            Some(None) => return None,
            Some(Some(accepted)) => accepted,
        };
        Some(stored && queues && !self.refused)
    }

    /// Waits for the outcome, for a publisher that waits on one publish at a time (the HTTP
    /// API's): `woken` receives what the publish's `ConfirmTo::Connection` sender is told.
    pub async fn wait_outcome<E>(
        &self,
        store: Option<&Store>,
        woken: &mut EventReceiver<E>,
    ) -> bool {
        if let Some(answers) = &self.queues {
            while answers.outcome().is_none() {
                if woken.recv().await.is_none() {
                    return false;
                }
            }
        }
        if let Some(store) = store.filter(|_| self.waits_for_store()) {
            if store.wait_durable(self.store_seq).await.is_err() {
                return false;
            }
        }
        let durable = store.map(Store::durable_state);
        self.outcome(durable.as_ref()) == Some(true)
    }
}

/// One publish's answer from the queues it reached that confirm on their own (quorum queues,
/// remote queues): accepted once every one of them has it safe, refused if any refused it.
/// The last queue to answer wakes the publisher's connection.
///
/// Generic over who is woken only to be made: everyone holds `Arc<QueueAnswers>`, the waker
/// behind a vtable in the same allocation (no allocation of its own per publish).
#[derive(Debug)]
pub struct QueueAnswers<W: ?Sized = dyn ConfirmWake> {
    outstanding: AtomicUsize,
    refused: AtomicBool,
    wake: W,
}

/// Who is woken when the last queue answered a publish: the publisher's connection (the
/// consumer module implements it for a connection's event sender).
pub trait ConfirmWake: Send + Sync + std::fmt::Debug + 'static {
    fn confirms_settled(&self);
}

/// What makes one publish's [`QueueAnswers`] that wake its connection: the connection's
/// event sender, as `ConfirmTo::Connection` holds it.
pub trait AnswersFor: Send + Sync {
    fn answers(&self) -> Arc<QueueAnswers>;
}

impl QueueAnswers {
    /// Answers for one publish being routed; call [`QueueAnswers::routed`] once every queue
    /// has it, so a queue answering early cannot settle it while others still wait.
    pub fn new<W: ConfirmWake>(wake: W) -> Arc<QueueAnswers> {
        Arc::new(QueueAnswers {
            outstanding: AtomicUsize::new(1),
            refused: AtomicBool::new(false),
            wake,
        })
    }

    /// None while some queue has not answered; then whether every queue accepted it.
    pub fn outcome(&self) -> Option<bool> {
        (self.outstanding.load(Ordering::Acquire) == 0)
            .then(|| !self.refused.load(Ordering::Acquire))
    }

    /// Routing is done: the answers now wait only for the queues.
    pub fn routed(&self) {
        self.answered(true);
    }

    /// A queue took the message and will answer ([`QueueAnswers::answered`]) once.
    pub(crate) fn expect_one(&self) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn answered(&self, accepted: bool) {
        if !accepted {
            self.refused.store(true, Ordering::Release);
        }
        if self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The connection may be gone; its confirms are then moot.
            self.wake.confirms_settled();
        }
    }
}

/// Who hears a publish's confirm.
#[derive(Clone, Copy)]
pub enum ConfirmTo<'a> {
    /// Nobody: the publisher does not confirm (0-9-1 without confirm.select, a pre-settled
    /// AMQP 1.0 transfer). Classic queues still store a persistent message first.
    Nobody,
    /// The publisher's connection, woken when the queues that confirm on their own have all
    /// answered; the publisher keeps the [`Confirm`] the publish returns.
    Connection(&'a dyn AnswersFor),
    /// Answers made by the caller, which this publish's queues join (a quorum queue's
    /// at-least-once dead-lettering: one set of answers for a batch of copies; the caller
    /// calls `routed` once it has routed them all).
    Joining(&'a Arc<QueueAnswers>),
}

/// One publish's confirm while it is routed: the queues that confirm on their own join it
/// (`Queue::publish_routed`); once routing is done, `finish` hands over what the publisher
/// waits for besides the store, if any queue joined.
pub struct RoutedConfirm<'a> {
    to: ConfirmTo<'a>,
    joined: Option<Arc<QueueAnswers>>,
}

impl<'a> RoutedConfirm<'a> {
    /// None for a publish nobody confirms.
    pub fn new(to: ConfirmTo<'a>) -> Option<RoutedConfirm<'a>> {
        match to {
            ConfirmTo::Nobody => None,
            to => Some(RoutedConfirm { to, joined: None }),
        }
    }

    /// The answers a queue that confirms on its own joins (made at the first such queue:
    /// a publish to classic queues only allocates none).
    pub(crate) fn join(&mut self) -> &Arc<QueueAnswers> {
        match self.to {
            ConfirmTo::Joining(answers) => answers,
            ConfirmTo::Connection(wake) => self.joined.get_or_insert_with(|| wake.answers()),
            ConfirmTo::Nobody => unreachable!("RoutedConfirm::new makes none for Nobody"),
        }
    }

    /// Routing is done: the answers the publisher waits for, if any queue joined answers of
    /// this publish's own (joined answers of the caller's are the caller's to finish).
    pub fn finish(self) -> Option<Arc<QueueAnswers>> {
        if let Some(answers) = &self.joined {
            answers.routed();
        }
        self.joined
    }
}

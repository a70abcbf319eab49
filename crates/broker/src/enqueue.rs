//! What every protocol's publish does once its message is routed — 0-9-1's basic.publish and
//! AMQP 1.0's transfer alike: write a persistent message once to the store for all the durable
//! queues it reached, enqueue it in each queue, and hand back the [`Confirm`] that completes
//! when every queue has it safe: the store's fsync for durable classic queues, the group's
//! commit for quorum queues, the serving node's answer for remote ones. The protocols only
//! translate the outcome (basic.ack / basic.nack, accepted / rejected); the rule is here, once.

use std::sync::Arc;

use warren_store::{DurableState, Outcome, QueueId, StoreError};

use crate::consumer::ConnectionEvent;
use crate::event_channel::EventSender;
use crate::queue::{Enqueued, Queue, RoutedConfirm};
use crate::quorum::QuorumConfirm;
use crate::vhost::VHost;
use crate::Message;

/// A routed publish's confirm: whether it may be confirmed, once it may be told.
#[derive(Debug)]
pub struct Confirm {
    /// The store write that must be durable first (0: nothing was stored).
    store_seq: u64,
    /// A queue refused the message, or the store could not take it for the durable ones.
    refused: bool,
    /// The answer of the queues that confirm on their own (quorum, remote), when any joined.
    queues: Option<Arc<QuorumConfirm>>,
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
}

/// Stores `message` once for the durable queues of `queues` (when it is persistent), then
/// enqueues it in every queue of `queues` (drained). `store_ids` is the caller's scratch, so
/// that a publish allocates nothing. `wake`, for a publish that wants a confirm, is its
/// connection, told when the queues that confirm on their own have all answered. Err only for
/// a store that failed for good (the caller closes with its protocol's internal error); a store
/// that cannot write for now (a full disk) leaves the durable queues out and the confirm
/// refused.
pub fn enqueue_routed(
    vhost: &VHost,
    message: &Arc<Message>,
    queues: &mut Vec<Arc<Queue>>,
    store_ids: &mut Vec<QueueId>,
    wake: Option<&EventSender<ConnectionEvent>>,
) -> Result<Confirm, StoreError> {
    let mut refused = false;
    let mut store_seq = 0;
    let mut stored = None;
    if let Some(store) = vhost.store.as_ref().filter(|_| message.persistent) {
        store_ids.clear();
        store_ids.extend(
            queues
                .iter()
                .filter_map(|q| q.stored.as_ref().map(|s| s.id)),
        );
        if !store_ids.is_empty() {
            match store.append(store_ids, &message.to_stored()) {
                Ok(appended) => {
                    store_seq = appended.seq;
                    stored = Some(appended);
                }
                // A write failed and the store retries (the store logs it, once): the
                // durable queues cannot take the message, the others do.
                Err(StoreError::Unavailable(_)) => {
                    refused = true;
                    queues.retain(|q| q.stored.is_none());
                }
                Err(e) => return Err(e),
            }
        }
    }
    let mut routed_confirm = wake.map(RoutedConfirm::new);
    for queue in queues.drain(..) {
        if queue.publish_routed(message, stored, routed_confirm.as_mut()) == Enqueued::Rejected {
            refused = true;
        }
    }
    Ok(Confirm {
        store_seq,
        refused,
        queues: routed_confirm.and_then(RoutedConfirm::finish),
    })
}

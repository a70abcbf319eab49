//! What a channel holds of the publish side between frames: a publish whose content is still
//! arriving, complete messages held by a transaction, and the publisher confirms not yet sent.
//! Plain state, apart from the publish path (`publish.rs`) that fills it, so the channel can
//! hold it without depending on that path.

use crate::unacked::Unacked;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use warren_broker::confirm::Confirm;
use warren_codec::{BasicPublish, ContentHeader, MessageBytes};

/// A basic.publish whose content is still arriving.
pub struct PendingPublish {
    pub method: BasicPublish,
    pub header: Option<ContentHeader>,
    /// Body frames so far; a single frame stays a zero-copy slice.
    pub body: BodyParts,
}

#[derive(Default)]
pub enum BodyParts {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl BodyParts {
    pub(crate) fn len(&self) -> usize {
        match self {
            BodyParts::Empty => 0,
            BodyParts::One(b) => b.len(),
            BodyParts::Many(b) => b.len(),
        }
    }

    pub(crate) fn push(&mut self, part: Bytes) {
        *self = match std::mem::take(self) {
            BodyParts::Empty => BodyParts::One(part),
            BodyParts::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + part.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&part);
                BodyParts::Many(joined)
            }
            BodyParts::Many(mut joined) => {
                joined.extend_from_slice(&part);
                BodyParts::Many(joined)
            }
        }
    }

    pub(crate) fn into_bytes(self) -> Bytes {
        match self {
            BodyParts::Empty => Bytes::new(),
            BodyParts::One(b) => b,
            BodyParts::Many(b) => b.freeze(),
        }
    }
}

/// A complete message as published, before routing: its names, properties and body (for a
/// publish taken whole, the frames it came in) and basic.publish's flags.
pub struct Published {
    pub message: MessageBytes,
    pub mandatory: bool,
    pub immediate: bool,
}

/// Publisher confirms: sequence numbers given to publishes and those not yet confirmed.
///
/// A persistent message routed to a durable queue is confirmed only once the store has
/// fsync'd it (its store sequence is settled durable); others need nothing (store sequence
/// 0). If its store batch failed, the confirm is a nack. A message that reached quorum
/// queues is confirmed once each of their Raft groups committed it (its `QueueAnswers`).
/// Confirms go out in publish order, so a run of ready acks is one basic.ack(multiple).
#[derive(Debug, Default)]
pub struct ConfirmState {
    pub next_seq: u64,
    /// (publish seq, its confirm), in publish order.
    pub(crate) pending: VecDeque<(u64, Confirm)>,
}

impl ConfirmState {
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Work a transaction holds until commit.
pub enum TxOp {
    Publish(Published),
    /// Deliveries an ack (`requeue` None) or nack/reject named: already off the unacked list
    /// (as in RabbitMQ, so naming them again is an unknown tag at once), still holding their
    /// consumers' credit until the commit.
    Settle {
        deliveries: Vec<Unacked>,
        requeue: Option<bool>,
    },
}

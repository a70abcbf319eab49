//! The state of the management node's link pairs (see `link_pair.rs`, which drives them):
//! which two links form a pair, the receiving half's credit and waiting answers, and an
//! answer that waits for a definitions change. A leaf: it knows nothing of the session.

use crate::management::{self, LaterResponse};
use bytes::Bytes;
use fe2o3_amqp_types::messaging::MessageId;
use std::collections::VecDeque;

/// The client's two links of one pair, by handle, under the name they share.
pub(super) struct LinkPair {
    pub(super) name: String,
    pub(super) incoming: Option<u32>,
    pub(super) outgoing: Option<u32>,
}

/// The receiving half: answers waiting for credit.
pub(super) struct ReplyLink {
    pub(super) delivery_count: u32,
    pub(super) credit: u32,
    pub(super) drain: bool,
    pub(super) pending: VecDeque<Bytes>,
    pub(super) next_tag: u64,
}

/// A request whose answer waits for a definitions change: the connection awaits `response`
/// before it reads the client's next frame, then hands it to `Session::answer`.
pub struct LaterAnswer {
    pub channel: u16,
    /// The request's link (its pair's sender).
    pub handle: u32,
    pub correlation_id: Option<MessageId>,
    pub response: LaterResponse,
}

/// Whether an attach is for the management node: `address` is its terminus address.
pub(super) fn is_management(address: Option<&str>) -> bool {
    address == Some(management::NODE_ADDRESS)
}

//! A delivery the client has not acknowledged yet, as a channel holds it: its own file so that
//! the channel and a transaction's held settles name it without the consume path.

use std::sync::Arc;
use warren_broker::queue::QueueHandle;
use warren_broker::queue::QueuedMessage;
use warren_broker::Consumer;

/// A delivery the client has not acknowledged yet.
pub struct Unacked {
    pub tag: u64,
    pub queue: QueueHandle,
    pub message: QueuedMessage,
    /// None for basic.get deliveries (no consumer credit to give back).
    pub consumer: Option<Arc<Consumer>>,
}

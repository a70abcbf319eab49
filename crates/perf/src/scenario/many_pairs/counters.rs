//! What one worker's clients count as they go (messages received, publishes confirmed and
//! nacked), shared by the 0-9-1 and AMQP 1.0 clients' hooks.

use std::sync::atomic::AtomicU64;

#[derive(Default)]
pub struct Counters {
    pub received: AtomicU64,
    pub confirmed: AtomicU64,
    pub nacked: AtomicU64,
}

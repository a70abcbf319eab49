//! How the broker names a client connection (and a forwarding link's serving side, which
//! acts toward queues as a connection does): a number unique within this node's run. Its
//! own file so that counters and registries can name connections without the consumer
//! and queue modules.

pub type ConnectionId = u64;

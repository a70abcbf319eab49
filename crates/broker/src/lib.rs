//! Warren's broker core: virtual hosts, exchanges and their bindings, queues, consumers and
//! messages. It knows AMQP's semantics and reply codes but nothing of sockets or frames; the
//! server crate drives it from connections.

pub mod broker;
pub mod consumer;
pub mod dead_letter;
pub mod definitions;
pub mod error;
pub mod exchange;
pub mod headers_match;
pub mod memory;
pub mod message;
pub mod names;
pub mod queue;
pub mod queue_args;
pub mod ready;
pub mod tail;
pub mod topic;
pub mod vhost;

pub use broker::Broker;
pub use consumer::{ChannelFlow, ConnectionEvent, ConnectionId, Consumer, Delivery};
pub use error::{AmqpError, AmqpResult};
pub use exchange::{Binding, Destination, Exchange, ExchangeKind};
pub use memory::MemoryMonitor;
pub use message::Message;
pub use queue::{Enqueued, Queue, QueuedMessage};
pub use vhost::{ExchangeDeclaration, QueueDeclaration, VHost};

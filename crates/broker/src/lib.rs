//! Warren's broker core: virtual hosts, exchanges and their bindings, queues, consumers and
//! messages. It knows AMQP's semantics and reply codes but nothing of sockets or frames; the
//! server crate drives it from connections.

pub mod access;
pub mod admission;
pub mod alarm;
pub mod app_switch;
mod apply;
pub mod auth_attempts;
pub mod broker;
pub mod churn;
pub mod classic;
pub mod confirm;
pub mod connection_id;
pub mod consumer;
pub mod consumer_set;
pub mod consumer_use;
pub mod dead_letter;
pub mod definition_op;
pub mod definitions;
pub mod definitions_journal;
pub mod disk;
mod equivalence;
pub mod error;
pub mod event_channel;
pub mod exchange;
pub mod headers_match;
pub mod memory;
pub mod message;
pub mod message_pool;
pub mod name_map;
pub mod named_entries;
pub mod names;
pub mod parameters;
pub mod persist;
pub mod placement;
pub mod policy;
pub mod publish_counters;
pub mod queue;
pub mod queue_activity;
pub mod queue_args;
pub mod queue_type;
pub mod queued_message;
pub mod quorum;
pub mod ready;
pub mod registry;
pub mod remote;
pub mod replication;
pub mod routing_keys;
pub mod server_properties;
pub mod snapshot;
pub mod stats;
pub mod tail;
pub mod topic;
pub mod user_usage;
pub mod version;
pub mod versioned_map;
pub mod vhost;
pub mod woken_consumers;

pub use alarm::{Alarm, AlarmSet, Alarms};
pub use broker::{default_node_name, Broker};
pub use churn::{ConnectionChurn, NodeCounters, QueueChurn};
pub use consumer::{ChannelFlow, ConnectionEvent, ConnectionId, Consumer, Delivery};
pub use definition_op::{DefinitionOp, Outcome, PolicyList};
pub use disk::DiskMonitor;
pub use error::{AmqpError, AmqpResult};
pub use event_channel::{event_channel, EventReceiver, EventSender};
pub use exchange::{Binding, Destination, Exchange, ExchangeKind};
pub use memory::MemoryMonitor;
pub use message::Message;
pub use policy::{AppliedPolicies, Policy, PolicyKind};
pub use queue::{Enqueued, Queue, QueuedMessage};
pub use registry::{ChannelInfo, ConnectionInfo, ConsumerInfo, Registry};
pub use replication::{
    CaughtUp, Change, DurableWait, NameLookup, PendingChange, ReplicationError, Replicator,
    Submitted,
};
pub use stats::{HandedOut, MessageCounts, MessageStats, QueueStats};
pub use vhost::{ExchangeDeclaration, QueueDeclaration, VHost, VHostLimits, VHostMetadata};

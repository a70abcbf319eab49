//! `VHost`: the namespace of exchanges and queues, and the operations clients run on them —
//! declare, delete, bind, unbind, route — with RabbitMQ's checks and reply codes.

mod cascade;
mod dead_letters;
mod durability;
mod lifecycle;
mod mirroring;
mod namespace;
mod policies;
mod properties;
mod publish;
mod remote_queues;
pub use durability::{durable_exchange_definition, durable_queue_definition};
pub use remote_queues::Serving;
#[cfg(test)]
mod route_tests;
mod trace;
#[cfg(test)]
mod trace_tests;

pub use properties::{VHostLimits, VHostMetadata};

pub use publish::{publish_to_queue, Publish, PublishScratch, Routed, TraceOrigin};

pub use namespace::{ExchangeDeclaration, QueueDeclaration, VHost, LINK_WAIT};

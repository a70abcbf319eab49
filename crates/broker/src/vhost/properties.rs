//! What a vhost has beside its entities, as RabbitMQ keeps it: limits and metadata. Plain
//! data, in a file of its own so that definitions ops and snapshots name it without the
//! vhost itself.

/// RabbitMQ's vhost limits (`rabbitmqctl set_vhost_limits`); `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VHostLimits {
    pub max_connections: Option<u32>,
    pub max_queues: Option<u32>,
}

/// What RabbitMQ keeps beside a vhost's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VHostMetadata {
    pub description: String,
    pub tags: Vec<String>,
}

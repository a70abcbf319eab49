//! One version story. Clients, test suites, tools and dashboards gate features on the
//! RabbitMQ version a broker reports (the Java client's tests read the `version` server
//! property, rabbitmqadmin and the Grafana dashboards `rabbitmq_version`), so wherever a
//! RabbitMQ version is read Warren reports the RabbitMQ release whose behaviour it
//! reproduces; what Warren itself is travels beside it as `product` / `product_name` and
//! `product_version`. Every protocol, the HTTP API, Prometheus and definitions exports take
//! their versions from here.

/// What the broker is.
pub const PRODUCT_NAME: &str = "Warren";

/// Warren's own release.
pub const PRODUCT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The RabbitMQ release whose client-visible behaviour (protocol, management API, metrics)
/// Warren reproduces.
pub const RABBITMQ_VERSION: &str = "3.13.7";

/// The RabbitMQ 4 release whose AMQP 1.0 (v2 addresses, the management node, temporary
/// queues, outcomes) Warren's AMQP 1.0 reproduces: what the AMQP 1.0 open reports, since
/// RabbitMQ 4's own AMQP 1.0 clients refuse a broker under 4.0.
pub const RABBITMQ_AMQP10_VERSION: &str = "4.1.0";

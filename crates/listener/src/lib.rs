//! What every protocol's listener shares, below the protocols: binding a TCP listener (one
//! dual-stack socket by default), TLS (a rustls server configuration from RabbitMQ's
//! `ssl_options`, the handshake of an accepted connection, the user name a client certificate
//! logs in as), the listener of the HTTP endpoints, plain or TLS, and their streamed bodies. AMQP 0-9-1
//! (`warren-server`, which hands AMQP 1.0 connections to `warren-amqp10`), the management API
//! and Prometheus build on it; it knows nothing of them.

mod bind;
pub mod cert_name;
pub mod http_listener;
pub mod streamed_body;
pub mod tls;

pub use bind::bind_listener;

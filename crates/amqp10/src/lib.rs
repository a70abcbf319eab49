//! Warren's AMQP 1.0 server: a connection that arrived on the AMQP port with the AMQP 1.0
//! (or SASL) protocol header is handed here by `warren-server` and served over the same
//! broker core as AMQP 0-9-1 — the same vhosts, exchanges, queues, users and store.
//!
//! `codec` is the only place that knows the frame layout and the AMQP 1.0 type system (the
//! fe2o3-amqp-types crate); `sasl` authenticates; `address` reads RabbitMQ 4's v2
//! addresses; `convert` maps messages to and from the broker's (0-9-1 shaped) `Message` as
//! RabbitMQ 4 converts between the protocols; `connection` and `session` (with its links)
//! are the protocol state machine, one task per connection as for 0-9-1.

mod address;
/// The wire format, a crate of its own (`warren-amqp10-codec`) so that clients need no broker.
use warren_amqp10_codec as codec;
use warren_amqp10_codec::value;
mod connection;
/// Public for the fuzz target (fuzz/src/amqp10.rs); not an API of the broker.
#[doc(hidden)]
pub mod convert;
mod management;
mod sasl;
mod session;
#[cfg(test)]
mod tests;

use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use warren_broker::Broker;

pub use codec::{is_amqp10_header, PROTOCOL_HEADER_AMQP, PROTOCOL_HEADER_SASL};

/// What an AMQP 1.0 connection negotiates with; defaults are RabbitMQ 4's.
#[derive(Debug, Clone)]
pub struct Amqp10Config {
    /// SASL ANONYMOUS offered (logs in as `anonymous_user`); off by default, as RabbitMQ
    /// (anonymous_login_user is none unless configured).
    pub allow_anonymous: bool,
    pub anonymous_user: String,
    /// Users allowed only from loopback peers (RabbitMQ's loopback_users: guest).
    pub loopback_users: Vec<String>,
    /// Largest frame we accept (open's max-frame-size).
    pub max_frame_size: u32,
    /// Largest message we accept (the link's max-message-size).
    pub max_message_size_bytes: u64,
    /// The operator's server properties (`--server-property KEY=VALUE`), which replace or
    /// add to Warren's own in open's `properties`, as in 0-9-1's connection.start.
    pub server_properties: Vec<(String, String)>,
    /// Time from the protocol header to the open frame.
    pub handshake_timeout: Duration,
    /// Our idle-time-out (open): the client must send something this often; we read it as
    /// twice that before we give up, as the spec suggests. Zero: none.
    pub idle_timeout: Duration,
}

impl Default for Amqp10Config {
    fn default() -> Self {
        Amqp10Config {
            allow_anonymous: false,
            anonymous_user: "guest".to_owned(),
            loopback_users: vec!["guest".to_owned()],
            max_frame_size: 131_072,
            max_message_size_bytes: 128 * 1024 * 1024,
            server_properties: Vec::new(),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// The two ends of a client's connection: the client's address and ours.
#[derive(Debug, Clone, Copy)]
pub struct Endpoints {
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// Serves one AMQP 1.0 connection to its end. `read` holds what was already read from the
/// stream (at least the 8-byte protocol header the caller dispatched on). The connection's
/// own future, returned as it is: an `async fn` here would hold its arguments beside it for
/// the connection's whole life.
pub fn serve<R, W>(
    reader: R,
    writer: W,
    read: BytesMut,
    endpoints: Endpoints,
    broker: Arc<Broker>,
    config: Arc<Amqp10Config>,
    tls: bool,
) -> impl std::future::Future<Output = ()>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    connection::Connection::new(reader, writer, read, endpoints, broker, config, tls).serve()
}

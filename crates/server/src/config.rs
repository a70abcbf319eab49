//! `ServerConfig`: the limits and defaults a connection negotiates with. Defaults are
//! RabbitMQ's. Users live in the broker's `AccessControl`.

use crate::cert_name::CertLoginFrom;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest frame we accept and offer in connection.tune.
    pub frame_max: u32,
    /// Heartbeat interval we suggest; the client's choice wins (0 disables).
    pub heartbeat_s: u16,
    /// Bodies larger than this close the channel with 406, as RabbitMQ's max_message_size.
    pub max_message_size_bytes: u64,
    /// Time a client has to finish the handshake.
    pub handshake_timeout: Duration,
    /// Users allowed only from loopback peers (RabbitMQ's loopback_users: guest).
    pub loopback_users: Vec<String>,
    /// Server properties sent in connection.start in place of (or beside) Warren's own
    /// product, version, platform…, as RabbitMQ's `server_properties` setting.
    pub server_properties: Vec<(String, String)>,
    /// Where a TLS client certificate's user name comes from for SASL EXTERNAL.
    pub cert_login_from: CertLoginFrom,
    /// What connections that open with the AMQP 1.0 header negotiate (same port).
    pub amqp10: Arc<warren_amqp10::Amqp10Config>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            frame_max: 131_072,
            heartbeat_s: 60,
            max_message_size_bytes: 128 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(10),
            loopback_users: vec!["guest".to_owned()],
            server_properties: Vec::new(),
            cert_login_from: CertLoginFrom::default(),
            amqp10: Arc::default(),
        }
    }
}

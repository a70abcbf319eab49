//! What the server says during the handshake: its properties and capabilities, and the
//! negotiation rules for tune-ok.

use crate::config::ServerConfig;
use bytes::Bytes;
use warren_broker::server_properties::server_properties;
use warren_codec::*;

/// Capabilities advertised in connection.start, as RabbitMQ's clients look for them.
const CAPABILITIES: &[&str] = &[
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
];

/// connection.start offering `mechanisms` (space-separated, as the field carries them).
pub fn connection_start(
    config: &ServerConfig,
    cluster_name: &str,
    mechanisms: &'static str,
) -> ConnectionStart {
    let mut capabilities = FieldTable::new();
    for c in CAPABILITIES {
        capabilities.insert(*c, FieldValue::Bool(true));
    }
    let mut props = FieldTable::new();
    props.insert("capabilities", FieldValue::Table(capabilities));
    for (key, value) in server_properties(&config.server_properties, cluster_name) {
        props.insert(key, FieldValue::string(value));
    }
    ConnectionStart {
        version_major: 0,
        version_minor: 9,
        server_properties: props,
        mechanisms: Bytes::from_static(mechanisms.as_bytes()),
        locales: Bytes::from_static(b"en_US"),
    }
}

pub fn connection_tune(config: &ServerConfig) -> ConnectionTune {
    ConnectionTune {
        channel_max: config.channel_max,
        frame_max: config.frame_max,
        heartbeat: config.heartbeat_s,
    }
}

/// What the client's capabilities table turns on.
#[derive(Debug, Default, Clone, Copy)]
pub struct ClientCapabilities {
    pub consumer_cancel_notify: bool,
    pub connection_blocked: bool,
    /// A refused login is told with connection.close 403 instead of a dropped socket.
    pub authentication_failure_close: bool,
}

impl ClientCapabilities {
    pub fn from_client_properties(props: &FieldTable) -> ClientCapabilities {
        let caps = match props.get("capabilities") {
            Some(FieldValue::Table(t)) => t,
            _ => return ClientCapabilities::default(),
        };
        let on = |k: &str| caps.get(k).and_then(FieldValue::as_bool).unwrap_or(false);
        ClientCapabilities {
            consumer_cancel_notify: on("consumer_cancel_notify"),
            connection_blocked: on("connection.blocked"),
            authentication_failure_close: on("authentication_failure_close"),
        }
    }
}

/// The limits both sides agreed on, or why the client's tune-ok is unacceptable.
pub fn negotiate(config: &ServerConfig, ok: &ConnectionTuneOk) -> Result<(u32, u16, u16), String> {
    let frame_max = if ok.frame_max == 0 {
        config.frame_max
    } else {
        ok.frame_max
    };
    if frame_max < FRAME_MIN_SIZE {
        return Err(format!("frame_max={frame_max} < {FRAME_MIN_SIZE} min size"));
    }
    if frame_max > config.frame_max {
        return Err(format!(
            "frame_max={frame_max} > {} max size",
            config.frame_max
        ));
    }
    let channel_max = match ok.channel_max {
        0 => config.channel_max,
        n => n.min(config.channel_max),
    };
    Ok((frame_max, channel_max, ok.heartbeat))
}

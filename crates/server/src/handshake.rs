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

/// connection.tune, offering `channel_max` (the broker's at the time: see `negotiate`).
pub fn connection_tune(config: &ServerConfig, channel_max: u16) -> ConnectionTune {
    ConnectionTune {
        channel_max,
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
/// `channel_max` is what connection.tune offered (0: no limit). As rabbit_reader's
/// validate_negotiated_integer_value, a client's channel_max above it, or 0 (no limit)
/// against a limit, is refused; the channel_max agreed is the client's (0: 65,535).
pub fn negotiate(
    config: &ServerConfig,
    channel_max: u16,
    ok: &ConnectionTuneOk,
) -> Result<(u32, u16, u16), String> {
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
    if channel_max != 0 && (ok.channel_max == 0 || ok.channel_max > channel_max) {
        let detail = match ok.channel_max {
            0 => " (no limit)",
            _ => "",
        };
        return Err(format!(
            "negotiated channel_max = {}{detail} is higher than the maximum allowed value ({channel_max})",
            ok.channel_max
        ));
    }
    let agreed = match ok.channel_max {
        0 => u16::MAX,
        n => n,
    };
    Ok((frame_max, agreed, ok.heartbeat))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tune_ok(channel_max: u16) -> ConnectionTuneOk {
        ConnectionTuneOk {
            channel_max,
            frame_max: 131_072,
            heartbeat: 60,
        }
    }

    #[test]
    fn a_channel_max_above_the_offer_is_refused_as_rabbitmq_refuses_it() {
        let config = ServerConfig::default();
        assert_eq!(
            negotiate(&config, 2047, &tune_ok(64)),
            Ok((131_072, 64, 60))
        );
        assert_eq!(
            negotiate(&config, 2048, &tune_ok(4096)),
            Err(
                "negotiated channel_max = 4096 is higher than the maximum allowed value (2048)"
                    .to_owned()
            )
        );
        assert_eq!(
            negotiate(&config, 2048, &tune_ok(0)),
            Err(
                "negotiated channel_max = 0 (no limit) is higher than the maximum allowed value (2048)"
                    .to_owned()
            )
        );
        // No limit offered: the client's, 0 meaning all channel numbers.
        assert_eq!(negotiate(&config, 0, &tune_ok(4096)).unwrap().1, 4096);
        assert_eq!(negotiate(&config, 0, &tune_ok(0)).unwrap().1, u16::MAX);
    }
}

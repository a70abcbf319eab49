//! RabbitMQ 4's v2 addresses (docs "AMQP 1.0", Addresses): targets
//! `/exchanges/:exchange/:routing-key`, `/exchanges/:exchange` (empty routing key),
//! `/queues/:queue`, or null (each message's `to` holds one of the three); the only source
//! is `/queues/:queue`. Names are percent-encoded (RFC 3986). The default exchange cannot be
//! named in the exchange forms: `/queues/:queue` is the way to it. Anything else (the v1
//! forms RabbitMQ 4 deprecates included) is refused.

use crate::codec::{Attach, Role, TargetArchetype};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What a queue name keeps unescaped in an address: RFC 3986's unreserved characters.
pub(crate) const ADDRESS_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The v2 address of queue `name` (`/queues/` and the name percent-encoded), as RabbitMQ 4
/// writes it.
pub fn queue_address(name: &str) -> String {
    format!("/queues/{}", utf8_percent_encode(name, ADDRESS_SEGMENT))
}

/// Where a message goes: an exchange and routing key ("" exchange = the default exchange,
/// as `/queues/:queue` publishes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub exchange: String,
    pub routing_key: String,
}

/// A target address, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetAddress {
    /// `/exchanges/:x[/:key]` or `/queues/:q` (exchange "", routing key the queue).
    Fixed(Destination),
    /// Null: each message names its destination in `to`.
    PerMessage,
    /// `/management`: the management node's requests (`crate::management`), not messages.
    Management,
}

pub fn parse_target(address: Option<&str>) -> Result<TargetAddress, String> {
    match address {
        None => Ok(TargetAddress::PerMessage),
        Some(a) => parse_destination(a).map(TargetAddress::Fixed),
    }
}

/// One of the three string forms of a target (also what a message's `to` must hold).
pub fn parse_destination(address: &str) -> Result<Destination, String> {
    let bad = || {
        format!("address not supported: '{address}' (use /exchanges/:exchange[/:routing-key] or /queues/:queue)")
    };
    let segments: Vec<&str> = address.split('/').collect();
    let decoded = |s: &str| {
        percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| bad())
    };
    match segments.as_slice() {
        ["", "exchanges", x] | ["", "exchanges", x, _] => {
            let exchange = decoded(x)?;
            if exchange.is_empty() || exchange == "amq.default" {
                return Err(format!(
                    "address '{address}': the default exchange is addressed as /queues/:queue"
                ));
            }
            let routing_key = match segments.get(3) {
                Some(k) => decoded(k)?,
                None => String::new(),
            };
            Ok(Destination {
                exchange,
                routing_key,
            })
        }
        ["", "queues", q] if !q.is_empty() => Ok(Destination {
            exchange: String::new(),
            routing_key: decoded(q)?,
        }),
        _ => Err(bad()),
    }
}

/// The queue a source address names.
pub fn parse_source(address: Option<&str>) -> Result<String, String> {
    let Some(address) = address else {
        return Err("a source address is required (/queues/:queue)".to_owned());
    };
    match address.strip_prefix("/queues/") {
        Some(q) if !q.is_empty() && !q.contains('/') => percent_decode_str(q)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| format!("address '{address}' is not valid percent-encoded UTF-8")),
        _ => Err(format!(
            "address not supported: '{address}' (use /queues/:queue)"
        )),
    }
}

/// The queue or exchange the attach of a link names, which the link is refused for when
/// it is not there: a receiving client's source queue, a sending client's target queue or
/// exchange (the name and whether it is an exchange). None for a dynamic or null terminus,
/// the management node, and an address refused whatever exists.
pub fn looked_up_by(attach: &Attach) -> Option<(String, bool)> {
    match attach.role {
        // The client receives: its source is a queue.
        Role::Receiver => {
            let source = attach.source.as_deref()?;
            if source.dynamic {
                return None;
            }
            parse_source(source.address.as_deref())
                .ok()
                .map(|q| (q, false))
        }
        Role::Sender => match attach.target.as_deref()? {
            TargetArchetype::Target(t) if !t.dynamic => match parse_target(t.address.as_deref()) {
                Ok(TargetAddress::Fixed(d)) if d.exchange.is_empty() => {
                    Some((d.routing_key, false))
                }
                Ok(TargetAddress::Fixed(d)) => Some((d.exchange, true)),
                _ => None,
            },
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_address_reads_back_as_its_name() {
        for name in ["q", "amq.dyn-c-1", "a b/c%d", "é"] {
            let address = queue_address(name);
            assert_eq!(parse_source(Some(&address)).as_deref(), Ok(name));
        }
        assert_eq!(queue_address("a b/c"), "/queues/a%20b%2Fc");
    }

    fn dest(exchange: &str, routing_key: &str) -> Destination {
        Destination {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
        }
    }

    #[test]
    fn v2_targets() {
        assert_eq!(
            parse_destination("/exchanges/amq.direct/my-routing_key%2F123"),
            Ok(dest("amq.direct", "my-routing_key/123"))
        );
        assert_eq!(parse_destination("/exchanges/fan"), Ok(dest("fan", "")));
        assert_eq!(parse_destination("/queues/a%20b"), Ok(dest("", "a b")));
        assert_eq!(parse_target(None), Ok(TargetAddress::PerMessage));
    }

    #[test]
    fn refused_targets() {
        for a in [
            "/exchange/amq.direct/k",
            "/queue/q",
            "q",
            "/exchanges/amq.default/q",
            "/exchanges//q",
            "/exchanges/x/k/extra",
            "/queues/",
            "/queues/a/b",
            "/topic/k",
        ] {
            assert!(parse_destination(a).is_err(), "{a}");
        }
    }

    #[test]
    fn sources() {
        assert_eq!(parse_source(Some("/queues/q%2F1")), Ok("q/1".into()));
        assert!(parse_source(Some("/queue/q")).is_err());
        assert!(parse_source(Some("/exchanges/x")).is_err());
        assert!(parse_source(None).is_err());
    }
}

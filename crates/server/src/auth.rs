//! SASL PLAIN and AMQPLAIN credential parsing and the user check, including RabbitMQ's rule
//! that loopback users (guest) may only connect from a loopback address.

use crate::config::ServerConfig;
use bytes::Bytes;
use std::net::IpAddr;
use warren_codec::{Reader, ShortStr};

pub const MECHANISMS: &str = "PLAIN AMQPLAIN";

/// (user, password) from a start-ok response, or None if it does not parse.
pub fn parse_credentials(mechanism: &str, response: &Bytes) -> Option<(String, String)> {
    match mechanism {
        "PLAIN" => {
            // authzid NUL authcid NUL password
            let mut parts = response.split(|&b| b == 0);
            let _authzid = parts.next()?;
            let user = std::str::from_utf8(parts.next()?).ok()?;
            let pass = std::str::from_utf8(parts.next()?).ok()?;
            Some((user.to_owned(), pass.to_owned()))
        }
        "AMQPLAIN" => {
            // A field table without its length prefix.
            let mut framed = (response.len() as u32).to_be_bytes().to_vec();
            framed.extend_from_slice(response);
            let table = Reader::new(Bytes::from(framed)).table().ok()?;
            let user = table.get("LOGIN")?.as_str()?.to_owned();
            let pass = table.get("PASSWORD")?.as_str()?.to_owned();
            Some((user, pass))
        }
        _ => None,
    }
}

/// Why a login was refused; the text goes to the log, the client sees RabbitMQ's wording.
pub fn check_user(
    config: &ServerConfig,
    user: &str,
    pass: &str,
    peer: IpAddr,
) -> Result<(), String> {
    if !config.users.iter().any(|(u, p)| u == user && p == pass) {
        return Err(format!("invalid credentials for user '{user}'"));
    }
    if config.loopback_users.iter().any(|u| u == user) && !peer.is_loopback() {
        return Err(format!("user '{user}' can only connect via localhost"));
    }
    Ok(())
}

pub fn mechanism_supported(mechanism: &ShortStr) -> bool {
    MECHANISMS.split(' ').any(|m| m == mechanism.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_amqplain() {
        let plain = Bytes::from_static(b"\0guest\0secret");
        assert_eq!(
            parse_credentials("PLAIN", &plain),
            Some(("guest".into(), "secret".into()))
        );
        let mut t = warren_codec::FieldTable::new();
        t.insert("LOGIN", warren_codec::FieldValue::string("u"));
        t.insert("PASSWORD", warren_codec::FieldValue::string("p"));
        let mut buf = bytes::BytesMut::new();
        warren_codec::Writer::new(&mut buf).table(&t);
        let body = buf.freeze().slice(4..);
        assert_eq!(
            parse_credentials("AMQPLAIN", &body),
            Some(("u".into(), "p".into()))
        );
        assert_eq!(parse_credentials("PLAIN", &Bytes::from_static(b"x")), None);
    }

    #[test]
    fn guest_only_from_loopback() {
        let c = ServerConfig::default();
        assert!(check_user(&c, "guest", "guest", "127.0.0.1".parse().unwrap()).is_ok());
        assert!(check_user(&c, "guest", "guest", "10.1.2.3".parse().unwrap()).is_err());
        assert!(check_user(&c, "guest", "nope", "127.0.0.1".parse().unwrap()).is_err());
    }
}

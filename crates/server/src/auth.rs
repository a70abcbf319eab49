//! SASL PLAIN, AMQPLAIN and EXTERNAL: which mechanisms a connection offers, credential
//! parsing and the user check, including RabbitMQ's rule that loopback users (guest) may
//! only connect from a loopback address.

use crate::config::ServerConfig;
use bytes::Bytes;
use std::net::IpAddr;
use warren_broker::access::{parse_plain, AccessControl};
use warren_codec::{Reader, ShortStr};

/// Mechanisms offered on plain connections and on TLS without a client certificate.
pub const MECHANISMS: &str = "PLAIN AMQPLAIN";
/// Mechanisms offered on TLS connections whose client presented a verified certificate:
/// EXTERNAL logs in as the certificate's user (RabbitMQ's rabbitmq_auth_mechanism_ssl).
pub const MECHANISMS_WITH_EXTERNAL: &str = "PLAIN AMQPLAIN EXTERNAL";

/// (user, password) from a start-ok response, or why it is refused (for the log).
///
/// PLAIN as `access::parse_plain` reads it; an empty password is refused as RabbitMQ's
/// internal backend refuses it.
pub fn parse_credentials(mechanism: &str, response: &Bytes) -> Result<(String, String), String> {
    let (user, pass) = match mechanism {
        "PLAIN" => {
            let (user, pass) = parse_plain(response)?;
            (user.to_owned(), pass.to_owned())
        }
        "AMQPLAIN" => {
            // A field table without its length prefix.
            let mut framed = (response.len() as u32).to_be_bytes().to_vec();
            framed.extend_from_slice(response);
            let table = Reader::new(Bytes::from(framed))
                .table()
                .map_err(|e| format!("AMQPLAIN response: {e}"))?;
            let field = |k: &str| {
                table
                    .get(k)
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("AMQPLAIN response without {k}"))
            };
            (field("LOGIN")?, field("PASSWORD")?)
        }
        other => return Err(format!("unsupported mechanism {other}")),
    };
    if pass.is_empty() {
        return Err(format!("empty password for user '{user}'"));
    }
    Ok((user, pass))
}

/// Checks the password against the user database; why a login was refused goes to the
/// log, the client sees RabbitMQ's wording.
pub fn check_user(
    config: &ServerConfig,
    access: &AccessControl,
    user: &str,
    pass: &str,
    peer: IpAddr,
) -> Result<(), String> {
    if let Err(failure) = access.authenticate(user, pass) {
        return Err(format!("user '{user}' - {failure}"));
    }
    check_loopback(config, user, peer)
}

/// Whether `mechanism` is one of the `offered` ones (connection.start's list).
pub fn mechanism_offered(offered: &str, mechanism: &ShortStr) -> bool {
    offered.split(' ').any(|m| m == mechanism.as_str())
}

/// The EXTERNAL login: the name taken from the client's verified certificate must be an
/// existing user of the broker's AccessControl. No password is involved (RabbitMQ ignores
/// the SASL response too), so a user without a password can log in this way.
pub fn check_external_user(
    config: &ServerConfig,
    access: &AccessControl,
    cert_user: Option<&str>,
    peer: IpAddr,
) -> Result<String, String> {
    let user = cert_user.ok_or("the client certificate has no name to log in with")?;
    if access.user(user).is_none() {
        return Err(format!(
            "user '{user}' (from the client certificate) does not exist"
        ));
    }
    check_loopback(config, user, peer)?;
    Ok(user.to_owned())
}

fn check_loopback(config: &ServerConfig, user: &str, peer: IpAddr) -> Result<(), String> {
    // On a dual-stack listener an IPv4 client shows as ::ffff:a.b.c.d.
    if config.loopback_users.iter().any(|u| u == user) && !peer.to_canonical().is_loopback() {
        return Err(format!("user '{user}' can only connect via localhost"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_amqplain() {
        let plain = Bytes::from_static(b"\0guest\0secret");
        assert_eq!(
            parse_credentials("PLAIN", &plain),
            Ok(("guest".into(), "secret".into()))
        );
        let mut t = warren_codec::FieldTable::new();
        t.insert("LOGIN", warren_codec::FieldValue::string("u"));
        t.insert("PASSWORD", warren_codec::FieldValue::string("p"));
        let mut buf = bytes::BytesMut::new();
        warren_codec::Writer::new(&mut buf).table(&t);
        let body = buf.freeze().slice(4..);
        assert_eq!(
            parse_credentials("AMQPLAIN", &body),
            Ok(("u".into(), "p".into()))
        );
        assert!(parse_credentials("PLAIN", &Bytes::from_static(b"x")).is_err());
    }

    #[test]
    fn plain_is_strict() {
        let parse = |raw: &'static [u8]| parse_credentials("PLAIN", &Bytes::from_static(raw));
        assert!(parse(b"guest\0guest\0guest").is_ok(), "authzid = user");
        assert!(
            parse(b"admin\0guest\0guest").is_err(),
            "authzid of another user"
        );
        assert!(parse(b"\0guest\0guest\0extra").is_err(), "trailing data");
        assert!(parse(b"\0guest\0").is_err(), "empty password");
        assert!(parse(b"\0guest").is_err(), "no password");
    }

    #[test]
    fn guest_only_from_loopback() {
        let c = ServerConfig::default();
        let a = AccessControl::new();
        a.put_user("guest", Some("guest"), vec![]).unwrap();
        a.put_user("app", Some("pw"), vec![]).unwrap();
        let check =
            |user: &str, pass: &str, ip: &str| check_user(&c, &a, user, pass, ip.parse().unwrap());
        assert!(check("guest", "guest", "127.0.0.1").is_ok());
        assert!(check("guest", "guest", "10.1.2.3").is_err());
        assert!(check("guest", "nope", "127.0.0.1").is_err());
        assert!(check("guest", "guest", "::1").is_ok());
        assert!(check("guest", "guest", "::ffff:127.0.0.1").is_ok());
        assert!(check("guest", "guest", "::ffff:10.1.2.3").is_err());
        assert!(
            check("app", "pw", "10.1.2.3").is_ok(),
            "only guest is loopback-only"
        );
        assert!(check("nobody", "pw", "127.0.0.1").is_err());
    }

    #[test]
    fn external_needs_an_existing_user_from_the_certificate() {
        let c = ServerConfig::default();
        let access = AccessControl::new();
        access.put_user("CN=app,O=Warren", None, vec![]).unwrap();
        access.put_user("guest", Some("guest"), vec![]).unwrap();
        let local = "127.0.0.1".parse().unwrap();
        let remote = "10.1.2.3".parse().unwrap();
        let check = |user, peer| check_external_user(&c, &access, user, peer);
        assert_eq!(
            check(Some("CN=app,O=Warren"), remote),
            Ok("CN=app,O=Warren".to_owned())
        );
        assert!(check(Some("CN=other"), local).is_err());
        assert!(check(None, local).is_err());
        assert!(check(Some("guest"), local).is_ok());
        assert!(check(Some("guest"), remote).is_err());
        assert!(mechanism_offered(
            MECHANISMS_WITH_EXTERNAL,
            &ShortStr::from("EXTERNAL")
        ));
        assert!(!mechanism_offered(MECHANISMS, &ShortStr::from("EXTERNAL")));
    }
}

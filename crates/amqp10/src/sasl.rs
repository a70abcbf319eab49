//! SASL for AMQP 1.0: PLAIN against the broker's user database (the same check as the 0-9-1
//! handshake: password, then RabbitMQ's loopback-only users), and ANONYMOUS when the
//! configuration allows it (off by default, as in RabbitMQ).

use crate::Amqp10Config;
use std::net::IpAddr;
use warren_broker::access::{parse_plain, AccessControl};

/// The mechanisms offered, in the client's order of preference.
pub fn mechanisms(config: &Amqp10Config) -> Vec<&'static str> {
    let mut m = vec!["PLAIN"];
    if config.allow_anonymous {
        m.push("ANONYMOUS");
    }
    m
}

/// The user a sasl-init logs in as, or why it is refused (for the log).
pub fn login(
    config: &Amqp10Config,
    access: &AccessControl,
    mechanism: &str,
    response: &[u8],
    peer: IpAddr,
) -> Result<String, String> {
    let user = match mechanism {
        "PLAIN" => {
            let (user, pass) = parse_plain(response)?;
            if pass.is_empty() {
                return Err(format!("empty password for user '{user}'"));
            }
            access
                .authenticate(user, pass)
                .map_err(|failure| format!("user '{user}' - {failure}"))?;
            user.to_owned()
        }
        "ANONYMOUS" if config.allow_anonymous => {
            if access.user(&config.anonymous_user).is_none() {
                return Err(format!(
                    "anonymous login user '{}' does not exist",
                    config.anonymous_user
                ));
            }
            config.anonymous_user.clone()
        }
        other => return Err(format!("mechanism {other} not offered")),
    };
    // On a dual-stack listener an IPv4 client shows as ::ffff:a.b.c.d.
    if config.loopback_users.contains(&user) && !peer.to_canonical().is_loopback() {
        return Err(format!("user '{user}' can only connect via localhost"));
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_anonymous_and_loopback() {
        let access = AccessControl::new();
        access.put_user("guest", Some("guest"), vec![]).unwrap();
        access.put_user("app", Some("pw"), vec![]).unwrap();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let remote: IpAddr = "10.0.0.1".parse().unwrap();
        let mut config = Amqp10Config::default();
        let plain = |c: &Amqp10Config, r: &[u8], ip| login(c, &access, "PLAIN", r, ip);
        assert_eq!(plain(&config, b"\0guest\0guest", local), Ok("guest".into()));
        assert!(plain(&config, b"\0guest\0wrong", local).is_err());
        assert!(plain(&config, b"\0guest\0guest", remote).is_err());
        assert_eq!(plain(&config, b"app\0app\0pw", remote), Ok("app".into()));
        assert!(plain(&config, b"other\0app\0pw", remote).is_err());
        assert!(plain(&config, b"\0app\0", local).is_err());
        assert!(login(&config, &access, "ANONYMOUS", b"", local).is_err());
        assert_eq!(mechanisms(&config), ["PLAIN"]);
        config.allow_anonymous = true;
        assert_eq!(
            login(&config, &access, "ANONYMOUS", b"", local),
            Ok("guest".into())
        );
        assert!(login(&config, &access, "EXTERNAL", b"", local).is_err());
    }
}

//! SASL PLAIN (RFC 4616) as both protocols take it: AMQP 0-9-1's connection.start-ok and
//! AMQP 1.0's sasl-init carry the same `authzid NUL authcid NUL password` response.

/// (user, password) from a PLAIN response, or why it is refused (for the log). Nothing may
/// follow the password; an authzid, when given, must name the user itself (Warren does not
/// let one user act for another); both must be UTF-8. An empty password is the caller's to
/// refuse (0-9-1 refuses it for AMQPLAIN too).
pub fn parse_plain(response: &[u8]) -> Result<(&str, &str), String> {
    let mut parts = response.split(|&b| b == 0);
    let (Some(authzid), Some(user), Some(pass), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("PLAIN response is not authzid NUL user NUL password".into());
    };
    if !authzid.is_empty() && authzid != user {
        return Err("PLAIN authzid differs from the user".into());
    }
    let utf8 = |b| std::str::from_utf8(b).map_err(|_| "credentials are not UTF-8".to_owned());
    Ok((utf8(user)?, utf8(pass)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_responses() {
        assert_eq!(parse_plain(b"\0guest\0pw"), Ok(("guest", "pw")));
        assert_eq!(parse_plain(b"guest\0guest\0pw"), Ok(("guest", "pw")));
        assert!(parse_plain(b"other\0guest\0pw").is_err());
        assert!(parse_plain(b"\0guest\0pw\0more").is_err());
        assert!(parse_plain(b"\0guest").is_err());
        assert!(parse_plain(b"\0gu\xffest\0pw").is_err());
    }
}

//! What `/metrics/detailed` was asked for, as RabbitMQ's plugin reads it: metric groups by
//! RabbitMQ's names (`family=queue_coarse_metrics&family=channel_metrics`, repeatable) and
//! optionally vhosts (`vhost=%2F`, repeatable) that narrow the samples labelled with a
//! vhost. Without any `family=` nothing but the identity families is served.

use std::collections::HashSet;

#[derive(Debug, Default, Clone)]
pub struct Selection {
    groups: HashSet<String>,
    /// None: every vhost.
    vhosts: Option<HashSet<String>>,
}

impl Selection {
    /// From a raw query string (`a=b&c=d`, percent-encoded).
    pub fn from_query(query: &str) -> Selection {
        let mut selection = Selection::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match key {
                "family" => {
                    selection.groups.insert(value);
                }
                "vhost" => {
                    selection
                        .vhosts
                        .get_or_insert_with(HashSet::new)
                        .insert(value);
                }
                _ => {}
            }
        }
        selection
    }

    pub fn wants_group(&self, group: &str) -> bool {
        self.groups.contains(group)
    }

    pub fn wants_vhost(&self, vhost: &str) -> bool {
        self.vhosts.as_ref().is_none_or(|v| v.contains(vhost))
    }
}

/// `%XX` escapes and `+` for space; a malformed escape is kept as written.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 3 <= bytes.len() => match hex(bytes[i + 1]).zip(hex(bytes[i + 2])) {
                Some((high, low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                None => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_repeated_families_and_encoded_vhosts() {
        let s = Selection::from_query(
            "family=queue_coarse_metrics&vhost=%2F&family=channel_metrics&vhost=a+b&x=1",
        );
        assert!(s.wants_group("queue_coarse_metrics"));
        assert!(s.wants_group("channel_metrics"));
        assert!(!s.wants_group("queue_metrics"));
        assert!(s.wants_vhost("/"));
        assert!(s.wants_vhost("a b"));
        assert!(!s.wants_vhost("other"));
        assert!(Selection::from_query("").wants_vhost("any"));
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}

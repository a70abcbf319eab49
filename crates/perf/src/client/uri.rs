//! AMQP URIs (`amqp://user:pass@host:port/vhost`, the form PerfTest's `--uri` takes), with the
//! vhost percent-decoded (`%2F` is `/`), and lists of them (PerfTest's `--uris`): the nodes
//! of a cluster, over which a run spreads its connections.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpUri {
    pub user: String,
    pub password: String,
    pub host: String,
    pub port: u16,
    pub vhost: String,
}

impl AmqpUri {
    pub fn parse(uri: &str) -> Result<AmqpUri, String> {
        let rest = uri
            .strip_prefix("amqp://")
            .ok_or_else(|| format!("{uri}: only amqp:// URIs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(info) => match info.find(':') {
                Some(at) => (decode(&info[..at])?, decode(&info[at + 1..])?),
                None => (decode(info)?, String::new()),
            },
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let (host, port) = match hostport.rfind(':') {
            Some(at) if !hostport[at..].contains(']') => (
                &hostport[..at],
                hostport[at + 1..]
                    .parse::<u16>()
                    .map_err(|_| format!("{uri}: bad port"))?,
            ),
            _ => (hostport, 5672),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = if host.is_empty() { "localhost" } else { host };
        // No path means the default vhost "/"; an empty path ("amqp://h/") is the vhost "".
        // PerfTest users write %2F; we follow the spec but treat "" as "/" like most clients.
        let vhost = match path {
            None | Some("") => "/".to_owned(),
            Some(p) => decode(p)?,
        };
        Ok(AmqpUri {
            user,
            password,
            host: host.to_owned(),
            port,
            vhost,
        })
    }

    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// True when the broker runs on this machine, so its process can be found and measured.
    pub fn is_local(&self) -> bool {
        matches!(self.host.as_str(), "localhost" | "127.0.0.1" | "::1")
    }
}

impl fmt::Display for AmqpUri {
    /// Without the password: this ends up in reports.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "amqp://{}@{}", self.user, self.addr())
    }
}

/// The brokers a run connects to: one URI, or a cluster's nodes given as a comma-separated
/// list. Client `i` (consumers first, then producers; receivers, then senders) connects to
/// node `i mod n`, so every node serves clients and a publisher and its consumer usually sit
/// on different nodes, as in the reports' cluster runs. Invariant: never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUris {
    nodes: Vec<AmqpUri>,
}

impl BrokerUris {
    pub fn parse(list: &str) -> Result<BrokerUris, String> {
        let nodes = list
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(AmqpUri::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if nodes.is_empty() {
            return Err("no broker URI given".to_owned());
        }
        Ok(BrokerUris { nodes })
    }

    /// The first node: where topology is declared and whose process is measured.
    pub fn first(&self) -> &AmqpUri {
        &self.nodes[0]
    }

    /// The node client number `index` connects to.
    pub fn for_client(&self, index: usize) -> &AmqpUri {
        &self.nodes[index % self.nodes.len()]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Display for BrokerUris {
    /// Every node, without passwords.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, node) in self.nodes.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{node}")?;
        }
        Ok(())
    }
}

fn decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).map_err(|e| e.to_string())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("bad escape in {s}"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_seed_uri() {
        let u = AmqpUri::parse("amqp://admin:pass@10.80.163.3:5672/%2F").unwrap();
        assert_eq!(u.user, "admin");
        assert_eq!(u.password, "pass");
        assert_eq!(u.host, "10.80.163.3");
        assert_eq!(u.port, 5672);
        assert_eq!(u.vhost, "/");
    }

    #[test]
    fn defaults() {
        let u = AmqpUri::parse("amqp://localhost").unwrap();
        assert_eq!(
            (u.user.as_str(), u.port, u.vhost.as_str()),
            ("guest", 5672, "/")
        );
        let u = AmqpUri::parse("amqp://guest:guest@127.0.0.1:5681/").unwrap();
        assert_eq!((u.port, u.vhost.as_str()), (5681, "/"));
        assert!(u.is_local());
    }

    #[test]
    fn a_list_of_nodes_spreads_clients_round_robin() {
        let uris = BrokerUris::parse("amqp://a:5672, amqp://b:5673,amqp://c:5674,").unwrap();
        assert_eq!(uris.len(), 3);
        assert_eq!(uris.first().host, "a");
        let hosts: Vec<_> = (0..5).map(|i| uris.for_client(i).host.clone()).collect();
        assert_eq!(hosts, ["a", "b", "c", "a", "b"]);
        assert_eq!(
            uris.to_string(),
            "amqp://guest@a:5672,amqp://guest@b:5673,amqp://guest@c:5674"
        );
        assert!(BrokerUris::parse(" , ").is_err());
        assert!(BrokerUris::parse("amqp://a,http://b").is_err());
    }
}

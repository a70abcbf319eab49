//! Configure/write/read permissions and topic permissions with their regexes compiled once.
//!
//! RabbitMQ's rule (rabbit_auth_backend_internal): a resource name is allowed when the regex
//! matches anywhere in it (unanchored search); an empty regex means `^$`, which in practice
//! allows nothing but the default exchange's empty name. Topic permissions match the routing
//! key, after `{username}` and `{vhost}` in the regex are replaced by the (escaped) values.

use regex::Regex;

/// Permission regex sources, as RabbitMQ's `set_permissions` takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    pub configure: String,
    pub write: String,
    pub read: String,
}

impl Permission {
    /// configure/write/read all `.*`.
    pub fn full() -> Permission {
        Permission {
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        }
    }
}

/// Topic permission regex sources for one exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPermission {
    pub exchange: String,
    pub write: String,
    pub read: String,
}

/// Which of the three permissions an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    Configure,
    Write,
    Read,
}

impl AccessKind {
    /// The word RabbitMQ uses in its texts.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessKind::Configure => "configure",
            AccessKind::Write => "write",
            AccessKind::Read => "read",
        }
    }
}

/// Compiles one permission regex with RabbitMQ's empty-means-`^$` rule.
pub(super) fn compile(source: &str) -> Result<Regex, String> {
    let source = if source.is_empty() { "^$" } else { source };
    Regex::new(source).map_err(|e| format!("invalid regex '{source}': {e}"))
}

#[derive(Debug)]
pub(super) struct CompiledPermission {
    pub source: Permission,
    configure: Regex,
    write: Regex,
    read: Regex,
}

impl CompiledPermission {
    pub fn new(source: Permission) -> Result<CompiledPermission, String> {
        Ok(CompiledPermission {
            configure: compile(&source.configure)?,
            write: compile(&source.write)?,
            read: compile(&source.read)?,
            source,
        })
    }

    pub fn allows(&self, kind: AccessKind, name: &str) -> bool {
        match kind {
            AccessKind::Configure => &self.configure,
            AccessKind::Write => &self.write,
            AccessKind::Read => &self.read,
        }
        .is_match(name)
    }
}

#[derive(Debug)]
pub(super) struct CompiledTopicPermission {
    pub source: TopicPermission,
    /// Regexes without variables are compiled once; those with `{username}`/`{vhost}` are
    /// expanded and compiled per check (the channel caches the outcome).
    write: Option<Regex>,
    read: Option<Regex>,
}

fn has_variables(source: &str) -> bool {
    source.contains("{username}") || source.contains("{vhost}")
}

impl CompiledTopicPermission {
    pub fn new(source: TopicPermission) -> Result<CompiledTopicPermission, String> {
        // Validate even the variable ones: with the variables replaced by plain text.
        compile(&expand(&source.write, "u", "v"))?;
        compile(&expand(&source.read, "u", "v"))?;
        let fixed = |s: &str| (!has_variables(s)).then(|| compile(s)).transpose();
        Ok(CompiledTopicPermission {
            write: fixed(&source.write)?,
            read: fixed(&source.read)?,
            source,
        })
    }

    /// Whether `routing_key` may be published (Write) or bound (Read). Configure has no
    /// topic permission and is always allowed.
    pub fn allows(&self, kind: AccessKind, routing_key: &str, user: &str, vhost: &str) -> bool {
        let (compiled, source) = match kind {
            AccessKind::Write => (&self.write, &self.source.write),
            AccessKind::Read => (&self.read, &self.source.read),
            AccessKind::Configure => return true,
        };
        match compiled {
            Some(regex) => regex.is_match(routing_key),
            None => compile(&expand(source, user, vhost)).is_ok_and(|r| r.is_match(routing_key)),
        }
    }
}

/// RabbitMQ's expand_topic_permission: the values are regex-escaped.
fn expand(source: &str, user: &str, vhost: &str) -> String {
    source
        .replace("{username}", &regex::escape(user))
        .replace("{vhost}", &regex::escape(vhost))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(c: &str, w: &str, r: &str) -> CompiledPermission {
        CompiledPermission::new(Permission {
            configure: c.into(),
            write: w.into(),
            read: r.into(),
        })
        .unwrap()
    }

    #[test]
    fn unanchored_search_and_empty_means_nothing() {
        let p = perm("^app-", "log", "");
        assert!(p.allows(AccessKind::Configure, "app-1"));
        assert!(!p.allows(AccessKind::Configure, "my-app-1"));
        // Unanchored: "log" anywhere in the name.
        assert!(p.allows(AccessKind::Write, "audit-logs"));
        assert!(!p.allows(AccessKind::Write, "audit"));
        // Empty: only the empty name (the default exchange).
        assert!(!p.allows(AccessKind::Read, "q"));
        assert!(p.allows(AccessKind::Read, ""));
    }

    #[test]
    fn bad_regex_is_refused() {
        assert!(CompiledPermission::new(Permission {
            configure: "(".into(),
            write: ".*".into(),
            read: ".*".into(),
        })
        .is_err());
    }

    #[test]
    fn topic_variables_are_expanded_and_escaped() {
        let t = CompiledTopicPermission::new(TopicPermission {
            exchange: "amq.topic".into(),
            write: "^{username}\\.".into(),
            read: "^x\\.{vhost}$".into(),
        })
        .unwrap();
        assert!(t.allows(AccessKind::Write, "alice.news", "alice", "/"));
        assert!(!t.allows(AccessKind::Write, "bob.news", "alice", "/"));
        // A user name with regex characters matches only itself.
        assert!(t.allows(AccessKind::Write, "a.b.x", "a.b", "/"));
        assert!(!t.allows(AccessKind::Write, "aXb.x", "a.b", "/"));
        assert!(t.allows(AccessKind::Read, "x.prod", "alice", "prod"));
        assert!(!t.allows(AccessKind::Read, "x.prod", "alice", "test"));
    }
}

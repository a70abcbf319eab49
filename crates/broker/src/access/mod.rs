//! `AccessControl`: the internal user database — users with hashed passwords and tags,
//! configure/write/read permissions per (vhost, user), topic permissions per (vhost, user,
//! exchange) — and the checks RabbitMQ's internal auth backend makes with them.
//!
//! Every change bumps `generation`, so a channel caching check results can tell its cache is
//! stale with one atomic load; a change hook lets the broker persist the new state.

mod password;
mod permission;
pub mod required;
mod sasl_plain;
mod user_limits;

pub use password::{Hashing, SHA256, SHA512};
pub use permission::{AccessKind, Permission, TopicPermission};
pub use sasl_plain::parse_plain;
pub use user_limits::{UserLimits, MAX_CHANNELS, MAX_CONNECTIONS};

use parking_lot::RwLock;
use permission::{CompiledPermission, CompiledTopicPermission};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The tag that lets a user publish messages whose `user_id` names another user (RabbitMQ's,
/// meant for a shovel or federation link that forwards other users' messages).
pub const IMPERSONATOR_TAG: &str = "impersonator";

/// A user of the internal database, as RabbitMQ's `internal_user` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// base64(salt ++ hash(salt ++ password)); empty for a user without password.
    pub password_hash: String,
    /// The hashing module's name, e.g. "rabbit_password_hashing_sha256".
    pub hashing_algorithm: String,
    pub tags: Vec<String>,
    /// Its connection and channel limits; kept when the user is replaced (a new password or
    /// tags), as RabbitMQ keeps them.
    pub limits: UserLimits,
}

impl User {
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

/// Why authentication failed. Both cases look the same to the client (RabbitMQ says "user
/// 'NAME' - invalid credentials" either way, or refuses blank passwords before looking).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    BlankPassword,
    InvalidCredentials,
}

impl std::fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthFailure::BlankPassword => f.write_str("user has blank password"),
            AuthFailure::InvalidCredentials => f.write_str("invalid credentials"),
        }
    }
}

/// RabbitMQ 3.x's text for a refused permission on a queue or exchange (`resource` is
/// "queue" or "exchange"; the default exchange is named "amq.default"), the same for AMQP
/// and the HTTP API. 4.x puts the permission's name in front ("configure access to ...").
pub fn refusal_text(resource: &str, name: &str, vhost: &str, user: &str) -> String {
    format!("access to {resource} '{name}' in vhost '{vhost}' refused for user '{user}'")
}

/// RabbitMQ's text for a routing key a topic permission refuses.
pub fn topic_refusal_text(routing_key: &str, exchange: &str, vhost: &str, user: &str) -> String {
    format!(
        "access to topic '{routing_key}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'"
    )
}

#[derive(Default)]
struct State {
    users: BTreeMap<String, Arc<User>>,
    /// (vhost, user) → permission.
    permissions: BTreeMap<(String, String), CompiledPermission>,
    /// (vhost, user, exchange) → topic permission.
    topic_permissions: BTreeMap<(String, String, String), CompiledTopicPermission>,
}

type ChangeHook = Box<dyn Fn() + Send + Sync>;
type UserDeletedHook = Box<dyn Fn(&str) + Send + Sync>;

#[derive(Default)]
pub struct AccessControl {
    state: RwLock<State>,
    generation: AtomicU64,
    on_change: OnceLock<ChangeHook>,
    on_user_deleted: OnceLock<UserDeletedHook>,
}

impl std::fmt::Debug for AccessControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessControl")
            .field("users", &self.state.read().users.len())
            .finish()
    }
}

impl AccessControl {
    pub fn new() -> AccessControl {
        AccessControl::default()
    }

    /// Called (outside the lock) after every change; the broker persists from it. Set once.
    pub fn set_change_hook(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_change.set(Box::new(hook));
    }

    /// Called (outside the lock) with the name of every deleted user; the broker closes the
    /// user's connections from it. Set once.
    pub fn set_user_deleted_hook(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.on_user_deleted.set(Box::new(hook));
    }

    /// Changes with every user, permission or topic permission change.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(hook) = self.on_change.get() {
            hook();
        }
    }

    // ---- users ---------------------------------------------------------------------------

    /// Checks a password as RabbitMQ's internal backend: blank passwords are refused, an
    /// unknown user costs one hash like a known one, the comparison is constant-time.
    pub fn authenticate(&self, user: &str, password: &str) -> Result<Arc<User>, AuthFailure> {
        if password.is_empty() {
            return Err(AuthFailure::BlankPassword);
        }
        let Some(found) = self.user(user) else {
            Hashing::Sha256.waste_one_verification(password);
            return Err(AuthFailure::InvalidCredentials);
        };
        let verified = Hashing::parse(&found.hashing_algorithm)
            .is_some_and(|h| h.verify(&found.password_hash, password));
        match verified {
            true => Ok(found),
            false => Err(AuthFailure::InvalidCredentials),
        }
    }

    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.state.read().users.get(name).cloned()
    }

    /// RabbitMQ's refusal of a message whose `user_id` property names another user than the
    /// one who published it, unless that user has the `impersonator` tag; None when it may
    /// go. Every protocol's publish asks it (0-9-1 closes the channel with 406, AMQP 1.0
    /// rejects the transfer, the HTTP API answers 400). The users are looked at only for a
    /// message that claims someone else.
    /// Inlined to its first line, so that a publish without `user_id` (nearly all) costs
    /// a branch, not a call (callgrind, `tools/bench/instructions.sh`).
    #[inline]
    pub fn user_id_refusal(&self, user_id: Option<&str>, user: &str) -> Option<String> {
        let claimed = user_id?;
        self.claimed_user_refusal(claimed, user)
    }

    #[inline(never)]
    fn claimed_user_refusal(&self, claimed: &str, user: &str) -> Option<String> {
        if claimed == user || self.user(user).is_some_and(|u| u.has_tag(IMPERSONATOR_TAG)) {
            return None;
        }
        Some(format!(
            "user_id property set to '{claimed}' but authenticated user was '{user}'"
        ))
    }

    /// All users, by name.
    pub fn users(&self) -> Vec<Arc<User>> {
        self.state.read().users.values().cloned().collect()
    }

    /// Creates or replaces a user, hashing `password` with SHA-256 (RabbitMQ's default).
    /// `None` leaves the user without a password: it cannot log in with PLAIN.
    pub fn put_user(
        &self,
        name: &str,
        password: Option<&str>,
        tags: Vec<String>,
    ) -> Result<Arc<User>, String> {
        let hash = password
            .map(|p| Hashing::Sha256.hash(p))
            .unwrap_or_default();
        self.put_user_with_hash(name, &hash, SHA256, tags)
    }

    /// Creates or replaces a user from a hash (definitions import, RabbitMQ's
    /// `password_hash` + `hashing_algorithm`). An empty hash means no password.
    pub fn put_user_with_hash(
        &self,
        name: &str,
        password_hash: &str,
        hashing_algorithm: &str,
        tags: Vec<String>,
    ) -> Result<Arc<User>, String> {
        if name.is_empty() {
            return Err("user name must not be empty".into());
        }
        let Some(hashing) = Hashing::parse(hashing_algorithm) else {
            return Err(format!(
                "unsupported hashing algorithm '{hashing_algorithm}'"
            ));
        };
        if !password::well_formed(hashing, password_hash) {
            return Err(format!(
                "password hash is not a base64 {hashing_algorithm} hash"
            ));
        }
        let user = {
            let mut state = self.state.write();
            let limits = state.users.get(name).map(|u| u.limits).unwrap_or_default();
            let user = Arc::new(User {
                name: name.to_owned(),
                password_hash: password_hash.to_owned(),
                hashing_algorithm: hashing.module().to_owned(),
                tags: tags.into_iter().filter(|t| !t.is_empty()).collect(),
                limits,
            });
            state.users.insert(name.to_owned(), user.clone());
            user
        };
        self.changed();
        Ok(user)
    }

    /// Replaces a user's limits; refused when there is no such user.
    pub fn set_user_limits(&self, name: &str, limits: UserLimits) -> Result<(), String> {
        {
            let mut state = self.state.write();
            let Some(user) = state.users.get_mut(name) else {
                return Err(format!("user '{name}' not found"));
            };
            Arc::make_mut(user).limits = limits;
        }
        self.changed();
        Ok(())
    }

    /// Deletes a user with its permissions and topic permissions (its connections are closed
    /// through the user-deleted hook); false if there was none.
    pub fn delete_user(&self, name: &str) -> bool {
        {
            let mut state = self.state.write();
            if state.users.remove(name).is_none() {
                return false;
            }
            state.permissions.retain(|(_, u), _| u != name);
            state.topic_permissions.retain(|(_, u, _), _| u != name);
        }
        self.changed();
        if let Some(hook) = self.on_user_deleted.get() {
            hook(name);
        }
        true
    }

    // ---- permissions ---------------------------------------------------------------------

    /// Sets (vhost, user)'s permission; an invalid regex is refused with the reason.
    /// Whether the user and vhost exist is the caller's check (the broker knows vhosts).
    pub fn set_permission(&self, vhost: &str, user: &str, p: Permission) -> Result<(), String> {
        let compiled = CompiledPermission::new(p)?;
        self.state
            .write()
            .permissions
            .insert((vhost.to_owned(), user.to_owned()), compiled);
        self.changed();
        Ok(())
    }

    pub fn clear_permission(&self, vhost: &str, user: &str) -> bool {
        let removed = self
            .state
            .write()
            .permissions
            .remove(&(vhost.to_owned(), user.to_owned()))
            .is_some();
        if removed {
            self.changed();
        }
        removed
    }

    /// Every (vhost, user, permission), ordered by vhost then user.
    pub fn permissions(&self) -> Vec<(String, String, Permission)> {
        self.state
            .read()
            .permissions
            .iter()
            .map(|((v, u), p)| (v.clone(), u.clone(), p.source.clone()))
            .collect()
    }

    pub fn permission(&self, vhost: &str, user: &str) -> Option<Permission> {
        self.state
            .read()
            .permissions
            .get(&(vhost.to_owned(), user.to_owned()))
            .map(|p| p.source.clone())
    }

    /// Sets the topic permission of (vhost, user) for `p.exchange`.
    pub fn set_topic_permission(
        &self,
        vhost: &str,
        user: &str,
        p: TopicPermission,
    ) -> Result<(), String> {
        let key = (vhost.to_owned(), user.to_owned(), p.exchange.clone());
        let compiled = CompiledTopicPermission::new(p)?;
        self.state.write().topic_permissions.insert(key, compiled);
        self.changed();
        Ok(())
    }

    /// Clears (vhost, user)'s topic permission for `exchange`, or all of them when `None`.
    pub fn clear_topic_permission(&self, vhost: &str, user: &str, exchange: Option<&str>) -> bool {
        let removed = {
            let mut state = self.state.write();
            let before = state.topic_permissions.len();
            state.topic_permissions.retain(|(v, u, e), _| {
                !(v == vhost && u == user && exchange.is_none_or(|x| x == e))
            });
            state.topic_permissions.len() != before
        };
        if removed {
            self.changed();
        }
        removed
    }

    /// Every (vhost, user, topic permission), ordered by vhost, user, exchange.
    pub fn topic_permissions(&self) -> Vec<(String, String, TopicPermission)> {
        self.state
            .read()
            .topic_permissions
            .iter()
            .map(|((v, u, _), p)| (v.clone(), u.clone(), p.source.clone()))
            .collect()
    }

    /// Drops every permission and topic permission on a vhost (when it is deleted).
    pub fn forget_vhost(&self, vhost: &str) {
        {
            let mut state = self.state.write();
            state.permissions.retain(|(v, _), _| v != vhost);
            state.topic_permissions.retain(|(v, _, _), _| v != vhost);
        }
        self.changed();
    }

    // ---- checks --------------------------------------------------------------------------

    /// May `user` open a connection to `vhost`: it has a permission entry there (whatever
    /// its regexes), as RabbitMQ's check_vhost_access.
    pub fn check_vhost(&self, user: &str, vhost: &str) -> bool {
        self.state
            .read()
            .permissions
            .contains_key(&(vhost.to_owned(), user.to_owned()))
    }

    /// May `user` do `kind` on the exchange or queue `resource_name` in `vhost`.
    pub fn check(&self, user: &str, vhost: &str, kind: AccessKind, resource_name: &str) -> bool {
        self.state
            .read()
            .permissions
            .get(&(vhost.to_owned(), user.to_owned()))
            .is_some_and(|p| p.allows(kind, resource_name))
    }

    /// Whether any topic permission of (vhost, user) names `exchange`.
    pub fn has_topic_permission(&self, user: &str, vhost: &str, exchange: &str) -> bool {
        self.state
            .read()
            .topic_permissions
            .keys()
            .any(|(v, u, e)| v == vhost && u == user && e == exchange)
    }

    /// May `user` publish (Write) or bind (Read) with `routing_key` on the topic exchange
    /// `exchange`: true when no topic permission is set for that exchange, as RabbitMQ.
    pub fn check_topic(
        &self,
        user: &str,
        vhost: &str,
        exchange: &str,
        kind: AccessKind,
        routing_key: &str,
    ) -> bool {
        let state = self.state.read();
        let key = (vhost.to_owned(), user.to_owned(), exchange.to_owned());
        match state.topic_permissions.get(&key) {
            None => true,
            Some(p) => p.allows(kind, routing_key, user, vhost),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn authenticate_users() {
        let ac = AccessControl::new();
        ac.put_user("alice", Some("s3cret"), tags(&["administrator"]))
            .unwrap();
        ac.put_user("nopass", None, vec![]).unwrap();
        let alice = ac.authenticate("alice", "s3cret").unwrap();
        assert!(alice.has_tag("administrator"));
        assert_eq!(alice.hashing_algorithm, "rabbit_password_hashing_sha256");
        assert_eq!(
            ac.authenticate("alice", "wrong"),
            Err(AuthFailure::InvalidCredentials)
        );
        assert_eq!(
            ac.authenticate("bob", "s3cret"),
            Err(AuthFailure::InvalidCredentials)
        );
        assert_eq!(
            ac.authenticate("alice", ""),
            Err(AuthFailure::BlankPassword)
        );
        assert_eq!(
            ac.authenticate("nopass", "x"),
            Err(AuthFailure::InvalidCredentials)
        );
        // Replacing the user replaces the password.
        ac.put_user("alice", Some("new"), vec![]).unwrap();
        assert!(ac.authenticate("alice", "s3cret").is_err());
        assert!(ac.authenticate("alice", "new").is_ok());
    }

    #[test]
    fn imported_hashes() {
        let ac = AccessControl::new();
        let hash = Hashing::Sha512.hash("pw");
        ac.put_user_with_hash("u", &hash, SHA512, vec![]).unwrap();
        assert!(ac.authenticate("u", "pw").is_ok());
        assert!(ac
            .put_user_with_hash("u", &hash, "rabbit_password_hashing_md5", vec![])
            .is_err());
        assert!(ac.put_user_with_hash("u", "%%", SHA256, vec![]).is_err());
        assert!(ac.put_user("", Some("x"), vec![]).is_err());
    }

    #[test]
    fn permissions_and_checks() {
        let ac = AccessControl::new();
        ac.put_user("u", Some("p"), vec![]).unwrap();
        assert!(!ac.check_vhost("u", "/"));
        assert!(!ac.check("u", "/", AccessKind::Read, "q"));
        ac.set_permission(
            "/",
            "u",
            Permission {
                configure: "".into(),
                write: "^ex$".into(),
                read: ".*".into(),
            },
        )
        .unwrap();
        assert!(ac.check_vhost("u", "/"));
        assert!(!ac.check_vhost("u", "other"));
        assert!(!ac.check("u", "/", AccessKind::Configure, "q"));
        assert!(ac.check("u", "/", AccessKind::Write, "ex"));
        assert!(!ac.check("u", "/", AccessKind::Write, "ex2"));
        assert!(ac.check("u", "/", AccessKind::Read, "q"));
        assert!(!ac.check("u", "other", AccessKind::Read, "q"));
        assert!(ac
            .set_permission(
                "/",
                "u",
                Permission {
                    configure: "[".into(),
                    write: "".into(),
                    read: "".into()
                }
            )
            .is_err());
        assert_eq!(ac.permission("/", "u").unwrap().write, "^ex$");
        assert_eq!(ac.permissions().len(), 1);
        assert!(ac.clear_permission("/", "u"));
        assert!(!ac.clear_permission("/", "u"));
        assert!(!ac.check("u", "/", AccessKind::Read, "q"));
    }

    #[test]
    fn topic_permissions() {
        let ac = AccessControl::new();
        // No topic permission: allowed.
        assert!(ac.check_topic("u", "/", "amq.topic", AccessKind::Write, "any"));
        ac.set_topic_permission(
            "/",
            "u",
            TopicPermission {
                exchange: "amq.topic".into(),
                write: "^{username}\\.".into(),
                read: "^public\\.".into(),
            },
        )
        .unwrap();
        assert!(ac.check_topic("u", "/", "amq.topic", AccessKind::Write, "u.x"));
        assert!(!ac.check_topic("u", "/", "amq.topic", AccessKind::Write, "v.x"));
        assert!(ac.check_topic("u", "/", "amq.topic", AccessKind::Read, "public.x"));
        assert!(!ac.check_topic("u", "/", "amq.topic", AccessKind::Read, "u.x"));
        // Other exchanges and vhosts are not covered.
        assert!(ac.check_topic("u", "/", "other", AccessKind::Write, "v.x"));
        assert!(ac.check_topic("u", "v2", "amq.topic", AccessKind::Write, "v.x"));
        assert_eq!(ac.topic_permissions().len(), 1);
        assert!(ac.clear_topic_permission("/", "u", None));
        assert!(ac.check_topic("u", "/", "amq.topic", AccessKind::Write, "v.x"));
    }

    #[test]
    fn deleting_a_user_takes_its_permissions_and_changes_notify() {
        let ac = AccessControl::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        ac.set_change_hook(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let g0 = ac.generation();
        ac.put_user("u", Some("p"), vec![]).unwrap();
        ac.set_permission("/", "u", Permission::full()).unwrap();
        ac.set_topic_permission(
            "/",
            "u",
            TopicPermission {
                exchange: "t".into(),
                write: ".*".into(),
                read: ".*".into(),
            },
        )
        .unwrap();
        assert!(ac.delete_user("u"));
        assert!(!ac.delete_user("u"));
        assert!(ac.permissions().is_empty());
        assert!(ac.topic_permissions().is_empty());
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert!(ac.generation() > g0);
    }
}

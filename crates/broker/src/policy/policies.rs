//! A policy (`Policy`), the vhost's set of them (`Policies`) and the pair that applies to
//! one entity (`AppliedPolicies`, merged key by key).

use regex::Regex;
use serde_json::{Map, Value};
use std::sync::Arc;

/// A policy's definition: setting name → JSON value, as RabbitMQ keeps it.
pub type Definition = Map<String, Value>;

/// User policies and operator policies are the same shape; operators may set fewer keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Policy,
    Operator,
}

/// What a policy applies to (`apply-to`). RabbitMQ 3.13 added the per-queue-type values;
/// every Warren queue is a classic queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyTo {
    All,
    Exchanges,
    Queues,
    ClassicQueues,
    QuorumQueues,
    Streams,
}

impl ApplyTo {
    pub fn parse(s: &str) -> Option<ApplyTo> {
        Some(match s {
            "all" => ApplyTo::All,
            "exchanges" => ApplyTo::Exchanges,
            "queues" => ApplyTo::Queues,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "streams" => ApplyTo::Streams,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::All => "all",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::Queues => "queues",
            ApplyTo::ClassicQueues => "classic_queues",
            ApplyTo::QuorumQueues => "quorum_queues",
            ApplyTo::Streams => "streams",
        }
    }

    fn takes_queues(self) -> bool {
        matches!(
            self,
            ApplyTo::All | ApplyTo::Queues | ApplyTo::ClassicQueues
        )
    }

    fn takes_exchanges(self) -> bool {
        matches!(self, ApplyTo::All | ApplyTo::Exchanges)
    }
}

/// What a policy is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityKind {
    Queue,
    Exchange,
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub kind: PolicyKind,
    pub vhost: String,
    pub name: String,
    pub pattern: String,
    pub apply_to: ApplyTo,
    pub priority: i64,
    pub definition: Definition,
    regex: Regex,
}

impl PartialEq for Policy {
    fn eq(&self, other: &Policy) -> bool {
        self.kind == other.kind
            && self.vhost == other.vhost
            && self.name == other.name
            && self.pattern == other.pattern
            && self.apply_to == other.apply_to
            && self.priority == other.priority
            && self.definition == other.definition
    }
}

impl Policy {
    /// A checked policy. Errors carry RabbitMQ's text ("Validation failed\n\n… is not a
    /// valid maximum length\n"), which its HTTP API answers with a 400.
    pub fn new(
        kind: PolicyKind,
        vhost: &str,
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: Value,
    ) -> Result<Policy, String> {
        let body = serde_json::json!({
            "pattern": pattern,
            "apply-to": apply_to,
            "priority": priority,
            "definition": definition,
        });
        Policy::from_json(kind, vhost, name, &body)
    }

    /// A policy from the body of RabbitMQ's `PUT /api/policies/VHOST/NAME` (or a
    /// definitions file entry): `pattern` and `definition` required, `priority` (default 0)
    /// and `apply-to` (default "all") optional.
    pub fn from_json(
        kind: PolicyKind,
        vhost: &str,
        name: &str,
        body: &Value,
    ) -> Result<Policy, String> {
        let checked = super::validation::check(kind, body)?;
        Ok(Policy {
            kind,
            vhost: vhost.to_owned(),
            name: name.to_owned(),
            pattern: checked.pattern,
            apply_to: checked.apply_to,
            priority: checked.priority,
            definition: checked.definition,
            regex: checked.regex,
        })
    }

    /// The policy as RabbitMQ's `/api/policies` lists it.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to.as_str(),
            "definition": self.definition,
            "priority": self.priority,
        })
    }

    pub fn matches(&self, kind: EntityKind, name: &str) -> bool {
        let applies = match kind {
            EntityKind::Queue => self.apply_to.takes_queues(),
            EntityKind::Exchange => self.apply_to.takes_exchanges(),
        };
        applies && self.regex.is_match(name)
    }
}

/// The policy and the operator policy that apply to one queue or exchange.
///
/// RabbitMQ's HTTP API (checked on 3.10.8) shows them on a queue as `"policy"` and
/// `"operator_policy"` (the names, `null` when none) and `"effective_policy_definition"`
/// (`{}` when none); on an exchange only `"policy"`, and only when one applies.
#[derive(Debug, Clone, Default)]
pub struct AppliedPolicies {
    pub policy: Option<Arc<Policy>>,
    pub operator_policy: Option<Arc<Policy>>,
}

impl PartialEq for AppliedPolicies {
    fn eq(&self, other: &AppliedPolicies) -> bool {
        fn same(a: &Option<Arc<Policy>>, b: &Option<Arc<Policy>>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                (None, None) => true,
                _ => false,
            }
        }
        same(&self.policy, &other.policy) && same(&self.operator_policy, &other.operator_policy)
    }
}

impl AppliedPolicies {
    /// One setting after the merge of policy and operator policy.
    pub fn get(&self, key: &str) -> Option<Value> {
        let user = self.policy.as_ref().and_then(|p| p.definition.get(key));
        let operator = self
            .operator_policy
            .as_ref()
            .and_then(|p| p.definition.get(key));
        match (user, operator) {
            (None, None) => None,
            (Some(v), None) | (None, Some(v)) => Some(v.clone()),
            (Some(v), Some(op)) => Some(merged_value(key, v, op)),
        }
    }

    /// The merged definition: RabbitMQ's `effective_policy_definition` (empty when
    /// nothing applies).
    pub fn effective_definition(&self) -> Definition {
        let mut keys: Vec<&String> = self
            .policy
            .iter()
            .chain(self.operator_policy.iter())
            .flat_map(|p| p.definition.keys())
            .collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter_map(|k| Some((k.clone(), self.get(k)?)))
            .collect()
    }

    pub fn policy_name(&self) -> Option<&str> {
        self.policy.as_ref().map(|p| p.name.as_str())
    }

    pub fn operator_policy_name(&self) -> Option<&str> {
        self.operator_policy.as_ref().map(|p| p.name.as_str())
    }
}

/// RabbitMQ's merge of a key both policies set (`rabbit_policies:merge_policy_value`):
/// numeric limits take the lower value (a negative delivery-limit means unlimited, and
/// then the higher one, the limited one, wins); overflow, queue-version and booleans take
/// the operator's value. Other keys cannot clash: operator policies do not take them.
fn merged_value(key: &str, user: &Value, operator: &Value) -> Value {
    let lower = || match (user.as_i64(), operator.as_i64()) {
        (Some(a), Some(b)) if a <= b => user.clone(),
        _ => operator.clone(),
    };
    match key {
        "message-ttl"
        | "max-length"
        | "max-length-bytes"
        | "max-in-memory-length"
        | "max-in-memory-bytes"
        | "expires" => lower(),
        "delivery-limit" => match (user.as_i64(), operator.as_i64()) {
            (Some(a), Some(b)) if a < 0 || b < 0 => Value::from(a.max(b)),
            _ => lower(),
        },
        _ => operator.clone(),
    }
}

/// The policies and operator policies of one vhost.
#[derive(Debug, Default)]
pub struct Policies {
    policies: Vec<Arc<Policy>>,
    operator_policies: Vec<Arc<Policy>>,
}

impl Policies {
    fn list_mut(&mut self, kind: PolicyKind) -> &mut Vec<Arc<Policy>> {
        match kind {
            PolicyKind::Policy => &mut self.policies,
            PolicyKind::Operator => &mut self.operator_policies,
        }
    }

    /// Policies of one kind, by priority then name (the order RabbitMQ lists them in:
    /// lowest priority first).
    pub fn list(&self, kind: PolicyKind) -> Vec<Arc<Policy>> {
        let mut all = match kind {
            PolicyKind::Policy => self.policies.clone(),
            PolicyKind::Operator => self.operator_policies.clone(),
        };
        all.sort_by(|a, b| a.priority.cmp(&b.priority).then(a.name.cmp(&b.name)));
        all
    }

    /// Adds or replaces (by name) a policy, in the list its kind says.
    pub fn set(&mut self, policy: Policy) {
        let list = self.list_mut(policy.kind);
        list.retain(|p| p.name != policy.name);
        list.push(Arc::new(policy));
    }

    /// Removes a policy by name; false if there was none.
    pub fn clear(&mut self, kind: PolicyKind, name: &str) -> bool {
        let list = self.list_mut(kind);
        let before = list.len();
        list.retain(|p| p.name != name);
        list.len() != before
    }

    /// The policy and operator policy that apply to an entity.
    pub fn applied(&self, kind: EntityKind, name: &str) -> AppliedPolicies {
        AppliedPolicies {
            policy: best_match(&self.policies, kind, name),
            operator_policy: best_match(&self.operator_policies, kind, name),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty() && self.operator_policies.is_empty()
    }
}

fn best_match(policies: &[Arc<Policy>], kind: EntityKind, name: &str) -> Option<Arc<Policy>> {
    policies
        .iter()
        .filter(|p| p.matches(kind, name))
        .min_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(name: &str, pattern: &str, apply_to: &str, priority: i64, def: Value) -> Policy {
        Policy::new(
            PolicyKind::Policy,
            "/",
            name,
            pattern,
            apply_to,
            priority,
            def,
        )
        .unwrap()
    }

    fn op(name: &str, pattern: &str, def: Value) -> Policy {
        Policy::new(PolicyKind::Operator, "/", name, pattern, "all", 0, def).unwrap()
    }

    #[test]
    fn pattern_is_an_unanchored_search_and_apply_to_filters() {
        let p = policy("p", "ord", "queues", 0, json!({"max-length": 1}));
        assert!(p.matches(EntityKind::Queue, "orders"));
        assert!(p.matches(EntityKind::Queue, "my.orders"));
        assert!(!p.matches(EntityKind::Queue, "invoices"));
        assert!(!p.matches(EntityKind::Exchange, "orders"));
        let x = policy(
            "x",
            "^ex$",
            "exchanges",
            0,
            json!({"alternate-exchange": "ae"}),
        );
        assert!(x.matches(EntityKind::Exchange, "ex"));
        assert!(!x.matches(EntityKind::Exchange, "ex2"));
        assert!(!x.matches(EntityKind::Queue, "ex"));
        let all = policy("a", ".*", "all", 0, json!({"max-length": 1}));
        assert!(all.matches(EntityKind::Queue, "") && all.matches(EntityKind::Exchange, "x"));
        let classic = policy("c", ".*", "classic_queues", 0, json!({"max-length": 1}));
        assert!(classic.matches(EntityKind::Queue, "q"));
        let quorum = policy("qq", ".*", "quorum_queues", 0, json!({"max-length": 1}));
        assert!(!quorum.matches(EntityKind::Queue, "q"));
    }

    #[test]
    fn highest_priority_wins_and_ties_go_to_the_smallest_name() {
        let mut set = Policies::default();
        set.set(policy("low", ".*", "all", 1, json!({"max-length": 1})));
        set.set(policy("high", "^q", "all", 5, json!({"max-length": 2})));
        set.set(policy("b-tie", "^q", "all", 5, json!({"max-length": 3})));
        let applied = set.applied(EntityKind::Queue, "q1");
        assert_eq!(applied.policy_name(), Some("b-tie"));
        assert_eq!(
            set.applied(EntityKind::Queue, "x").policy_name(),
            Some("low")
        );
        // Replacing by name, then clearing, changes the choice.
        set.set(policy("b-tie", "^q", "all", 0, json!({"max-length": 3})));
        assert_eq!(
            set.applied(EntityKind::Queue, "q1").policy_name(),
            Some("high")
        );
        assert!(set.clear(PolicyKind::Policy, "high"));
        assert!(!set.clear(PolicyKind::Policy, "high"));
        assert_eq!(
            set.applied(EntityKind::Queue, "q1").policy_name(),
            Some("low")
        );
        let listed: Vec<String> = set
            .list(PolicyKind::Policy)
            .iter()
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(listed, ["b-tie", "low"]);
    }

    #[test]
    fn operator_policy_merges_lower_limits_and_its_overflow() {
        let mut set = Policies::default();
        set.set(policy(
            "user",
            ".*",
            "queues",
            0,
            json!({"max-length": 10, "message-ttl": 500, "expires": 1000, "overflow": "drop-head",
                       "dead-letter-exchange": "dlx", "delivery-limit": -1}),
        ));
        set.set(op(
            "ops",
            ".*",
            json!({"max-length": 3, "message-ttl": 9000, "max-length-bytes": 100,
                       "overflow": "reject-publish", "delivery-limit": 20}),
        ));
        let applied = set.applied(EntityKind::Queue, "q");
        assert_eq!(applied.operator_policy_name(), Some("ops"));
        assert_eq!(
            Value::Object(applied.effective_definition()),
            json!({"max-length": 3, "message-ttl": 500, "expires": 1000, "max-length-bytes": 100,
                   "overflow": "reject-publish", "dead-letter-exchange": "dlx", "delivery-limit": 20})
        );
        // Only an operator policy: its values as they are.
        let mut only_op = Policies::default();
        only_op.set(op("ops", ".*", json!({"max-length": 3})));
        let applied = only_op.applied(EntityKind::Queue, "q");
        assert_eq!(applied.policy_name(), None);
        assert_eq!(applied.get("max-length"), Some(json!(3)));
        assert!(Policies::default()
            .applied(EntityKind::Queue, "q")
            .effective_definition()
            .is_empty());
    }

    #[test]
    fn json_round_trip() {
        let p = policy("p", "^a", "queues", 7, json!({"max-length": 1}));
        let back = Policy::from_json(PolicyKind::Policy, "/", "p", &p.to_json()).unwrap();
        assert_eq!(back, p);
        assert_eq!(
            p.to_json(),
            json!({"vhost": "/", "name": "p", "pattern": "^a", "apply-to": "queues",
                   "definition": {"max-length": 1}, "priority": 7})
        );
    }
}

//! A vhost's policies and operator policies: setting, clearing and listing them, and
//! applying the matching ones to its queues and exchanges — at once to those that exist,
//! and on creation to those declared later. Policies are always kept in the store's
//! definitions (they are not "durable" or not: RabbitMQ keeps every runtime parameter).
//!
//! Lock order: `policies` before `queues`/`exchanges`. A declare holds the policy read
//! lock from matching until its entity is in the map, so a policy set meanwhile either is
//! matched by the declare or finds the new entity when it re-applies.

use super::VHost;
use crate::exchange::Exchange;
use crate::policy::{AppliedPolicies, EntityKind, Policy, PolicyKind};
use crate::queue::Queue;
use std::sync::Arc;

impl VHost {
    /// Adds or replaces (by name) a policy and applies it at once.
    pub fn set_policy(self: &Arc<Self>, policy: Policy) -> Result<(), String> {
        self.set_policy_of_kind(PolicyKind::Policy, policy)
    }

    /// Adds or replaces (by name) an operator policy and applies it at once.
    pub fn set_operator_policy(self: &Arc<Self>, policy: Policy) -> Result<(), String> {
        self.set_policy_of_kind(PolicyKind::Operator, policy)
    }

    /// Removes a policy; false if there was none by that name.
    pub fn clear_policy(self: &Arc<Self>, name: &str) -> bool {
        self.clear_policy_of_kind(PolicyKind::Policy, name)
    }

    pub fn clear_operator_policy(self: &Arc<Self>, name: &str) -> bool {
        self.clear_policy_of_kind(PolicyKind::Operator, name)
    }

    /// The vhost's policies, lowest priority first (RabbitMQ's listing order).
    pub fn policies(&self) -> Vec<Policy> {
        self.list_policies(PolicyKind::Policy)
    }

    pub fn operator_policies(&self) -> Vec<Policy> {
        self.list_policies(PolicyKind::Operator)
    }

    pub fn policy(&self, name: &str) -> Option<Policy> {
        self.policies().into_iter().find(|p| p.name == name)
    }

    pub fn operator_policy(&self, name: &str) -> Option<Policy> {
        self.operator_policies()
            .into_iter()
            .find(|p| p.name == name)
    }

    fn list_policies(&self, kind: PolicyKind) -> Vec<Policy> {
        let list = self.policies.read().list(kind);
        list.iter().map(|p| Policy::clone(p)).collect()
    }

    fn set_policy_of_kind(
        self: &Arc<Self>,
        kind: PolicyKind,
        policy: Policy,
    ) -> Result<(), String> {
        if policy.kind != kind {
            // Checked against the other kind's keys: an operator policy takes fewer.
            return Err(match kind {
                PolicyKind::Operator => "an operator policy must be made as one".to_owned(),
                PolicyKind::Policy => {
                    "a policy must be made as one, not as an operator policy".to_owned()
                }
            });
        }
        if policy.vhost != self.name {
            return Err(format!(
                "policy '{}' is for vhost '{}', not '{}'",
                policy.name, policy.vhost, self.name
            ));
        }
        self.policies.write().set(policy);
        self.policies_changed();
        Ok(())
    }

    fn clear_policy_of_kind(self: &Arc<Self>, kind: PolicyKind, name: &str) -> bool {
        if !self.policies.write().clear(kind, name) {
            return false;
        }
        self.policies_changed();
        true
    }

    /// Re-matches every queue and exchange, applies what changed and saves the policies.
    fn policies_changed(self: &Arc<Self>) {
        for queue in self.queues() {
            let applied = self.policies.read().applied(EntityKind::Queue, &queue.name);
            self.apply_queue_policies(&queue, applied);
        }
        for exchange in self.exchanges() {
            let applied = self
                .policies
                .read()
                .applied(EntityKind::Exchange, &exchange.name);
            exchange.apply_policies(applied);
        }
        self.persist_definitions();
    }

    /// What applies to a queue or an exchange of this name now.
    pub fn applied_policies(&self, kind: EntityKind, name: &str) -> AppliedPolicies {
        self.policies.read().applied(kind, name)
    }

    pub(super) fn apply_queue_policies(
        self: &Arc<Self>,
        queue: &Arc<Queue>,
        applied: AppliedPolicies,
    ) {
        queue.apply_policies(applied);
        if queue.expires_ms().is_some() {
            self.watch_expiry(queue);
        }
    }

    pub(super) fn apply_exchange_policies(&self, exchange: &Exchange) {
        let applied = self
            .policies
            .read()
            .applied(EntityKind::Exchange, &exchange.name);
        exchange.apply_policies(applied);
    }
}

#[cfg(test)]
mod tests;

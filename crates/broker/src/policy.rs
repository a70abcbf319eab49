//! Policies and operator policies, as RabbitMQ's `rabbit_policy`: a vhost-scoped rule
//! (name, pattern, apply-to, priority, definition) that sets optional arguments on every
//! queue or exchange whose name the pattern matches.
//!
//! Exactly one policy and one operator policy apply to an entity: among those whose
//! apply-to takes it and whose pattern matches its name (an unanchored regex search), the
//! one with the highest priority. RabbitMQ leaves a tie to its table's hash order; Warren
//! takes the smallest name, so the choice is at least stable. The two are merged key by key
//! (`merged_value`: the lower of two numeric limits, the operator's word for overflow), and
//! the result is what the entity's own arguments are combined with (`effective.rs`).

mod effective;
mod policies;
mod validation;

pub use effective::{effective_alternate_exchange, effective_queue_limits};
pub use policies::{
    AppliedPolicies, ApplyTo, Definition, EntityKind, Policies, Policy, PolicyKind,
};

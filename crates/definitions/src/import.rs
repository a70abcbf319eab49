//! Applying a checked plan in RabbitMQ's order (`rabbit_definitions:apply_defs`): users,
//! vhosts, permissions, exchanges, topic permissions, global parameters, policies,
//! parameters, queues, bindings. Queues and exchanges that exist already are left as they
//! are, as RabbitMQ leaves them; everything else is created or replaced.
//!
//! Every entry is one definitions change (`Broker::change`), made and waited for in turn:
//! on a single node at once, in a cluster through the metadata log, so that a later entry
//! (a queue) finds the earlier one (its vhost) applied on this node.

use crate::plan::{Credential, Plan};
use crate::ImportSummary;
use warren_broker::access::{Hashing, SHA256};
use warren_broker::{AmqpError, Broker, DefinitionOp, Outcome};

/// The connection id imports act as: none of the queues they touch is exclusive.
const NO_CONNECTION: u64 = 0;

async fn change(broker: &Broker, op: DefinitionOp) -> Result<Outcome, AmqpError> {
    broker.change(op).result().await
}

pub async fn apply(broker: &Broker, plan: Plan) -> Result<ImportSummary, String> {
    let mut summary = ImportSummary {
        skipped: plan.skipped,
        ..ImportSummary::default()
    };
    for u in plan.users {
        // A clear-text password is hashed (salted) here, once.
        let (password_hash, hashing_algorithm) = match u.credential {
            Credential::Hash { hash, algorithm } => (hash, algorithm),
            Credential::Password(p) => (Hashing::Sha256.hash(&p), SHA256.to_owned()),
            Credential::None => (String::new(), SHA256.to_owned()),
        };
        let op = DefinitionOp::UserPut {
            name: u.name.clone(),
            password_hash,
            hashing_algorithm,
            tags: u.tags,
        };
        change(broker, op)
            .await
            .map_err(|e| format!("user '{}': {}", u.name, e.text))?;
        if !u.limits.is_empty() {
            let mut limits = broker
                .access
                .user(&u.name)
                .map(|u| u.limits)
                .unwrap_or_default();
            for (name, value) in &u.limits {
                // Checked when the plan was read: every name known, every value an integer.
                let _ = limits.set(name, value.as_i64().unwrap_or(-1));
            }
            change(broker, DefinitionOp::user_set_limits(&u.name, limits))
                .await
                .map_err(|e| format!("user '{}': {}", u.name, e.text))?;
        }
        summary.users += 1;
    }
    for v in plan.vhosts {
        let add = DefinitionOp::VhostAdd {
            name: v.name.clone(),
            grant_full_to: None,
        };
        change(broker, add).await.map_err(|e| e.text)?;
        if let Some((description, tags)) = v.metadata {
            let metadata = warren_broker::VHostMetadata { description, tags };
            let op = DefinitionOp::vhost_set_metadata(&v.name, metadata);
            change(broker, op).await.map_err(|e| deleted(&v.name, e))?;
        }
        if let Some(limits) = v.limits {
            let op = DefinitionOp::vhost_set_limits(&v.name, limits);
            change(broker, op).await.map_err(|e| deleted(&v.name, e))?;
        }
        if let Some(tracing) = v.tracing {
            let op = DefinitionOp::VhostSetTracing {
                name: v.name.clone(),
                tracing,
            };
            change(broker, op).await.map_err(|e| deleted(&v.name, e))?;
        }
        summary.vhosts += 1;
    }
    for (vhost, user, p) in plan.permissions {
        let op = DefinitionOp::permission_set(&vhost, &user, p);
        change(broker, op).await.map_err(|e| e.text)?;
        summary.permissions += 1;
    }
    for x in plan.exchanges {
        live_vhost(broker, &x.vhost)?;
        if broker
            .vhost(&x.vhost)
            .and_then(|v| v.exchange(&x.name))
            .is_none()
        {
            let op = DefinitionOp::ExchangeDeclare {
                vhost: x.vhost.clone(),
                name: x.name.to_string(),
                kind: x.kind,
                durable: x.durable,
                auto_delete: x.auto_delete,
                internal: x.internal,
                arguments: x.arguments,
            };
            change(broker, op)
                .await
                .map_err(|e| format!("exchange '{}' in vhost '{}': {}", x.name, x.vhost, e.text))?;
        }
        summary.exchanges += 1;
    }
    for (vhost, user, p) in plan.topic_permissions {
        let op = DefinitionOp::topic_permission_set(&vhost, &user, p);
        change(broker, op).await.map_err(|e| e.text)?;
        summary.topic_permissions += 1;
    }
    for (name, value) in plan.global_parameters {
        let op = DefinitionOp::GlobalParameterSet {
            name,
            value_json: value.to_string(),
        };
        change(broker, op).await.map_err(|e| e.text)?;
        summary.global_parameters += 1;
    }
    for policy in plan.policies {
        live_vhost(broker, &policy.vhost)?;
        let op = DefinitionOp::policy_set(&policy);
        change(broker, op)
            .await
            .map_err(|e| deleted(&policy.vhost, e))?;
        summary.policies += 1;
    }
    for p in plan.parameters {
        tracing::warn!(
            vhost = %p.vhost, component = %p.component, name = %p.name,
            "runtime parameter kept for export only: Warren does not run this component"
        );
        let op = DefinitionOp::ParameterSet {
            vhost: p.vhost,
            component: p.component,
            name: p.name,
            value_json: p.value.to_string(),
        };
        change(broker, op).await.map_err(|e| e.text)?;
        summary.parameters += 1;
    }
    for (vhost, limits) in plan.limits {
        live_vhost(broker, &vhost)?;
        let op = DefinitionOp::vhost_set_limits(&vhost, limits);
        change(broker, op).await.map_err(|e| deleted(&vhost, e))?;
        summary.parameters += 1;
    }
    for q in plan.queues {
        live_vhost(broker, &q.vhost)?;
        if broker
            .vhost(&q.vhost)
            .and_then(|v| v.queue(&q.name))
            .is_none()
        {
            let op = DefinitionOp::declare_named_queue(
                &q.vhost,
                &q.name,
                q.durable,
                q.auto_delete,
                q.arguments,
            );
            change(broker, op)
                .await
                .map_err(|e| format!("queue '{}' in vhost '{}': {}", q.name, q.vhost, e.text))?;
        }
        summary.queues += 1;
    }
    for b in plan.bindings {
        live_vhost(broker, &b.vhost)?;
        let op = match b.to_exchange {
            true => DefinitionOp::ExchangeBind {
                vhost: b.vhost.clone(),
                destination: b.destination.to_string(),
                source: b.source.to_string(),
                routing_key: b.routing_key.to_string(),
                arguments: b.arguments,
            },
            false => DefinitionOp::QueueBind {
                vhost: b.vhost.clone(),
                queue: b.destination.to_string(),
                exchange: b.source.to_string(),
                routing_key: b.routing_key.to_string(),
                arguments: b.arguments,
                connection: NO_CONNECTION,
            },
        };
        change(broker, op).await.map_err(|e| {
            format!(
                "binding from '{}' to '{}' in vhost '{}': {}",
                b.source, b.destination, b.vhost, e.text
            )
        })?;
        summary.bindings += 1;
    }
    Ok(summary)
}

fn live_vhost(broker: &Broker, name: &str) -> Result<(), String> {
    match broker.vhost(name) {
        Some(_) => Ok(()),
        None => Err(deleted_text(name)),
    }
}

fn deleted_text(name: &str) -> String {
    format!("vhost '{name}' was deleted during the import")
}

/// A change refused because its vhost went meanwhile says so, as before changes were ops.
fn deleted(vhost: &str, e: AmqpError) -> String {
    match e.code {
        warren_codec::ReplyCode::NotFound => deleted_text(vhost),
        _ => e.text,
    }
}

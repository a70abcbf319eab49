//! Applying a checked plan in RabbitMQ's order (`rabbit_definitions:apply_defs`): users,
//! vhosts, permissions, exchanges, topic permissions, global parameters, policies,
//! parameters, queues, bindings. Queues and exchanges that exist already are left as they
//! are, as RabbitMQ leaves them; everything else is created or replaced.

use crate::components;
use crate::plan::{Credential, Plan};
use crate::ImportSummary;
use warren_broker::{Broker, ExchangeDeclaration, QueueDeclaration, VHostMetadata};

/// The connection id imports act as: none of the queues they touch is exclusive.
const NO_CONNECTION: u64 = 0;

pub fn apply(broker: &Broker, plan: Plan) -> Result<ImportSummary, String> {
    let mut summary = ImportSummary {
        skipped: plan.skipped,
        ..ImportSummary::default()
    };
    for u in plan.users {
        let result = match u.credential {
            Credential::Hash { hash, algorithm } => broker
                .access
                .put_user_with_hash(&u.name, &hash, &algorithm, u.tags),
            Credential::Password(p) => broker.access.put_user(&u.name, Some(&p), u.tags),
            Credential::None => broker.access.put_user(&u.name, None, u.tags),
        };
        result.map_err(|e| format!("user '{}': {e}", u.name))?;
        summary.users += 1;
    }
    for v in plan.vhosts {
        let vhost = broker.add_vhost(&v.name)?;
        if let Some((description, tags)) = v.metadata {
            vhost.set_metadata(VHostMetadata { description, tags });
        }
        if let Some(limits) = v.limits {
            vhost.set_limits(limits);
        }
        summary.vhosts += 1;
    }
    for (vhost, user, p) in plan.permissions {
        broker.access.set_permission(&vhost, &user, p)?;
        summary.permissions += 1;
    }
    for x in plan.exchanges {
        let vhost = live_vhost(broker, &x.vhost)?;
        if vhost.exchange(&x.name).is_none() {
            vhost
                .declare_exchange(ExchangeDeclaration {
                    name: x.name.clone(),
                    kind: x.kind,
                    passive: false,
                    durable: x.durable,
                    auto_delete: x.auto_delete,
                    internal: x.internal,
                    arguments: x.arguments,
                })
                .map_err(|e| format!("exchange '{}' in vhost '{}': {}", x.name, x.vhost, e.text))?;
        }
        summary.exchanges += 1;
    }
    for (vhost, user, p) in plan.topic_permissions {
        broker.access.set_topic_permission(&vhost, &user, p)?;
        summary.topic_permissions += 1;
    }
    for (name, value) in plan.global_parameters {
        broker.parameters.set_global(&name, value.to_string());
        summary.global_parameters += 1;
    }
    for policy in plan.policies {
        let vhost = live_vhost(broker, &policy.vhost)?;
        components::apply_policy(&vhost, policy)?;
        summary.policies += 1;
    }
    for p in plan.parameters {
        tracing::warn!(
            vhost = %p.vhost, component = %p.component, name = %p.name,
            "runtime parameter kept for export only: Warren does not run this component"
        );
        broker
            .parameters
            .set(&p.vhost, &p.component, &p.name, p.value.to_string());
        summary.parameters += 1;
    }
    for (vhost, limits) in plan.limits {
        live_vhost(broker, &vhost)?.set_limits(limits);
        summary.parameters += 1;
    }
    for q in plan.queues {
        let vhost = live_vhost(broker, &q.vhost)?;
        if vhost.queue(&q.name).is_none() {
            vhost
                .declare_queue(
                    QueueDeclaration {
                        name: q.name.clone(),
                        passive: false,
                        durable: q.durable,
                        exclusive: false,
                        auto_delete: q.auto_delete,
                        arguments: q.arguments,
                    },
                    NO_CONNECTION,
                )
                .map_err(|e| format!("queue '{}' in vhost '{}': {}", q.name, q.vhost, e.text))?;
        }
        summary.queues += 1;
    }
    for b in plan.bindings {
        let vhost = live_vhost(broker, &b.vhost)?;
        let result = match b.to_exchange {
            true => vhost.bind_exchange(&b.destination, &b.source, b.routing_key, b.arguments),
            false => vhost.bind_queue(
                &b.destination,
                &b.source,
                b.routing_key,
                b.arguments,
                NO_CONNECTION,
            ),
        };
        result.map_err(|e| {
            format!(
                "binding from '{}' to '{}' in vhost '{}': {}",
                b.source, b.destination, b.vhost, e.text
            )
        })?;
        summary.bindings += 1;
    }
    Ok(summary)
}

fn live_vhost(broker: &Broker, name: &str) -> Result<std::sync::Arc<warren_broker::VHost>, String> {
    broker
        .vhost(name)
        .ok_or_else(|| format!("vhost '{name}' was deleted during the import"))
}

//! `Broker::apply`: the one place definitions change. Every change — from an AMQP channel,
//! the HTTP API, a definitions import, the first boot's defaults — is a `DefinitionOp`
//! applied here, directly on a single node or, in a cluster, on every node in the metadata
//! log's order (`replication.rs`). Each op maps onto the vhost and access-database methods
//! that did the change before ops existed, so the checks, reply codes and texts are theirs;
//! persistence follows from their change hooks as it always did (`Broker::persist`).
//!
//! Checks whose answer must be the same on every node (equivalence, existence, limits)
//! run here, against replicated state only. Checks that need the proposing node's own
//! state (permissions of the connection's user, a queue's live consumers for if-unused)
//! run before the op is built.
//!
//! Refusals that are not AMQP replies (an invalid regex, an unknown hashing algorithm, an
//! invalid policy) come back as 406 with the refusal's text; the HTTP API answers them
//! with a 400 and that text, as it did.

use crate::access::{Permission, TopicPermission, UserLimits};
use crate::broker::Broker;
use crate::definition_op::{short, DefinitionOp, Outcome};
use crate::error::AmqpError;
use crate::policy::Policy;
use crate::vhost::{ExchangeDeclaration, QueueDeclaration, VHost, VHostLimits, VHostMetadata};
use std::sync::Arc;

/// A refusal given as text (the HTTP API's 400s).
fn refused(text: String) -> AmqpError {
    AmqpError::precondition(text)
}

impl Broker {
    fn live_vhost(&self, name: &str) -> Result<Arc<VHost>, AmqpError> {
        self.vhost(name)
            .ok_or_else(|| AmqpError::not_found(format!("no vhost '{name}'")))
    }

    /// Applies one definitions change to this node and answers what it did. In a cluster
    /// every node applies every op (through `apply_replicated`); on its own, `change`
    /// calls this directly.
    pub fn apply(&self, op: DefinitionOp) -> Result<Outcome, AmqpError> {
        use DefinitionOp::*;
        match op {
            VhostAdd {
                name,
                grant_full_to,
            } => {
                let created = self.vhost(&name).is_none();
                self.add_vhost(&name).map_err(refused)?;
                if let (true, Some(user)) = (created, grant_full_to) {
                    self.access
                        .set_permission(&name, &user, Permission::full())
                        .map_err(refused)?;
                }
                Ok(Outcome::Put { created })
            }
            VhostSetMetadata {
                name,
                description,
                tags,
            } => {
                self.live_vhost(&name)?
                    .set_metadata(VHostMetadata { description, tags });
                Ok(Outcome::Done)
            }
            VhostSetLimits {
                name,
                max_connections,
                max_queues,
            } => {
                self.live_vhost(&name)?.set_limits(VHostLimits {
                    max_connections,
                    max_queues,
                });
                Ok(Outcome::Done)
            }
            VhostSetTracing { name, tracing } => {
                self.live_vhost(&name)?
                    .set_tracing(tracing, self.node_name());
                Ok(Outcome::Done)
            }
            VhostDelete { name } => Ok(Outcome::Removed {
                existed: self.delete_vhost(&name),
            }),
            UserPut {
                name,
                password_hash,
                hashing_algorithm,
                tags,
            } => {
                let created = self.access.user(&name).is_none();
                self.access
                    .put_user_with_hash(&name, &password_hash, &hashing_algorithm, tags)
                    .map_err(refused)?;
                Ok(Outcome::Put { created })
            }
            UserDelete { name } => Ok(Outcome::Removed {
                existed: self.delete_user(&name),
            }),
            UserSetLimits {
                name,
                max_connections,
                max_channels,
            } => {
                let limits = UserLimits {
                    max_connections,
                    max_channels,
                };
                self.access
                    .set_user_limits(&name, limits)
                    .map_err(AmqpError::not_found)?;
                Ok(Outcome::Done)
            }
            PermissionSet {
                vhost,
                user,
                configure,
                write,
                read,
            } => {
                let created = self.access.permission(&vhost, &user).is_none();
                let p = Permission {
                    configure,
                    write,
                    read,
                };
                self.access
                    .set_permission(&vhost, &user, p)
                    .map_err(refused)?;
                Ok(Outcome::Put { created })
            }
            PermissionClear { vhost, user } => Ok(Outcome::Removed {
                existed: self.access.clear_permission(&vhost, &user),
            }),
            TopicPermissionSet {
                vhost,
                user,
                exchange,
                write,
                read,
            } => {
                let created = !self
                    .access
                    .topic_permissions()
                    .iter()
                    .any(|(v, u, t)| *v == vhost && *u == user && t.exchange == exchange);
                let p = TopicPermission {
                    exchange,
                    write,
                    read,
                };
                self.access
                    .set_topic_permission(&vhost, &user, p)
                    .map_err(refused)?;
                Ok(Outcome::Put { created })
            }
            TopicPermissionClear {
                vhost,
                user,
                exchange,
            } => Ok(Outcome::Removed {
                existed: self
                    .access
                    .clear_topic_permission(&vhost, &user, exchange.as_deref()),
            }),
            PolicySet {
                list,
                vhost,
                name,
                body_json,
            } => {
                let target = self.live_vhost(&vhost)?;
                let body: serde_json::Value = serde_json::from_str(&body_json)
                    .map_err(|e| refused(format!("policy body is not JSON: {e}")))?;
                let policy =
                    Policy::from_json(list.kind(), &vhost, &name, &body).map_err(refused)?;
                let created = match list.kind() {
                    crate::PolicyKind::Policy => target.policy(&name).is_none(),
                    crate::PolicyKind::Operator => target.operator_policy(&name).is_none(),
                };
                let set = match list.kind() {
                    crate::PolicyKind::Policy => target.set_policy(policy),
                    crate::PolicyKind::Operator => target.set_operator_policy(policy),
                };
                set.map_err(refused)?;
                Ok(Outcome::Put { created })
            }
            PolicyClear { list, vhost, name } => {
                let Some(target) = self.vhost(&vhost) else {
                    return Ok(Outcome::Removed { existed: false });
                };
                let existed = match list.kind() {
                    crate::PolicyKind::Policy => target.clear_policy(&name),
                    crate::PolicyKind::Operator => target.clear_operator_policy(&name),
                };
                Ok(Outcome::Removed { existed })
            }
            ParameterSet {
                vhost,
                component,
                name,
                value_json,
            } => {
                let created = !self
                    .parameters
                    .list()
                    .iter()
                    .any(|p| p.vhost == vhost && p.component == component && p.name == name);
                self.parameters.set(&vhost, &component, &name, value_json);
                Ok(Outcome::Put { created })
            }
            ParameterClear {
                vhost,
                component,
                name,
            } => Ok(Outcome::Removed {
                existed: self.parameters.clear(&vhost, &component, &name),
            }),
            GlobalParameterSet { name, value_json } => {
                let created = self.parameters.global(&name).is_none();
                self.parameters.set_global(&name, value_json);
                Ok(Outcome::Put { created })
            }
            Barrier => Ok(Outcome::Done),
            GlobalParameterClear { name } => Ok(Outcome::Removed {
                existed: self.parameters.clear_global(&name),
            }),
            ExchangeDeclare {
                vhost,
                name,
                kind,
                durable,
                auto_delete,
                internal,
                arguments,
            } => {
                let target = self.live_vhost(&vhost)?;
                let created = target.exchange(&name).is_none();
                target.declare_exchange(ExchangeDeclaration {
                    name: short(&name),
                    kind,
                    passive: false,
                    durable,
                    auto_delete,
                    internal,
                    arguments,
                })?;
                Ok(Outcome::Put { created })
            }
            ExchangeDelete {
                vhost,
                name,
                if_unused,
            } => {
                self.live_vhost(&vhost)?.delete_exchange(&name, if_unused)?;
                Ok(Outcome::Done)
            }
            QueueDeclare {
                vhost,
                name,
                server_named,
                durable,
                exclusive,
                auto_delete,
                arguments,
                connection,
                members,
                home,
            } => {
                // Another node's classic queue: this node holds a record forwarding there.
                let home = home
                    .filter(|home| home != self.node_name())
                    .map(|home| self.forward_peers().peer(&home));
                let declaration = QueueDeclaration {
                    name: short(&name),
                    passive: false,
                    durable,
                    exclusive,
                    auto_delete,
                    arguments,
                };
                let target = self.live_vhost(&vhost)?;
                let created = target.queue(&name).is_none();
                let (name, message_count, consumer_count) = target.declare_queue_at(
                    declaration,
                    connection,
                    server_named,
                    home.as_ref(),
                    members,
                )?;
                Ok(Outcome::QueueDeclared {
                    name: name.to_string(),
                    created,
                    message_count,
                    consumer_count,
                })
            }
            QueueSetMembers {
                vhost,
                name,
                members,
            } => {
                self.live_vhost(&vhost)?
                    .set_quorum_members(&name, members)?;
                Ok(Outcome::Done)
            }
            QueueDelete {
                vhost,
                name,
                connection,
            } => {
                let message_count = self
                    .live_vhost(&vhost)?
                    .delete_queue(&name, false, false, connection)?;
                Ok(Outcome::QueueDeleted { message_count })
            }
            QueueBind {
                vhost,
                queue,
                exchange,
                routing_key,
                arguments,
                connection,
            } => {
                self.live_vhost(&vhost)?.bind_queue(
                    &queue,
                    &exchange,
                    short(&routing_key),
                    arguments,
                    connection,
                )?;
                Ok(Outcome::Done)
            }
            QueueUnbind {
                vhost,
                queue,
                exchange,
                routing_key,
                arguments,
                connection,
            } => {
                self.live_vhost(&vhost)?.unbind_queue(
                    &queue,
                    &exchange,
                    short(&routing_key),
                    arguments,
                    connection,
                )?;
                Ok(Outcome::Done)
            }
            ExchangeBind {
                vhost,
                destination,
                source,
                routing_key,
                arguments,
            } => {
                self.live_vhost(&vhost)?.bind_exchange(
                    &destination,
                    &source,
                    short(&routing_key),
                    arguments,
                )?;
                Ok(Outcome::Done)
            }
            ExchangeUnbind {
                vhost,
                destination,
                source,
                routing_key,
                arguments,
            } => {
                self.live_vhost(&vhost)?.unbind_exchange(
                    &destination,
                    &source,
                    short(&routing_key),
                    arguments,
                )?;
                Ok(Outcome::Done)
            }
        }
    }
}

//! Dynamic links (RabbitMQ 4.1's temporary queues): a receiver that attaches with a dynamic
//! source, or a sender with a dynamic target (a JMS temporary queue), and the
//! `temporary-queue` capability gets an exclusive queue of its own, named by the broker, and
//! its address in the attach reply; the queue goes when the link does (or with the
//! connection, being exclusive). Any other dynamic terminus is refused with
//! `amqp:not-implemented`, as RabbitMQ 4 refuses it.

use super::{Env, Session};
use crate::address;
use crate::codec::{self, *};
use fe2o3_amqp_types::messaging::{DeleteOnClose, TerminusDurability, TerminusExpiryPolicy};
use warren_broker::access::AccessKind;
use warren_broker::{names, Change, DefinitionOp, Outcome};
use warren_codec::FieldTable;

/// The source capability that asks for a temporary queue.
const TEMPORARY_QUEUE: &str = "temporary-queue";

/// A generated name stays under this many bytes with the container id and link name in it
/// (RabbitMQ's limit for that form); longer ones get a plain generated name.
const MAX_NAMED_PREFIX_BYTES: usize = 150;

impl Session {
    /// Creates the temporary queue a dynamic terminus (its `capabilities`, and whether it
    /// named an `address`, which a dynamic one must not) asks for; its name, or the error
    /// that refuses the link.
    pub(super) fn temporary_queue(
        &self,
        capabilities: Option<&Array<Symbol>>,
        has_address: bool,
        link_name: &str,
        env: &mut Env,
    ) -> Result<String, Error> {
        let asks_temporary =
            capabilities.is_some_and(|caps| caps.0.iter().any(|c| c.as_str() == TEMPORARY_QUEUE));
        if !asks_temporary || has_address {
            return Err(codec::error(
                AmqpError::NotImplemented,
                "Dynamic terminus not supported (only the temporary-queue capability is)",
            ));
        }
        let name = dynamic_queue_name(env.container_id, link_name);
        if !env
            .access
            .check(env.user, &env.vhost.name, AccessKind::Configure, &name)
        {
            return Err(codec::error(
                AmqpError::UnauthorizedAccess,
                format!(
                    "configure access to queue '{name}' in vhost '{}' refused for user '{}'",
                    env.vhost.name, env.user
                ),
            ));
        }
        let declare = DefinitionOp::QueueDeclare {
            vhost: env.vhost.name.clone(),
            name: name.clone(),
            server_named: true,
            durable: false,
            exclusive: true,
            auto_delete: false,
            arguments: FieldTable::new(),
            connection: env.connection,
            members: Vec::new(),
            home: None,
        };
        // An exclusive queue's declaration is this node's alone (and writes nothing to the
        // store): done at once.
        match env.broker.change(declare) {
            Change::Done(Ok(Outcome::QueueDeclared { .. })) => Ok(name),
            Change::Done(Ok(_)) | Change::Unsynced { .. } | Change::Pending(_) => {
                Err(codec::error(
                    AmqpError::InternalError,
                    "the temporary queue was not declared",
                ))
            }
            Change::Done(Err(e)) => Err(codec::error(
                AmqpError::ResourceLimitExceeded,
                e.text.to_string(),
            )),
        }
    }
}

/// The source a receiver of temporary queue `name` is answered with.
pub(super) fn temporary_source(name: &str) -> Box<Source> {
    Box::new(
        Source::builder()
            .address(address::queue_address(name))
            .durable(TerminusDurability::None)
            .expiry_policy(TerminusExpiryPolicy::LinkDetach)
            .timeout(0)
            .dynamic(true)
            .add_lifetime_policy(DeleteOnClose {})
            .distribution_mode(DistributionMode::Move)
            .capabilities(vec![Symbol::from(TEMPORARY_QUEUE)])
            .build(),
    )
}

/// The target a sender to temporary queue `name` is answered with.
pub(super) fn temporary_target(name: &str) -> Box<TargetArchetype> {
    Box::new(TargetArchetype::Target(
        Target::builder()
            .address(address::queue_address(name))
            .durable(TerminusDurability::None)
            .expiry_policy(TerminusExpiryPolicy::LinkDetach)
            .timeout(0)
            .dynamic(true)
            .add_lifetime_policy(DeleteOnClose {})
            .capabilities(vec![Symbol::from(TEMPORARY_QUEUE)])
            .build(),
    ))
}

/// `amq.dyn-CONTAINER-LINK-RANDOM`, or `amq.dyn.gen-RANDOM` when the container id and link
/// name are long (RabbitMQ 4's names for temporary queues).
fn dynamic_queue_name(container_id: &str, link_name: &str) -> String {
    let suffix = names::generated_queue_name();
    let random = suffix.trim_start_matches("amq.gen-");
    if container_id.len() + link_name.len() < MAX_NAMED_PREFIX_BYTES {
        format!("amq.dyn-{container_id}-{link_name}-{random}")
    } else {
        format!("amq.dyn.gen-{random}")
    }
}

//! Remote queue records: how a node that does not serve a queue holds it (see
//! `crate::remote`). The cluster's definitions apply installs one on every node but the
//! serving one, so routing, declare-ok and the API find the queue everywhere.

use super::VHost;
use crate::error::{AmqpError, AmqpResult};
use crate::policy::EntityKind;
use crate::queue::{Queue, QueueKind};
use crate::queue_args::queue_limits;
use crate::remote::{ForwardLink, RemoteQueue};
use std::sync::Arc;
use warren_codec::{FieldTable, ShortStr};

impl VHost {
    /// Registers queue `name` as served by the node at the other end of `link`
    /// (`served_type`: `classic` or `quorum`, as that node declared it). Fails when a queue
    /// of that name is already here: a record never silently replaces a queue (bindings
    /// point at the queue they were made for).
    pub fn install_remote_queue(
        self: &Arc<Self>,
        name: ShortStr,
        durable: bool,
        auto_delete: bool,
        arguments: FieldTable,
        link: &Arc<ForwardLink>,
        served_type: &'static str,
    ) -> AmqpResult<Arc<Queue>> {
        // Policies before queues: the vhost's lock order.
        let policies = self.policies.read();
        let mut queues = self.queues.write();
        if queues.contains_key(&name) {
            return Err(AmqpError::precondition(format!(
                "queue '{name}' in vhost '{}' already exists",
                self.name
            )));
        }
        let remote = RemoteQueue::new(link, &self.name, &name, served_type);
        let queue = Arc::new(
            Queue::new(
                name.clone(),
                durable,
                None,
                auto_delete,
                arguments.clone(),
                queue_limits(&arguments),
                self.memory.clone(),
                Arc::downgrade(self),
                None,
                None,
            )
            .with_kind(QueueKind::Remote(Box::new(remote))),
        );
        queue.apply_policies(policies.applied(EntityKind::Queue, &name));
        queues.insert(name, queue.clone());
        Ok(queue)
    }
}

//! The definitions a node is started with: `--user` accounts, a `--load-definitions` file,
//! and on a cluster's forming node its first boot's defaults. They are definitions changes
//! like any other (`Broker::change`): applied at once on a single node, through the metadata
//! log on a cluster node — the defaults only from the node that formed the cluster, so one
//! set of them is in the log, the rest from each node configured with it (puts and declares
//! are idempotent).

use std::path::PathBuf;
use std::sync::Arc;
use warren_broker::access::{Hashing, Permission, SHA256};
use warren_broker::definition_op::DefinitionOp;
use warren_broker::Broker;

pub struct BootDefinitions {
    /// (user, password) to seed with the default vhost: a first boot's defaults.
    pub seed: Option<(String, String)>,
    pub default_vhost: String,
    /// `--user NAME:PASS`: administrators with every permission on the default vhost.
    pub extra_users: Vec<(String, String)>,
    pub load_definitions: Option<PathBuf>,
}

impl BootDefinitions {
    pub async fn apply(self, broker: &Arc<Broker>) -> anyhow::Result<()> {
        let mut ops = Vec::new();
        if let Some((user, pass)) = &self.seed {
            ops.extend(broker.seed_ops(user, pass, &self.default_vhost));
        }
        for (name, pass) in &self.extra_users {
            ops.push(DefinitionOp::UserPut {
                name: name.clone(),
                password_hash: Hashing::Sha256.hash(pass),
                hashing_algorithm: SHA256.to_owned(),
                tags: vec!["administrator".to_owned()],
            });
        }
        for op in ops {
            change(broker, op).await?;
        }
        // The --user accounts get the default vhost's permissions where it exists.
        if broker.vhost(&self.default_vhost).is_some() {
            for (name, _) in &self.extra_users {
                let op =
                    DefinitionOp::permission_set(&self.default_vhost, name, Permission::full());
                change(broker, op).await?;
            }
        }
        if let Some(path) = &self.load_definitions {
            let summary = warren_definitions::load_file(broker, path)
                .await
                .map_err(anyhow::Error::msg)?;
            for skipped in &summary.skipped {
                tracing::info!(%skipped, "definitions entry not imported");
            }
            tracing::info!(
                file = %path.display(),
                users = summary.users,
                vhosts = summary.vhosts,
                policies = summary.policies,
                exchanges = summary.exchanges,
                queues = summary.queues,
                bindings = summary.bindings,
                "definitions loaded"
            );
        }
        Ok(())
    }
}

/// One change, its refusal as an error with the broker's text.
async fn change(broker: &Broker, op: DefinitionOp) -> anyhow::Result<()> {
    broker
        .change(op)
        .result()
        .await
        .map(drop)
        .map_err(|e| anyhow::anyhow!("{}", e.text))
}

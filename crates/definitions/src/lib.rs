//! Definitions: the broker's users, vhosts, permissions, parameters, policies, exchanges,
//! queues and bindings in RabbitMQ's definitions JSON — what `GET /api/definitions` returns,
//! `POST /api/definitions` and `rabbitmqctl import_definitions` take, and RabbitMQ's
//! `load_definitions` reads at boot — so a RabbitMQ export loads into Warren (passwords keep
//! working: hashes are RabbitMQ's) and Warren's export loads into RabbitMQ.
//!
//! Runtime parameters of components Warren does not run (federation upstreams, shovels…)
//! are kept and exported again, but do nothing.

mod components;
mod export;
pub mod field_json;
mod import;
mod plan;

pub use export::{export, export_vhost, write_export, write_export_vhost};

use plan::Scope;
use serde_json::Value;
use std::path::Path;
use warren_broker::Broker;

/// What the export says it comes from (warren_broker::version).
pub use warren_broker::version::{PRODUCT_NAME, PRODUCT_VERSION, RABBITMQ_VERSION};

/// How many entries of each kind an import applied (created, replaced, or found already
/// there), and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSummary {
    pub users: usize,
    pub vhosts: usize,
    pub permissions: usize,
    pub topic_permissions: usize,
    pub parameters: usize,
    pub global_parameters: usize,
    pub policies: usize,
    pub exchanges: usize,
    pub queues: usize,
    pub bindings: usize,
    /// Entries left out as RabbitMQ leaves them out (`amq.*` names…), with the reason.
    pub skipped: Vec<String>,
}

/// Imports a whole-broker document (`POST /api/definitions`). The document is checked in
/// full first; an error means nothing was changed, except for a failure while applying
/// (the store refusing a queue), which is reported as it happens.
pub async fn import(broker: &Broker, definitions: &Value) -> Result<ImportSummary, String> {
    let plan = plan::read(broker, definitions, Scope::All)?;
    import::apply(broker, plan).await
}

/// Imports one vhost's document (`POST /api/definitions/VHOST`): its exchanges, queues,
/// bindings, policies and parameters; users, vhosts and permissions are not read. The
/// vhost must exist.
pub async fn import_vhost(
    broker: &Broker,
    vhost: &str,
    definitions: &Value,
) -> Result<ImportSummary, String> {
    if broker.vhost(vhost).is_none() {
        return Err(format!("vhost '{vhost}' not found"));
    }
    let plan = plan::read(broker, definitions, Scope::VHost(vhost))?;
    import::apply(broker, plan).await
}

/// RabbitMQ's `load_definitions`: imports the file at `path`, with errors that name it.
pub async fn load_file(broker: &Broker, path: &Path) -> Result<ImportSummary, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading definitions file {}: {e}", path.display()))?;
    let definitions: Value = serde_json::from_str(&text)
        .map_err(|e| format!("definitions file {} is not valid JSON: {e}", path.display()))?;
    import(broker, &definitions)
        .await
        .map_err(|e| format!("definitions file {}: {e}", path.display()))
}

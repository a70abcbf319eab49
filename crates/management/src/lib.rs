//! Warren's HTTP API, shaped like RabbitMQ's management plugin so that rabbitmqadmin, curl
//! scripts, client libraries' test helpers and provisioning tools work unchanged: the same
//! paths, JSON fields, status codes, pagination and Basic authentication.
//!
//! One axum router over the broker core; nothing here is on the message path. Object
//! listings read the broker's maps and the connection registry when asked; message rates
//! come from a sampler task (`rates.rs`) that reads the counters every 5 s and keeps the
//! overview's and vhosts' last ten minutes of them (`history.rs`). In a cluster,
//! connections, channels, consumers, node figures and message counters are gathered from
//! every node (`cluster_view.rs`).

mod accounts;
mod acting;
mod auth;
mod cluster_view;
mod error;
mod history;
mod json;
mod list;
mod peer_answers;
mod queue_rates;
mod rates;
mod routes;

pub use accounts::Accounts;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use error::ApiResult;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use warren_broker::Broker;
use warren_listener::http_listener::{self, HttpListener};

/// RabbitMQ's default `management.http_max_body_size` (bytes).
pub const MAX_BODY_BYTES: usize = 20_000_000;

/// What the API needs to know beyond the broker itself.
pub struct ManagementConfig {
    /// This node's name ("warren@host"), RabbitMQ's `node` field.
    pub node_name: String,
    /// Users who may log in only from loopback addresses (RabbitMQ's loopback_users).
    pub loopback_users: Vec<String>,
    /// The broker's other listeners (AMQP, AMQPS, Prometheus), for /api/overview's
    /// `listeners`; the API adds its own.
    pub listeners: Vec<ListenerInfo>,
    /// The data directory, for the node's `disk_free` and `db_dir`.
    pub data_dir: Option<PathBuf>,
    pub disk_free_limit_bytes: u64,
}

impl ManagementConfig {
    /// Defaults (guest loopback only, one AMQP listener), for tests.
    pub fn new(amqp_address: SocketAddr) -> ManagementConfig {
        ManagementConfig {
            node_name: default_node_name(),
            loopback_users: vec!["guest".into()],
            listeners: vec![ListenerInfo {
                protocol: "amqp",
                address: amqp_address,
            }],
            data_dir: None,
            disk_free_limit_bytes: 0,
        }
    }
}

/// One of the node's listeners, as /api/overview lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerInfo {
    /// RabbitMQ's name for it: "amqp", "amqp/ssl", "http", "https", "http/prometheus",
    /// "https/prometheus".
    pub protocol: &'static str,
    pub address: SocketAddr,
}

pub use warren_broker::default_node_name;

/// Shared state of every request.
pub struct Api {
    pub broker: Arc<Broker>,
    pub node: String,
    pub accounts: Accounts,
    /// Every listener of the node, the API's own included, ordered by protocol and port
    /// (as RabbitMQ lists them).
    pub listeners: Vec<ListenerInfo>,
    pub data_dir: Option<PathBuf>,
    pub disk_free_limit_bytes: u64,
    pub rates: rates::Rates,
    /// The queues' rates and the vhosts' queue totals, kept from the queues that changed.
    pub queue_rates: queue_rates::QueueRates,
    /// The overview's and each vhost's last minutes of counters, for range queries.
    pub history: history::History,
}

impl Api {
    /// Makes one definitions change (`Broker::change`: at once on a single node, through the
    /// metadata log in a cluster) and answers its outcome, a refusal as the HTTP error
    /// RabbitMQ's API gives for it.
    pub async fn change(
        &self,
        op: warren_broker::DefinitionOp,
    ) -> ApiResult<warren_broker::Outcome> {
        Ok(self.broker.change(op).result().await?)
    }

    /// On a cluster node, waits until every definitions change committed so far is applied
    /// here (`Broker::catch_up`): called before a DELETE answers 404 from this node's view,
    /// while clients take a 404 as "already gone".
    pub async fn caught_up(&self) -> ApiResult<()> {
        if let Some(barrier) = self.broker.catch_up() {
            barrier.await?;
        }
        Ok(())
    }
}

/// Serves the API on `listeners` (plain HTTP, HTTPS or both, one state behind them) until
/// `shutdown` completes. Tests bind port 0.
pub async fn run(
    listeners: Vec<HttpListener>,
    broker: Arc<Broker>,
    config: ManagementConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut known = config.listeners;
    for listener in &listeners {
        known.push(ListenerInfo {
            protocol: if listener.is_tls() { "https" } else { "http" },
            address: listener.local_addr()?,
        });
    }
    known.sort_by_key(|l| (l.protocol, l.address.port()));
    broker.name_node(&config.node_name);
    let api = Arc::new(Api {
        accounts: Accounts::new(broker.access.clone(), config.loopback_users),
        broker,
        node: config.node_name,
        listeners: known,
        data_dir: config.data_dir,
        disk_free_limit_bytes: config.disk_free_limit_bytes,
        rates: rates::Rates::default(),
        queue_rates: queue_rates::QueueRates::default(),
        history: history::History::default(),
    });
    let sampler = tokio::spawn(routes::sample_forever(Arc::downgrade(&api)));
    api.broker
        .forward_peers()
        .set_answers(Arc::new(peer_answers::Answers(Arc::downgrade(&api))));
    let result = http_listener::serve(listeners, router(api), shutdown).await;
    sampler.abort();
    result
}

fn router(api: Arc<Api>) -> Router {
    routes::api_routes()
        .route_layer(axum::middleware::from_fn_with_state(
            api.clone(),
            auth::authenticate,
        ))
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(api)
}

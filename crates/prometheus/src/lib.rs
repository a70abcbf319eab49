//! Warren's Prometheus endpoint (15692 by default, HTTPS on 15691 with a certificate),
//! speaking as RabbitMQ's `rabbitmq_prometheus` plugin so that its Grafana dashboards and
//! alert rules work unchanged:
//!
//! - `/metrics`: aggregated (RabbitMQ's default, `return_per_object_metrics = false`):
//!   object families summed into one unlabelled sample each;
//! - `/metrics/per-object`: one sample per queue (`vhost`, `queue`) and per channel or
//!   connection;
//! - `/metrics/detailed`: only the identity families unless `family=` asks for more (as
//!   RabbitMQ), prefixed `rabbitmq_detailed_`.
//!
//! A scrape reads what the broker already keeps: queue depths under each queue's lock, the
//! registry's per-channel counters, the node's churn and publish counters (the only ones
//! kept for Prometheus alone: `warren_broker::publish_counters`, two relaxed adds per
//! publish).

mod channels;
mod exposition;
mod global;
mod node;
mod process;
mod queue_totals;
mod queues;
mod raft;
mod selection;

pub use exposition::{Exposition, Kind, CONTENT_TYPE};
pub use node::Endpoint;
pub use selection::Selection;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use queue_totals::QueueTotals;
use std::future::Future;
use std::sync::Arc;
use warren_broker::Broker;
use warren_listener::http_listener::{self, HttpListener};
use warren_listener::streamed_body::streamed;

struct Scraped {
    broker: Arc<Broker>,
    /// `/metrics`' queue sums, kept from scrape to scrape.
    queue_totals: QueueTotals,
}

/// The text of one scrape of `endpoint` (its queue sums counted afresh).
pub fn render(broker: &Broker, endpoint: Endpoint) -> String {
    if endpoint == Endpoint::Detailed {
        return render_detailed(broker, Selection::default());
    }
    let mut out = Exposition::new();
    scrape(&mut out, broker, endpoint, None);
    out.into_text()
}

/// `/metrics/detailed`: the groups `selection` names, per object, `rabbitmq_detailed_*`,
/// then the identity families.
pub fn render_detailed(broker: &Broker, selection: Selection) -> String {
    let mut out = Exposition::detailed(selection);
    scrape_detailed(&mut out, broker);
    out.into_text()
}

/// `/metrics` or `/metrics/per-object` into `out`; `/metrics` with `queue_totals` reads
/// only the queues that changed since its last scrape.
fn scrape(
    out: &mut Exposition,
    broker: &Broker,
    endpoint: Endpoint,
    queue_totals: Option<&QueueTotals>,
) {
    let per_object = endpoint == Endpoint::PerObject;
    if !per_object {
        // RabbitMQ's alarm collector serves /metrics only.
        node::alarms(out, broker);
        node::cluster(out, broker);
    }
    node::churn(out, broker);
    node::auth_attempts(out, broker);
    node::resources(out, broker);
    let (queues, raft) = match queue_totals.filter(|_| !per_object) {
        Some(totals) => {
            let taken = totals.take(broker);
            let raft = raft::RaftReadings::of(broker, taken.replicated);
            (queues::QueueReadings::aggregated(taken.sums), raft)
        }
        None => (
            queues::QueueReadings::take(broker, per_object),
            raft::RaftReadings::take(broker),
        ),
    };
    queues::families(out, &queues);
    raft::families(out, &raft, per_object);
    let channels = channels::ChannelReadings::take(broker);
    channels::families(out, &channels, per_object);
    exchanges(out, broker, per_object);
    totals(out, &queues, &channels);
    global::families(
        out,
        &global::GlobalReadings {
            messages: broker.registry.message_totals(None),
            published: broker.counters.published.counts(),
            publishers: channels.publishers(),
            consumers: channels.consumers(),
        },
    );
    global::dead_lettered(out, &broker.counters.dead_lettered);
    if per_object {
        queues::info(out, &queues);
    }
    node::identity(out, broker, endpoint);
    node::store(out, broker);
}

/// `/metrics/detailed` into `out`, an exposition made with its selection.
fn scrape_detailed(out: &mut Exposition, broker: &Broker) {
    node::churn(out, broker);
    node::auth_attempts(out, broker);
    node::resources(out, broker);
    if out.selected(QUEUE_GROUPS) {
        let queues = queues::QueueReadings::take(broker, true);
        queues::families(out, &queues);
        queues::info(out, &queues);
    }
    if out.selected(&["ra_metrics"]) {
        raft::families(out, &raft::RaftReadings::take(broker), true);
    }
    if out.selected(CHANNEL_GROUPS) {
        channels::families(out, &channels::ChannelReadings::take(broker), true);
    }
    if out.selected(&["exchange_metrics"]) {
        exchanges(out, broker, true);
    }
    node::identity(out, broker, Endpoint::Detailed);
}

/// The groups whose families need every queue read, or every channel.
const QUEUE_GROUPS: &[&str] = &[
    "queue_coarse_metrics",
    "queue_consumer_count",
    "queue_metrics",
    "queue_delivery_metrics",
    "channel_queue_exchange_metrics",
];
const CHANNEL_GROUPS: &[&str] = &[
    "channel_metrics",
    "channel_exchange_metrics",
    "channel_queue_metrics",
    "connection_coarse_metrics",
    "connection_metrics",
];

/// `rabbitmq_connections`, `_channels`, `_consumers`, `_queues`: what is open now.
fn totals(
    out: &mut Exposition,
    queues: &queues::QueueReadings,
    channels: &channels::ChannelReadings,
) {
    out.single(
        "rabbitmq_connections",
        Kind::Gauge,
        "Connections currently open",
        channels.connection_count(),
    );
    out.single(
        "rabbitmq_channels",
        Kind::Gauge,
        "Channels currently open",
        channels.channel_count(),
    );
    out.single(
        "rabbitmq_consumers",
        Kind::Gauge,
        "Consumers currently connected",
        queues.consumers(),
    );
    out.single(
        "rabbitmq_queues",
        Kind::Gauge,
        "Queues available",
        queues.count(),
    );
}

/// RabbitMQ 4.x's `exchange_metrics`: messages published into each exchange.
fn exchanges(out: &mut Exposition, broker: &Broker, per_object: bool) {
    out.group(Some(&["exchange_metrics"]));
    let name = "rabbitmq_exchange_messages_published_total";
    out.family(
        name,
        Kind::Counter,
        "Total number of messages published into an exchange",
    );
    let mut total = 0;
    for vhost in broker.vhosts() {
        let mut exchanges = vhost.exchanges();
        exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        for exchange in exchanges {
            let published = exchange.stats.snapshot().publish_in;
            if per_object {
                let labels = [
                    ("vhost", vhost.name.as_str()),
                    ("exchange", exchange.name.as_str()),
                ];
                out.sample(name, &labels, published);
            }
            total += published;
        }
    }
    if !per_object {
        out.sample(name, &[], total);
    }
}

pub fn router(broker: Arc<Broker>) -> Router {
    let state = Arc::new(Scraped {
        broker,
        queue_totals: QueueTotals::default(),
    });
    Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .route("/metrics/detailed", get(detailed))
        .with_state(state)
}

/// `/metrics` is small whatever the broker holds (a sample per family), so it is built
/// whole; the per-object and detailed scrapes grow with the queues and channels and are
/// streamed (`Exposition::streaming`).
async fn aggregated(State(s): State<Arc<Scraped>>) -> impl IntoResponse {
    let mut out = Exposition::new();
    scrape(
        &mut out,
        &s.broker,
        Endpoint::Aggregated,
        Some(&s.queue_totals),
    );
    text(Body::from(out.into_text()))
}

async fn per_object(State(s): State<Arc<Scraped>>) -> impl IntoResponse {
    let broker = s.broker.clone();
    text(streamed(move |sink| {
        let mut out = Exposition::streaming(sink, None);
        scrape(&mut out, &broker, Endpoint::PerObject, None);
        out.finish();
    }))
}

async fn detailed(State(s): State<Arc<Scraped>>, RawQuery(query): RawQuery) -> impl IntoResponse {
    let selection = Selection::from_query(query.as_deref().unwrap_or(""));
    let broker = s.broker.clone();
    text(streamed(move |sink| {
        let mut out = Exposition::streaming(sink, Some(selection));
        scrape_detailed(&mut out, &broker);
        out.finish();
    }))
}

fn text(body: Body) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body)
}

/// Serves the endpoints on `listeners` (plain HTTP, HTTPS or both) until `shutdown`
/// completes.
pub async fn run(
    listeners: Vec<HttpListener>,
    broker: Arc<Broker>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    http_listener::serve(listeners, router(broker), shutdown).await
}

//! The many-pairs clients over AMQP 1.0: each client is a connection with one session and
//! one link, as the report's clients. A sender's link targets `/queues/<q>` (RabbitMQ 4's
//! v2 address of the queue) and sends unsettled transfers; the `accepted` outcome is its
//! confirm, any other outcome a nack. A receiver's link sources from `/queues/<q>` with
//! `prefetch` credit (topped up as it goes) and accepts each message once it has taken the
//! flight time.
//!
//! The client is our own, on the broker's AMQP 1.0 codec (`warren_amqp10_codec`: frames,
//! performatives, SASL), because the tool must cost less per message than the broker it
//! measures: fe2o3-amqp's three tasks per client could not offer the load from a few
//! thousand pairs (docs/benchmarks.md, issue 12). It speaks only what many-pairs needs, by
//! the specification, so it works with any AMQP 1.0 broker: `handshake` (SASL, open,
//! begin, attach), `endpoint` (session and link state: flow control, transfers,
//! dispositions, detach/end/close), `connection` (the one task per client), `message` (the
//! Data section that carries the body).

mod connection;
mod endpoint;
mod handshake;
mod message;

use super::counters::Counters;
use crate::client::AmqpUri;
use anyhow::{Context, Result};
use connection::{Shared, CLOSE_TIMEOUT};
use endpoint::{Endpoint, ReceiverHooks};
use handshake::LinkSpec;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

/// A running client: its task and the signal that ends it.
pub struct Client {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Client {
    /// Detaches, ends the session and closes the connection (a receiver's unaccepted
    /// deliveries go back to its queue).
    pub async fn close(self) {
        let _ = self.stop.send(());
        // The task bounds its close handshake by CLOSE_TIMEOUT itself; this is a backstop.
        let _ = tokio::time::timeout(CLOSE_TIMEOUT * 2, self.task).await;
    }
}

/// Where the scheduler hands a sender its messages.
pub struct Publisher(Arc<Shared>);

/// A publish to a client that has ended (closed, or ended by the broker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended;

impl Publisher {
    /// Transfers `body` (or holds it until the broker gives credit); fails only once the
    /// client has ended.
    pub fn publish(&self, body: &[u8]) -> Result<(), Ended> {
        let wake = self.0.endpoint.lock().publish(body).map_err(|()| Ended)?;
        if wake {
            self.0.wake.notify_one();
        }
        Ok(())
    }
}

/// Opens the client and starts its task.
async fn start(
    uri: &AmqpUri,
    link: LinkSpec<'_>,
    endpoint: Endpoint,
) -> Result<(Client, Arc<Shared>)> {
    let address = link.address.to_owned();
    let opened = handshake::open(uri, link, endpoint)
        .await
        .with_context(|| format!("attaching an AMQP 1.0 link to {address}"))?;
    let shared = Arc::new(Shared {
        endpoint: Mutex::new(opened.endpoint),
        wake: Notify::new(),
    });
    let (stop, stopped) = oneshot::channel();
    let io = connection::Io {
        stream: opened.stream,
        rbuf: opened.rbuf,
        peer_idle: opened.peer_idle,
    };
    let task = tokio::spawn(connection::run(shared.clone(), io, stopped));
    Ok((Client { stop, task }, shared))
}

/// Opens a sender to `address` (a queue's: `/queues/<q>`, or `/amq/queue/<q>` for RabbitMQ
/// 3.x) whose outcomes count into `counters`.
pub async fn attach_sender(
    uri: &AmqpUri,
    address: &str,
    counters: Arc<Counters>,
) -> Result<(Client, Publisher)> {
    let link = LinkSpec {
        name: "many-pairs-sender",
        address,
    };
    let (client, shared) = start(uri, link, Endpoint::sender(counters)).await?;
    Ok((client, Publisher(shared)))
}

/// Opens a receiver from `address` (a queue's) with `prefetch` credit; it takes each
/// message's flight time into `latency`, counts it and accepts it.
pub async fn attach_receiver(
    uri: &AmqpUri,
    address: &str,
    prefetch: u16,
    counters: Arc<Counters>,
    latency: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
) -> Result<Client> {
    let link = LinkSpec {
        name: "many-pairs-receiver",
        address,
    };
    let hooks = ReceiverHooks {
        counters,
        latency,
        prefetch: u32::from(prefetch.max(1)),
    };
    let (client, _) = start(uri, link, Endpoint::receiver(hooks)).await?;
    Ok(client)
}

//! The many-pairs clients over AMQP 1.0 (fe2o3-amqp): each client is a connection with one
//! session and one link, as the report's clients. A sender's link targets `/queues/<q>`
//! (RabbitMQ 4's v2 address of the queue) and sends unsettled transfers; the `accepted`
//! outcome is its confirm, any other outcome a nack. A receiver's link sources from
//! `/queues/<q>` with `prefetch` credit (refilled as it goes) and accepts each message once
//! it has taken the flight time.
//!
//! fe2o3-amqp's links are driven with `&mut`, so each client lives in a task of its own: the
//! sender's task takes bodies from the scheduler over a channel (publishing never blocks the
//! schedule, as a 0-9-1 publish does not), and closing a client is a signal to its task,
//! which detaches, ends the session and closes the connection.

use super::worker::Counters;
use crate::client::AmqpUri;
use crate::payload;
use anyhow::{Context, Result};
use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{Data, Message, Outcome};
use fe2o3_amqp::types::primitives::Binary;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How long a closing client waits for the broker's answers before it drops the socket.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

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
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.task).await;
    }
}

/// Where the scheduler hands a sender its messages.
pub struct Publisher(mpsc::UnboundedSender<Vec<u8>>);

impl Publisher {
    /// Queues `body` for the sender's task; fails only when the task has ended.
    pub fn publish(&self, body: &[u8]) -> Result<(), ()> {
        self.0.send(body.to_vec()).map_err(|_| ())
    }
}

async fn open(uri: &AmqpUri, name: &str) -> Result<(ConnectionHandle<()>, SessionHandle<()>)> {
    let stream = tokio::net::TcpStream::connect((uri.host.as_str(), uri.port))
        .await
        .with_context(|| format!("connecting to {}:{}", uri.host, uri.port))?;
    let _ = stream.set_nodelay(true);
    // RabbitMQ 4 (and Warren) take the vhost from the open frame's hostname, "vhost:NAME".
    let hostname = if uri.vhost == "/" {
        uri.host.clone()
    } else {
        format!("vhost:{}", uri.vhost)
    };
    let mut connection = Connection::builder()
        .container_id(format!("{name}-{}", payload::now_ns()))
        .hostname(hostname.as_str())
        .sasl_profile(SaslProfile::Plain {
            username: uri.user.clone(),
            password: uri.password.clone(),
        })
        .open_with_stream(stream)
        .await
        .context("opening the AMQP 1.0 connection")?;
    let session = match Session::begin(&mut connection).await {
        Ok(s) => s,
        Err(e) => {
            let _ = connection.close().await;
            return Err(e).context("beginning the session");
        }
    };
    Ok((connection, session))
}

async fn shut(mut connection: ConnectionHandle<()>, mut session: SessionHandle<()>) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        let _ = session.end().await;
        let _ = connection.close().await;
    })
    .await;
}

/// Opens a sender to `/queues/<queue>` whose outcomes count into `counters`.
pub async fn attach_sender(
    uri: &AmqpUri,
    queue: &str,
    counters: Arc<Counters>,
) -> Result<(Client, Publisher)> {
    let (connection, mut session) = open(uri, "many-pairs-sender").await?;
    let mut sender = match Sender::attach(
        &mut session,
        "many-pairs-sender",
        format!("/queues/{queue}"),
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            shut(connection, session).await;
            return Err(e).context("attaching the sender link");
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        loop {
            let body = tokio::select! {
                body = rx.recv() => match body { Some(b) => b, None => break },
                _ = &mut stopped => break,
            };
            let message = Message::builder().data(Data(Binary::from(body))).build();
            // Unsettled: the outcome arrives later, counted by a task of its own so that the
            // next transfer need not wait for it. A failed send is neither confirmed nor
            // nacked: the step reports it as unconfirmed.
            let Ok(outcome) = sender.send_batchable(message).await else {
                continue;
            };
            let counters = counters.clone();
            tokio::spawn(async move {
                match outcome.await {
                    Ok(Outcome::Accepted(_)) => {
                        counters.confirmed.fetch_add(1, Ordering::AcqRel);
                    }
                    Ok(_) => {
                        counters.nacked.fetch_add(1, Ordering::AcqRel);
                    }
                    Err(_) => {}
                }
            });
        }
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, sender.close()).await;
        shut(connection, session).await;
    });
    Ok((Client { stop, task }, Publisher(tx)))
}

/// Opens a receiver from `/queues/<queue>` with `prefetch` credit; it takes each message's
/// flight time into `latency`, counts it and accepts it.
pub async fn attach_receiver(
    uri: &AmqpUri,
    queue: &str,
    prefetch: u16,
    counters: Arc<Counters>,
    latency: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
) -> Result<Client> {
    let (connection, mut session) = open(uri, "many-pairs-receiver").await?;
    let attached = Receiver::builder()
        .name("many-pairs-receiver")
        .source(format!("/queues/{queue}"))
        .credit_mode(CreditMode::Auto(u32::from(prefetch.max(1))))
        .attach(&mut session)
        .await;
    let mut receiver = match attached {
        Ok(r) => r,
        Err(e) => {
            shut(connection, session).await;
            return Err(e).context("attaching the receiver link");
        }
    };
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        loop {
            let delivery = tokio::select! {
                d = receiver.recv::<Data>() => match d { Ok(d) => d, Err(_) => break },
                _ = &mut stopped => break,
            };
            let now_ns = payload::now_ns();
            if let Some(stamp) = payload::parse(&delivery.body().0) {
                latency
                    .lock()
                    .saturating_record(payload::flight_us(stamp.sent_ns, now_ns).max(1));
            }
            counters.received.fetch_add(1, Ordering::AcqRel);
            let info = DeliveryInfo::from(delivery);
            if receiver.accept(info).await.is_err() {
                break;
            }
        }
        // Closing the link returns unaccepted deliveries to the queue, which the step's
        // accounting then counts as undelivered.
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, receiver.close()).await;
        shut(connection, session).await;
    });
    Ok(Client { stop, task })
}

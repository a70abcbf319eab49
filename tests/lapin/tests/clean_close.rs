//! A clean close as a lapin user sees it (issue 15): `Connection::close` completes and the
//! connection ends without an error. Warren used to drop the socket right after close-ok,
//! then to half-close it; either way lapin could read the EOF before it had handled
//! close-ok and report the connection aborted (about one close in three did). Warren now
//! leaves the socket to the client after a close the client asked for, as RabbitMQ does
//! (server/src/connection.rs, `linger`).

mod common;

use common::{serve, within, Client};
use futures_util::stream::{self, StreamExt};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Event};
use warren_broker::Broker;

const CLOSES: usize = 100;
/// Connections open at once: the closes overlap, as they do in a real application's pool,
/// and the test stays quick.
const AT_ONCE: usize = 10;

/// Connects, opens a channel, declares a queue and publishes to it, closes; returns how the
/// connection ended when that was not cleanly.
async fn connect_work_close(url: &str, round: usize) -> Option<String> {
    let client = Client::connect(url).await;
    let channel = client.conn.create_channel().await.unwrap();
    let queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .basic_publish(
            "".into(),
            queue.name().clone(),
            BasicPublishOptions::default(),
            b"hello",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    within(5, "connection.close", client.conn.close(200, "bye".into()))
        .await
        .unwrap_or_else(|e| panic!("close {round}: {e}"));
    let status = client.conn.status().clone();
    let (ended, events) = client.finish().await;
    let errors: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Error(_)))
        .collect();
    if ended.is_err() || !errors.is_empty() || !status.closed() {
        return Some(format!("close {round}: {ended:?}, {errors:?}, {status:?}"));
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_clean_closes_end_without_error() {
    // LAPIN_CLOSE_URL=amqp://... runs the same against another broker (RabbitMQ, to compare).
    let url = match std::env::var("LAPIN_CLOSE_URL") {
        Ok(url) => url,
        Err(_) => serve(Broker::new(1 << 30, None)).await.url,
    };
    let unclean: Vec<String> = stream::iter(0..CLOSES)
        .map(|round| connect_work_close(&url, round))
        .buffer_unordered(AT_ONCE)
        .filter_map(|unclean| async move { unclean })
        .collect()
        .await;
    assert!(
        unclean.is_empty(),
        "{} of {CLOSES} clean closes ended in an error, the first: {}",
        unclean.len(),
        unclean[0]
    );
}

//! Declarations with a chosen number in flight: `one_at_a_time` is one channel that waits
//! for each reply before the next request (what a simple client does); `pipelined` spreads
//! the work over several connections with several channels each, every channel with one
//! request outstanding, so `connections × channels` requests are in flight at once (what a
//! deployment tool or an application fleet starting up does). Connections are opened before
//! the clock starts: the rate is of the declarations alone.

use crate::client::{AmqpUri, Channel, Connection};
use anyhow::{Context, Result};
use std::future::Future;
use std::time::Instant;

/// Connections and channels per connection of a pipelined run: 32 requests in flight.
pub const PIPELINED_CONNECTIONS: usize = 4;
pub const PIPELINED_CHANNELS: usize = 8;

/// Runs `op` on every item, each on one channel, waiting for each before the next; returns
/// the seconds the operations took.
pub async fn one_at_a_time<T, F, Fut>(uri: &AmqpUri, items: Vec<T>, op: F) -> Result<f64>
where
    T: Send + 'static,
    F: Fn(Channel, T) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = crate::client::Result<()>> + Send,
{
    run(uri, items, 1, 1, op).await
}

/// Runs `op` on every item over `PIPELINED_CONNECTIONS × PIPELINED_CHANNELS` channels, one
/// request outstanding per channel; returns the seconds the operations took.
pub async fn pipelined<T, F, Fut>(uri: &AmqpUri, items: Vec<T>, op: F) -> Result<f64>
where
    T: Send + 'static,
    F: Fn(Channel, T) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = crate::client::Result<()>> + Send,
{
    run(uri, items, PIPELINED_CONNECTIONS, PIPELINED_CHANNELS, op).await
}

async fn run<T, F, Fut>(
    uri: &AmqpUri,
    items: Vec<T>,
    connections: usize,
    channels_per_connection: usize,
    op: F,
) -> Result<f64>
where
    T: Send + 'static,
    F: Fn(Channel, T) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = crate::client::Result<()>> + Send,
{
    if items.is_empty() {
        return Ok(0.0);
    }
    let mut conns = vec![];
    let mut channels = vec![];
    for _ in 0..connections {
        let conn = Connection::open_named(uri, "warren perf scenario scale")
            .await
            .with_context(|| format!("connecting to {}", uri.addr()))?;
        for _ in 0..channels_per_connection {
            channels.push(conn.channel().await?);
        }
        conns.push(conn);
    }
    // Round robin: every channel gets an equal share.
    let mut shares: Vec<Vec<T>> = (0..channels.len()).map(|_| vec![]).collect();
    let n = shares.len();
    for (i, item) in items.into_iter().enumerate() {
        shares[i % n].push(item);
    }
    let started = Instant::now();
    let tasks: Vec<_> = channels
        .into_iter()
        .zip(shares)
        .map(|(channel, share)| {
            let op = op.clone();
            tokio::spawn(async move {
                for item in share {
                    op(channel.clone(), item).await?;
                }
                crate::client::Result::Ok(())
            })
        })
        .collect();
    let mut first_error = None;
    for t in tasks {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert_with(|| anyhow::anyhow!(e));
            }
            Err(e) => {
                first_error.get_or_insert_with(|| anyhow::anyhow!(e));
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    for conn in conns {
        conn.close().await;
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(seconds),
    }
}

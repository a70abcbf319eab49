//! Warren's AMQP 0-9-1 server: accepts TCP connections and runs each as one task that
//! speaks the protocol (`connection`), with per-channel method handling (`channel`,
//! `publish`, `deliver`) on top of the broker core.

mod auth;
mod channel;
pub mod config;
mod connection;
mod context;
mod deliver;
mod handshake;
mod publish;

pub use config::ServerConfig;

use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use warren_broker::Broker;

/// Accepts connections on `listener` until `shutdown` completes. Tests bind port 0 and pass
/// the listener in.
pub async fn run(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let config = Arc::new(config);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let conn = connection::Connection::new(stream, peer, broker.clone(), config.clone());
                    tokio::spawn(conn.serve());
                }
                Err(e) => {
                    // Out of file descriptors and the like: log, breathe, keep accepting.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = &mut shutdown => {
                tracing::info!("AMQP listener shutting down");
                return;
            }
        }
    }
}

//! Warren's AMQP 0-9-1 server: accepts TCP connections and runs each as one task that
//! speaks the protocol (`connection`), with per-channel method handling (`channel`,
//! `publish`, `deliver`) on top of the broker core. Its listeners and TLS are
//! `warren-listener`'s, which the HTTP endpoints share.

mod auth;
mod channel;
mod channel_ids;
mod closed_channels;
pub mod config;
mod connection;
mod context;
mod deliver;
mod handshake;
mod pending;
mod permissions;
mod publish;
mod publish_state;
mod throttle;
mod unacked;
mod unsynced;
mod waiting;

pub use config::ServerConfig;
pub use warren_listener::bind_listener;
use warren_listener::{cert_name, tls};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use warren_broker::Broker;

/// Accepts AMQP connections on `listener` until `shutdown` completes. Tests bind port 0 and
/// pass the listener in.
pub async fn run(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    run_shared(listener, broker, Arc::new(config), shutdown).await
}

/// `run` with a configuration shared with other listeners (the AMQPS one).
pub async fn run_shared(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: Arc<ServerConfig>,
    shutdown: impl Future<Output = ()>,
) {
    accept_until(listener, "AMQP", shutdown, |stream, peer| {
        // The socket's own halves: no lock or extra buffer between a plain connection and
        // its socket.
        let local = stream.local_addr().unwrap_or(peer);
        let (reader, writer) = stream.into_split();
        let conn =
            connection::Connection::new(reader, writer, peer, broker.clone(), config.clone())
                .with_local_addr(local);
        // An AMQP 1.0 client gets a task sized for its own connection, and this one, sized
        // for a 0-9-1 connection, ends (`Connection::with_amqp10_task`).
        let conn = conn.with_amqp10_task(|amqp10| drop(tokio::spawn(amqp10.serve())));
        tokio::spawn(conn.serve());
    })
    .await
}

/// Accepts AMQPS connections on `listener` until `shutdown` completes: each runs its TLS
/// handshake in its own task (bounded by `tls::TLS_HANDSHAKE_TIMEOUT`), then serves AMQP over
/// the TLS stream.
pub async fn run_tls(
    listener: TcpListener,
    tls_config: Arc<rustls::ServerConfig>,
    broker: Arc<Broker>,
    config: Arc<ServerConfig>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls_config);
    accept_until(listener, "AMQPS", shutdown, |stream, peer| {
        let (acceptor, broker, config) = (acceptor.clone(), broker.clone(), config.clone());
        let local = stream.local_addr().unwrap_or(peer);
        tokio::spawn(async move {
            let Some((tls, tls_peer)) =
                tls::accept(&acceptor, stream, config.cert_login_from).await
            else {
                return;
            };
            let (reader, writer) = tokio::io::split(tls);
            // As for plain TCP above: AMQP 1.0 in a task of its own size.
            connection::Connection::new(reader, writer, peer, broker, config)
                .with_tls(tls_peer)
                .with_local_addr(local)
                .with_amqp10_task(|amqp10| drop(tokio::spawn(amqp10.serve())))
                .serve()
                .await;
        });
    })
    .await
}

/// The accept loop both listeners share: `on_accept` takes each new socket (Nagle off).
async fn accept_until(
    listener: TcpListener,
    protocol: &str,
    shutdown: impl Future<Output = ()>,
    mut on_accept: impl FnMut(TcpStream, SocketAddr),
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    on_accept(stream, peer);
                }
                Err(e) => {
                    // Out of file descriptors and the like: log, breathe, keep accepting.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = &mut shutdown => {
                tracing::info!("{protocol} listener shutting down");
                return;
            }
        }
    }
}

/// Serves one connection over any byte stream (an in-memory pipe in tests and fuzzing) until
/// it ends. `peer` is the address the login checks see.
pub async fn serve_stream<S>(
    stream: S,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ServerConfig>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send,
{
    let (reader, writer) = tokio::io::split(stream);
    connection::Connection::new(reader, writer, peer, broker, config)
        .serve()
        .await;
}

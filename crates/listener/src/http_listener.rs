//! The listener of Warren's HTTP endpoints (the management API and Prometheus), plain or
//! TLS, as axum's `Listener`: both endpoints serve either kind through the same axum code,
//! and one endpoint can serve several listeners (15672 and 15671) from one state.
//!
//! A TLS listener runs each handshake in a task of its own, bounded by
//! `tls::TLS_HANDSHAKE_TIMEOUT`, and hands axum only connections whose handshake is done: a
//! client that stalls or botches its handshake holds up neither the accept loop nor the
//! clients behind it. Dropping the listener (axum's shutdown) abandons handshakes in flight.

use crate::tls;
use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The only application protocol the HTTP endpoints speak (axum is built with HTTP/1 only);
/// offered in ALPN so that clients which ask for one (curl does) settle on it.
const ALPN_HTTP_1_1: &[u8] = b"http/1.1";

/// A bound HTTP listener: plain, or TLS with its handshakes in flight.
pub struct HttpListener {
    tcp: TcpListener,
    tls: Option<TlsHandshakes>,
}

struct TlsHandshakes {
    acceptor: TlsAcceptor,
    /// Each finishes with the connection, or None when its handshake failed or timed out.
    in_flight: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl HttpListener {
    /// Plain HTTP on `tcp`.
    pub fn plain(tcp: TcpListener) -> HttpListener {
        HttpListener { tcp, tls: None }
    }

    /// HTTPS on `tcp`, with `config` (from `tls::server_config`: the certificate, key and
    /// client verification AMQPS uses) offering HTTP/1.1 in ALPN.
    pub fn tls(tcp: TcpListener, config: &rustls::ServerConfig) -> HttpListener {
        let mut config = config.clone();
        config.alpn_protocols = vec![ALPN_HTTP_1_1.to_vec()];
        HttpListener {
            tcp,
            tls: Some(TlsHandshakes {
                acceptor: TlsAcceptor::from(Arc::new(config)),
                in_flight: JoinSet::new(),
            }),
        }
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Whether this is an HTTPS listener.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}

/// The next TCP connection (axum's own accept: it retries after errors, pausing when out of
/// file descriptors), Nagle off as on the AMQP listeners.
async fn next_tcp(tcp: &mut TcpListener) -> (TcpStream, SocketAddr) {
    let (stream, peer) = Listener::accept(tcp).await;
    let _ = stream.set_nodelay(true);
    (stream, peer)
}

impl Listener for HttpListener {
    type Io = HttpStream;
    type Addr = SocketAddr;

    // Cancel-safe, as axum needs (it drops this future at shutdown): a connection accepted
    // is either returned or already in `in_flight`.
    async fn accept(&mut self) -> (HttpStream, SocketAddr) {
        let HttpListener { tcp, tls } = self;
        let Some(tls) = tls else {
            let (stream, peer) = next_tcp(tcp).await;
            return (HttpStream::Plain(stream), peer);
        };
        loop {
            tokio::select! {
                (stream, peer) = next_tcp(tcp) => {
                    let acceptor = tls.acceptor.clone();
                    tls.in_flight.spawn(async move {
                        tls::handshake(&acceptor, stream).await.map(|tls| (tls, peer))
                    });
                }
                Some(done) = tls.in_flight.join_next() => {
                    if let Ok(Some((stream, peer))) = done {
                        return (HttpStream::Tls(Box::new(stream)), peer);
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// The client's address, for axum's `ConnectInfo` (the loopback-only users' check); axum
/// provides it for its own listeners only.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

impl Connected<IncomingStream<'_, HttpListener>> for ClientAddr {
    fn connect_info(stream: IncomingStream<'_, HttpListener>) -> ClientAddr {
        ClientAddr(*stream.remote_addr())
    }
}

/// A connection of an `HttpListener`. (The TLS stream is boxed: it carries rustls's buffers
/// and would make every plain connection as large.)
pub enum HttpStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for HttpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            HttpStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            HttpStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for HttpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            HttpStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            HttpStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            HttpStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            HttpStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            HttpStream::Plain(s) => s.is_write_vectored(),
            HttpStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            HttpStream::Plain(s) => Pin::new(s).poll_flush(cx),
            HttpStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            HttpStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            HttpStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Serves `app` on every listener in `listeners` (an endpoint's plain and TLS ports, one
/// state behind both) until `shutdown` completes, then lets requests in flight finish.
/// A path's trailing slash is ignored (`/api/connections/` is `/api/connections`), as
/// RabbitMQ's HTTP router (cowboy's) ignores it; clients such as amqp091-go's tests rely on it.
pub async fn serve(
    listeners: Vec<HttpListener>,
    app: axum::Router,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    // A layer on the outer router runs before the inner one routes, so the rewritten path
    // is the one matched (a layer on `app` itself would run after its routing).
    let app = axum::Router::new()
        .fallback_service(app)
        .layer(axum::middleware::map_request(without_trailing_slash));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut serving = JoinSet::new();
    for listener in listeners {
        let mut stopped = stopped.clone();
        let served = axum::serve(
            listener,
            app.clone()
                .into_make_service_with_connect_info::<ClientAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        });
        serving.spawn(served.into_future());
    }
    shutdown.await;
    let _ = stop.send(true);
    let mut result = Ok(());
    while let Some(served) = serving.join_next().await {
        match served {
            Ok(Err(e)) if result.is_ok() => result = Err(e),
            Err(e) if result.is_ok() => result = Err(io::Error::other(e)),
            _ => {}
        }
    }
    result
}

/// The request with one trailing `/` taken off its path (the root `/` stays), query kept.
async fn without_trailing_slash(mut request: axum::extract::Request) -> axum::extract::Request {
    let uri = request.uri();
    let path = uri.path();
    if path.len() > 1 && path.ends_with('/') {
        let mut path_and_query = path[..path.len() - 1].to_owned();
        if let Some(query) = uri.query() {
            path_and_query.push('?');
            path_and_query.push_str(query);
        }
        let mut parts = uri.clone().into_parts();
        if let Ok(trimmed) = path_and_query.parse() {
            parts.path_and_query = Some(trimmed);
            if let Ok(uri) = axum::http::Uri::from_parts(parts) {
                *request.uri_mut() = uri;
            }
        }
    }
    request
}

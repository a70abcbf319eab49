//! Where the cluster transport's connections come from: the machine's sockets
//! ([`TokioSockets`]), or a simulated network that a deterministic test drives (turmoil's, in
//! the broker's cluster simulation). The transport only ever asks for three things — listen,
//! dial, resolve a `host:port` — so everything above it (handshake, TLS, links, forwarding)
//! runs unchanged on either.
//!
//! Calls are boxed: one per connection or lookup, never per frame.

use std::io;
use std::net::SocketAddr;

use futures_util::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

/// A peer connection's byte stream: plain TCP or TLS over it.
pub trait PeerStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<S: AsyncRead + AsyncWrite + Send + Unpin + 'static> PeerStream for S {}
pub type BoxedStream = Box<dyn PeerStream>;

/// Listens, dials and resolves for a node's cluster transport.
pub trait Sockets: Send + Sync + 'static {
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn PeerListener>>>;
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<BoxedStream>>;
    /// The addresses a `host:port` names (a seed, or an address a peer advertised).
    fn resolve(&self, addr: String) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>>;
}

/// A bound listening socket.
pub trait PeerListener: Send + Sync + 'static {
    fn local_addr(&self) -> io::Result<SocketAddr>;
    /// The next connection and the address it came from.
    fn accept(&self) -> BoxFuture<'_, io::Result<(BoxedStream, SocketAddr)>>;
}

/// The machine's TCP sockets, through tokio; Nagle off on every connection (Raft RPCs and
/// heartbeats are small and latency-bound).
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioSockets;

impl Sockets for TokioSockets {
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn PeerListener>>> {
        Box::pin(async move {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            Ok(Box::new(TokioListener(listener)) as Box<dyn PeerListener>)
        })
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<BoxedStream>> {
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as BoxedStream)
        })
    }

    fn resolve(&self, addr: String) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host(addr).await?.collect()) })
    }
}

struct TokioListener(tokio::net::TcpListener);

impl PeerListener for TokioListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn accept(&self) -> BoxFuture<'_, io::Result<(BoxedStream, SocketAddr)>> {
        Box::pin(async move {
            let (stream, remote) = self.0.accept().await?;
            // A connection whose option cannot be set still works; it is only slower.
            let _ = stream.set_nodelay(true);
            Ok((Box::new(stream) as BoxedStream, remote))
        })
    }
}

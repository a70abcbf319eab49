//! The inter-node [`Transport`] over TCP: one authenticated connection per pair of nodes,
//! multiplexing every group's Raft RPCs, with a node-level heartbeat feeding [`Liveness`].
//!
//! The node with the lower id dials (and redials, with jittered exponential backoff, while the
//! peer is away); the other accepts. Either side then sends requests on the same connection:
//! [`wire`] frames carry a request id, so any number of RPCs from any number of groups are in
//! flight at once (up to `max_in_flight`) and answers come back in any order. Each connection
//! has one writer task that drains its queue into one `write_all` per batch, one reader task,
//! and one heartbeat task that sends a beat per `heartbeat_interval` and closes the connection
//! when nothing has arrived for `peer_down_after` — so a stopped (SIGSTOP) or partitioned peer
//! fails its callers' RPCs instead of hanging them, the same as a dead one. A frame over
//! `max_frame_bytes` or one that does not decode closes the connection with a log line naming
//! the peer and the reason.
//!
//! Every connection starts with the [`handshake`]: nothing is parsed as a frame before both
//! sides proved they know the cluster secret, and no link comes up with a peer the admission
//! check set with [`TcpTransport::set_admission`] refuses (a reset node, whose incarnation
//! differs from the one its cluster recorded: see [`handshake`]). With [`ClusterTls`] configured, TLS wraps the
//! connection first and the handshake and frames run inside it.
//!
//! After the handshake the dialer sends one byte naming the connection's kind:
//! [`KIND_RAFT`] (the link described above) or [`KIND_FORWARD`], a byte stream the transport
//! hands over, authenticated, to the handler set with [`TcpTransport::on_forward`] (the
//! broker's forwarding links: queues served by another node). [`TcpTransport::dial_forward`]
//! opens one.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use crate::handshake;
use crate::liveness::{Liveness, PeerStatus};
use crate::network::{GroupRegistry, RaftRequest, RaftResponse, Transport, TransportError};
pub use crate::sockets::{BoxedStream, PeerListener, PeerStream, Sockets, TokioSockets};
use crate::types::{GroupId, NodeId};
use crate::wire::{self, Frame, WireResponse};

/// Frames queued for one connection's writer before senders wait.
const OUTBOUND_QUEUE_FRAMES: usize = 4096;
/// The reader's buffer: many small frames per read system call.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// TLS around every peer connection: each node accepts with `acceptor` and dials with
/// `connector`, checking the peer's certificate against `server_name` (one name for the
/// cluster's node certificate, or a name every node's certificate carries).
#[derive(Clone)]
pub struct ClusterTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub connector: tokio_rustls::TlsConnector,
    pub server_name: rustls_pki_types::ServerName<'static>,
}

/// How a node's cluster transport behaves; [`TcpTransportConfig::new`] gives the defaults.
#[derive(Clone)]
pub struct TcpTransportConfig {
    pub node: NodeId,
    /// Drawn when the node's data directory was new (0: none); sent in every handshake.
    pub incarnation: u64,
    /// The node name, named in the instructions logged when peers refuse this node as reset.
    pub name: String,
    pub listen: SocketAddr,
    /// The cluster secret every node shares (the Erlang cookie's role); never sent.
    pub secret: Vec<u8>,
    /// TLS around the connections, if any; the secret is checked inside it either way.
    pub tls: Option<ClusterTls>,
    /// The largest frame sent or accepted; a whole snapshot must fit.
    pub max_frame_bytes: u32,
    /// How long one RPC may take before the caller gets "unreachable".
    pub rpc_timeout: Duration,
    pub connect_timeout: Duration,
    pub handshake_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// Silence (no frame at all) after which a peer is down and its connection closed; also
    /// how long one batch write may block on a peer that does not read.
    pub peer_down_after: Duration,
    pub reconnect_backoff_min: Duration,
    pub reconnect_backoff_max: Duration,
    /// RPCs awaiting an answer per connection, each direction.
    pub max_in_flight: usize,
    /// Connections accepted but not yet authenticated.
    pub max_pending_handshakes: usize,
    /// Bytes of queued frames gathered into one write.
    pub write_batch_bytes: usize,
    /// Where connections come from: the machine's sockets, or a simulated network.
    pub sockets: Arc<dyn Sockets>,
}

impl TcpTransportConfig {
    pub fn new(node: NodeId, listen: SocketAddr, secret: impl Into<Vec<u8>>) -> Self {
        Self {
            node,
            incarnation: 0,
            name: node.to_string(),
            listen,
            secret: secret.into(),
            tls: None,
            max_frame_bytes: wire::DEFAULT_MAX_FRAME_BYTES,
            rpc_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_secs(5),
            heartbeat_interval: Duration::from_millis(500),
            peer_down_after: Duration::from_secs(5),
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(5),
            max_in_flight: 4096,
            max_pending_handshakes: 64,
            write_batch_bytes: 1024 * 1024,
            sockets: Arc::new(TokioSockets),
        }
    }
}

// By hand, to keep the secret out of logs.
impl std::fmt::Debug for TcpTransportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransportConfig")
            .field("node", &self.node)
            .field("incarnation", &self.incarnation)
            .field("name", &self.name)
            .field("listen", &self.listen)
            .field("tls", &self.tls.is_some())
            .field("max_frame_bytes", &self.max_frame_bytes)
            .field("rpc_timeout", &self.rpc_timeout)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("peer_down_after", &self.peer_down_after)
            .finish_non_exhaustive()
    }
}

/// The connection kind byte after the handshake: the Raft RPC link.
pub const KIND_RAFT: u8 = 0;
/// The connection kind byte after the handshake: a forwarding link.
pub const KIND_FORWARD: u8 = 1;

/// What takes an accepted forwarding connection: the peer's id and the authenticated stream.
pub type ForwardHandler = Arc<dyn Fn(NodeId, BoxedStream) + Send + Sync>;

/// Decides whether an authenticated peer (node id, incarnation) may link with this node; `Err`
/// says why not (see [`handshake::Admit`]).
pub type AdmissionCheck = Arc<dyn Fn(NodeId, u64) -> Result<(), String> + Send + Sync>;

/// One authenticated connection to a peer, as senders see it.
struct Link {
    id: u64,
    peer: NodeId,
    outbound: mpsc::Sender<Vec<u8>>,
    /// Our requests awaiting the peer's answer, by request id.
    pending: Mutex<HashMap<u64, oneshot::Sender<WireResponse>>>,
    last_seen: Mutex<Instant>,
    closed: watch::Sender<bool>,
}

/// Removes a request from its link's pending table however the caller's wait ends.
struct PendingGuard<'a> {
    link: &'a Link,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.link.pending.lock().remove(&self.id);
    }
}

/// A node's cluster transport.
pub struct TcpTransport {
    config: TcpTransportConfig,
    local_addr: SocketAddr,
    runtime: tokio::runtime::Handle,
    liveness: Arc<Liveness>,
    registry: OnceLock<GroupRegistry>,
    forward: OnceLock<ForwardHandler>,
    admission: OnceLock<AdmissionCheck>,
    /// Each peer's incarnation as its last accepted handshake gave it.
    incarnations: Mutex<HashMap<NodeId, u64>>,
    listener: Mutex<Option<Box<dyn PeerListener>>>,
    addrs: Mutex<HashMap<NodeId, SocketAddr>>,
    links: Mutex<HashMap<NodeId, Arc<Link>>>,
    dialing: Mutex<HashSet<NodeId>>,
    next_request_id: AtomicU64,
    next_link_id: AtomicU64,
    shutdown: watch::Sender<bool>,
}

impl TcpTransport {
    /// Binds the cluster port; the transport sends at once, and answers peers once
    /// [`TcpTransport::serve`] gave it the node's groups. Tasks run on the calling runtime.
    pub async fn bind(config: TcpTransportConfig) -> io::Result<Arc<Self>> {
        if config.secret.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the cluster secret is empty",
            ));
        }
        let listener = config.sockets.bind(config.listen).await?;
        Ok(Arc::new(Self {
            local_addr: listener.local_addr()?,
            runtime: tokio::runtime::Handle::current(),
            liveness: Arc::default(),
            registry: OnceLock::new(),
            forward: OnceLock::new(),
            admission: OnceLock::new(),
            incarnations: Mutex::default(),
            listener: Mutex::new(Some(listener)),
            addrs: Mutex::default(),
            links: Mutex::default(),
            dialing: Mutex::default(),
            next_request_id: AtomicU64::new(1),
            next_link_id: AtomicU64::new(1),
            shutdown: watch::channel(false).0,
            config,
        }))
    }

    pub fn node(&self) -> NodeId {
        self.config.node
    }

    /// This node's incarnation as its handshakes present it.
    pub fn incarnation(&self) -> u64 {
        self.config.incarnation
    }

    /// The address the cluster port is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The first address `addr` (`host:port`) names, on this transport's network.
    pub async fn resolve(&self, addr: &str) -> Result<SocketAddr, String> {
        self.config
            .sockets
            .resolve(addr.to_owned())
            .await
            .map_err(|e| format!("cannot resolve {addr}: {e}"))?
            .into_iter()
            .next()
            .ok_or_else(|| format!("{addr} resolves to no address"))
    }

    /// The failure detector's table of peers.
    pub fn liveness(&self) -> &Arc<Liveness> {
        &self.liveness
    }

    pub fn peer_status(&self, node: NodeId) -> Option<PeerStatus> {
        self.liveness.status(node)
    }

    /// Starts answering peers with the node's groups (call once; later calls are ignored).
    pub fn serve(self: &Arc<Self>, registry: GroupRegistry) {
        registry.use_liveness(self.liveness.clone());
        if self.registry.set(registry).is_err() {
            return;
        }
        if let Some(listener) = self.listener.lock().take() {
            let transport = self.clone();
            self.runtime.spawn(transport.accept_loop(listener));
        }
    }

    /// Sets what takes accepted forwarding connections (call once; later calls are ignored).
    /// Until then they are closed.
    pub fn on_forward(&self, handler: ForwardHandler) {
        let _ = self.forward.set(handler);
    }

    /// Sets the check every authenticated peer passes before a link comes up, both ways and
    /// for both kinds of connection (call once; later calls are ignored). Until then every
    /// authenticated peer is admitted.
    pub fn set_admission(&self, check: AdmissionCheck) {
        let _ = self.admission.set(check);
    }

    /// Peer `node`'s incarnation as its last accepted handshake gave it.
    pub fn peer_incarnation(&self, node: NodeId) -> Option<u64> {
        self.incarnations.lock().get(&node).copied()
    }

    /// This node as the handshake presents it.
    fn identity(&self) -> handshake::Identity {
        handshake::Identity {
            node: self.config.node,
            incarnation: self.config.incarnation,
            name: self.config.name.clone(),
        }
    }

    fn admit(&self, peer: NodeId, incarnation: u64) -> Result<(), String> {
        match self.admission.get() {
            Some(check) => check(peer, incarnation),
            None => Ok(()),
        }
    }

    /// Opens a forwarding connection to `peer` listening at `addr` (its advertised address in
    /// the membership: the transport may not have it, when the peer dialled the Raft link),
    /// authenticated as the Raft link is.
    pub async fn dial_forward(
        &self,
        peer: NodeId,
        addr: SocketAddr,
    ) -> Result<BoxedStream, String> {
        if self.is_shut_down() {
            return Err("this node is shutting down".into());
        }
        self.dial_kind(Some(peer), addr, KIND_FORWARD)
            .await
            .map(|(_, stream)| stream)
            .map_err(|e| e.to_string())
    }

    /// Tells the transport where a peer listens. The node with the lower id dials, so this
    /// starts a connection (kept up with reconnects) when `node` is above this node's id.
    pub fn add_peer(self: &Arc<Self>, node: NodeId, addr: SocketAddr) {
        if node == self.config.node {
            return;
        }
        self.addrs.lock().insert(node, addr);
        self.liveness.know(node, Some(addr));
        if node > self.config.node && self.dialing.lock().insert(node) {
            let transport = self.clone();
            self.runtime.spawn(transport.dial_loop(node));
        }
    }

    /// Closes every connection and the cluster port; RPCs fail from now on.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
        self.listener.lock().take();
        let links: Vec<Arc<Link>> = self.links.lock().drain().map(|(_, link)| link).collect();
        for link in links {
            link.closed.send_replace(true);
            self.liveness.down(link.peer);
        }
    }

    fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    async fn dial_loop(self: Arc<Self>, peer: NodeId) {
        let mut shutdown = self.shutdown.subscribe();
        let mut backoff = self.config.reconnect_backoff_min;
        let mut failing = false;
        while !self.is_shut_down() {
            let addr = self.addrs.lock().get(&peer).copied();
            if let Some(addr) = addr {
                match self.dial(Some(peer), addr).await {
                    Ok((_, stream)) => {
                        failing = false;
                        backoff = self.config.reconnect_backoff_min;
                        self.clone().run_link(peer, stream).await;
                    }
                    // Authentication failures are configuration errors: say so every time.
                    Err(DialError::Handshake(e)) => {
                        tracing::error!(peer, %addr, error = %e, "cluster handshake failed");
                    }
                    Err(DialError::Tls(e)) => {
                        tracing::error!(peer, %addr, error = %e, "cluster TLS handshake failed");
                    }
                    // An absent peer is normal during restarts: say so once per outage.
                    Err(DialError::Connect(e)) if !failing => {
                        failing = true;
                        tracing::warn!(peer, %addr, error = %e, "cannot reach cluster peer; retrying with backoff");
                    }
                    Err(DialError::Connect(e)) => {
                        tracing::debug!(peer, %addr, error = %e, "cannot reach cluster peer");
                    }
                }
            }
            let jittered = backoff.mul_f64(crate::runtime::random_in(0.5..1.0));
            tokio::select! {
                _ = tokio::time::sleep(jittered) => {}
                _ = shutdown.wait_for(|stopped| *stopped) => return,
            }
            backoff = (backoff * 2).min(self.config.reconnect_backoff_max);
        }
    }

    /// Finds out which node listens at `addr` (a seed known by address only): dials it,
    /// authenticates whichever node answers, and from then on knows it as a peer, as
    /// [`TcpTransport::add_peer`] does. The probe's connection carries on as the pair's link.
    /// An address where this node itself answers gives this node's own id.
    pub async fn discover(self: &Arc<Self>, addr: SocketAddr) -> Result<NodeId, String> {
        let (peer, stream) = match self.dial(None, addr).await {
            Ok(dialed) => dialed,
            // This node's own address: its id, and nothing to link.
            Err(DialError::Handshake(handshake::HandshakeError::Itself)) => {
                return Ok(self.config.node)
            }
            Err(e) => return Err(e.to_string()),
        };
        self.addrs.lock().insert(peer, addr);
        self.liveness.know(peer, Some(addr));
        if self.link_to(peer).is_some() {
            // Already linked (the peer dialed first): the probe is not needed.
            return Ok(peer);
        }
        let transport = self.clone();
        if peer > self.config.node {
            if self.dialing.lock().insert(peer) {
                self.runtime.spawn(async move {
                    transport.clone().run_link(peer, stream).await;
                    transport.dial_loop(peer).await;
                });
            }
        } else {
            // The peer dials this pair; until it knows this node's address the probe serves.
            self.runtime.spawn(transport.run_link(peer, stream));
        }
        Ok(peer)
    }

    /// Dials `addr` for the Raft link and authenticates the node there (`expected`, or
    /// whichever answers).
    async fn dial(
        &self,
        expected: Option<NodeId>,
        addr: SocketAddr,
    ) -> Result<(NodeId, BoxedStream), DialError> {
        self.dial_kind(expected, addr, KIND_RAFT).await
    }

    /// Dials `addr`, authenticates the node there and names the connection's `kind`.
    async fn dial_kind(
        &self,
        expected: Option<NodeId>,
        addr: SocketAddr,
        kind: u8,
    ) -> Result<(NodeId, BoxedStream), DialError> {
        let stream = tokio::time::timeout(
            self.config.connect_timeout,
            self.config.sockets.connect(addr),
        )
        .await
        .map_err(|_| DialError::Connect("connect timed out".into()))?
        .map_err(|e| DialError::Connect(e.to_string()))?;
        let handshake = async {
            let mut stream: BoxedStream = match &self.config.tls {
                Some(tls) => Box::new(
                    tls.connector
                        .connect(tls.server_name.clone(), stream)
                        .await
                        .map_err(|e| DialError::Tls(e.to_string()))?,
                ),
                None => Box::new(stream),
            };
            let admit = |peer: NodeId, incarnation: u64| self.admit(peer, incarnation);
            let peer = handshake::dial_as(
                &mut stream,
                &self.identity(),
                expected,
                &self.config.secret,
                &admit,
            )
            .await
            .map_err(|e| match e {
                handshake::HandshakeError::Io(e) => DialError::Connect(e.to_string()),
                other => DialError::Handshake(other),
            })?;
            self.incarnations.lock().insert(peer.node, peer.incarnation);
            let peer = peer.node;
            stream
                .write_all(&[kind])
                .await
                .map_err(|e| DialError::Connect(e.to_string()))?;
            stream
                .flush()
                .await
                .map_err(|e| DialError::Connect(e.to_string()))?;
            Ok((peer, stream))
        };
        tokio::time::timeout(self.config.handshake_timeout, handshake)
            .await
            .map_err(|_| {
                DialError::Connect(format!(
                    "no handshake answer within {:?}",
                    self.config.handshake_timeout
                ))
            })?
    }

    async fn accept_loop(self: Arc<Self>, listener: Box<dyn PeerListener>) {
        let mut shutdown = self.shutdown.subscribe();
        let handshakes = Arc::new(Semaphore::new(self.config.max_pending_handshakes));
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = shutdown.wait_for(|stopped| *stopped) => return,
            };
            match accepted {
                Ok((stream, remote)) => {
                    let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                        tracing::warn!(%remote, "too many cluster handshakes in progress; dropping the connection");
                        continue;
                    };
                    let transport = self.clone();
                    self.runtime.spawn(async move {
                        transport.handle_inbound(stream, remote, permit).await;
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "accepting a cluster connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    async fn handle_inbound(
        self: Arc<Self>,
        stream: BoxedStream,
        remote: SocketAddr,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let handshake = async {
            let mut stream: BoxedStream = match &self.config.tls {
                Some(tls) => match tls.acceptor.accept(stream).await {
                    Ok(stream) => Box::new(stream),
                    Err(e) => return Err(format!("TLS handshake failed: {e}")),
                },
                None => Box::new(stream),
            };
            let admit = |peer: NodeId, incarnation: u64| self.admit(peer, incarnation);
            let peer =
                handshake::accept_as(&mut stream, &self.identity(), &self.config.secret, &admit)
                    .await
                    .map_err(|e| match e {
                        // This node dialing its own address (a seed list naming it): its
                        // dialing side knows and skips it; nothing to report.
                        handshake::HandshakeError::Itself => String::new(),
                        other => other.to_string(),
                    })?;
            self.incarnations.lock().insert(peer.node, peer.incarnation);
            let peer = peer.node;
            let mut kind = [0u8; 1];
            stream
                .read_exact(&mut kind)
                .await
                .map_err(|e| format!("no connection kind after the handshake: {e}"))?;
            Ok((peer, kind[0], stream))
        };
        let accepted = tokio::time::timeout(self.config.handshake_timeout, handshake).await;
        drop(permit);
        match accepted {
            // A Raft connection from a peer above this node's id is that peer's probe
            // (`discover`): this node dials the pair. When a link is up already the prober
            // drops its probe as well, so taking it would close the live link for one that
            // is about to close too, leaving both ends down and redialling (a node resumed
            // after a pause probes the peers it thinks down while they dial it).
            Ok(Ok((peer, KIND_RAFT, _)))
                if peer > self.config.node && self.link_to(peer).is_some() =>
            {
                tracing::debug!(peer, "a probe from a peer already linked; closed");
            }
            Ok(Ok((peer, KIND_RAFT, stream))) => self.run_link(peer, stream).await,
            Ok(Ok((peer, KIND_FORWARD, stream))) => match self.forward.get() {
                Some(handler) => handler(peer, stream),
                None => tracing::debug!(
                    peer,
                    "a forwarding connection before forwarding is set up; closed"
                ),
            },
            Ok(Ok((peer, kind, _))) => {
                tracing::error!(peer, %remote, kind, "refused a cluster connection of unknown kind");
            }
            Ok(Err(reason)) if reason.is_empty() => {}
            Ok(Err(reason)) => {
                tracing::error!(%remote, "refused a cluster connection: {reason}");
            }
            Err(_) => tracing::warn!(
                %remote,
                "cluster connection did not complete the handshake within {:?}",
                self.config.handshake_timeout
            ),
        }
    }

    /// Runs one authenticated connection until it fails, goes silent, is replaced by a newer
    /// connection to the same peer, or the transport shuts down.
    async fn run_link(self: Arc<Self>, peer: NodeId, stream: BoxedStream) {
        if self.is_shut_down() {
            return;
        }
        let (outbound, queued) = mpsc::channel(OUTBOUND_QUEUE_FRAMES);
        let (closed, mut closed_signal) = watch::channel(false);
        let link = Arc::new(Link {
            id: self.next_link_id.fetch_add(1, Ordering::Relaxed),
            peer,
            outbound,
            pending: Mutex::default(),
            last_seen: Mutex::new(Instant::now()),
            closed,
        });
        if let Some(previous) = self.links.lock().insert(peer, link.clone()) {
            previous.closed.send_replace(true);
        }
        self.liveness.connected(peer);
        tracing::info!(peer, link = link.id, "cluster link up");

        let (reader, writer) = tokio::io::split(stream);
        let mut shutdown = self.shutdown.subscribe();
        let reason = tokio::select! {
            reason = self.read_loop(&link, reader) => reason,
            reason = write_loop(
                queued,
                writer,
                self.config.write_batch_bytes,
                self.config.peer_down_after,
            ) => reason,
            reason = self.heartbeat_loop(&link) => reason,
            _ = closed_signal.wait_for(|closed| *closed) => "replaced by a newer connection".into(),
            _ = shutdown.wait_for(|stopped| *stopped) => "this node is shutting down".into(),
        };

        let current = {
            let mut links = self.links.lock();
            let current = links
                .get(&peer)
                .is_some_and(|other| Arc::ptr_eq(other, &link));
            if current {
                links.remove(&peer);
            }
            current
        };
        // Waiting callers see their answer channel close: "unreachable" at once.
        link.pending.lock().clear();
        if current {
            self.liveness.down(peer);
        }
        tracing::warn!(peer, link = link.id, "cluster link closed: {reason}");
    }

    async fn read_loop(&self, link: &Arc<Link>, reader: ReadHalf<BoxedStream>) -> String {
        let peer = link.peer;
        let max_frame_bytes = self.config.max_frame_bytes;
        let in_flight = Arc::new(Semaphore::new(self.config.max_in_flight));
        let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
        loop {
            let length = match reader.read_u32().await {
                Ok(length) => length as usize,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return "the peer closed the connection".into();
                }
                Err(e) => return format!("read failed: {e}"),
            };
            if let Err(e) = wire::check_length(length, max_frame_bytes) {
                tracing::error!(peer, "closing the cluster connection: bad frame: {e}");
                return format!("bad frame: {e}");
            }
            let mut body = vec![0u8; length];
            if let Err(e) = reader.read_exact(&mut body).await {
                return format!("read failed inside a frame: {e}");
            }
            *link.last_seen.lock() = Instant::now();
            let frame = match wire::decode(&body, max_frame_bytes) {
                Ok(frame) => frame,
                Err(e) => {
                    tracing::error!(peer, "closing the cluster connection: bad frame: {e}");
                    return format!("bad frame: {e}");
                }
            };
            match frame {
                Frame::Heartbeat => {}
                Frame::Response { id, answer } => {
                    if let Some(waiter) = link.pending.lock().remove(&id) {
                        let _ = waiter.send(answer);
                    }
                }
                Frame::Request { id, group, rpc } => {
                    // Past the limit, stop reading: TCP pushes back on the peer.
                    let Ok(permit) = in_flight.clone().acquire_owned().await else {
                        return "request limiter closed".into();
                    };
                    let registry = self.registry.get().cloned();
                    let outbound = link.outbound.clone();
                    let me = self.config.node;
                    self.runtime.spawn(async move {
                        let result = match registry {
                            Some(registry) => registry.handle(group, rpc.into()).await,
                            None => Err(TransportError::NoSuchGroup { node: me, group }),
                        };
                        let answer = Frame::Response {
                            id,
                            answer: WireResponse::from_result(result),
                        };
                        let frame = wire::encode(&answer, max_frame_bytes).or_else(|e| {
                            tracing::warn!(peer, group, error = %e, "an answer could not be sent");
                            wire::encode(
                                &Frame::Response {
                                    id,
                                    answer: WireResponse::Failed(e.to_string()),
                                },
                                max_frame_bytes,
                            )
                        });
                        if let Ok(frame) = frame {
                            let _ = outbound.send(frame).await;
                        }
                        drop(permit);
                    });
                }
            }
        }
    }

    async fn heartbeat_loop(&self, link: &Arc<Link>) -> String {
        let Ok(beat) = wire::encode(&Frame::Heartbeat, self.config.max_frame_bytes) else {
            return "cannot encode a heartbeat".into();
        };
        let mut ticker = tokio::time::interval(self.config.heartbeat_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let last_seen = *link.last_seen.lock();
            self.liveness.seen(link.peer, last_seen);
            let silent = last_seen.elapsed();
            if silent > self.config.peer_down_after {
                return format!(
                    "nothing heard for {silent:?} (limit {:?}): peer down",
                    self.config.peer_down_after
                );
            }
            // A full queue means frames are flowing, or the write timeout will close the link.
            let _ = link.outbound.try_send(beat.clone());
        }
    }

    fn link_to(&self, node: NodeId) -> Option<Arc<Link>> {
        self.links.lock().get(&node).cloned()
    }
}

enum DialError {
    Connect(String),
    Tls(String),
    Handshake(handshake::HandshakeError),
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Connect(e) => write!(f, "cannot connect: {e}"),
            DialError::Tls(e) => write!(f, "TLS handshake failed: {e}"),
            DialError::Handshake(e) => write!(f, "cluster handshake failed: {e}"),
        }
    }
}

/// Drains the connection's queue into one write per batch.
async fn write_loop(
    mut queued: mpsc::Receiver<Vec<u8>>,
    mut writer: WriteHalf<BoxedStream>,
    batch_bytes: usize,
    write_timeout: Duration,
) -> String {
    let mut batch = Vec::with_capacity(batch_bytes.min(64 * 1024));
    loop {
        let Some(frame) = queued.recv().await else {
            return "outbound queue closed".into();
        };
        batch.clear();
        batch.extend_from_slice(&frame);
        while batch.len() < batch_bytes {
            match queued.try_recv() {
                Ok(frame) => batch.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        // The flush matters under TLS: it pushes the encrypted records out.
        let write = async {
            writer.write_all(&batch).await?;
            writer.flush().await
        };
        match tokio::time::timeout(write_timeout, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return format!("write failed: {e}"),
            Err(_) => {
                return format!("a write stalled for {write_timeout:?}: the peer is not reading")
            }
        }
        // A snapshot-sized batch should not pin its buffer for the connection's lifetime.
        if batch.capacity() > 4 * batch_bytes {
            batch = Vec::with_capacity(batch_bytes.min(64 * 1024));
        }
    }
}

impl Transport for TcpTransport {
    async fn send(
        &self,
        _from: NodeId,
        to: NodeId,
        group: GroupId,
        request: RaftRequest,
    ) -> Result<RaftResponse, TransportError> {
        let link = self.link_to(to).ok_or(TransportError::Unreachable(to))?;
        if link.pending.lock().len() >= self.config.max_in_flight {
            return Err(TransportError::Unreachable(to));
        }
        let id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let frame = wire::encode(
            &Frame::Request {
                id,
                group,
                rpc: request.into(),
            },
            self.config.max_frame_bytes,
        )
        .map_err(|e| TransportError::Remote {
            node: to,
            reason: e.to_string(),
        })?;
        let (waiter, answer) = oneshot::channel();
        link.pending.lock().insert(id, waiter);
        let _guard = PendingGuard { link: &link, id };
        let exchange = async {
            link.outbound.send(frame).await.ok()?;
            answer.await.ok()
        };
        match tokio::time::timeout(self.config.rpc_timeout, exchange).await {
            Ok(Some(answer)) => answer.into_result(to, group),
            Ok(None) | Err(_) => Err(TransportError::Unreachable(to)),
        }
    }
}

//! Three nodes, each with its own runtime, over real loopback TCP with the cluster transport:
//! a group commits and confirms; the leader's node shuts down and another leads with the
//! committed data; a node with the wrong secret is refused and applies nothing; a stopped peer
//! does not hang proposals to the majority; a bad frame closes only its connection; many groups
//! share one connection per node pair; a group commits inside TLS; a probe from a peer that
//! is linked already leaves the link as it is.

mod join_all;
mod tcp_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use join_all::futures_join_all;
use tcp_support::{enqueue, raft_config, transport_config, FreezableProxy, TcpCluster, DEADLINE};
use warren_quorum::handshake::{self, HandshakeError};
use warren_quorum::machine::{QueueState, Reply};
use warren_quorum::tcp::{ClusterTls, TcpTransportConfig, KIND_RAFT};

const NODES: [u64; 3] = [1, 2, 3];

fn ready(n: usize) -> impl Fn(&QueueState) -> bool {
    move |q| q.ready_count() == n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn three_nodes_commit_and_confirm_over_tcp() {
    let cluster = TcpCluster::start(&NODES, raft_config()).await;
    cluster.create_group(7, &NODES).await;
    for seq in 1..=30 {
        let reply = cluster
            .propose(7, enqueue(1, seq, vec![seq as u8; 64]))
            .await;
        assert!(matches!(reply, Reply::Enqueued { .. }), "{reply:?}");
    }
    for id in NODES {
        cluster.wait_for_queue(id, 7, "30 ready", ready(30)).await;
        assert_eq!(
            cluster.node(id).group(7).with_queue(|q| q.ready_ids()),
            (0..30).collect::<Vec<_>>()
        );
    }
    // A retried publish is confirmed without a second copy.
    assert_eq!(
        cluster.propose(7, enqueue(1, 30, vec![0])).await,
        Reply::Duplicate
    );
    // Every node's failure detector sees both peers up and recently heard from.
    for id in NODES {
        for peer in NODES.into_iter().filter(|peer| *peer != id) {
            cluster.wait_for_peer(id, peer, true).await;
            let status = cluster.node(id).transport.peer_status(peer).expect("known");
            assert!(status.connections >= 1, "node {id} sees {status:?}");
            assert!(status.silent_for().expect("heard from") < DEADLINE);
        }
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn leader_node_shut_down_another_leads_with_the_committed_data() {
    let mut cluster = TcpCluster::start(&NODES, raft_config()).await;
    cluster.create_group(7, &NODES).await;
    for seq in 1..=20 {
        cluster.propose(7, enqueue(1, seq, vec![1; 100])).await;
    }
    let old_leader = cluster.leader(7).await;
    cluster.stop_node(old_leader).await;
    let remaining: Vec<u64> = NODES.into_iter().filter(|id| *id != old_leader).collect();
    for id in &remaining {
        cluster.wait_for_peer(*id, old_leader, false).await;
    }

    let new_leader = cluster.leader_among(7, &remaining).await;
    assert_ne!(new_leader, old_leader);
    cluster
        .wait_for_queue(new_leader, 7, "20 ready", ready(20))
        .await;
    assert_eq!(
        cluster.propose(7, enqueue(1, 20, vec![0])).await,
        Reply::Duplicate,
        "the last confirmed publish survived"
    );
    assert_eq!(
        cluster.propose(7, enqueue(1, 21, vec![2; 100])).await,
        Reply::Enqueued { msg_id: 20 }
    );
    for id in &remaining {
        cluster.wait_for_queue(*id, 7, "21 ready", ready(21)).await;
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_node_with_the_wrong_secret_is_refused_and_applies_nothing() {
    let cluster = TcpCluster::start_unwired(
        &NODES,
        |id| {
            let secret: &[u8] = if id == 3 { b"intruder" } else { b"cookie" };
            transport_config(id, secret)
        },
        raft_config(),
    )
    .await;
    cluster.wire(|_, to| cluster.addr(to)).await;
    cluster.create_group(7, &NODES).await;
    for seq in 1..=10 {
        let reply = cluster
            .propose_among(7, &[1, 2], enqueue(1, seq, vec![9; 16]))
            .await;
        assert!(matches!(reply, Reply::Enqueued { .. }), "{reply:?}");
    }
    cluster.wait_for_queue(2, 7, "10 ready", ready(10)).await;

    // The handshake names the reason. (A node id no one uses, so the checks below see only
    // the cluster's own connections.)
    let mut stream = tokio::net::TcpStream::connect(cluster.addr(3))
        .await
        .expect("connect");
    let refused = handshake::dial(&mut stream, 9, 3, b"cookie").await;
    assert!(
        matches!(refused, Err(HandshakeError::BadSecret(3))),
        "{refused:?}"
    );
    assert!(refused
        .expect_err("refused")
        .to_string()
        .contains("does not know the cluster secret"));
    let mut stream = tokio::net::TcpStream::connect(cluster.addr(3))
        .await
        .expect("connect");
    let accepted = handshake::dial(&mut stream, 9, 3, b"intruder").await;
    assert!(accepted.is_ok(), "{accepted:?}");

    // Node 3 never got a Raft message through: no log applied, no leader known, no peer up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let outsider = cluster.node(3).group(7);
    assert_eq!(outsider.last_applied(), None);
    assert_eq!(outsider.with_queue(|q| q.ready_count()), 0);
    assert_eq!(outsider.raft().metrics().borrow().current_leader, None);
    for (id, peer) in [(1, 3), (2, 3), (3, 1), (3, 2)] {
        let status = cluster.node(id).transport.peer_status(peer).expect("known");
        assert!(!status.up, "node {id} sees {status:?}");
        assert_eq!(status.connections, 0, "node {id} sees {status:?}");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_stopped_peer_does_not_hang_proposals_to_the_majority() {
    let cluster =
        TcpCluster::start_unwired(&NODES, |id| transport_config(id, b"cookie"), raft_config())
            .await;
    // Nodes 1 and 2 reach node 3 (which accepts, having the highest id) through a proxy.
    let proxy = FreezableProxy::start(cluster.addr(3)).await;
    let proxy_addr = proxy.addr;
    cluster
        .wire(|_, to| {
            if to == 3 {
                proxy_addr
            } else {
                cluster.addr(to)
            }
        })
        .await;
    cluster.create_group(7, &NODES).await;
    for seq in 1..=10 {
        cluster.propose(7, enqueue(1, seq, vec![5; 32])).await;
    }
    cluster.wait_for_queue(3, 7, "10 ready", ready(10)).await;

    proxy.freeze();
    let started = Instant::now();
    for seq in 11..=20 {
        let reply = cluster
            .propose_among(7, &[1, 2], enqueue(1, seq, vec![5; 32]))
            .await;
        assert!(matches!(reply, Reply::Enqueued { .. }), "{reply:?}");
    }
    assert!(started.elapsed() < DEADLINE);
    // The failure detector notices the silence on both sides of the frozen links.
    for (id, peer) in [(1, 3), (2, 3), (3, 1), (3, 2)] {
        cluster.wait_for_peer(id, peer, false).await;
    }
    cluster.wait_for_peer(1, 2, true).await;
    assert!(
        cluster
            .node(3)
            .group(7)
            .with_queue(|q| q.ready_count() < 20),
        "the frozen node cannot have the new messages"
    );

    // Back from the pause: the links come up again and node 3 catches up.
    proxy.thaw();
    for (id, peer) in [(1, 3), (2, 3), (3, 1), (3, 2)] {
        cluster.wait_for_peer(id, peer, true).await;
    }
    cluster.propose(7, enqueue(1, 21, vec![5; 32])).await;
    cluster.wait_for_queue(3, 7, "21 ready", ready(21)).await;
    cluster.shutdown().await;
}

/// A cluster CA and one node certificate for the name "warren-cluster", which every node
/// presents and checks.
fn cluster_tls() -> ClusterTls {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("CA");
    let node_key = KeyPair::generate().expect("key");
    let node_cert = CertificateParams::new(vec!["warren-cluster".to_owned()])
        .expect("params")
        .signed_by(&node_key, &ca)
        .expect("node certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![node_cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(node_key.serialize_der())),
        )
        .expect("server config");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).expect("root");
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    ClusterTls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        server_name: ServerName::try_from("warren-cluster").expect("name"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn three_nodes_over_tls_commit_and_a_plain_connection_is_refused() {
    let tls = cluster_tls();
    let cluster = TcpCluster::start_unwired(
        &NODES,
        |id| TcpTransportConfig {
            tls: Some(tls.clone()),
            ..transport_config(id, b"test-cookie")
        },
        raft_config(),
    )
    .await;
    cluster.wire(|_, to| cluster.addr(to)).await;
    cluster.create_group(7, &NODES).await;
    for seq in 1..=10 {
        let reply = cluster.propose(7, enqueue(1, seq, vec![3; 100])).await;
        assert!(matches!(reply, Reply::Enqueued { .. }), "{reply:?}");
    }
    for id in NODES {
        cluster.wait_for_queue(id, 7, "10 ready", ready(10)).await;
    }
    // The right secret without TLS gets nowhere.
    let mut stream = tokio::net::TcpStream::connect(cluster.addr(1))
        .await
        .expect("connect");
    let plain = tokio::time::timeout(DEADLINE, handshake::dial(&mut stream, 9, 1, b"test-cookie"))
        .await
        .expect("answered");
    assert!(plain.is_err(), "{plain:?}");
    cluster.shutdown().await;
}

/// Reads until the other side closes the connection; false if it stays open past the deadline.
async fn closed_by_peer(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 1024];
    let started = Instant::now();
    while started.elapsed() < DEADLINE {
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_bad_frame_closes_that_connection_and_nothing_else() {
    use tokio::io::AsyncWriteExt;
    // Silence alone must not be what closes the connections here: the detector waits longer
    // than the test's deadline.
    let cluster = TcpCluster::start_unwired(
        &NODES,
        |id| TcpTransportConfig {
            peer_down_after: DEADLINE * 2,
            ..transport_config(id, b"test-cookie")
        },
        raft_config(),
    )
    .await;
    cluster.wire(|_, to| cluster.addr(to)).await;
    cluster.create_group(7, &NODES).await;
    for seq in 1..=5 {
        cluster.propose(7, enqueue(1, seq, vec![1; 8])).await;
    }
    // An authenticated peer (with an id the cluster does not use) misbehaves in three ways.
    let oversized = u32::MAX.to_be_bytes().to_vec();
    let empty = 0u32.to_be_bytes().to_vec();
    let mut garbage = 6u32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0xff; 6]);
    for bad in [oversized, empty, garbage] {
        let mut stream = tokio::net::TcpStream::connect(cluster.addr(1))
            .await
            .expect("connect");
        handshake::dial(&mut stream, 9, 1, b"test-cookie")
            .await
            .expect("authenticated");
        // The connection's kind, then the bad frame.
        stream.write_all(&[KIND_RAFT]).await.expect("write");
        stream.write_all(&bad).await.expect("write");
        assert!(closed_by_peer(&mut stream).await, "{bad:?} was not refused");
    }
    // The node carries on: peer 9 is down, the group commits through every node.
    cluster.wait_for_peer(1, 9, false).await;
    for seq in 6..=10 {
        cluster.propose(7, enqueue(1, seq, vec![1; 8])).await;
    }
    for id in NODES {
        cluster.wait_for_queue(id, 7, "10 ready", ready(10)).await;
    }
    cluster.shutdown().await;
}

#[cfg(target_os = "linux")]
fn established_connections_to(ports: &[u16]) -> usize {
    // /proc/net/tcp: "sl local_address rem_address st ..." with addresses as HEXIP:HEXPORT
    // and state 01 = ESTABLISHED. Counting the accepting ends counts each connection once.
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields
                .get(1)
                .and_then(|addr| addr.rsplit(':').next())
                .and_then(|port| u16::from_str_radix(port, 16).ok());
            fields.get(3) == Some(&"01") && local_port.is_some_and(|port| ports.contains(&port))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn two_hundred_groups_share_one_connection_per_node_pair() {
    const GROUPS: u64 = 200;
    let config = openraft::Config {
        heartbeat_interval: 500,
        election_timeout_min: 2000,
        election_timeout_max: 4000,
        ..raft_config()
    };
    let cluster = TcpCluster::start(&NODES, config).await;
    for group in 1..=GROUPS {
        // Leaders spread over the nodes: each initialises on a different first member.
        let first = NODES[(group % 3) as usize];
        let mut members = vec![first];
        members.extend(NODES.into_iter().filter(|id| *id != first));
        cluster.create_group(group, &members).await;
    }
    let proposals = (1..=GROUPS).map(|group| {
        let cluster = &cluster;
        async move {
            cluster
                .propose(group, enqueue(group, 1, group.to_le_bytes().to_vec()))
                .await
        }
    });
    for reply in futures_join_all(proposals.collect()).await {
        // `propose` gives up on an attempt after 10 s and retries; on a loaded machine the
        // attempt it gave up on may still commit, and the retry is then answered Duplicate
        // (the publisher's sequence number dedups it). Either way one copy is enqueued,
        // which the check below asserts on every node.
        assert!(
            matches!(reply, Reply::Enqueued { msg_id: 0 } | Reply::Duplicate),
            "{reply:?}"
        );
    }
    for group in 1..=GROUPS {
        for id in NODES {
            cluster.wait_for_queue(id, group, "1 ready", ready(1)).await;
        }
    }
    let leaders: std::collections::BTreeSet<u64> = {
        let mut leaders = std::collections::BTreeSet::new();
        for group in 1..=GROUPS {
            leaders.insert(cluster.leader(group).await);
        }
        leaders
    };
    assert!(leaders.len() > 1, "leaders all on {leaders:?}");
    for id in NODES {
        for peer in NODES.into_iter().filter(|peer| *peer != id) {
            cluster.wait_for_peer(id, peer, true).await;
        }
    }
    // What the kernel sees: one connection per node pair, whatever the number of groups.
    #[cfg(target_os = "linux")]
    {
        let ports: Vec<u16> = NODES.iter().map(|id| cluster.addr(*id).port()).collect();
        let started = Instant::now();
        loop {
            let established = established_connections_to(&ports);
            if established == 3 {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{established} connections between 3 nodes"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    cluster.shutdown().await;
}

/// Transports for nodes 1 and 2 on loopback ports of their own, sharing `secret`, not
/// serving yet.
async fn two_transports(
    secret: &[u8],
) -> (
    Arc<warren_quorum::tcp::TcpTransport>,
    Arc<warren_quorum::tcp::TcpTransport>,
) {
    use warren_quorum::tcp::TcpTransport;
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("address");
    let bind = |id| TcpTransport::bind(TcpTransportConfig::new(id, any, secret.to_vec()));
    (
        bind(1).await.expect("bind 1"),
        bind(2).await.expect("bind 2"),
    )
}

/// A forwarding connection (kind byte 1 after the handshake) reaches the transport's
/// `on_forward` handler, authenticated, with the dialer's id; bytes flow both ways on it.
/// An unknown kind is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_connection_reaches_the_handler_and_an_unknown_kind_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use warren_quorum::network::GroupRegistry;
    let (one, two) = two_transports(b"fw-cookie").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    two.on_forward(Arc::new(move |peer, stream| {
        let _ = tx.send((peer, stream));
    }));
    two.serve(GroupRegistry::new(2));

    let mut dialed = one
        .dial_forward(2, two.local_addr())
        .await
        .expect("forwarding dial");
    let (peer, mut accepted) = tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("handed over in time")
        .expect("handed over");
    assert_eq!(peer, 1);
    dialed.write_all(b"ping").await.expect("write");
    dialed.flush().await.expect("flush");
    let mut got = [0u8; 4];
    accepted.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"ping");

    let mut stream = tokio::net::TcpStream::connect(two.local_addr())
        .await
        .expect("connect");
    handshake::dial(&mut stream, 9, 2, b"fw-cookie")
        .await
        .expect("authenticated");
    stream.write_all(&[7]).await.expect("write");
    assert!(closed_by_peer(&mut stream).await, "kind 7 was not refused");
    one.shutdown();
    two.shutdown();
}

/// The node with the higher id probes a peer it holds down (`discover`) while the lower one,
/// which dials the pair, has just linked (a node resumed after a pause): the probe is
/// dropped at both ends and the live link stays, never replaced by the probe and then lost
/// with it (both ends down and redialling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_from_a_linked_peer_leaves_the_link_up() {
    use warren_quorum::network::GroupRegistry;
    use warren_quorum::tcp::TcpTransport;
    let (one, two) = two_transports(b"probe-cookie").await;
    one.serve(GroupRegistry::new(1));
    two.serve(GroupRegistry::new(2));
    one.add_peer(2, two.local_addr());
    let linked = |t: &TcpTransport, peer| t.peer_status(peer).is_some_and(|s| s.up);
    let started = Instant::now();
    while !(linked(&one, 2) && linked(&two, 1)) {
        assert!(started.elapsed() < DEADLINE, "1 and 2 did not link");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = (
        one.peer_status(2).expect("2"),
        two.peer_status(1).expect("1"),
    );
    assert_eq!((before.0.connections, before.1.connections), (1, 1));

    assert_eq!(two.discover(one.local_addr()).await, Ok(1));
    // Long enough for a replaced link to close and a redial to come back (backoff ≥ 50 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (status, was) in [
        (one.peer_status(2), &before.0),
        (two.peer_status(1), &before.1),
    ] {
        let status = status.expect("known");
        assert!(status.up, "the link went down: {status:?}");
        assert_eq!(status.connections, 1, "the link was replaced: {status:?}");
        assert_eq!(
            status.since, was.since,
            "the link went down and up again: {status:?}"
        );
    }
    one.shutdown();
    two.shutdown();
}

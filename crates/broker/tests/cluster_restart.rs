//! A cluster node's restart: before it serves, its member of the metadata group re-applies
//! every definitions change since the group's last snapshot (up to 4,096). The log is the
//! record of those changes, so the definitions blob is written behind them, a few times in
//! all, not once per change: written once each (two fsyncs and a rename per change, the
//! whole blob each time), they kept a restarted node of the 60-minute Jepsen-style run from
//! answering for over a minute.
//!
//! One node, a cluster of its own on a loopback port, its store on a disk that counts the
//! definitions blob's writes; it makes `CHANGES` changes, stops, and starts again on the same
//! directories.
//!
//! (Re-applying a change that changes nothing writes nothing either way; the changes here are
//! vhosts made and deleted again, which the blob written at the stop names none of.)

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use warren_broker::definition_op::DefinitionOp;
use warren_broker::quorum::cluster::{node_id, ClusterNode};
use warren_broker::quorum::{join, QuorumHost};
use warren_broker::Broker;
use warren_quorum::node::DEFAULT_SNAPSHOT_EVERY_LOGS;
use warren_quorum::tcp::{TcpTransport, TcpTransportConfig};
use warren_store::{Backend, BackendFile, FsBackend, Store, StoreOptions};

const NAME: &str = "n1@127.0.0.1";
const SECRET: &[u8] = b"cluster-restart-test-secret";
/// Changes made before the restart: far more than a restart may write the blob, far fewer
/// than a metadata snapshot takes (so the restart re-applies every one of them).
const CHANGES: u64 = 300;

/// The store's disk, counting the writes of the definitions blob (each ends in a rename onto
/// its file).
struct CountingDisk {
    inner: FsBackend,
    definitions_writes: AtomicU64,
}

impl Backend for CountingDisk {
    fn open(&self, path: &str, create: bool) -> io::Result<Arc<dyn BackendFile>> {
        self.inner.open(path, create)
    }
    fn create_dir_all(&self, dir: &str) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn remove(&self, path: &str) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        if to.contains("definitions") {
            self.definitions_writes.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
}

struct Node {
    broker: Arc<Broker>,
    cluster: Arc<ClusterNode>,
    quorum: Arc<QuorumHost>,
    store: Store,
    disk: Arc<CountingDisk>,
}

/// Starts the node on `dir` as `server` does (store, quorum host over the transport,
/// recovery, then the join), with a peer list naming only itself; returns once it is a
/// voter of its metadata group.
async fn boot(dir: &Path, port: u16) -> Node {
    let disk = Arc::new(CountingDisk {
        inner: FsBackend::new(dir.join("store")),
        definitions_writes: AtomicU64::new(0),
    });
    let backend: Arc<dyn Backend> = disk.clone();
    let (store, recovered) = Store::open_with_backend(backend, StoreOptions::default()).unwrap();
    let broker = Broker::new(1 << 30, Some(store.clone()));
    broker.name_node(NAME);
    let listen: SocketAddr = (Ipv4Addr::LOCALHOST, port).into();
    let transport = TcpTransport::bind(TcpTransportConfig {
        name: NAME.into(),
        ..TcpTransportConfig::new(node_id(NAME), listen, SECRET)
    })
    .await
    .unwrap();
    let advertised = format!("127.0.0.1:{}", transport.local_addr().port());
    let quorum = QuorumHost::open_cluster(
        &dir.join("quorum"),
        node_id(NAME),
        transport.clone(),
        DEFAULT_SNAPSHOT_EVERY_LOGS,
    )
    .unwrap();
    join::spawn_failover(&quorum, &transport);
    broker.enable_quorum(quorum.clone());
    if broker.recover(recovered) {
        broker.seed_defaults("guest", "guest", "/").unwrap();
    }
    let cluster = join::join(
        &broker,
        &quorum,
        transport,
        NAME,
        &advertised,
        vec![advertised.clone()],
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(30), cluster.membership())
        .await
        .expect("the node forms a cluster of its own");
    Node {
        broker,
        cluster,
        quorum,
        store,
        disk,
    }
}

async fn stop(node: Node) {
    node.cluster.shutdown().await;
    node.quorum.shutdown().await;
    node.broker.flush_definitions();
    node.store.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_replays_the_metadata_log_without_a_definitions_write_per_change() {
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let probe = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        probe.local_addr().unwrap().port()
    };
    let node = boot(dir.path(), port).await;
    // Vhosts made and deleted (as an application's tests or a definitions workload do): the
    // blob written at the end names none of them, so re-applying each change changes the
    // node's state again.
    for i in 0..CHANGES / 2 {
        let name = format!("vhost-{i}");
        for op in [
            DefinitionOp::VhostAdd {
                name: name.clone(),
                grant_full_to: None,
            },
            DefinitionOp::VhostDelete { name },
        ] {
            node.broker.change(op).result().await.unwrap();
        }
    }
    let kept = DefinitionOp::VhostAdd {
        name: "kept".into(),
        grant_full_to: None,
    };
    node.broker.change(kept).result().await.unwrap();
    stop(node).await;

    let node = boot(dir.path(), port).await;
    let writes = node.disk.definitions_writes.load(Ordering::Relaxed);
    assert!(
        node.broker.vhost("kept").is_some() && node.broker.vhost("vhost-0").is_none(),
        "the restarted node has every change"
    );
    assert!(
        writes < 20,
        "re-applying {CHANGES} changes wrote the definitions blob {writes} times"
    );
    stop(node).await;
}

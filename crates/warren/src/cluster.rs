//! `warren server --cluster-port`: the node's cluster transport (authenticated with the shared
//! secret file), its quorum host over that transport, the failure detector's failover loop,
//! and its member of the cluster's metadata group, which forms or joins the cluster.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use warren_broker::quorum::cluster::{node_id, ClusterNode};
use warren_broker::quorum::QuorumHost;
use warren_broker::replication::metadata_group::{BrokerMetadata, ClusterReplicator};
use warren_broker::Broker;
use warren_quorum::failover::{FailoverDriver, FailoverOptions};
use warren_quorum::tcp::{TcpTransport, TcpTransportConfig};

use crate::ServerArgs;

/// Bytes of a generated secret (hex-encoded in the file).
const GENERATED_SECRET_BYTES: usize = 32;

/// Reads the cluster secret, generating `<data-dir>/.cluster-secret` on first boot when no
/// file is configured.
fn secret(args: &ServerArgs) -> anyhow::Result<Vec<u8>> {
    if let Some(path) = &args.cluster_secret_file {
        let secret = std::fs::read(path)
            .with_context(|| format!("reading the cluster secret file {}", path.display()))?;
        let secret = secret.trim_ascii().to_vec();
        anyhow::ensure!(
            !secret.is_empty(),
            "the cluster secret file {} is empty",
            path.display()
        );
        return Ok(secret);
    }
    let path = args.data_dir.join(".cluster-secret");
    if let Ok(secret) = std::fs::read(&path) {
        let secret = secret.trim_ascii().to_vec();
        if !secret.is_empty() {
            return Ok(secret);
        }
    }
    let mut bytes = [0u8; GENERATED_SECRET_BYTES];
    getrandom(&mut bytes)?;
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_private(&path, secret.as_bytes())?;
    tracing::warn!(
        file = %path.display(),
        "generated a cluster secret: copy this file to every node of the cluster (or pass \
         --cluster-secret-file); nodes with different secrets refuse each other"
    );
    Ok(secret.into_bytes())
}

fn getrandom(bytes: &mut [u8]) -> anyhow::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(bytes))
        .context("reading random bytes for the cluster secret")
}

/// Writes a file only its owner can read (as RabbitMQ requires of the cookie).
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating the cluster secret file {}", path.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

/// The cluster side of a node before it joins: its transport, and its quorum host over it.
pub struct OpenCluster {
    pub quorum: Arc<QuorumHost>,
    transport: Arc<TcpTransport>,
    name: String,
    advertised: String,
}

/// Opens the cluster side of the node: the cluster port (authenticated with the shared
/// secret), the quorum host over it and the failure detector's failover loop. The node joins
/// the cluster with [`join`] once its own definitions are back from the store.
pub async fn open(
    args: &ServerArgs,
    broker: &Arc<Broker>,
    quorum_dir: &Path,
    port: u16,
) -> anyhow::Result<OpenCluster> {
    let name = broker.node_name().to_owned();
    let id = node_id(&name);
    let secret = secret(args)?;
    // Dual-stack where the machine has IPv6, IPv4 only where it has not.
    let any_v6: SocketAddr = (std::net::Ipv6Addr::UNSPECIFIED, port).into();
    let any_v4: SocketAddr = (std::net::Ipv4Addr::UNSPECIFIED, port).into();
    let transport =
        match TcpTransport::bind(TcpTransportConfig::new(id, any_v6, secret.clone())).await {
            Ok(transport) => transport,
            Err(_) => TcpTransport::bind(TcpTransportConfig::new(id, any_v4, secret))
                .await
                .with_context(|| format!("binding the cluster port {port}"))?,
        };
    let port = transport.local_addr().port();
    let advertised = match &args.cluster_advertise {
        Some(addr) => addr.clone(),
        None => {
            let host = name
                .split_once('@')
                .map(|(_, host)| host.to_owned())
                .unwrap_or_else(|| {
                    warren_broker::broker::default_node_name()
                        .split_once('@')
                        .map(|(_, host)| host.to_owned())
                        .unwrap_or_else(|| "localhost".into())
                });
            format!("{host}:{port}")
        }
    };
    let quorum = QuorumHost::open_cluster(quorum_dir, id, transport.clone())
        .with_context(|| format!("opening the quorum queue log in {}", quorum_dir.display()))?;
    tokio::spawn(
        FailoverDriver::new(
            id,
            quorum.node().registry(),
            transport.liveness().clone(),
            FailoverOptions::default(),
        )
        .run(),
    );
    Ok(OpenCluster {
        quorum,
        transport,
        name,
        advertised,
    })
}

/// Starts the node's member of the metadata group, whose machine is the broker's
/// definitions, and makes every definitions change go through it from now on; the node
/// forms or joins the cluster in the background.
pub async fn join(
    args: &ServerArgs,
    broker: &Arc<Broker>,
    open: OpenCluster,
) -> anyhow::Result<Arc<ClusterNode>> {
    let OpenCluster {
        quorum,
        transport,
        name,
        advertised,
    } = open;
    let cluster = ClusterNode::start(
        &quorum,
        &name,
        &advertised,
        transport,
        BrokerMetadata::new(broker),
        args.cluster_peers.clone(),
    )
    .await
    .map_err(anyhow::Error::msg)
    .context("starting the metadata group")?;
    broker.enable_cluster(cluster.clone());
    broker.set_replicator(ClusterReplicator::new(cluster.clone()));
    tracing::info!(
        node = %name,
        node_id = node_id(&name),
        %advertised,
        peers = ?args.cluster_peers,
        "cluster port open; forming or joining the cluster"
    );
    Ok(cluster)
}

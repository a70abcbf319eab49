//! `warren server --cluster-port`: the node's cluster transport (authenticated with the shared
//! secret file), its quorum host over that transport, the failure detector's failover loop,
//! and its member of the cluster's metadata group, which forms or joins the cluster.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use warren_broker::quorum::cluster::{node_id, AppliedOps, ClusterNode};
use warren_broker::quorum::QuorumHost;
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

/// Starts the cluster side of the node: returns the quorum host (over the cluster transport)
/// and the node's cluster membership, registered with the broker.
pub async fn start(
    args: &ServerArgs,
    broker: &Arc<Broker>,
    quorum_dir: &Path,
    port: u16,
) -> anyhow::Result<(Arc<QuorumHost>, Arc<ClusterNode>)> {
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
    let cluster = ClusterNode::start(
        &quorum,
        &name,
        &advertised,
        transport,
        Arc::new(AppliedOps::default()),
        args.cluster_peers.clone(),
    )
    .await
    .map_err(anyhow::Error::msg)
    .context("starting the metadata group")?;
    broker.enable_cluster(cluster.clone());
    tracing::info!(
        node = %name,
        node_id = id,
        %advertised,
        peers = ?args.cluster_peers,
        "cluster port open; forming or joining the cluster"
    );
    Ok((quorum, cluster))
}

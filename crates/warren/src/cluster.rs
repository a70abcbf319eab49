//! `warren server --cluster-port`: the node's cluster transport (authenticated with the shared
//! secret file, and TLS when configured), its quorum host over that transport, the failure detector's failover loop,
//! and its member of the cluster's metadata group, which forms or joins the cluster.

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warren_broker::quorum::cluster::{load_or_create_incarnation, node_id, ClusterNode};
use warren_broker::quorum::QuorumHost;
use warren_broker::Broker;
use warren_quorum::tcp::{ClusterTls, TcpTransport, TcpTransportConfig};

use crate::ServerArgs;

/// Bytes of a generated secret (hex-encoded in the file).
const GENERATED_SECRET_BYTES: usize = 32;

/// The default secret's file name in the user's home directory (Erlang's `~/.erlang.cookie`).
const HOME_SECRET_FILE: &str = ".warren-cluster-secret";

/// The cluster secret, from the first of:
/// 1. `--cluster-secret-file`;
/// 2. `<data-dir>/.cluster-secret`, where earlier versions generated it (kept, so an upgraded
///    node stays in its cluster);
/// 3. `~/.warren-cluster-secret`, generated (0600) by the first node of this user that needs
///    it, so every node one user starts on one machine shares it, as Erlang nodes share
///    `~/.erlang.cookie`. Without a home directory: `<data-dir>/.cluster-secret`, generated.
fn secret(args: &ServerArgs) -> anyhow::Result<Vec<u8>> {
    if let Some(path) = &args.cluster_secret_file {
        return read_secret(path)?
            .with_context(|| format!("the cluster secret file {} is empty", path.display()));
    }
    let in_data_dir = args.data_dir.join(".cluster-secret");
    if let Ok(Some(secret)) = read_secret(&in_data_dir) {
        return Ok(secret);
    }
    let home = std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(PathBuf::from)
        .filter(|home| home.is_dir());
    let path = match home {
        Some(home) => home.join(HOME_SECRET_FILE),
        None => in_data_dir,
    };
    if let Some(secret) = read_private_secret(&path)? {
        return Ok(secret);
    }
    let mut bytes = [0u8; GENERATED_SECRET_BYTES];
    getrandom(&mut bytes)?;
    let generated: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    if write_private(&path, generated.as_bytes())? {
        tracing::warn!(
            file = %path.display(),
            "generated a cluster secret: nodes of this user on this machine share it; copy it \
             to every other machine's node (or pass --cluster-secret-file): nodes with \
             different secrets refuse each other"
        );
    }
    // Another node may have written it first: its secret is the one to share.
    read_private_secret(&path)?
        .with_context(|| format!("the cluster secret file {} is empty", path.display()))
}

/// The trimmed contents of a secret file; None when it does not exist or holds nothing.
fn read_secret(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(secret) => {
            let secret = secret.trim_ascii().to_vec();
            Ok((!secret.is_empty()).then_some(secret))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => {
            Err(e).with_context(|| format!("reading the cluster secret file {}", path.display()))
        }
    }
}

/// [`read_secret`] of a generated secret file, which only its owner may read (Erlang refuses a
/// cookie others can read; so does this).
fn read_private_secret(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        anyhow::ensure!(
            meta.permissions().mode() & 0o077 == 0,
            "the cluster secret file {} must be readable by its owner only (chmod 600 it)",
            path.display()
        );
    }
    read_secret(path)
}

fn getrandom(bytes: &mut [u8]) -> anyhow::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(bytes))
        .context("reading random bytes for the cluster secret")
}

/// Writes a file only its owner can read (as Erlang requires of the cookie), whole or not at
/// all: written aside, then linked into place, so nodes starting together never read a half
/// written secret. False when the file already existed (another node wrote it first).
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<bool> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let aside = path.with_extension(format!("{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&aside)
        .with_context(|| format!("creating the cluster secret file {}", aside.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    let linked = std::fs::hard_link(&aside, path);
    let _ = std::fs::remove_file(&aside);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => {
            Err(e).with_context(|| format!("creating the cluster secret file {}", path.display()))
        }
    }
}

/// Mutual TLS between nodes, when a certificate is configured: each node accepts and dials
/// with the same certificate, and checks its peers' against the CA and the cluster's name.
fn cluster_tls(args: &ServerArgs) -> anyhow::Result<Option<ClusterTls>> {
    let Some(cert_file) = args.cluster_tls_cert_file.clone() else {
        let stray = [
            (
                "--cluster-tls-key-file",
                args.cluster_tls_key_file.is_some(),
            ),
            ("--cluster-tls-ca-file", args.cluster_tls_ca_file.is_some()),
            (
                "--cluster-tls-server-name",
                args.cluster_tls_server_name.is_some(),
            ),
        ];
        if let Some((flag, _)) = stray.iter().find(|(_, set)| *set) {
            anyhow::bail!("{flag} needs --cluster-tls-cert-file");
        }
        return Ok(None);
    };
    let need = |flag: &str| format!("--cluster-tls-cert-file needs {flag}");
    let key_file = args
        .cluster_tls_key_file
        .clone()
        .with_context(|| need("--cluster-tls-key-file"))?;
    let ca_file = args
        .cluster_tls_ca_file
        .clone()
        .with_context(|| need("--cluster-tls-ca-file"))?;
    let server_name = args
        .cluster_tls_server_name
        .clone()
        .with_context(|| need("--cluster-tls-server-name"))?;
    let server = warren_listener::tls::server_config(&warren_listener::tls::TlsOptions {
        cert_file: cert_file.clone(),
        key_file: key_file.clone(),
        ca_file: Some(ca_file.clone()),
        verify_peer: true,
        fail_if_no_peer_cert: true,
    })
    .map_err(anyhow::Error::msg)
    .context("cluster TLS")?;
    let pem = |path: &Path| {
        CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("cluster TLS: reading certificates from {}", path.display()))
    };
    let mut roots = rustls::RootCertStore::empty();
    for ca in pem(&ca_file)? {
        roots
            .add(ca)
            .with_context(|| format!("cluster TLS: a CA certificate in {}", ca_file.display()))?;
    }
    let key = PrivateKeyDer::from_pem_file(&key_file)
        .with_context(|| format!("cluster TLS: reading the key {}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cluster TLS: protocol versions")?
        .with_root_certificates(roots)
        .with_client_auth_cert(pem(&cert_file)?, key)
        .context("cluster TLS: the certificate and key")?;
    Ok(Some(ClusterTls {
        acceptor: tokio_rustls::TlsAcceptor::from(server),
        connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        server_name: ServerName::try_from(server_name.clone())
            .with_context(|| format!("--cluster-tls-server-name {server_name}: not a name"))?,
    }))
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
    let tls = cluster_tls(args)?;
    // Dual-stack where the machine has IPv6, IPv4 only where it has not.
    let any_v6: SocketAddr = (std::net::Ipv6Addr::UNSPECIFIED, port).into();
    let any_v4: SocketAddr = (std::net::Ipv4Addr::UNSPECIFIED, port).into();
    let incarnation = load_or_create_incarnation(quorum_dir).with_context(|| {
        format!(
            "reading or creating this node's incarnation in {}",
            quorum_dir.display()
        )
    })?;
    let config = |listen| TcpTransportConfig {
        tls: tls.clone(),
        incarnation,
        name: name.clone(),
        ..TcpTransportConfig::new(id, listen, secret.clone())
    };
    let transport = match TcpTransport::bind(config(any_v6)).await {
        Ok(transport) => transport,
        Err(_) => TcpTransport::bind(config(any_v4))
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
    let quorum =
        QuorumHost::open_cluster(quorum_dir, id, transport.clone(), args.raft_snapshot_every)
            .with_context(|| format!("opening the quorum queue log in {}", quorum_dir.display()))?;
    warren_broker::quorum::join::spawn_failover(&quorum, &transport);
    Ok(OpenCluster {
        quorum,
        transport,
        name,
        advertised,
    })
}

/// Makes the node a member of the cluster (`warren_broker::quorum::join`): its member of the
/// metadata group, whose machine is the broker's definitions; the node forms or joins the
/// cluster in the background.
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
    warren_broker::quorum::join::join(
        broker,
        &quorum,
        transport,
        &name,
        &advertised,
        args.cluster_peers.clone(),
    )
    .await
    .map_err(anyhow::Error::msg)
    .context("starting the metadata group")
}

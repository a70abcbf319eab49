//! The `warren` binary: parses the command line and hands off to the crates that do the work
//! (`warren server` → warren-server, `warren perf` → warren-perf, `warren ctl` → warren-ctl).

mod allocator;
mod boot_definitions;
mod cluster;
mod config_file;

use anyhow::Context;
use boot_definitions::BootDefinitions;
use clap::{Args, CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use warren_listener::http_listener::HttpListener;
use warren_management::ListenerInfo;
use warren_server::ServerConfig;

#[derive(Parser)]
#[command(
    name = "warren",
    version,
    about = "An AMQP 0-9-1 message broker compatible with RabbitMQ clients"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    // Boxed: its flags make this variant far larger than the others.
    Server(Box<ServerArgs>),
    /// Load-test any AMQP broker with PerfTest's flags, or run a seed scenario
    /// (`warren perf scenario --help`).
    #[command(disable_help_flag = true)]
    Perf {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Administer a running broker over its HTTP API with rabbitmqctl's commands
    /// (`warren ctl --help`).
    #[command(disable_help_flag = true)]
    Ctl {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Write the man pages (`warren.1`, `warren-server.1`, …) into DIR (packaging:
    /// crates/cli-docs).
    #[command(hide = true)]
    GenerateManpage { dir: PathBuf },
    /// Print the completion script of SHELL (bash, zsh, fish, …) (packaging).
    #[command(hide = true)]
    GenerateCompletions { shell: warren_cli_docs::Shell },
}

#[derive(Args)]
struct ServerArgs {
    /// A TOML file setting any of these flags by their long names (`amqp-port = 5672`);
    /// environment variables and flags override it. See docs/CONFIGURATION.md.
    #[arg(long, env = config_file::CONFIG_ENV)]
    config: Option<PathBuf>,
    /// Address to listen on for AMQP and AMQPS (`::` is dual-stack: IPv6 and IPv4).
    #[arg(long, env = "WARREN_BIND", default_value = "::")]
    bind: String,
    /// AMQP port.
    #[arg(long, env = "WARREN_AMQP_PORT", default_value_t = 5672)]
    amqp_port: u16,
    /// HTTP API port (RabbitMQ's management API), on the same address; 0 disables it.
    #[arg(long, env = "WARREN_MANAGEMENT_PORT", default_value_t = 15672)]
    management_port: u16,
    /// Prometheus metrics port (/metrics, /metrics/per-object), as RabbitMQ's
    /// rabbitmq_prometheus plugin, on the same address; 0 disables it.
    #[arg(long, env = "WARREN_PROMETHEUS_PORT", default_value_t = 15692)]
    prometheus_port: u16,
    /// Where the broker keeps its data.
    #[arg(long, env = "WARREN_DATA_DIR", default_value = "./warren-data")]
    data_dir: PathBuf,
    /// Largest frame offered in connection.tune.
    #[arg(long, env = "WARREN_FRAME_MAX", default_value_t = 131_072)]
    frame_max: u32,
    /// Highest channel number offered in connection.tune (0: no limit); changeable at
    /// runtime through PUT /api/nodes/NODE/channel-max.
    #[arg(long, env = "WARREN_CHANNEL_MAX", default_value_t = 2047)]
    channel_max: u16,
    /// Heartbeat interval offered in connection.tune, in seconds (0 disables).
    #[arg(long, env = "WARREN_HEARTBEAT_S", default_value_t = 60)]
    heartbeat_s: u16,
    /// Largest message body accepted, in bytes.
    #[arg(long, env = "WARREN_MAX_MESSAGE_SIZE_BYTES", default_value_t = 128 * 1024 * 1024)]
    max_message_size_bytes: u64,
    /// Memory use (the process's RSS, or bytes held in queues) above which publishing
    /// connections are blocked (default: 40% of RAM, as RabbitMQ's vm_memory_high_watermark).
    #[arg(long, env = "WARREN_MEMORY_HIGH_WATERMARK_BYTES")]
    memory_high_watermark_bytes: Option<usize>,
    /// `always`: a publisher confirm for a persistent message means it was fsync'd (group
    /// commit). `never`: no fsync — confirmed messages survive a broker crash but NOT a power
    /// loss or kernel crash; speed over safety, for those who choose it.
    #[arg(long, env = "WARREN_SYNC", value_enum, default_value_t = SyncMode::Always)]
    sync: SyncMode,
    /// Free disk space below which publishers are blocked (RabbitMQ's disk_free_limit).
    #[arg(long, env = "WARREN_DISK_FREE_LIMIT_BYTES", default_value_t = warren_broker::disk::DEFAULT_DISK_FREE_LIMIT_BYTES)]
    disk_free_limit_bytes: u64,
    /// A server property sent to clients in connection.start, as KEY=VALUE (repeatable;
    /// replaces Warren's own product, version, platform…, as RabbitMQ's server_properties).
    #[arg(
        long = "server-property",
        env = "WARREN_SERVER_PROPERTIES",
        value_delimiter = ','
    )]
    server_properties: Vec<String>,
    /// Extra users as NAME:PASSWORD, (re)created at every boot with the administrator tag
    /// and full permissions on the default vhost (a shortcut; users and permissions are
    /// otherwise managed at run time and kept in the data directory).
    #[arg(long = "user", env = "WARREN_USERS", value_delimiter = ',')]
    users: Vec<String>,
    /// A RabbitMQ definitions file (JSON, as `GET /api/definitions` exports it) to import at
    /// boot, after recovery and before clients are accepted (RabbitMQ's load_definitions).
    #[arg(long, env = "WARREN_LOAD_DEFINITIONS")]
    load_definitions: Option<PathBuf>,
    /// The user a first boot creates (tag administrator, full permissions on the default
    /// vhost), as RabbitMQ's default_user. Only `guest` is limited to loopback connections.
    #[arg(long, env = "WARREN_DEFAULT_USER", default_value = "guest")]
    default_user: String,
    /// That user's password, as RabbitMQ's default_pass.
    #[arg(long, env = "WARREN_DEFAULT_PASS", default_value = "guest")]
    default_pass: String,
    /// The vhost a first boot creates, as RabbitMQ's default_vhost.
    #[arg(long, env = "WARREN_DEFAULT_VHOST", default_value = "/")]
    default_vhost: String,
    /// AMQPS (AMQP over TLS) port, listening only when --tls-cert-file is set (0 disables).
    #[arg(long, env = "WARREN_AMQPS_PORT", default_value_t = 5671)]
    amqps_port: u16,
    /// HTTPS port of the HTTP API (RabbitMQ's management.ssl.port), listening only when
    /// --tls-cert-file is set, with the same certificate and client verification as AMQPS
    /// (0 disables).
    #[arg(long, env = "WARREN_MANAGEMENT_TLS_PORT", default_value_t = 15671)]
    management_tls_port: u16,
    /// HTTPS port of the Prometheus endpoint (RabbitMQ's prometheus.ssl.port), listening
    /// only when --tls-cert-file is set, as --management-tls-port (0 disables).
    #[arg(long, env = "WARREN_PROMETHEUS_TLS_PORT", default_value_t = 15691)]
    prometheus_tls_port: u16,
    /// PEM certificate chain of the server, its own certificate first (ssl_options.certfile).
    #[arg(long, env = "WARREN_TLS_CERT_FILE")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of the certificate (ssl_options.keyfile).
    #[arg(long, env = "WARREN_TLS_KEY_FILE")]
    tls_key_file: Option<PathBuf>,
    /// PEM CA certificates client certificates are verified against (ssl_options.cacertfile).
    #[arg(long, env = "WARREN_TLS_CA_FILE")]
    tls_ca_file: Option<PathBuf>,
    /// Offer SASL ANONYMOUS to AMQP 1.0 clients, logging them in as this user (RabbitMQ's
    /// anonymous_login_user; off unless set).
    #[arg(long, env = "WARREN_AMQP10_ANONYMOUS_USER")]
    amqp10_anonymous_user: Option<String>,
    /// Ask TLS clients for a certificate and verify it (ssl_options.verify = verify_peer);
    /// a verified certificate can log in with SASL EXTERNAL.
    #[arg(long, env = "WARREN_TLS_VERIFY_PEER")]
    tls_verify_peer: bool,
    /// With --tls-verify-peer: refuse TLS clients without a certificate
    /// (ssl_options.fail_if_no_peer_cert).
    #[arg(long, env = "WARREN_TLS_FAIL_IF_NO_PEER_CERT")]
    tls_fail_if_no_peer_cert: bool,
    /// The part of a client certificate that names the user for EXTERNAL
    /// (RabbitMQ's ssl_cert_login_from).
    #[arg(
        long,
        env = "WARREN_TLS_CERT_LOGIN_FROM",
        value_enum,
        default_value_t = CertLoginFrom::DistinguishedName
    )]
    tls_cert_login_from: CertLoginFrom,
    /// This node's name (RabbitMQ's `rabbit@host`); also what its cluster id derives from.
    /// Default `warren@HOSTNAME`.
    #[arg(long, env = "WARREN_NODE_NAME")]
    node_name: Option<String>,
    /// The inter-node (cluster) port. Absent: a single node. Present: this node forms or joins
    /// a cluster with --cluster-peers, its definitions log replicated through the cluster's
    /// metadata Raft group.
    #[arg(long, env = "WARREN_CLUSTER_PORT")]
    cluster_port: Option<u16>,
    /// The cluster's nodes' addresses, HOST:PORT (comma-separated). Nodes started with each
    /// other's addresses form one cluster; the list may name this node too, so that every
    /// node can be given the same list.
    #[arg(long, env = "WARREN_CLUSTER_PEERS", value_delimiter = ',')]
    cluster_peers: Vec<String>,
    /// The address other nodes reach this node's cluster port at, HOST:PORT (default: the host
    /// part of --node-name, else this machine's hostname, with --cluster-port).
    #[arg(long, env = "WARREN_CLUSTER_ADVERTISE")]
    cluster_advertise: Option<String>,
    /// The file holding the cluster's shared secret (RabbitMQ's .erlang.cookie); every node
    /// needs the same. Default `~/.warren-cluster-secret` (0600), generated by the first node
    /// that needs it, so one user's nodes on one machine share it; a `<data-dir>/.cluster-secret`
    /// left by an earlier version is still used.
    #[arg(long, env = "WARREN_CLUSTER_SECRET_FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// TLS between nodes (mutual): this node's PEM certificate chain, presented both when
    /// accepting and when dialing, so it needs the serverAuth and clientAuth key usages.
    #[arg(long, env = "WARREN_CLUSTER_TLS_CERT_FILE")]
    cluster_tls_cert_file: Option<PathBuf>,
    /// Its private key.
    #[arg(long, env = "WARREN_CLUSTER_TLS_KEY_FILE")]
    cluster_tls_key_file: Option<PathBuf>,
    /// The CA every node's certificate must chain to.
    #[arg(long, env = "WARREN_CLUSTER_TLS_CA_FILE")]
    cluster_tls_ca_file: Option<PathBuf>,
    /// The name every node's certificate must carry (a DNS name or IP address in its
    /// subjectAltName); peers are checked against it rather than their address.
    #[arg(long, env = "WARREN_CLUSTER_TLS_SERVER_NAME")]
    cluster_tls_server_name: Option<String>,
    /// Raft log entries between two snapshots of each Raft group of a cluster node (the
    /// metadata group and quorum queues); a lagging or new member further behind than the
    /// log kept catches up by a snapshot install. Small values are for tests of that path.
    #[arg(long, env = "WARREN_RAFT_SNAPSHOT_EVERY", default_value_t = warren_quorum::node::DEFAULT_SNAPSHOT_EVERY_LOGS, value_parser = clap::value_parser!(u64).range(1..))]
    raft_snapshot_every: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CertLoginFrom {
    #[value(name = "distinguished_name")]
    DistinguishedName,
    #[value(name = "common_name")]
    CommonName,
}

impl ServerArgs {
    /// The TLS options, None when no certificate is configured; Err on a half-configured TLS.
    fn tls_options(&self) -> anyhow::Result<Option<warren_listener::tls::TlsOptions>> {
        let Some(cert_file) = self.tls_cert_file.clone() else {
            let stray = [
                ("--tls-key-file", self.tls_key_file.is_some()),
                ("--tls-ca-file", self.tls_ca_file.is_some()),
                ("--tls-verify-peer", self.tls_verify_peer),
                ("--tls-fail-if-no-peer-cert", self.tls_fail_if_no_peer_cert),
            ];
            if let Some((flag, _)) = stray.iter().find(|(_, set)| *set) {
                anyhow::bail!("{flag} needs --tls-cert-file");
            }
            return Ok(None);
        };
        let key_file = self
            .tls_key_file
            .clone()
            .context("--tls-cert-file needs --tls-key-file")?;
        Ok(Some(warren_listener::tls::TlsOptions {
            cert_file,
            key_file,
            ca_file: self.tls_ca_file.clone(),
            verify_peer: self.tls_verify_peer,
            fail_if_no_peer_cert: self.tls_fail_if_no_peer_cert,
        }))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SyncMode {
    Always,
    Never,
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn server(args: ServerArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating data directory {}", args.data_dir.display()))?;
    let mut config = ServerConfig {
        frame_max: args.frame_max.max(4096),
        heartbeat_s: args.heartbeat_s,
        max_message_size_bytes: args.max_message_size_bytes,
        handshake_timeout: Duration::from_secs(10),
        cert_login_from: match args.tls_cert_login_from {
            CertLoginFrom::DistinguishedName => {
                warren_listener::cert_name::CertLoginFrom::DistinguishedName
            }
            CertLoginFrom::CommonName => warren_listener::cert_name::CertLoginFrom::CommonName,
        },
        ..ServerConfig::default()
    };
    for property in &args.server_properties {
        let (key, value) = property
            .split_once('=')
            .with_context(|| format!("--server-property {property}: expected KEY=VALUE"))?;
        config
            .server_properties
            .push((key.to_owned(), value.to_owned()));
    }
    config.amqp10 = Arc::new(warren_amqp10::Amqp10Config {
        allow_anonymous: args.amqp10_anonymous_user.is_some(),
        anonymous_user: args.amqp10_anonymous_user.clone().unwrap_or_default(),
        loopback_users: config.loopback_users.clone(),
        max_frame_size: config.frame_max,
        max_message_size_bytes: config.max_message_size_bytes,
        handshake_timeout: config.handshake_timeout,
        idle_timeout: Duration::from_secs(config.heartbeat_s.into()),
        server_properties: config.server_properties.clone(),
    });
    // Certificate problems stop the broker before it touches the store. One configuration
    // serves every TLS listener (AMQPS, HTTPS for the API and Prometheus).
    let tls_ports = [
        args.amqps_port,
        args.management_tls_port,
        args.prometheus_tls_port,
    ];
    let tls_config = args
        .tls_options()?
        .filter(|_| tls_ports.iter().any(|&port| port != 0))
        .map(|options| warren_listener::tls::server_config(&options))
        .transpose()
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut extra_users = Vec::new();
    for user in &args.users {
        let (name, pass) = user
            .split_once(':')
            .with_context(|| format!("--user {user}: expected NAME:PASSWORD"))?;
        extra_users.push((name.to_owned(), pass.to_owned()));
    }
    let watermark = args
        .memory_high_watermark_bytes
        .or_else(|| warren_broker::memory::total_memory_bytes().map(|t| t / 10 * 4))
        .unwrap_or(1 << 30);
    let store_options = warren_store::StoreOptions {
        sync: match args.sync {
            SyncMode::Always => warren_store::SyncPolicy::Always,
            SyncMode::Never => warren_store::SyncPolicy::Never,
        },
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let (store, recovered) = warren_store::Store::open(&args.data_dir.join("store"), store_options)
        .with_context(|| format!("opening the message store in {}", args.data_dir.display()))?;
    let broker = warren_broker::Broker::new(watermark, Some(store.clone()));
    broker
        .channel_max
        .store(args.channel_max, std::sync::atomic::Ordering::Relaxed);
    // Quorum queues' Raft groups share one write-ahead log; open it before the definitions
    // come back, so each recovered quorum queue finds its group's log and snapshot.
    let quorum_dir = args.data_dir.join("quorum");
    if let Some(name) = &args.node_name {
        warren_broker::quorum::cluster::validate_name(name).map_err(anyhow::Error::msg)?;
        broker.name_node(name);
    }
    let open_cluster = match args.cluster_port {
        Some(port) => Some(cluster::open(&args, &broker, &quorum_dir, port).await?),
        None => None,
    };
    let quorum = match &open_cluster {
        Some(open) => open.quorum.clone(),
        None => warren_broker::quorum::QuorumHost::open(&quorum_dir)
            .with_context(|| format!("opening the quorum queue log in {}", quorum_dir.display()))?,
    };
    broker.enable_quorum(quorum.clone());
    let first_boot = broker.recover(recovered);
    // Every node seeds its defaults on a first boot, so it can be reached before it joins a
    // cluster; a cluster's log then carries the forming node's (below), which every member
    // applies.
    if first_boot {
        broker
            .seed_defaults(&args.default_user, &args.default_pass, &args.default_vhost)
            .map_err(anyhow::Error::msg)
            .context("creating the default user and vhost")?;
        tracing::info!(user = %args.default_user, vhost = %args.default_vhost, "first boot: created the default user and vhost");
    }
    let boot = BootDefinitions {
        seed: None,
        default_vhost: args.default_vhost.clone(),
        extra_users,
        load_definitions: args.load_definitions.clone(),
    };
    let cluster = match open_cluster {
        Some(open) => {
            let cluster = cluster::join(&args, &broker, open).await?;
            let (broker, waiting) = (broker.clone(), cluster.clone());
            let (seed_user, seed_pass) = (args.default_user.clone(), args.default_pass.clone());
            tokio::spawn(async move {
                let formed_here = waiting.membership().await;
                let boot = BootDefinitions {
                    seed: (first_boot && formed_here).then_some((seed_user, seed_pass)),
                    ..boot
                };
                if let Err(e) = boot.apply(&broker).await {
                    tracing::error!(error = %e, "boot-time definitions not applied");
                }
            });
            Some(cluster)
        }
        None => {
            boot.apply(&broker).await?;
            // A client's first declare-ok must count what a quorum queue held.
            broker
                .quorum_queues_recovered(std::time::Duration::from_secs(30))
                .await;
            None
        }
    };
    // A configured cluster name becomes the cluster's at every boot, so the HTTP API and the
    // metrics agree with what clients see in connection.start.
    if let Some((_, name)) = config
        .server_properties
        .iter()
        .rev()
        .find(|(key, _)| key == "cluster_name")
    {
        if broker.cluster_name() != *name {
            broker.set_cluster_name(name);
        }
    }
    broker.memory.spawn_sampler();
    let disk = warren_broker::DiskMonitor::new(
        &args.data_dir,
        args.disk_free_limit_bytes,
        broker.alarms.clone(),
    );
    disk.spawn();
    broker.set_disk_monitor(disk);
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "store opened"
    );
    let listener = warren_listener::bind_listener(&args.bind, args.amqp_port)
        .with_context(|| format!("binding AMQP listener on {}:{}", args.bind, args.amqp_port))?;
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        data_dir = %args.data_dir.display(),
        memory_high_watermark_bytes = watermark,
        disk_free_limit_bytes = args.disk_free_limit_bytes,
        "Warren {} listening for AMQP",
        env!("CARGO_PKG_VERSION")
    );
    let config = Arc::new(config);
    // One shutdown signal for every listener.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        notify_systemd(&[sd_notify::NotifyState::Stopping]);
        let _ = stop_tx.send(true);
    });
    // Every listener is bound before any serves, so that the API lists them all.
    let amqps_listener = match tls_config.is_some() && args.amqps_port != 0 {
        true => Some(
            warren_listener::bind_listener(&args.bind, args.amqps_port).with_context(|| {
                format!(
                    "binding AMQPS listener on {}:{}",
                    args.bind, args.amqps_port
                )
            })?,
        ),
        false => None,
    };
    let tls_http = tls_config.as_deref();
    let management_listeners = bind_http(
        &args,
        "HTTP API",
        args.management_port,
        args.management_tls_port,
        tls_http,
    )?;
    let prometheus_listeners = bind_http(
        &args,
        "Prometheus",
        args.prometheus_port,
        args.prometheus_tls_port,
        tls_http,
    )?;
    let mut listening = vec![ListenerInfo {
        protocol: "amqp",
        address: addr,
    }];
    if let Some(amqps) = &amqps_listener {
        listening.push(ListenerInfo {
            protocol: "amqp/ssl",
            address: amqps.local_addr()?,
        });
    }
    for prometheus in &prometheus_listeners {
        listening.push(ListenerInfo {
            protocol: match prometheus.is_tls() {
                true => "https/prometheus",
                false => "http/prometheus",
            },
            address: prometheus.local_addr()?,
        });
    }
    let amqps = match (amqps_listener, tls_config) {
        (Some(listener), Some(tls_config)) => {
            tracing::info!(addr = %listener.local_addr()?, "listening for AMQPS (AMQP over TLS)");
            Some((listener, tls_config))
        }
        _ => None,
    };
    let management = start_management(&args, &config, &broker, management_listeners, listening);
    let prometheus = start_prometheus(&broker, prometheus_listeners);
    // Recovered, definitions loaded, every listener bound (connections queue in the kernel
    // until served): a Type=notify unit (packaging/debian/warren.service) is started now.
    let status = format!("listening for AMQP on {addr}");
    notify_systemd(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&status),
    ]);
    let listeners = AmqpListeners {
        bind: args.bind.clone(),
        amqp: listener,
        amqps,
    };
    serve_amqp(listeners, &broker, &config, stop_rx).await;
    close_client_connections(&broker).await;
    for http in [prometheus, management].into_iter().flatten() {
        http.stop().await;
    }
    if let Some(cluster) = &cluster {
        cluster.shutdown().await;
    }
    quorum.shutdown().await;
    // A cluster node writes its definitions in the background: what is not written yet goes
    // now, before the store closes.
    broker.flush_definitions();
    let stats = store.stats();
    // Clients are gone: what each durable queue still holds and never delivered is known,
    // and a restart marks only the rest redelivered.
    if let Err(e) = store.close_clean(&broker.undelivered_in_store()) {
        tracing::warn!(error = %e, "closing the message store");
    }
    tracing::info!(
        records_written = stats.records_written,
        fsyncs = stats.fsyncs,
        "Warren stopped"
    );
    Ok(())
}

/// The AMQP listeners (0-9-1 and AMQP 1.0 share each port): plain and, with TLS, AMQPS.
struct AmqpListeners {
    /// The address they are bound on, to bind them again after stop_app.
    bind: String,
    amqp: tokio::net::TcpListener,
    amqps: Option<(tokio::net::TcpListener, Arc<rustls::ServerConfig>)>,
}

/// Where the AMQP listeners were bound: the ports they got (a port 0 keeps what it got).
struct AmqpPorts {
    bind: String,
    amqp: u16,
    amqps: Option<(u16, Arc<rustls::ServerConfig>)>,
}

impl AmqpListeners {
    fn ports(&self) -> std::io::Result<AmqpPorts> {
        Ok(AmqpPorts {
            bind: self.bind.clone(),
            amqp: self.amqp.local_addr()?.port(),
            amqps: match &self.amqps {
                Some((listener, tls)) => Some((listener.local_addr()?.port(), tls.clone())),
                None => None,
            },
        })
    }
}

impl AmqpPorts {
    /// Binds the same ports again (start_app).
    fn rebind(&self) -> std::io::Result<AmqpListeners> {
        let amqps = match &self.amqps {
            Some((port, tls)) => Some((
                warren_listener::bind_listener(&self.bind, *port)?,
                tls.clone(),
            )),
            None => None,
        };
        Ok(AmqpListeners {
            bind: self.bind.clone(),
            amqp: warren_listener::bind_listener(&self.bind, self.amqp)?,
            amqps,
        })
    }
}

/// Serves the AMQP listeners until the broker stops (`stop` turns true), through any number
/// of rabbitmqctl stop_app / start_app (`Broker::app`): a stop closes the listeners, so new
/// connections are refused, and tells every client 320 CONNECTION_FORCED; a start binds the
/// same ports again. Definitions and messages stay in the process meanwhile.
async fn serve_amqp(
    mut listeners: AmqpListeners,
    broker: &Arc<warren_broker::Broker>,
    config: &Arc<ServerConfig>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let wanted = broker.app.wanted();
    let stopping = || *stop.borrow();
    loop {
        let again = match listeners.ports() {
            Ok(ports) => Some(ports),
            Err(e) => {
                // Without its address a listener cannot come back: stop_app is refused.
                tracing::error!(error = %e, "the AMQP listener's address");
                None
            }
        };
        // Completes on the broker's stop or on stop_app.
        let until_paused = || {
            let (mut stop, mut wanted) = (stop.clone(), wanted.clone());
            let can_pause = again.is_some();
            async move {
                tokio::select! {
                    _ = stop.wait_for(|stop| *stop) => {}
                    _ = wanted.wait_for(|running| !*running), if can_pause => {}
                }
            }
        };
        let amqps = listeners.amqps.map(|(listener, tls)| {
            tokio::spawn(warren_server::run_tls(
                listener,
                tls,
                broker.clone(),
                config.clone(),
                until_paused(),
            ))
        });
        warren_server::run_shared(
            listeners.amqp,
            broker.clone(),
            config.clone(),
            until_paused(),
        )
        .await;
        if let Some(amqps) = amqps {
            let _ = amqps.await;
        }
        let Some(again) = again.filter(|_| !stopping()) else {
            return;
        };
        close_client_connections(broker).await;
        broker.app.reached(false);
        tracing::info!("AMQP stopped (stop_app): listeners closed, clients disconnected");
        listeners = loop {
            let mut wanted = wanted.clone();
            let mut stop = stop.clone();
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => return,
                _ = wanted.wait_for(|running| *running) => {}
            }
            match again.rebind() {
                Ok(listeners) => break listeners,
                Err(e) => {
                    // The port taken meanwhile by another process: keep trying, as the
                    // operator's start_app waits (and says so when it gives up).
                    tracing::error!(error = %e, "start_app: binding the AMQP listeners");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        broker.app.reached(true);
        tracing::info!("AMQP started again (start_app)");
    }
}

/// Tells systemd the broker's state when it runs as a Type=notify service (`NOTIFY_SOCKET` is
/// set); otherwise does nothing.
fn notify_systemd(states: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "could not notify systemd");
    }
}

/// What a client is told when the broker stops (RabbitMQ's words for an application stop).
const SHUTDOWN_REASON: &str = "broker forced connection closure with reason 'shutdown'";

/// How long a stopping broker waits for its clients to answer connection.close.
const SHUTDOWN_CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Tells every client the broker is stopping (connection.close 320 CONNECTION_FORCED, as
/// RabbitMQ does) and waits a little for them to go: a client can tell a shutdown from a
/// crash, and what its connections held is back in its queues before the store closes.
async fn close_client_connections(broker: &warren_broker::Broker) {
    let asked = broker.registry.close_all(SHUTDOWN_REASON);
    if asked == 0 {
        return;
    }
    tracing::info!(connections = asked, "closing client connections");
    let deadline = tokio::time::Instant::now() + SHUTDOWN_CLOSE_WAIT;
    while !broker.registry.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An HTTP endpoint (the API, Prometheus) served on its own task until `stop`.
struct HttpTask {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpTask {
    /// Stops accepting and lets requests in flight finish, for at most a second: a client
    /// holding a keep-alive connection open (a Prometheus server does) must not hold up
    /// the broker's shutdown.
    async fn stop(self) {
        let _ = self.stop.send(());
        let abort = self.task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(1), self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

/// Completes when an `HttpTask` is stopped.
type Stopped = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The listeners of an HTTP endpoint on the AMQP listener's address: plain HTTP on `port`
/// and HTTPS on `tls_port` (only with a TLS configuration), each unless its port is 0.
fn bind_http(
    args: &ServerArgs,
    what: &'static str,
    port: u16,
    tls_port: u16,
    tls: Option<&rustls::ServerConfig>,
) -> anyhow::Result<Vec<HttpListener>> {
    let bind = |port: u16, scheme: &str| {
        warren_listener::bind_listener(&args.bind, port).with_context(|| {
            format!(
                "binding the {what} {scheme} listener on {}:{port}",
                args.bind
            )
        })
    };
    let mut listeners = Vec::new();
    if port != 0 {
        let tcp = bind(port, "HTTP")?;
        tracing::info!(addr = %tcp.local_addr()?, "{what} listening");
        listeners.push(HttpListener::plain(tcp));
    }
    if let Some(tls) = tls.filter(|_| tls_port != 0) {
        let tcp = bind(tls_port, "HTTPS")?;
        tracing::info!(addr = %tcp.local_addr()?, "{what} listening for HTTPS");
        listeners.push(HttpListener::tls(tcp, tls));
    }
    Ok(listeners)
}

/// Runs `serve` on `listeners` in a task of its own, with a future that completes when the
/// task is stopped; None when there is no listener (every port 0).
fn start_http<Serve, Served>(
    listeners: Vec<HttpListener>,
    what: &'static str,
    serve: Serve,
) -> Option<HttpTask>
where
    Serve: FnOnce(Vec<HttpListener>, Stopped) -> Served,
    Served: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    if listeners.is_empty() {
        return None;
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = serve(
        listeners,
        Box::pin(async move {
            let _ = stopped.await;
        }),
    );
    let task = tokio::spawn(async move {
        if let Err(e) = served.await {
            tracing::error!(error = %e, "{what} stopped");
        }
    });
    Some(HttpTask { stop, task })
}

/// Starts the HTTP API beside the AMQP listener on `listeners`; `listening` are the
/// node's other listeners, for /api/overview.
fn start_management(
    args: &ServerArgs,
    config: &ServerConfig,
    broker: &Arc<warren_broker::Broker>,
    listeners: Vec<HttpListener>,
    listening: Vec<ListenerInfo>,
) -> Option<HttpTask> {
    let management = warren_management::ManagementConfig {
        node_name: broker.node_name().to_owned(),
        loopback_users: config.loopback_users.clone(),
        listeners: listening,
        data_dir: Some(args.data_dir.clone()),
        disk_free_limit_bytes: args.disk_free_limit_bytes,
    };
    let broker = broker.clone();
    start_http(listeners, "HTTP API", |listeners, stopped| {
        warren_management::run(listeners, broker, management, stopped)
    })
}

/// Starts the Prometheus endpoint (/metrics) on `listeners`.
fn start_prometheus(
    broker: &Arc<warren_broker::Broker>,
    listeners: Vec<HttpListener>,
) -> Option<HttpTask> {
    let broker = broker.clone();
    start_http(listeners, "Prometheus", |listeners, stopped| {
        warren_prometheus::run(listeners, broker, stopped)
    })
}

/// The command line, with a config file's values underneath it (config_file.rs). Errors
/// end the process as clap's own do: a message on stderr and exit status 2.
fn parse_command_line() -> Cli {
    let fail = |message: String| -> ! {
        eprintln!("error: {message}");
        std::process::exit(2)
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let applied = config_file::path_from(&args).map(|path| {
        let command = Cli::command();
        let server = command
            .find_subcommand("server")
            .expect("warren has a server subcommand");
        config_file::apply(&path, server).unwrap_or_else(|e| fail(e))
    });
    // A command built anew: clap reads each flag's environment variable when the flag is
    // defined, so only now does it see what the file set.
    Cli::try_parse_from(&args).unwrap_or_else(|e| {
        match applied.as_ref().and_then(|a| config_file::explain(&e, a)) {
            Some(explained) => fail(explained),
            None => e.exit(),
        }
    })
}

fn main() -> anyhow::Result<()> {
    let cli = parse_command_line();
    if let Command::Perf { args } = cli.command {
        // The load tool prints its own report; it keeps stderr for warnings only.
        return warren_perf::main_with_args(args);
    }
    if let Command::Ctl { args } = cli.command {
        // rabbitmqctl's exit codes (64 usage, 69 unavailable…) are part of its interface.
        std::process::exit(warren_ctl::main_with_args(args));
    }
    if let Command::GenerateManpage { dir } = &cli.command {
        let pages = warren_cli_docs::write_man_pages(&Cli::command(), dir)
            .with_context(|| format!("writing the man pages into {}", dir.display()))?;
        eprintln!("{} man pages written into {}", pages.len(), dir.display());
        return Ok(());
    }
    if let Command::GenerateCompletions { shell } = cli.command {
        warren_cli_docs::write_completions(&Cli::command(), shell, &mut std::io::stdout());
        return Ok(());
    }
    // Colours only on a terminal: log files and CI logs stay plain text.
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Server(args) => {
            allocator::spawn_idle_trimmer();
            runtime.block_on(server(*args))
        }
        Command::Perf { .. }
        | Command::Ctl { .. }
        | Command::GenerateManpage { .. }
        | Command::GenerateCompletions { .. } => unreachable!("handled above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The man pages and completions are made from this command line (crates/cli-docs):
    /// every visible subcommand, the hidden ones left out, the version the binary reports.
    #[test]
    fn documented_command_line_is_the_binarys() {
        let cli = Cli::command();
        let tree = warren_cli_docs::documented(&cli);
        tree.clone().debug_assert();
        assert_eq!(tree.get_version(), cli.get_version());
        let names: Vec<&str> = tree.get_subcommands().map(|s| s.get_name()).collect();
        assert_eq!(names, ["server", "perf", "ctl"]);
        let server = tree.find_subcommand("server").unwrap();
        assert!(server
            .get_arguments()
            .any(|a| a.get_long() == Some("config")));
    }
}

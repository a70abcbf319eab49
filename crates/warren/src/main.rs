//! The `warren` binary: parses the command line and hands off to the crates that do the work
//! (`warren server` → warren-server, `warren perf` → warren-perf).

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
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
    Server(ServerArgs),
    /// Load-test any AMQP broker with PerfTest's flags, or run a seed scenario
    /// (`warren perf scenario --help`).
    #[command(disable_help_flag = true)]
    Perf {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Args)]
struct ServerArgs {
    /// Address to listen on for AMQP.
    #[arg(long, env = "WARREN_BIND", default_value = "0.0.0.0")]
    bind: String,
    /// AMQP port.
    #[arg(long, env = "WARREN_AMQP_PORT", default_value_t = 5672)]
    amqp_port: u16,
    /// Where the broker keeps its data.
    #[arg(long, env = "WARREN_DATA_DIR", default_value = "./warren-data")]
    data_dir: PathBuf,
    /// Largest frame offered in connection.tune.
    #[arg(long, env = "WARREN_FRAME_MAX", default_value_t = 131_072)]
    frame_max: u32,
    /// Highest channel number offered in connection.tune.
    #[arg(long, env = "WARREN_CHANNEL_MAX", default_value_t = 2047)]
    channel_max: u16,
    /// Heartbeat interval offered in connection.tune, in seconds (0 disables).
    #[arg(long, env = "WARREN_HEARTBEAT_S", default_value_t = 60)]
    heartbeat_s: u16,
    /// Largest message body accepted, in bytes.
    #[arg(long, env = "WARREN_MAX_MESSAGE_SIZE_BYTES", default_value_t = 128 * 1024 * 1024)]
    max_message_size_bytes: u64,
    /// Queued bytes above which publishers are blocked (default: 40% of RAM, as RabbitMQ).
    #[arg(long, env = "WARREN_MEMORY_HIGH_WATERMARK_BYTES")]
    memory_high_watermark_bytes: Option<usize>,
    /// `always`: a publisher confirm for a persistent message means it was fsync'd (group
    /// commit). `never`: no fsync — confirmed messages survive a broker crash but NOT a power
    /// loss or kernel crash; speed over safety, for those who choose it.
    #[arg(long, env = "WARREN_SYNC", value_enum, default_value_t = SyncMode::Always)]
    sync: SyncMode,
    /// Extra users as NAME:PASSWORD (guest:guest, loopback only, always exists).
    #[arg(long = "user", env = "WARREN_USERS", value_delimiter = ',')]
    users: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SyncMode {
    Always,
    Never,
}

fn total_memory_bytes() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: usize = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
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
        channel_max: args.channel_max,
        heartbeat_s: args.heartbeat_s,
        max_message_size_bytes: args.max_message_size_bytes,
        handshake_timeout: Duration::from_secs(10),
        ..ServerConfig::default()
    };
    for user in &args.users {
        let (name, pass) = user
            .split_once(':')
            .with_context(|| format!("--user {user}: expected NAME:PASSWORD"))?;
        config.users.push((name.to_owned(), pass.to_owned()));
    }
    let watermark = args
        .memory_high_watermark_bytes
        .or_else(|| total_memory_bytes().map(|t| t / 10 * 4))
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
    broker.recover(recovered);
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "store opened"
    );
    let addr = format!("{}:{}", args.bind, args.amqp_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding AMQP listener on {addr}"))?;
    tracing::info!(
        %addr,
        data_dir = %args.data_dir.display(),
        memory_high_watermark_bytes = watermark,
        "Warren {} listening for AMQP",
        env!("CARGO_PKG_VERSION")
    );
    warren_server::run(listener, broker, config, shutdown_signal()).await;
    let stats = store.stats();
    if let Err(e) = store.close() {
        tracing::warn!(error = %e, "closing the message store");
    }
    tracing::info!(
        records_written = stats.records_written,
        fsyncs = stats.fsyncs,
        "Warren stopped"
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Perf { args } = cli.command {
        // The load tool prints its own report; it keeps stderr for warnings only.
        return warren_perf::main_with_args(args);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Server(args) => runtime.block_on(server(args)),
        Command::Perf { .. } => unreachable!("handled above"),
    }
}

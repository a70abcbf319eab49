//! One quorum node as its own process, for crash tests with real signals (kill -9, SIGSTOP):
//! the TCP transport with the cluster secret, groups under the node-level failure detector,
//! and a publisher on every group this node leads.
//!
//! ```text
//! cargo run -p warren-quorum --example node -- --id 1 --listen 127.0.0.1:7001 \
//!     --peer 2=127.0.0.1:7002 --peer 3=127.0.0.1:7003 --secret cookie --dir /tmp/q1 \
//!     [--groups 10] [--publish-every-ms 100]
//! ```
//!
//! The node with the lowest id initialises the groups (members: every node). Output lines:
//! `confirmed <group> <publisher> <seq>` for each publisher confirm (committed by a
//! majority), `status <node> led=<groups led> ready=<messages> peers=<id>:<up|down>,...` each
//! second, and on SIGTERM or SIGINT (after 3 s without publishing) `final <group> <ready
//! messages>` per group. A confirmed message must be counted on every node up at the end;
//! `examples/kill9.sh` checks that around kill -9, SIGSTOP and a restart.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use warren_quorum::failover::{detector_driven_config, FailoverDriver, FailoverOptions};
use warren_quorum::machine::{Command, PublisherSeq, QueueConfig, Reply};
use warren_quorum::node::{default_raft_config, QueueGroup, QuorumNode};
use warren_quorum::tcp::{TcpTransport, TcpTransportConfig};
use warren_quorum::wal::WalOptions;

struct Args {
    id: u64,
    listen: SocketAddr,
    peers: BTreeMap<u64, SocketAddr>,
    secret: String,
    dir: PathBuf,
    groups: u64,
    publish_every_ms: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut id = None;
    let mut listen = None;
    let mut peers = BTreeMap::new();
    let mut secret = None;
    let mut dir = None;
    let mut groups = 10;
    let mut publish_every_ms = 100;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--id" => id = Some(value.parse().map_err(|e| bad(&e))?),
            "--listen" => listen = Some(value.parse().map_err(|e| bad(&e))?),
            "--peer" => {
                let (peer, addr) = value.split_once('=').ok_or(bad(&"expected ID=ADDR"))?;
                peers.insert(
                    peer.parse().map_err(|e| bad(&e))?,
                    addr.parse().map_err(|e| bad(&e))?,
                );
            }
            "--secret" => secret = Some(value),
            "--dir" => dir = Some(PathBuf::from(value)),
            "--groups" => groups = value.parse().map_err(|e| bad(&e))?,
            "--publish-every-ms" => publish_every_ms = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(Args {
        id: id.ok_or("--id is required")?,
        listen: listen.ok_or("--listen is required")?,
        peers,
        secret: secret.ok_or("--secret is required")?,
        dir: dir.ok_or("--dir is required")?,
        groups,
        publish_every_ms,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,warren_quorum=info".into()),
        )
        .init();
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("node: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("node: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let transport = TcpTransport::bind(TcpTransportConfig::new(
        args.id,
        args.listen,
        args.secret.clone(),
    ))
    .await
    .map_err(|e| format!("binding {}: {e}", args.listen))?;
    let node = QuorumNode::open(
        args.id,
        &args.dir,
        WalOptions::default(),
        detector_driven_config(default_raft_config()),
        transport.clone(),
    )
    .map_err(|e| e.to_string())?;
    transport.serve(node.registry());
    for (peer, addr) in &args.peers {
        transport.add_peer(*peer, *addr);
    }
    tokio::spawn(
        FailoverDriver::new(
            args.id,
            node.registry(),
            transport.liveness().clone(),
            FailoverOptions::default(),
        )
        .run(),
    );

    let mut members: Vec<u64> = args.peers.keys().copied().collect();
    members.push(args.id);
    members.sort_unstable();
    let mut groups = Vec::new();
    for group in 1..=args.groups {
        let member = node
            .start_group(group, QueueConfig::default(), None)
            .await
            .map_err(|e| e.to_string())?;
        if members[0] == args.id {
            // Already initialised after a restart: openraft refuses, which is fine.
            if let Err(e) = member.initialize(&members).await {
                tracing::debug!(group, error = %e, "not initialised");
            }
        }
        groups.push(Arc::new(member));
    }

    let publishers: Vec<_> = groups
        .iter()
        .map(|member| {
            tokio::spawn(publish(
                member.clone(),
                args.id,
                Duration::from_millis(args.publish_every_ms.max(1)),
            ))
        })
        .collect();

    let mut status = tokio::time::interval(Duration::from_secs(1));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            _ = status.tick() => {
                let led = groups.iter().filter(|member| member.is_leader()).count();
                let ready: usize = groups.iter().map(|member| member.with_queue(|q| q.ready_count())).sum();
                let peers: Vec<String> = transport
                    .liveness()
                    .all()
                    .into_iter()
                    .map(|peer| format!("{}:{}", peer.node, if peer.up { "up" } else { "down" }))
                    .collect();
                println!("status {} led={led} ready={ready} peers={}", args.id, peers.join(","));
            }
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    // Quiesce before counting: no more publishes, and time for the failover driver's commit
    // heartbeats to let every follower apply what its leader committed.
    for publisher in publishers {
        publisher.abort();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for member in &groups {
        println!(
            "final {} {}",
            member.group(),
            member.with_queue(|q| q.ready_count())
        );
    }
    node.shutdown().await;
    transport.shutdown();
    Ok(())
}

/// Publishes to the group while this node leads it; a publish is retried with the same
/// sequence number until confirmed, so a retry across a leader change is a duplicate at most.
async fn publish(member: Arc<QueueGroup>, publisher: u64, every: Duration) {
    let mut seq = 0;
    let mut pending: Option<u64> = None;
    loop {
        tokio::time::sleep(every).await;
        if !member.is_leader() {
            continue;
        }
        let this = *pending.get_or_insert_with(|| {
            seq += 1;
            seq
        });
        // The publisher id carries a start time too, so a restarted node's sequence numbers
        // never collide with the ones it used before the crash.
        let command = Command::Enqueue {
            publisher: Some(PublisherSeq {
                publisher: publisher_id(publisher),
                seq: this,
            }),
            body: format!("{publisher}:{this}").into_bytes().into(),
            ttl_ms: None,
        };
        match tokio::time::timeout(Duration::from_secs(10), member.propose(command)).await {
            Ok(Ok(Reply::Enqueued { .. } | Reply::Duplicate)) => {
                println!(
                    "confirmed {} {} {this}",
                    member.group(),
                    publisher_id(publisher)
                );
                pending = None;
            }
            Ok(Ok(other)) => {
                println!("nacked {} {other:?}", member.group());
                pending = None;
            }
            Ok(Err(_)) | Err(_) => {}
        }
    }
}

fn publisher_id(node: u64) -> u64 {
    static STARTED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let started = *STARTED.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    });
    (started << 8) | (node & 0xff)
}

//! `warren perf pairs-floor`: issue 12's many-pairs traffic without the broker, to learn
//! what N sender/receiver pairs at 10 msg/s each cost this machine's loopback TCP, tokio and
//! scheduler alone — whether p99 ≤ 2 ms and mean ≤ 0.5 ms at 10,000 pairs is reachable here
//! with any broker.
//!
//! The tool side is many-pairs' shape: N sender and N receiver connections, each with a task
//! of its own, on a multi-thread runtime. One pacer task runs the scenario's timer wheel
//! (`many_pairs::pacing`: 1-ms slots, each sender's phase spread uniformly over the 100-ms
//! period, no catch-up); for each due sender it stamps a 100-byte body (the tool's layout:
//! send time, sender, sequence) into that sender's outbox and wakes its task, which writes it
//! — as many-pairs' own AMQP 1.0 client does. A receiver's task takes each message's flight
//! time the moment its read returns and records it in an HDR histogram.
//!
//! The relay is the cheapest broker there can be, in a process of its own as the broker is:
//! every client says which pair and side it is, and once both sides of a pair are there the
//! relay forwards the sender's bytes to the receiver's socket. `direct` (default): the task
//! reading the sender's socket writes straight into the receiver's. `--handoff`: it cuts the
//! stream into messages and hands each to the receiver connection's task through a channel,
//! which writes it — the broker's publisher-task → consumer-task hand-over. `--ack`: each
//! receiver answers every message with 8 bytes (its send time) that the relay carries back to
//! the sender, whose task reads it — AMQP 1.0's unsettled transfer settled by the broker.
//!
//! Figures are for a window after a warm-up: flight times of messages sent in the window,
//! the achieved send rate against the offered, and CPU seconds of the tool's process
//! (getrusage) and of the relay's (/proc/PID/stat) per message sent in the window.

use crate::fd_limit;
use crate::payload;
use crate::scenario::many_pairs::pacing::Wheel;
use crate::stats::{new_histogram, Percentiles};
use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use clap::Parser;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

/// The subcommand's name: `warren perf pairs-floor`.
pub const COMMAND: &str = "pairs-floor";

/// The report's message: 100 bytes, the send time in it.
const BODY_BYTES: usize = 100;
/// A receiver's answer per message: the message's send time, echoed.
const ACK_BYTES: usize = 8;
/// 10 msg/s per sender.
const PERIOD: Duration = Duration::from_millis(100);
/// Phases are spread over this many slots per period (1 ms), as many-pairs spreads them.
const SLOTS_PER_PERIOD: usize = 100;
/// Pairs connecting at once: enough to hide round trips, within the relay's listen backlog.
const CONNECT_IN_FLIGHT: usize = 48;
/// A client's first bytes: `P`, its side, two zero bytes, its pair (u32 BE).
const HELLO_BYTES: usize = 8;
const HELLO_MAGIC: u8 = b'P';
/// The relay's answer to both sides once a pair is complete.
const READY: u8 = 0xA5;
/// Read buffer per connection (relay and tool): 20,000 of them must stay small.
const READ_BYTES: usize = 2048;
/// Descriptors a process keeps beyond its sockets (runtime, stdio, pipes, listener).
const RESERVE_FDS: u64 = 64;
/// Senders start this long after the last pair attached.
const START_DELAY: Duration = Duration::from_millis(200);
/// How long the messages of the window may take to arrive before they count as undelivered.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Parser, Debug, Clone)]
#[command(
    name = "warren perf pairs-floor",
    about = "many-pairs without the broker: N sender and N receiver TCP connections through a \
             relay process, 10 msg/s of 100 bytes per sender"
)]
pub struct PairsFloorArgs {
    /// Numbers of pairs to measure, comma-separated.
    #[arg(long, default_value = "1000,5000,9900", value_delimiter = ',')]
    pub pairs: Vec<u32>,
    /// Seconds of the measured window.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Seconds of sending before the window (not measured).
    #[arg(long, default_value_t = 5.0)]
    pub warmup: f64,
    /// Receivers answer every message; the relay carries the answer back to the sender.
    #[arg(long)]
    pub ack: bool,
    /// The relay hands each message to the receiver connection's task through a channel
    /// instead of writing it from the sender connection's task.
    #[arg(long)]
    pub handoff: bool,
    /// Repeat every measurement this many times.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Internal: run as the relay process (prints its port, relays until stdin closes).
    #[arg(long, hide = true)]
    pub relay_worker: bool,
}

/// One measurement's setup.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PairsConfig {
    pub pairs: u32,
    pub seconds: f64,
    pub warmup: f64,
    pub ack: bool,
    pub handoff: bool,
}

/// CPU seconds used so far by the tool's process and the relay's (None: not a process of
/// its own, or /proc unreadable).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuSample {
    pub tool_s: f64,
    pub relay_s: Option<f64>,
}

/// One measurement's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct PairsResult {
    pub config: PairsConfig,
    /// The 1-minute load average when the measurement started.
    pub load_before: Option<f64>,
    pub offered_per_s: f64,
    /// Messages stamped in the window.
    pub sent_in_window: u64,
    pub achieved_per_s: f64,
    /// Every message of the run, warm-up included.
    pub sent_total: u64,
    pub received_total: u64,
    /// Answers back at the senders (with `--ack`).
    pub acked_total: u64,
    /// Sent but not received when the drain ended.
    pub undelivered: u64,
    /// Sends more than 2 ms late (re-phased) or more than a period late (skipped).
    pub late: u64,
    pub skipped: u64,
    /// Flight times of the window's messages.
    pub latency: Percentiles,
    /// Sender → receiver → sender times of the window's messages (with `--ack`).
    pub ack_latency: Percentiles,
    pub tool_cpu_s: f64,
    pub relay_cpu_s: Option<f64>,
}

impl PairsResult {
    pub fn tool_us_per_msg(&self) -> f64 {
        per_message_us(self.tool_cpu_s, self.sent_in_window)
    }

    pub fn relay_us_per_msg(&self) -> Option<f64> {
        self.relay_cpu_s
            .map(|s| per_message_us(s, self.sent_in_window))
    }
}

fn per_message_us(cpu_s: f64, messages: u64) -> f64 {
    cpu_s * 1e6 / messages.max(1) as f64
}

/// `warren perf pairs-floor ARGS` (the arguments after the subcommand's name).
pub fn main(args: Vec<String>) -> Result<()> {
    let Some(args) = crate::flags::parse_or_help::<PairsFloorArgs>(COMMAND, args)? else {
        return Ok(());
    };
    // Children inherit it: the relay holds as many sockets as the tool.
    fd_limit::raise_soft_to_hard();
    if args.relay_worker {
        return relay_worker_main(args.handoff);
    }
    if args.seconds <= 0.0 || args.warmup < 0.0 {
        bail!("--seconds must be positive and --warmup not negative");
    }
    let mut results = vec![];
    println!("{TABLE_HEADER}");
    println!("{TABLE_RULE}");
    for _ in 0..args.runs {
        for &pairs in &args.pairs {
            let config = PairsConfig {
                pairs,
                seconds: args.seconds,
                warmup: args.warmup,
                ack: args.ack,
                handoff: args.handoff,
            };
            let r = measure(&config, RelayPlace::Process)?;
            println!("{}", table_row(&r));
            results.push(r);
        }
    }
    crate::floor::write_json(args.json.as_deref(), &results)
}

const TABLE_HEADER: &str = "| pairs | relay | ack | load | offered msg/s | achieved msg/s | mean µs | p50 µs | p99 µs | p99.9 µs | max µs | ack p99 µs | undelivered | tool µs/msg | relay µs/msg | tool + relay cores |";
const TABLE_RULE: &str = "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |";

fn table_row(r: &PairsResult) -> String {
    let c = &r.config;
    let l = &r.latency;
    let relay_us = r
        .relay_us_per_msg()
        .map_or("?".to_owned(), |u| format!("{u:.1}"));
    let cores = (r.tool_cpu_s + r.relay_cpu_s.unwrap_or(0.0)) / c.seconds;
    format!(
        "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {:.2} |",
        c.pairs,
        if c.handoff { "handoff" } else { "direct" },
        if c.ack { "yes" } else { "no" },
        r.load_before.map_or("?".to_owned(), |l| format!("{l:.2}")),
        r.offered_per_s,
        r.achieved_per_s,
        l.mean_us,
        l.p50_us,
        l.p99_us,
        l.p999_us,
        l.max_us,
        if c.ack {
            r.ack_latency.p99_us.to_string()
        } else {
            "–".to_owned()
        },
        r.undelivered,
        r.tool_us_per_msg(),
        relay_us,
        cores
    )
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------------------
// Pairing: the wire's hello and the relay's registry.

/// Which side of a pair a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Sender,
    Receiver,
}

fn hello(side: Side, pair: u32) -> [u8; HELLO_BYTES] {
    let mut h = [0u8; HELLO_BYTES];
    h[0] = HELLO_MAGIC;
    h[1] = match side {
        Side::Sender => b'S',
        Side::Receiver => b'R',
    };
    h[4..8].copy_from_slice(&pair.to_be_bytes());
    h
}

fn parse_hello(h: &[u8; HELLO_BYTES]) -> Option<(Side, u32)> {
    if h[0] != HELLO_MAGIC || h[2] != 0 || h[3] != 0 {
        return None;
    }
    let side = match h[1] {
        b'S' => Side::Sender,
        b'R' => Side::Receiver,
        _ => return None,
    };
    Some((side, u32::from_be_bytes([h[4], h[5], h[6], h[7]])))
}

/// The relay's half-made pairs: the first side of a pair waits here for the other.
struct Pairing<T> {
    waiting: HashMap<u32, (Side, T)>,
}

impl<T> Default for Pairing<T> {
    fn default() -> Self {
        Pairing {
            waiting: HashMap::new(),
        }
    }
}

impl<T> Pairing<T> {
    /// Offers one side of `pair`; returns (sender, receiver) once both sides are here. A
    /// second connection for a side already waiting is refused (and dropped), the first
    /// keeps waiting.
    fn offer(&mut self, pair: u32, side: Side, conn: T) -> Result<Option<(T, T)>, String> {
        match self.waiting.remove(&pair) {
            None => {
                self.waiting.insert(pair, (side, conn));
                Ok(None)
            }
            Some((waiting_side, other)) if waiting_side != side => Ok(Some(match side {
                Side::Sender => (conn, other),
                Side::Receiver => (other, conn),
            })),
            Some(first) => {
                self.waiting.insert(pair, first);
                Err(format!("pair {pair} already has its {side:?}"))
            }
        }
    }

    fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

/// Calls `each` with every whole `size`-byte record at the front of `buf`, and keeps the
/// partial one (a read may end anywhere). Returns how many there were.
fn take_records(buf: &mut Vec<u8>, size: usize, mut each: impl FnMut(&[u8])) -> u64 {
    let whole = buf.len() / size * size;
    for record in buf[..whole].chunks_exact(size) {
        each(record);
    }
    buf.drain(..whole);
    (whole / size) as u64
}

// ---------------------------------------------------------------------------------------
// CPU accounting.

/// This process's CPU seconds (user + system, every thread).
fn own_cpu_s() -> f64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage through a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// utime + stime in clock ticks from a /proc/PID/stat line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself: fields are counted after the last
/// `)`, where field 3 (state) is the first.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn proc_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks <= 0 {
        return None;
    }
    Some(parse_stat_ticks(&stat)? as f64 / ticks as f64)
}

fn sample_cpu(relay_pid: Option<u32>) -> CpuSample {
    CpuSample {
        tool_s: own_cpu_s(),
        relay_s: relay_pid.and_then(proc_cpu_s),
    }
}

// ---------------------------------------------------------------------------------------
// The relay.

/// Where the relay runs: its own process (what the command measures), or a thread of this
/// one (tests, whose executable is not `warren`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayPlace {
    Process,
    Thread,
}

/// The relay, started: its port, and how to stop it.
struct RunningRelay {
    port: u16,
    /// The relay process and its stdin (closing it ends the relay).
    child: Option<(Child, ChildStdin)>,
    thread: Option<(oneshot::Sender<()>, std::thread::JoinHandle<Result<()>>)>,
}

impl RunningRelay {
    fn start(handoff: bool, place: RelayPlace) -> Result<RunningRelay> {
        match place {
            RelayPlace::Process => {
                let mut child = relay_command(handoff)?
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .context("starting the relay process")?;
                let stdin = child.stdin.take().context("relay stdin")?;
                let mut line = String::new();
                let stdout = child.stdout.take().context("relay stdout")?;
                std::io::BufReader::new(stdout).read_line(&mut line)?;
                let port = line
                    .trim()
                    .parse()
                    .map_err(|_| anyhow!("relay process said {line:?}, not its port"))?;
                Ok(RunningRelay {
                    port,
                    child: Some((child, stdin)),
                    thread: None,
                })
            }
            RelayPlace::Thread => {
                let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
                let port = listener.local_addr()?.port();
                let (stop, stopped) = oneshot::channel();
                let thread = std::thread::spawn(move || run_relay(listener, handoff, stopped));
                Ok(RunningRelay {
                    port,
                    child: None,
                    thread: Some((stop, thread)),
                })
            }
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|(c, _)| c.id())
    }

    fn finish(self) -> Result<()> {
        if let Some((mut child, stdin)) = self.child {
            drop(stdin);
            let status = child.wait()?;
            if !status.success() {
                bail!("relay process exited with {status}");
            }
        }
        if let Some((stop, thread)) = self.thread {
            let _ = stop.send(());
            thread
                .join()
                .map_err(|_| anyhow!("relay thread panicked"))??;
        }
        Ok(())
    }
}

/// This program again, as the relay: `warren perf pairs-floor --relay-worker [--handoff]`, or,
/// run as the `perf` example, without the word `perf` (a copy of `warren` under another name
/// still takes it).
fn relay_command(handoff: bool) -> Result<Command> {
    let mut cmd = crate::floor::this_program_as(COMMAND)?;
    cmd.arg("--relay-worker");
    if handoff {
        cmd.arg("--handoff");
    }
    Ok(cmd)
}

/// The relay process: binds a port, prints it, relays until its stdin closes.
fn relay_worker_main(handoff: bool) -> Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    println!("{}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let (stop, stopped) = oneshot::channel();
    // A plain thread: a blocking read of stdin must not hold up the runtime's shutdown.
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = stop.send(());
    });
    run_relay(listener, handoff, stopped)
}

/// The broker's runtime (multi-thread, a worker per core), serving until `stop`.
fn run_relay(
    listener: std::net::TcpListener,
    handoff: bool,
    stop: oneshot::Receiver<()>,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = rt.block_on(serve_relay(listener, handoff, stop));
    // Connection tasks still waiting on their sockets end with the runtime.
    rt.shutdown_timeout(Duration::from_secs(1));
    served
}

async fn serve_relay(
    listener: std::net::TcpListener,
    handoff: bool,
    stop: oneshot::Receiver<()>,
) -> Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let pairing = Arc::new(Mutex::new(Pairing::<TcpStream>::default()));
    let accepting = async {
        loop {
            let (sock, _) = listener.accept().await.context("relay accept")?;
            sock.set_nodelay(true)?;
            let pairing = pairing.clone();
            tokio::spawn(async move {
                if let Err(e) = greet(sock, &pairing, handoff).await {
                    eprintln!("pairs-floor relay: {e:#}");
                }
            });
        }
    };
    tokio::select! {
        accepted = accepting => accepted,
        _ = stop => {
            let left = pairing.lock().waiting();
            if left > 0 {
                eprintln!("pairs-floor relay: {left} half pairs never completed");
            }
            Ok(())
        }
    }
}

/// Reads a connection's hello; the second side of a pair starts the pair.
async fn greet(
    mut sock: TcpStream,
    pairing: &Mutex<Pairing<TcpStream>>,
    handoff: bool,
) -> Result<()> {
    let mut h = [0u8; HELLO_BYTES];
    sock.read_exact(&mut h).await.context("reading a hello")?;
    let (side, pair) = parse_hello(&h).ok_or_else(|| anyhow!("not a hello: {h:?}"))?;
    let complete = pairing
        .lock()
        .offer(pair, side, sock)
        .map_err(|e| anyhow!(e))?;
    if let Some((mut sender, mut receiver)) = complete {
        receiver.write_all(&[READY]).await?;
        sender.write_all(&[READY]).await?;
        let (s_rd, s_wr) = sender.into_split();
        let (r_rd, r_wr) = receiver.into_split();
        if handoff {
            let (to_receiver, receiver_inbox) = mpsc::unbounded_channel();
            let (to_sender, sender_inbox) = mpsc::unbounded_channel();
            tokio::spawn(connection_handoff(
                s_rd,
                s_wr,
                BODY_BYTES,
                to_receiver,
                sender_inbox,
            ));
            tokio::spawn(connection_handoff(
                r_rd,
                r_wr,
                ACK_BYTES,
                to_sender,
                receiver_inbox,
            ));
        } else {
            tokio::spawn(crate::floor::forward_direct(s_rd, r_wr, READ_BYTES));
            tokio::spawn(crate::floor::forward_direct(r_rd, s_wr, READ_BYTES));
        }
    }
    Ok(())
}

/// `handoff`: a connection's own task. It cuts what it reads into `record`-byte messages and
/// hands each to the peer connection's task; it writes what the peer hands it, everything
/// queued at once (up to the broker's event batch).
async fn connection_handoff(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    record: usize,
    to_peer: mpsc::UnboundedSender<Bytes>,
    mut inbox: mpsc::UnboundedReceiver<Bytes>,
) -> Result<()> {
    let mut to_peer = Some(to_peer);
    let mut rbuf = BytesMut::with_capacity(READ_BYTES);
    let mut out = Vec::with_capacity(READ_BYTES);
    let mut inbox_open = true;
    while to_peer.is_some() || inbox_open {
        if rbuf.capacity() - rbuf.len() < record {
            rbuf.reserve(READ_BYTES);
        }
        tokio::select! {
            read = rd.read_buf(&mut rbuf), if to_peer.is_some() => {
                if read? == 0 {
                    // The peer's inbox closes: it ends once it has written what is queued.
                    to_peer = None;
                    continue;
                }
                while rbuf.len() >= record {
                    let message = rbuf.split_to(record).freeze();
                    if to_peer.as_ref().is_some_and(|p| p.send(message).is_err()) {
                        to_peer = None;
                        break;
                    }
                }
            }
            first = inbox.recv(), if inbox_open => match first {
                None => inbox_open = false,
                Some(first) => {
                    out.clear();
                    out.extend_from_slice(&first);
                    for _ in 0..512 {
                        match inbox.try_recv() {
                            Ok(more) => out.extend_from_slice(&more),
                            Err(_) => break,
                        }
                    }
                    wr.write_all(&out).await?;
                }
            },
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The tool side.

/// What the pacer and a sender's task share: messages stamped but not yet written, and the
/// wake-up for the task (only when the outbox was empty: a pending write takes the rest).
#[derive(Default)]
struct Outbox {
    buf: Mutex<Vec<u8>>,
    wake: Notify,
}

/// A sender as the pacer's wheel holds it.
struct Paced {
    id: u32,
    seq: u64,
    outbox: Arc<Outbox>,
}

/// What every client task records into.
struct Shared {
    received: AtomicU64,
    acked: AtomicU64,
    /// Messages sent at or after this (ns since the epoch) are the window's.
    window_start_ns: AtomicU64,
    latency: Mutex<Histogram<u64>>,
    ack_latency: Mutex<Histogram<u64>>,
}

impl Shared {
    fn in_window(&self, sent_ns: u64) -> bool {
        sent_ns >= self.window_start_ns.load(Ordering::Relaxed)
    }
}

/// What the pacer did.
#[derive(Debug, Default)]
struct PaceCount {
    sent_total: u64,
    sent_in_window: u64,
    late: u64,
    skipped: u64,
}

/// Runs one measurement: relay, N pairs attached, warm-up, window, drain.
pub fn measure(config: &PairsConfig, place: RelayPlace) -> Result<PairsResult> {
    if config.pairs == 0 {
        bail!("--pairs must be positive");
    }
    let needed = 2 * u64::from(config.pairs) + RESERVE_FDS;
    if let Some((soft, _)) = fd_limit::own_limits() {
        if needed > soft {
            bail!(
                "{} pairs need {needed} descriptors in the tool and in the relay; the open-files limit is {soft}",
                config.pairs
            );
        }
    }
    let load_before = load_average();
    let relay = RunningRelay::start(config.handoff, place)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (port, pid) = (relay.port, relay.pid());
    let config = *config;
    let result = rt.block_on(async move {
        tokio::spawn(async move { run_pairs(&config, port, pid).await }).await?
    });
    // Closes the tool's 2N sockets before the relay is told to stop.
    rt.shutdown_timeout(Duration::from_secs(5));
    let finished = relay.finish();
    let mut result = result?;
    finished?;
    result.load_before = load_before;
    Ok(result)
}

async fn run_pairs(config: &PairsConfig, port: u16, relay_pid: Option<u32>) -> Result<PairsResult> {
    let n = config.pairs;
    let pairs = attach_all(port, n).await?;
    let shared = Arc::new(Shared {
        received: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        window_start_ns: AtomicU64::new(u64::MAX),
        latency: Mutex::new(new_histogram()),
        ack_latency: Mutex::new(new_histogram()),
    });
    let mut tasks = Vec::with_capacity(2 * n as usize);
    let mut senders = Vec::with_capacity(n as usize);
    for (id, (sender, receiver)) in pairs.into_iter().enumerate() {
        let outbox = Arc::new(Outbox::default());
        tasks.push(tokio::spawn(sender_task(
            sender,
            outbox.clone(),
            shared.clone(),
            config.ack,
        )));
        tasks.push(tokio::spawn(receiver_task(
            receiver,
            shared.clone(),
            config.ack,
        )));
        senders.push(Paced {
            id: id as u32,
            seq: 0,
            outbox,
        });
    }
    let start = Instant::now() + START_DELAY;
    let window_start = start + Duration::from_secs_f64(config.warmup);
    let window_end = window_start + Duration::from_secs_f64(config.seconds);
    // The same instant on the wall clock the bodies carry.
    let window_start_ns = payload::now_ns() + (window_start - Instant::now()).as_nanos() as u64;
    shared
        .window_start_ns
        .store(window_start_ns, Ordering::Relaxed);
    let sampler = tokio::spawn(async move {
        tokio::time::sleep_until(window_start).await;
        let first = sample_cpu(relay_pid);
        tokio::time::sleep_until(window_end).await;
        (first, sample_cpu(relay_pid))
    });
    let paced = tokio::spawn(pace(senders, n, start, window_end, window_start_ns)).await?;
    let (cpu0, cpu1) = sampler.await?;

    let drain_end = Instant::now() + DRAIN_TIMEOUT;
    let delivered = |s: &Shared| {
        s.received.load(Ordering::Acquire) >= paced.sent_total
            && (!config.ack || s.acked.load(Ordering::Acquire) >= paced.sent_total)
    };
    while !delivered(&shared) && Instant::now() < drain_end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        match t.await {
            Ok(Err(e)) => eprintln!("pairs-floor: a client failed: {e:#}"),
            Err(e) if e.is_panic() => bail!("a client task panicked"),
            _ => {}
        }
    }
    let received_total = shared.received.load(Ordering::Acquire);
    let latency = Percentiles::of(&shared.latency.lock());
    let ack_latency = Percentiles::of(&shared.ack_latency.lock());
    Ok(PairsResult {
        config: *config,
        load_before: None,
        offered_per_s: f64::from(n) / PERIOD.as_secs_f64(),
        sent_in_window: paced.sent_in_window,
        achieved_per_s: paced.sent_in_window as f64 / config.seconds,
        sent_total: paced.sent_total,
        received_total,
        acked_total: shared.acked.load(Ordering::Acquire),
        undelivered: paced.sent_total.saturating_sub(received_total),
        late: paced.late,
        skipped: paced.skipped,
        latency,
        ack_latency,
        tool_cpu_s: cpu1.tool_s - cpu0.tool_s,
        relay_cpu_s: cpu1.relay_s.zip(cpu0.relay_s).map(|(b, a)| b - a),
    })
}

/// Connects every pair (receiver first, then sender), `CONNECT_IN_FLIGHT` at a time, and
/// waits for the relay's word that both sides are paired.
async fn attach_all(port: u16, n: u32) -> Result<Vec<(TcpStream, TcpStream)>> {
    let mut pairs: Vec<Option<(TcpStream, TcpStream)>> = (0..n).map(|_| None).collect();
    let mut set = tokio::task::JoinSet::new();
    let mut next = 0u32;
    loop {
        while set.len() < CONNECT_IN_FLIGHT && next < n {
            let id = next;
            set.spawn(async move {
                tokio::time::timeout(ATTACH_TIMEOUT, attach_pair(port, id))
                    .await
                    .map_err(|_| anyhow!("pair {id}: no answer from the relay"))?
                    .with_context(|| format!("attaching pair {id}"))
            });
            next += 1;
        }
        let Some(done) = set.join_next().await else {
            break;
        };
        let (id, sender, receiver) = done??;
        pairs[id as usize] = Some((sender, receiver));
    }
    Ok(pairs.into_iter().flatten().collect())
}

async fn attach_pair(port: u16, id: u32) -> Result<(u32, TcpStream, TcpStream)> {
    let mut receiver = TcpStream::connect(("127.0.0.1", port)).await?;
    receiver.set_nodelay(true)?;
    receiver.write_all(&hello(Side::Receiver, id)).await?;
    let mut sender = TcpStream::connect(("127.0.0.1", port)).await?;
    sender.set_nodelay(true)?;
    sender.write_all(&hello(Side::Sender, id)).await?;
    for sock in [&mut receiver, &mut sender] {
        let mut ready = [0u8; 1];
        sock.read_exact(&mut ready).await?;
        if ready[0] != READY {
            bail!("the relay answered {:#x}", ready[0]);
        }
    }
    Ok((id, sender, receiver))
}

/// The senders' clock (many-pairs' wheel): each due sender's message is stamped into its
/// outbox, and its task woken when the outbox was empty.
async fn pace(
    senders: Vec<Paced>,
    total: u32,
    start: Instant,
    end: Instant,
    window_start_ns: u64,
) -> PaceCount {
    let mut wheel = Wheel::new(SLOTS_PER_PERIOD, PERIOD, start);
    for s in senders {
        let slot = u64::from(s.id) * wheel.slots() as u64 / u64::from(total.max(1));
        wheel.insert(slot as usize, s);
    }
    let mut body = payload::new_body(BODY_BYTES);
    let mut out = PaceCount::default();
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let next = wheel.run_due(now, |s| {
            let sent_ns = payload::now_ns();
            payload::stamp(&mut body, sent_ns, s.id, s.seq);
            s.seq += 1;
            out.sent_total += 1;
            if sent_ns >= window_start_ns {
                out.sent_in_window += 1;
            }
            let was_empty = {
                let mut buf = s.outbox.buf.lock();
                let was_empty = buf.is_empty();
                buf.extend_from_slice(&body);
                was_empty
            };
            if was_empty {
                s.outbox.wake.notify_one();
            }
        });
        tokio::time::sleep_until(next.min(end)).await;
    }
    out.late = wheel.late;
    out.skipped = wheel.skipped;
    out
}

/// A sender's task: writes what the pacer stamped; with `ack`, reads the answers and takes
/// each message's round trip.
async fn sender_task(
    stream: TcpStream,
    outbox: Arc<Outbox>,
    shared: Arc<Shared>,
    ack: bool,
) -> Result<()> {
    let (mut rd, mut wr) = stream.into_split();
    let mut wbuf = Vec::with_capacity(BODY_BYTES);
    let mut rbuf = Vec::new();
    let mut chunk = [0u8; 256];
    let mut rtts = Vec::new();
    loop {
        tokio::select! {
            _ = outbox.wake.notified() => {
                std::mem::swap(&mut *outbox.buf.lock(), &mut wbuf);
                if !wbuf.is_empty() {
                    wr.write_all(&wbuf).await?;
                    wbuf.clear();
                }
            }
            read = rd.read(&mut chunk) => {
                let n = read?;
                if n == 0 {
                    return Ok(());
                }
                if !ack {
                    continue;
                }
                rbuf.extend_from_slice(&chunk[..n]);
                let now_ns = payload::now_ns();
                let got = take_records(&mut rbuf, ACK_BYTES, |r| {
                    let sent_ns = u64::from_be_bytes(r.try_into().expect("8-byte records"));
                    if shared.in_window(sent_ns) {
                        rtts.push(payload::flight_us(sent_ns, now_ns).max(1));
                    }
                });
                if !rtts.is_empty() {
                    let mut h = shared.ack_latency.lock();
                    for &us in &rtts {
                        h.saturating_record(us);
                    }
                    rtts.clear();
                }
                shared.acked.fetch_add(got, Ordering::AcqRel);
            }
        }
    }
}

/// A receiver's task: takes each message's flight time as its read returns; with `ack`,
/// answers each with its send time.
async fn receiver_task(stream: TcpStream, shared: Arc<Shared>, ack: bool) -> Result<()> {
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = Vec::with_capacity(READ_BYTES);
    let mut chunk = vec![0u8; READ_BYTES];
    let mut acks = Vec::new();
    let mut flights = Vec::new();
    loop {
        let n = rd.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let now_ns = payload::now_ns();
        let got = take_records(&mut buf, BODY_BYTES, |m| {
            if let Some(stamp) = payload::parse(m) {
                if shared.in_window(stamp.sent_ns) {
                    flights.push(payload::flight_us(stamp.sent_ns, now_ns).max(1));
                }
                if ack {
                    acks.extend_from_slice(&stamp.sent_ns.to_be_bytes());
                }
            }
        });
        if !flights.is_empty() {
            let mut h = shared.latency.lock();
            for &us in &flights {
                h.saturating_record(us);
            }
            flights.clear();
        }
        shared.received.fetch_add(got, Ordering::AcqRel);
        if !acks.is_empty() {
            wr.write_all(&acks).await?;
            acks.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_completes_whichever_side_comes_first() {
        let mut p = Pairing::default();
        assert_eq!(p.offer(7, Side::Receiver, "r7"), Ok(None));
        assert_eq!(p.offer(8, Side::Sender, "s8"), Ok(None));
        assert_eq!(p.waiting(), 2);
        assert_eq!(p.offer(7, Side::Sender, "s7"), Ok(Some(("s7", "r7"))));
        assert_eq!(p.offer(8, Side::Receiver, "r8"), Ok(Some(("s8", "r8"))));
        assert_eq!(p.waiting(), 0);
    }

    #[test]
    fn a_second_connection_for_one_side_is_refused_and_the_first_keeps_waiting() {
        let mut p = Pairing::default();
        assert_eq!(p.offer(1, Side::Sender, "a"), Ok(None));
        assert!(p.offer(1, Side::Sender, "b").is_err());
        assert_eq!(p.offer(1, Side::Receiver, "r"), Ok(Some(("a", "r"))));
    }

    #[test]
    fn hello_round_trips_and_rejects_other_bytes() {
        for (side, pair) in [
            (Side::Sender, 0),
            (Side::Receiver, 9_899),
            (Side::Sender, u32::MAX),
        ] {
            assert_eq!(parse_hello(&hello(side, pair)), Some((side, pair)));
        }
        let mut bad = hello(Side::Sender, 3);
        bad[0] = b'X';
        assert_eq!(parse_hello(&bad), None);
        let mut bad = hello(Side::Sender, 3);
        bad[1] = b'Q';
        assert_eq!(parse_hello(&bad), None);
    }

    #[test]
    fn records_split_across_reads_are_reassembled() {
        let mut stream = vec![];
        for i in 0..5u8 {
            stream.extend(vec![i; BODY_BYTES]);
        }
        let mut buf = vec![];
        let mut seen = vec![];
        // 37-byte reads: records start and end inside reads.
        for piece in stream.chunks(37) {
            buf.extend_from_slice(piece);
            take_records(&mut buf, BODY_BYTES, |r| {
                assert!(r.iter().all(|&b| b == r[0]));
                seen.push(r[0]);
            });
        }
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert!(buf.is_empty());
    }

    #[test]
    fn proc_stat_cpu_is_read_after_the_command_name() {
        // Field 14 utime = 250, field 15 stime = 50; the name holds spaces and a ')'.
        let line = "4242 (warren (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_stat_ticks(line), Some(300));
        assert_eq!(parse_stat_ticks("4242 (short) S 1"), None);
        // This process has used some CPU, and /proc agrees with getrusage to within a tick
        // or so.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let from_proc = proc_cpu_s(std::process::id()).unwrap();
        let own = own_cpu_s();
        assert!(own > 0.0 && from_proc <= own + 0.05, "{from_proc} {own}");
    }

    #[test]
    fn per_message_figures() {
        assert!((per_message_us(2.0, 200_000) - 10.0).abs() < 1e-9);
        assert_eq!(per_message_us(1.0, 0), 1e6);
    }

    fn small(ack: bool, handoff: bool) -> PairsConfig {
        PairsConfig {
            pairs: 20,
            seconds: 0.6,
            warmup: 0.2,
            ack,
            handoff,
        }
    }

    #[test]
    fn every_variant_delivers_every_message_and_times_the_window() {
        for handoff in [false, true] {
            for ack in [false, true] {
                let c = small(ack, handoff);
                let r = measure(&c, RelayPlace::Thread).unwrap();
                let what = format!("ack {ack} handoff {handoff}: {r:?}");
                // 20 senders at 10 msg/s for 0.8 s: ~160 messages, ~120 in the window
                // (fewer when a loaded machine makes the wheel skip).
                assert!(r.sent_total >= 60 && r.sent_total <= 180, "{what}");
                assert!(r.sent_in_window < r.sent_total, "{what}");
                assert_eq!(r.received_total, r.sent_total, "{what}");
                assert_eq!(r.undelivered, 0, "{what}");
                assert_eq!(r.latency.count, r.sent_in_window, "{what}");
                assert!((r.offered_per_s - 200.0).abs() < 1e-9);
                assert!(r.achieved_per_s <= 200.0 * 1.1, "{what}");
                if ack {
                    assert_eq!(r.acked_total, r.sent_total, "{what}");
                    assert_eq!(r.ack_latency.count, r.sent_in_window, "{what}");
                    assert!(r.ack_latency.p50_us >= r.latency.p50_us, "{what}");
                } else {
                    assert_eq!(r.acked_total, 0, "{what}");
                }
                // A relay thread has no process of its own to read.
                assert!(r.relay_cpu_s.is_none() && r.tool_cpu_s > 0.0, "{what}");
                assert!(table_row(&r).starts_with("| 20 |"));
            }
        }
    }
}

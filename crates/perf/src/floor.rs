//! `warren perf loopback-floor`: the latency rows of issue 13 (1p1c 1000 B at a fixed rate)
//! without the broker, to learn what this machine's loopback TCP and scheduler cost alone.
//!
//! A producer stamps fixed-size messages (the perf tool's body layout: send time, producer
//! id, sequence number) paced by the perf tool's own `RateLimiter`, and writes each due group
//! in one write to a relay — a separate process, as the broker is — which reads them from one
//! loopback TCP socket and writes them to another; a consumer reads them and records each
//! message's flight time (µs) in an HDR histogram, as `warren perf` does. Whatever the broker
//! does on top of this (AMQP framing, routing, the hand-over between the publisher's and the
//! consumer's connection tasks) is the gap between `warren perf -r RATE` and this floor.
//!
//! Variants, because each answers a question about the gap:
//! * runtime `tokio` (like Warren and `warren perf`: multi-thread runtimes, one worker per
//!   core) or `threads` (plain blocking sockets, a thread per direction);
//! * relay `direct` (one task or thread reads and writes) or `handoff` (a reader hands each
//!   message to a writer through a queue, which wakes it: the broker's publisher connection
//!   task handing deliveries to the consumer's connection task);
//! * pace `tick` (the limiter's groups as `warren perf` sends them: tokio's timer wakes the
//!   producer on whole milliseconds, so at 10k msg/s a group is ~10 messages and at 50k ~50)
//!   or `exact` (the producer, a thread of its own, sleeps until each next message is due, so
//!   groups are as small as the OS's timer allows; with the tokio runtime the relay and the
//!   consumer still run on tokio).

use crate::payload;
use crate::rate::RateLimiter;
use crate::stats::{new_histogram, Percentiles};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The subcommand's name: `warren perf loopback-floor`.
pub const COMMAND: &str = "loopback-floor";

/// The largest group the producer sends at once, as `warren perf`'s producer asks for.
const MAX_GROUP: u64 = 256;
/// Read buffer of the relay and the consumer (the broker reads up to 64 KiB at a time).
const READ_BYTES: usize = 64 * 1024;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Runtime {
    Tokio,
    Threads,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Relay {
    Direct,
    Handoff,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pace {
    Tick,
    Exact,
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "warren perf loopback-floor",
    about = "The 1p1c latency rows without the broker: producer → relay process → consumer \
             over loopback TCP"
)]
pub struct FloorArgs {
    /// Message rates to measure, msg/s, comma-separated.
    #[arg(long, default_value = "10000,50000", value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Message size in bytes (at least 20).
    #[arg(long, default_value_t = 1000)]
    pub size: usize,
    /// Runtimes to measure (default both).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Runtime::Tokio, Runtime::Threads])]
    pub runtime: Vec<Runtime>,
    /// Relays to measure (default both).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Relay::Direct, Relay::Handoff])]
    pub relay: Vec<Relay>,
    /// Pacing to measure (default tick; exact runs the producer on a thread of its own in
    /// the tokio runtime too).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Pace::Tick])]
    pub pace: Vec<Pace>,
    /// Repeat every measurement this many times.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Internal: run as the relay process (prints its two ports, relays, exits).
    #[arg(long, hide = true)]
    pub relay_worker: bool,
}

/// One measurement's setup.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FloorConfig {
    pub runtime: Runtime,
    pub relay: Relay,
    pub pace: Pace,
    pub rate_per_s: f64,
    pub seconds: f64,
    pub size: usize,
}

/// One measurement's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct FloorResult {
    pub config: FloorConfig,
    pub sent: u64,
    pub received: u64,
    /// Writes the producer made (one per group).
    pub groups: u64,
    pub latency: Percentiles,
}

impl FloorResult {
    pub fn mean_group(&self) -> f64 {
        self.sent as f64 / self.groups.max(1) as f64
    }
}

/// `warren perf loopback-floor ARGS` (the arguments after the subcommand's name).
pub fn main(args: Vec<String>) -> Result<()> {
    let Some(args) = crate::flags::parse_or_help::<FloorArgs>(COMMAND, args)? else {
        return Ok(());
    };
    if args.relay_worker {
        let (Some(&runtime), Some(&relay)) = (args.runtime.first(), args.relay.first()) else {
            bail!("the relay worker needs --runtime and --relay");
        };
        return relay_worker_main(runtime, relay);
    }
    if args.size < payload::MIN_BODY_BYTES {
        bail!("--size must be at least {}", payload::MIN_BODY_BYTES);
    }
    let mut results = vec![];
    println!(
        "| runtime | relay | pace | rate msg/s | received | mean group | p50 µs | p99 µs | p99.9 µs | max µs |"
    );
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for _ in 0..args.runs {
        for &runtime in &args.runtime {
            for &relay in &args.relay {
                for &pace in &args.pace {
                    for &rate_per_s in &args.rates {
                        let config = FloorConfig {
                            runtime,
                            relay,
                            pace,
                            rate_per_s,
                            seconds: args.seconds,
                            size: args.size,
                        };
                        let r = measure(&config, RelayPlace::Process)?;
                        println!("{}", table_row(&r));
                        results.push(r);
                    }
                }
            }
        }
    }
    write_json(args.json.as_deref(), &results)
}

/// The floors' `--json`: every result, pretty-printed, when a path was given.
pub(crate) fn write_json(path: Option<&std::path::Path>, results: &impl Serialize) -> Result<()> {
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_vec_pretty(results)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn table_row(r: &FloorResult) -> String {
    let c = &r.config;
    let l = &r.latency;
    format!(
        "| {:?} | {:?} | {:?} | {} | {} | {:.1} | {} | {} | {} | {} |",
        c.runtime,
        c.relay,
        c.pace,
        c.rate_per_s,
        r.received,
        r.mean_group(),
        l.p50_us,
        l.p99_us,
        l.p999_us,
        l.max_us
    )
    .to_lowercase()
}

/// Where the relay runs: its own process (what the command measures), or a thread of this
/// one (tests, whose executable is not `warren`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayPlace {
    Process,
    Thread,
}

/// The relay, started: the ports it listens on, and what to wait for at the end.
struct RunningRelay {
    in_port: u16,
    out_port: u16,
    child: Option<Child>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl RunningRelay {
    fn start(runtime: Runtime, relay: Relay, place: RelayPlace) -> Result<RunningRelay> {
        match place {
            RelayPlace::Process => {
                let mut child = relay_command(runtime, relay)?
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .context("starting the relay process")?;
                let mut line = String::new();
                let stdout = child.stdout.take().context("relay stdout")?;
                std::io::BufReader::new(stdout).read_line(&mut line)?;
                let (in_port, out_port) = parse_ports(&line)
                    .ok_or_else(|| anyhow!("relay process said {line:?}, not its ports"))?;
                Ok(RunningRelay {
                    in_port,
                    out_port,
                    child: Some(child),
                    thread: None,
                })
            }
            RelayPlace::Thread => {
                let (inbound, outbound) = bind_pair()?;
                let in_port = inbound.local_addr()?.port();
                let out_port = outbound.local_addr()?.port();
                let thread =
                    std::thread::spawn(move || serve_relay(runtime, relay, inbound, outbound));
                Ok(RunningRelay {
                    in_port,
                    out_port,
                    child: None,
                    thread: Some(thread),
                })
            }
        }
    }

    fn finish(self) -> Result<()> {
        if let Some(mut child) = self.child {
            let status = child.wait()?;
            if !status.success() {
                bail!("relay process exited with {status}");
            }
        }
        if let Some(thread) = self.thread {
            thread
                .join()
                .map_err(|_| anyhow!("relay thread panicked"))??;
        }
        Ok(())
    }
}

/// This program again, as the relay: the words this process was started with up to the
/// subcommand's name (`warren perf loopback-floor`, or `perf loopback-floor` for the `perf`
/// example), then `--relay-worker ...`. Taken from the process's own arguments, not from the
/// executable's name, so that a renamed binary (`warren-<commit>`) still finds its way.
fn relay_command(runtime: Runtime, relay: Relay) -> Result<Command> {
    let mut cmd = this_program_as(COMMAND)?;
    cmd.arg("--relay-worker")
        .arg("--runtime")
        .arg(format!("{runtime:?}").to_lowercase())
        .arg("--relay")
        .arg(format!("{relay:?}").to_lowercase());
    Ok(cmd)
}

/// This executable with the arguments it was started with up to and including `subcommand`
/// (a hidden perf subcommand starting a helper process of its own: `warren perf <subcommand>`
/// or, run as the `perf` example, `perf <subcommand>`).
pub(crate) fn this_program_as(subcommand: &str) -> Result<Command> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let words = argv
        .iter()
        .position(|a| a == subcommand)
        .with_context(|| format!("this process was not started as {subcommand}"))?;
    let mut cmd = Command::new(&exe);
    cmd.args(&argv[..=words]);
    Ok(cmd)
}

fn parse_ports(line: &str) -> Option<(u16, u16)> {
    let mut it = line.split_whitespace().map(|p| p.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

fn bind_pair() -> Result<(TcpListener, TcpListener)> {
    Ok((
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
    ))
}

/// The relay process: binds two ports, prints them, relays one connection's bytes from the
/// first to the second until the first closes.
fn relay_worker_main(runtime: Runtime, relay: Relay) -> Result<()> {
    let (inbound, outbound) = bind_pair()?;
    println!(
        "{} {}",
        inbound.local_addr()?.port(),
        outbound.local_addr()?.port()
    );
    std::io::stdout().flush()?;
    serve_relay(runtime, relay, inbound, outbound)
}

fn serve_relay(
    runtime: Runtime,
    relay: Relay,
    inbound: TcpListener,
    outbound: TcpListener,
) -> Result<()> {
    // The consumer connects first, so nothing the producer sends waits for it.
    let (out_sock, _) = outbound.accept()?;
    let (in_sock, _) = inbound.accept()?;
    out_sock.set_nodelay(true)?;
    in_sock.set_nodelay(true)?;
    match runtime {
        Runtime::Threads => match relay {
            Relay::Direct => relay_threads_direct(in_sock, out_sock),
            Relay::Handoff => relay_threads_handoff(in_sock, out_sock),
        },
        Runtime::Tokio => {
            // The broker's runtime: multi-thread, one worker per core.
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                in_sock.set_nonblocking(true)?;
                out_sock.set_nonblocking(true)?;
                let rd = tokio::net::TcpStream::from_std(in_sock)?;
                let wr = tokio::net::TcpStream::from_std(out_sock)?;
                match relay {
                    Relay::Direct => tokio::spawn(relay_tokio_direct(rd, wr)).await?,
                    Relay::Handoff => relay_tokio_handoff(rd, wr).await,
                }
            })
        }
    }
}

fn relay_threads_direct(mut rd: TcpStream, mut wr: TcpStream) -> Result<()> {
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        let n = rd.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        wr.write_all(&buf[..n])?;
    }
}

/// Reader thread → channel → writer thread. Chunks, not messages: a blocking reader has no
/// framing to do, and the question here is the wake-up, which a chunk costs as a message does.
fn relay_threads_handoff(mut rd: TcpStream, mut wr: TcpStream) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let writer = std::thread::spawn(move || -> Result<()> {
        let mut out = Vec::with_capacity(READ_BYTES);
        while let Ok(first) = rx.recv() {
            out.clear();
            out.extend_from_slice(&first);
            while let Ok(more) = rx.try_recv() {
                out.extend_from_slice(&more);
            }
            wr.write_all(&out)?;
        }
        Ok(())
    });
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        let n = rd.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if tx.send(buf[..n].to_vec()).is_err() {
            break;
        }
    }
    drop(tx);
    writer
        .join()
        .map_err(|_| anyhow!("relay writer panicked"))?
}

async fn relay_tokio_direct(rd: tokio::net::TcpStream, wr: tokio::net::TcpStream) -> Result<()> {
    forward_direct(rd, wr, READ_BYTES).await
}

/// The cheapest relay: what one socket reads (up to `read_bytes` at a time), the same task
/// writes to the other (both floors' `direct` relay).
pub(crate) async fn forward_direct(
    mut rd: impl tokio::io::AsyncRead + Unpin,
    mut wr: impl tokio::io::AsyncWrite + Unpin,
    read_bytes: usize,
) -> Result<()> {
    let mut buf = vec![0u8; read_bytes];
    loop {
        let n = rd.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        wr.write_all(&buf[..n]).await?;
    }
}

/// The broker's shape: the reading task cuts the stream into messages and hands each to the
/// writing task through an unbounded channel (the broker's per-connection event channel is a
/// mutex-guarded queue with a waker, the same cost); the writing task takes what is queued,
/// copies it into its output buffer and writes it in one call.
async fn relay_tokio_handoff(
    mut rd: tokio::net::TcpStream,
    mut wr: tokio::net::TcpStream,
) -> Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<bytes::Bytes>();
    let writer = tokio::spawn(async move {
        let mut out = Vec::with_capacity(READ_BYTES);
        while let Some(first) = rx.recv().await {
            out.clear();
            out.extend_from_slice(&first);
            // Up to the broker's event batch per wake-up.
            for _ in 0..512 {
                match rx.try_recv() {
                    Ok(more) => out.extend_from_slice(&more),
                    Err(_) => break,
                }
            }
            wr.write_all(&out).await?;
        }
        Ok::<(), anyhow::Error>(())
    });
    let reader = tokio::spawn(async move {
        let mut buf = bytes::BytesMut::with_capacity(READ_BYTES);
        loop {
            buf.reserve(READ_BYTES.saturating_sub(buf.capacity() - buf.len()));
            let n = rd.read_buf(&mut buf).await?;
            if n == 0 {
                return Ok::<(), anyhow::Error>(());
            }
            // The stream carries a size prefix per message: u32 BE, then the body.
            while buf.len() >= 4 {
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if buf.len() < 4 + len {
                    break;
                }
                let message = buf.split_to(4 + len).freeze();
                if tx.send(message).is_err() {
                    return Ok(());
                }
            }
        }
    });
    reader.await??;
    writer.await?
}

/// What the producer did, read when the measurement ends.
struct Counters {
    sent: AtomicU64,
    groups: AtomicU64,
}

/// Runs one measurement: relay, consumer, producer for `config.seconds`, then drains.
pub fn measure(config: &FloorConfig, place: RelayPlace) -> Result<FloorResult> {
    if config.rate_per_s <= 0.0 {
        bail!("the rate must be positive");
    }
    let relay = RunningRelay::start(config.runtime, config.relay, place)?;
    let consumer = TcpStream::connect(("127.0.0.1", relay.out_port))?;
    let producer = TcpStream::connect(("127.0.0.1", relay.in_port))?;
    consumer.set_nodelay(true)?;
    producer.set_nodelay(true)?;
    let counters = Arc::new(Counters {
        sent: AtomicU64::new(0),
        groups: AtomicU64::new(0),
    });
    let (received, histogram) = match config.runtime {
        Runtime::Threads => {
            let consumer_thread = { std::thread::spawn(move || consume_blocking(consumer)) };
            {
                let counters = counters.clone();
                let config = *config;
                std::thread::spawn(move || produce_blocking(producer, &config, &counters))
                    .join()
                    .map_err(|_| anyhow!("producer thread panicked"))??;
            }
            consumer_thread
                .join()
                .map_err(|_| anyhow!("consumer thread panicked"))??
        }
        Runtime::Tokio => {
            // `warren perf`'s runtime: multi-thread, one worker per core.
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let config = *config;
            let counters = counters.clone();
            rt.block_on(async move {
                consumer.set_nonblocking(true)?;
                let consumer = tokio::net::TcpStream::from_std(consumer)?;
                let consuming = tokio::spawn(consume_tokio(consumer));
                match config.pace {
                    Pace::Tick => {
                        producer.set_nonblocking(true)?;
                        let producer = tokio::net::TcpStream::from_std(producer)?;
                        tokio::spawn(
                            async move { produce_tokio(producer, &config, &counters).await },
                        )
                        .await??;
                    }
                    // Tokio's timer cannot wake the producer between milliseconds: it runs
                    // on a thread of its own, writing from there.
                    Pace::Exact => {
                        tokio::task::spawn_blocking(move || {
                            produce_blocking(producer, &config, &counters)
                        })
                        .await??;
                    }
                }
                consuming.await?
            })?
        }
    };
    relay.finish()?;
    let sent = counters.sent.load(Ordering::Relaxed);
    if received != sent {
        bail!("sent {sent} messages but the consumer received {received}");
    }
    Ok(FloorResult {
        config: *config,
        sent,
        received,
        groups: counters.groups.load(Ordering::Relaxed),
        latency: Percentiles::of(&histogram),
    })
}

/// Appends a group of `n` stamped messages (u32 BE length, then the body) to `out`.
fn stamp_group(out: &mut Vec<u8>, body: &mut [u8], n: u64, seq: &mut u64) {
    for _ in 0..n {
        payload::stamp(body, payload::now_ns(), 0, *seq);
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(body);
        *seq += 1;
    }
}

fn produce_blocking(mut sock: TcpStream, config: &FloorConfig, counters: &Counters) -> Result<()> {
    if config.pace == Pace::Exact {
        fine_timer_slack();
    }
    let mut body = payload::new_body(config.size);
    let mut out = Vec::with_capacity(READ_BYTES);
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(config.seconds);
    let mut limiter = RateLimiter::new(config.rate_per_s, started);
    let mut seq = 0u64;
    while Instant::now() < end {
        let n = match config.pace {
            // A producer thread's own wait, to the microsecond.
            Pace::Exact => limiter.acquire_blocking(MAX_GROUP, Duration::from_millis(100)),
            Pace::Tick => limiter.take_due(Instant::now(), MAX_GROUP),
        };
        if n == 0 {
            if config.pace == Pace::Tick {
                // Tokio's timer: the first whole millisecond since the start at or after the
                // next message's due time.
                let due = limiter.next_due();
                let ms = due
                    .saturating_duration_since(started)
                    .as_micros()
                    .div_ceil(1000);
                let wake = started + Duration::from_millis(ms as u64);
                std::thread::sleep(wake.saturating_duration_since(Instant::now()));
            }
            continue;
        }
        out.clear();
        stamp_group(&mut out, &mut body, n, &mut seq);
        sock.write_all(&out)?;
        counters.sent.fetch_add(n, Ordering::Relaxed);
        counters.groups.fetch_add(1, Ordering::Relaxed);
    }
    sock.shutdown(std::net::Shutdown::Write)?;
    Ok(())
}

/// Lets this thread's sleeps end within 1 µs of their deadline instead of Linux's default
/// 50 µs timer slack, which would send the messages of 50k msg/s in groups again.
fn fine_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}

async fn produce_tokio(
    mut sock: tokio::net::TcpStream,
    config: &FloorConfig,
    counters: &Counters,
) -> Result<()> {
    let mut body = payload::new_body(config.size);
    let mut out = Vec::with_capacity(READ_BYTES);
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(config.seconds);
    let mut limiter = RateLimiter::new(config.rate_per_s, started);
    let mut seq = 0u64;
    while Instant::now() < end {
        // As `warren perf`'s producer: wait for what is due, send it as one group.
        let n = limiter.acquire(MAX_GROUP).await;
        out.clear();
        stamp_group(&mut out, &mut body, n, &mut seq);
        sock.write_all(&out).await?;
        counters.sent.fetch_add(n, Ordering::Relaxed);
        counters.groups.fetch_add(1, Ordering::Relaxed);
    }
    sock.shutdown().await?;
    Ok(())
}

/// Takes every whole message off the front of `buf`, recording its flight time.
fn record_messages(
    buf: &mut Vec<u8>,
    start: &mut usize,
    histogram: &mut Histogram<u64>,
    received: &mut u64,
) {
    loop {
        let rest = &buf[*start..];
        if rest.len() < 4 {
            break;
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if rest.len() < 4 + len {
            break;
        }
        if let Some(stamp) = payload::parse(&rest[4..4 + len]) {
            let flight_us = payload::flight_us(stamp.sent_ns, payload::now_ns());
            histogram.saturating_record(flight_us.max(1));
        }
        *received += 1;
        *start += 4 + len;
    }
    // Keep the partial message at the front.
    buf.drain(..*start);
    *start = 0;
}

fn consume_blocking(mut sock: TcpStream) -> Result<(u64, Histogram<u64>)> {
    let mut histogram = new_histogram();
    let mut received = 0u64;
    let mut buf = Vec::with_capacity(2 * READ_BYTES);
    let mut chunk = vec![0u8; READ_BYTES];
    let mut start = 0usize;
    loop {
        let n = sock.read(&mut chunk)?;
        if n == 0 {
            return Ok((received, histogram));
        }
        buf.extend_from_slice(&chunk[..n]);
        record_messages(&mut buf, &mut start, &mut histogram, &mut received);
    }
}

async fn consume_tokio(mut sock: tokio::net::TcpStream) -> Result<(u64, Histogram<u64>)> {
    let mut histogram = new_histogram();
    let mut received = 0u64;
    let mut buf = Vec::with_capacity(2 * READ_BYTES);
    let mut chunk = vec![0u8; READ_BYTES];
    let mut start = 0usize;
    loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok((received, histogram));
        }
        buf.extend_from_slice(&chunk[..n]);
        record_messages(&mut buf, &mut start, &mut histogram, &mut received);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(runtime: Runtime, relay: Relay, pace: Pace) -> FloorConfig {
        FloorConfig {
            runtime,
            relay,
            pace,
            rate_per_s: 2000.0,
            seconds: 0.5,
            size: 1000,
        }
    }

    #[test]
    fn every_variant_delivers_every_message_with_a_flight_time() {
        for runtime in [Runtime::Tokio, Runtime::Threads] {
            for relay in [Relay::Direct, Relay::Handoff] {
                for pace in [Pace::Tick, Pace::Exact] {
                    let c = config(runtime, relay, pace);
                    let r = measure(&c, RelayPlace::Thread).unwrap();
                    // 0.5 s at 2000 msg/s: ~1000 messages (fewer when a loaded machine stalls
                    // the producer past the limiter's catch-up).
                    assert!(r.sent > 100, "{runtime:?} {relay:?} {pace:?}: {r:?}");
                    assert_eq!(r.received, r.sent);
                    assert_eq!(r.latency.count, r.sent);
                    assert!(r.latency.p50_us >= 1 && r.latency.p50_us <= r.latency.max_us);
                    assert!(r.groups >= 1 && r.groups <= r.sent);
                }
            }
        }
    }

    #[test]
    fn messages_split_across_reads_are_reassembled() {
        let mut body = payload::new_body(100);
        let mut stream = vec![];
        let mut seq = 0;
        stamp_group(&mut stream, &mut body, 3, &mut seq);
        let mut histogram = new_histogram();
        let mut received = 0;
        let mut buf = vec![];
        let mut start = 0;
        // Fed in 7-byte pieces: lengths and bodies both straddle reads.
        for piece in stream.chunks(7) {
            buf.extend_from_slice(piece);
            record_messages(&mut buf, &mut start, &mut histogram, &mut received);
        }
        assert_eq!(received, 3);
        assert_eq!(histogram.len(), 3);
        assert!(buf.is_empty());
    }

    #[test]
    fn ports_line_parses() {
        assert_eq!(parse_ports("123 456\n"), Some((123, 456)));
        assert_eq!(parse_ports("123\n"), None);
        assert_eq!(parse_ports("x y"), None);
    }
}

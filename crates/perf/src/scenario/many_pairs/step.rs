//! One many-pairs step at one N: size it to the descriptor limits (the tool's, split over
//! worker processes, and a local broker's), attach every client, start every sender at the
//! same instant, send for the step's duration, drain, and account for every message.
//!
//! Accounting: "confirmed" messages are the broker's responsibility. After sending, the
//! receivers drain the queues until passive declares find every queue empty and nothing more
//! arrives (or the drain deadline passes). Then the receivers close, which returns anything
//! delivered but unacked to its queue, and the queues are counted once more: what is still
//! queued is "undelivered"; "lost" is what was confirmed but is neither received nor queued.

use super::counters::{Counters, InFlight};
use super::link::Link;
use super::worker::{queue_name, Plan, Sent};
use crate::broker_proc::BrokerProcess;
use crate::client::{BrokerUris, Channel, Connection, QueueOptions};
use crate::fd_limit;
use crate::payload;
use crate::scenario::{Amqp10Address, Protocol};
use crate::stats::{new_histogram, Percentiles};
use anyhow::{anyhow, bail, Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Descriptors the tool keeps for itself beyond its clients (runtime, stdio, pipes, control).
const TOOL_RESERVE_FDS: u64 = 64;
/// Descriptors left to a broker beyond the step's clients (its listeners, store files, the
/// tool's control connection).
const BROKER_RESERVE_FDS: u64 = 128;
/// How often the messages in flight are read while the senders run (for their peak).
const IN_FLIGHT_EVERY: Duration = Duration::from_millis(100);
/// Channels used at once for passive declares and deletes.
const CONTROL_CHANNELS: usize = 16;

#[derive(Debug, Clone)]
pub struct StepConfig {
    pub uri: String,
    /// N: senders in the step.
    pub senders: u32,
    pub senders_per_receiver: u32,
    pub duration: Duration,
    /// One message per sender per period (100 ms: the report's 10 msg/s).
    pub period: Duration,
    pub body_bytes: usize,
    pub prefetch: u16,
    /// Worker processes to use; None decides from the descriptor limit.
    pub workers: Option<u32>,
    /// The `warren` binary that worker processes run.
    pub worker_exe: Option<PathBuf>,
    pub attach_timeout: Duration,
    pub confirm_wait: Duration,
    pub drain_timeout: Duration,
    pub protocol: Protocol,
    /// How AMQP 1.0 links address a queue (`Auto` is resolved against the broker).
    pub amqp10_address: Amqp10Address,
}

#[derive(Debug, Clone, Default)]
pub struct StepResult {
    pub requested_senders: u32,
    pub senders: u64,
    pub receivers: u64,
    /// Why fewer clients than asked for ran (a descriptor limit, or attach failures).
    pub capped: Vec<String>,
    /// 0 when every client ran inside the tool's own process.
    pub worker_processes: u32,
    pub offered_per_s: f64,
    pub achieved_per_s: f64,
    pub sent: Sent,
    pub received: u64,
    pub undelivered: u64,
    pub lost: u64,
    /// Whether the drain found every queue empty before its deadline.
    pub drained: bool,
    pub latency: Percentiles,
    pub broker_rss_bytes: Option<u64>,
    /// Messages in flight when the broker's RSS was read (None when worker processes hold
    /// clients: their counts are not read while they send).
    pub in_flight_at_rss: Option<InFlight>,
    /// The reading with the most messages in flight (one every `IN_FLIGHT_EVERY`) (every `IN_FLIGHT_EVERY`) up to then.
    pub peak_in_flight: Option<InFlight>,
    pub tool_fd_limit: Option<u64>,
    pub broker_fd_limit: Option<u64>,
    /// The queue address style AMQP 1.0 links used (None over 0-9-1).
    pub amqp10_address: Option<Amqp10Address>,
}

/// Clients (connections) in the first `groups` groups.
fn clients_in(groups: u64, senders: u64, per_receiver: u64) -> u64 {
    groups + (groups * per_receiver).min(senders)
}

/// The most whole groups whose clients fit in `fds`.
fn groups_fitting(fds: u64, senders: u64, per_receiver: u64) -> u64 {
    let (mut lo, mut hi) = (0u64, senders.div_ceil(per_receiver));
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if clients_in(mid, senders, per_receiver) <= fds {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Local ports to one broker address: every client connection takes one.
fn ephemeral_ports() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    Some(hi.saturating_sub(lo) + 1)
}

/// The `warren` binary for worker processes: `WARREN_BIN`, else this program if it is
/// `warren` (test binaries are not).
pub fn default_worker_exe() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WARREN_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    (exe.file_stem()? == "warren").then_some(exe)
}

pub async fn step(cfg: &StepConfig) -> Result<StepResult> {
    let uris = BrokerUris::parse(&cfg.uri).map_err(|e| anyhow!(e))?;
    // Topology and the measured broker process: the first node.
    let uri = uris.first();
    let k = u64::from(cfg.senders_per_receiver.max(1));
    let n = u64::from(cfg.senders);
    if n == 0 {
        bail!("many-pairs needs at least one sender");
    }
    let mut result = StepResult {
        requested_senders: cfg.senders,
        ..Default::default()
    };
    let mut groups = n.div_ceil(k);

    // The broker's side: one descriptor per client, if we can see the broker's process.
    let broker = uri
        .is_local()
        .then(|| BrokerProcess::find_by_port(uri.port))
        .flatten();
    if let Some(b) = broker {
        result.broker_fd_limit = fd_limit::limit_of(b.pid);
        if let (Some(limit), Some(open)) = (result.broker_fd_limit, fd_limit::open_of_pid(b.pid)) {
            let room = limit.saturating_sub(open + BROKER_RESERVE_FDS);
            let fit = groups_fitting(room, n, k);
            if fit < groups {
                result.capped.push(format!(
                    "the broker's open-files limit ({limit}, {open} open) leaves room for {room} connections"
                ));
                groups = fit;
            }
        }
    }
    if let Some(ports) = ephemeral_ports() {
        let fit = groups_fitting(ports.saturating_sub(1000), n, k);
        if fit < groups {
            result.capped.push(format!(
                "the machine's ephemeral port range has {ports} ports to one broker address"
            ));
            groups = fit;
        }
    }

    // The tool's side: worker processes when one process cannot hold every client.
    let soft = fd_limit::raise_soft_to_hard().unwrap_or(1024);
    result.tool_fd_limit = Some(soft);
    let own_room = soft.saturating_sub(fd_limit::own_open().unwrap_or(0) + TOOL_RESERVE_FDS);
    let per_process = soft.saturating_sub(TOOL_RESERVE_FDS);
    let exe = cfg.worker_exe.clone().or_else(default_worker_exe);
    let mut processes = match cfg.workers {
        Some(w) if w > 0 => u64::from(w),
        _ if clients_in(groups, n, k) <= own_room => 0,
        _ => clients_in(groups, n, k).div_ceil(per_process.max(1)),
    };
    if processes > 0 && exe.is_none() {
        let fit = groups_fitting(own_room, n, k);
        result.capped.push(format!(
            "worker processes need the warren binary (set WARREN_BIN); one process may hold {own_room} connections"
        ));
        groups = fit;
        processes = 0;
    }
    if groups == 0 {
        bail!(
            "many-pairs: no room for a single receiver and its senders ({})",
            result.capped.join("; ")
        );
    }
    result.worker_processes = processes as u32;

    let control = Connection::open_named(uri, "many-pairs control")
        .await
        .context("opening the control connection")?;
    let run_tag = format!("{:x}", payload::now_ns() / 1000 % (1 << 40));
    let amqp10_address = {
        let (product, version) = control.server_identity();
        cfg.amqp10_address.resolve(product, version)
    };
    if cfg.protocol == Protocol::Amqp10 {
        result.amqp10_address = Some(amqp10_address);
    }
    let all_groups: Vec<u32> = (0..groups as u32).collect();
    let chunk = all_groups.len().div_ceil(processes.max(1) as usize);
    let plan = |groups: &[u32]| Plan {
        uri: cfg.uri.clone(),
        run_tag: run_tag.clone(),
        groups: groups.to_vec(),
        total_senders: cfg.senders,
        senders_per_receiver: k as u32,
        period_ms: cfg.period.as_millis() as u64,
        body_bytes: cfg.body_bytes,
        prefetch: cfg.prefetch,
        attach_timeout_ms: cfg.attach_timeout.as_millis() as u64,
        protocol: cfg.protocol,
        amqp10_address,
    };
    // AMQP 1.0 links attach to existing queues only: declare them first, over 0-9-1.
    if cfg.protocol == Protocol::Amqp10 {
        declare_queues(
            &control,
            &all_groups
                .iter()
                .map(|&g| queue_name(&run_tag, g))
                .collect::<Vec<_>>(),
        )
        .await
        .context("declaring the step's queues")?;
    }

    // Attach every client before any sender starts (the report's note on speed).
    let attach_started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, share) in all_groups.chunks(chunk).enumerate() {
        let plan = plan(share);
        let exe = exe.clone();
        tasks.spawn(async move {
            let linked = match exe.filter(|_| processes > 0) {
                Some(exe) => Link::attach_process(&exe, plan).await,
                None => Ok(Link::attach_local(plan).await),
            };
            (i, linked)
        });
    }
    let mut links = vec![];
    let mut queues = vec![];
    let mut attach_errors = vec![];
    let mut failure = None;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((i, Ok((link, attached)))) => {
                result.senders += attached.senders;
                result.receivers += attached.receivers;
                queues.extend(attached.groups.iter().map(|&g| queue_name(&run_tag, g)));
                attach_errors.extend(attached.error);
                links.push((i, link));
            }
            Ok((_, Err(e))) => failure = Some(e),
            Err(e) => failure = Some(anyhow!(e)),
        }
    }
    if let Some(e) = failure {
        close_all(links).await;
        delete_queues(&control, &queues).await;
        control.close().await;
        return Err(e);
    }
    links.sort_by_key(|(i, _)| *i);
    if let Some(first) = attach_errors.first() {
        result.capped.push(format!(
            "{} of {} clients attached; the rest failed: {first}",
            result.senders + result.receivers,
            clients_in(groups, n, k)
        ));
    }
    eprintln!(
        "   attached {} senders and {} receivers in {:.1} s ({})",
        result.senders,
        result.receivers,
        attach_started.elapsed().as_secs_f64(),
        match processes {
            0 => "in this process".to_owned(),
            p => format!("{p} worker processes"),
        }
    );
    if result.senders == 0 {
        close_all(links).await;
        delete_queues(&control, &queues).await;
        control.close().await;
        bail!("no client attached: {}", attach_errors.join("; "));
    }

    // Send: every worker starts its senders at the same instant.
    let start_ns = payload::now_ns() + 500_000_000;
    let start = Instant::now() + Duration::from_millis(500);
    let duration = cfg.duration;
    let confirm_wait = cfg.confirm_wait;
    // The clients' counts, when every client runs in this process.
    let counters: Option<Vec<Arc<Counters>>> = links.iter().map(|(_, l)| l.counters()).collect();
    let rss = tokio::spawn(async move {
        // Sampled near the end of the sending window, when every queue and connection is busy.
        let margin = (duration / 10).min(Duration::from_secs(1));
        let at = start + duration - margin;
        // The messages in flight until then: their most, and at the sampling instant.
        let mut peak = InFlight::default();
        if let Some(all) = &counters {
            tokio::time::sleep_until(start).await;
            while Instant::now() + IN_FLIGHT_EVERY < at {
                tokio::time::sleep(IN_FLIGHT_EVERY).await;
                peak = peak.max(InFlight::of(all));
            }
        }
        tokio::time::sleep_until(at).await;
        let rss = broker.and_then(|b| b.sample()).map(|s| s.rss_bytes);
        let in_flight = counters.as_deref().map(|all| {
            let now = InFlight::of(all);
            (now, peak.max(now))
        });
        (rss, in_flight)
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (i, mut link) in links {
        tasks.spawn(async move {
            let sent = link.send(start_ns, duration, confirm_wait).await;
            (i, link, sent)
        });
    }
    let mut links = vec![];
    let mut failure = None;
    while let Some(done) = tasks.join_next().await {
        let (i, link, sent) = done.map_err(|e| anyhow!(e))?;
        match sent {
            Ok(s) => add_sent(&mut result.sent, &s),
            Err(e) => failure = Some(e),
        }
        links.push((i, link));
    }
    if let Ok((rss, in_flight)) = rss.await {
        result.broker_rss_bytes = rss;
        result.in_flight_at_rss = in_flight.map(|(now, _)| now);
        result.peak_in_flight = in_flight.map(|(_, peak)| peak);
    }
    if let Some(e) = failure {
        close_all(links).await;
        delete_queues(&control, &queues).await;
        control.close().await;
        return Err(e);
    }
    let s = duration.as_secs_f64();
    // In ns: exact for whole-millisecond periods (10 msg/s is 1e9 / 1e8, no rounding).
    result.offered_per_s = result.senders as f64 * 1e9 / cfg.period.as_nanos().max(1) as f64;
    result.achieved_per_s = result.sent.published as f64 / s;

    // Drain: until the queues are empty and nothing more arrives, or the deadline.
    let deadline = Instant::now() + cfg.drain_timeout;
    let mut last_received = None;
    loop {
        let mut received = 0;
        for (_, link) in &mut links {
            received += link.received().await?;
        }
        let queued = queued_total(&control, &queues).await?;
        let settled = received >= result.sent.confirmed || last_received == Some(received);
        if queued == 0 && settled {
            result.drained = true;
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        last_received = Some(received);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Close the receivers (their unacked messages go back to the queues), then count.
    let mut histogram = new_histogram();
    let mut failure = None;
    let mut tasks = tokio::task::JoinSet::new();
    for (_, link) in links {
        tasks.spawn(link.close());
    }
    while let Some(done) = tasks.join_next().await {
        match done.map_err(|e| anyhow!(e)).and_then(|r| r) {
            Ok(closed) => {
                result.received += closed.received;
                for (value_us, count) in closed.latency_us {
                    histogram.saturating_record_n(value_us, count);
                }
            }
            Err(e) => failure = Some(e),
        }
    }
    let undelivered = queued_total(&control, &queues).await;
    delete_queues(&control, &queues).await;
    control.close().await;
    if let Some(e) = failure {
        return Err(e);
    }
    result.undelivered = undelivered?;
    result.lost = result
        .sent
        .confirmed
        .saturating_sub(result.received + result.undelivered);
    result.latency = Percentiles::of(&histogram);
    Ok(result)
}

fn add_sent(total: &mut Sent, s: &Sent) {
    total.published += s.published;
    total.confirmed += s.confirmed;
    total.nacked += s.nacked;
    total.unconfirmed += s.unconfirmed;
    total.publish_errors += s.publish_errors;
    total.late += s.late;
    total.skipped += s.skipped;
    total.max_per_sender = total.max_per_sender.max(s.max_per_sender);
}

async fn close_all(links: Vec<(usize, Link)>) {
    for (_, link) in links {
        let _ = link.close().await;
    }
}

/// Runs `per_queue` for every one of `queues`, spread over several channels of the control
/// connection at once; sums what it returns. The first error on a channel stops that channel.
async fn over_control_channels<F, Fut>(
    control: &Connection,
    queues: &[String],
    per_queue: F,
) -> std::result::Result<u64, crate::client::ClientError>
where
    F: Fn(Channel, String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = std::result::Result<u64, crate::client::ClientError>> + Send,
{
    let mut tasks = tokio::task::JoinSet::new();
    for part in 0..CONTROL_CHANNELS.min(queues.len()) {
        let control = control.clone();
        let per_queue = per_queue.clone();
        let names: Vec<String> = queues
            .iter()
            .skip(part)
            .step_by(CONTROL_CHANNELS)
            .cloned()
            .collect();
        tasks.spawn(async move {
            let ch = control.channel().await?;
            let mut total = 0u64;
            for q in names {
                total += per_queue(ch.clone(), q).await?;
            }
            let _ = ch.close().await;
            Ok::<u64, crate::client::ClientError>(total)
        });
    }
    let mut total = 0;
    let mut first_error = None;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(n)) => total += n,
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(e) => {
                first_error = first_error.or(Some(crate::client::ClientError::Io(e.to_string())))
            }
        }
    }
    first_error.map_or(Ok(total), Err)
}

/// Ready messages over all `queues` (passive declares).
async fn queued_total(control: &Connection, queues: &[String]) -> Result<u64> {
    over_control_channels(control, queues, |ch, q| async move {
        Ok(u64::from(ch.queue_message_count(&q).await?))
    })
    .await
    .context("counting queued messages (passive queue.declare)")
}

/// Declares `queues` (durable defaults, as a 0-9-1 receiver does).
async fn declare_queues(control: &Connection, queues: &[String]) -> Result<()> {
    over_control_channels(control, queues, |ch, q| async move {
        ch.queue_declare(&q, &QueueOptions::default()).await?;
        Ok(0)
    })
    .await?;
    Ok(())
}

/// Deletes `queues`, best effort (the step is over; a failure leaves a queue behind).
async fn delete_queues(control: &Connection, queues: &[String]) {
    let _ = over_control_channels(control, queues, |ch, q| async move {
        ch.queue_delete(&q).await?;
        Ok(0)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_fitting_counts_receivers_and_senders() {
        // Pairs: 2 descriptors per group.
        assert_eq!(groups_fitting(19_872, 10_000, 1), 9_936);
        assert_eq!(groups_fitting(100_000, 10_000, 1), 10_000);
        // 40 senders per receiver: 41 per group; the last group of 10 senders has 11.
        assert_eq!(clients_in(3, 90, 40), 93);
        assert_eq!(groups_fitting(92, 90, 40), 2);
        assert_eq!(groups_fitting(93, 90, 40), 3);
        assert_eq!(groups_fitting(1, 10, 1), 0);
    }
}

//! `warren perf scenario NAME`: one command per seed experiment. Each scenario runs its steps
//! against one broker (or two, back to back per step, with `--compare`), prints progress as
//! PerfTest-style interval lines, and writes a markdown report with the seed's tables (and,
//! when comparing, ratio columns of how many times better the first broker is) plus SVG/PNG
//! plots into `--out`. The report opens with a summary of its headline figures.

pub mod many_pairs;
pub mod mqperf;
pub mod oslo;
pub mod scale;
mod sweeps;

use crate::flags::PerfArgs;
use crate::output::RunResult;
use crate::runner::{self, RunOptions};
use anyhow::{anyhow, Result};
use clap::Parser;
use std::path::PathBuf;

pub const SCENARIOS: &[&str] = &[
    "publish-rate",
    "credit-flow",
    "consumers",
    "producers",
    "queues",
    "queue-types",
    "confirms",
    "acks",
    "exchange-types",
    "mqperf",
    "oslo-rpc",
    "many-pairs",
    "scale",
];

#[derive(Parser, Debug, Clone)]
#[command(
    name = "warren perf scenario",
    about = "Reproduce a seed benchmark report with one command"
)]
pub struct ScenarioArgs {
    /// publish-rate, credit-flow, consumers, producers, queues, queue-types, confirms, acks,
    /// exchange-types, mqperf, oslo-rpc, many-pairs, scale, or all.
    pub name: String,
    /// The broker under test: a URI, or a cluster's nodes as a comma-separated list (clients
    /// are spread over them).
    #[arg(
        long,
        alias = "uris",
        default_value = "amqp://guest:guest@localhost:5672"
    )]
    pub uri: String,
    /// A second broker (a URI or a comma-separated list of nodes): every step runs against
    /// both, back to back, and the tables get ratios.
    #[arg(long)]
    pub compare: Option<String>,
    /// Name of the first broker in tables (default: host:port).
    #[arg(long)]
    pub label: Option<String>,
    /// Name of the second broker in tables (default: host:port).
    #[arg(long)]
    pub compare_label: Option<String>,
    /// Seconds per step (default 30, or 3 with --quick).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Where reports and plots go.
    #[arg(long, default_value = "perf-reports")]
    pub out: PathBuf,
    /// Fewer, shorter steps at low rates: each scenario finishes in under 2 minutes (CI).
    #[arg(long)]
    pub quick: bool,
    /// Override the swept values (comma-separated: rates, counts, thread counts or N).
    #[arg(long)]
    pub steps: Option<String>,
    /// Row label for credit-flow: the server's credit setting this broker runs with.
    #[arg(long, default_value = "server default")]
    pub credit_label: String,
    /// Print interval lines for every step.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub progress: bool,
    /// many-pairs: the clients' protocol.
    #[arg(long, value_enum, default_value_t = Protocol::Amqp091)]
    pub protocol: Protocol,
    /// many-pairs over AMQP 1.0: how a queue is addressed. v2 is RabbitMQ 4's `/queues/<q>`
    /// (Warren's); v1 is RabbitMQ 3.x's amqp1_0 plugin's `/amq/queue/<q>`; auto picks v1 for
    /// a RabbitMQ below 4 (from its 0-9-1 server properties), v2 otherwise.
    #[arg(long, value_enum, default_value_t = Amqp10Address::Auto)]
    pub amqp10_address: Amqp10Address,
    /// many-pairs: senders per receiver (1: N sender-receiver pairs; the report's other
    /// setup is 40). N counts senders either way.
    #[arg(long, default_value_t = 1)]
    pub senders_per_receiver: u32,
    /// many-pairs: worker processes for the clients (default: as many as the open-files
    /// limit needs, none when this process can hold every connection).
    #[arg(long)]
    pub workers: Option<u32>,
    /// many-pairs: seconds to wait for the queues to drain after sending (default 30).
    #[arg(long)]
    pub drain_timeout: Option<f64>,
    /// oslo-rpc: which modes to run, comma-separated (call, cast, notify; default all three).
    /// scale: which sweeps (queues, bindings, connections, consumers; default all four).
    #[arg(long)]
    pub modes: Option<String>,
    /// scale: the largest object count; the sweep goes 1k, 4k, 16k, ... up to it (1000000
    /// for the million queues and bindings on a machine that holds them).
    #[arg(long, default_value_t = 64_000)]
    pub scale_max: u64,
    /// scale: the first broker's management API (`http://host:15672`): HTTP API timings, and
    /// its memory from /api/nodes when its process cannot be read.
    #[arg(long)]
    pub management_url: Option<String>,
    /// scale: the compared broker's management API.
    #[arg(long)]
    pub compare_management_url: Option<String>,
    /// scale: the first broker's Prometheus endpoint (`http://host:15692`; /metrics is added).
    #[arg(long)]
    pub prometheus_url: Option<String>,
    /// scale: the compared broker's Prometheus endpoint.
    #[arg(long)]
    pub compare_prometheus_url: Option<String>,
    /// scale: the first broker's process id, for its RSS from /proc (default: the local
    /// process listening on the URI's port, when there is one).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// scale: the compared broker's process id.
    #[arg(long)]
    pub compare_broker_pid: Option<u32>,
}

/// The clients' wire protocol.
#[derive(
    clap::ValueEnum,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Protocol {
    /// AMQP 0-9-1: a connection and one channel per client.
    #[default]
    #[value(name = "amqp091")]
    Amqp091,
    /// AMQP 1.0: a connection, a session and one link per client.
    #[value(name = "amqp10")]
    Amqp10,
}

/// How many-pairs' AMQP 1.0 links address a queue.
#[derive(
    clap::ValueEnum,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Amqp10Address {
    /// v1 for a RabbitMQ below 4, v2 for anything else.
    #[default]
    Auto,
    /// RabbitMQ 3.x's amqp1_0 plugin: `/amq/queue/<q>`.
    V1,
    /// RabbitMQ 4's v2 addresses (and Warren's): `/queues/<q>`, the name percent-encoded.
    V2,
}

impl Amqp10Address {
    /// Resolves `Auto` from the broker's 0-9-1 `product` and `version` server properties.
    pub fn resolve(self, product: &str, version: &str) -> Amqp10Address {
        match self {
            Amqp10Address::Auto => {
                let major: u32 = version
                    .split('.')
                    .next()
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(u32::MAX);
                if product.eq_ignore_ascii_case("RabbitMQ") && major < 4 {
                    Amqp10Address::V1
                } else {
                    Amqp10Address::V2
                }
            }
            chosen => chosen,
        }
    }

    /// The address of `queue` (after `resolve`; `Auto` addresses as v2).
    pub fn of_queue(self, queue: &str) -> String {
        match self {
            Amqp10Address::V1 => format!("/amq/queue/{queue}"),
            Amqp10Address::V2 | Amqp10Address::Auto => {
                let mut out = String::from("/queues/");
                for b in queue.bytes() {
                    // RFC 3986 unreserved characters stay; everything else is %-encoded.
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        out.push(b as char);
                    } else {
                        out.push_str(&format!("%{b:02X}"));
                    }
                }
                out
            }
        }
    }
}

/// One broker under test.
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub label: String,
    pub uri: String,
    /// Its management API and Prometheus endpoint, when given (scenario scale).
    pub management_url: Option<String>,
    pub prometheus_url: Option<String>,
    /// Its process, when given (else found by its port when local).
    pub pid: Option<u32>,
}

pub struct Ctx {
    pub args: ScenarioArgs,
    pub targets: Vec<Target>,
    pub step_s: f64,
    pub commands: Vec<String>,
}

impl Ctx {
    pub fn brokers(&self) -> Vec<String> {
        self.targets.iter().map(|t| t.label.clone()).collect()
    }

    /// The swept values: `--steps` when given, else the quick or full list.
    pub fn steps(&self, full: &[f64], quick: &[f64]) -> Vec<f64> {
        if let Some(s) = &self.args.steps {
            return s.split(',').filter_map(|v| v.trim().parse().ok()).collect();
        }
        if self.args.quick {
            quick.to_vec()
        } else {
            full.to_vec()
        }
    }

    /// Runs one PerfTest command line against every target, back to back.
    pub async fn perftest(&mut self, step: &str, args: &[String]) -> Result<Vec<RunResult>> {
        let mut results = vec![];
        let mut shown = args.to_vec();
        shown.extend(["--time".to_owned(), format!("{}", self.step_s)]);
        self.commands
            .push(format!("warren perf --uri URI {}", shown.join(" ")));
        for t in self.targets.clone() {
            let mut full = vec!["--uri".to_owned(), t.uri.clone()];
            full.extend(shown.iter().cloned());
            full.extend(["--id".to_owned(), format!("{}:{step}", t.label)]);
            let perf = PerfArgs::parse_perftest(full).map_err(|e| anyhow!("{e}"))?;
            eprintln!("== {} {step} on {}", self.args.name, t.label);
            let opts = RunOptions {
                print_intervals: self.args.progress,
                delete_queues: true,
                prometheus_port: None,
            };
            let r = runner::run(&perf, &opts).await?;
            eprint!("{}", crate::output::summary(&r));
            results.push(r);
        }
        Ok(results)
    }
}

fn default_label(uri: &str) -> String {
    crate::client::BrokerUris::parse(uri)
        .map(|u| u.first().addr())
        .unwrap_or_else(|_| uri.to_owned())
}

/// Lets `tasks` run for `duration`, then raises `stop` and waits for them all; returns the
/// seconds since `started` (the measured window of a step).
pub(crate) async fn run_then_stop(
    duration: std::time::Duration,
    started: std::time::Instant,
    stop: &std::sync::atomic::AtomicBool,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> f64 {
    tokio::time::sleep(duration).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    for t in tasks {
        let _ = t.await;
    }
    started.elapsed().as_secs_f64()
}

pub fn machine_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {mem_gib:.0} GiB RAM, Linux {}",
        kernel.trim()
    )
}

pub async fn main(argv: Vec<String>) -> Result<()> {
    let Some(args) =
        crate::flags::parse_or_help::<ScenarioArgs>("warren perf scenario", argv.iter().cloned())?
    else {
        return Ok(());
    };
    let names: Vec<String> = if args.name == "all" {
        SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else if SCENARIOS.contains(&args.name.as_str()) {
        vec![args.name.clone()]
    } else {
        return Err(anyhow!(
            "unknown scenario {:?}; one of: {}, all",
            args.name,
            SCENARIOS.join(", ")
        ));
    };
    for name in names {
        let path = run_scenario(&name, &args, &argv).await?;
        println!("report: {}", path.display());
    }
    Ok(())
}

/// Runs one scenario and writes its report; returns the markdown path.
pub async fn run_scenario(name: &str, args: &ScenarioArgs, argv: &[String]) -> Result<PathBuf> {
    let mut args = args.clone();
    args.name = name.to_owned();
    let mut targets = vec![Target {
        label: args
            .label
            .clone()
            .unwrap_or_else(|| default_label(&args.uri)),
        uri: args.uri.clone(),
        management_url: args.management_url.clone(),
        prometheus_url: args.prometheus_url.clone(),
        pid: args.broker_pid,
    }];
    if let Some(c) = &args.compare {
        let mut label = args
            .compare_label
            .clone()
            .unwrap_or_else(|| default_label(c));
        if label == targets[0].label {
            label += " (2)";
        }
        targets.push(Target {
            label,
            uri: c.clone(),
            management_url: args.compare_management_url.clone(),
            prometheus_url: args.compare_prometheus_url.clone(),
            pid: args.compare_broker_pid,
        });
    }
    let step_s = args.duration.unwrap_or(if args.quick { 3.0 } else { 30.0 });
    let mut ctx = Ctx {
        args,
        targets,
        step_s,
        commands: vec![],
    };
    if ctx.args.protocol != Protocol::Amqp091 && name != "many-pairs" {
        return Err(anyhow!(
            "--protocol applies to many-pairs only; {name} speaks AMQP 0-9-1"
        ));
    }
    let started = std::time::Instant::now();
    let mut report = match name {
        "mqperf" => mqperf::run(&mut ctx).await?,
        "oslo-rpc" => oslo::run(&mut ctx).await?,
        "many-pairs" => many_pairs::run(&mut ctx).await?,
        "scale" => scale::run(&mut ctx).await?,
        _ => sweeps::run(name, &mut ctx).await?,
    };
    report.brokers = ctx.brokers();
    report.commands = std::mem::take(&mut ctx.commands);
    let brokers = ctx
        .targets
        .iter()
        .map(|t| {
            format!(
                "`{}` at {}",
                t.label,
                crate::client::BrokerUris::parse(&t.uri)
                    .map(|u| u.to_string())
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(" and ");
    report.intro = format!(
        "{}\n\nRun with `warren perf scenario {}` against {brokers}; {} s per step{}; took {:.0} s.\n\nMachine: {}.",
        report.intro,
        argv.join(" "),
        ctx.step_s,
        if ctx.args.quick { " (--quick)" } else { "" },
        started.elapsed().as_secs_f64(),
        machine_description()
    );
    // The headline ratios on stdout too, so a terminal run reads at a glance.
    println!("{}", report.summary());
    report.write(&ctx.args.out, name)
}

#[cfg(test)]
mod tests {
    use super::Amqp10Address;

    #[test]
    fn auto_addresses_rabbitmq_3_with_v1_and_everything_else_with_v2() {
        let auto = Amqp10Address::Auto;
        assert_eq!(auto.resolve("RabbitMQ", "3.10.8"), Amqp10Address::V1);
        assert_eq!(auto.resolve("RabbitMQ", "4.0.5"), Amqp10Address::V2);
        assert_eq!(auto.resolve("Warren", "0.1.0"), Amqp10Address::V2);
        assert_eq!(auto.resolve("", ""), Amqp10Address::V2);
        // A choice made on the command line stands.
        assert_eq!(
            Amqp10Address::V2.resolve("RabbitMQ", "3.10.8"),
            Amqp10Address::V2
        );
    }

    #[test]
    fn queue_addresses() {
        assert_eq!(Amqp10Address::V1.of_queue("q-1"), "/amq/queue/q-1");
        assert_eq!(Amqp10Address::V2.of_queue("q-1"), "/queues/q-1");
        assert_eq!(Amqp10Address::V2.of_queue("a b/c"), "/queues/a%20b%2Fc");
    }
}

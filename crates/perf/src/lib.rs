//! `warren perf`: a PerfTest-compatible AMQP 0-9-1 load generator and the scenarios that
//! reproduce the seed benchmark reports, against Warren or any other AMQP broker.
//!
//! Entry points for the `warren` binary: `main_with_args` (builds its own runtime) or `run`
//! (from inside one). Both take the arguments after `perf`: either a PerfTest command line,
//! or `scenario NAME ...`.

mod accounting;
mod broker_http;
mod broker_proc;
pub mod client;
pub mod fd_limit;
pub mod flags;
pub mod floor;
mod output;
pub mod pairs_floor;
mod payload;
mod prometheus;
pub mod rate;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod stats;

pub use flags::PerfArgs;
pub use output::{IntervalRecord, RunResult};

/// `warren perf`'s command line as clap defines it, named `perf`, with `scenario` under it
/// (for its man pages and shell completions: crates/cli-docs). PerfTest's multi-letter short
/// options (`-qa`) are rewritten to these long ones before parsing, so only those show.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    PerfArgs::command()
        .name("perf")
        .subcommand(scenario::ScenarioArgs::command().name("scenario"))
}

/// Runs `warren perf ARGS` on a fresh multi-threaded tokio runtime. `args` excludes the
/// program name and the word `perf`.
pub fn main_with_args(args: Vec<String>) -> anyhow::Result<()> {
    if args.first().map(String::as_str) == Some(floor::COMMAND) {
        // Builds a runtime per measurement (and none for the threads variants).
        return floor::main(args[1..].to_vec());
    }
    if args.first().map(String::as_str) == Some(pairs_floor::COMMAND) {
        // Builds a runtime per measurement, and the relay process one of its own.
        return pairs_floor::main(args[1..].to_vec());
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

/// Runs `warren perf ARGS` on the current tokio runtime.
pub async fn run(args: Vec<String>) -> anyhow::Result<()> {
    if args.first().map(String::as_str) == Some("scenario") {
        return scenario::main(args[1..].to_vec()).await;
    }
    if args.first().map(String::as_str) == Some(floor::COMMAND) {
        // Its measurements run runtimes of their own, which a runtime's worker cannot start.
        let rest = args[1..].to_vec();
        return tokio::task::spawn_blocking(move || floor::main(rest)).await?;
    }
    if args.first().map(String::as_str) == Some(pairs_floor::COMMAND) {
        let rest = args[1..].to_vec();
        return tokio::task::spawn_blocking(move || pairs_floor::main(rest)).await?;
    }
    if args.first().map(String::as_str) == Some(scenario::many_pairs::WORKER_ARG) {
        // Internal: a many-pairs worker process, driven over stdin/stdout by the scenario.
        return scenario::many_pairs::worker_main().await;
    }
    let perf = match PerfArgs::parse_perftest(args) {
        Ok(p) => p,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {
            print!("{e}");
            println!("\nScenarios: warren perf scenario --help");
            return Ok(());
        }
        Err(e) => return Err(anyhow::anyhow!("{e}")),
    };
    let opts = runner::RunOptions {
        print_intervals: !perf.quiet,
        delete_queues: false,
        prometheus_port: perf
            .metrics_prometheus
            .then_some(perf.metrics_prometheus_port),
    };
    let result = runner::run(&perf, &opts).await?;
    print!("{}", output::summary(&result));
    if let Some(path) = &perf.json {
        output::write_json(path, &result)?;
    }
    if let Some(path) = &perf.csv {
        output::write_csv(path, &result)?;
    }
    Ok(())
}

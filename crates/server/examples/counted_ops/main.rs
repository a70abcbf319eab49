//! Broker operations repeated COUNT times in one process, for instruction counts: clients on
//! the same single-threaded runtime as the broker, over in-memory pipes (`serve_stream`, the
//! real connection and channel code), so `valgrind --tool=callgrind` counts the same
//! instructions run after run. `tools/bench/instructions.sh` runs each operation at two
//! counts and takes the difference per operation, which leaves out start-up and set-up.
//!
//! Usage: `counted_ops OPERATION COUNT`; prints what it did and fails if any operation did
//! not complete as a client would check it.
//!
//! - `publish-deliver`: 16 B transient messages through the default exchange to a no-ack
//!   consumer, in windows of 100, every delivery read back (`publish.rs`).
//! - `publish-deliver-broker`: the same run; `instructions.sh` counts the broker's connection
//!   tasks only in it (callgrind's `--toggle-collect` on `serve_stream`).
//! - `persistent-confirm`: 16 B persistent (delivery_mode 2) messages to a durable classic
//!   queue with publisher confirms, each confirmed before the next (`publish.rs`).
//! - `quorum-confirm`: the same to a quorum queue on a single-node group (`publish.rs`).
//! - `declare`, `declare-durable`: queue.declare of a new queue each time (`declare.rs`).
//! - `bind`: queue.bind of one queue to a topic exchange with a new pattern each time
//!   (`declare.rs`).
//! - `topic-route`: routing one key through a topic exchange holding TOPIC_BINDINGS
//!   (default 1,000,000) mixed `*`/`#` bindings (`topic.rs`).
//! - `amqp10-transfer`: 16 B AMQP 1.0 transfers to a queue, unsettled, each settled by the
//!   broker with accepted (`amqp10.rs`).

mod amqp10;
mod client;
mod declare;
mod node;
mod publish;
mod topic;

use client::Result;

async fn run(operation: &str, count: usize) -> Result<String> {
    match operation {
        "publish-deliver" | "publish-deliver-broker" => publish::publish_deliver(count).await,
        "persistent-confirm" => publish::confirmed(node::Storage::Classic, count).await,
        "quorum-confirm" => publish::confirmed(node::Storage::Quorum, count).await,
        "declare" => declare::declare(false, count).await,
        "declare-durable" => declare::declare(true, count).await,
        "bind" => declare::bind(count).await,
        "topic-route" => topic::route(count),
        "amqp10-transfer" => amqp10::transfer(count).await,
        other => Err(format!("unknown operation {other}")),
    }
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let operation = args.next().unwrap_or_default();
    let Some(count) = args.next().and_then(|a| a.parse().ok()) else {
        eprintln!("usage: counted_ops OPERATION COUNT");
        return std::process::ExitCode::FAILURE;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&operation, count)) {
        Ok(done) => {
            println!("{operation}: {done}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{operation}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

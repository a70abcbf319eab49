//! `warren perf` as a standalone program, for development before (and besides) the `warren`
//! binary: `cargo run --release -p warren-perf --example perf -- ARGS`.

fn main() -> anyhow::Result<()> {
    warren_perf::main_with_args(std::env::args().skip(1).collect())
}

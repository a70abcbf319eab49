# Developer shortcuts (https://github.com/casey/just). CI runs ./test.sh directly.

# Everything that must pass before a commit lands: generated code, format, lints.
pre:
    python3 tools/codegen/gen_methods.py --check
    cargo fmt --all -- --check
    cargo fmt --manifest-path fuzz/Cargo.toml -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Every test, real clients included (what .ci/run calls).
test:
    ./test.sh

# Regenerate the AMQP method code from the vendored spec XML.
codegen:
    python3 tools/codegen/gen_methods.py

# Micro-benchmarks (criterion: codec, routing, one queue, store), the publish→deliver
# instruction count against its baseline, and the side-by-side run against RabbitMQ.
bench:
    cargo bench -p warren-codec
    cargo bench -p warren-broker --bench routing --bench queue
    cargo bench -p warren-store --bench append
    tools/bench/instructions.sh
    tools/bench/side_by_side.sh 20

# Long fuzz run of every decoder (seconds per target; stable Rust, see docs/FUZZING.md).
fuzz seconds="3600":
    fuzz/run.sh {{seconds}}

# Cluster chaos with real processes: 20 rounds of each failure (docs/CLUSTERING.md).
chaos rounds="20":
    WARREN_CHAOS_ROUNDS={{rounds}} tools/chaos.sh

# Jepsen-style run: seeded faults (kill -9, SIGSTOP, restarts, rolling restarts, wipe and
# rejoin, add and forget a node, netns partitions, full and slow disks, and through a fault
# proxy bridges, one-way cuts, flapping, slow and reset links) against a 3-node cluster under
# confirmed publishers, consumers and definitions changes; checks that nothing confirmed is
# lost and every node agrees (tools/jepsen.py; prints the seed, `--seed` replays it).
jepsen minutes="60":
    cargo build --release -p warren --bin warren
    tests/interop/venv.sh
    WARREN_BIN=target/release/warren tests/interop/.venv/bin/python tools/jepsen.py --minutes {{minutes}}

# The same schedule (one seed, the faults both can take) against a RabbitMQ cluster of
# Debian's package, then Warren: the side-by-side record in docs/CLUSTERING.md.
jepsen-side-by-side minutes="15" seed="29112026":
    cargo build --release -p warren --bin warren
    tests/interop/venv.sh
    command -v rabbitmq-server >/dev/null || apt-get install -y -qq rabbitmq-server
    for broker in rabbitmq warren; do WARREN_BIN=target/release/warren tests/interop/.venv/bin/python tools/jepsen.py --broker $broker --minutes {{minutes}} --seed {{seed}} --faults kill-leader,kill-node,stall-leader,stall-node,restart-node,rolling-restart,wipe-rejoin,add-forget-node,partition-leader,partition-node,disk-full,slow-disk; done

# Run the broker with debug logs.
run:
    RUST_LOG=debug cargo run --release -- server

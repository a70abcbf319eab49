//! Recovery-time measurement (not a criterion bench: one run is minutes of
//! setup). Writes `WARREN_RECOVERY_MESSAGES` (default 1,000,000) persistent
//! 1 KiB messages to one durable queue with `SyncPolicy::Never` (setup speed
//! only), closes the store, then times `Store::open` on the real filesystem.
//! Run with `cargo bench -p warren-store --bench recovery`.

use std::time::Instant;

use warren_store::{Store, StoreOptions, StoredMessage, SyncPolicy};

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse beyond the env var.
    let messages: u64 = std::env::var("WARREN_RECOVERY_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let fill = StoreOptions {
        sync: SyncPolicy::Never,
        ..StoreOptions::default()
    };
    let (store, _) = Store::open(dir.path(), fill).expect("open");
    let queue = store.register_queue("recovery-bench").expect("queue");
    let msg = StoredMessage::new("amq.direct", "rk", vec![0u8; 20], vec![7u8; 1024]);
    let start = Instant::now();
    for _ in 0..messages {
        store.append(&[queue], &msg).expect("append");
    }
    store.close().expect("close");
    println!("wrote {messages} x 1 KiB in {:?}", start.elapsed());

    for recover_bodies in [false, true] {
        let opts = StoreOptions {
            recover_bodies,
            ..StoreOptions::default()
        };
        let start = Instant::now();
        let (store, recovered) = Store::open(dir.path(), opts).expect("reopen");
        let elapsed = start.elapsed();
        let live = recovered.queues[&queue].messages.len();
        println!(
            "recovery (recover_bodies={recover_bodies}): {live} live messages, {} segments, {} records in {elapsed:?}",
            recovered.report.segments_scanned, recovered.report.records_read
        );
        assert_eq!(live as u64, messages);
        drop(recovered);
        store.close().expect("close");
    }
}

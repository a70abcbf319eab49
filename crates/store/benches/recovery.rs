//! Recovery-time measurement (not a criterion bench: one run is minutes of
//! setup). Writes `WARREN_RECOVERY_MESSAGES` (default 1,000,000) persistent
//! 1 KiB messages to one durable queue with `SyncPolicy::Never` (setup speed
//! only), closes the store, then times `Store::open` on the real filesystem
//! and scanning every recovered message back with `scan_queue`.
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

    let start = Instant::now();
    let (store, recovered) = Store::open(dir.path(), StoreOptions::default()).expect("reopen");
    let elapsed = start.elapsed();
    let recovered_queue = &recovered.queues[&queue];
    let live = recovered_queue.live.len();
    println!(
        "recovery: {live} live messages ({} body bytes), {} segments, {} records in {elapsed:?}",
        recovered_queue.live_body_bytes,
        recovered.report.segments_scanned,
        recovered.report.records_read
    );
    assert_eq!(live, messages);

    let start = Instant::now();
    let set = &recovered_queue.live;
    let mut pos = recovered_queue.first.expect("messages recovered");
    let mut scanned = 0u64;
    let mut bytes = 0u64;
    loop {
        let scan = store
            .scan_queue(queue, pos, &mut |id| set.contains(id.0), 10_000, 16 << 20)
            .expect("scan");
        scanned += scan.messages.len() as u64;
        bytes += scan
            .messages
            .iter()
            .map(|m| m.message.body.len() as u64)
            .sum::<u64>();
        pos = scan.next;
        if scan.end_of_log {
            break;
        }
    }
    println!(
        "scan: {scanned} messages ({bytes} body bytes) in {:?}",
        start.elapsed()
    );
    assert_eq!(scanned, messages);
    assert_eq!(bytes, recovered_queue.live_body_bytes);
    drop(recovered);
    store.close().expect("close");
}

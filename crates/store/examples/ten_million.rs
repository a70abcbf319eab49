//! Memory check for deep queues (docs/STORAGE.md §9): appends `MESSAGES`
//! (default 10,000,000) persistent 1 KiB messages to one queue with
//! `SyncPolicy::Never`, closes the store, evicts the segment files from the
//! page cache, reopens it and reports the process RSS (`VmRSS` from
//! `/proc/self/status`) after the appends, after recovery and after scanning
//! every message back, the peak RSS of recovery (`VmHWM`, reset before the
//! open), and the times. Needs ≈ 10.5 GB free in `DIR` per 10M messages;
//! removes its data at the end.
//!
//! ```text
//! cargo run --release -p warren-store --example ten_million -- DIR [MESSAGES]
//! ```

use std::path::PathBuf;
use std::time::Instant;

use warren_store::{Store, StoreOptions, StoredMessage, SyncPolicy};

/// A field of /proc/self/status in MiB (`VmRSS`, `VmHWM`).
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Resets `VmHWM` to the current RSS (Linux ≥ 4.0).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// RSS after handing freed heap memory back to the OS: what is really in use.
/// (glibc keeps freed memory, such as recovery's transient tables, for reuse.)
fn trimmed_rss_mib() -> f64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
    status_mib("VmRSS")
}

/// Drops the segment files from the page cache, so recovery reads the disk.
fn evict(dir: &std::path::Path) {
    use std::os::fd::AsRawFd;
    for entry in std::fs::read_dir(dir.join("msgs"))
        .expect("msgs dir")
        .flatten()
    {
        if let Ok(file) = std::fs::File::open(entry.path()) {
            // SAFETY: plain syscall on a valid open descriptor.
            unsafe {
                libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let parent = PathBuf::from(args.next().expect("usage: ten_million DIR [MESSAGES]"));
    let messages: u64 = args
        .next()
        .map_or(10_000_000, |n| n.parse().expect("MESSAGES"));
    std::fs::create_dir_all(&parent).expect("create DIR");
    let tmp = tempfile::tempdir_in(&parent).expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let dir = dir.as_path();
    println!("{messages} x 1 KiB messages in {}", dir.display());
    println!("RSS at start: {:.1} MiB", status_mib("VmRSS"));

    let fill = StoreOptions {
        sync: SyncPolicy::Never,
        ..StoreOptions::default()
    };
    let (store, _) = Store::open(dir, fill).expect("open");
    let queue = store.register_queue("deep").expect("queue");
    let msg = StoredMessage {
        published_at_ms: 1_700_000_000_000,
        ..StoredMessage::new("amq.direct", "deep", vec![0u8; 20], vec![7u8; 1024])
    };
    let start = Instant::now();
    for _ in 0..messages {
        store.append(&[queue], &msg).expect("append");
    }
    store.flush().expect("flush");
    let stats = store.stats();
    println!(
        "appended in {:.1} s: {} segments, {:.2} GB; RSS {:.1} MiB (store open, {} live references)",
        start.elapsed().as_secs_f64(),
        stats.segments,
        stats.bytes_written as f64 / 1e9,
        status_mib("VmRSS"),
        stats.live_references,
    );
    store.close().expect("close");
    println!("RSS after close: {:.1} MiB", status_mib("VmRSS"));

    for cache in ["cold", "warm"] {
        if cache == "cold" {
            evict(dir);
        }
        reset_peak();
        let start = Instant::now();
        let (store, recovered) = Store::open(dir, StoreOptions::default()).expect("reopen");
        let elapsed = start.elapsed();
        let q = &recovered.queues[&queue];
        assert_eq!(q.live.len(), messages);
        println!(
            "recovery ({cache} page cache): {:.1} s, {} live, {:.2} GB of bodies, {} segments; \
             RSS after {:.1} MiB (peak {:.1} MiB, {:.1} MiB after malloc_trim); \
             live set {:.2} MiB serialized",
            elapsed.as_secs_f64(),
            q.live.len(),
            q.live_body_bytes as f64 / 1e9,
            recovered.report.segments_scanned,
            status_mib("VmRSS"),
            status_mib("VmHWM"),
            trimmed_rss_mib(),
            q.live.serialized_size() as f64 / (1024.0 * 1024.0),
        );
        if cache == "warm" {
            reset_peak();
            let start = Instant::now();
            let set = &q.live;
            let mut pos = q.first.expect("first");
            let (mut scanned, mut bytes) = (0u64, 0u64);
            loop {
                let scan = store
                    .scan_queue(queue, pos, &mut |id| set.contains(id.0), 4096, 4 << 20)
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
            assert_eq!(scanned, messages);
            assert_eq!(bytes, q.live_body_bytes);
            println!(
                "scanned all {scanned} back in {:.1} s (4096 per call); RSS after {:.1} MiB, peak during scan {:.1} MiB",
                start.elapsed().as_secs_f64(),
                status_mib("VmRSS"),
                status_mib("VmHWM"),
            );
        }
        drop(recovered);
        store.close().expect("close");
    }
    drop(tmp);
    println!("removed {}", dir.display());
}

//! Giving memory back to the OS once the broker is idle. Chosen by measurement
//! (docs/benchmarks.md, "RSS after a burst"): the allocator stays glibc's malloc, and a
//! thread returns its free pages (`malloc_trim`) when the broker has been quiet for a while.
//!
//! glibc's malloc keeps what a burst freed in its per-thread arenas: after 1M × 1000 B
//! through a queue and back, the broker stayed at 119–141 MiB for good although only a
//! fraction was still allocated, and after a run of thousands of connections it kept
//! whatever their buffers had used. jemalloc (background purging, 1 s decay) and mimalloc
//! gave memory back by themselves but cost 10–15 % more broker CPU per 16 B message in the
//! same runs; trimming when idle costs the hot path nothing and returns as much.
//!
//! Idle means the process used under `IDLE_CPU_PERCENT` of one core over the last
//! `CHECK_INTERVAL`: a trim walks every arena under its lock, which a busy broker would feel
//! as a latency blip, and under load memory is being reused anyway. It runs again only after
//! the broker did some work since the last trim, so an idle broker does next to nothing.

use std::time::Duration;

/// How often the thread looks at the process's CPU time and RSS.
const CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// Below this share of one core over `CHECK_INTERVAL`, the broker counts as idle.
const IDLE_CPU_PERCENT: u64 = 10;
/// CPU time the process must have spent since the last trim for another one to be worth it.
const WORK_SINCE_TRIM: Duration = Duration::from_millis(50);

/// Starts the trimming thread (where glibc's `malloc_trim` exists; elsewhere nothing).
pub fn spawn_idle_trimmer() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new()
            .name("warren-trim".into())
            .spawn(trim_when_idle);
        if let Err(e) = spawned {
            tracing::warn!("could not start the idle memory trimmer: {e}");
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_when_idle() {
    let mut last_cpu = process_cpu();
    // The process's CPU time when it last trimmed (never yet).
    let mut cpu_at_trim: Option<Duration> = None;
    loop {
        std::thread::sleep(CHECK_INTERVAL);
        let cpu = process_cpu();
        let used = cpu.saturating_sub(last_cpu);
        last_cpu = cpu;
        let idle =
            used.as_micros() * 100 < CHECK_INTERVAL.as_micros() * u128::from(IDLE_CPU_PERCENT);
        // Memory is freed by work: with next to none since the last trim there is nothing new
        // to return.
        let worked = cpu_at_trim.is_none_or(|at| cpu.saturating_sub(at) >= WORK_SINCE_TRIM);
        if !idle || !worked {
            continue;
        }
        let before = resident_bytes();
        // SAFETY: malloc_trim only walks the allocator's own free lists.
        unsafe {
            libc::malloc_trim(0);
        }
        cpu_at_trim = Some(process_cpu());
        let after = resident_bytes();
        tracing::debug!(before, after, "idle: free memory returned to the OS");
    }
}

/// CPU time the whole process has used (every thread, user and system).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn process_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn resident_bytes() -> u64 {
    warren_broker::memory::resident_set_bytes().map_or(0, |b| b as u64)
}

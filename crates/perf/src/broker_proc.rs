//! Finds a local broker's process by the TCP port it listens on (via /proc/net/tcp and the
//! process fd tables) and reads its CPU time and resident memory, for the seeds' "RabbitMQ
//! CPU, %" and many-pairs' RSS columns. Linux only; elsewhere, or for a remote broker, the
//! columns are left empty.

use std::fs;

#[derive(Debug, Clone, Copy)]
pub struct BrokerProcess {
    pub pid: u32,
}

/// CPU time in seconds (user + system) and RSS in bytes at one instant.
#[derive(Debug, Clone, Copy)]
pub struct ProcSample {
    pub cpu_s: f64,
    pub rss_bytes: u64,
    pub at: std::time::Instant,
}

impl BrokerProcess {
    /// The process listening on `port` on this machine, if we may see it.
    pub fn find_by_port(port: u16) -> Option<BrokerProcess> {
        let mut inodes = vec![];
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let Ok(text) = fs::read_to_string(table) else {
                continue;
            };
            for line in text.lines().skip(1) {
                let cols: Vec<&str> = line.split_whitespace().collect();
                if cols.len() < 10 || cols[3] != "0A" {
                    continue; // 0A = LISTEN
                }
                let local_port = cols[1]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok());
                if local_port == Some(port) {
                    inodes.push(format!("socket:[{}]", cols[9]));
                }
            }
        }
        if inodes.is_empty() {
            return None;
        }
        for entry in fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(fds) = fs::read_dir(entry.path().join("fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                if let Ok(target) = fs::read_link(fd.path()) {
                    if inodes
                        .iter()
                        .any(|i| target.to_string_lossy() == i.as_str())
                    {
                        return Some(BrokerProcess { pid });
                    }
                }
            }
        }
        None
    }

    pub fn sample(&self) -> Option<ProcSample> {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        // Fields after the parenthesised command name; utime and stime are 14 and 15 overall.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks_per_s = 100.0; // USER_HZ, 100 on every Linux we run on
        let utime: f64 = f.get(11)?.parse().ok()?;
        let stime: f64 = f.get(12)?.parse().ok()?;
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let rss_kb: u64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Some(ProcSample {
            cpu_s: (utime + stime) / ticks_per_s,
            rss_bytes: rss_kb * 1024,
            at: std::time::Instant::now(),
        })
    }
}

/// CPU use between two samples, in percent of one core (the seeds' convention: 1229% is
/// twelve cores busy).
pub fn cpu_percent(a: &ProcSample, b: &ProcSample) -> f64 {
    let wall_s = b.at.duration_since(a.at).as_secs_f64();
    if wall_s <= 0.0 {
        return 0.0;
    }
    (b.cpu_s - a.cpu_s) / wall_s * 100.0
}

/// This process's own CPU time, for the "CPU per 100k msg/s" figure.
pub fn self_cpu_s() -> Option<f64> {
    BrokerProcess {
        pid: std::process::id(),
    }
    .sample()
    .map(|s| s.cpu_s)
}

//! Open-file (descriptor) limits: every AMQP connection is one descriptor, so how many
//! clients one process can hold — and how many a local broker can accept — is decided by
//! RLIMIT_NOFILE. The load tool raises its own soft limit to the hard limit at start, and
//! reads a local broker's limit and open descriptors from /proc to say where N was capped.

/// This process's (soft, hard) RLIMIT_NOFILE.
pub fn own_limits() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    // rlim_t is u64 on the Linux targets this runs on.
    Some((limit.rlim_cur, limit.rlim_max))
}

/// Raises the soft limit to the hard limit (what `ulimit -n $(ulimit -Hn)` does); returns the
/// soft limit in force afterwards. Child processes inherit it.
pub fn raise_soft_to_hard() -> Option<u64> {
    let (soft, hard) = own_limits()?;
    // An unlimited hard limit still stops at the kernel's per-process ceiling.
    let target = hard.min(kernel_ceiling().unwrap_or(hard));
    if soft < target {
        let limit = libc::rlimit {
            rlim_cur: target,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct we pass; raising soft up to hard needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Some(soft);
        }
    }
    own_limits().map(|(soft, _)| soft)
}

/// /proc/sys/fs/nr_open: no process may have more descriptors than this.
fn kernel_ceiling() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Descriptors this process has open now.
pub fn own_open() -> Option<u64> {
    open_of("self")
}

/// A process's soft open-files limit (the "Max open files" line of /proc/PID/limits).
pub fn limit_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    parse_max_open_files(&text)
}

/// How many descriptors a process has open (entries of /proc/PID/fd).
pub fn open_of_pid(pid: u32) -> Option<u64> {
    open_of(&pid.to_string())
}

fn open_of(proc_dir: &str) -> Option<u64> {
    Some(
        std::fs::read_dir(format!("/proc/{proc_dir}/fd"))
            .ok()?
            .count() as u64,
    )
}

fn parse_max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    match soft {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_soft_limit_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             95339                95339                processes \n\
                    Max open files            20000                40000                files     \n";
        assert_eq!(parse_max_open_files(text), Some(20000));
        assert_eq!(parse_max_open_files("nothing"), None);
    }

    #[test]
    fn raising_reaches_the_hard_limit_and_proc_agrees() {
        let (before, hard) = own_limits().unwrap();
        let soft = raise_soft_to_hard().unwrap();
        let (now_soft, _) = own_limits().unwrap();
        assert_eq!(soft, now_soft);
        assert!(soft >= before);
        if hard <= kernel_ceiling().unwrap_or(hard) {
            assert_eq!(soft, hard);
        }
        assert_eq!(limit_of(std::process::id()), Some(soft));
        assert!(own_open().unwrap() >= 3);
    }
}

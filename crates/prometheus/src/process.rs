//! What the operating system says about the broker process: open file descriptors and
//! their limit (Linux `/proc/self`; `None` where there is no such file system).

/// File descriptors the process holds now.
pub fn open_fds() -> Option<u64> {
    // The directory handle itself shows up in the listing; it is not the broker's.
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((entries.count() as u64).saturating_sub(1))
}

/// The soft limit on open files (RLIMIT_NOFILE), as `ulimit -n` shows it.
pub fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_max_open_files(&limits)
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
    fn limits_line_parses() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             127448               127448               processes \n\
                    Max open files            1024                 1048576              files     \n";
        assert_eq!(parse_max_open_files(text), Some(1024));
    }

    #[test]
    fn this_process_has_fds_under_its_limit() {
        let open = open_fds().unwrap();
        assert!(open >= 3, "stdin/out/err at least: {open}");
        assert!(open < max_fds().unwrap());
    }
}

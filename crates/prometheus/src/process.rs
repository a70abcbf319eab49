//! What the operating system says about the broker process: open file descriptors, TCP
//! sockets and their limits (Linux `/proc/self`; `None` where there is no such file system).

use std::collections::HashSet;

/// File descriptors the process holds now.
pub fn open_fds() -> Option<u64> {
    // The directory handle itself shows up in the listing; it is not the broker's.
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((entries.count() as u64).saturating_sub(1))
}

/// TCP sockets the process holds now (clients, peers, listeners): its socket descriptors
/// whose inodes the kernel's TCP tables list (Unix sockets and pipes are not counted).
pub fn open_tcp_sockets() -> Option<u64> {
    let mut tcp_inodes = HashSet::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            tcp_inodes.extend(text.lines().skip(1).filter_map(socket_inode_of_row));
        }
    }
    let fds = std::fs::read_dir("/proc/self/fd").ok()?;
    let open = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        })
        .filter(|inode| tcp_inodes.contains(inode))
        .count();
    Some(open as u64)
}

/// The inode column (the tenth) of a row of /proc/net/tcp.
fn socket_inode_of_row(row: &str) -> Option<u64> {
    row.split_whitespace().nth(9)?.parse().ok()
}

/// How many sockets RabbitMQ 3.x would allow with this descriptor limit (its file handle
/// cache keeps 100 descriptors for others and lets sockets have 90 % of the rest, less 2),
/// which its Overview dashboard sets the open sockets against.
pub fn max_tcp_sockets() -> Option<u64> {
    let max = max_fds()?;
    Some((max.saturating_sub(100) as f64 * 0.9 - 2.0).max(0.0) as u64)
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
    fn a_listening_socket_is_counted_as_tcp() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        // Other tests of this process may open or close sockets meanwhile: ours at least.
        assert!(open_tcp_sockets().unwrap() >= 3);
        drop((listener, client, server));
        assert!(max_tcp_sockets().unwrap() < max_fds().unwrap());
    }

    #[test]
    fn this_process_has_fds_under_its_limit() {
        let open = open_fds().unwrap();
        assert!(open >= 3, "stdin/out/err at least: {open}");
        assert!(open < max_fds().unwrap());
    }
}

//! 1,000 quorum queue groups on 3 nodes over TCP with the node-level failure detector in place
//! of per-group heartbeats: idle, they cost little CPU; when the node leading a third of them
//! stops, the detector's failover gives every group a new leader.
//!
//! Alone in its test binary so the process's CPU time is this test's. Set
//! `QUORUM_IDLE_WITH_RAFT_HEARTBEATS=1` to measure the same groups on openraft's own
//! heartbeats and election timers instead (printed, not asserted), `QUORUM_IDLE_GROUPS=n` for
//! another number of groups.

mod tcp_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tcp_support::{enqueue, raft_config, TcpCluster};
use warren_quorum::failover::{detector_driven_config, FailoverDriver, FailoverOptions};
use warren_quorum::machine::Reply;

const NODES: [u64; 3] = [1, 2, 3];

/// How many groups: 1,000, or `QUORUM_IDLE_GROUPS`.
fn group_count() -> u64 {
    std::env::var("QUORUM_IDLE_GROUPS")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(1000)
}

/// The process's user + system CPU time so far, from /proc (Linux only).
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // The kernel's USER_HZ is 100 on every Linux platform Rust supports.
    Some(Duration::from_millis(ticks * 10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_thousand_idle_groups_cost_little_cpu_and_fail_over_on_the_node_detector() {
    let groups = group_count();
    let raft_heartbeats = std::env::var_os("QUORUM_IDLE_WITH_RAFT_HEARTBEATS").is_some();
    let config = if raft_heartbeats {
        raft_config()
    } else {
        detector_driven_config(raft_config())
    };
    let mut cluster = TcpCluster::start(&NODES, config).await;
    if !raft_heartbeats {
        for node in cluster.nodes.values() {
            let driver = FailoverDriver::new(
                node.id,
                node.quorum.registry(),
                node.transport.liveness().clone(),
                FailoverOptions::default(),
            );
            node.run(async move {
                tokio::spawn(driver.run());
            })
            .await;
        }
    }

    let setup = Instant::now();
    for group in 1..=groups {
        let first = NODES[(group % 3) as usize];
        let mut members = vec![first];
        members.extend(NODES.into_iter().filter(|id| *id != first));
        cluster.create_group(group, &members).await;
    }
    let mut led_by: BTreeMap<u64, u64> = BTreeMap::new();
    for group in 1..=groups {
        let reply = cluster.propose(group, enqueue(1, 1, vec![1; 16])).await;
        assert_eq!(reply, Reply::Enqueued { msg_id: 0 }, "group {group}");
        *led_by.entry(cluster.leader(group).await).or_default() += 1;
    }
    eprintln!(
        "{groups} groups created and written in {:?}; leaders per node {led_by:?}",
        setup.elapsed()
    );

    // Without heartbeats every member still learns that the last write committed (openraft's
    // replication sends the new commit index after the commit) and applies it.
    for group in 1..=groups {
        for id in NODES {
            cluster
                .wait_for_queue(id, group, "1 ready", |q| q.ready_count() == 1)
                .await;
        }
    }
    // Idle: let the writes settle, then measure.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let window = Duration::from_secs(5);
    let (Some(before), wall) = (cpu_time(), Instant::now()) else {
        eprintln!("no /proc/self/stat: CPU not measured");
        return;
    };
    tokio::time::sleep(window).await;
    let used = cpu_time().expect("cpu time").saturating_sub(before);
    let share = used.as_secs_f64() / wall.elapsed().as_secs_f64();
    eprintln!(
        "{groups} idle groups x 3 nodes ({}): {used:?} CPU in {:?} = {:.1}% of one core",
        if raft_heartbeats {
            "openraft heartbeats"
        } else {
            "node-level failure detector"
        },
        wall.elapsed(),
        share * 100.0
    );
    if raft_heartbeats {
        cluster.shutdown().await;
        return;
    }
    // Idle groups' cost is openraft's tick per group and the drivers' scans: a few percent of
    // a core in a debug build. A fifth of a core leaves room for a loaded CI machine.
    assert!(
        share < 0.2,
        "idle groups used {:.1}% of a core",
        share * 100.0
    );

    // The node leading the most groups stops; the survivors' detectors elect new leaders.
    let (&busiest, _) = led_by
        .iter()
        .max_by_key(|(_, count)| **count)
        .expect("leaders");
    cluster.stop_node(busiest).await;
    let survivors: Vec<u64> = NODES.into_iter().filter(|id| *id != busiest).collect();
    let failover = Instant::now();
    for group in 1..=groups {
        cluster.leader_among(group, &survivors).await;
    }
    eprintln!(
        "every group led again {:?} after node {busiest} stopped",
        failover.elapsed()
    );
    for group in (1..=groups).step_by(10) {
        let reply = cluster
            .propose_among(group, &survivors, enqueue(1, 2, vec![2; 16]))
            .await;
        assert_eq!(reply, Reply::Enqueued { msg_id: 1 }, "group {group}");
    }
    cluster.shutdown().await;
}

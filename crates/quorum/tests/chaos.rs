//! Faults against a 3-member group under confirmed publishing: the leader killed and restarted,
//! the leader cut off, a link severed, a follower restarted — in an order drawn from a seed.
//! Whatever happens, every confirmed message is in the queue exactly once on every member.
//!
//! The seed fixes the fault schedule, not the thread interleaving (openraft's election timers
//! and the log's fsyncs run on real time), so a failure names its seed to rerun the schedule:
//! `QUORUM_CHAOS_SEEDS=7,8 cargo test -p warren-quorum --test chaos`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{enqueue, raft_config, Cluster};
use warren_quorum::machine::Reply;
use warren_quorum::wal::WalOptions;

const MEMBERS: [u64; 3] = [1, 2, 3];

/// xorshift64*: a fault schedule from a seed, with no dependency.
struct Schedule(u64);

impl Schedule {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % below
    }
}

#[derive(Debug)]
enum Fault {
    KillLeader,
    IsolateLeader,
    CutLink(u64, u64),
    RestartFollower,
}

async fn publish(cluster: &Cluster, seq: &mut u64, count: u64, confirmed: &mut Vec<u64>) {
    for _ in 0..count {
        *seq += 1;
        let reply = cluster
            .propose(enqueue(1, *seq, seq.to_le_bytes().to_vec()))
            .await;
        assert!(
            matches!(reply, Reply::Enqueued { .. } | Reply::Duplicate),
            "seq {seq}: {reply:?}"
        );
        confirmed.push(*seq);
    }
}

async fn run(seed: u64) {
    let mut schedule = Schedule(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let config = openraft::Config {
        heartbeat_interval: 50,
        election_timeout_min: 400,
        election_timeout_max: 800,
        ..raft_config()
    };
    let mut cluster = Cluster::start(&MEMBERS, config, WalOptions::default()).await;
    cluster.attempt_timeout = Duration::from_secs(2);
    let mut seq = 0;
    let mut confirmed = Vec::new();
    publish(&cluster, &mut seq, 5, &mut confirmed).await;

    for round in 0..4 {
        let leader = cluster.leader().await;
        let fault = match schedule.next(4) {
            0 => Fault::KillLeader,
            1 => Fault::IsolateLeader,
            2 => {
                let a = MEMBERS[schedule.next(3) as usize];
                let b = MEMBERS[(MEMBERS.iter().position(|m| *m == a).unwrap_or(0)
                    + 1
                    + schedule.next(2) as usize)
                    % 3];
                Fault::CutLink(a, b)
            }
            _ => Fault::RestartFollower,
        };
        eprintln!("seed {seed} round {round}: {fault:?} (leader {leader})");
        match fault {
            Fault::KillLeader => {
                cluster.stop_member(leader).await;
                publish(&cluster, &mut seq, 8, &mut confirmed).await;
                cluster.start_member(leader).await;
            }
            Fault::IsolateLeader => {
                cluster.net.isolate(leader);
                let majority: Vec<u64> = MEMBERS.into_iter().filter(|m| *m != leader).collect();
                let new_leader = cluster.leader_among(&majority).await;
                assert_ne!(new_leader, leader, "seed {seed}");
                for _ in 0..8 {
                    seq += 1;
                    let reply = cluster
                        .group(new_leader)
                        .propose(enqueue(1, seq, seq.to_le_bytes().to_vec()))
                        .await;
                    match reply {
                        Ok(Reply::Enqueued { .. }) | Ok(Reply::Duplicate) => confirmed.push(seq),
                        // It may lose the lead meanwhile; the publish is retried after healing.
                        _ => {
                            seq -= 1;
                            break;
                        }
                    }
                }
                cluster.net.heal();
            }
            Fault::CutLink(a, b) => {
                cluster.net.cut(a, b);
                publish(&cluster, &mut seq, 8, &mut confirmed).await;
                cluster.net.heal();
            }
            Fault::RestartFollower => {
                let follower = MEMBERS.into_iter().find(|m| *m != leader).unwrap_or(1);
                cluster.stop_member(follower).await;
                publish(&cluster, &mut seq, 4, &mut confirmed).await;
                cluster.start_member(follower).await;
                publish(&cluster, &mut seq, 4, &mut confirmed).await;
            }
        }
        publish(&cluster, &mut seq, 3, &mut confirmed).await;
    }

    // Every member converges on exactly the confirmed messages, each once, in order.
    let expected: Vec<u64> = confirmed.clone();
    for id in MEMBERS {
        cluster
            .wait_for_queue(id, &format!("seed {seed}: all confirmed"), |q| {
                q.ready_count() == expected.len()
            })
            .await;
        let bodies: Vec<u64> = cluster.group(id).with_queue(|q| {
            q.ready_messages()
                .map(|m| u64::from_le_bytes(m.body[..8].try_into().unwrap_or([0; 8])))
                .collect()
        });
        let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
        for body in &bodies {
            *counts.entry(*body).or_default() += 1;
        }
        let duplicates: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            duplicates.is_empty(),
            "seed {seed} member {id}: duplicates {duplicates:?}"
        );
        assert_eq!(
            bodies, expected,
            "seed {seed} member {id}: lost or reordered"
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_messages_survive_faults() {
    let seeds: Vec<u64> = match std::env::var("QUORUM_CHAOS_SEEDS") {
        Ok(list) => list
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect(),
        Err(_) => vec![1],
    };
    for seed in seeds {
        run(seed).await;
    }
}

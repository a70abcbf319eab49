//! A 3-member quorum queue group in one process: commits and confirms, leader failover, restart
//! from the write-ahead log, snapshots keeping the log bounded.

mod common;
mod join_all;

use std::time::Duration;

use common::{enqueue, raft_config, Cluster};
use join_all::futures_join_all;
use openraft::SnapshotPolicy;
use warren_quorum::machine::{Command, Effect, Reply};
use warren_quorum::wal::WalOptions;

const MEMBERS: [u64; 3] = [1, 2, 3];

fn ready(n: usize) -> impl Fn(&warren_quorum::machine::QueueState) -> bool {
    move |q| q.ready_count() == n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_commit_enqueues_and_confirm_only_after_commit() {
    let cluster = Cluster::start(&MEMBERS, raft_config(), WalOptions::default()).await;
    for seq in 1..=30 {
        let reply = cluster.propose(enqueue(1, seq, vec![seq as u8; 64])).await;
        assert!(matches!(reply, Reply::Enqueued { .. }), "{reply:?}");
    }
    // Every member applies the same queue.
    let leader = cluster.leader().await;
    let expected = cluster.group(leader).with_queue(|q| q.ready_ids());
    assert_eq!(expected, (0..30).collect::<Vec<_>>());
    for id in MEMBERS {
        cluster.wait_for_queue(id, "30 ready", ready(30)).await;
        assert_eq!(cluster.group(id).with_queue(|q| q.ready_ids()), expected);
    }
    // A retried publish (same publisher sequence) is confirmed without a second copy.
    assert_eq!(
        cluster.propose(enqueue(1, 30, vec![0])).await,
        Reply::Duplicate
    );

    // Cut the leader off: without a majority it must not confirm.
    cluster.net.isolate(leader);
    let stranded = tokio::time::timeout(
        Duration::from_secs(2),
        cluster
            .group(leader)
            .propose(enqueue(2, 1, b"stranded".to_vec())),
    )
    .await;
    assert!(
        !matches!(stranded, Ok(Ok(Reply::Enqueued { .. }))),
        "an isolated leader confirmed: {stranded:?}"
    );
    cluster.net.heal();
    // The group carries on; the stranded publish is either committed once or not at all.
    let reply = cluster.propose(enqueue(2, 2, b"after".to_vec())).await;
    assert!(matches!(reply, Reply::Enqueued { .. }), "{reply:?}");
    let leader = cluster.leader().await;
    let count = cluster.group(leader).with_queue(|q| q.ready_count());
    assert!(count == 31 || count == 32, "{count} ready");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_another_leads_and_committed_messages_survive() {
    let mut cluster = Cluster::start(&MEMBERS, raft_config(), WalOptions::default()).await;
    for seq in 1..=20 {
        cluster.propose(enqueue(1, seq, vec![1; 100])).await;
    }
    // A consumer holds 5 unacknowledged messages when the leader dies.
    cluster
        .propose(Command::Checkout {
            consumer: 9,
            prefetch: 5,
        })
        .await;
    let old_leader = cluster.leader().await;
    cluster.stop_member(old_leader).await;

    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, old_leader);
    let group = cluster.group(new_leader);
    cluster
        .wait_for_queue(new_leader, "15 ready", ready(15))
        .await;
    assert_eq!(
        group.with_queue(|q| q.checked_out_ids(9)),
        Some(vec![0, 1, 2, 3, 4])
    );

    // The consumer's channel went away with the node: its messages come back, redelivered.
    cluster.propose(Command::Cancel { consumer: 9 }).await;
    cluster
        .propose(Command::Checkout {
            consumer: 10,
            prefetch: 0,
        })
        .await;
    let reply = cluster.propose(enqueue(1, 21, vec![2; 100])).await;
    assert_eq!(reply, Reply::Enqueued { msg_id: 20 });
    let leader = cluster.leader().await;
    // The leader's effects hand the new message to the consumer (the broker would send it).
    let mut delivered = Vec::new();
    while let Ok(applied) = cluster
        .members
        .get_mut(&leader)
        .expect("leader")
        .effects
        .try_recv()
    {
        for effect in applied.effects {
            if let Effect::Deliver { consumer, message } = effect {
                delivered.push((consumer, message.id, message.delivered_before));
            }
        }
    }
    assert!(delivered.contains(&(10, 20, false)), "{delivered:?}");
    // The five messages consumer 9 held come back marked redelivered.
    for id in 0..5 {
        assert!(delivered.contains(&(10, id, true)), "{delivered:?}");
    }
    let held = cluster
        .group(leader)
        .with_queue(|q| q.checked_out_ids(10))
        .expect("consumer 10");
    assert_eq!(held, (0..=20).collect::<Vec<_>>());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_restart_from_their_write_ahead_log() {
    let mut cluster = Cluster::start(&MEMBERS, raft_config(), WalOptions::default()).await;
    for seq in 1..=30 {
        cluster.propose(enqueue(1, seq, vec![3; 32])).await;
    }
    // One member down while the others carry on, then back from its own log.
    let leader = cluster.leader().await;
    let follower = MEMBERS.into_iter().find(|id| *id != leader).unwrap_or(3);
    cluster.stop_member(follower).await;
    for seq in 31..=40 {
        cluster.propose(enqueue(1, seq, vec![3; 32])).await;
    }
    cluster.start_member(follower).await;
    cluster
        .wait_for_queue(follower, "40 ready", ready(40))
        .await;

    // The whole group down and back: everything confirmed is still there.
    for id in MEMBERS {
        cluster.stop_member(id).await;
    }
    for id in MEMBERS {
        cluster.start_member(id).await;
    }
    let leader = cluster.leader().await;
    cluster.wait_for_queue(leader, "40 ready", ready(40)).await;
    assert_eq!(
        cluster.group(leader).with_queue(|q| q.ready_ids()),
        (0..40).collect::<Vec<_>>()
    );
    assert_eq!(
        cluster.propose(enqueue(1, 40, vec![0])).await,
        Reply::Duplicate
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_purges_keep_the_log_bounded() {
    let config = openraft::Config {
        snapshot_policy: SnapshotPolicy::LogsSinceLast(40),
        max_in_snapshot_log_to_keep: 5,
        purge_batch_size: 1,
        ..raft_config()
    };
    let wal_options = WalOptions {
        segment_bytes: 32 * 1024,
        compact_min_bytes: 64 * 1024,
    };
    let mut cluster = Cluster::start(&MEMBERS, config, wal_options).await;
    cluster
        .propose(Command::Checkout {
            consumer: 1,
            prefetch: 0,
        })
        .await;
    // Member 3 is away for the whole run and must catch up by snapshot afterwards.
    cluster.stop_member(3).await;
    let body = vec![7u8; 2048];
    let mut seq = 0;
    // Snapshots and purges trail the writes, so keep writing until the log has been cut back:
    // at least 10 rounds (600 KiB through the log), at most 60 (3.6 MiB).
    let bound_bytes = 300 * 1024;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let mut proposals = Vec::new();
        for _ in 0..30 {
            seq += 1;
            proposals.push(cluster.propose(enqueue(1, seq, body.clone())));
        }
        futures_join_all(proposals).await;
        // Paced, as real traffic is: openraft 0.10 keeps the entries a replication stream to
        // the stopped member has in flight, and purges when that stream fails and is reset,
        // once per retry (its backoff is 200 ms). At full speed the 60 rounds take 0.7 s,
        // before the leader's first purge.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let leader = cluster.leader().await;
        let held = cluster
            .group(leader)
            .with_queue(|q| q.checked_out_ids(1))
            .unwrap_or_default();
        let reply = cluster
            .propose(Command::Settle {
                consumer: 1,
                msg_ids: held.clone(),
            })
            .await;
        assert_eq!(reply, Reply::Handled { count: held.len() });

        let report: Vec<String> = [1, 2]
            .iter()
            .map(|id| {
                let metrics = cluster.group(*id).raft().metrics().borrow().clone();
                let stats = cluster.members[id].node.wal().stats();
                format!(
                    "member {id}: snapshot {:?} purged {:?} {stats:?}",
                    metrics.snapshot, metrics.purged
                )
            })
            .collect();
        let bounded = [1, 2].iter().all(|id| {
            let metrics = cluster.group(*id).raft().metrics().borrow().clone();
            let stats = cluster.members[id].node.wal().stats();
            metrics.snapshot.is_some()
                && metrics.purged.is_some()
                && stats.checkpoints > 0
                && stats.disk_bytes < bound_bytes
        });
        if rounds >= 10 && bounded {
            break;
        }
        assert!(rounds < 60, "the log was not cut back: {report:?}");
    }
    cluster.start_member(3).await;
    cluster
        .wait_for_queue(3, "all settled", |q| {
            q.ready_count() == 0 && q.checked_out_count() == 0 && q.consumer_count() == 1
        })
        .await;
    let reply = cluster.propose(enqueue(1, seq + 1, b"last".to_vec())).await;
    assert_eq!(reply, Reply::Enqueued { msg_id: seq });
    cluster
        .wait_for_queue(3, "the last message delivered", |q| {
            q.checked_out_ids(1) == Some(vec![seq])
        })
        .await;
    cluster.shutdown().await;
}

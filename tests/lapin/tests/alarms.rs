//! Resource alarms as a lapin user sees them (issue 15), against RabbitMQ's rules: during a
//! memory or disk alarm only a connection that publishes is blocked and told; a connection
//! that only consumes, acks, declares or deletes carries on and is never told, so the backlog
//! drains, the alarm clears and the publisher is unblocked with nothing lost or reordered.
//! A blocked connection is not closed for the heartbeats it cannot send: lapin stops writing
//! altogether, heartbeats included, while it is blocked.

mod common;

use common::{is_blocked, is_unblocked, serve, within, Client, TestBroker};
use futures_util::stream::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions,
    BasicQosOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Event};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use warren_broker::{Alarm, Broker, DiskMonitor};
use warren_store::{Store, StoreOptions};

const BODY_BYTES: usize = 1024;

/// A 1 KB body that starts with its sequence number.
fn body(seq: u64) -> Vec<u8> {
    let mut body = vec![b'.'; BODY_BYTES];
    body[..8].copy_from_slice(&seq.to_be_bytes());
    body
}

fn seq_of(body: &[u8]) -> u64 {
    u64::from_be_bytes(body[..8].try_into().expect("an 8-byte sequence number"))
}

/// Publishes numbered messages to `queue` one after the other until `stop` is set; returns
/// how many were published. A publish made while the connection is blocked completes only
/// once it is unblocked (lapin holds it back), so the count includes it.
async fn publish_until_stopped(
    channel: Channel,
    queue: &'static str,
    persistent: bool,
    stop: Arc<AtomicBool>,
) -> u64 {
    let properties = if persistent {
        BasicProperties::default().with_delivery_mode(2)
    } else {
        BasicProperties::default()
    };
    let mut published = 0;
    // Far more than any alarm here needs: a broker that never blocks fails the test on the
    // blocked-notification timeout, not by exhausting memory.
    while !stop.load(Ordering::SeqCst) && published < 1_000_000 {
        channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &body(published),
                properties.clone(),
            )
            .await
            .expect("publish");
        published += 1;
    }
    published
}

/// Consumes `queue` with manual acks, acking each delivery, and reports each message's
/// sequence number.
async fn drain(channel: Channel, queue: &'static str, delivered: mpsc::UnboundedSender<u64>) {
    channel
        .basic_qos(200, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "drain".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    while let Some(delivery) = consumer.next().await {
        let delivery = delivery.expect("delivery");
        delivery
            .ack(BasicAckOptions::default())
            .await
            .expect("basic.ack");
        if delivered.send(seq_of(&delivery.data)).is_err() {
            return;
        }
    }
}

/// The scenario on `broker`, whose alarm the publisher raises by filling memory or
/// disk: a publisher publishes 1 KB messages until it is blocked; a second connection that
/// never publishes declares and deletes a queue during the alarm, then drains the backlog with
/// acks; the publisher is unblocked and every message it published arrives once, in order.
async fn only_the_publisher_is_blocked(
    broker: &TestBroker,
    queue: &'static str,
    durable: bool,
    alarm: Alarm,
    reason: &str,
) {
    let mut publisher = Client::connect(&broker.url).await;
    let mut consumer = Client::connect(&broker.url).await;
    let publisher_channel = publisher.conn.create_channel().await.unwrap();
    let declare = QueueDeclareOptions {
        durable,
        ..Default::default()
    };
    publisher_channel
        .queue_declare(queue.into(), declare, FieldTable::default())
        .await
        .unwrap();
    let consumer_channel = consumer.conn.create_channel().await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    // The tasks get clones: a channel whose last handle is dropped is closed by lapin, and
    // lapin's Connection::close fails if it finds a channel still closing.
    let publishing = tokio::spawn(publish_until_stopped(
        publisher_channel.clone(),
        queue,
        durable,
        stop.clone(),
    ));
    let blocked = publisher
        .wait_event(20, "the publisher's connection.blocked", is_blocked)
        .await;
    stop.store(true, Ordering::SeqCst);
    assert!(
        matches!(&blocked, Event::ConnectionBlocked(why) if why == reason),
        "blocked for {blocked:?}, expected {reason:?}"
    );
    assert!(publisher.conn.status().blocked());
    assert!(broker.broker.alarms.active().contains(alarm));

    // The consume-only connection works through the alarm.
    within(
        5,
        "queue.declare during the alarm",
        consumer_channel.queue_declare(
            "lapin.during-alarm".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("queue.declare during the alarm");
    within(
        5,
        "queue.delete during the alarm",
        consumer_channel.queue_delete("lapin.during-alarm".into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("queue.delete during the alarm");
    assert!(
        !publisher.events_so_far().iter().any(is_unblocked),
        "unblocked before anything was consumed"
    );
    assert!(publisher.conn.status().blocked());

    let (delivered_tx, mut delivered) = mpsc::unbounded_channel();
    let draining = tokio::spawn(drain(consumer_channel.clone(), queue, delivered_tx));
    let drain_started = Instant::now();
    publisher
        .wait_event(10, "the publisher's connection.unblocked", is_unblocked)
        .await;
    eprintln!(
        "{queue}: unblocked {} ms after the consumer started",
        drain_started.elapsed().as_millis()
    );
    assert!(!publisher.conn.status().blocked());
    let published = within(10, "the publisher's last publish", publishing)
        .await
        .unwrap();
    assert!(published > 1000, "blocked after only {published} messages");

    let mut received = Vec::with_capacity(published as usize);
    within(20, "every message consumed", async {
        while (received.len() as u64) < published {
            received.push(delivered.recv().await.expect("the consumer stopped"));
        }
    })
    .await;
    assert!(
        received.iter().copied().eq(0..published),
        "{published} messages published, consumed out of order or more than once"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), delivered.recv())
            .await
            .is_err(),
        "a message arrived twice"
    );
    let checker = publisher.conn.create_channel().await.unwrap();
    let left = checker
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(left.message_count(), 0, "messages left in {queue}");

    let consumer_events = consumer.events_so_far().to_vec();
    assert!(
        !consumer_events
            .iter()
            .any(|e| is_blocked(e) || is_unblocked(e)),
        "the consume-only connection was told: {consumer_events:?}"
    );
    consumer.assert_healthy("consumer");
    publisher.assert_healthy("publisher");
    consumer_channel
        .basic_cancel("drain".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    within(5, "the consumer's end", draining).await.unwrap();
    publisher.conn.close(200, "bye".into()).await.unwrap();
    consumer.conn.close(200, "bye".into()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_alarm_blocks_only_the_publisher() {
    // 8 MB of accounted queue memory (about 6000 of these messages: enough to show the rules,
    // few enough to keep the test quick). The RSS sampler is not started: this test
    // process's resident memory is not the broker's.
    let broker = serve(Broker::new(8_000_000, None)).await;
    only_the_publisher_is_blocked(
        &broker,
        "lapin.memory",
        false,
        Alarm::Memory,
        "low on memory",
    )
    .await;
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_mb` on `dir`; the error says why it could not.
    fn mount(dir: &Path, size_mb: u32) -> Result<Tmpfs, String> {
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mb}m"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_owned());
        }
        Ok(Tmpfs {
            dir: dir.to_owned(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: the broker may still hold store files open while the runtime winds down.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_alarm_blocks_only_the_publisher() {
    let dir = tempfile::tempdir().unwrap();
    let _tmpfs = match Tmpfs::mount(dir.path(), 32) {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            eprintln!("SKIPPED disk_alarm_blocks_only_the_publisher: cannot mount a tmpfs: {why}");
            return;
        }
    };
    // The store frees space a whole segment at a time; 1 MiB segments (instead of 64 MiB)
    // let acked messages give space back while the test still writes only a few MB.
    let options = StoreOptions {
        segment_size_bytes: 1 << 20,
        ..Default::default()
    };
    let (store, recovered) = Store::open(&dir.path().join("store"), options).unwrap();
    let broker = Broker::new(1 << 30, Some(store));
    broker.recover(recovered);
    // The alarm is on below 28 MB free of 32: after about 4 MB of persistent messages.
    let disk = DiskMonitor::new(dir.path(), 28_000_000, broker.alarms.clone());
    disk.spawn();
    assert!(
        broker.alarms.active().is_empty(),
        "disk alarm before any message"
    );
    let broker = serve(broker).await;
    only_the_publisher_is_blocked(&broker, "lapin.disk", true, Alarm::Disk, "low on disk").await;
    assert!(disk.free_bytes() >= disk.limit_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_publisher_is_not_timed_out_for_missed_heartbeats() {
    let broker = serve(Broker::new(1 << 30, None)).await;
    let mut publisher = Client::connect(&format!("{}?heartbeat=1", broker.url)).await;
    assert_eq!(publisher.conn.configuration().heartbeat(), 1);
    let channel = publisher.conn.create_channel().await.unwrap();
    channel
        .queue_declare(
            "lapin.heartbeat".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    // Raised by hand: nothing here would raise or clear it.
    broker.broker.alarms.set(Alarm::Disk, true);
    let stop = Arc::new(AtomicBool::new(false));
    let publishing = tokio::spawn(publish_until_stopped(
        channel.clone(),
        "lapin.heartbeat",
        false,
        stop.clone(),
    ));
    publisher
        .wait_event(5, "connection.blocked", is_blocked)
        .await;
    stop.store(true, Ordering::SeqCst);

    // Blocked for more than three heartbeat intervals: lapin sends nothing (not even
    // heartbeats) and Warren reads nothing, yet the connection stays.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    publisher.assert_healthy("blocked publisher");
    assert!(publisher.conn.status().blocked());

    broker.broker.alarms.set(Alarm::Disk, false);
    publisher
        .wait_event(5, "connection.unblocked", is_unblocked)
        .await;
    let published = within(5, "the held-back publish", publishing)
        .await
        .unwrap();
    // The publish that blocked it, any sent before the notification arrived (they waited in
    // the socket), and the one lapin held back if the publisher had started it.
    assert!(published >= 1, "nothing published");

    // It keeps working, and keeps being kept alive by heartbeats, after the alarm.
    for seq in 0..published {
        let got = within(
            5,
            "basic.get after the alarm",
            channel.basic_get("lapin.heartbeat".into(), BasicGetOptions { no_ack: true }),
        )
        .await
        .unwrap()
        .expect("a message");
        assert_eq!(seq_of(&got.delivery.data), seq);
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    publisher.assert_healthy("unblocked publisher");
    publisher.conn.close(200, "bye".into()).await.unwrap();
}

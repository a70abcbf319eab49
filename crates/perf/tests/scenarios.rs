//! Integration tests against a live broker: the URI comes from `WARREN_PERF_TEST_URI` (the
//! project's test script starts Warren and sets it); without it every test prints
//! "skipped: no broker" and passes.

use std::process::{Child, Command, Stdio};
use std::time::Duration;
use warren_perf::scenario::many_pairs::{self, step::default_worker_exe, StepConfig};
use warren_perf::scenario::{self, oslo, Amqp10Address, Protocol, ScenarioArgs};
use warren_perf::{runner, PerfArgs};

/// The tests share one broker and some queue names: run them one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn broker() -> Option<String> {
    match std::env::var("WARREN_PERF_TEST_URI") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            println!("skipped: no broker");
            None
        }
    }
}

fn perf(args: &str) -> PerfArgs {
    PerfArgs::parse_perftest(args.split_whitespace().map(String::from)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_generator_counts_exactly() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    let opts = runner::RunOptions {
        delete_queues: true,
        ..Default::default()
    };
    // Fixed message counts with confirms and manual multi-acks: everything is accounted for.
    let r = runner::run(
        &perf(&format!(
            "--uri {uri} -x 2 -y 1 -s 200 -C 2000 -c 100 -q 100 -A 10 -u perf-it-exact --quiet"
        )),
        &opts,
    )
    .await
    .unwrap();
    assert_eq!(r.counts.sent, 4000);
    assert_eq!(r.counts.confirmed + r.counts.nacked, 4000);
    assert_eq!(r.counts.received, 4000, "{r:?}");
    assert_eq!(r.lost, Some(0));
    assert!(r.latency.count > 0 && r.latency.p99_us >= r.latency.p50_us);
    assert!(r.confirm_latency.count > 0);

    // A time-limited, rate-limited run holds its rate.
    let r = runner::run(
        &perf(&format!(
            "--uri {uri} -x 1 -y 1 -s 100 -r 500 -z 2 --autoack -u perf-it-rate --quiet"
        )),
        &opts,
    )
    .await
    .unwrap();
    assert!(r.counts.received <= r.counts.sent);
    assert!(
        (800..=1200).contains(&r.counts.sent),
        "sent {}",
        r.counts.sent
    );
    assert_eq!(r.lost, Some(0));

    // Unroutable mandatory messages come back as returns.
    let r = runner::run(
        &perf(&format!(
            "--uri {uri} -x 1 -y 0 -C 50 -f mandatory -e amq.direct -k perf-it-nowhere --quiet"
        )),
        &opts,
    )
    .await
    .unwrap();
    assert_eq!((r.counts.sent, r.counts.returned), (50, 50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uri_list_spreads_clients_and_keeps_exact_counts() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    // The same broker twice stands in for two nodes: PerfTest's -H takes the list, and every
    // client of the run (2 consumers, 3 producers) still accounts for every message.
    let r = runner::run(
        &perf(&format!(
            "-H {uri},{uri} -x 3 -y 2 -s 100 -C 500 -c 50 -q 50 -u perf-it-uris --quiet"
        )),
        &runner::RunOptions {
            delete_queues: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(r.counts.sent, 1500);
    assert_eq!(r.counts.received, 1500, "{r:?}");
    assert_eq!(r.lost, Some(0));
    assert_eq!(r.uri.matches("amqp://").count(), 2, "{}", r.uri);
}

/// The client's reader remembers the channel of the last frame; a channel number freed and
/// handed out again must get its own frames, not the closed channel's memory of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_number_used_again_gets_its_own_replies() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    let uri = warren_perf::client::AmqpUri::parse(&uri).unwrap();
    let conn = warren_perf::client::Connection::open(&uri).await.unwrap();
    let first = conn.channel().await.unwrap();
    let first_id = first.id();
    let queue = first.declare_private_queue().await.unwrap();
    let template = first.publish_template("", &queue, false);
    first.publish(&template, &[0, 0], b"one", 0).unwrap();
    assert_eq!(
        first.basic_get(&queue, true).await.unwrap().unwrap().body,
        &b"one"[..]
    );
    first.close().await.unwrap();
    // Channel numbers are handed out round the table: open and close until the first one's
    // number comes back (each round trip is the reader's last channel changing too).
    let again = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let ch = conn.channel().await.unwrap();
            if ch.id() == first_id {
                return ch;
            }
            ch.close().await.unwrap();
        }
    })
    .await
    .expect("the first channel number handed out again");
    let template = again.publish_template("", &queue, false);
    again.publish(&template, &[0, 0], b"two", 0).unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), again.basic_get(&queue, true))
        .await
        .expect("basic.get answered on the reused channel")
        .unwrap()
        .unwrap();
    assert_eq!(got.body, &b"two"[..]);
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oslo_call_accounts_round_trips() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    let r = oslo::step(&uri, oslo::Mode::Call, 5, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(r.sent > 0 && r.received <= r.sent && r.round_trip <= r.received);
    assert_eq!(r.lost, Some(r.sent - r.round_trip));
    let r = oslo::step(&uri, oslo::Mode::Cast, 5, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(r.sent > 0 && r.received <= r.sent);
    assert_eq!(r.lost, Some(0));
}

fn pairs_config(uri: &str, senders: u32, per_receiver: u32) -> StepConfig {
    StepConfig {
        uri: uri.to_owned(),
        senders,
        senders_per_receiver: per_receiver,
        duration: Duration::from_secs(2),
        period: Duration::from_millis(100),
        body_bytes: 100,
        prefetch: 100,
        workers: None,
        worker_exe: None,
        attach_timeout: Duration::from_secs(30),
        confirm_wait: Duration::from_secs(30),
        drain_timeout: Duration::from_secs(30),
        protocol: Protocol::Amqp091,
        amqp10_address: Amqp10Address::Auto,
    }
}

/// What every many-pairs step on a healthy broker must show: every confirmed message
/// received exactly once, none left queued, no sender above 10 msg/s.
fn assert_pairs_step_exact(r: &many_pairs::StepResult) {
    assert!(r.drained, "{r:?}");
    assert_eq!((r.lost, r.undelivered), (0, 0), "{r:?}");
    assert_eq!(
        r.sent.unconfirmed + r.sent.nacked + r.sent.publish_errors,
        0,
        "{r:?}"
    );
    assert_eq!(r.sent.confirmed, r.sent.published, "{r:?}");
    assert_eq!(r.received, r.sent.published, "{r:?}");
    assert_eq!(r.latency.count, r.received, "{r:?}");
    assert!(r.sent.published > 0 && r.latency.p99_us >= r.latency.p50_us);
    // Consecutive sends of one sender are more than 97 ms apart: in 2 s at most 21 each.
    assert!(r.sent.max_per_sender <= 21, "{r:?}");
    assert!(r.sent.published <= r.senders * 21, "{r:?}");
    assert_eq!(r.offered_per_s, r.senders as f64 * 10.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pairs_accounts_for_every_message() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    // Pairs, every client in this process.
    let r = many_pairs::step(&pairs_config(&uri, 6, 1)).await.unwrap();
    assert_eq!((r.senders, r.receivers, r.worker_processes), (6, 6, 0));
    assert!(r.capped.is_empty(), "{:?}", r.capped);
    assert_pairs_step_exact(&r);

    // Several senders per receiver (4, 4 and 2), over two worker processes when the warren
    // binary is known (./test.sh sets WARREN_BIN).
    let Some(exe) = default_worker_exe() else {
        println!("worker processes skipped: no WARREN_BIN");
        return;
    };
    let mut cfg = pairs_config(&uri, 10, 4);
    cfg.workers = Some(2);
    cfg.worker_exe = Some(exe);
    let r = many_pairs::step(&cfg).await.unwrap();
    assert_eq!((r.senders, r.receivers, r.worker_processes), (10, 3, 2));
    assert_pairs_step_exact(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pairs_over_amqp10_accounts_for_every_message() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    // Pairs and a shared receiver (3 + 2 senders), every client an AMQP 1.0 connection on the
    // broker's one AMQP port; queues declared over 0-9-1, links to /queues/<q>.
    for (senders, per_receiver, receivers) in [(4, 1, 4), (5, 3, 2)] {
        let mut cfg = pairs_config(&uri, senders, per_receiver);
        cfg.protocol = Protocol::Amqp10;
        let r = many_pairs::step(&cfg).await.unwrap();
        assert_eq!((r.senders, r.receivers), (u64::from(senders), receivers));
        assert!(r.capped.is_empty(), "{:?}", r.capped);
        assert_pairs_step_exact(&r);
    }
}

/// A sender and a receiver of the many-pairs AMQP 1.0 client on `queue` carry more
/// messages than the broker's first link credit and the receiver's prefetch (so both wait
/// for credit and top it up); every message is accepted and received once with its flight
/// time; once closed, the sender refuses to publish.
async fn amqp10_pair_carries_every_message(amqp: &warren_perf::client::AmqpUri, queue: &str) {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use warren_perf::scenario::many_pairs::{amqp10, Counters};

    let counters = Arc::new(Counters::default());
    let latency = Arc::new(parking_lot::Mutex::new(warren_perf::stats::new_histogram()));
    let address = Amqp10Address::V2.of_queue(queue);
    let receiver = amqp10::attach_receiver(amqp, &address, 10, counters.clone(), latency.clone())
        .await
        .unwrap();
    let (sender, publisher) = amqp10::attach_sender(amqp, &address, counters.clone())
        .await
        .unwrap();
    // Above Warren's first link credit (256) and RabbitMQ 4's (128).
    const MESSAGES: u64 = 600;
    let mut body = vec![b'x'; 100];
    for seq in 0..MESSAGES {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        body[0..8].copy_from_slice(&now_ns.to_be_bytes());
        body[12..20].copy_from_slice(&seq.to_be_bytes());
        publisher.publish(&body).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while (counters.confirmed.load(Ordering::Acquire) < MESSAGES
        || counters.received.load(Ordering::Acquire) < MESSAGES)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(counters.confirmed.load(Ordering::Acquire), MESSAGES);
    assert_eq!(counters.nacked.load(Ordering::Acquire), 0);
    assert_eq!(counters.received.load(Ordering::Acquire), MESSAGES);
    {
        let latency = latency.lock();
        assert_eq!(latency.len(), MESSAGES);
        // Flight times read from the bodies: under the 30 s the test allowed.
        assert!(latency.max() < 30_000_000, "max {} µs", latency.max());
    }
    sender.close().await;
    receiver.close().await;
    assert!(publisher.publish(&body).is_err(), "a closed sender refuses");
}

/// The many-pairs AMQP 1.0 client on its own against Warren: a pair carries every message,
/// nothing is left in the queue, and the broker's refusals come back as errors that say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_amqp10_client_carries_every_message_and_reports_refusals() {
    use std::sync::Arc;
    use warren_perf::client::{AmqpUri, Connection, QueueOptions};
    use warren_perf::scenario::many_pairs::{amqp10, Counters};

    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    let amqp = AmqpUri::parse(&uri).unwrap();
    let control = Connection::open(&amqp).await.unwrap();
    let ch = control.channel().await.unwrap();
    let queue = format!("perf-it-amqp10-client-{}", std::process::id());
    ch.queue_declare(&queue, &QueueOptions::default())
        .await
        .unwrap();
    amqp10_pair_carries_every_message(&amqp, &queue).await;
    // Every message was accepted: none went back to the queue when the receiver detached.
    assert_eq!(ch.queue_message_count(&queue).await.unwrap(), 0);

    let counters = Arc::new(Counters::default());
    let latency = Arc::new(parking_lot::Mutex::new(warren_perf::stats::new_histogram()));
    let missing = format!("{queue}-missing");
    let missing_address = Amqp10Address::V2.of_queue(&missing);
    let err = amqp10::attach_receiver(&amqp, &missing_address, 10, counters.clone(), latency)
        .await
        .err()
        .expect("no such queue");
    let text = format!("{err:#}");
    assert!(
        text.contains("amqp:not-found") && text.contains(&missing),
        "{text}"
    );

    let mut wrong = amqp.clone();
    wrong.password = "not-the-password".into();
    let err = amqp10::attach_sender(&wrong, &Amqp10Address::V2.of_queue(&queue), counters)
        .await
        .err()
        .expect("a wrong password");
    let text = format!("{err:#}");
    assert!(
        text.contains("SASL PLAIN login as") && text.contains("refused"),
        "{text}"
    );

    ch.queue_delete(&queue).await.unwrap();
    control.close().await;
}

/// The same client against another AMQP 1.0 broker whose links create their queues (the
/// python-qpid-proton example broker, a rhea broker): `WARREN_PERF_TEST_AMQP10_URI`; skipped
/// without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_amqp10_client_works_with_another_amqp10_broker() {
    let Ok(uri) = std::env::var("WARREN_PERF_TEST_AMQP10_URI") else {
        println!("skipped: no WARREN_PERF_TEST_AMQP10_URI");
        return;
    };
    let amqp = warren_perf::client::AmqpUri::parse(&uri).unwrap();
    let queue = format!("perf-it-amqp10-other-{}", std::process::id());
    amqp10_pair_carries_every_message(&amqp, &queue).await;
}

/// Every data cell of every table in a report, as numbers where they parse.
fn numbers(md: &str) -> Vec<f64> {
    md.lines()
        .filter(|l| l.starts_with("| ") && !l.contains("-: |"))
        .flat_map(|l| {
            l.split('|')
                .map(str::trim)
                .map(|c| c.trim_end_matches(" ms").trim_end_matches('×').to_owned())
                .collect::<Vec<_>>()
        })
        .filter_map(|c| c.parse::<f64>().ok())
        .collect()
}

fn quick_args(name: &str, uri: &str, out: &std::path::Path) -> ScenarioArgs {
    use clap::Parser;
    ScenarioArgs::try_parse_from([
        "scenario",
        name,
        "--uri",
        uri,
        "--label",
        "warren",
        "--duration",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--quick",
        "--progress",
        "false",
    ])
    .unwrap()
}

/// The cells of the table whose header row starts with `first_header`.
fn table_rows(md: &str, first_header: &str) -> Vec<Vec<String>> {
    md.lines()
        .skip_while(|l| !l.starts_with(&format!("| {first_header} |")))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.contains("-: |"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compared_report_reads_as_times_better() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    let out = std::env::temp_dir().join(format!("warren-perf-compare-{}", std::process::id()));
    // The same broker twice, under two names: the report's shape is what is checked here.
    let mut args = quick_args("mqperf", &uri, &out);
    args.compare = Some(uri.clone());
    args.compare_label = Some("other".into());
    args.duration = Some(1.0);
    let path = scenario::run_scenario("mqperf", &args, &["mqperf".into()])
        .await
        .unwrap();
    let md = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    let paragraphs: Vec<&str> = md.split("\n\n").collect();
    assert!(
        paragraphs[1].starts_with(
            "**Summary.** Each ratio is how many times better `warren` is than `other`"
        ) && paragraphs[1].contains("Send msgs/s (higher is better)"),
        "{md}"
    );
    let rows = table_rows(&md, "Nodes");
    assert_eq!(
        rows[0][3..],
        [
            "Send msgs/s (warren)",
            "Send msgs/s (other)",
            "Send msgs/s: warren × better than other (higher is better)",
            "Receive msgs/s (warren)",
            "Receive msgs/s (other)",
            "Receive msgs/s: warren × better than other (higher is better)",
        ],
        "{md}"
    );
    assert_eq!(rows.len(), 4, "a header and three quick rows:\n{md}");
    for row in &rows[1..] {
        let num = |i: usize| -> f64 { row[i].trim_end_matches('×').parse().unwrap() };
        for first in [3, 6] {
            let (a, b, ratio) = (num(first), num(first + 1), num(first + 2));
            assert!(a > 0.0 && b > 0.0, "{row:?}");
            // The ratio is the first broker's rate over the second's (to its printed digits).
            assert!((ratio - a / b).abs() <= 0.01 * (a / b), "{row:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_runs_quick() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    let out = std::env::temp_dir().join(format!("warren-perf-it-{}", std::process::id()));
    for name in scenario::SCENARIOS {
        let args = quick_args(name, &uri, &out);
        let path = scenario::run_scenario(name, &args, &[name.to_string(), "--quick".into()])
            .await
            .unwrap();
        let md = std::fs::read_to_string(&path).unwrap();
        assert!(
            md.starts_with(&format!(
                "# warren perf scenario {name}\n\n**Summary.** `warren` alone"
            )),
            "{name}: no summary first:\n{md}"
        );
        let nums = numbers(&md);
        assert!(
            nums.iter().any(|&n| n > 0.0),
            "{name}: no non-zero number in\n{md}"
        );
        println!("{name}: ok ({} numbers)", nums.len());
    }
    let _ = std::fs::remove_dir_all(out);
}

/// `n` ports free right now, below the kernel's ephemeral range (a port `bind(0)` handed out
/// may be taken by an outgoing connection before the broker binds it).
fn free_ports(n: usize) -> Vec<u16> {
    let low = 20000 + (std::process::id() % 5000) as u16;
    let ports: Vec<u16> = (low..32767)
        .filter(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .take(n)
        .collect();
    assert_eq!(ports.len(), n, "free ports");
    ports
}

/// A Warren of the test's own with its management API and Prometheus endpoint (the shared
/// broker's HTTP ports are not known here); killed when dropped.
struct OwnWarren {
    child: Child,
    amqp_port: u16,
    management_port: u16,
    prometheus_port: u16,
    data_dir: std::path::PathBuf,
}

impl OwnWarren {
    fn start(bin: &str) -> OwnWarren {
        let [amqp_port, management_port, prometheus_port] = free_ports(3)[..] else {
            unreachable!("free_ports returns three")
        };
        let data_dir =
            std::env::temp_dir().join(format!("warren-perf-scale-data-{}", std::process::id()));
        let child = Command::new(bin)
            .args(["server", "--bind", "127.0.0.1", "--amqp-port"])
            .arg(amqp_port.to_string())
            .arg("--management-port")
            .arg(management_port.to_string())
            .arg("--prometheus-port")
            .arg(prometheus_port.to_string())
            .arg("--data-dir")
            .arg(&data_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("WARREN_BIN starts");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", management_port)).is_err()
            || std::net::TcpStream::connect(("127.0.0.1", amqp_port)).is_err()
        {
            assert!(std::time::Instant::now() < deadline, "Warren did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        OwnWarren {
            child,
            amqp_port,
            management_port,
            prometheus_port,
            data_dir,
        }
    }
}

impl Drop for OwnWarren {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// `warren perf scenario scale --quick` as a user runs it, against a Warren of the test's own
/// whose HTTP endpoints it is given: the report has the targets table, each sweep's table with a row per count
/// and measured figures, and the plots it links to exist.
#[test]
fn scale_scenario_reports_tables_and_plots() {
    let Some(bin) = std::env::var("WARREN_BIN").ok().filter(|b| !b.is_empty()) else {
        println!("skipped: no WARREN_BIN");
        return;
    };
    let broker = OwnWarren::start(&bin);
    let out = std::env::temp_dir().join(format!("warren-perf-scale-{}", std::process::id()));
    // `warren perf scenario scale ...` through the entry point the `warren` binary calls
    // (this build's code; WARREN_BIN may be an older build, it only runs the broker).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let argv: Vec<String> = [
        "scenario",
        "scale",
        "--quick",
        "--progress",
        "false",
        "--label",
        "warren",
        "--uri",
        &format!("amqp://guest:guest@127.0.0.1:{}", broker.amqp_port),
        "--management-url",
        &format!("http://127.0.0.1:{}", broker.management_port),
        "--prometheus-url",
        &format!("http://127.0.0.1:{}", broker.prometheus_port),
        "--out",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .into();
    runtime.block_on(warren_perf::run(argv)).unwrap();
    let md = std::fs::read_to_string(out.join("scale.md")).unwrap();
    assert!(
        md.starts_with("# warren perf scenario scale\n\n**Summary.**"),
        "{md}"
    );
    // The targets table, with the queue sweep's figures filled in.
    let targets = table_rows(&md, "Figure");
    assert_eq!(targets[0], ["Figure", "Target", "warren"], "{md}");
    let declare = targets
        .iter()
        .find(|r| r[0] == "Declare rate, pipelined")
        .unwrap();
    assert!(declare[2].starts_with("lowest "), "{md}");
    let overview = targets
        .iter()
        .find(|r| r[0] == "GET /api/overview")
        .unwrap();
    assert!(overview[2].contains(" ms at 200 queues ("), "{md}");

    let queues = table_rows(&md, "Queues");
    let header = &queues[0];
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("{name} in {header:?}"))
    };
    let counts: Vec<&str> = queues[1..].iter().map(|r| r[0].as_str()).collect();
    assert_eq!(counts, ["50", "200"], "{md}");
    for row in &queues[1..] {
        let number = |name: &str| -> f64 {
            row[column(name)]
                .trim_end_matches(" ms")
                .parse()
                .unwrap_or_else(|_| panic!("{name}: {row:?}"))
        };
        assert!(number("Declares/s, one at a time") > 0.0, "{row:?}");
        assert!(
            number("Declares/s, pipelined (32 in flight)") > 0.0,
            "{row:?}"
        );
        // The broker is this test's child: its RSS is read from /proc.
        assert!(number("Broker memory, MiB") > 1.0, "{row:?}");
        for endpoint in [
            "GET /api/queues page",
            "GET /api/overview",
            "GET /api/definitions",
            "GET /metrics",
        ] {
            assert!(number(endpoint) > 0.0, "{endpoint}: {row:?}");
        }
        // Every queue is in the definitions: at least 30 bytes each.
        let definitions_kib = number("/api/definitions size, KiB");
        let queues: f64 = row[0].parse().unwrap();
        assert!(definitions_kib * 1024.0 >= queues * 30.0, "{row:?}");
    }
    assert!(md.contains("RSS of process"), "{md}");
    // Route times through the topic exchange at each count of bindings.
    let bindings = table_rows(&md, "Bindings");
    assert_eq!(bindings.len(), 3, "a header and two quick rows:\n{md}");
    for row in &bindings[1..] {
        let us = |i: usize| -> f64 { row[i].trim_end_matches(" µs").parse().unwrap() };
        // Binds/s, then the publish→confirm median and p99.
        assert!(row[1].parse::<f64>().unwrap() > 0.0, "{row:?}");
        assert!(us(2) > 0.0 && us(3) >= us(2), "{row:?}");
    }
    // Every idle connection asked for was opened (two hundred are far below any limit).
    let connections = table_rows(&md, "Connections asked");
    assert_eq!(connections.len(), 3, "{md}");
    for row in &connections[1..] {
        assert_eq!(row[0], row[1], "{row:?}");
        assert!(row[4].parse::<f64>().unwrap() > 1.0, "{row:?}");
    }
    assert!(md.contains("After every client closed"), "{md}");
    for figure in [
        "Median route time at 1M bindings",
        "Memory per idle connection",
    ] {
        let row = targets.iter().find(|r| r[0] == figure).unwrap();
        assert_ne!(row[2], "not measured", "{figure}: {md}");
    }
    for plot in [
        "scale_queues_declare_rate",
        "scale_queues_memory",
        "scale_queues_http",
        "scale_bindings_route",
        "scale_bindings_memory",
        "scale_connections_memory",
    ] {
        assert!(
            md.contains(&format!("]({plot}.svg)")),
            "{plot} linked:\n{md}"
        );
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg"))).unwrap();
        assert!(svg.contains("<svg"), "{plot}");
        assert!(
            std::fs::metadata(out.join(format!("{plot}.png")))
                .unwrap()
                .len()
                > 1000
        );
    }
    // The sweep deleted its queues: the broker holds none of them.
    let queues_left = warren_perf::client::AmqpUri::parse(&format!(
        "amqp://guest:guest@127.0.0.1:{}",
        broker.amqp_port
    ))
    .unwrap();
    let left = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            let conn = warren_perf::client::Connection::open(&queues_left)
                .await
                .unwrap();
            let ch = conn.channel().await.unwrap();
            let gone = ch.queue_message_count("scale-q-0000000").await.is_err();
            conn.close().await;
            gone
        });
    assert!(left, "scale-q-0000000 still exists");
    let _ = std::fs::remove_dir_all(out);
}

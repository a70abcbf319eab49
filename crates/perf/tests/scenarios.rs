//! Integration tests against a live broker: the URI comes from `WARREN_PERF_TEST_URI` (the
//! project's test script starts Warren and sets it); without it every test prints
//! "skipped: no broker" and passes.

use std::time::Duration;
use warren_perf::scenario::{self, oslo, ScenarioArgs};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_runs_quick() {
    let Some(uri) = broker() else { return };
    let _serial = SERIAL.lock().await;
    let out = std::env::temp_dir().join(format!("warren-perf-it-{}", std::process::id()));
    for name in scenario::SCENARIOS {
        let args = ScenarioArgs {
            name: name.to_string(),
            uri: uri.clone(),
            compare: None,
            label: Some("warren".into()),
            compare_label: None,
            duration: Some(2.0),
            out: out.clone(),
            quick: true,
            steps: None,
            credit_label: "server default".into(),
            progress: false,
            protocol: scenario::Protocol::Amqp091,
            senders_per_receiver: 1,
            workers: None,
            drain_timeout: None,
        };
        let path = scenario::run_scenario(name, &args, &[name.to_string(), "--quick".into()])
            .await
            .unwrap();
        let md = std::fs::read_to_string(&path).unwrap();
        let nums = numbers(&md);
        assert!(
            nums.iter().any(|&n| n > 0.0),
            "{name}: no non-zero number in\n{md}"
        );
        println!("{name}: ok ({} numbers)", nums.len());
    }
    let _ = std::fs::remove_dir_all(out);
}

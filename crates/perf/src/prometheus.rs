//! `--metrics-prometheus`: the tool's own metrics (counters and the last interval's latency
//! percentiles) in the Prometheus text format, served over plain HTTP on
//! `--metrics-prometheus-port` (8080, as PerfTest) at any path, `/metrics` included.

use crate::runner::Shared;
use std::fmt::Write as _;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Renders the metrics; `tags` become labels on every series.
pub(crate) fn render(shared: &Shared, tags: &[(String, String)]) -> String {
    let labels = tags
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('"', "'")))
        .collect::<Vec<_>>()
        .join(",");
    let with = |extra: &str| -> String {
        match (labels.is_empty(), extra.is_empty()) {
            (true, true) => String::new(),
            (true, false) => format!("{{{extra}}}"),
            (false, true) => format!("{{{labels}}}"),
            (false, false) => format!("{{{labels},{extra}}}"),
        }
    };
    let c = shared.stats.counts();
    let mut out = String::new();
    for (name, v) in [
        ("published", c.sent),
        ("confirmed", c.confirmed),
        ("nacked", c.nacked),
        ("returned", c.returned),
        ("consumed", c.received),
        ("duplicates", c.duplicates),
    ] {
        let _ = writeln!(
            out,
            "# TYPE perftest_{name} counter\nperftest_{name}{} {v}",
            with("")
        );
    }
    if let Some(rec) = shared.last_interval.lock().as_ref() {
        let _ = writeln!(out, "# TYPE perftest_latency_seconds gauge");
        for (q, v) in [
            ("0.5", rec.latency.p50_us),
            ("0.75", rec.latency.p75_us),
            ("0.95", rec.latency.p95_us),
            ("0.99", rec.latency.p99_us),
            ("0.999", rec.latency.p999_us),
        ] {
            let _ = writeln!(
                out,
                "perftest_latency_seconds{} {}",
                with(&format!("quantile=\"{q}\"")),
                v as f64 / 1e6
            );
        }
        let _ = writeln!(
            out,
            "# TYPE perftest_published_rate gauge\nperftest_published_rate{} {:.1}",
            with(""),
            rec.sent_per_s
        );
        let _ = writeln!(
            out,
            "# TYPE perftest_consumed_rate gauge\nperftest_consumed_rate{} {:.1}",
            with(""),
            rec.received_per_s
        );
    }
    out
}

pub(crate) async fn serve(
    port: u16,
    tags: Vec<(String, String)>,
    shared: Arc<Shared>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(("0.0.0.0", port)).await?;
    loop {
        let (mut sock, _) = listener.accept().await?;
        let body = render(&shared, &tags);
        tokio::spawn(async move {
            let mut req = [0u8; 2048];
            let _ = sock.read(&mut req).await;
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}

/// `type=publisher,deployment=x` into label pairs.
pub fn parse_tags(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().replace(['-', '.'], "_"), v.trim().to_owned()))
        .collect()
}

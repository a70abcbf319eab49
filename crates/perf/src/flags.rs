//! PerfTest's command line: the same flag names and meanings as RabbitMQ PerfTest, so a
//! command pasted from a seed report runs the same experiment. PerfTest (Apache Commons CLI)
//! has multi-letter single-dash options (`-qa`, `-ad`, `-po`) that clap cannot express, so
//! `normalize` first rewrites every known short option to its long form.

use clap::Parser;
use std::path::PathBuf;
use warren_codec::{FieldTable, FieldValue};

/// PerfTest short options and their long forms.
const SHORT_TO_LONG: &[(&str, &str)] = &[
    ("h", "uri"),
    ("H", "uris"),
    ("x", "producers"),
    ("y", "consumers"),
    ("s", "size"),
    ("r", "rate"),
    ("z", "time"),
    ("C", "pmessages"),
    ("D", "cmessages"),
    ("i", "interval"),
    ("a", "autoack"),
    ("q", "qos"),
    ("Q", "global-qos"),
    ("A", "multi-ack-every"),
    ("c", "confirm"),
    ("f", "flag"),
    ("u", "queue"),
    ("ad", "auto-delete"),
    ("qa", "queue-args"),
    ("t", "type"),
    ("e", "exchange"),
    ("k", "routing-key"),
    ("m", "ptxsize"),
    ("n", "ctxsize"),
    ("po", "polling"),
    ("pi", "polling-interval"),
    ("p", "predeclared"),
    ("mpr", "metrics-prometheus"),
    ("mt", "metrics-tags"),
    ("qp", "queue-pattern"),
    ("qpf", "queue-pattern-from"),
    ("qpt", "queue-pattern-to"),
    ("?", "help"),
];

/// Rewrites PerfTest short options (`-x 1`, `-qa ...`) to long ones clap understands.
pub fn normalize(args: impl IntoIterator<Item = String>) -> Vec<String> {
    args.into_iter()
        .map(|arg| {
            let Some(short) = arg.strip_prefix('-').filter(|s| !s.starts_with('-')) else {
                return arg;
            };
            match SHORT_TO_LONG.iter().find(|(s, _)| *s == short) {
                Some((_, long)) => format!("--{long}"),
                None => arg,
            }
        })
        .collect()
}

/// The load generator's settings. Defaults are PerfTest's.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "warren perf",
    disable_help_flag = true,
    about = "PerfTest-compatible AMQP 0-9-1 load generator"
)]
pub struct PerfArgs {
    /// Broker URI (`-h` in PerfTest), or a cluster's nodes as a comma-separated list (`-H` /
    /// `--uris` in PerfTest): connections are spread over them round-robin.
    #[arg(long, alias = "uris", default_value = "amqp://localhost")]
    pub uri: String,
    /// Producer count; each has its own connection and channel.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Consumer count; each has its own connection and channel.
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Message body size in bytes (at least 20: timestamp, producer, sequence).
    #[arg(long, default_value_t = 12)]
    pub size: usize,
    /// Publish rate limit per producer, msg/s (unlimited when absent or negative).
    #[arg(long, allow_hyphen_values = true)]
    pub rate: Option<f64>,
    /// Run time in seconds (forever when absent, unless message counts stop it).
    #[arg(long)]
    pub time: Option<f64>,
    /// Messages each producer sends (0 = no limit).
    #[arg(long, default_value_t = 0)]
    pub pmessages: u64,
    /// Messages each consumer receives before stopping (0 = no limit).
    #[arg(long, default_value_t = 0)]
    pub cmessages: u64,
    /// Reporting interval in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Consume with automatic acknowledgement (no-ack).
    #[arg(long)]
    pub autoack: bool,
    /// Consumer prefetch count (basic.qos per consumer).
    #[arg(long, default_value_t = 0)]
    pub qos: u16,
    /// Channel prefetch count (basic.qos global).
    #[arg(long, default_value_t = 0)]
    pub global_qos: u16,
    /// Ack with `multiple` every N messages.
    #[arg(long, default_value_t = 0)]
    pub multi_ack_every: u64,
    /// Publisher confirms with at most N unconfirmed messages per producer (-1: off).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub confirm: i64,
    /// Message flags: persistent, mandatory (repeatable).
    #[arg(long)]
    pub flag: Vec<String>,
    /// Queue name ("" = a server-named queue per consumer).
    #[arg(long, default_value = "")]
    pub queue: String,
    /// Whether declared queues are auto-delete.
    #[arg(long, default_value = "true")]
    pub auto_delete: String,
    /// Queue arguments, `k=v,k2=v2` (numbers become integers).
    #[arg(long, default_value = "")]
    pub queue_args: String,
    /// Exchange type.
    #[arg(long = "type", default_value = "direct")]
    pub exchange_type: String,
    /// Exchange name.
    #[arg(long, default_value = "direct")]
    pub exchange: String,
    /// Routing key (default: the queue name, or a random key).
    #[arg(long)]
    pub routing_key: Option<String>,
    /// Queue name pattern with %d, e.g. perf-test-%d.
    #[arg(long)]
    pub queue_pattern: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub queue_pattern_from: usize,
    #[arg(long, default_value_t = 1)]
    pub queue_pattern_to: usize,
    /// Producer transaction size: commit every N messages (0 = no transactions).
    #[arg(long, default_value_t = 0)]
    pub ptxsize: u64,
    /// Consumer transaction size: commit every N acks (0 = no transactions).
    #[arg(long, default_value_t = 0)]
    pub ctxsize: u64,
    /// Consume with basic.get polling instead of basic.consume.
    #[arg(long)]
    pub polling: bool,
    /// Polling interval in ms when a get comes back empty.
    #[arg(long, default_value_t = 0)]
    pub polling_interval: u64,
    /// Queues already exist: do not declare them.
    #[arg(long)]
    pub predeclared: bool,
    /// Serve the tool's own metrics for Prometheus over HTTP.
    #[arg(long)]
    pub metrics_prometheus: bool,
    #[arg(long, default_value_t = 8080)]
    pub metrics_prometheus_port: u16,
    /// Extra labels for the Prometheus metrics, `k=v,k2=v2`.
    #[arg(long)]
    pub metrics_tags: Option<String>,
    /// Test id printed on each line.
    #[arg(long)]
    pub id: Option<String>,
    /// Write the summary and intervals as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the interval lines as CSV.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// After producers stop, wait up to this long for consumers to drain (seconds).
    #[arg(long, default_value_t = 5.0)]
    pub drain_timeout: f64,
    /// Print nothing per interval.
    #[arg(long)]
    pub quiet: bool,
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

impl PerfArgs {
    /// Parses a PerfTest command line (without the program name).
    pub fn parse_perftest<I: IntoIterator<Item = String>>(
        args: I,
    ) -> Result<PerfArgs, clap::Error> {
        let mut all = vec!["warren perf".to_owned()];
        all.extend(normalize(args));
        PerfArgs::try_parse_from(all)
    }

    pub fn persistent(&self) -> bool {
        self.flag
            .iter()
            .any(|f| f.eq_ignore_ascii_case("persistent"))
    }

    pub fn mandatory(&self) -> bool {
        self.flag
            .iter()
            .any(|f| f.eq_ignore_ascii_case("mandatory"))
    }

    pub fn rate_per_s(&self) -> Option<f64> {
        self.rate.filter(|r| *r > 0.0)
    }

    /// The unconfirmed-message window, when confirms are on (0 means no window).
    pub fn confirm_window(&self) -> Option<usize> {
        (self.confirm >= 0).then_some(self.confirm as usize)
    }

    pub fn auto_delete(&self) -> bool {
        !matches!(
            self.auto_delete.to_ascii_lowercase().as_str(),
            "false" | "0" | "no"
        )
    }

    /// The queues this run declares and uses, in order (empty: one server-named per consumer).
    pub fn queue_names(&self) -> Vec<String> {
        match &self.queue_pattern {
            Some(p) => (self.queue_pattern_from..=self.queue_pattern_to)
                .map(|i| p.replace("%d", &i.to_string()))
                .collect(),
            None if !self.queue.is_empty() => vec![self.queue.clone()],
            None => vec![],
        }
    }

    pub fn queue_arguments(&self) -> Result<FieldTable, String> {
        parse_key_values(&self.queue_args)
    }
}

/// `k=v,k2=v2` into a field table: integers and booleans typed, the rest strings.
pub fn parse_key_values(s: &str) -> Result<FieldTable, String> {
    let mut table = FieldTable::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("queue argument {pair:?} is not key=value"))?;
        let value = if let Ok(n) = v.parse::<i64>() {
            FieldValue::I64(n)
        } else if let Ok(b) = v.parse::<bool>() {
            FieldValue::Bool(b)
        } else {
            FieldValue::string(v)
        };
        table.insert(k.trim(), value);
    }
    Ok(table)
}

/// Parses a subcommand's command line, `words` being its name as the user typed it (e.g.
/// "warren perf scenario"). `Ok(None)` when the line asked for help or the version, which is
/// printed on stdout: not an error (exit status 0), unlike a line that does not parse.
pub(crate) fn parse_or_help<T: clap::Parser>(
    words: &str,
    args: impl IntoIterator<Item = String>,
) -> anyhow::Result<Option<T>> {
    match T::try_parse_from(std::iter::once(words.to_owned()).chain(args)) {
        Ok(parsed) => Ok(Some(parsed)),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            print!("{e}");
            Ok(None)
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(cmd: &str) -> PerfArgs {
        // Shell-like split good enough for the seeds' quoting.
        let mut args = vec![];
        let mut cur = String::new();
        let mut quoted = false;
        for ch in cmd.chars() {
            match ch {
                '\'' => quoted = !quoted,
                c if c.is_whitespace() && !quoted => {
                    if !cur.is_empty() {
                        args.push(std::mem::take(&mut cur));
                    }
                }
                '\\' => {}
                c => cur.push(c),
            }
        }
        if !cur.is_empty() {
            args.push(cur);
        }
        PerfArgs::parse_perftest(args).unwrap()
    }

    #[test]
    fn seed_000_command_line() {
        let a = parse(
            "--autoack \
            --interval 15 \
            --size 1000 \
            --queue-args 'x-max-length=10000' \
            --routing-key perf-test \
            --uri 'amqp://admin:pass@10.80.163.3:5672/%2F' \
            --metrics-prometheus \
            --metrics-tags 'type=publisher,type=consumer,deployment=low-latency' \
            --queue-pattern 'perf-test-%d' \
            --queue-pattern-from 0 \
            --queue-pattern-to 0 \
            --consumers 1 \
            --producers 1 \
            --rate 100",
        );
        assert!(a.autoack);
        assert_eq!(a.interval, 15.0);
        assert_eq!(a.size, 1000);
        assert_eq!(
            a.queue_arguments()
                .unwrap()
                .get("x-max-length")
                .and_then(|v| v.as_i64()),
            Some(10_000)
        );
        assert_eq!(a.routing_key.as_deref(), Some("perf-test"));
        assert_eq!(a.uri, "amqp://admin:pass@10.80.163.3:5672/%2F");
        assert!(a.metrics_prometheus);
        assert_eq!(a.queue_names(), vec!["perf-test-0".to_owned()]);
        assert_eq!((a.producers, a.consumers), (1, 1));
        assert_eq!(a.rate_per_s(), Some(100.0));
        assert_eq!(a.confirm_window(), None);
    }

    #[test]
    fn short_options_like_perftest() {
        let a = parse(
            "-h amqp://guest:guest@localhost:5681 -x 2 -y 3 -s 10000 -r 5000 -z 30 -C 10 -D 20 \
             -q 200 -Q 50 -A 100 -c 500 -f persistent -f mandatory -u q1 -ad false \
             -qa x-queue-mode=lazy,x-max-length=5 -t topic -e ex -k rk -m 10 -n 5 -po -i 2",
        );
        assert_eq!(a.uri, "amqp://guest:guest@localhost:5681");
        assert_eq!((a.producers, a.consumers, a.size), (2, 3, 10_000));
        assert_eq!((a.rate_per_s(), a.time), (Some(5000.0), Some(30.0)));
        assert_eq!((a.pmessages, a.cmessages), (10, 20));
        assert_eq!((a.qos, a.global_qos, a.multi_ack_every), (200, 50, 100));
        assert_eq!(a.confirm_window(), Some(500));
        assert!(a.persistent() && a.mandatory());
        assert_eq!(a.queue_names(), vec!["q1".to_owned()]);
        assert!(!a.auto_delete());
        let qa = a.queue_arguments().unwrap();
        assert_eq!(
            qa.get("x-queue-mode").and_then(|v| v.as_str()),
            Some("lazy")
        );
        assert_eq!(
            (a.exchange_type.as_str(), a.exchange.as_str()),
            ("topic", "ex")
        );
        assert_eq!(a.routing_key.as_deref(), Some("rk"));
        assert_eq!(
            (a.ptxsize, a.ctxsize, a.polling, a.interval),
            (10, 5, true, 2.0)
        );
    }

    #[test]
    fn defaults_match_perftest() {
        let a = parse("");
        assert_eq!((a.producers, a.consumers, a.size), (1, 1, 12));
        assert_eq!(a.rate_per_s(), None);
        assert!(!a.autoack && a.auto_delete());
        assert_eq!(
            (a.exchange.as_str(), a.exchange_type.as_str()),
            ("direct", "direct")
        );
        assert!(a.queue_names().is_empty());
    }

    #[test]
    fn queue_pattern_range() {
        let a = parse(
            "--queue-pattern perf-test-%d --queue-pattern-from 1 --queue-pattern-to 3 -x 3 -y 3",
        );
        assert_eq!(
            a.queue_names(),
            vec!["perf-test-1", "perf-test-2", "perf-test-3"]
        );
    }

    #[test]
    fn unknown_flag_is_an_error() {
        assert!(PerfArgs::parse_perftest(vec!["--no-such-flag".to_owned()]).is_err());
    }
}

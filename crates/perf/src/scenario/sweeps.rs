//! The PerfTest sweeps of seeds 000 and 001 ("RabbitMQ latency" reports): publish rate, credit
//! flow, consumers, producers, queues, queue types, confirms, acks and exchange types. Every
//! step is a PerfTest command line built from the seeds' base command, so the report's
//! Commands section can be pasted into PerfTest itself.

use super::Ctx;
use crate::output::RunResult;
use crate::report::{Metric, PlotSpec, Report, Section, Table, Unit};
use crate::runner::ms;
use anyhow::{bail, Result};

/// The seeds' base command (000/001) minus the URI and the Prometheus flags.
fn base(size: usize) -> Vec<String> {
    s(&[
        "--autoack",
        "--interval",
        "1",
        "--size",
        &size.to_string(),
        "--queue-args",
        "x-max-length=10000",
        "--routing-key",
        "perf-test",
        "--queue-pattern",
        "perf-test-%d",
        "--queue-pattern-from",
        "0",
        "--queue-pattern-to",
        "0",
        "--consumers",
        "1",
        "--producers",
        "1",
    ])
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Replaces a flag's value (or appends the flag) in a command line.
fn set(args: &mut Vec<String>, flag: &str, value: &str) {
    match args.iter().position(|a| a == flag) {
        Some(i) => args[i + 1] = value.to_owned(),
        None => args.extend([flag.to_owned(), value.to_owned()]),
    }
}

fn remove(args: &mut Vec<String>, flag: &str) {
    args.retain(|a| a != flag);
}

struct Step {
    keys: Vec<String>,
    x: f64,
    args: Vec<String>,
}

/// Which columns a section shows, after its keys.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// Max 99th | Max 95th | Max 75th
    Latency,
    /// Msg/s | Max 99th | Max 95th | Max 75th
    RateLatency,
}

fn latency_values(r: &RunResult) -> Vec<Option<f64>> {
    if r.latency.count == 0 {
        return vec![None, None, None];
    }
    vec![
        Some(ms(r.max_p99_us)),
        Some(ms(r.max_p95_us)),
        Some(ms(r.max_p75_us)),
    ]
}

struct Sweep<'a> {
    ctx: &'a mut Ctx,
    report: Report,
    details: Table,
}

impl Sweep<'_> {
    async fn section(
        &mut self,
        heading: &str,
        text: &str,
        key_headers: &[&str],
        shape: Shape,
        steps: Vec<Step>,
        x_label: &str,
    ) -> Result<()> {
        let mut metrics = vec![];
        if shape == Shape::RateLatency {
            metrics.push(Metric::higher("Msg/s", Unit::Count).headline());
        }
        metrics.extend([
            Metric::lower("Max 99th", Unit::Ms).headline(),
            Metric::lower("Max 95th", Unit::Ms),
            Metric::lower("Max 75th", Unit::Ms),
        ]);
        let mut table = Table::new(key_headers, &metrics);
        for step in steps {
            let label = step.keys.join("/");
            let results = self.ctx.perftest(&label, &step.args).await?;
            let mut keys = step.keys.clone();
            let mut x = step.x;
            if keys[0] == "MAX" {
                // Unlimited rate: the key is what the first broker achieved, as in the seed.
                keys[0] = format!("{:.0} msg/s (MAX)", results[0].send_rate_per_s);
                x = results[0].send_rate_per_s;
            }
            let values = results
                .iter()
                .map(|r| {
                    let mut v = vec![];
                    if shape == Shape::RateLatency {
                        v.push(Some(r.send_rate_per_s.round()));
                    }
                    v.extend(latency_values(r));
                    v
                })
                .collect();
            table.push(keys.clone(), x, values);
            let detail_values = results
                .iter()
                .map(|r| {
                    vec![
                        Some(r.send_rate_per_s),
                        Some(r.receive_rate_per_s),
                        Some(r.counts.sent as f64),
                        Some(r.counts.received as f64),
                        r.lost.map(|l| l as f64),
                        Some(ms(r.latency.p50_us)),
                        r.broker_cpu_percent,
                        r.tool_cpu_percent,
                    ]
                })
                .collect();
            self.details.push(
                vec![format!("{heading}: {}", keys.join(" / "))],
                0.0,
                detail_values,
            );
        }
        let offset = usize::from(shape == Shape::RateLatency);
        let stem = format!(
            "{}-{}",
            self.ctx.args.name,
            heading
                .to_lowercase()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect::<String>()
        );
        let plot = PlotSpec {
            file_stem: stem.trim_end_matches('-').to_owned(),
            title: heading.to_owned(),
            x_label: x_label.to_owned(),
            y_label: "latency, ms".to_owned(),
            metric_indexes: vec![offset, offset + 1, offset + 2],
            x_max: None,
        };
        self.report.sections.push(Section {
            heading: heading.to_owned(),
            text: text.to_owned(),
            table,
            plots: vec![plot],
        });
        Ok(())
    }
}

fn rate_label(r: f64) -> String {
    format!("{r:.0} msg/s")
}

pub async fn run(name: &str, ctx: &mut Ctx) -> Result<Report> {
    let details = Table::new(
        &["Step"],
        &[
            // Paced steps send what they are asked to: the rates are higher-is-better only
            // where a broker falls behind, which the ratio then shows.
            Metric::higher("Sent msg/s", Unit::Count),
            Metric::higher("Received msg/s", Unit::Count),
            Metric::info("Sent", Unit::Count),
            Metric::info("Received", Unit::Count),
            Metric::lower("Lost", Unit::Count),
            Metric::lower("Median", Unit::Ms),
            Metric::lower("Broker CPU %", Unit::Percent).headline(),
            // The load tool's own CPU: not a figure of the broker under test.
            Metric::info("warren perf CPU %", Unit::Percent),
        ],
    );
    let quick = ctx.args.quick;
    let title = format!("warren perf scenario {name}");
    let mut sw = Sweep {
        ctx,
        report: Report {
            title,
            ..Default::default()
        },
        details,
    };
    let lat = &["Max 99th", "Max 95th", "Max 75th"];
    let _ = lat;
    match name {
        "publish-rate" => {
            sw.report.intro = "Seeds 000/001, \"How does publish rate affect message latency?\": 1 producer, 1 consumer (autoack), one non-durable queue with x-max-length=10000, 1000-byte bodies. Max NNth = the largest per-second NNth percentile of consumer flight time over the step (first second excluded). 0 in --steps means unlimited (MAX).".into();
            let rates = sw.ctx.steps(
                &[
                    100.0, 1000.0, 10000.0, 20000.0, 30000.0, 40000.0, 50000.0, 60000.0, 80000.0,
                    0.0,
                ],
                &[100.0, 1000.0, 5000.0, 0.0],
            );
            let steps = rates
                .iter()
                .map(|&r| {
                    let mut args = base(1000);
                    if r > 0.0 {
                        set(&mut args, "--rate", &format!("{r}"));
                        Step {
                            keys: vec![rate_label(r)],
                            x: r,
                            args,
                        }
                    } else {
                        Step {
                            keys: vec!["MAX".into()],
                            x: 0.0,
                            args,
                        }
                    }
                })
                .collect();
            sw.section(
                "How does publish rate affect message latency?",
                "",
                &["Publish Rate"],
                Shape::Latency,
                steps,
                "publish rate, msg/s",
            )
            .await?;
        }
        "credit-flow" => {
            sw.report.intro = "Seeds 000/001, \"How does credit flow affect message latency?\": the publish-rate setup at the top rate. Credit flow is a server setting, not a client one: start the broker with each setting and run this scenario once per setting with `--credit-label '{100, 50}'` (the row label); one run measures the setting the broker has now.".into();
            let rate = sw.ctx.steps(&[63000.0], &[5000.0])[0];
            let mut args = base(1000);
            set(&mut args, "--rate", &format!("{rate}"));
            let label = sw.ctx.args.credit_label.clone();
            let heading = format!("Publish rate: {rate:.0} msg/s");
            sw.section(
                &heading,
                "",
                &["Credits"],
                Shape::Latency,
                vec![Step {
                    keys: vec![label],
                    x: 1.0,
                    args,
                }],
                "setting",
            )
            .await?;
        }
        "consumers" | "producers" => {
            let producers = name == "producers";
            sw.report.intro = format!(
                "Seed 001, \"How do multiple {name} affect message latency?\": the publish-rate setup with N {name} on the one queue; the publish rate is the total{}.",
                if producers { " (each producer sends rate/N)" } else { "" }
            );
            let rates: Vec<f64> = if quick {
                vec![2000.0]
            } else {
                vec![10000.0, 20000.0, 30000.0, 40000.0, 50000.0]
            };
            let counts = sw
                .ctx
                .steps(&[1.0, 2.0, 5.0, 10.0, 100.0, 500.0], &[1.0, 2.0, 5.0]);
            for rate in rates {
                let steps = counts
                    .iter()
                    .map(|&n| {
                        let mut args = base(1000);
                        if producers {
                            set(&mut args, "--producers", &format!("{n}"));
                            set(&mut args, "--rate", &format!("{}", rate / n));
                        } else {
                            set(&mut args, "--consumers", &format!("{n}"));
                            set(&mut args, "--rate", &format!("{rate}"));
                        }
                        Step {
                            keys: vec![format!("{n}")],
                            x: n,
                            args,
                        }
                    })
                    .collect();
                let header = if producers { "Producers" } else { "Consumers" };
                sw.section(
                    &format!("Publish rate: {rate:.0} msg/s"),
                    "",
                    &[header],
                    Shape::Latency,
                    steps,
                    &format!("{name} count"),
                )
                .await?;
            }
        }
        "queues" => {
            sw.report.intro = "Seeds 000/001, \"What are the effects of running multiple queues?\": 1 producer and 1 consumer per queue, each with its own connection and channel; the total rate is split evenly.".into();
            let rate = if quick { 3000.0 } else { 50000.0 };
            let counts = sw
                .ctx
                .steps(&[1.0, 2.0, 5.0, 10.0, 100.0, 500.0], &[1.0, 2.0, 5.0]);
            let steps = counts
                .iter()
                .map(|&n| {
                    let mut args = base(1000);
                    set(&mut args, "--queue-pattern-from", "1");
                    set(&mut args, "--queue-pattern-to", &format!("{n}"));
                    set(&mut args, "--producers", &format!("{n}"));
                    set(&mut args, "--consumers", &format!("{n}"));
                    set(&mut args, "--rate", &format!("{}", rate / n));
                    Step {
                        keys: vec![format!("{n}"), format!("{:.0}", rate / n)],
                        x: n,
                        args,
                    }
                })
                .collect();
            sw.section(
                &format!("Publish rate: {rate:.0} msg/s"),
                "",
                &["Queues / Producers / Consumers", "Msg/s per queue"],
                Shape::Latency,
                steps,
                "queue count",
            )
            .await?;
        }
        "queue-types" => {
            sw.report.intro = "Seed 001, \"What are the effects of different queue types?\": 10000-byte bodies (above the message-index embed threshold). durable = durable queue and persistent messages; lazy = durable + persistent + x-queue-mode=lazy.".into();
            let rates = sw
                .ctx
                .steps(&[10000.0, 20000.0, 30000.0, 40000.0, 50000.0], &[2000.0]);
            for rate in rates {
                let steps = ["non-durable", "durable", "lazy"]
                    .iter()
                    .enumerate()
                    .map(|(i, kind)| {
                        let mut args = base(10000);
                        set(&mut args, "--rate", &format!("{rate}"));
                        if *kind != "non-durable" {
                            args.extend(s(&["--flag", "persistent"]));
                        }
                        if *kind == "lazy" {
                            set(
                                &mut args,
                                "--queue-args",
                                "x-max-length=10000,x-queue-mode=lazy",
                            );
                        }
                        Step {
                            keys: vec![kind.to_string()],
                            x: i as f64,
                            args,
                        }
                    })
                    .collect();
                sw.section(
                    &format!("Publish rate: {rate:.0} msg/s"),
                    "",
                    &["Queue Type"],
                    Shape::Latency,
                    steps,
                    "queue type (0 non-durable, 1 durable, 2 lazy)",
                )
                .await?;
            }
        }
        "confirms" | "acks" => {
            let confirms = name == "confirms";
            sw.report.intro = if confirms {
                "Seed 001, \"What are the effects of publisher confirms?\": at most N unconfirmed messages per producer (`--confirm N`); Msg/s is the achieved publish rate.".into()
            } else {
                "Seed 001, \"What are the effects of consumer ACKs?\": ack with multiple=true every N messages, prefetch 2N (`--multi-ack-every N --qos 2N`); disabled = autoack; Msg/s is the achieved publish rate.".into()
            };
            let rate = if quick { 5000.0 } else { 50000.0 };
            let mut every = vec![0.0];
            every.extend(
                sw.ctx
                    .steps(&[1.0, 2.0, 5.0, 10.0, 100.0, 500.0], &[1.0, 10.0, 100.0]),
            );
            let steps = every
                .iter()
                .map(|&n| {
                    let mut args = base(1000);
                    set(&mut args, "--rate", &format!("{rate}"));
                    let key = if n == 0.0 {
                        "disabled".to_owned()
                    } else if n == 1.0 {
                        "every 1 msg".to_owned()
                    } else {
                        format!("every {n} msgs")
                    };
                    if n > 0.0 {
                        if confirms {
                            set(&mut args, "--confirm", &format!("{n}"));
                        } else {
                            remove(&mut args, "--autoack");
                            set(&mut args, "--multi-ack-every", &format!("{n}"));
                            set(&mut args, "--qos", &format!("{}", (2.0 * n).min(65535.0)));
                        }
                    }
                    Step {
                        keys: vec![key],
                        x: n.max(0.5),
                        args,
                    }
                })
                .collect();
            let header = if confirms {
                "Publisher Confirms"
            } else {
                "Consumer ACKs"
            };
            sw.section(
                &format!("Publish rate: {rate:.0} msg/s"),
                "",
                &[header],
                Shape::RateLatency,
                steps,
                "every N messages",
            )
            .await?;
        }
        "exchange-types" => {
            sw.report.intro = "Seed 001, \"What are the effects of exchange type?\": the publish-rate setup through a direct, fanout, topic or headers exchange (headers: x-match=all on one header).".into();
            let rates = sw
                .ctx
                .steps(&[20000.0, 30000.0, 40000.0, 50000.0], &[2000.0]);
            for rate in rates {
                let steps = ["direct", "fanout", "topic", "headers"]
                    .iter()
                    .enumerate()
                    .map(|(i, kind)| {
                        let mut args = base(1000);
                        set(&mut args, "--rate", &format!("{rate}"));
                        set(&mut args, "--exchange", &format!("perf-{kind}"));
                        set(&mut args, "--type", kind);
                        Step {
                            keys: vec![kind.to_string()],
                            x: i as f64,
                            args,
                        }
                    })
                    .collect();
                sw.section(
                    &format!("Publish rate: {rate:.0} msg/s"),
                    "",
                    &["Exchange Type"],
                    Shape::RateLatency,
                    steps,
                    "exchange type (0 direct, 1 fanout, 2 topic, 3 headers)",
                )
                .await?;
            }
        }
        other => bail!("{other} is not a PerfTest sweep"),
    }
    let details = std::mem::replace(&mut sw.details, Table::new(&[], &[]));
    sw.report.sections.push(Section {
        heading: "Run details".into(),
        text: "Achieved rates and exact counts per step (lost = sent and never received after draining; with x-max-length=10000 a queue over its limit drops from the head, which counts as lost here). CPU in % of one core, broker CPU only when the broker is local.".into(),
        table: details,
        plots: vec![],
    });
    Ok(sw.report)
}

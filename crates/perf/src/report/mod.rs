//! Scenario reports: tables in the seeds' own columns, rendered as markdown, plus the plots
//! (see `plot`). When two brokers were compared every metric with a direction gets a ratio
//! column that reads "times better than the compared broker" — the first broker's figure over
//! the second's where higher is better (rates), the second's over the first's where lower is
//! better (latency, CPU, memory) — so above 1 always means the first broker did better; the
//! report opens with a one-paragraph summary of the headline ratios.

pub mod axis;
pub mod plot;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How a metric is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Shown as "1.23 ms"; values are ms.
    Ms,
    /// Shown as "12.3 µs"; values are µs.
    Us,
    /// Whole numbers (msg/s, message counts).
    Count,
    Percent,
    MiB,
}

impl Unit {
    pub fn format(self, v: f64) -> String {
        match self {
            Unit::Ms => {
                if v >= 100.0 {
                    format!("{v:.0} ms")
                } else {
                    format!("{v:.2} ms")
                }
            }
            Unit::Us => format!("{v:.1} µs"),
            Unit::Count => format!("{v:.0}"),
            Unit::Percent => format!("{v:.1}"),
            Unit::MiB => format!("{v:.1}"),
        }
    }
}

/// Which way a metric is better; it decides how a comparison's ratio is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Rates and counts of work done: the ratio is this broker's figure over the other's.
    Higher,
    /// Latency, CPU, memory, losses: the ratio is the other broker's figure over this one's,
    /// so above 1 still means this broker is better.
    Lower,
    /// Inputs and bookkeeping (offered rate, client counts): both values, no ratio.
    Neither,
}

impl Better {
    fn phrase(self) -> &'static str {
        match self {
            Better::Higher => "higher is better",
            Better::Lower => "lower is better",
            Better::Neither => "",
        }
    }
}

/// How many times better `subject` is than `other` for a metric where `better` holds; None
/// when the metric has no direction or the ratio is undefined (a zero to divide by).
pub fn times_better(better: Better, subject: f64, other: f64) -> Option<f64> {
    if better == Better::Neither || !subject.is_finite() || !other.is_finite() {
        return None;
    }
    if subject == other {
        return Some(1.0);
    }
    let (numerator, denominator) = match better {
        Better::Higher => (subject, other),
        _ => (other, subject),
    };
    (denominator > 0.0 && numerator >= 0.0).then(|| numerator / denominator)
}

/// "8.40×", "12.3×", "1568×": enough digits to read, no more.
pub fn format_ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}×")
    } else if r >= 10.0 {
        format!("{r:.1}×")
    } else {
        format!("{r:.2}×")
    }
}

/// One column of a table: its name, how it prints, which way is better, and whether the
/// report's summary quotes it.
#[derive(Debug, Clone)]
pub struct Metric {
    pub name: String,
    pub unit: Unit,
    pub better: Better,
    pub headline: bool,
}

impl Metric {
    pub fn higher(name: &str, unit: Unit) -> Metric {
        Metric::new(name, unit, Better::Higher)
    }

    pub fn lower(name: &str, unit: Unit) -> Metric {
        Metric::new(name, unit, Better::Lower)
    }

    pub fn info(name: &str, unit: Unit) -> Metric {
        Metric::new(name, unit, Better::Neither)
    }

    fn new(name: &str, unit: Unit, better: Better) -> Metric {
        Metric {
            name: name.to_owned(),
            unit,
            better,
            headline: false,
        }
    }

    /// Quoted in the report's summary.
    pub fn headline(mut self) -> Metric {
        self.headline = true;
        self
    }

    /// The header of the ratio column when `subject` is compared with `other`.
    pub fn ratio_header(&self, subject: &str, other: &str) -> String {
        format!(
            "{}: {subject} × better than {other} ({})",
            self.name,
            self.better.phrase()
        )
    }
}

/// The spread of one metric's ratios over a table's rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioSpread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// Rows where the first broker was better (ratio above 1 to two decimals).
    pub better_rows: usize,
    pub rows: usize,
}

impl RatioSpread {
    pub fn of(ratios: &[f64]) -> Option<RatioSpread> {
        let mut sorted: Vec<f64> = ratios.iter().copied().filter(|r| r.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(RatioSpread {
            min: sorted[0],
            median,
            max: sorted[n - 1],
            // Above 1 as printed: 1.004 reads "1.00×", which is no better.
            better_rows: sorted.iter().filter(|&&r| r >= 1.005).count(),
            rows: n,
        })
    }

    /// "8.40×" for one value, "1.95×–1568× (median 8.40×)" for a spread.
    pub fn range(&self) -> String {
        if self.rows == 1 || format_ratio(self.min) == format_ratio(self.max) {
            format_ratio(self.median)
        } else {
            format!(
                "{}–{} (median {})",
                format_ratio(self.min),
                format_ratio(self.max),
                format_ratio(self.median)
            )
        }
    }
}

#[derive(Debug, Clone)]
pub struct Row {
    pub keys: Vec<String>,
    /// The x coordinate in plots.
    pub x: f64,
    /// Per broker (report order), per metric.
    pub values: Vec<Vec<Option<f64>>>,
}

#[derive(Debug, Clone)]
pub struct Table {
    pub key_headers: Vec<String>,
    pub metrics: Vec<Metric>,
    pub rows: Vec<Row>,
}

impl Table {
    pub fn new(key_headers: &[&str], metrics: &[Metric]) -> Table {
        Table {
            key_headers: key_headers.iter().map(|s| s.to_string()).collect(),
            metrics: metrics.to_vec(),
            rows: vec![],
        }
    }

    pub fn push(&mut self, keys: Vec<String>, x: f64, values: Vec<Vec<Option<f64>>>) {
        self.rows.push(Row { keys, x, values });
    }

    fn value(row: &Row, broker: usize, metric: usize) -> Option<f64> {
        row.values
            .get(broker)
            .and_then(|v| v.get(metric).copied().flatten())
    }

    /// How many times better the first broker is than the second on `metric` in `row`.
    pub fn ratio(&self, row: &Row, metric: usize) -> Option<f64> {
        times_better(
            self.metrics.get(metric)?.better,
            Table::value(row, 0, metric)?,
            Table::value(row, 1, metric)?,
        )
    }

    /// The ratios of `metric` over the rows that pass `keep`.
    pub fn spread(&self, metric: usize, keep: impl Fn(&Row) -> bool) -> Option<RatioSpread> {
        let ratios: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| keep(r))
            .filter_map(|r| self.ratio(r, metric))
            .collect();
        RatioSpread::of(&ratios)
    }

    /// Markdown; with two brokers every metric gets A and B columns, and every metric with a
    /// direction a third: how many times better A is than B (above 1: A is better).
    pub fn markdown(&self, brokers: &[String]) -> String {
        let compare = brokers.len() == 2;
        let mut head: Vec<String> = self.key_headers.clone();
        for m in &self.metrics {
            if compare {
                head.push(format!("{} ({})", m.name, brokers[0]));
                head.push(format!("{} ({})", m.name, brokers[1]));
                if m.better != Better::Neither {
                    head.push(m.ratio_header(&brokers[0], &brokers[1]));
                }
            } else {
                head.push(m.name.clone());
            }
        }
        let mut out = String::new();
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let _ = writeln!(out, "|{}", " -: |".repeat(head.len()));
        for row in &self.rows {
            let mut cells = row.keys.clone();
            for (i, m) in self.metrics.iter().enumerate() {
                let fmt = |v: Option<f64>| v.map_or("–".to_owned(), |v| m.unit.format(v));
                cells.push(fmt(Table::value(row, 0, i)));
                if compare {
                    cells.push(fmt(Table::value(row, 1, i)));
                    if m.better != Better::Neither {
                        cells.push(self.ratio(row, i).map_or("–".to_owned(), format_ratio));
                    }
                }
            }
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out
    }
}

/// Which metrics of a table a plot draws, and how. The axes' scales (linear or log) and tick
/// labels follow from the data drawn (`axis`), the same way for every scenario.
#[derive(Debug, Clone)]
pub struct PlotSpec {
    pub file_stem: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub metric_indexes: Vec<usize>,
    /// Rows with a larger x are left out (a second plot without the points that change the
    /// scale, as seed 004 draws it).
    pub x_max: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Section {
    pub heading: String,
    pub text: String,
    pub table: Table,
    pub plots: Vec<PlotSpec>,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub title: String,
    pub intro: String,
    pub brokers: Vec<String>,
    pub sections: Vec<Section>,
    pub commands: Vec<String>,
}

fn steps(n: usize) -> String {
    if n == 1 {
        "1 step".to_owned()
    } else {
        format!("{n} steps")
    }
}

impl Report {
    /// One paragraph of the headline figures: with two brokers how many times better the
    /// first is than the second, per headline metric over each section's steps; with one
    /// broker the range of its values.
    pub fn summary(&self) -> String {
        let compare = self.brokers.len() == 2;
        let mut parts = vec![];
        for s in &self.sections {
            let mut figures = vec![];
            for (i, m) in s.table.metrics.iter().enumerate() {
                if !m.headline {
                    continue;
                }
                if compare {
                    let Some(spread) = s.table.spread(i, |_| true) else {
                        continue;
                    };
                    let tally = if spread.rows == 1 {
                        String::new()
                    } else {
                        format!(
                            ", better in {} of {}",
                            spread.better_rows,
                            steps(spread.rows)
                        )
                    };
                    figures.push(format!(
                        "{} ({}) {}{tally}",
                        m.name,
                        m.better.phrase(),
                        spread.range()
                    ));
                } else {
                    let values: Vec<f64> = s
                        .table
                        .rows
                        .iter()
                        .filter_map(|r| Table::value(r, 0, i))
                        .collect();
                    let Some(lo) = values.iter().copied().reduce(f64::min) else {
                        continue;
                    };
                    let hi = values.iter().copied().fold(lo, f64::max);
                    let range = if m.unit.format(lo) == m.unit.format(hi) {
                        m.unit.format(lo)
                    } else {
                        format!("{}–{}", m.unit.format(lo), m.unit.format(hi))
                    };
                    figures.push(format!("{} {range} over {}", m.name, steps(values.len())));
                }
            }
            if !figures.is_empty() {
                parts.push(format!("{}: {}", s.heading, figures.join("; ")));
            }
        }
        let lead = match self.brokers.as_slice() {
            [a, b] => format!(
                "**Summary.** Each ratio is how many times better `{a}` is than `{b}`: above 1 \
                 `{a}` is better, below 1 `{b}` is; for figures where lower is better (latency, \
                 CPU, memory, losses) it is `{b}`'s figure over `{a}`'s."
            ),
            [a] => format!("**Summary.** `{a}` alone (no `--compare`, so no ratios)."),
            _ => "**Summary.**".to_owned(),
        };
        if parts.is_empty() {
            let missing = if compare {
                "No headline figure was measured on both brokers."
            } else {
                "No headline figure was measured."
            };
            format!("{lead} {missing}")
        } else {
            format!("{lead} {}.", parts.join(". "))
        }
    }

    /// Writes `NAME.md` and the plots into `dir`; returns the markdown path.
    pub fn write(&self, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let mut md = format!(
            "# {}\n\n{}\n\n{}\n\n",
            self.title,
            self.summary(),
            self.intro
        );
        for s in &self.sections {
            let _ = writeln!(md, "## {}\n", s.heading);
            if !s.text.is_empty() {
                let _ = writeln!(md, "{}\n", s.text);
            }
            // A section of text alone (a table written out in its text) has no rows.
            if !s.table.rows.is_empty() {
                md += &s.table.markdown(&self.brokers);
                md += "\n";
            }
            for p in &s.plots {
                match plot::draw(dir, p, &s.table, &self.brokers) {
                    Ok(files) => {
                        let _ = writeln!(md, "![{}]({})\n", p.title, files.svg);
                        if files.png.is_none() {
                            md += "(PNG skipped: no TrueType font found; the SVG has the same plot.)\n\n";
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(md, "(plot failed: {e})\n");
                    }
                }
            }
        }
        if !self.commands.is_empty() {
            md += "## Commands\n\nEach step is this PerfTest-compatible command line (`warren perf ARGS`):\n\n```\n";
            for c in &self.commands {
                md += c;
                md += "\n";
            }
            md += "```\n";
        }
        let path = dir.join(format!("{name}.md"));
        std::fs::write(&path, md)?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers() -> Vec<String> {
        vec!["warren".into(), "rabbitmq".into()]
    }

    #[test]
    fn ratio_columns_read_as_times_better_both_ways() {
        let mut t = Table::new(
            &["Publish Rate"],
            &[
                Metric::higher("Msg/s", Unit::Count),
                Metric::lower("Max 99th", Unit::Ms),
                Metric::info("Offered msg/s", Unit::Count),
            ],
        );
        // Warren 8× the rate at a quarter of the latency: both ratios read 8× and 4×.
        t.push(
            vec!["MAX".into()],
            0.0,
            vec![
                vec![Some(800.0), Some(0.5), Some(1000.0)],
                vec![Some(100.0), Some(2.0), Some(1000.0)],
            ],
        );
        let md = t.markdown(&brokers());
        assert!(
            md.starts_with(
                "| Publish Rate | Msg/s (warren) | Msg/s (rabbitmq) \
                 | Msg/s: warren × better than rabbitmq (higher is better) \
                 | Max 99th (warren) | Max 99th (rabbitmq) \
                 | Max 99th: warren × better than rabbitmq (lower is better) \
                 | Offered msg/s (warren) | Offered msg/s (rabbitmq) |\n"
            ),
            "{md}"
        );
        assert!(
            md.contains("| MAX | 800 | 100 | 8.00× | 0.50 ms | 2.00 ms | 4.00× | 1000 | 1000 |"),
            "{md}"
        );
        let single = t.markdown(&["warren".into()]);
        assert!(single.starts_with("| Publish Rate | Msg/s | Max 99th | Offered msg/s |\n"));
        assert!(
            single.contains("| MAX | 800 | 0.50 ms | 1000 |"),
            "{single}"
        );
    }

    #[test]
    fn times_better_inverts_lower_is_better_and_refuses_zero_divisors() {
        assert_eq!(
            times_better(Better::Higher, 868.0, 122.0),
            Some(868.0 / 122.0)
        );
        assert_eq!(times_better(Better::Lower, 1.3, 14.0), Some(14.0 / 1.3));
        // Warren slower: below 1 either way.
        assert_eq!(times_better(Better::Higher, 50.0, 100.0), Some(0.5));
        assert_eq!(times_better(Better::Lower, 4.0, 2.0), Some(0.5));
        assert_eq!(times_better(Better::Lower, 0.0, 0.0), Some(1.0));
        assert_eq!(times_better(Better::Lower, 0.0, 5.0), None);
        assert_eq!(times_better(Better::Higher, 5.0, 0.0), None);
        assert_eq!(times_better(Better::Neither, 5.0, 1.0), None);
        assert_eq!(format_ratio(1567.86), "1568×");
        assert_eq!(format_ratio(11.22), "11.2×");
        assert_eq!(format_ratio(0.1249), "0.12×");
    }

    fn report(brokers: Vec<String>) -> Report {
        let mut latency = Table::new(
            &["Rate"],
            &[
                Metric::lower("Max 99th", Unit::Ms).headline(),
                Metric::lower("Max 95th", Unit::Ms),
            ],
        );
        for (rate, warren, rabbit) in [(100.0, 0.5, 1.0), (1000.0, 1.0, 4.0), (10000.0, 2.0, 1.0)] {
            latency.push(
                vec![format!("{rate}")],
                rate,
                vec![
                    vec![Some(warren), Some(warren)],
                    vec![Some(rabbit), Some(rabbit)],
                ],
            );
        }
        let mut throughput = Table::new(
            &["Threads"],
            &[Metric::higher("msg/s", Unit::Count).headline()],
        );
        throughput.push(
            vec!["50".into()],
            50.0,
            vec![vec![Some(88486.0)], vec![Some(12466.0)]],
        );
        Report {
            title: "t".into(),
            brokers,
            sections: vec![
                Section {
                    heading: "Latency".into(),
                    text: String::new(),
                    table: latency,
                    plots: vec![],
                },
                Section {
                    heading: "Throughput".into(),
                    text: String::new(),
                    table: throughput,
                    plots: vec![],
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn summary_quotes_the_headline_ratios() {
        let s = report(brokers()).summary();
        assert!(
            s.starts_with(
                "**Summary.** Each ratio is how many times better `warren` is than `rabbitmq`"
            ),
            "{s}"
        );
        // Ratios 2, 4 and 0.5: the spread, the median and how often Warren was better.
        assert!(
            s.contains(
                "Latency: Max 99th (lower is better) 0.50×–4.00× (median 2.00×), better in 2 of 3 steps."
            ),
            "{s}"
        );
        assert!(!s.contains("Max 95th"), "not a headline: {s}");
        assert!(
            s.contains("Throughput: msg/s (higher is better) 7.10×."),
            "{s}"
        );
        let single = report(vec!["warren".into()]).summary();
        assert!(
            single.contains("Latency: Max 99th 0.50 ms–2.00 ms over 3 steps"),
            "{single}"
        );
    }

    #[test]
    fn written_report_starts_with_the_summary() {
        let dir = std::env::temp_dir().join(format!("warren-perf-report-{}", std::process::id()));
        let mut r = report(brokers());
        r.intro = "The intro.".into();
        let path = r.write(&dir, "t").unwrap();
        let md = std::fs::read_to_string(path).unwrap();
        let _ = std::fs::remove_dir_all(dir);
        let paragraphs: Vec<&str> = md.split("\n\n").collect();
        assert_eq!(paragraphs[0], "# t");
        assert!(paragraphs[1].starts_with("**Summary.**"), "{md}");
        assert_eq!(paragraphs[2], "The intro.");
    }
}

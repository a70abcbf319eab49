//! Scenario reports: tables in the seeds' own columns, rendered as markdown, with ratio
//! columns when two brokers were compared, plus the plots (see `plot`).

pub mod plot;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How a metric is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Shown as "1.23 ms"; values are ms.
    Ms,
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
            Unit::Count => format!("{v:.0}"),
            Unit::Percent => format!("{v:.1}"),
            Unit::MiB => format!("{v:.1}"),
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
    pub metrics: Vec<(String, Unit)>,
    pub rows: Vec<Row>,
}

impl Table {
    pub fn new(key_headers: &[&str], metrics: &[(&str, Unit)]) -> Table {
        Table {
            key_headers: key_headers.iter().map(|s| s.to_string()).collect(),
            metrics: metrics.iter().map(|(m, u)| (m.to_string(), *u)).collect(),
            rows: vec![],
        }
    }

    pub fn push(&mut self, keys: Vec<String>, x: f64, values: Vec<Vec<Option<f64>>>) {
        self.rows.push(Row { keys, x, values });
    }

    /// Markdown; with two brokers every metric gets A, B and B/A columns.
    pub fn markdown(&self, brokers: &[String]) -> String {
        let mut head: Vec<String> = self.key_headers.clone();
        for (m, _) in &self.metrics {
            if brokers.len() == 2 {
                head.push(format!("{m} ({})", brokers[0]));
                head.push(format!("{m} ({})", brokers[1]));
                head.push(format!("{m} {}/{}", brokers[1], brokers[0]));
            } else {
                head.push(m.clone());
            }
        }
        let mut out = String::new();
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let _ = writeln!(out, "|{}", " -: |".repeat(head.len()));
        for row in &self.rows {
            let mut cells = row.keys.clone();
            for (i, (_, unit)) in self.metrics.iter().enumerate() {
                let get = |b: usize| row.values.get(b).and_then(|v| v.get(i).copied().flatten());
                let fmt = |v: Option<f64>| v.map_or("–".to_owned(), |v| unit.format(v));
                if brokers.len() == 2 {
                    cells.push(fmt(get(0)));
                    cells.push(fmt(get(1)));
                    cells.push(match (get(0), get(1)) {
                        (Some(a), Some(b)) if a > 0.0 => format!("{:.2}×", b / a),
                        _ => "–".to_owned(),
                    });
                } else {
                    cells.push(fmt(get(0)));
                }
            }
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out
    }
}

/// Which metrics of a table a plot draws, and how.
#[derive(Debug, Clone)]
pub struct PlotSpec {
    pub file_stem: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub metric_indexes: Vec<usize>,
    pub log_x: bool,
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

impl Report {
    /// Writes `NAME.md` and the plots into `dir`; returns the markdown path.
    pub fn write(&self, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let mut md = format!("# {}\n\n{}\n\n", self.title, self.intro);
        for s in &self.sections {
            let _ = writeln!(md, "## {}\n", s.heading);
            if !s.text.is_empty() {
                let _ = writeln!(md, "{}\n", s.text);
            }
            md += &s.table.markdown(&self.brokers);
            md += "\n";
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

    #[test]
    fn compare_adds_ratio_columns() {
        let mut t = Table::new(&["Publish Rate"], &[("Max 99th", Unit::Ms)]);
        t.push(
            vec!["100 msg/s".into()],
            100.0,
            vec![vec![Some(2.0)], vec![Some(1.0)]],
        );
        let md = t.markdown(&["warren".into(), "rabbitmq".into()]);
        assert!(md.contains(
            "| Publish Rate | Max 99th (warren) | Max 99th (rabbitmq) | Max 99th rabbitmq/warren |"
        ));
        assert!(md.contains("| 100 msg/s | 2.00 ms | 1.00 ms | 0.50× |"));
        let single = t.markdown(&["warren".into()]);
        assert!(single.starts_with("| Publish Rate | Max 99th |"));
    }
}

//! The Prometheus text exposition format (version 0.0.4), written into one `String`, or for
//! a streamed scrape (`Exposition::streaming`) handed to the connection every 64 KiB so that
//! a per-object scrape of 100,000 queues is never held whole: a family is `# TYPE` then `# HELP` (RabbitMQ's order), then its samples.
//! Label values are escaped as the format requires (`\`, `"` and newlines); names are
//! the caller's constants.
//!
//! For `/metrics/detailed` it also filters: families are written in RabbitMQ's groups
//! (`group`), and only the groups the `Selection` names are kept, renamed
//! `rabbitmq_detailed_*`, with queue samples of unselected vhosts left out.

use crate::selection::Selection;
use std::fmt::Write;
use warren_listener::streamed_body::{ChunkWriter, CHUNK_BYTES};

/// The media type of the text format, as RabbitMQ's plugin sends it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// Cumulative `_bucket{le=…}` samples, then `_sum` and `_count`.
    Histogram,
    /// RabbitMQ's info metrics (`rabbitmq_identity_info`, `rabbitmq_build_info`) and
    /// alarms are untyped.
    Untyped,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Untyped => "untyped",
        }
    }
}

/// A sample's value: counts stay integers in the text, times and ratios are floats.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

#[derive(Default)]
pub struct Exposition {
    text: String,
    /// Set for a streamed scrape: where `text` goes once it holds a chunk.
    sink: Option<ChunkWriter>,
    /// Set for `/metrics/detailed`.
    selection: Option<Selection>,
    /// Whether the current group's families are written, and under the detailed prefix.
    skipping: bool,
    renaming: bool,
}

const PREFIX: &str = "rabbitmq_";
const DETAILED_PREFIX: &str = "rabbitmq_detailed_";

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// An exposition for `/metrics/detailed`: only selected groups, renamed.
    pub fn detailed(selection: Selection) -> Exposition {
        Exposition {
            selection: Some(selection),
            ..Exposition::default()
        }
    }

    /// An exposition whose text is sent as it is written (`selection` as `detailed`'s for
    /// `/metrics/detailed`); `finish` sends the rest.
    pub fn streaming(sink: ChunkWriter, selection: Option<Selection>) -> Exposition {
        Exposition {
            sink: Some(sink),
            selection,
            ..Exposition::default()
        }
    }

    /// A streamed exposition hands over what it holds once that makes a chunk.
    fn spill(&mut self) {
        if let Some(sink) = &mut self.sink {
            if self.text.len() >= CHUNK_BYTES {
                sink.push_str(&self.text);
                self.text.clear();
            }
        }
    }

    /// Ends a streamed exposition: what is left is sent and the body ends.
    pub fn finish(mut self) {
        if let Some(mut sink) = self.sink.take() {
            sink.push_str(&self.text);
        }
    }

    /// The families that follow belong to RabbitMQ's metric group `group` (one of
    /// `alternatives`, which RabbitMQ serves the same families for); `None` for families
    /// outside the groups (identity), written as they are in every endpoint.
    pub fn group(&mut self, group: Option<&[&str]>) {
        (self.skipping, self.renaming) = match (&self.selection, group) {
            (None, _) | (_, None) => (false, false),
            (Some(selection), Some(alternatives)) => {
                let wanted = alternatives.iter().any(|g| selection.wants_group(g));
                (!wanted, true)
            }
        };
    }

    /// Whether a detailed scrape asked for any of these groups (always false elsewhere).
    pub fn selected(&self, groups: &[&str]) -> bool {
        self.selection
            .as_ref()
            .is_some_and(|s| groups.iter().any(|g| s.wants_group(g)))
    }

    fn push_name(&mut self, name: &str) {
        match name.strip_prefix(PREFIX) {
            Some(rest) if self.renaming => {
                self.text.push_str(DETAILED_PREFIX);
                self.text.push_str(rest);
            }
            _ => self.text.push_str(name),
        }
    }

    /// Starts a metric family; its samples follow with `sample`.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        if self.skipping {
            return;
        }
        self.text.push_str("# TYPE ");
        self.push_name(name);
        let _ = writeln!(self.text, " {}", kind.as_str());
        self.text.push_str("# HELP ");
        self.push_name(name);
        let _ = writeln!(self.text, " {}", escape_help(help));
        self.spill();
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Into<Value>) {
        if self.skipping {
            return;
        }
        if let Some(selection) = &self.selection {
            let vhost = labels.iter().find(|(label, _)| *label == "vhost");
            if vhost.is_some_and(|(_, vhost)| !selection.wants_vhost(vhost)) {
                return;
            }
        }
        self.push_name(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(label);
                self.text.push_str("=\"");
                push_escaped_label_value(&mut self.text, value);
                self.text.push('"');
            }
            self.text.push('}');
        }
        self.text.push(' ');
        match value.into() {
            Value::Int(v) => {
                let _ = write!(self.text, "{v}");
            }
            Value::Float(v) if v.is_nan() => self.text.push_str("NaN"),
            Value::Float(v) if v.is_infinite() => {
                self.text.push_str(if v > 0.0 { "+Inf" } else { "-Inf" })
            }
            Value::Float(v) => {
                let _ = write!(self.text, "{v:?}");
            }
        }
        self.text.push('\n');
        self.spill();
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Into<Value>) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

fn push_escaped_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// HELP text escapes only backslashes and newlines.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escaping() {
        let mut e = Exposition::new();
        e.family("rabbitmq_queue_messages", Kind::Gauge, "Sum of ready");
        e.sample(
            "rabbitmq_queue_messages",
            &[("vhost", "/"), ("queue", "a\"b\\c\nd")],
            3u64,
        );
        e.single(
            "rabbitmq_erlang_uptime_seconds",
            Kind::Gauge,
            "Node uptime",
            1.5,
        );
        e.sample("x", &[], f64::NAN);
        assert_eq!(
            e.into_text(),
            "# TYPE rabbitmq_queue_messages gauge\n\
             # HELP rabbitmq_queue_messages Sum of ready\n\
             rabbitmq_queue_messages{vhost=\"/\",queue=\"a\\\"b\\\\c\\nd\"} 3\n\
             # TYPE rabbitmq_erlang_uptime_seconds gauge\n\
             # HELP rabbitmq_erlang_uptime_seconds Node uptime\n\
             rabbitmq_erlang_uptime_seconds 1.5\n\
             x NaN\n"
        );
    }
}

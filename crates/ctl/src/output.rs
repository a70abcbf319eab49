//! Printing results as rabbitmqctl does: a tab-separated table with a header (its default
//! `table` formatter), an aligned `pretty_table`, or `json` (an array of objects with the
//! selected columns, in order), and banner lines that `--quiet` and JSON leave out.

use serde_json::Value;
use std::fmt::Write as _;

/// rabbitmqctl's `--formatter` values that `warren ctl` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Tab-separated columns with a header line (rabbitmqctl's default).
    Table,
    /// Columns aligned in a box, for people.
    #[value(name = "pretty_table")]
    PrettyTable,
    /// A JSON array of objects, for programs.
    Json,
}

/// How output is shaped, from the global options.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub format: Format,
    pub quiet: bool,
    pub table_headers: bool,
}

impl Style {
    /// Banner lines ("Listing queues for vhost / ...") go to stdout as rabbitmqctl's, but
    /// not in JSON (stdout must parse) nor with `--quiet`.
    pub fn banner(&self, line: &str) {
        if !self.quiet && self.format != Format::Json {
            println!("{line}");
        }
    }
}

/// A table value as rabbitmqctl prints it: strings bare, `null` empty, lists as
/// `[a, b]`, objects (arguments, definitions, client properties) as compact JSON.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(cell).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(_) => value.to_string(),
    }
}

/// An AMQP table (a JSON object from the API) as rabbitmqctl prints one in a table: Erlang
/// terms, `[{"key",value},…]`, strings quoted, nested tables and arrays alike, void as
/// `undefined` (its formatter's `~tp` of the table as {key, value} pairs).
pub fn erlang_terms(value: &Value) -> String {
    match value {
        Value::Null => "undefined".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => erlang_string(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(erlang_terms).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(map) => {
            let pairs: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{{{},{}}}", erlang_string(k), erlang_terms(v)))
                .collect();
            format!("[{}]", pairs.join(","))
        }
    }
}

/// A string as `~tp` prints a printable list: quoted, `"` and `\` escaped.
fn erlang_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Renders rows (each one value per header) in the chosen format; ends with a newline
/// unless there is nothing at all to print.
pub fn render(style: &Style, headers: &[&str], rows: &[Vec<Value>]) -> String {
    match style.format {
        Format::Json => render_json(headers, rows),
        Format::Table => render_tab_separated(style.table_headers, headers, rows),
        Format::PrettyTable => render_pretty(style.table_headers, headers, rows),
    }
}

/// One object per line, keys in column order (serde_json's own maps would sort them).
fn render_json(headers: &[&str], rows: &[Vec<Value>]) -> String {
    let mut out = String::from("[");
    for (i, row) in rows.iter().enumerate() {
        out.push_str(if i == 0 { "\n{" } else { ",\n{" });
        for (j, (header, value)) in headers.iter().zip(row).enumerate() {
            if j > 0 {
                out.push(',');
            }
            let _ = write!(out, "{}:{value}", Value::String(header.to_string()));
        }
        out.push('}');
    }
    out.push_str("\n]\n");
    out
}

fn render_tab_separated(with_headers: bool, headers: &[&str], rows: &[Vec<Value>]) -> String {
    let mut out = String::new();
    if with_headers {
        out.push_str(&headers.join("\t"));
        out.push('\n');
    }
    for row in rows {
        let cells: Vec<String> = row.iter().map(|v| one_line(&cell(v))).collect();
        out.push_str(&cells.join("\t"));
        out.push('\n');
    }
    out
}

fn render_pretty(with_headers: bool, headers: &[&str], rows: &[Vec<Value>]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|v| one_line(&cell(v))).collect())
        .collect();
    let mut widths: Vec<usize> = headers
        .iter()
        .map(|h| if with_headers { h.chars().count() } else { 0 })
        .collect();
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let rule = {
        let mut line = String::from("+");
        for width in &widths {
            line.push_str(&"-".repeat(width + 2));
            line.push('+');
        }
        line.push('\n');
        line
    };
    let line_of = |values: &mut dyn Iterator<Item = &str>| {
        let mut line = String::from("|");
        for (value, width) in values.zip(&widths) {
            let pad = width - value.chars().count();
            let _ = write!(line, " {value}{} |", " ".repeat(pad));
        }
        line.push('\n');
        line
    };
    let mut out = rule.clone();
    if with_headers {
        out.push_str(&line_of(&mut headers.iter().copied()));
        out.push_str(&rule);
    }
    for row in &cells {
        out.push_str(&line_of(&mut row.iter().map(String::as_str)));
    }
    if !cells.is_empty() || !with_headers {
        out.push_str(&rule);
    }
    out
}

/// Tabs and line breaks inside a value would break the table's columns and rows.
fn one_line(s: &str) -> String {
    if s.contains(['\t', '\n', '\r']) {
        s.replace(['\t', '\n', '\r'], " ")
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn style(format: Format) -> Style {
        Style {
            format,
            quiet: false,
            table_headers: true,
        }
    }

    #[test]
    fn cells_print_as_rabbitmqctl() {
        assert_eq!(cell(&json!(null)), "");
        assert_eq!(cell(&json!("q1")), "q1");
        assert_eq!(cell(&json!(true)), "true");
        assert_eq!(cell(&json!(12)), "12");
        assert_eq!(
            cell(&json!(["administrator", "monitoring"])),
            "[administrator, monitoring]"
        );
        assert_eq!(cell(&json!([])), "[]");
        assert_eq!(cell(&json!({"x-max-length": 10})), r#"{"x-max-length":10}"#);
    }

    #[test]
    fn amqp_tables_print_as_erlang_terms() {
        let props = json!({
            "capabilities": {"publisher_confirms": true},
            "connection_name": "my-conn",
            "n": 3,
            "list": ["a", 1],
            "quote": "say \"hi\"",
            "none": null
        });
        assert_eq!(
            erlang_terms(&props),
            r#"[{"capabilities",[{"publisher_confirms",true}]},{"connection_name","my-conn"},{"list",["a",1]},{"n",3},{"none",undefined},{"quote","say \"hi\""}]"#
        );
        assert_eq!(erlang_terms(&json!({})), "[]");
    }

    #[test]
    fn table_is_tab_separated_with_a_header() {
        let rows = vec![vec![json!("q1"), json!(3)], vec![json!("q\t2"), json!(0)]];
        assert_eq!(
            render(&style(Format::Table), &["name", "messages"], &rows),
            "name\tmessages\nq1\t3\nq 2\t0\n"
        );
        let no_headers = Style {
            table_headers: false,
            ..style(Format::Table)
        };
        assert_eq!(
            render(&no_headers, &["name", "messages"], &rows[..1]),
            "q1\t3\n"
        );
    }

    #[test]
    fn pretty_table_aligns_columns() {
        let rows = vec![
            vec![json!("a-long-name"), json!(3)],
            vec![json!("b"), json!(1000)],
        ];
        let expected = "\
+-------------+----------+
| name        | messages |
+-------------+----------+
| a-long-name | 3        |
| b           | 1000     |
+-------------+----------+
";
        assert_eq!(
            render(&style(Format::PrettyTable), &["name", "messages"], &rows),
            expected
        );
    }

    #[test]
    fn json_keeps_values_typed_and_columns_in_order() {
        let rows = vec![vec![json!("q1"), json!(3), json!({"x-max-length": 1})]];
        let out = render(
            &style(Format::Json),
            &["name", "messages", "arguments"],
            &rows,
        );
        let parsed: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            parsed,
            json!([{"name": "q1", "messages": 3, "arguments": {"x-max-length": 1}}])
        );
        assert!(out.find("\"name\"").unwrap() < out.find("\"messages\"").unwrap());
        let empty = render(&style(Format::Json), &["name"], &[]);
        assert_eq!(serde_json::from_str::<Value>(&empty).unwrap(), json!([]));
    }
}

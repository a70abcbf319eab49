//! `warren server --config FILE` (or `WARREN_CONFIG`): a TOML file in which every flag of
//! `warren server` can be set, under the flag's long name (`amqp-port = 5672`; `amqp_port`
//! and `[tls] cert-file = …` for `tls-cert-file` work too).
//!
//! The file is read before the command line is parsed, and each of its values is handed to
//! the flag through the flag's environment variable when that variable is unset. So the
//! precedence is flag > environment > file > default, and every flag that has an environment
//! variable can be set in the file without this module knowing about it.

use clap::error::{ContextKind, ContextValue};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming the config file (the `--config` flag's).
pub const CONFIG_ENV: &str = "WARREN_CONFIG";

/// What the file set: for each value handed over, the flag's long name and the file's key.
pub struct Applied {
    pub path: PathBuf,
    /// (flag long name, key as written in the file, value as text)
    pub values: Vec<(String, String, String)>,
}

/// The config file named by `--config`/`--config=` after the `server` subcommand, or by
/// `WARREN_CONFIG`.
pub fn path_from(args: &[OsString]) -> Option<PathBuf> {
    let server_at = args.iter().position(|a| a == "server")?;
    let mut rest = args[server_at + 1..].iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return rest.next().map(PathBuf::from);
        }
        if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os(CONFIG_ENV).map(PathBuf::from)
}

/// Reads `path` and sets the environment variable of each flag it sets, unless the variable
/// is already set. `server` is the `warren server` command whose flags the keys name.
///
/// Must run before any other thread starts (it changes the process environment).
pub fn apply(path: &Path, server: &clap::Command) -> Result<Applied, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    let assignments =
        parse(&text, server).map_err(|e| format!("config file {}: {e}", path.display()))?;
    let mut values = Vec::new();
    for (env, long, key, value) in assignments {
        if std::env::var_os(&env).is_none() {
            std::env::set_var(&env, &value);
            values.push((long, key, value));
        }
    }
    Ok(Applied {
        path: path.to_owned(),
        values,
    })
}

/// The file's settings as (environment variable, flag long name, key, value), or the first
/// problem, naming its key.
fn parse(
    text: &str,
    server: &clap::Command,
) -> Result<Vec<(OsString, String, String, String)>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut flat = Vec::new();
    flatten("", &table, &mut flat);
    let mut out = Vec::new();
    for (key, value) in flat {
        let wanted = key.replace('_', "-");
        let arg = server
            .get_arguments()
            .find(|a| {
                a.get_long() == Some(wanted.as_str())
                    || a.get_id().as_str().replace('_', "-") == wanted
            })
            .ok_or_else(|| {
                format!("unknown key '{key}' (`warren server --help` lists the settings)")
            })?;
        let long = arg.get_long().unwrap_or_default().to_owned();
        let env = match arg.get_env() {
            Some(env) if long != "config" => env.to_owned(),
            _ => return Err(format!("key '{key}' cannot be set in the config file")),
        };
        let text = match value {
            toml::Value::Array(items) => {
                let Some(delimiter) = arg.get_value_delimiter() else {
                    return Err(format!("key '{key}' takes one value, not a list"));
                };
                let mut parts = Vec::new();
                for item in items {
                    let part = scalar(item).ok_or_else(|| {
                        format!("key '{key}': a list of strings, numbers or booleans expected")
                    })?;
                    if part.contains(delimiter) {
                        return Err(format!(
                            "key '{key}': value '{part}' may not contain '{delimiter}'"
                        ));
                    }
                    parts.push(part);
                }
                if parts.is_empty() {
                    continue;
                }
                parts.join(&delimiter.to_string())
            }
            other => scalar(other)
                .ok_or_else(|| format!("key '{key}': a string, number or boolean expected"))?,
        };
        out.push((env, long, key, text));
    }
    Ok(out)
}

/// Tables nest with '-': `[tls] cert-file` is `tls-cert-file`.
fn flatten<'a>(prefix: &str, table: &'a toml::Table, out: &mut Vec<(String, &'a toml::Value)>) {
    for (key, value) in table {
        let key = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}-{key}")
        };
        match value {
            toml::Value::Table(inner) => flatten(&key, inner, out),
            value => out.push((key, value)),
        }
    }
}

fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A command-line parse error caused by a value from the file, retold naming the file's key;
/// None when the error is not about a value the file set.
pub fn explain(error: &clap::Error, applied: &Applied) -> Option<String> {
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    // clap names the argument as `--amqp-port <AMQP_PORT>`.
    let long = arg.trim_start_matches("--").split([' ', '=']).next()?;
    let (_, key, value) = applied.values.iter().find(|(l, _, _)| l == long)?;
    let rendered = error.render().to_string();
    let reason = rendered
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ");
    Some(format!(
        "config file {}: key '{key}' = '{value}': {reason}",
        applied.path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, Command};

    fn server() -> Command {
        Command::new("server")
            .arg(Arg::new("amqp_port").long("amqp-port").env("T_AMQP_PORT"))
            .arg(
                Arg::new("users")
                    .long("user")
                    .env("T_USERS")
                    .value_delimiter(','),
            )
            .arg(
                Arg::new("tls_verify_peer")
                    .long("tls-verify-peer")
                    .env("T_VERIFY")
                    .action(ArgAction::SetTrue),
            )
            .arg(Arg::new("config").long("config").env(CONFIG_ENV))
    }

    fn settings(text: &str) -> Result<Vec<(String, String)>, String> {
        Ok(parse(text, &server())?
            .into_iter()
            .map(|(env, _, _, v)| (env.into_string().unwrap(), v))
            .collect())
    }

    #[test]
    fn keys_are_flag_names_in_any_spelling() {
        let mut got =
            settings("amqp_port = 5673\nusers = ['a:b', 'c:d']\n[tls]\nverify-peer = true\n")
                .unwrap();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("T_AMQP_PORT".into(), "5673".into()),
                ("T_USERS".into(), "a:b,c:d".into()),
                ("T_VERIFY".into(), "true".into()),
            ]
        );
        assert_eq!(settings("user = ['x:y']").unwrap()[0].1, "x:y");
    }

    #[test]
    fn bad_keys_and_values_name_the_key() {
        let err = |text| settings(text).unwrap_err();
        assert!(err("amqp-prot = 1").contains("unknown key 'amqp-prot'"));
        assert!(err("amqp-port = [1, 2]").contains("key 'amqp-port' takes one value"));
        assert!(err("user = ['a,b']").contains("key 'user'"));
        assert!(err("amqp-port = 2024-01-01").contains("key 'amqp-port'"));
        assert!(err("config = 'x'").contains("key 'config' cannot be set"));
        assert!(err("amqp-port = ").contains("line 1"));
    }

    #[test]
    fn config_path_from_flag_or_environment() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            path_from(&args(&["warren", "server", "--config", "/a.toml"])),
            Some(PathBuf::from("/a.toml"))
        );
        assert_eq!(
            path_from(&args(&[
                "warren",
                "server",
                "--bind",
                "::",
                "--config=/b.toml"
            ])),
            Some(PathBuf::from("/b.toml"))
        );
    }
}

//! RabbitMQ's checks on a policy (`rabbit_policy:policy_validation/0`,
//! `rabbit_policies:validate_policy0/2`) with its error texts, Erlang terms included, so
//! that an HTTP client sees what RabbitMQ would answer. All field errors are reported at
//! once, in RabbitMQ's order (definition, apply-to, pattern, priority); within a
//! definition the first bad setting (by key) is, then any keys nobody knows.

use super::{ApplyTo, Definition, PolicyKind};
use regex::Regex;
use serde_json::Value;

/// The settings a policy takes (RabbitMQ 3.13's `rabbit_policies`; the classic mirroring
/// `ha-*` keys went with 4.0 and Warren has no mirroring).
const POLICY_KEYS: &[&str] = &[
    "alternate-exchange",
    "consumer-timeout",
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "dead-letter-strategy",
    "delivery-limit",
    "expires",
    "initial-cluster-size",
    "max-age",
    "max-in-memory-bytes",
    "max-in-memory-length",
    "max-length",
    "max-length-bytes",
    "message-ttl",
    "overflow",
    "queue-leader-locator",
    // RabbitMQ 3.x's name of the locator (`rabbit_queue_location_validator`), deprecated
    // by `queue-leader-locator` but still taken by 3.10 and 3.13.
    "queue-master-locator",
    "queue-mode",
    "queue-version",
    "stream-filter-size-bytes",
    "stream-max-segment-size-bytes",
];

/// Classic mirroring's settings (RabbitMQ 3.x, `rabbit_mirror_queue_misc`), for policies
/// only. RabbitMQ 4 removed mirroring; Warren takes them so the reports' setups run, and a
/// queue matched by `ha-mode` becomes a quorum queue (vhost/mirroring.rs).
const MIRRORING_KEYS: &[&str] = &[
    "ha-mode",
    "ha-params",
    "ha-promote-on-failure",
    "ha-promote-on-shutdown",
    "ha-sync-batch-size",
    "ha-sync-mode",
];

/// The settings an operator policy may set: limits only.
const OPERATOR_POLICY_KEYS: &[&str] = &[
    "delivery-limit",
    "expires",
    "max-in-memory-bytes",
    "max-in-memory-length",
    "max-length",
    "max-length-bytes",
    "message-ttl",
    "overflow",
    "queue-version",
];

/// The largest stream segment RabbitMQ accepts (`?MAX_STREAM_MAX_SEGMENT_SIZE`).
const MAX_STREAM_SEGMENT_SIZE_BYTES: i64 = 3_000_000_000;

pub(super) struct Checked {
    pub pattern: String,
    pub regex: Regex,
    pub apply_to: ApplyTo,
    pub priority: i64,
    pub definition: Definition,
}

/// Checks a policy body (`pattern`, `definition`, optional `priority` and `apply-to`).
pub(super) fn check(kind: PolicyKind, body: &Value) -> Result<Checked, String> {
    let missing: Vec<String> = ["pattern", "definition"]
        .iter()
        .filter(|k| body.get(**k).is_none())
        .map(|k| format!("{{key_missing,{k}}}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!("[{}]", missing.join(",")));
    }
    let mut errors = Vec::new();
    let definition = match &body["definition"] {
        Value::Object(d) => match check_definition(kind, d) {
            Ok(()) => Some(d.clone()),
            Err(e) => {
                errors.push(e);
                None
            }
        },
        other => {
            errors.push(format!(
                "definition must be a dictionary: {}",
                erlang_term(other)
            ));
            None
        }
    };
    let apply_to = match body.get("apply-to") {
        None | Some(Value::Null) => Some(ApplyTo::All),
        Some(v) => match v.as_str().and_then(ApplyTo::parse) {
            Some(a) => Some(a),
            None => {
                let shown = v.as_str().map_or_else(|| erlang_term(v), str::to_owned);
                errors.push(format!(
                    "apply-to '{shown}' unrecognised; should be one of: 'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'"
                ));
                None
            }
        },
    };
    let pattern = match &body["pattern"] {
        Value::String(p) => match Regex::new(p) {
            Ok(r) => Some((p.clone(), r)),
            Err(e) => {
                errors.push(format!(
                    "pattern should be regular expression but is invalid: {}",
                    regex_reason(&e)
                ));
                None
            }
        },
        other => {
            errors.push(format!(
                "pattern should be a binary but was {}",
                erlang_term(other)
            ));
            None
        }
    };
    let priority = match body.get("priority") {
        None | Some(Value::Null) => Some(0),
        Some(Value::Number(n)) => Some(n.as_i64().unwrap_or_else(|| {
            // A float priority is a number to RabbitMQ too; only its order matters.
            n.as_f64().map_or(0, |f| f as i64)
        })),
        Some(other) => {
            errors.push(format!(
                "priority should be a number, actually was {}",
                erlang_term(other)
            ));
            None
        }
    };
    match (definition, apply_to, pattern, priority) {
        (Some(definition), Some(apply_to), Some((pattern, regex)), Some(priority))
            if errors.is_empty() =>
        {
            Ok(Checked {
                pattern,
                regex,
                apply_to,
                priority,
                definition,
            })
        }
        _ => Err(format!("Validation failed\n\n{}\n", errors.join("\n"))),
    }
}

fn check_definition(kind: PolicyKind, definition: &Definition) -> Result<(), String> {
    if definition.is_empty() {
        return Err("no policy provided".to_owned());
    }
    let known = match kind {
        PolicyKind::Policy => POLICY_KEYS,
        PolicyKind::Operator => OPERATOR_POLICY_KEYS,
    };
    let mut entries: Vec<(&String, &Value)> = definition.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    for (key, value) in &entries {
        if known.contains(&key.as_str()) {
            check_setting(key, value)?;
        }
    }
    let mirroring = match kind {
        PolicyKind::Policy => MIRRORING_KEYS,
        PolicyKind::Operator => &[],
    };
    if !mirroring.is_empty() {
        check_mirroring(definition)?;
    }
    let unknown: Vec<String> = entries
        .iter()
        .filter(|(k, _)| !known.contains(&k.as_str()) && !mirroring.contains(&k.as_str()))
        .map(|(k, v)| format!("{{{},{}}}", erlang_binary(k), erlang_term(v)))
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "[{}] are not recognised policy settings",
            unknown.join(",")
        ))
    }
}

/// One setting's check, as `rabbit_policies:validate_policy0/2`.
fn check_setting(key: &str, v: &Value) -> Result<(), String> {
    let int = v.as_i64().filter(|_| !v.is_f64());
    let text = v.as_str();
    let ok = match key {
        "alternate-exchange" | "dead-letter-exchange" | "dead-letter-routing-key" => text.is_some(),
        "consumer-timeout"
        | "message-ttl"
        | "max-length"
        | "max-length-bytes"
        | "max-in-memory-length"
        | "max-in-memory-bytes"
        | "initial-cluster-size" => int.is_some_and(|n| n >= 0),
        "expires" => int.is_some_and(|n| n >= 1),
        "delivery-limit" => int.is_some(),
        "dead-letter-strategy" => matches!(text, Some("at-most-once" | "at-least-once")),
        "queue-mode" => matches!(text, Some("default" | "lazy")),
        "queue-version" => matches!(int, Some(1 | 2)),
        "overflow" => matches!(
            text,
            Some("drop-head" | "reject-publish" | "reject-publish-dlx")
        ),
        "max-age" => text.is_some_and(is_max_age),
        "queue-leader-locator" => matches!(
            text,
            Some("client-local" | "balanced" | "random" | "least-leaders")
        ),
        "queue-master-locator" => matches!(text, Some("min-masters" | "client-local" | "random")),
        "stream-max-segment-size-bytes" => {
            int.is_some_and(|n| (0..=MAX_STREAM_SEGMENT_SIZE_BYTES).contains(&n))
        }
        "stream-filter-size-bytes" => int.is_some_and(|n| (16..=255).contains(&n)),
        _ => true,
    };
    if ok {
        return Ok(());
    }
    let what = match key {
        "alternate-exchange" => "is not a valid alternate exchange name",
        "consumer-timeout" => "is not a valid consumer timeout",
        "dead-letter-exchange" => "is not a valid dead letter exchange name",
        "dead-letter-routing-key" => "is not a valid dead letter routing key",
        "dead-letter-strategy" => "is not a valid dead letter strategy",
        "message-ttl" => "is not a valid message TTL",
        "expires" => "is not a valid queue expiry",
        "max-length" => "is not a valid maximum length",
        "max-length-bytes" => "is not a valid maximum length in bytes",
        // RabbitMQ's text for both in-memory limits.
        "max-in-memory-length" | "max-in-memory-bytes" => "is not a valid maximum memory in bytes",
        "queue-mode" => "is not a valid queue-mode value",
        "queue-version" => "is not a valid queue-version value",
        "overflow" => "is not a valid overflow value",
        "delivery-limit" => "is not a valid delivery limit",
        "max-age" => "is not a valid max age",
        "queue-leader-locator" => "is not a valid queue leader locator value",
        "queue-master-locator" => "invalid queue-master-locator value",
        "initial-cluster-size" => "is not a valid cluster size",
        "stream-max-segment-size-bytes" => "is not a valid segment size",
        _ => "is not a valid filter size. Valid range is 16-255",
    };
    Err(format!("{} {what}", erlang_term(v)))
}

/// `rabbit_mirror_queue_misc:validate_policy/1`: the mode and its parameters, then the sync
/// mode, the sync batch size and the promotion settings, with RabbitMQ 3.10's texts.
fn check_mirroring(definition: &Definition) -> Result<(), String> {
    let get = |key: &str| definition.get(key);
    let Some(mode) = get("ha-mode") else {
        let dependent = [
            "ha-params",
            "ha-sync-mode",
            "ha-sync-batch-size",
            "ha-promote-on-shutdown",
            "ha-promote-on-failure",
        ];
        if dependent.iter().any(|k| get(k).is_some()) {
            return Err("ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown".to_owned());
        }
        return Ok(());
    };
    let given = |v: Option<&Value>| v.map_or_else(|| "none".to_owned(), erlang_term);
    match mode.as_str() {
        Some("all") if get("ha-params").is_some() => {
            return Err(r#"ha-mode="all" does not take parameters"#.to_owned());
        }
        Some("all") => {}
        Some("exactly") => {
            let params = get("ha-params");
            let positive = params
                .and_then(|p| p.as_i64().filter(|_| !p.is_f64()))
                .is_some_and(|n| n > 0);
            if !positive {
                return Err(format!(
                    r#"ha-mode="exactly" takes an integer, {} given"#,
                    given(params)
                ));
            }
        }
        Some("nodes") => {
            let params = get("ha-params");
            let names = params
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().all(Value::is_string));
            if !names {
                return Err(format!(
                    r#"ha-mode="nodes" takes a list, {} given"#,
                    given(params)
                ));
            }
        }
        _ => {
            return Err(format!(
                "{} is not a valid ha-mode value",
                erlang_term(mode)
            ))
        }
    }
    if let Some(v) = get("ha-sync-mode") {
        if !matches!(v.as_str(), Some("manual" | "automatic")) {
            return Err(format!(
                r#"ha-sync-mode must be "manual" or "automatic", got {}"#,
                erlang_term(v)
            ));
        }
    }
    if let Some(v) = get("ha-sync-batch-size") {
        if v.as_i64().filter(|_| !v.is_f64()).is_none_or(|n| n <= 0) {
            return Err(format!(
                "ha-sync-batch-size takes an integer greater than 0, {} given",
                erlang_term(v)
            ));
        }
    }
    for key in ["ha-promote-on-shutdown", "ha-promote-on-failure"] {
        if let Some(v) = get(key) {
            if !matches!(v.as_str(), Some("always" | "when-synced")) {
                return Err(format!(
                    r#"{key} must be "always" or "when-synced", got {}"#,
                    erlang_term(v)
                ));
            }
        }
    }
    Ok(())
}

/// A stream's max-age: a count and a unit, Y M D h m s (`rabbit_amqqueue:check_max_age`).
fn is_max_age(s: &str) -> bool {
    let Some(unit) = s.chars().last() else {
        return false;
    };
    let digits = &s[..s.len() - unit.len_utf8()];
    "YMDhms".contains(unit) && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Erlang's `{Reason, Position}` for a pattern that does not compile; the reason is the
/// Rust regex engine's (RabbitMQ's is PCRE's).
fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid");
    let reason = last.trim().trim_start_matches("error: ");
    format!("{{{:?},0}}", reason)
}

fn erlang_binary(s: &str) -> String {
    let escaped = s.replace('\\', "\\\\").replace('"', "\\\"");
    if s.is_ascii() {
        format!("<<\"{escaped}\">>")
    } else {
        format!("<<\"{escaped}\"/utf8>>")
    }
}

/// A JSON value as Erlang's `~tp` prints the term RabbitMQ decoded it to.
fn erlang_term(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e16 {
                format!("{f:.1}")
            } else {
                f.to_string()
            }
        }
        Value::Number(n) => n.to_string(),
        Value::String(s) => erlang_binary(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(erlang_term).collect();
            format!("[{}]", inner.join(","))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{} => {}", erlang_binary(k), erlang_term(v)))
                .collect();
            format!("#{{{}}}", inner.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refusal(kind: PolicyKind, body: Value) -> String {
        match check(kind, &body) {
            Ok(_) => panic!("accepted {body}"),
            Err(e) => e,
        }
    }

    fn def(d: Value) -> String {
        refusal(
            PolicyKind::Policy,
            json!({"pattern": ".*", "definition": d}),
        )
    }

    /// Classic mirroring settings, each text as RabbitMQ 3.10.8 answered it (HTML escaping
    /// aside); the per-setting checks come first, unknown keys last.
    #[test]
    fn mirroring_settings_are_checked_as_rabbitmq_3_10_checks_them() {
        for ok in [
            json!({"ha-mode": "all"}),
            json!({"ha-mode": "exactly", "ha-params": 2}),
            json!({"ha-mode": "nodes", "ha-params": ["rabbit@a"]}),
            json!({"ha-mode": "all", "ha-sync-mode": "automatic", "ha-sync-batch-size": 10,
                   "ha-promote-on-shutdown": "always", "ha-promote-on-failure": "when-synced"}),
        ] {
            let body = json!({"pattern": "^ha\\.", "definition": ok});
            assert!(check(PolicyKind::Policy, &body).is_ok(), "{body}");
        }
        let cases = [
            (json!({"ha-mode": "exactly"}), r#"ha-mode="exactly" takes an integer, none given"#),
            (json!({"ha-mode": "exactly", "ha-params": "x"}), r#"ha-mode="exactly" takes an integer, <<"x">> given"#),
            (json!({"ha-mode": "exactly", "ha-params": 0}), r#"ha-mode="exactly" takes an integer, 0 given"#),
            (json!({"ha-mode": "nodes"}), r#"ha-mode="nodes" takes a list, none given"#),
            (json!({"ha-mode": "nodes", "ha-params": "a"}), r#"ha-mode="nodes" takes a list, <<"a">> given"#),
            (json!({"ha-mode": "bogus"}), r#"<<"bogus">> is not a valid ha-mode value"#),
            (json!({"ha-mode": "all", "ha-params": 1}), r#"ha-mode="all" does not take parameters"#),
            (json!({"ha-params": 2}), "ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown"),
            (json!({"ha-sync-batch-size": 5}), "ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown"),
            (json!({"ha-mode": "all", "ha-sync-mode": "x", "ha-sync-batch-size": 0}), r#"ha-sync-mode must be "manual" or "automatic", got <<"x">>"#),
            (json!({"ha-mode": "all", "ha-sync-batch-size": 0, "ha-promote-on-shutdown": "x"}), "ha-sync-batch-size takes an integer greater than 0, 0 given"),
            (json!({"ha-mode": "all", "ha-promote-on-shutdown": "x", "ha-promote-on-failure": "y"}), r#"ha-promote-on-shutdown must be "always" or "when-synced", got <<"x">>"#),
            (json!({"ha-mode": "exactly", "ha-sync-mode": "x"}), r#"ha-mode="exactly" takes an integer, none given"#),
            (json!({"ha-mode": "bogus", "max-length": "x"}), r#"<<"x">> is not a valid maximum length"#),
            (json!({"ha-mode": "bogus", "zzz": 1}), r#"<<"bogus">> is not a valid ha-mode value"#),
            (json!({"ha-mode": "all", "zzz": 1}), r#"[{<<"zzz">>,1}] are not recognised policy settings"#),
        ];
        for (definition, text) in cases {
            assert_eq!(
                def(definition.clone()),
                format!("Validation failed\n\n{text}\n"),
                "{definition}"
            );
        }
        // Operator policies never took them: an unknown setting there.
        let body = json!({"pattern": ".*", "definition": {"ha-mode": "all"}});
        assert!(refusal(PolicyKind::Operator, body).contains("ha-mode"));
    }

    /// The two locator keys, each text as RabbitMQ 3.10.8's PUT /api/policies answered it
    /// (HTML escaping aside); an operator policy takes neither.
    #[test]
    fn locator_settings_are_checked_as_rabbitmq_3_10_checks_them() {
        for ok in [
            json!({"queue-leader-locator": "client-local"}),
            json!({"queue-leader-locator": "balanced"}),
            json!({"queue-leader-locator": "random"}),
            json!({"queue-leader-locator": "least-leaders"}),
            json!({"queue-master-locator": "min-masters"}),
            json!({"queue-master-locator": "client-local"}),
            json!({"queue-master-locator": "random"}),
        ] {
            let body = json!({"pattern": ".*", "definition": ok});
            assert!(check(PolicyKind::Policy, &body).is_ok(), "{body}");
        }
        let cases = [
            (
                json!({"queue-leader-locator": "min-masters"}),
                r#"<<"min-masters">> is not a valid queue leader locator value"#,
            ),
            (
                json!({"queue-leader-locator": 3}),
                "3 is not a valid queue leader locator value",
            ),
            (
                json!({"queue-master-locator": "balanced"}),
                r#"<<"balanced">> invalid queue-master-locator value"#,
            ),
            (
                json!({"queue-master-locator": "bogus"}),
                r#"<<"bogus">> invalid queue-master-locator value"#,
            ),
            (
                json!({"queue-master-locator": 3}),
                "3 invalid queue-master-locator value",
            ),
        ];
        for (definition, text) in cases {
            assert_eq!(
                def(definition.clone()),
                format!("Validation failed\n\n{text}\n"),
                "{definition}"
            );
        }
        let body = json!({"pattern": ".*", "definition": {"queue-master-locator": "random"}});
        assert_eq!(
            refusal(PolicyKind::Operator, body),
            "Validation failed\n\n[{<<\"queue-master-locator\">>,<<\"random\">>}] are not recognised policy settings\n"
        );
    }

    /// Each text as RabbitMQ 3.10.8's PUT /api/policies answered it (HTML escaping aside).
    #[test]
    fn texts_match_rabbitmq() {
        let v = |s: &str| format!("Validation failed\n\n{s}\n");
        assert_eq!(
            def(json!({"foo": 1})),
            v("[{<<\"foo\">>,1}] are not recognised policy settings")
        );
        assert_eq!(
            def(json!({"max-length": 1, "foo": 2, "bar": 3})),
            v("[{<<\"bar\">>,3},{<<\"foo\">>,2}] are not recognised policy settings")
        );
        assert_eq!(
            def(json!({"max-length": "x"})),
            v("<<\"x\">> is not a valid maximum length")
        );
        assert_eq!(
            def(json!({"max-length": -1, "message-ttl": "a"})),
            v("-1 is not a valid maximum length")
        );
        assert_eq!(
            def(json!({"max-length": 1.5})),
            v("1.5 is not a valid maximum length")
        );
        assert_eq!(def(json!({})), v("no policy provided"));
        assert_eq!(
            def(json!({"alternate-exchange": 5})),
            v("5 is not a valid alternate exchange name")
        );
        assert_eq!(
            def(json!({"expires": 0})),
            v("0 is not a valid queue expiry")
        );
        assert_eq!(
            def(json!({"overflow": "x"})),
            v("<<\"x\">> is not a valid overflow value")
        );
        assert_eq!(
            def(json!({"queue-mode": "x"})),
            v("<<\"x\">> is not a valid queue-mode value")
        );
        assert_eq!(
            def(json!({"delivery-limit": "x"})),
            v("<<\"x\">> is not a valid delivery limit")
        );
        assert_eq!(
            def(json!({"dead-letter-exchange": 1})),
            v("1 is not a valid dead letter exchange name")
        );
        assert_eq!(
            refusal(
                PolicyKind::Policy,
                json!({"pattern": 5, "definition": {"max-length": 1}})
            ),
            v("pattern should be a binary but was 5")
        );
        assert_eq!(
            refusal(PolicyKind::Policy, json!({"definition": {"max-length": 1}})),
            "[{key_missing,pattern}]"
        );
        assert_eq!(
            refusal(PolicyKind::Policy, json!({"pattern": ".*"})),
            "[{key_missing,definition}]"
        );
        // Several fields wrong: all of them, definition first and priority last.
        let all = refusal(
            PolicyKind::Policy,
            json!({"pattern": "(", "definition": {"max-length": -1}, "priority": "a", "apply-to": "zz"}),
        );
        let lines: Vec<&str> = all.lines().collect();
        assert_eq!(
            lines[..3],
            ["Validation failed", "", "-1 is not a valid maximum length"]
        );
        // RabbitMQ 3.13's list of apply-to values (3.10 knew three).
        assert_eq!(lines[3], "apply-to 'zz' unrecognised; should be one of: 'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'");
        assert!(lines[4].starts_with("pattern should be regular expression but is invalid: {"));
        assert_eq!(
            lines[5],
            "priority should be a number, actually was <<\"a\">>"
        );
    }

    #[test]
    fn operator_policies_take_limits_only() {
        assert_eq!(
            refusal(
                PolicyKind::Operator,
                json!({"pattern": ".*", "definition": {"alternate-exchange": "x"}})
            ),
            "Validation failed\n\n[{<<\"alternate-exchange\">>,<<\"x\">>}] are not recognised policy settings\n"
        );
        let ok = check(
            PolicyKind::Operator,
            &json!({"pattern": ".*", "definition": {"max-length": 1, "message-ttl": 5, "expires": 9,
                "max-length-bytes": 3, "overflow": "reject-publish", "delivery-limit": 4}}),
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn every_brief_key_accepted_with_defaults() {
        let c = check(
            PolicyKind::Policy,
            &json!({"pattern": "^q", "definition": {
                "max-length": 0, "max-length-bytes": 10, "overflow": "reject-publish-dlx",
                "message-ttl": 0, "expires": 1, "dead-letter-exchange": "",
                "dead-letter-routing-key": "k", "queue-mode": "lazy", "alternate-exchange": "ae",
                "delivery-limit": -1, "max-age": "7D", "queue-version": 2}}),
        )
        .unwrap();
        assert_eq!(c.apply_to, ApplyTo::All);
        assert_eq!(c.priority, 0);
        assert_eq!(c.pattern, "^q");
        assert!(def(json!({"max-age": "7X"})).contains("is not a valid max age"));
    }
}

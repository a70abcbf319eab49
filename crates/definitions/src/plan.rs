//! Reading a definitions document into a checked plan before anything is applied: every
//! entry is parsed, every regex, hash, exchange type, argument table and policy validated,
//! and every reference (a permission's user and vhost, a binding's ends) resolved against
//! the broker and the document itself. A document that fails here changes nothing.

use crate::components::{self, MAX_CONNECTIONS, MAX_QUEUES, OPERATOR_POLICY, POLICY, VHOST_LIMITS};
use crate::field_json::json_to_table;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{Map, Value};
use std::collections::HashSet;
use warren_broker::access::{Permission, TopicPermission, UserLimits, SHA256, SHA512};
use warren_broker::policy::{Policy, PolicyKind};
use warren_broker::queue_args::check_declare_arguments;
use warren_broker::{Broker, ExchangeKind, VHostLimits};
use warren_codec::{FieldTable, ShortStr};

pub enum Credential {
    Hash {
        hash: String,
        algorithm: String,
    },
    Password(String),
    /// No password: the user cannot log in with PLAIN.
    None,
}

pub struct UserDef {
    pub name: String,
    pub credential: Credential,
    pub tags: Vec<String>,
    /// The limits the document sets (`"limits"`), merged into the user's, as RabbitMQ's
    /// import merges them; those it leaves out are kept.
    pub limits: Map<String, Value>,
}

pub struct VHostDef {
    pub name: String,
    /// (description, tags) when the document gives either.
    pub metadata: Option<(String, Vec<String>)>,
    pub limits: Option<VHostLimits>,
    /// The firehose on or off (`"tracing"`), when the document says: RabbitMQ's import
    /// turns it on or off then (its exports never say).
    pub tracing: Option<bool>,
}

pub struct ParameterDef {
    pub vhost: String,
    pub component: String,
    pub name: String,
    pub value: Value,
}

pub struct ExchangeDef {
    pub vhost: String,
    pub name: ShortStr,
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
}

pub struct QueueDef {
    pub vhost: String,
    pub name: ShortStr,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: FieldTable,
}

pub struct BindingDef {
    pub vhost: String,
    pub source: ShortStr,
    pub destination: ShortStr,
    pub to_exchange: bool,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

/// Everything a document asks for, checked, in the order RabbitMQ applies it.
#[derive(Default)]
pub struct Plan {
    pub users: Vec<UserDef>,
    pub vhosts: Vec<VHostDef>,
    pub permissions: Vec<(String, String, Permission)>,
    pub exchanges: Vec<ExchangeDef>,
    pub topic_permissions: Vec<(String, String, TopicPermission)>,
    pub global_parameters: Vec<(String, Value)>,
    /// Policies and operator policies (from "policies", and from "parameters" with the
    /// `policy` / `operator_policy` components).
    pub policies: Vec<Policy>,
    /// Parameters Warren keeps without acting on them.
    pub parameters: Vec<ParameterDef>,
    /// (vhost, limits) from `vhost-limits` parameters.
    pub limits: Vec<(String, VHostLimits)>,
    pub queues: Vec<QueueDef>,
    pub bindings: Vec<BindingDef>,
    /// Entries left out, as RabbitMQ leaves them out (`amq.*` names), with why.
    pub skipped: Vec<String>,
}

/// The scope of an import: the whole broker (every entry names its vhost) or one vhost
/// (entries carry no vhost; users, vhosts and permissions are not read).
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    All,
    VHost(&'a str),
}

type Entry = Map<String, Value>;

fn entries<'a>(doc: &'a Entry, category: &str) -> Result<Vec<&'a Entry>, String> {
    match doc.get(category) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_object().ok_or_else(|| {
                    format!("{category}: every entry must be an object, found {item}")
                })
            })
            .collect(),
        Some(other) => Err(format!("{category} must be a list, found {other}")),
    }
}

fn string(entry: &Entry, key: &str, what: &str) -> Result<String, String> {
    match entry.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Err(format!("{what}: missing field '{key}'")),
        Some(other) => Err(format!(
            "{what}: field '{key}' must be a string, found {other}"
        )),
    }
}

fn optional_string(entry: &Entry, key: &str, what: &str) -> Result<Option<String>, String> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => string(entry, key, what).map(Some),
    }
}

fn boolean(entry: &Entry, key: &str, default: bool, what: &str) -> Result<bool, String> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        // Old exports and hand-written files say "true"/"false".
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
        Some(other) => Err(format!(
            "{what}: field '{key}' must be a boolean, found {other}"
        )),
    }
}

fn short(value: String, what: &str, key: &str) -> Result<ShortStr, String> {
    if value.len() > ShortStr::MAX_LEN {
        return Err(format!(
            "{what}: {key} is longer than {} bytes",
            ShortStr::MAX_LEN
        ));
    }
    Ok(ShortStr::from(value))
}

/// Tags as a list or a comma-separated string (RabbitMQ 3.10+ writes a list, older
/// versions and the HTTP API's PUT a string); blanks dropped.
pub fn tags(value: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    let raw: Vec<String> = match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.split(',').map(str::to_owned).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| match t {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!("{what}: tags must be strings, found {other}")),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => Err(format!(
            "{what}: tags must be a list or a comma-separated string, found {other}"
        ))?,
    };
    Ok(raw
        .iter()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect())
}

fn check_regex(source: &str, what: &str) -> Result<(), String> {
    let source = if source.is_empty() { "^$" } else { source };
    // Topic permissions may use {username} and {vhost}; they are replaced (escaped) first.
    let expanded = source.replace("{username}", "u").replace("{vhost}", "v");
    regex::Regex::new(&expanded)
        .map(|_| ())
        .map_err(|e| format!("{what}: invalid regex '{source}': {e}"))
}

/// The hashing algorithm a user entry names, or RabbitMQ's default for the document's
/// version when it names none (MD5 before 3.6.0, SHA-256 since).
fn hashing_algorithm(entry: &Entry, version: Option<&str>, what: &str) -> Result<String, String> {
    let algorithm = match optional_string(entry, "hashing_algorithm", what)? {
        Some(a) => a,
        None => match version {
            Some(v)
                if ["3.0.", "3.1.", "3.2.", "3.3.", "3.4.", "3.5."]
                    .iter()
                    .any(|p| v.starts_with(p)) =>
            {
                "rabbit_password_hashing_md5".to_owned()
            }
            _ => SHA256.to_owned(),
        },
    };
    match algorithm.as_str() {
        SHA256 | SHA512 => Ok(algorithm),
        "rabbit_password_hashing_md5" => Err(format!(
            "{what}: hashing algorithm rabbit_password_hashing_md5 (RabbitMQ before 3.6) is not supported; \
             set a new password or export from RabbitMQ 3.6 or later"
        )),
        other => Err(format!(
            "{what}: unknown hashing algorithm '{other}' (known: {SHA256}, {SHA512})"
        )),
    }
}

fn check_hash(hash: &str, algorithm: &str, what: &str) -> Result<(), String> {
    if hash.is_empty() {
        return Ok(());
    }
    let digest_bytes = if algorithm == SHA512 { 64 } else { 32 };
    match BASE64.decode(hash) {
        Ok(raw) if raw.len() == 4 + digest_bytes => Ok(()),
        _ => Err(format!(
            "{what}: password_hash is not a base64 salt and {algorithm} digest"
        )),
    }
}

fn user(entry: &Entry, version: Option<&str>) -> Result<UserDef, String> {
    let name = string(entry, "name", "user")?;
    let what = format!("user '{name}'");
    if name.is_empty() {
        return Err("user: name must not be empty".into());
    }
    let tags = match (entry.get("tags"), entry.get("administrator")) {
        (None, None) => return Err(format!("{what}: missing field 'tags'")),
        (None, Some(admin)) => match admin {
            Value::Bool(true) => vec!["administrator".to_owned()],
            Value::String(s) if s == "true" => vec!["administrator".to_owned()],
            _ => Vec::new(),
        },
        (Some(t), _) => tags(Some(t), &what)?,
    };
    let password = optional_string(entry, "password", &what)?;
    let hash = optional_string(entry, "password_hash", &what)?;
    let credential = match (password, hash) {
        (Some(_), Some(_)) => {
            return Err(format!("{what}: both password and password_hash are given"))
        }
        (Some(p), None) => Credential::Password(p),
        (None, Some(hash)) => {
            let algorithm = hashing_algorithm(entry, version, &what)?;
            check_hash(&hash, &algorithm, &what)?;
            Credential::Hash { hash, algorithm }
        }
        (None, None) => Credential::None,
    };
    let limits = match entry.get("limits") {
        None | Some(Value::Null) => Map::new(),
        Some(value) => {
            UserLimits::from_json(value).map_err(|e| format!("{what}: {e}"))?;
            value.as_object().cloned().unwrap_or_default()
        }
    };
    Ok(UserDef {
        name,
        credential,
        tags,
        limits,
    })
}

fn limits_from(value: &Value, what: &str) -> Result<VHostLimits, String> {
    let Value::Object(object) = value else {
        return Err(format!("{what}: limits must be an object, found {value}"));
    };
    let mut limits = VHostLimits::default();
    for (key, v) in object {
        // RabbitMQ: a negative limit means no limit.
        let n = v
            .as_i64()
            .ok_or_else(|| format!("{what}: limit '{key}' must be an integer, found {v}"))?;
        let n = u32::try_from(n).ok();
        match key.as_str() {
            MAX_CONNECTIONS => limits.max_connections = n,
            MAX_QUEUES => limits.max_queues = n,
            other => return Err(format!("{what}: unknown vhost limit '{other}'")),
        }
    }
    Ok(limits)
}

fn vhost(entry: &Entry) -> Result<VHostDef, String> {
    let name = string(entry, "name", "vhost")?;
    let what = format!("vhost '{name}'");
    if name.is_empty() {
        return Err("vhost: name must not be empty".into());
    }
    if name.len() > ShortStr::MAX_LEN {
        return Err(format!(
            "{what}: name is longer than {} bytes",
            ShortStr::MAX_LEN
        ));
    }
    let metadata = entry.get("metadata").and_then(Value::as_object);
    let description = optional_string(entry, "description", &what)?.or(match metadata {
        Some(m) => optional_string(m, "description", &what)?,
        None => None,
    });
    let tag_value = entry
        .get("tags")
        .or_else(|| metadata.and_then(|m| m.get("tags")));
    let metadata = match (description, tag_value) {
        (None, None) => None,
        (d, t) => Some((d.unwrap_or_default(), tags(t, &what)?)),
    };
    let limits = match entry.get("limits") {
        None | Some(Value::Null) => None,
        Some(v) => Some(limits_from(v, &what)?).filter(|l| *l != VHostLimits::default()),
    };
    let tracing = match entry.get("tracing") {
        None | Some(Value::Null) => None,
        Some(_) => Some(boolean(entry, "tracing", false, &what)?),
    };
    Ok(VHostDef {
        name,
        metadata,
        limits,
        tracing,
    })
}

/// The vhost an entry belongs to: its own field for a whole-broker import (RabbitMQ refuses
/// a whole-broker document with entries that have none), the scope's otherwise.
fn entry_vhost(entry: &Entry, scope: Scope, what: &str) -> Result<String, String> {
    match scope {
        Scope::VHost(v) => Ok(v.to_owned()),
        Scope::All => match entry.get("vhost") {
            Some(Value::String(v)) => Ok(v.clone()),
            None | Some(Value::Null) => Err(format!(
                "{what} has no vhost: this looks like one virtual host's definitions; \
                 import it into a virtual host (POST /api/definitions/VHOST)"
            )),
            Some(other) => Err(format!("{what}: vhost must be a string, found {other}")),
        },
    }
}

/// Reads and checks a whole document. `scope` says whether it is the whole broker's.
pub fn read(broker: &Broker, doc: &Value, scope: Scope) -> Result<Plan, String> {
    let Value::Object(doc) = doc else {
        return Err("definitions must be a JSON object".into());
    };
    let version = doc
        .get("rabbitmq_version")
        .or_else(|| doc.get("rabbit_version"))
        .and_then(Value::as_str);
    let mut plan = Plan::default();
    if let Scope::All = scope {
        for e in entries(doc, "users")? {
            let user = user(e, version)?;
            plan.users.push(user);
        }
        for e in entries(doc, "vhosts")? {
            plan.vhosts.push(vhost(e)?);
        }
    }
    let known_vhosts: HashSet<String> = match scope {
        Scope::All => broker
            .vhosts()
            .iter()
            .map(|v| v.name().to_owned())
            .chain(plan.vhosts.iter().map(|v| v.name.clone()))
            .collect(),
        Scope::VHost(v) => std::iter::once(v.to_owned()).collect(),
    };
    let vhost_known = |vhost: &str| -> Result<(), String> {
        match known_vhosts.contains(vhost) {
            true => Ok(()),
            false => Err(format!(
                "Please create virtual host \"{vhost}\" prior to importing definitions."
            )),
        }
    };
    if let Scope::All = scope {
        let known_users: HashSet<String> = broker
            .access
            .users()
            .iter()
            .map(|u| u.name.clone())
            .chain(plan.users.iter().map(|u| u.name.clone()))
            .collect();
        let user_known = |user: &str, what: &str| -> Result<(), String> {
            match known_users.contains(user) {
                true => Ok(()),
                false => Err(format!("{what}: no such user '{user}'")),
            }
        };
        for e in entries(doc, "permissions")? {
            let user = string(e, "user", "permission")?;
            let vhost = string(e, "vhost", "permission")?;
            let what = format!("permission of user '{user}' in vhost '{vhost}'");
            user_known(&user, &what)?;
            vhost_known(&vhost)?;
            let p = Permission {
                configure: string(e, "configure", &what)?,
                write: string(e, "write", &what)?,
                read: string(e, "read", &what)?,
            };
            for source in [&p.configure, &p.write, &p.read] {
                check_regex(source, &what)?;
            }
            plan.permissions.push((vhost, user, p));
        }
        for e in entries(doc, "topic_permissions")? {
            let user = string(e, "user", "topic permission")?;
            let vhost = string(e, "vhost", "topic permission")?;
            let what = format!("topic permission of user '{user}' in vhost '{vhost}'");
            user_known(&user, &what)?;
            vhost_known(&vhost)?;
            let p = TopicPermission {
                exchange: string(e, "exchange", &what)?,
                write: string(e, "write", &what)?,
                read: string(e, "read", &what)?,
            };
            check_regex(&p.write, &what)?;
            check_regex(&p.read, &what)?;
            plan.topic_permissions.push((vhost, user, p));
        }
        for e in entries(doc, "global_parameters")? {
            let name = string(e, "name", "global parameter")?;
            let value = e
                .get("value")
                .cloned()
                .ok_or_else(|| format!("global parameter '{name}': missing field 'value'"))?;
            plan.global_parameters.push((name, value));
        }
    }
    for e in entries(doc, "policies")? {
        let name = string(e, "name", "policy")?;
        let vhost = entry_vhost(e, scope, &format!("policy '{name}'"))?;
        vhost_known(&vhost)?;
        let body: Entry = ["pattern", "definition", "priority", "apply-to"]
            .iter()
            .filter_map(|k| Some((k.to_string(), e.get(*k)?.clone())))
            .collect();
        plan.policies.push(components::policy(
            PolicyKind::Policy,
            &vhost,
            &name,
            &Value::Object(body),
        )?);
    }
    for e in entries(doc, "parameters")? {
        let component = string(e, "component", "parameter")?;
        let name = string(e, "name", "parameter")?;
        let what = format!("parameter '{name}' of component '{component}'");
        let vhost = entry_vhost(e, scope, &what)?;
        vhost_known(&vhost)?;
        let value = e
            .get("value")
            .cloned()
            .ok_or_else(|| format!("{what}: missing field 'value'"))?;
        match component.as_str() {
            POLICY => plan.policies.push(components::policy(
                PolicyKind::Policy,
                &vhost,
                &name,
                &value,
            )?),
            OPERATOR_POLICY => plan.policies.push(components::policy(
                PolicyKind::Operator,
                &vhost,
                &name,
                &value,
            )?),
            VHOST_LIMITS => plan.limits.push((vhost, limits_from(&value, &what)?)),
            _ => plan.parameters.push(ParameterDef {
                vhost,
                component,
                name,
                value,
            }),
        }
    }
    // Exchanges and queues the document brings, to resolve bindings against.
    let mut new_exchanges: HashSet<(String, String)> = HashSet::new();
    for e in entries(doc, "exchanges")? {
        let name = string(e, "name", "exchange")?;
        let what = format!("exchange '{name}'");
        let vhost = entry_vhost(e, scope, &what)?;
        vhost_known(&vhost)?;
        if name.is_empty() || name.starts_with("amq.") {
            plan.skipped.push(format!(
                "exchange '{name}' in vhost '{vhost}': the default and amq.* exchanges are not imported"
            ));
            continue;
        }
        let kind = string(e, "type", &what)?;
        if ExchangeKind::parse(&kind).is_none() {
            return Err(format!(
                "{what} in vhost '{vhost}': unknown exchange type '{kind}'"
            ));
        }
        let arguments = json_to_table(e.get("arguments"), &what)?;
        new_exchanges.insert((vhost.clone(), name.clone()));
        plan.exchanges.push(ExchangeDef {
            name: short(name, &what, "name")?,
            kind,
            durable: boolean(e, "durable", true, &what)?,
            auto_delete: boolean(e, "auto_delete", false, &what)?,
            internal: boolean(e, "internal", false, &what)?,
            arguments,
            vhost,
        });
    }
    let mut new_queues: HashSet<(String, String)> = HashSet::new();
    // Queues left out: bindings to them are left out too, each reported.
    let mut skipped_queues: HashSet<(String, String)> = HashSet::new();
    for e in entries(doc, "queues")? {
        let name = string(e, "name", "queue")?;
        let what = format!("queue '{name}'");
        let vhost = entry_vhost(e, scope, &what)?;
        vhost_known(&vhost)?;
        if name.starts_with("amq.") {
            plan.skipped.push(format!(
                "queue '{name}' in vhost '{vhost}': amq.* queues are not imported"
            ));
            continue;
        }
        if name.is_empty() {
            return Err(format!("queue in vhost '{vhost}': name must not be empty"));
        }
        let arguments = json_to_table(e.get("arguments"), &what)?;
        if arguments.get("x-queue-type").and_then(|t| t.as_str()) == Some("stream") {
            plan.skipped.push(format!(
                "queue '{name}' in vhost '{vhost}': stream queues are not supported by Warren; not imported"
            ));
            skipped_queues.insert((vhost, name));
            continue;
        }
        check_declare_arguments(&name, &vhost, &arguments)
            .map_err(|e| format!("{what}: {}", e.text))?;
        new_queues.insert((vhost.clone(), name.clone()));
        plan.queues.push(QueueDef {
            name: short(name, &what, "name")?,
            durable: boolean(e, "durable", true, &what)?,
            auto_delete: boolean(e, "auto_delete", false, &what)?,
            arguments,
            vhost,
        });
    }
    for e in entries(doc, "bindings")? {
        let source = string(e, "source", "binding")?;
        let destination = string(e, "destination", "binding")?;
        let destination_type = string(e, "destination_type", "binding")?;
        let what = format!("binding from '{source}' to {destination_type} '{destination}'");
        let vhost = entry_vhost(e, scope, &what)?;
        vhost_known(&vhost)?;
        let to_exchange = match destination_type.as_str() {
            "queue" => false,
            "exchange" => true,
            other => {
                return Err(format!(
                    "{what}: destination_type must be queue or exchange, not '{other}'"
                ))
            }
        };
        let live = broker.vhost(&vhost);
        let exchange_exists = |name: &str| {
            new_exchanges.contains(&(vhost.clone(), name.to_owned()))
                || live.as_ref().is_some_and(|v| v.exchange(name).is_some())
        };
        if source.is_empty() || (to_exchange && destination.is_empty()) {
            plan.skipped.push(format!(
                "{what}: bindings of the default exchange are implicit"
            ));
            continue;
        }
        if !to_exchange && skipped_queues.contains(&(vhost.clone(), destination.clone())) {
            plan.skipped.push(format!(
                "{what} in vhost '{vhost}': its queue was not imported"
            ));
            continue;
        }
        if !exchange_exists(&source) {
            return Err(format!("{what}: no exchange '{source}' in vhost '{vhost}'"));
        }
        let destination_exists = match to_exchange {
            true => exchange_exists(&destination),
            false => {
                new_queues.contains(&(vhost.clone(), destination.clone()))
                    || live
                        .as_ref()
                        .is_some_and(|v| v.queue(&destination).is_some())
            }
        };
        if !destination_exists {
            return Err(format!(
                "{what}: no {destination_type} '{destination}' in vhost '{vhost}'"
            ));
        }
        let routing_key = optional_string(e, "routing_key", &what)?.unwrap_or_default();
        plan.bindings.push(BindingDef {
            source: short(source, &what, "source")?,
            destination: short(destination, &what, "destination")?,
            to_exchange,
            routing_key: short(routing_key, &what, "routing_key")?,
            arguments: json_to_table(e.get("arguments"), &what)?,
            vhost,
        });
    }
    check_queue_limits(broker, &plan)?;
    Ok(plan)
}

/// RabbitMQ's `validate_limits`: the queues a document adds to a vhost must fit its
/// max-queues limit, checked before anything is applied.
fn check_queue_limits(broker: &Broker, plan: &Plan) -> Result<(), String> {
    for vhost in broker.vhosts() {
        let Some(limit) = vhost.limits().max_queues else {
            continue;
        };
        let adding: HashSet<&str> = plan
            .queues
            .iter()
            .filter(|q| q.vhost == vhost.name() && vhost.queue(&q.name).is_none())
            .map(|q| q.name.as_str())
            .collect();
        let count = vhost.queues().len();
        if !adding.is_empty() && count + adding.len() > limit as usize {
            return Err(format!(
                "Adding {} queue(s) to virtual host \"{}\" would exceed the limit of {limit} queue(s).\n\n\
                 This virtual host currently has {count} queue(s) defined.\n\nImport aborted!",
                adding.len(),
                vhost.name()
            ));
        }
    }
    Ok(())
}

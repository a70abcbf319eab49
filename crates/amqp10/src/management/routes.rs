//! What each management request does, as rabbit_amqp_management answers it: queues (get,
//! declare, delete, purge), exchanges (declare, delete) and bindings (create, list between
//! two ends, delete by location). Changes go through `Broker::change` as AMQP 0-9-1's and
//! the HTTP API's do, with the same permission rules (`access::required`); statuses and
//! texts are RabbitMQ 4's: 200/201/204 on success, 400 for a bad request or an argument the
//! queue type refuses, 403 for the default exchange or a reserved `amq.` name, 404 for a
//! queue that is not there, 409 for a declaration that differs from what exists. A refused
//! permission ends the session with unauthorized-access, as RabbitMQ 4's does.

use super::{Answer, Ctx, Response};
use crate::codec::{self, AmqpError as Condition, Error};
use crate::convert;
use fe2o3_amqp_types::primitives::{Array, OrderedMap, Value};
use warren_broker::access::required::{self, Required, Resource};
use warren_broker::access::AccessKind;
use warren_broker::quorum::status::NodeNames;
use warren_broker::{names, AmqpError, Change, DefinitionOp, ExchangeKind, Outcome, Queue};
use warren_codec::{FieldTable, ReplyCode, Writer};

type Routed = Result<Answer, Error>;

/// One request to its handler: the single dispatch on method and path.
pub(super) fn route(
    method: &str,
    path: &[&str],
    raw_path: &[&str],
    query: &[(String, String)],
    body: &Value,
    cx: &Ctx,
) -> Routed {
    match (method, path, body) {
        ("GET", ["queues", name], Value::Null) => get_queue(name, cx),
        ("PUT", ["queues", name], body) => declare_queue(name, body, cx),
        ("DELETE", ["queues", name], Value::Null) => delete_queue(name, cx),
        ("DELETE", ["queues", name, "messages"], Value::Null) => purge_queue(name, cx),
        ("PUT", ["exchanges", name], body) => declare_exchange(name, body, cx),
        ("DELETE", ["exchanges", name], Value::Null) => delete_exchange(name, cx),
        ("POST", ["bindings"], body) => bind(body, cx),
        ("GET", ["bindings"], Value::Null) => list_bindings(query, cx),
        ("DELETE", ["bindings", _], Value::Null) => unbind(raw_path[1], cx),
        _ => now(Response::error(
            400,
            format!(
                "unsupported management request {method} /{}",
                path.join("/")
            ),
        )),
    }
}

fn now(response: Response) -> Routed {
    Ok(Answer::Now(response))
}

/// Makes `op`'s change and answers with what `answer` makes of its result: now on a single
/// node, once the metadata log has it in a cluster.
fn change(
    cx: &Ctx,
    op: DefinitionOp,
    answer: impl FnOnce(Result<Outcome, AmqpError>) -> Response + Send + 'static,
) -> Routed {
    Ok(match cx.broker.change(op) {
        Change::Done(result) => Answer::Now(answer(result)),
        Change::Unsynced { result, durable } => Answer::Later(Box::pin(async move {
            durable.await;
            answer(result)
        })),
        Change::Pending(pending) => Answer::Later(Box::pin(async move { answer(pending.await) })),
    })
}

/// A failed change's status: 409 for an inequivalent declaration (0-9-1's 406), 403 for a
/// refusal, 404 for something missing, 400 for the rest.
fn failed(e: AmqpError) -> Response {
    let status = match e.code {
        ReplyCode::PreconditionFailed => 409,
        ReplyCode::AccessRefused => 403,
        ReplyCode::NotFound => 404,
        _ => 400,
    };
    Response::error(status, e.text)
}

// ---- permissions -------------------------------------------------------------------------

fn check(cx: &Ctx, required: &[Required]) -> Result<(), Error> {
    required.iter().try_for_each(|r| {
        // RabbitMQ checks the default exchange as "amq.default".
        let name = match (r.resource, r.name) {
            (Resource::Exchange, "") => "amq.default",
            (_, name) => name,
        };
        match cx.access.check(cx.user, &cx.vhost.name, r.kind, name) {
            true => Ok(()),
            false => Err(codec::error(
                Condition::UnauthorizedAccess,
                format!(
                    "{} access to {} '{name}' in vhost '{}' refused for user '{}'",
                    r.kind.as_str(),
                    r.resource.as_str(),
                    cx.vhost.name,
                    cx.user
                ),
            )),
        }
    })
}

fn one(kind: AccessKind, resource: Resource, name: &str) -> [Required<'_>; 1] {
    [Required {
        kind,
        resource,
        name,
    }]
}

/// A queue's GET needs any one permission on it, as a passive queue.declare.
fn check_any(cx: &Ctx, name: &str) -> Result<(), Error> {
    required::check_any(Resource::Queue, name, |r| {
        check(cx, std::slice::from_ref(r))
    })
}

// ---- names -------------------------------------------------------------------------------

fn describe(resource: Resource, name: &str, cx: &Ctx) -> String {
    format!(
        "{} '{name}' in vhost '{}'",
        resource.as_str(),
        cx.vhost.name
    )
}

/// RabbitMQ's refusals of a name before anything else: line breaks, reserved `amq.`.
fn refuse_name(resource: Resource, name: &str, cx: &Ctx) -> Option<Response> {
    if name.contains(['\r', '\n']) {
        return Some(Response::error(
            400,
            format!("Bad name '{name}': line feed and carriage return characters not allowed"),
        ));
    }
    if names::has_reserved_prefix(name) {
        return Some(Response::error(
            403,
            format!(
                "{} starts with reserved prefix 'amq.'",
                describe(resource, name, cx)
            ),
        ));
    }
    None
}

fn default_exchange_refused() -> Response {
    Response::error(403, "operation not permitted on the default exchange")
}

// ---- bodies ------------------------------------------------------------------------------

/// The fields of a declaration's map body, each checked for its type; unknown ones refused.
fn fields<'a>(
    body: &'a Value,
    what: &str,
    known: &[&str],
) -> Result<Vec<(&'a str, &'a Value)>, Response> {
    let Value::Map(map) = body else {
        return Err(Response::error(
            400,
            format!("bad {what}: the body must be a map"),
        ));
    };
    let mut out = Vec::new();
    for (k, v) in map.iter() {
        match k {
            Value::String(k) if known.contains(&k.as_str()) => out.push((k.as_str(), v)),
            other => {
                return Err(Response::error(
                    400,
                    format!("bad {what} property {other:?}"),
                ))
            }
        }
    }
    Ok(out)
}

fn flag(
    fields: &[(&str, &Value)],
    name: &str,
    default: bool,
    what: &str,
) -> Result<bool, Response> {
    match fields.iter().find(|(k, _)| *k == name) {
        None => Ok(default),
        Some((_, Value::Bool(b))) => Ok(*b),
        Some((_, other)) => Err(Response::error(
            400,
            format!("bad {what} property {name}: {other:?}"),
        )),
    }
}

fn text<'a>(
    fields: &[(&str, &'a Value)],
    name: &str,
    what: &str,
) -> Result<Option<&'a str>, Response> {
    match fields.iter().find(|(k, _)| *k == name) {
        None => Ok(None),
        Some((_, Value::String(s))) => Ok(Some(s.as_str())),
        Some((_, other)) => Err(Response::error(
            400,
            format!("bad {what} property {name}: {other:?}"),
        )),
    }
}

/// Arguments as 0-9-1 field values (RabbitMQ's mc_amqpl:to_091): string or symbol keys.
fn arguments(fields: &[(&str, &Value)]) -> Result<FieldTable, Response> {
    let mut table = FieldTable::new();
    let Some((_, value)) = fields.iter().find(|(k, _)| *k == "arguments") else {
        return Ok(table);
    };
    let Value::Map(map) = value else {
        return Err(Response::error(400, "arguments must be a map"));
    };
    for (k, v) in map.iter() {
        let key = match k {
            Value::String(s) => s.as_str(),
            Value::Symbol(s) => s.as_str(),
            other => {
                return Err(Response::error(
                    400,
                    format!("unsupported argument {other:?}"),
                ))
            }
        };
        let Some(value) = convert::value_to_field(v.clone()) else {
            return Err(Response::error(
                400,
                format!("unsupported argument {key}: {v:?}"),
            ));
        };
        if key.len() > 255 {
            return Err(Response::error(
                400,
                format!("argument name too long: {key}"),
            ));
        }
        table.insert(key, value);
    }
    Ok(table)
}

fn arguments_value(table: &FieldTable) -> Value {
    let mut map = OrderedMap::new();
    for (k, v) in table.iter() {
        if let Some(v) = convert::field_to_value(v) {
            map.as_inner_mut().insert(Value::String(k.to_string()), v);
        }
    }
    Value::Map(map)
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut map = OrderedMap::new();
    for (k, v) in entries {
        map.as_inner_mut().insert(Value::String(k.to_owned()), v);
    }
    Value::Map(map)
}

fn count_body(message_count: u64) -> Value {
    map(vec![("message_count", Value::Ulong(message_count))])
}

// ---- queues ------------------------------------------------------------------------------

/// Where the queue runs, as RabbitMQ 4 lists it: the leader (a classic queue's node) and
/// every replica.
fn topology(q: &Queue, names: &NodeNames, own: &str) -> (String, Vec<String>) {
    match q.replicas() {
        // While the group elects, the member it started with (the declaring node, listed
        // first); a single node's group, whose members are not recorded, is this node's.
        // RabbitMQ's record keeps a leader at all times, and its clients read one (the
        // Python client fails on a queue info without `leader`).
        Some(r) => {
            let mut members: Vec<String> = r.members.iter().map(|id| names.name(*id)).collect();
            if members.is_empty() {
                members.push(own.to_owned());
            }
            let leader = match r.leader {
                Some(id) => names.name(id),
                None => members[0].clone(),
            };
            (leader, members)
        }
        None => {
            let node = q.home_node().unwrap_or(own).to_owned();
            (node.clone(), vec![node])
        }
    }
}

/// A queue's info map.
fn queue_value(q: &Queue, vhost: &str, messages: u64, consumers: u32, nodes: &Nodes) -> Value {
    let (leader, replicas) = topology(q, &nodes.names, &nodes.own);
    let mut entries = vec![
        ("message_count", Value::Ulong(messages)),
        ("consumer_count", Value::Uint(consumers)),
        ("name", Value::String(q.name.to_string())),
        ("vhost", Value::String(vhost.to_owned())),
        ("durable", Value::Bool(q.durable)),
        ("auto_delete", Value::Bool(q.auto_delete)),
        ("exclusive", Value::Bool(q.exclusive_owner.is_some())),
        ("type", Value::String(q.type_name().to_owned())),
        ("arguments", arguments_value(&q.arguments)),
        (
            "replicas",
            Value::Array(Array::from(
                replicas.into_iter().map(Value::String).collect::<Vec<_>>(),
            )),
        ),
    ];
    entries.push(("leader", Value::String(leader)));
    map(entries)
}

/// The cluster's node names, taken before a change that may answer later.
struct Nodes {
    names: NodeNames,
    own: String,
}

fn nodes(cx: &Ctx) -> Nodes {
    Nodes {
        names: cx.broker.node_names(),
        own: cx.broker.node_name().to_owned(),
    }
}

fn get_queue(name: &str, cx: &Ctx) -> Routed {
    check_any(cx, name)?;
    let Some(q) = cx.vhost.queue(name) else {
        return now(Response::error(
            404,
            format!("{} not found", describe(Resource::Queue, name, cx)),
        ));
    };
    let body = queue_value(
        &q,
        &cx.vhost.name,
        u64::from(q.message_count()),
        q.consumer_count(),
        &nodes(cx),
    );
    now(Response::new(200, body))
}

const QUEUE_FIELDS: &[&str] = &["durable", "exclusive", "auto_delete", "arguments"];

fn declare_queue(name: &str, body: &Value, cx: &Ctx) -> Routed {
    let what = "queue";
    let declaration = fields(body, what, QUEUE_FIELDS).and_then(|f| {
        Ok((
            flag(&f, "durable", true, what)?,
            flag(&f, "exclusive", false, what)?,
            flag(&f, "auto_delete", false, what)?,
            arguments(&f)?,
        ))
    });
    let (durable, exclusive, auto_delete, arguments) = match declaration {
        Ok(d) => d,
        Err(response) => return now(response),
    };
    if name.is_empty() {
        return now(Response::error(
            400,
            "declare queue with empty name not allowed",
        ));
    }
    if let Some(refused) = refuse_name(Resource::Queue, name, cx) {
        return now(refused);
    }
    let exists = cx.vhost.queue(name).is_some();
    check(cx, &required::queue_declare(name, exists, &arguments))?;
    let op = DefinitionOp::QueueDeclare {
        vhost: cx.vhost.name.clone(),
        name: name.to_owned(),
        server_named: false,
        durable,
        exclusive,
        auto_delete,
        arguments,
        connection: cx.connection,
        members: Vec::new(),
        // In a cluster, `Broker::change` picks the home node.
        home: None,
    };
    let vhost = cx.vhost.clone();
    let nodes = nodes(cx);
    change(cx, op, move |result| match result {
        Ok(Outcome::QueueDeclared {
            name,
            created,
            message_count,
            consumer_count,
        }) => match vhost.queue(&name) {
            Some(q) => {
                let body = queue_value(
                    &q,
                    &vhost.name,
                    u64::from(message_count),
                    consumer_count,
                    &nodes,
                );
                Response::new(if created { 201 } else { 200 }, body)
            }
            None => Response::error(500, format!("queue '{name}' declared but not found")),
        },
        Ok(other) => Response::error(500, format!("unexpected outcome {other:?}")),
        // Another connection's exclusive queue is locked: 400, as RabbitMQ 4.
        Err(e) => failed(e),
    })
}

fn delete_queue(name: &str, cx: &Ctx) -> Routed {
    if name.contains(['\r', '\n']) {
        return now(refuse_name(Resource::Queue, name, cx).unwrap_or_else(|| failed_text(name)));
    }
    check(cx, &one(AccessKind::Configure, Resource::Queue, name))?;
    let op = DefinitionOp::QueueDelete {
        vhost: cx.vhost.name.clone(),
        name: name.to_owned(),
        connection: cx.connection,
    };
    change(cx, op, |result| match result {
        Ok(Outcome::QueueDeleted { message_count }) => {
            Response::new(200, count_body(u64::from(message_count)))
        }
        // Deleting what is not there succeeds with nothing deleted.
        Ok(_) => Response::new(200, count_body(0)),
        Err(e) if e.code == ReplyCode::NotFound => Response::new(200, count_body(0)),
        Err(e) => Response::error(400, e.text),
    })
}

fn failed_text(name: &str) -> Response {
    Response::error(400, format!("bad name '{name}'"))
}

fn purge_queue(name: &str, cx: &Ctx) -> Routed {
    check(cx, &one(AccessKind::Read, Resource::Queue, name))?;
    match cx.vhost.queue_to_use(name, cx.connection) {
        Ok(q) => now(Response::new(200, count_body(u64::from(q.purge())))),
        Err(e) => now(match e.code {
            ReplyCode::NotFound => Response::error(404, e.text),
            _ => Response::error(400, e.text),
        }),
    }
}

// ---- exchanges ---------------------------------------------------------------------------

const EXCHANGE_FIELDS: &[&str] = &["type", "durable", "auto_delete", "internal", "arguments"];

fn declare_exchange(name: &str, body: &Value, cx: &Ctx) -> Routed {
    let what = "exchange";
    let declaration = fields(body, what, EXCHANGE_FIELDS).and_then(|f| {
        Ok((
            text(&f, "type", what)?.unwrap_or("direct").to_owned(),
            flag(&f, "durable", true, what)?,
            flag(&f, "auto_delete", false, what)?,
            flag(&f, "internal", false, what)?,
            arguments(&f)?,
        ))
    });
    let (kind, durable, auto_delete, internal, arguments) = match declaration {
        Ok(d) => d,
        Err(response) => return now(response),
    };
    if ExchangeKind::parse(&kind).is_none() {
        return now(Response::error(
            400,
            format!("unknown exchange type '{kind}'"),
        ));
    }
    if name.is_empty() {
        return now(default_exchange_refused());
    }
    check(cx, &one(AccessKind::Configure, Resource::Exchange, name))?;
    let exists = cx.vhost.exchange(name).is_some();
    if !exists {
        if let Some(refused) = refuse_name(Resource::Exchange, name, cx) {
            return now(refused);
        }
        check(cx, &required::exchange_declare(name, exists, &arguments))?;
    }
    let op = DefinitionOp::ExchangeDeclare {
        vhost: cx.vhost.name.clone(),
        name: name.to_owned(),
        kind,
        durable,
        auto_delete,
        internal,
        arguments,
    };
    change(cx, op, |result| match result {
        Ok(_) => Response::new(204, Value::Null),
        Err(e) => failed(e),
    })
}

fn delete_exchange(name: &str, cx: &Ctx) -> Routed {
    if name.is_empty() {
        return now(default_exchange_refused());
    }
    if let Some(refused) = refuse_name(Resource::Exchange, name, cx) {
        return now(refused);
    }
    check(cx, &one(AccessKind::Configure, Resource::Exchange, name))?;
    let op = DefinitionOp::ExchangeDelete {
        vhost: cx.vhost.name.clone(),
        name: name.to_owned(),
        if_unused: false,
    };
    change(cx, op, |result| match result {
        // Deleting what is not there succeeds (rabbit_exchange:ensure_deleted).
        Err(e) if e.code != ReplyCode::NotFound => Response::error(400, e.text),
        _ => Response::new(204, Value::Null),
    })
}

// ---- bindings ----------------------------------------------------------------------------

/// One binding, as the requests name it.
struct BindingSpec {
    source: String,
    destination: (Resource, String),
    key: String,
    arguments: FieldTable,
}

const BINDING_FIELDS: &[&str] = &[
    "source",
    "destination_queue",
    "destination_exchange",
    "binding_key",
    "arguments",
];

fn binding_spec(body: &Value) -> Result<BindingSpec, Response> {
    let what = "binding";
    let f = fields(body, what, BINDING_FIELDS)?;
    let destination = match (
        text(&f, "destination_queue", what)?,
        text(&f, "destination_exchange", what)?,
    ) {
        (Some(q), None) => (Resource::Queue, q.to_owned()),
        (None, Some(x)) => (Resource::Exchange, x.to_owned()),
        _ => {
            return Err(Response::error(
                400,
                "a binding names one destination_queue or destination_exchange",
            ))
        }
    };
    let (Some(source), Some(key)) = (text(&f, "source", what)?, text(&f, "binding_key", what)?)
    else {
        return Err(Response::error(
            400,
            "a binding names its source and binding_key",
        ));
    };
    Ok(BindingSpec {
        source: source.to_owned(),
        destination,
        key: key.to_owned(),
        arguments: arguments(&f)?,
    })
}

/// What every binding request checks first: neither end the default exchange, no line
/// breaks, then the permissions.
fn binding_checks(spec: &BindingSpec, cx: &Ctx) -> Result<Option<Response>, Error> {
    let (resource, destination) = (spec.destination.0, spec.destination.1.as_str());
    for (resource, name) in [
        (Resource::Exchange, spec.source.as_str()),
        (resource, destination),
    ] {
        if resource == Resource::Exchange && name.is_empty() {
            return Ok(Some(default_exchange_refused()));
        }
        if name.contains(['\r', '\n']) {
            return Ok(refuse_name(resource, name, cx));
        }
    }
    check(
        cx,
        &required::binding((resource, destination), &spec.source),
    )?;
    if let Some(x) = cx.vhost.exchange(&spec.source) {
        if x.kind == ExchangeKind::Topic
            && !cx.access.check_topic(
                cx.user,
                &cx.vhost.name,
                &x.name,
                AccessKind::Read,
                &spec.key,
            )
        {
            return Err(codec::error(
                Condition::UnauthorizedAccess,
                warren_broker::access::topic_refusal_text(
                    &spec.key,
                    &x.name,
                    &cx.vhost.name,
                    cx.user,
                ),
            ));
        }
    }
    Ok(None)
}

fn binding_op(spec: BindingSpec, add: bool, cx: &Ctx) -> DefinitionOp {
    let vhost = cx.vhost.name.clone();
    let BindingSpec {
        source,
        destination: (resource, destination),
        key: routing_key,
        arguments,
    } = spec;
    match (resource, add) {
        (Resource::Queue, true) => DefinitionOp::QueueBind {
            vhost,
            queue: destination,
            exchange: source,
            routing_key,
            arguments,
            connection: cx.connection,
        },
        (Resource::Queue, false) => DefinitionOp::QueueUnbind {
            vhost,
            queue: destination,
            exchange: source,
            routing_key,
            arguments,
            connection: cx.connection,
        },
        (Resource::Exchange, true) => DefinitionOp::ExchangeBind {
            vhost,
            destination,
            source,
            routing_key,
            arguments,
        },
        (Resource::Exchange, false) => DefinitionOp::ExchangeUnbind {
            vhost,
            destination,
            source,
            routing_key,
            arguments,
        },
    }
}

fn bind(body: &Value, cx: &Ctx) -> Routed {
    let spec = match binding_spec(body) {
        Ok(spec) => spec,
        Err(response) => return now(response),
    };
    if let Some(refused) = binding_checks(&spec, cx)? {
        return now(refused);
    }
    change(cx, binding_op(spec, true, cx), |result| match result {
        Ok(_) => Response::new(204, Value::Null),
        // rabbit_channel:binding_action's failures, a missing end included, are 400.
        Err(e) => Response::error(400, e.text),
    })
}

/// The bindings from `source` to `destination` with `key`, and their arguments.
fn bindings_between(
    cx: &Ctx,
    source: &str,
    (resource, destination): (Resource, &str),
    key: &str,
) -> Vec<FieldTable> {
    let Some(x) = cx.vhost.exchange(source) else {
        return Vec::new();
    };
    x.bindings()
        .into_iter()
        .filter(|b| {
            b.destination.is_queue() == (resource == Resource::Queue)
                && b.destination.name().as_str() == destination
                && b.routing_key.as_str() == key
        })
        .map(|b| b.arguments)
        .collect()
}

/// A digest of a binding's arguments for its location ("" for none): stable across nodes
/// and restarts (FNV-1a over their 0-9-1 encoding), in the characters RabbitMQ's location
/// pattern allows.
fn arguments_digest(arguments: &FieldTable) -> String {
    if arguments.is_empty() {
        return String::new();
    }
    let mut encoded = bytes::BytesMut::new();
    Writer::new(&mut encoded).table(arguments);
    let hash = encoded.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Percent-encodes a location part (RFC 3986's unreserved characters kept).
fn quote(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, crate::address::ADDRESS_SEGMENT).to_string()
}

/// A binding's location: `/bindings/src=S;dstq=Q;key=K;args=DIGEST` (`dste` for an exchange).
fn location(
    source: &str,
    (resource, destination): (Resource, &str),
    key: &str,
    args: &FieldTable,
) -> String {
    let kind = match resource {
        Resource::Queue => 'q',
        Resource::Exchange => 'e',
    };
    format!(
        "/bindings/src={};dst{kind}={};key={};args={}",
        quote(source),
        quote(destination),
        quote(key),
        arguments_digest(args)
    )
}

fn list_bindings(query: &[(String, String)], cx: &Ctx) -> Routed {
    let get = |k: &str| {
        query
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let destination = match (get("dstq"), get("dste")) {
        (Some(q), _) => (Resource::Queue, q),
        (None, Some(x)) => (Resource::Exchange, x),
        _ => return now(Response::error(400, "missing 'dste' or 'dstq' in query")),
    };
    let (Some(source), Some(key)) = (get("src"), get("key")) else {
        return now(Response::error(400, "missing 'src' or 'key' in query"));
    };
    let spec = BindingSpec {
        source: source.to_owned(),
        destination: (destination.0, destination.1.to_owned()),
        key: key.to_owned(),
        arguments: FieldTable::new(),
    };
    if let Some(refused) = binding_checks(&spec, cx)? {
        return now(refused);
    }
    let destination_field = match destination.0 {
        Resource::Queue => "destination_queue",
        Resource::Exchange => "destination_exchange",
    };
    let list = bindings_between(cx, source, destination, key)
        .into_iter()
        .map(|args| {
            map(vec![
                ("source", Value::String(source.to_owned())),
                (destination_field, Value::String(destination.1.to_owned())),
                ("binding_key", Value::String(key.to_owned())),
                ("arguments", arguments_value(&args)),
                (
                    "location",
                    Value::String(location(source, destination, key, &args)),
                ),
            ])
        })
        .collect();
    now(Response::new(200, Value::List(list)))
}

/// Reads a location's segment: `src=S;dstq=Q;key=K;args=DIGEST`, each part percent-encoded.
fn parse_location(segment: &str) -> Option<(String, (Resource, String), String, String)> {
    let mut parts = segment.split(';');
    let mut take = |prefix: &str| parts.next()?.strip_prefix(prefix).map(str::to_owned);
    let source = take("src=")?;
    let destination = {
        let part = take("dst")?;
        match part.split_once('=')? {
            ("q", name) => (Resource::Queue, name.to_owned()),
            ("e", name) => (Resource::Exchange, name.to_owned()),
            _ => return None,
        }
    };
    let key = take("key=")?;
    let digest = take("args=")?;
    if parts.next().is_some() {
        return None;
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|c| c.into_owned())
    };
    Some((
        decode(&source)?,
        (destination.0, decode(&destination.1)?),
        decode(&key)?,
        digest,
    ))
}

fn unbind(segment: &str, cx: &Ctx) -> Routed {
    // The raw segment: each part is percent-encoded in it (`location`), so a name holding
    // ';' or '=' cannot be mistaken for the separators.
    let Some((source, destination, key, digest)) = parse_location(segment) else {
        return now(Response::error(
            400,
            format!("bad binding path segment '{segment}'"),
        ));
    };
    let ends = (destination.0, destination.1.as_str());
    let found = bindings_between(cx, &source, ends, &key)
        .into_iter()
        .find(|args| arguments_digest(args) == digest);
    let spec = BindingSpec {
        source,
        destination,
        key,
        arguments: found.clone().unwrap_or_default(),
    };
    if let Some(refused) = binding_checks(&spec, cx)? {
        return now(refused);
    }
    if found.is_none() {
        return now(Response::new(204, Value::Null));
    }
    change(cx, binding_op(spec, false, cx), |result| match result {
        Ok(_) => Response::new(204, Value::Null),
        Err(e) => Response::error(400, e.text),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_codec::FieldValue;

    #[test]
    fn a_location_reads_back_as_its_binding() {
        let mut args = FieldTable::new();
        args.insert("x-match", FieldValue::string("all"));
        let at = location("e 1", (Resource::Queue, "q/1"), "a.#", &args);
        let segment = at.strip_prefix("/bindings/").unwrap();
        let (source, destination, key, digest) = parse_location(segment).unwrap();
        assert_eq!(source, "e 1");
        assert_eq!(destination.1, "q/1");
        assert_eq!(destination.0, Resource::Queue);
        assert_eq!(key, "a.#");
        assert_eq!(digest, arguments_digest(&args));
        assert!(!digest.is_empty());
        assert_eq!(arguments_digest(&FieldTable::new()), "");
        assert!(parse_location("src=x;dstz=q;key=;args=").is_none());
        assert!(parse_location("src=x;dstq=q;key=").is_none());
    }
}

//! RabbitMQ 4's management node: HTTP over AMQP 1.0 on a `/management` link pair, which
//! RabbitMQ's own AMQP 1.0 clients (Java, Python, Go, .NET) declare their topology through.
//! A request is a message whose properties carry the method (`subject`), the path (`to`,
//! e.g. `/queues/orders`), a message-id and `reply_to` "$me", and whose amqp-value body is a
//! map (the queue's or exchange's fields) or null; the answer goes back on the pair's other
//! link with the status code as `subject`, the request's message-id as `correlation_id`,
//! `http:response` "1.1" and an amqp-value body (rabbit_amqp_management, RabbitMQ 4.1).
//!
//! This file is the wire (the request read from a transfer, the answer written); what each
//! path does is in `management/routes.rs`, over the same definitions changes, permission
//! rules and refusal texts as AMQP 0-9-1 and the HTTP API. A change that waits for the
//! cluster's metadata log answers later: the connection holds the rest of the client's
//! frames until it is made, so requests take effect in the order they were sent.

mod routes;

use crate::codec::Error;
use crate::convert::{self, AMQP_VALUE, APPLICATION_PROPERTIES, PROPERTIES};
use crate::value;
use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::messaging::{MessageId, Properties};
use fe2o3_amqp_types::primitives::Value;
use percent_encoding::percent_decode_str;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use warren_broker::access::AccessControl;
use warren_broker::{Broker, ConnectionId, VHost};

/// The address of both links of the pair.
pub const NODE_ADDRESS: &str = "/management";

/// The `reply_to` every request must carry (Link Pair CS 01, 2.1: "answer on this pair").
const REPLY_TO_PAIR: &str = "$me";

/// One request, read from its message.
#[derive(Debug)]
pub struct Request {
    pub message_id: Option<MessageId>,
    /// The HTTP method: GET, PUT, POST or DELETE.
    pub method: String,
    /// The path and query, percent-encoded: `/queues/a%20b`, `/bindings?src=x&dstq=q&key=k`.
    pub target: String,
    /// The amqp-value body; null when the message has none.
    pub body: Value,
}

/// What a request is answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: Value,
}

impl Response {
    fn new(status: u16, body: Value) -> Response {
        Response { status, body }
    }

    /// An error status with its explanation as the body (RabbitMQ's shape).
    fn error(status: u16, text: impl Into<String>) -> Response {
        let text = text.into();
        tracing::info!(status, %text, "AMQP 1.0 management request failed");
        Response::new(status, Value::String(text))
    }
}

/// A response waiting for a definitions change to be made (in a cluster).
pub type LaterResponse = Pin<Box<dyn Future<Output = Response> + Send>>;

/// A request's answer: now, or once a change is made.
pub enum Answer {
    Now(Response),
    Later(LaterResponse),
}

/// What a request may use of its connection.
pub struct Ctx<'a> {
    pub vhost: &'a Arc<VHost>,
    pub broker: &'a Broker,
    pub access: &'a AccessControl,
    pub user: &'a str,
    pub connection: ConnectionId,
}

/// Reads a request from a management transfer's payload.
pub fn parse_request(payload: &Bytes) -> Result<Request, String> {
    let mut properties: Option<Properties> = None;
    let mut body = Value::Null;
    for (code, section) in convert::sections(payload)? {
        match code {
            PROPERTIES => properties = Some(convert::decode(&section, "properties")?),
            AMQP_VALUE => {
                let value_at =
                    1 + crate::codec::value_len(&section[1..]).ok_or("bad amqp-value section")?;
                body = value::decode(&section[value_at..])
                    .map_err(|e| format!("bad amqp-value section: {e}"))?
                    .0;
            }
            _ => {}
        }
    }
    let properties = properties.ok_or("a management request needs a properties section")?;
    let (Some(target), Some(method)) = (properties.to, properties.subject) else {
        return Err(
            "a management request names its path in `to` and its method in `subject`".into(),
        );
    };
    if properties.reply_to.as_deref() != Some(REPLY_TO_PAIR) {
        return Err(format!(
            "a management request's reply_to must be \"{REPLY_TO_PAIR}\" (answered on its link pair)"
        ));
    }
    Ok(Request {
        message_id: properties.message_id,
        method,
        target,
        body,
    })
}

/// The answer's message: properties (status as subject, the request's message-id as
/// correlation-id), application-properties (`http:response` "1.1"), the amqp-value body.
pub fn encode_response(correlation_id: Option<MessageId>, response: &Response) -> Bytes {
    let mut out = BytesMut::new();
    let properties = Properties {
        subject: Some(response.status.to_string()),
        correlation_id,
        ..Properties::default()
    };
    convert::encode(&mut out, &properties);
    let mut rest = Vec::new();
    value::encode_map_section(
        &mut rest,
        APPLICATION_PROPERTIES as u8,
        vec![(
            Value::String("http:response".into()),
            Value::String("1.1".into()),
        )],
    );
    rest.extend_from_slice(&[0x00, 0x53, AMQP_VALUE as u8]);
    value::encode(&mut rest, &response.body);
    out.extend_from_slice(&rest);
    out.freeze()
}

/// Answers a request; an error ends the session (a refused permission, as RabbitMQ 4's
/// unauthorized-access).
pub fn handle(request: &Request, cx: &Ctx) -> Result<Answer, Error> {
    let parsed = parse_target(&request.target);
    let decoded = parsed.as_ref().and_then(|(raw, _)| {
        raw.iter()
            .map(|s| percent_decode_str(s).decode_utf8().ok())
            .collect::<Option<Vec<_>>>()
    });
    let (Some((raw, query)), Some(decoded)) = (&parsed, decoded) else {
        return Ok(Answer::Now(Response::error(
            400,
            format!("failed to parse URI '{}'", request.target),
        )));
    };
    let path: Vec<&str> = decoded.iter().map(|s| s.as_ref()).collect();
    let raw: Vec<&str> = raw.iter().map(String::as_str).collect();
    routes::route(&request.method, &path, &raw, query, &request.body, cx)
}

/// A request's query: its pairs, decoded, in order.
type Query = Vec<(String, String)>;

/// The path's segments, still percent-encoded (a binding's location is read from its raw
/// segment, whose parts are encoded of their own), and the query's pairs, decoded; None
/// when the target is not an absolute path or a query part is not UTF-8 once decoded.
fn parse_target(target: &str) -> Option<(Vec<String>, Query)> {
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    let path = path.strip_prefix('/')?;
    let decode = |s: &str| {
        percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|c| c.into_owned())
    };
    let segments = path.split('/').map(str::to_owned).collect();
    let mut pairs = Vec::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        // A form-encoded query, as uri_string:dissect_query reads it: '+' is a space.
        let pair = pair.replace('+', " ");
        let (k, v) = pair.split_once('=').unwrap_or((&pair, ""));
        pairs.push((decode(k)?, decode(v)?));
    }
    Some((segments, pairs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_split_before_their_segments_are_decoded() {
        let (segments, query) = parse_target("/queues/a%2Fb%20c/messages").unwrap();
        assert_eq!(segments, ["queues", "a%2Fb%20c", "messages"]);
        assert!(query.is_empty());
        let (segments, query) = parse_target("/bindings?src=x%26y&dstq=q+1&key=").unwrap();
        assert_eq!(segments, ["bindings"]);
        assert_eq!(
            query,
            [
                ("src".to_owned(), "x&y".to_owned()),
                ("dstq".to_owned(), "q 1".to_owned()),
                ("key".to_owned(), String::new())
            ]
        );
        assert!(parse_target("queues/q").is_none());
        assert!(parse_target("/bindings?src=%ff").is_none());
    }

    #[test]
    fn a_response_reads_back_as_a_message() {
        let response = Response::new(201, Value::String("made".into()));
        let id = MessageId::String("m-1".into());
        let bytes = encode_response(Some(id.clone()), &response);
        let sections = convert::sections(&bytes).unwrap();
        let codes: Vec<u64> = sections.iter().map(|(c, _)| *c).collect();
        assert_eq!(codes, [PROPERTIES, APPLICATION_PROPERTIES, AMQP_VALUE]);
        let p: Properties = convert::decode(&sections[0].1, "properties").unwrap();
        assert_eq!(p.subject.as_deref(), Some("201"));
        assert_eq!(p.correlation_id, Some(id));
    }

    #[test]
    fn a_request_needs_its_path_method_and_reply_to() {
        let mut out = BytesMut::new();
        let properties = Properties {
            message_id: Some(MessageId::Ulong(7)),
            to: Some("/queues/q".into()),
            subject: Some("GET".into()),
            reply_to: Some("$me".into()),
            ..Properties::default()
        };
        convert::encode(&mut out, &properties);
        let request = parse_request(&out.clone().freeze()).unwrap();
        assert_eq!(
            (request.method.as_str(), request.target.as_str()),
            ("GET", "/queues/q")
        );
        assert_eq!(request.body, Value::Null);
        let mut other = BytesMut::new();
        convert::encode(
            &mut other,
            &Properties {
                reply_to: Some("elsewhere".into()),
                ..properties
            },
        );
        assert!(parse_request(&other.freeze()).is_err());
    }
}

//! Which permissions a definitions change needs, as RabbitMQ checks them (rabbit_channel's
//! check_*_permitted, rabbit_amqp_management's checks): written once for AMQP 0-9-1, the
//! HTTP API and AMQP 1.0's management node. Each caller checks the list in order and reports
//! the first refusal in its own protocol's way (403 ACCESS_REFUSED, 401, unauthorized-access).

use super::AccessKind;
use warren_codec::{FieldTable, FieldValue};

/// The kind of resource a permission is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Queue,
    Exchange,
}

impl Resource {
    /// Its name in refusal texts.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Queue => "queue",
            Resource::Exchange => "exchange",
        }
    }
}

/// One permission: `kind` on the queue or exchange `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Required<'a> {
    pub kind: AccessKind,
    pub resource: Resource,
    pub name: &'a str,
}

impl<'a> Required<'a> {
    fn new(kind: AccessKind, resource: Resource, name: &'a str) -> Required<'a> {
        Required {
            kind,
            resource,
            name,
        }
    }
}

/// Declaring queue `name` (`exists`: it is already there): configure on it; a new queue with
/// a dead-letter exchange also needs read on itself and write on that exchange, since its
/// messages will be published there.
pub fn queue_declare<'a>(
    name: &'a str,
    exists: bool,
    arguments: &'a FieldTable,
) -> Vec<Required<'a>> {
    routing_argument(
        Resource::Queue,
        name,
        exists,
        arguments,
        "x-dead-letter-exchange",
    )
}

/// Declaring exchange `name`: configure on it; a new exchange with an alternate exchange
/// also needs read on itself and write on the alternate.
pub fn exchange_declare<'a>(
    name: &'a str,
    exists: bool,
    arguments: &'a FieldTable,
) -> Vec<Required<'a>> {
    routing_argument(
        Resource::Exchange,
        name,
        exists,
        arguments,
        "alternate-exchange",
    )
}

fn routing_argument<'a>(
    resource: Resource,
    name: &'a str,
    exists: bool,
    arguments: &'a FieldTable,
    key: &str,
) -> Vec<Required<'a>> {
    let mut required = vec![Required::new(AccessKind::Configure, resource, name)];
    let target = arguments.get(key).and_then(FieldValue::as_str);
    if let (false, Some(target)) = (exists, target) {
        required.push(Required::new(AccessKind::Read, resource, name));
        required.push(Required::new(AccessKind::Write, Resource::Exchange, target));
    }
    required
}

/// Binding (or unbinding) `destination` to exchange `source`: write on the destination,
/// read on the source. (A topic source also needs topic read on the key, which takes the
/// exchange itself: each caller checks it after these.) A binding that names the default
/// exchange needs only the first: the vhost refuses it on its own.
pub fn binding<'a>(destination: (Resource, &'a str), source: &'a str) -> Vec<Required<'a>> {
    let (resource, name) = destination;
    let mut required = vec![Required::new(AccessKind::Write, resource, name)];
    let default_exchange = source.is_empty() || (resource == Resource::Exchange && name.is_empty());
    if !default_exchange {
        required.push(Required::new(AccessKind::Read, Resource::Exchange, source));
    }
    required
}

/// A passive declare (and the management node's queue GET) needs any one permission on
/// the resource (RabbitMQ 3.13.x/4.x, rabbitmq-server#16085; 3.x checked nothing). `check`
/// is the caller's own check of one permission; refused, the refusal reported is the one a
/// regular declare gets (configure), in the caller's protocol's words.
pub fn check_any<E>(
    resource: Resource,
    name: &str,
    check: impl Fn(&Required<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let any = [AccessKind::Read, AccessKind::Write]
        .into_iter()
        .any(|kind| check(&Required::new(kind, resource, name)).is_ok());
    match any {
        true => Ok(()),
        false => check(&Required::new(AccessKind::Configure, resource, name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_queue_with_a_dead_letter_exchange_needs_read_on_itself_and_write_there() {
        let mut args = FieldTable::new();
        args.insert("x-dead-letter-exchange", FieldValue::string("dlx"));
        let new = queue_declare("q", false, &args);
        assert_eq!(
            new,
            vec![
                Required::new(AccessKind::Configure, Resource::Queue, "q"),
                Required::new(AccessKind::Read, Resource::Queue, "q"),
                Required::new(AccessKind::Write, Resource::Exchange, "dlx"),
            ]
        );
        assert_eq!(queue_declare("q", true, &args).len(), 1);
        assert_eq!(queue_declare("q", false, &FieldTable::new()).len(), 1);
    }

    #[test]
    fn a_new_exchange_with_an_alternate_needs_write_on_the_alternate() {
        let mut args = FieldTable::new();
        args.insert("alternate-exchange", FieldValue::string("ae"));
        let new = exchange_declare("x", false, &args);
        assert_eq!(
            new[2],
            Required::new(AccessKind::Write, Resource::Exchange, "ae")
        );
        assert_eq!(
            new[1],
            Required::new(AccessKind::Read, Resource::Exchange, "x")
        );
    }

    #[test]
    fn bindings_need_write_on_the_destination_and_read_on_the_source() {
        let b = binding((Resource::Queue, "q"), "x");
        assert_eq!(b[0], Required::new(AccessKind::Write, Resource::Queue, "q"));
        assert_eq!(
            b[1],
            Required::new(AccessKind::Read, Resource::Exchange, "x")
        );
        assert_eq!(binding((Resource::Queue, "q"), "").len(), 1);
        assert_eq!(binding((Resource::Exchange, ""), "x").len(), 1);
    }
}

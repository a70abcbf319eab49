//! What a request that acts in a vhost needs besides its tags: the permission the matching
//! AMQP method needs (configure to declare or delete, write to publish, read to get or purge,
//! write on the destination and read on the source to bind, topic permissions on routing
//! keys). RabbitMQ's management plugin acts over an internal AMQP connection as the user, so
//! these are checked as its channel checks them, and refused as each of its handlers reports
//! that connection's failure (RabbitMQ 3.10, checked against it).

use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use warren_broker::access::required::{self, Required, Resource};
use warren_broker::access::{self, AccessControl, AccessKind};
use warren_broker::{Exchange, ExchangeKind};

/// RabbitMQ's reason when the internal connection or channel was refused.
const ACCESS_REFUSED: &str = "Access refused.";

/// How a handler reports a refused permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Declares, deletes, purges and bindings: 401 "Access refused.", whatever was refused.
    Plain,
    /// Publishing: 400 with the channel's close reason, "403 ACCESS_REFUSED - ...".
    Publish,
    /// Getting messages and the aliveness test: 401 "ACCESS_REFUSED - ...".
    Get,
}

/// A user acting in a vhost, with the permissions checked as AMQP checks them.
pub struct Acting<'a> {
    access: &'a AccessControl,
    user: &'a str,
    vhost: &'a str,
    report: Report,
}

impl<'a> Acting<'a> {
    /// Refused (401 "Access refused.", however the handler reports the rest) when the user
    /// has no permissions in the vhost at all, as the internal connection is: administrators
    /// see every vhost but may act only where they have permissions.
    pub fn new(
        access: &'a AccessControl,
        who: &'a Identity,
        vhost: &'a str,
        report: Report,
    ) -> ApiResult<Acting<'a>> {
        if !access.check_vhost(&who.name, vhost) {
            return Err(ApiError::not_authorised(ACCESS_REFUSED));
        }
        Ok(Acting {
            access,
            user: &who.name,
            vhost,
            report,
        })
    }

    pub fn queue(&self, kind: AccessKind, name: &str) -> ApiResult<()> {
        self.resource(kind, "queue", name)
    }

    /// The default exchange ("") is checked as "amq.default", as RabbitMQ checks it.
    pub fn exchange(&self, kind: AccessKind, name: &str) -> ApiResult<()> {
        let name = if name.is_empty() { "amq.default" } else { name };
        self.resource(kind, "exchange", name)
    }

    /// A routing key on a topic exchange (other kinds have no topic permissions): write to
    /// publish, read to bind.
    pub fn topic(&self, exchange: &Exchange, kind: AccessKind, routing_key: &str) -> ApiResult<()> {
        if exchange.kind != ExchangeKind::Topic {
            return Ok(());
        }
        match self
            .access
            .check_topic(self.user, self.vhost, &exchange.name, kind, routing_key)
        {
            true => Ok(()),
            false => Err(self.refused(access::topic_refusal_text(
                routing_key,
                &exchange.name,
                self.vhost,
                self.user,
            ))),
        }
    }

    /// Every permission of `required` (`warren_broker::access::required`), the first refused
    /// reported.
    pub fn all(&self, required: &[Required]) -> ApiResult<()> {
        required.iter().try_for_each(|r| match r.resource {
            Resource::Queue => self.queue(r.kind, r.name),
            Resource::Exchange => self.exchange(r.kind, r.name),
        })
    }

    /// A binding from `source` to a queue or exchange: write on the destination, read on the
    /// source, and topic read on the key when the source is a topic exchange.
    pub fn binding(
        &self,
        source: Option<&Exchange>,
        source_name: &str,
        destination_is_queue: bool,
        destination: &str,
        routing_key: &str,
    ) -> ApiResult<()> {
        let resource = match destination_is_queue {
            true => Resource::Queue,
            false => Resource::Exchange,
        };
        self.all(&required::binding((resource, destination), source_name))?;
        match source {
            Some(x) => self.topic(x, AccessKind::Read, routing_key),
            None => Ok(()),
        }
    }

    fn resource(&self, kind: AccessKind, resource: &str, name: &str) -> ApiResult<()> {
        match self.access.check(self.user, self.vhost, kind, name) {
            true => Ok(()),
            false => Err(self.refused(access::refusal_text(resource, name, self.vhost, self.user))),
        }
    }

    fn refused(&self, text: String) -> ApiError {
        match self.report {
            Report::Plain => ApiError::not_authorised(ACCESS_REFUSED),
            Report::Publish => ApiError::bad_request(format!("403 ACCESS_REFUSED - {text}")),
            Report::Get => ApiError::not_authorised(format!("ACCESS_REFUSED - {text}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use warren_broker::access::Permission;

    fn setup() -> (AccessControl, Identity) {
        let access = AccessControl::new();
        access
            .put_user("u", Some("pw"), vec!["management".into()])
            .unwrap();
        let p = Permission {
            configure: "^cfg-".into(),
            write: "^wr-".into(),
            read: "^rd-".into(),
        };
        access.set_permission("v", "u", p).unwrap();
        let who = Identity {
            name: "u".into(),
            tags: vec!["management".into()],
        };
        (access, who)
    }

    #[test]
    fn each_report_refuses_its_own_way() {
        let (access, who) = setup();
        let plain = Acting::new(&access, &who, "v", Report::Plain).unwrap();
        assert!(plain.queue(AccessKind::Configure, "cfg-q").is_ok());
        let e = plain.queue(AccessKind::Read, "cfg-q").unwrap_err();
        assert_eq!(
            (e.status, e.reason.as_str()),
            (StatusCode::UNAUTHORIZED, "Access refused.")
        );

        let publish = Acting::new(&access, &who, "v", Report::Publish).unwrap();
        assert!(publish.exchange(AccessKind::Write, "wr-x").is_ok());
        let e = publish.exchange(AccessKind::Write, "").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            e.reason,
            "403 ACCESS_REFUSED - access to exchange 'amq.default' in vhost 'v' refused for user 'u'"
        );

        let get = Acting::new(&access, &who, "v", Report::Get).unwrap();
        let e = get.queue(AccessKind::Read, "wr-q").unwrap_err();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            e.reason,
            "ACCESS_REFUSED - access to queue 'wr-q' in vhost 'v' refused for user 'u'"
        );
    }

    #[test]
    fn no_permissions_in_the_vhost_refuse_the_connection() {
        let (access, who) = setup();
        for report in [Report::Plain, Report::Publish, Report::Get] {
            let e = Acting::new(&access, &who, "other", report)
                .err()
                .expect("refused");
            assert_eq!(
                (e.status, e.reason.as_str()),
                (StatusCode::UNAUTHORIZED, "Access refused.")
            );
        }
    }

    #[test]
    fn bindings_need_write_on_the_destination_and_read_on_the_source() {
        let (access, who) = setup();
        let acting = Acting::new(&access, &who, "v", Report::Plain).unwrap();
        assert!(acting.binding(None, "rd-x", true, "wr-q", "k").is_ok());
        assert!(acting.binding(None, "rd-x", false, "wr-x", "k").is_ok());
        assert!(acting.binding(None, "wr-x", true, "wr-q", "k").is_err());
        assert!(acting.binding(None, "rd-x", true, "rd-q", "k").is_err());
    }
}

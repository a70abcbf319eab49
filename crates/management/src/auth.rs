//! HTTP Basic authentication and what a user's tags let it do, as RabbitMQ 3.10's management
//! plugin (rabbit_mgmt_util): a user needs one of the management tags to use the API at all;
//! `monitoring` sees the node, every vhost's name and totals and every connection;
//! `policymaker` manages policies and parameters in its vhosts; `administrator` does
//! everything and sees every vhost's objects. `guest`-like loopback users are refused from
//! anywhere but loopback. Refusals are 401 with RabbitMQ's reasons.

use crate::error::ApiError;
use crate::Api;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use std::sync::Arc;
use warren_listener::http_listener::ClientAddr;

/// Refused: the vhost in the path is one the user has no permissions in (and it is no
/// administrator).
pub const NOT_VHOST_USER: &str = "User not authorised to access virtual host";
/// Refused: an object the user's tags do not reach — another user's connection, a policy
/// or parameter without the policymaker tag.
pub const NOT_OBJECT_USER: &str = "User not authorised to access object";

/// The authenticated user of a request.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub tags: Vec<String>,
}

impl Identity {
    fn has(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    pub fn is_admin(&self) -> bool {
        self.has("administrator")
    }

    /// Sees the node, every vhost's name and totals, and every connection.
    pub fn is_monitor(&self) -> bool {
        self.is_admin() || self.has("monitoring")
    }

    pub fn is_policymaker(&self) -> bool {
        self.is_admin() || self.has("policymaker")
    }

    /// May use the API at all.
    pub fn is_management_user(&self) -> bool {
        self.is_monitor() || self.is_policymaker() || self.has("management")
    }

    /// Only administrators manage users, vhosts, permissions, definitions and operator
    /// policies.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self.is_admin() {
            true => Ok(()),
            false => Err(ApiError::not_authorised("Not administrator user")),
        }
    }

    pub fn require_monitor(&self) -> Result<(), ApiError> {
        match self.is_monitor() {
            true => Ok(()),
            false => Err(ApiError::not_authorised("Not monitor user")),
        }
    }

    /// Runtime parameters, global or of every vhost: policymakers (vhost-scoped requests
    /// check the vhost as well, `Api::require_policymaker_in`).
    pub fn require_policymaker(&self) -> Result<(), ApiError> {
        match self.is_policymaker() {
            true => Ok(()),
            false => Err(ApiError::not_authorised(NOT_OBJECT_USER)),
        }
    }
}

fn unauthorized(reason: &str) -> Response {
    ApiError::not_authorised(reason).into_response()
}

/// The middleware in front of every /api route: checks the credentials and puts the
/// `Identity` in the request's extensions.
pub async fn authenticate(
    State(api): State<Arc<Api>>,
    ConnectInfo(ClientAddr(peer)): ConnectInfo<ClientAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(credentials) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|b| String::from_utf8(b).ok())
    else {
        // RabbitMQ answers a request without credentials with an empty 401 and the
        // challenge.
        return (
            axum::http::StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"RabbitMQ Management\"",
            )],
        )
            .into_response();
    };
    let Some((user, password)) = credentials.split_once(':') else {
        return ApiError::login_failed().into_response();
    };
    let Some(identity) = api.accounts.authenticate(user, password) else {
        return ApiError::login_failed().into_response();
    };
    if api.accounts.loopback_only(user) && !peer.ip().to_canonical().is_loopback() {
        return unauthorized("User can only log in via localhost");
    }
    if !identity.is_management_user() {
        return unauthorized("Not management user");
    }
    request.extensions_mut().insert(identity);
    next.run(request).await
}

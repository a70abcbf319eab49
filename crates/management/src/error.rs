//! `ApiError`: an HTTP status with RabbitMQ's error body, `{"error": .., "reason": ..}`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use warren_broker::AmqpError;
use warren_codec::ReplyCode;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: &'static str,
    pub reason: String,
}

pub type ApiResult<T = Response> = Result<T, ApiError>;

impl ApiError {
    pub fn not_found() -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            error: "Object Not Found",
            reason: "Not Found".into(),
        }
    }

    pub fn bad_request(reason: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            error: "bad_request",
            reason: reason.into(),
        }
    }

    /// An authenticated user without the rights for this request (RabbitMQ's
    /// `not_authorised`).
    pub fn not_authorised(reason: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorised",
            reason: reason.into(),
        }
    }

    /// The broker cannot do what was asked now (503).
    pub fn unavailable(reason: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            error: "unavailable",
            reason: reason.into(),
        }
    }

    /// Wrong credentials. RabbitMQ spells this one "not_authorized" (and the others
    /// "not_authorised").
    pub fn login_failed() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorized",
            reason: "Login failed".into(),
        }
    }
}

/// A broker error met while doing what a request asked, mapped as RabbitMQ's management
/// plugin maps AMQP errors: not found is 404, access refused is 403 (via not_authorised),
/// the rest are the client's mistake (400).
impl From<AmqpError> for ApiError {
    fn from(e: AmqpError) -> ApiError {
        match e.code {
            ReplyCode::NotFound => ApiError {
                status: StatusCode::NOT_FOUND,
                error: "not_found",
                reason: e.text,
            },
            ReplyCode::AccessRefused => ApiError {
                status: StatusCode::FORBIDDEN,
                error: "not_authorised",
                reason: e.text,
            },
            _ => ApiError::bad_request(e.text),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.error, "reason": self.reason});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        response
    }
}

//! The HTTP client for the management API (RabbitMQ's paths and JSON, which Warren serves
//! too): Basic auth, JSON in and out, and the API's `{"error", "reason"}` replies turned
//! into [`CtlError`]s with rabbitmqctl's exit codes.

use crate::exit::{CtlError, ExitCode};
use base64::Engine;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;
use std::time::Duration;

/// Definitions of a large broker can be big; the API is trusted, this only bounds a runaway.
const MAX_RESPONSE_BYTES: u64 = 1 << 30;

/// Everything but RFC 3986's unreserved characters is escaped, so a vhost `/` becomes `%2F`
/// and a connection name `127.0.0.1:5000 -> 127.0.0.1:5672` stays one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one path segment (a vhost, a user, a queue name…).
pub fn segment(name: &str) -> String {
    utf8_percent_encode(name, SEGMENT).to_string()
}

/// A failed request, before the command decides what it means for the user.
#[derive(Debug)]
pub enum ApiError {
    /// The API answered with this status and its `reason` (or body).
    Status { status: u16, reason: String },
    /// No answer: the broker is down, the URL is wrong, the request timed out.
    Transport(CtlError),
}

impl ApiError {
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            ApiError::Transport(_) => None,
        }
    }
}

impl From<ApiError> for CtlError {
    /// The generic meaning of a failed request; commands map a 404 (or a 400) to their own
    /// message first where they know which object was missing.
    fn from(e: ApiError) -> CtlError {
        match e {
            ApiError::Transport(e) => e,
            ApiError::Status { status, reason } => {
                let code = match status {
                    401 | 403 => ExitCode::NoPerm,
                    400 => ExitCode::DataErr,
                    404 => ExitCode::Unavailable,
                    408 | 504 => ExitCode::TempFail,
                    _ => ExitCode::Software,
                };
                CtlError::new(code, format!("{reason} (HTTP {status})"))
            }
        }
    }
}

/// A client of one broker's management API.
pub struct Api {
    agent: ureq::Agent,
    /// The URL without its trailing slash; paths start with `/api/`.
    base_url: String,
    authorization: String,
    username: String,
}

impl Api {
    /// `ca_certificates`: PEM certificates to trust for an `https` URL instead of the usual
    /// public roots (a broker whose certificate comes from its own CA).
    pub fn new(
        base_url: &str,
        username: &str,
        password: &str,
        timeout: Duration,
        ca_certificates: Option<&[u8]>,
    ) -> Result<Api, CtlError> {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout));
        if let Some(pem) = ca_certificates {
            let roots = trusted_roots(pem)?;
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let config = config.build();
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        Ok(Api {
            agent: ureq::Agent::new_with_config(config),
            base_url: base_url.trim_end_matches('/').to_owned(),
            authorization: format!("Basic {credentials}"),
            username: username.to_owned(),
        })
    }

    /// The same broker as another user (authenticate_user checks those credentials).
    pub fn as_user(&self, username: &str, password: &str) -> Api {
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        Api {
            agent: self.agent.clone(),
            base_url: self.base_url.clone(),
            authorization: format!("Basic {credentials}"),
            username: username.to_owned(),
        }
    }

    pub fn get(&self, path: &str) -> Result<Value, ApiError> {
        let body = self.get_text(path)?;
        serde_json::from_str(&body).map_err(|e| self.bad_response(path, e))
    }

    /// The body as the API sent it (export_definitions writes it unchanged).
    pub fn get_text(&self, path: &str) -> Result<String, ApiError> {
        let response = self
            .agent
            .get(self.url(path))
            .header("Authorization", &self.authorization)
            .call();
        self.finish(path, response)
    }

    /// GET that tells "exists" (200) from "does not exist" (404).
    pub fn exists(&self, path: &str) -> Result<bool, ApiError> {
        match self.get_text(path) {
            Ok(_) => Ok(true),
            Err(ApiError::Status { status: 404, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn put(&self, path: &str, body: &Value) -> Result<(), ApiError> {
        let response = self
            .agent
            .put(self.url(path))
            .header("Authorization", &self.authorization)
            .header("Content-Type", "application/json")
            .send(body.to_string());
        self.finish(path, response).map(drop)
    }

    pub fn post_text(&self, path: &str, body: String) -> Result<String, ApiError> {
        let response = self
            .agent
            .post(self.url(path))
            .header("Authorization", &self.authorization)
            .header("Content-Type", "application/json")
            .send(body);
        self.finish(path, response)
    }

    /// DELETE, with extra headers (`X-Reason` when closing a connection).
    pub fn delete(&self, path: &str, headers: &[(&str, &str)]) -> Result<(), ApiError> {
        let mut request = self
            .agent
            .delete(self.url(path))
            .header("Authorization", &self.authorization);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.finish(path, request.call()).map(drop)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    fn finish(
        &self,
        path: &str,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<String, ApiError> {
        let mut response = response.map_err(|e| ApiError::Transport(self.transport_error(e)))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_string()
            .map_err(|e| ApiError::Transport(self.transport_error(e)))?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let api_reason = error_reason(&body).unwrap_or_else(|| format!("{path}: {}", body.trim()));
        let reason = match status {
            // 401 is both a failed login and a user whose tags do not allow the call
            // ("Not administrator user"): name the user, keep the API's reason.
            401 | 403 => format!(
                "the management API at {} refused user \"{}\": {api_reason}",
                self.base_url, self.username
            ),
            _ => api_reason,
        };
        Err(ApiError::Status { status, reason })
    }

    fn transport_error(&self, e: ureq::Error) -> CtlError {
        let code = match e {
            ureq::Error::Timeout(_) => ExitCode::TempFail,
            _ => ExitCode::Unavailable,
        };
        CtlError::new(
            code,
            format!(
                "cannot reach the management API at {}: {}",
                self.base_url,
                one_line(&e.to_string())
            ),
        )
    }

    fn bad_response(&self, path: &str, e: serde_json::Error) -> ApiError {
        ApiError::Transport(CtlError::new(
            ExitCode::Software,
            format!("{}{path} did not answer with JSON: {e}", self.base_url),
        ))
    }
}

fn trusted_roots(pem: &[u8]) -> Result<ureq::tls::RootCerts, CtlError> {
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(certificate)) => certificates.push(certificate),
            Ok(_) => {}
            Err(e) => return Err(CtlError::new(ExitCode::DataErr, format!("--cacert: {e}"))),
        }
    }
    if certificates.is_empty() {
        return Err(CtlError::new(
            ExitCode::DataErr,
            "--cacert: no PEM certificate in the file",
        ));
    }
    Ok(ureq::tls::RootCerts::new_with_certs(&certificates))
}

/// The `reason` of an API error body (`{"error": "bad_request", "reason": "…"}`), with the
/// HTML escaping RabbitMQ applies to it undone.
pub fn error_reason(body: &str) -> Option<String> {
    let value: Value = serde_json::from_str(body).ok()?;
    let reason = match (value.get("reason"), value.get("error")) {
        (Some(Value::String(r)), _) => r.clone(),
        (Some(other), _) => other.to_string(),
        (None, Some(Value::String(e))) => e.clone(),
        _ => return None,
    };
    Some(one_line(&unescape_html(&reason)))
}

fn unescape_html(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Collapses line breaks so that an error stays on one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_escapes_slash_and_spaces_but_not_unreserved_characters() {
        assert_eq!(segment("/"), "%2F");
        assert_eq!(segment("a.b-c_d~e"), "a.b-c_d~e");
        assert_eq!(
            segment("127.0.0.1:5000 -> 127.0.0.1:5672"),
            "127.0.0.1%3A5000%20-%3E%20127.0.0.1%3A5672"
        );
    }

    #[test]
    fn error_reason_reads_rabbitmq_error_bodies() {
        let body = r#"{"error":"bad_request","reason":"Validation failed\n\n&lt;&lt;\"x\"&gt;&gt; is not a valid maximum length\n"}"#;
        assert_eq!(
            error_reason(body).as_deref(),
            Some(r#"Validation failed <<"x">> is not a valid maximum length"#)
        );
        assert_eq!(
            error_reason(r#"{"error":"Object Not Found","reason":"Not Found"}"#).as_deref(),
            Some("Not Found")
        );
        assert_eq!(error_reason("<html>oops</html>"), None);
    }

    #[test]
    fn statuses_map_to_rabbitmqctl_exit_codes() {
        let code = |status| {
            CtlError::from(ApiError::Status {
                status,
                reason: "r".into(),
            })
            .code
        };
        assert_eq!(code(400), ExitCode::DataErr);
        assert_eq!(code(401), ExitCode::NoPerm);
        assert_eq!(code(404), ExitCode::Unavailable);
        assert_eq!(code(500), ExitCode::Software);
    }
}

//! /api/definitions[/VHOST]: export and import in RabbitMQ's definitions JSON, through
//! warren-definitions (administrators only, as RabbitMQ). An export is streamed: written
//! item by item as the connection takes it (`streamed_body`), never held whole.

use super::{body_json, no_content};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::Api;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use serde_json::json;
use std::sync::Arc;
use warren_listener::streamed_body::streamed;

pub async fn export(State(api): State<Arc<Api>>, Extension(who): Extension<Identity>) -> ApiResult {
    who.require_admin()?;
    let broker = api.broker.clone();
    Ok(json_body(streamed(move |mut out| {
        // An error here is the client gone: nothing more to send.
        let _ = warren_definitions::write_export(&broker, &mut out);
    })))
}

pub async fn export_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
) -> ApiResult {
    who.require_admin()?;
    api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let broker = api.broker.clone();
    Ok(json_body(streamed(move |mut out| {
        // A vhost deleted since the check above leaves the body empty, as a connection cut
        // would (the status is sent already).
        let _ = warren_definitions::write_export_vhost(&broker, &vhost, &mut out);
    })))
}

/// A JSON body with the header `Json` gives.
fn json_body(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// POST: the document is checked whole before anything changes; a bad one is 400 with the
/// reason. 204 on success, as RabbitMQ (200 listing what was left out, see `answer`).
pub async fn import(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    let document = body_json(&body)?;
    let summary = warren_definitions::import(&api.broker, &document)
        .await
        .map_err(ApiError::bad_request)?;
    Ok(answer(&summary))
}

pub async fn import_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let document = body_json(&body)?;
    let summary = warren_definitions::import_vhost(&api.broker, &vhost, &document)
        .await
        .map_err(ApiError::bad_request)?;
    Ok(answer(&summary))
}

/// 204 as RabbitMQ when everything was imported; when entries were left out (a stream
/// queue, which RabbitMQ would have imported, and what depends on it), 200 with
/// `{"skipped": [why, …]}` so that the console and scripts can show them. Each is logged too.
fn answer(summary: &warren_definitions::ImportSummary) -> Response {
    for skipped in &summary.skipped {
        tracing::warn!(%skipped, "definitions entry not imported");
    }
    if summary.skipped.is_empty() {
        return no_content();
    }
    Json(json!({"skipped": summary.skipped})).into_response()
}

//! /api/definitions[/VHOST]: export and import in RabbitMQ's definitions JSON, through
//! warren-definitions (administrators only, as RabbitMQ).

use super::{body_json, no_content};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::Api;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use serde_json::json;
use std::sync::Arc;

pub async fn export(State(api): State<Arc<Api>>, Extension(who): Extension<Identity>) -> ApiResult {
    who.require_admin()?;
    Ok(Json(warren_definitions::export(&api.broker)).into_response())
}

pub async fn export_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
) -> ApiResult {
    who.require_admin()?;
    let document =
        warren_definitions::export_vhost(&api.broker, &vhost).ok_or_else(ApiError::not_found)?;
    Ok(Json(document).into_response())
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

//! Per-user limits as RabbitMQ's management plugin serves them: GET /api/user-limits (every
//! user with a limit set; administrators), GET /api/user-limits/USER (administrators,
//! monitoring users, or the user itself), PUT /api/user-limits/USER/max-connections|
//! max-channels `{"value": N}` and DELETE of the same (administrators). A negative value is
//! no limit, as RabbitMQ's.

use super::{body_json, no_content};
use crate::auth::{Identity, NOT_OBJECT_USER};
use crate::error::{ApiError, ApiResult};
use crate::list::{respond_sorted, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::Extension;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::access::{User, UserLimits};
use warren_broker::DefinitionOp;

fn limits_json(user: &User) -> Option<Value> {
    (!user.limits.is_empty()).then(|| json!({"user": user.name, "value": user.limits.to_json()}))
}

pub async fn all(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_admin()?;
    let items = api
        .broker
        .access
        .users()
        .iter()
        .filter_map(|u| limits_json(u))
        .collect();
    respond_sorted(items, &query, &["user"])
}

pub async fn of(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(user): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    if !who.is_monitor() && who.name != user {
        return Err(ApiError::not_authorised(NOT_OBJECT_USER));
    }
    let user = api
        .broker
        .access
        .user(&user)
        .ok_or_else(ApiError::not_found)?;
    respond_sorted(limits_json(&user).into_iter().collect(), &query, &["user"])
}

/// The user's limits now, for a change of one of them; 404 for no such user.
fn current(api: &Api, user: &str) -> ApiResult<UserLimits> {
    Ok(api
        .broker
        .access
        .user(user)
        .ok_or_else(ApiError::not_found)?
        .limits)
}

pub async fn put(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((user, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    let mut limits = current(&api, &user)?;
    let body = body_json(&body)?;
    let value = body
        .get("value")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::bad_request("value must be an integer"))?;
    limits.set(&name, value).map_err(ApiError::bad_request)?;
    api.change(DefinitionOp::user_set_limits(&user, limits))
        .await?;
    Ok(no_content())
}

pub async fn delete(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((user, name)): Path<(String, String)>,
) -> ApiResult {
    who.require_admin()?;
    let mut limits = current(&api, &user)?;
    limits.clear(&name).map_err(ApiError::bad_request)?;
    api.change(DefinitionOp::user_set_limits(&user, limits))
        .await?;
    Ok(no_content())
}

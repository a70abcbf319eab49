//! Users, permissions and topic permissions (administrators only, as RabbitMQ):
//! /api/users[/NAME] (GET, PUT with `password` or `password_hash` + `hashing_algorithm`,
//! and `tags`; DELETE), /api/users/NAME/permissions, /api/permissions[/VHOST/USER],
//! /api/vhosts/VHOST/permissions and the same for topic permissions.

use super::{body_bool, body_json, created_or_updated, no_content};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::list::{respond, respond_one, respond_sorted, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};
use axum::Extension;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_broker::access::{Hashing, Permission, TopicPermission, User, SHA256};
use warren_broker::{DefinitionOp, Outcome, VHostMetadata};

fn user_json(u: &User) -> Value {
    json!({
        "name": u.name,
        "password_hash": u.password_hash,
        "hashing_algorithm": u.hashing_algorithm,
        "tags": u.tags,
        "limits": u.limits.to_json(),
    })
}

pub async fn list(
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
        .map(|u| user_json(u))
        .collect();
    respond_sorted(items, &query, &["name"])
}

pub async fn one(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_admin()?;
    let user = api
        .broker
        .access
        .user(&name)
        .ok_or_else(ApiError::not_found)?;
    Ok(respond_one(user_json(&user), &query))
}

/// `tags` as RabbitMQ takes it: a comma-separated string (3.10) or a list (3.13).
fn tags_of(body: &Value) -> ApiResult<Vec<String>> {
    Ok(match body.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s
            .split(',')
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::bad_request("tags must be strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(ApiError::bad_request(format!("invalid tags: {other}"))),
    })
}

/// PUT: creates or replaces a user (201 / 204). `password` is hashed with SHA-256;
/// `password_hash` (with `hashing_algorithm`, SHA-256 by default) is taken as is; neither
/// means no password. RabbitMQ requires `tags` to be present.
pub async fn put(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    let body = body_json(&body)?;
    if body.get("tags").is_none() {
        return Err(ApiError::bad_request("tags not found"));
    }
    let tags = tags_of(&body)?;
    // The password is hashed (salted) here, once: the change carries the hash.
    let (password_hash, hashing_algorithm) = match (body.get("password"), body.get("password_hash"))
    {
        (Some(Value::String(p)), _) => (Hashing::Sha256.hash(p), SHA256.to_owned()),
        (_, Some(Value::String(hash))) => {
            let algorithm = body
                .get("hashing_algorithm")
                .and_then(Value::as_str)
                .unwrap_or(SHA256);
            (hash.clone(), algorithm.to_owned())
        }
        (Some(_), _) | (_, Some(_)) => {
            return Err(ApiError::bad_request("password must be a string"))
        }
        // An existing user keeps its password when only tags change, as RabbitMQ.
        (None, None) => match api.broker.access.user(&name) {
            Some(u) => (u.password_hash.clone(), u.hashing_algorithm.clone()),
            None => (String::new(), SHA256.to_owned()),
        },
    };
    let outcome = api
        .change(DefinitionOp::UserPut {
            name,
            password_hash,
            hashing_algorithm,
            tags,
        })
        .await?;
    Ok(created_or_updated(!outcome.created()))
}

/// The answer to a DELETE made as a definitions change: 204, or 404 when nothing was there.
fn removed(outcome: Outcome) -> ApiResult {
    match outcome.existed() {
        true => Ok(no_content()),
        false => Err(ApiError::not_found()),
    }
}

pub async fn delete(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
) -> ApiResult {
    who.require_admin()?;
    removed(api.change(DefinitionOp::UserDelete { name }).await?)
}

fn permission_json(vhost: &str, user: &str, p: &Permission) -> Value {
    json!({"user": user, "vhost": vhost, "configure": p.configure, "write": p.write, "read": p.read})
}

fn topic_permission_json(vhost: &str, user: &str, p: &TopicPermission) -> Value {
    json!({"user": user, "vhost": vhost, "exchange": p.exchange, "write": p.write, "read": p.read})
}

/// Which permission table a listing reads: the regex permissions or the topic permissions
/// (their endpoints are twins in RabbitMQ's API).
#[derive(Clone, Copy)]
enum Table {
    Permissions,
    TopicPermissions,
}

/// The JSON of every entry of `table` whose (vhost, user) `keep` accepts.
fn entries_where(api: &Api, table: Table, keep: impl Fn(&str, &str) -> bool) -> Vec<Value> {
    let access = &api.broker.access;
    match table {
        Table::Permissions => access
            .permissions()
            .iter()
            .filter(|(v, u, _)| keep(v, u))
            .map(|(v, u, p)| permission_json(v, u, p))
            .collect(),
        Table::TopicPermissions => access
            .topic_permissions()
            .iter()
            .filter(|(v, u, _)| keep(v, u))
            .map(|(v, u, p)| topic_permission_json(v, u, p))
            .collect(),
    }
}

/// GET /api/{table}: every entry.
fn list_all(api: &Api, who: &Identity, table: Table, query: &Query) -> ApiResult {
    who.require_admin()?;
    respond_sorted(
        entries_where(api, table, |_, _| true),
        query,
        &["vhost", "user"],
    )
}

/// GET /api/users/{user}/{table}: one user's entries (404 for an unknown user).
fn list_for_user(api: &Api, who: &Identity, table: Table, user: &str, query: &Query) -> ApiResult {
    who.require_admin()?;
    api.broker
        .access
        .user(user)
        .ok_or_else(ApiError::not_found)?;
    respond(entries_where(api, table, |_, u| u == user), query)
}

/// GET /api/vhosts/{vhost}/{table}: one vhost's entries (404 for an unknown vhost).
fn list_for_vhost(
    api: &Api,
    who: &Identity,
    table: Table,
    vhost: &str,
    query: &Query,
) -> ApiResult {
    who.require_admin()?;
    api.broker.vhost(vhost).ok_or_else(ApiError::not_found)?;
    respond_sorted(
        entries_where(api, table, |v, _| v == vhost),
        query,
        &["user"],
    )
}

pub async fn permissions(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    list_all(&api, &who, Table::Permissions, &query)
}

pub async fn user_permissions(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(user): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    list_for_user(&api, &who, Table::Permissions, &user, &query)
}

pub async fn vhost_permissions(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    list_for_vhost(&api, &who, Table::Permissions, &vhost, &query)
}

/// The vhost and user of a permission must both exist (RabbitMQ's 400
/// "vhost_or_user_not_found").
fn check_pair(api: &Api, vhost: &str, user: &str) -> ApiResult<()> {
    if api.broker.vhost(vhost).is_none() || api.broker.access.user(user).is_none() {
        return Err(ApiError::bad_request("vhost_or_user_not_found"));
    }
    Ok(())
}

pub async fn permission(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, user)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_admin()?;
    let p = api
        .broker
        .access
        .permission(&vhost, &user)
        .ok_or_else(ApiError::not_found)?;
    Ok(respond_one(permission_json(&vhost, &user, &p), &query))
}

fn regex_field(body: &Value, key: &str) -> ApiResult<String> {
    body.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::bad_request(format!("{key} not found")))
}

pub async fn set_permission(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, user)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    check_pair(&api, &vhost, &user)?;
    let body = body_json(&body)?;
    let p = Permission {
        configure: regex_field(&body, "configure")?,
        write: regex_field(&body, "write")?,
        read: regex_field(&body, "read")?,
    };
    let outcome = api
        .change(DefinitionOp::permission_set(&vhost, &user, p))
        .await?;
    Ok(created_or_updated(!outcome.created()))
}

pub async fn clear_permission(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult {
    who.require_admin()?;
    removed(
        api.change(DefinitionOp::PermissionClear { vhost, user })
            .await?,
    )
}

pub async fn topic_permissions(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    list_all(&api, &who, Table::TopicPermissions, &query)
}

pub async fn user_topic_permissions(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(user): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    list_for_user(&api, &who, Table::TopicPermissions, &user, &query)
}

pub async fn vhost_topic_permissions(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    list_for_vhost(&api, &who, Table::TopicPermissions, &vhost, &query)
}

pub async fn topic_permission(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, user)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_admin()?;
    if api.broker.vhost(&vhost).is_none() || api.broker.access.user(&user).is_none() {
        return Err(ApiError::not_found());
    }
    let items = entries_where(&api, Table::TopicPermissions, |v, u| {
        v == vhost && u == user
    });
    if items.is_empty() {
        return Err(ApiError::not_found());
    }
    respond_sorted(items, &query, &["exchange"])
}

pub async fn set_topic_permission(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, user)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    check_pair(&api, &vhost, &user)?;
    let body = body_json(&body)?;
    let p = TopicPermission {
        exchange: regex_field(&body, "exchange")?,
        write: regex_field(&body, "write")?,
        read: regex_field(&body, "read")?,
    };
    let outcome = api
        .change(DefinitionOp::topic_permission_set(&vhost, &user, p))
        .await?;
    Ok(created_or_updated(!outcome.created()))
}

pub async fn clear_topic_permission(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult {
    who.require_admin()?;
    let clear = DefinitionOp::TopicPermissionClear {
        vhost,
        user,
        exchange: None,
    };
    removed(api.change(clear).await?)
}

/// DELETE /api/topic-permissions/VHOST/USER/EXCHANGE: Warren's own path (RabbitMQ's API
/// clears a user's topic permissions on every exchange at once; `rabbitmqctl
/// clear_topic_permissions USER EXCHANGE` clears one, and `warren ctl` does it here).
pub async fn clear_topic_permission_on(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, user, exchange)): Path<(String, String, String)>,
) -> ApiResult {
    who.require_admin()?;
    let clear = DefinitionOp::TopicPermissionClear {
        vhost,
        user,
        exchange: Some(exchange),
    };
    removed(api.change(clear).await?)
}

/// PUT /api/vhosts/NAME: creates the vhost (201) or leaves it (204). As RabbitMQ, the user
/// who creates it gets every permission on it, and a `tracing` field turns its firehose on
/// or off, new vhost or not.
/// A vhost PUT's `description` and `tags` (a list, or RabbitMQ's comma-separated text). As
/// RabbitMQ's, every PUT sets both: what the body leaves out becomes empty.
fn vhost_metadata(body: &Value) -> Result<VHostMetadata, ApiError> {
    let description = match body.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => return Err(ApiError::bad_request("description must be a string")),
    };
    let tags = match body.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => text
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| t.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad_request("tags must be strings"))?,
        Some(_) => {
            return Err(ApiError::bad_request(
                "tags must be a list or a comma-separated string",
            ))
        }
    };
    Ok(VHostMetadata { description, tags })
}

pub async fn put_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    let body = body_json(&body)?;
    let tracing = match body.get("tracing") {
        None | Some(Value::Null) => None,
        Some(_) => Some(body_bool(&body, "tracing", false)?),
    };
    let metadata = vhost_metadata(&body)?;
    let outcome = api
        .change(DefinitionOp::VhostAdd {
            name: vhost.clone(),
            grant_full_to: Some(who.name.clone()),
        })
        .await?;
    let unchanged = api
        .broker
        .vhost(&vhost)
        .is_some_and(|v| v.metadata() == metadata);
    if !unchanged {
        api.change(DefinitionOp::vhost_set_metadata(&vhost, metadata))
            .await?;
    }
    if let Some(tracing) = tracing {
        api.change(DefinitionOp::VhostSetTracing {
            name: vhost,
            tracing,
        })
        .await?;
    }
    Ok(created_or_updated(!outcome.created()))
}

/// DELETE /api/vhosts/NAME: its connections closed, its objects and messages gone.
pub async fn delete_vhost(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
) -> ApiResult {
    who.require_admin()?;
    // Its connections are told through the registry too: the API lists them there, and
    // RabbitMQ closes every one ("vhost 'v' is deleted").
    if api.broker.vhost(&vhost).is_some() {
        for c in api.broker.registry.connections() {
            if c.vhost == vhost {
                c.request_close(format!("vhost '{vhost}' is deleted"));
            }
        }
    }
    removed(
        api.change(DefinitionOp::VhostDelete { name: vhost })
            .await?,
    )
}

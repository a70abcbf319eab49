//! Policies and operator policies (/api/policies, /api/operator-policies), runtime
//! parameters (/api/parameters, /api/global-parameters) and vhost limits
//! (/api/vhost-limits), as RabbitMQ 3.10's management plugin serves and guards them: every
//! management user lists the policies and operator policies of the vhosts it uses; one
//! policy, and runtime parameters, are for policymakers with permissions in the vhost (and
//! administrators); one operator policy and vhost limits' changes for administrators.

use super::{body_json, created_or_updated, no_content};
use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::list::{respond_one, respond_sorted, Query};
use crate::Api;
use axum::extract::{Path, Query as Q, State};

use axum::Extension;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use warren_broker::parameters;
use warren_broker::policy::PolicyKind;
use warren_broker::{DefinitionOp, Outcome, Policy, PolicyList, VHost, VHostLimits};

fn listed(vhost: &VHost, kind: PolicyKind) -> Vec<Policy> {
    match kind {
        PolicyKind::Policy => vhost.policies(),
        PolicyKind::Operator => vhost.operator_policies(),
    }
}

/// Who may read, set or clear one policy of `vhost` (the lists are everyone's), then the
/// vhost (404 when missing).
fn managed_vhost(
    api: &Api,
    who: &Identity,
    kind: PolicyKind,
    vhost: &str,
) -> ApiResult<Arc<VHost>> {
    match kind {
        PolicyKind::Policy => api.require_policymaker_in(who, vhost)?,
        PolicyKind::Operator => who.require_admin()?,
    }
    api.broker.vhost(vhost).ok_or_else(ApiError::not_found)
}

fn list_of(
    api: &Api,
    who: &Identity,
    kind: PolicyKind,
    vhost: Option<&str>,
    query: &Query,
) -> ApiResult {
    let vhosts = match vhost {
        Some(name) => vec![api.vhost_for(who, name)?],
        None => api.used_vhosts(who),
    };
    let items = vhosts
        .iter()
        .flat_map(|v| listed(v, kind))
        .map(|p| p.to_json())
        .collect();
    respond_sorted(items, query, &["vhost", "name"])
}

fn one_of(
    api: &Api,
    who: &Identity,
    kind: PolicyKind,
    vhost: &str,
    name: &str,
) -> ApiResult<Policy> {
    let vhost = managed_vhost(api, who, kind, vhost)?;
    listed(&vhost, kind)
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(ApiError::not_found)
}

/// Validated here first, for the 400 and its text before anything is proposed; applying
/// the change validates the same body again.
async fn put_of(
    api: &Api,
    who: &Identity,
    kind: PolicyKind,
    vhost: &str,
    name: &str,
    body: &Bytes,
) -> ApiResult {
    let vhost = managed_vhost(api, who, kind, vhost)?;
    let body = body_json(body)?;
    Policy::from_json(kind, &vhost.name, name, &body).map_err(ApiError::bad_request)?;
    let outcome = api
        .change(DefinitionOp::PolicySet {
            list: PolicyList::of(kind),
            vhost: vhost.name.clone(),
            name: name.to_owned(),
            body_json: body.to_string(),
        })
        .await?;
    Ok(created_or_updated(!outcome.created()))
}

async fn delete_of(
    api: &Api,
    who: &Identity,
    kind: PolicyKind,
    vhost: &str,
    name: &str,
) -> ApiResult {
    let vhost = managed_vhost(api, who, kind, vhost)?;
    let clear = DefinitionOp::PolicyClear {
        list: PolicyList::of(kind),
        vhost: vhost.name.clone(),
        name: name.to_owned(),
    };
    removed(api.change(clear).await?)
}

/// 204 for a removal that found something, else 404.
fn removed(outcome: Outcome) -> ApiResult {
    match outcome.existed() {
        true => Ok(no_content()),
        false => Err(ApiError::not_found()),
    }
}

macro_rules! policy_routes {
    ($kind:expr, $all:ident, $in_vhost:ident, $one:ident, $put:ident, $delete:ident) => {
        pub async fn $all(
            State(api): State<Arc<Api>>,
            Extension(who): Extension<Identity>,
            Q(query): Q<Query>,
        ) -> ApiResult {
            list_of(&api, &who, $kind, None, &query)
        }

        pub async fn $in_vhost(
            State(api): State<Arc<Api>>,
            Extension(who): Extension<Identity>,
            Path(vhost): Path<String>,
            Q(query): Q<Query>,
        ) -> ApiResult {
            list_of(&api, &who, $kind, Some(&vhost), &query)
        }

        pub async fn $one(
            State(api): State<Arc<Api>>,
            Extension(who): Extension<Identity>,
            Path((vhost, name)): Path<(String, String)>,
            Q(query): Q<Query>,
        ) -> ApiResult {
            let p = one_of(&api, &who, $kind, &vhost, &name)?;
            Ok(respond_one(p.to_json(), &query))
        }

        pub async fn $put(
            State(api): State<Arc<Api>>,
            Extension(who): Extension<Identity>,
            Path((vhost, name)): Path<(String, String)>,
            body: Bytes,
        ) -> ApiResult {
            put_of(&api, &who, $kind, &vhost, &name, &body).await
        }

        pub async fn $delete(
            State(api): State<Arc<Api>>,
            Extension(who): Extension<Identity>,
            Path((vhost, name)): Path<(String, String)>,
        ) -> ApiResult {
            delete_of(&api, &who, $kind, &vhost, &name).await
        }
    };
}

policy_routes!(
    PolicyKind::Policy,
    policies,
    policies_in,
    policy,
    put_policy,
    delete_policy
);
policy_routes!(
    PolicyKind::Operator,
    operator_policies,
    operator_policies_in,
    operator_policy,
    put_operator_policy,
    delete_operator_policy
);

// ---- runtime parameters ------------------------------------------------------------------

/// Components whose parameters live elsewhere and are served by their own endpoints.
fn served_elsewhere(component: &str) -> bool {
    matches!(component, "policy" | "operator_policy" | "vhost-limits")
}

fn parameter_json(vhost: &str, component: &str, name: &str, value_json: &str) -> Value {
    json!({
        "vhost": vhost,
        "component": component,
        "name": name,
        "value": serde_json::from_str::<Value>(value_json).unwrap_or(Value::Null),
    })
}

fn parameters_where(api: &Api, who: &Identity, keep: impl Fn(&str, &str) -> bool) -> Vec<Value> {
    api.broker
        .parameters
        .list()
        .iter()
        .filter(|p| api.uses_vhost(who, &p.vhost) && keep(&p.component, &p.vhost))
        .map(|p| parameter_json(&p.vhost, &p.component, &p.name, &p.value_json))
        .collect()
}

pub async fn parameters(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_policymaker()?;
    respond_sorted(
        parameters_where(&api, &who, |_, _| true),
        &query,
        &["vhost", "name"],
    )
}

pub async fn parameters_of(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(component): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_policymaker()?;
    let items = parameters_where(&api, &who, |c, _| c == component);
    respond_sorted(items, &query, &["vhost", "name"])
}

pub async fn parameters_in(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((component, vhost)): Path<(String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    api.require_policymaker_in(&who, &vhost)?;
    api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let items = parameters_where(&api, &who, |c, v| c == component && v == vhost);
    respond_sorted(items, &query, &["name"])
}

pub async fn parameter(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((component, vhost, name)): Path<(String, String, String)>,
    Q(query): Q<Query>,
) -> ApiResult {
    api.require_policymaker_in(&who, &vhost)?;
    api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let p = api
        .broker
        .parameters
        .list()
        .into_iter()
        .find(|p| p.component == component && p.vhost == vhost && p.name == name)
        .ok_or_else(ApiError::not_found)?;
    Ok(respond_one(
        parameter_json(&p.vhost, &p.component, &p.name, &p.value_json),
        &query,
    ))
}

/// PUT: `{"value": …}` (RabbitMQ also accepts the vhost, component and name repeated).
pub async fn put_parameter(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((component, vhost, name)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult {
    api.require_policymaker_in(&who, &vhost)?;
    api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    if served_elsewhere(&component) {
        return Err(ApiError::bad_request(format!(
            "component {component} is set through its own endpoint"
        )));
    }
    parameters::check_component(&component).map_err(ApiError::bad_request)?;
    let body = body_json(&body)?;
    let value = body
        .get("value")
        .ok_or_else(|| ApiError::bad_request("value not found"))?;
    let outcome = api
        .change(DefinitionOp::ParameterSet {
            vhost,
            component,
            name,
            value_json: value.to_string(),
        })
        .await?;
    Ok(created_or_updated(!outcome.created()))
}

pub async fn delete_parameter(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((component, vhost, name)): Path<(String, String, String)>,
) -> ApiResult {
    api.require_policymaker_in(&who, &vhost)?;
    api.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let clear = DefinitionOp::ParameterClear {
        vhost,
        component,
        name,
    };
    removed(api.change(clear).await?)
}

fn global_json(name: &str, value_json: &str) -> Value {
    json!({"name": name, "value": serde_json::from_str::<Value>(value_json).unwrap_or(Value::Null)})
}

pub async fn global_parameters(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_policymaker()?;
    let items = api
        .broker
        .parameters
        .list_global()
        .iter()
        .map(|(n, v)| global_json(n, v))
        .collect();
    respond_sorted(items, &query, &["name"])
}

pub async fn global_parameter(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    who.require_policymaker()?;
    let (n, v) = api
        .broker
        .parameters
        .list_global()
        .into_iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(ApiError::not_found)?;
    Ok(respond_one(global_json(&n, &v), &query))
}

pub async fn put_global_parameter(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    who.require_policymaker()?;
    let body = body_json(&body)?;
    let value = body
        .get("value")
        .ok_or_else(|| ApiError::bad_request("value not found"))?;
    let outcome = api
        .change(DefinitionOp::GlobalParameterSet {
            name,
            value_json: value.to_string(),
        })
        .await?;
    Ok(created_or_updated(!outcome.created()))
}

pub async fn delete_global_parameter(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(name): Path<String>,
) -> ApiResult {
    who.require_policymaker()?;
    removed(
        api.change(DefinitionOp::GlobalParameterClear { name })
            .await?,
    )
}

// ---- vhost limits ------------------------------------------------------------------------

fn limits_json(vhost: &VHost) -> Option<Value> {
    let limits = vhost.limits();
    let mut value = Map::new();
    if let Some(n) = limits.max_connections {
        value.insert("max-connections".into(), n.into());
    }
    if let Some(n) = limits.max_queues {
        value.insert("max-queues".into(), n.into());
    }
    (!value.is_empty()).then(|| json!({"vhost": vhost.name, "value": value}))
}

pub async fn vhost_limits(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Q(query): Q<Query>,
) -> ApiResult {
    let items = api
        .seen_vhosts(&who)
        .iter()
        .filter_map(|v| limits_json(v))
        .collect();
    respond_sorted(items, &query, &["vhost"])
}

pub async fn vhost_limits_of(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path(vhost): Path<String>,
    Q(query): Q<Query>,
) -> ApiResult {
    let vhost = api.seen_vhost_for(&who, &vhost)?;
    respond_sorted(
        limits_json(&vhost).into_iter().collect(),
        &query,
        &["vhost"],
    )
}

/// PUT /api/vhost-limits/VHOST/max-connections|max-queues `{"value": N}`; a negative
/// value removes the limit, as RabbitMQ.
pub async fn put_vhost_limit(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    who.require_admin()?;
    let vhost = api.vhost_for(&who, &vhost)?;
    let body = body_json(&body)?;
    let value = body
        .get("value")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::bad_request("value must be an integer"))?;
    let limit = u32::try_from(value).ok();
    let mut limits = vhost.limits();
    match name.as_str() {
        "max-connections" => limits.max_connections = limit,
        "max-queues" => limits.max_queues = limit,
        _ => return Err(ApiError::bad_request(format!("unrecognised limit {name}"))),
    }
    api.change(DefinitionOp::vhost_set_limits(&vhost.name, limits))
        .await?;
    Ok(no_content())
}

pub async fn delete_vhost_limit(
    State(api): State<Arc<Api>>,
    Extension(who): Extension<Identity>,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult {
    who.require_admin()?;
    let vhost = api.vhost_for(&who, &vhost)?;
    let mut limits: VHostLimits = vhost.limits();
    match name.as_str() {
        "max-connections" => limits.max_connections = None,
        "max-queues" => limits.max_queues = None,
        _ => return Err(ApiError::bad_request(format!("unrecognised limit {name}"))),
    }
    api.change(DefinitionOp::vhost_set_limits(&vhost.name, limits))
        .await?;
    Ok(no_content())
}

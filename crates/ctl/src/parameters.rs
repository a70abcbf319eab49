//! Limits and runtime parameters: set_vhost_limits, clear_vhost_limits, list_vhost_limits,
//! set_parameter, clear_parameter, list_parameters, set_global_parameter,
//! clear_global_parameter, list_global_parameters — rabbitmqctl's, through the API's
//! /api/vhost-limits, /api/parameters and /api/global-parameters.
//!
//! Exit codes are rabbitmqctl 3.10.8's, checked side by side: a definition that is not JSON,
//! a value the broker refuses, and clearing in a vhost that does not exist are 69; setting
//! limits on a vhost that does not exist is 65.

use crate::api::segment;
use crate::exit::{CtlError, ExitCode};
use crate::{output, require_vhost, Context};
use serde_json::{json, Value};

/// The limits a vhost can have (RabbitMQ's).
const VHOST_LIMITS: [&str; 2] = ["max-connections", "max-queues"];

/// A JSON argument; rabbitmqctl exits 69 when it does not decode.
fn json_argument(text: &str) -> Result<Value, CtlError> {
    serde_json::from_str(text)
        .map_err(|e| CtlError::new(ExitCode::Unavailable, format!("JSON decoding error: {e}")))
}

/// A refusal of the broker's (HTTP 400): 69, as rabbitmqctl's validation failures.
fn refused_is_unavailable(result: Result<(), crate::api::ApiError>) -> Result<(), CtlError> {
    match result {
        Err(e) if e.status() == Some(400) => Err(CtlError::new(
            ExitCode::Unavailable,
            CtlError::from(e).message,
        )),
        other => Ok(other?),
    }
}

/// `DEFINITION` is a JSON object of limits (`'{"max-connections": 10}'`); each is set in
/// turn, the others kept; a negative value is no limit.
pub fn set_vhost_limits(ctx: &Context, definition: &str) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Setting vhost limits to \"{definition}\" for vhost \"{vhost}\" ..."
    ));
    let Value::Object(limits) = json_argument(definition)? else {
        return Err(CtlError::new(
            ExitCode::Unavailable,
            format!("vhost limits must be a JSON object, found {definition}"),
        ));
    };
    require_vhost(ctx, vhost)?;
    for (name, value) in limits {
        let path = format!("/api/vhost-limits/{}/{}", segment(vhost), segment(&name));
        refused_is_unavailable(ctx.api.put(&path, &json!({ "value": value })))?;
    }
    Ok(())
}

pub fn clear_vhost_limits(ctx: &Context) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style
        .banner(&format!("Clearing vhost \"{vhost}\" limits ..."));
    require_vhost(ctx, vhost).map_err(|_| CtlError::vhost_unavailable(vhost))?;
    for name in VHOST_LIMITS {
        let path = format!("/api/vhost-limits/{}/{name}", segment(vhost));
        match ctx.api.delete(&path, &[]) {
            // Not set: nothing to clear.
            Err(e) if e.status() == Some(404) => {}
            other => other?,
        }
    }
    Ok(())
}

/// A vhost's limits as a JSON object, or with `global` a table of every vhost that has any.
pub fn list_vhost_limits(ctx: &Context, global: bool) -> Result<(), CtlError> {
    if global {
        ctx.style.banner("Listing limits for all vhosts ...");
        return crate::user_limits::print_limits_table(ctx, "/api/vhost-limits", "vhost");
    }
    let vhost = &ctx.vhost;
    ctx.style
        .banner(&format!("Listing limits for vhost \"{vhost}\" ..."));
    require_vhost(ctx, vhost)?;
    let found = ctx
        .api
        .get(&format!("/api/vhost-limits/{}", segment(vhost)))?;
    let limits = found
        .as_array()
        .and_then(|items| items.first())
        .map_or(json!({}), |item| item["value"].clone());
    println!("{limits}");
    Ok(())
}

fn parameter_path(component: &str, vhost: &str, name: &str) -> String {
    format!(
        "/api/parameters/{}/{}/{}",
        segment(component),
        segment(vhost),
        segment(name)
    )
}

pub fn set_parameter(
    ctx: &Context,
    component: &str,
    name: &str,
    value: &str,
) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Setting runtime parameter \"{name}\" for component \"{component}\" to \"{value}\" in vhost \"{vhost}\" ..."
    ));
    let value = json_argument(value)?;
    let body = json!({ "component": component, "vhost": vhost, "name": name, "value": value });
    match ctx.api.put(&parameter_path(component, vhost, name), &body) {
        Err(e) if e.status() == Some(404) => {
            require_vhost(ctx, vhost)?;
            Err(CtlError::new(
                ExitCode::Unavailable,
                CtlError::from(e).message,
            ))
        }
        other => refused_is_unavailable(other),
    }
}

pub fn clear_parameter(ctx: &Context, component: &str, name: &str) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Clearing runtime parameter \"{name}\" for component \"{component}\" on vhost \"{vhost}\" ..."
    ));
    match ctx.api.delete(&parameter_path(component, vhost, name), &[]) {
        Err(e) if e.status() == Some(404) => Err(CtlError::new(
            ExitCode::Unavailable,
            "Parameter does not exist",
        )),
        other => Ok(other?),
    }
}

pub fn list_parameters(ctx: &Context) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Listing runtime parameters for vhost \"{vhost}\" ..."
    ));
    require_vhost(ctx, vhost)?;
    let rows: Vec<Vec<Value>> = ctx
        .api
        .get("/api/parameters")?
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["vhost"].as_str() == Some(vhost))
        .map(|p| {
            vec![
                p["component"].clone(),
                p["name"].clone(),
                Value::String(p["value"].to_string()),
            ]
        })
        .collect();
    print!(
        "{}",
        output::render(&ctx.style, &["component", "name", "value"], &rows)
    );
    Ok(())
}

fn global_parameter_path(name: &str) -> String {
    format!("/api/global-parameters/{}", segment(name))
}

pub fn set_global_parameter(ctx: &Context, name: &str, value: &str) -> Result<(), CtlError> {
    ctx.style.banner(&format!(
        "Setting global runtime parameter \"{name}\" to \"{value}\" ..."
    ));
    let value = json_argument(value)?;
    let body = json!({ "name": name, "value": value });
    refused_is_unavailable(ctx.api.put(&global_parameter_path(name), &body))
}

pub fn clear_global_parameter(ctx: &Context, name: &str) -> Result<(), CtlError> {
    ctx.style
        .banner(&format!("Clearing global runtime parameter \"{name}\" ..."));
    match ctx.api.delete(&global_parameter_path(name), &[]) {
        Err(e) if e.status() == Some(404) => Err(CtlError::new(
            ExitCode::Unavailable,
            "Parameter does not exist",
        )),
        other => Ok(other?),
    }
}

pub fn list_global_parameters(ctx: &Context) -> Result<(), CtlError> {
    ctx.style.banner("Listing global runtime parameters ...");
    let rows: Vec<Vec<Value>> = ctx
        .api
        .get("/api/global-parameters")?
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| vec![p["name"].clone(), Value::String(p["value"].to_string())])
        .collect();
    print!("{}", output::render(&ctx.style, &["name", "value"], &rows));
    Ok(())
}

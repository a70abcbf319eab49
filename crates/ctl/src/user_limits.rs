//! set_user_limits, clear_user_limits and list_user_limits, as rabbitmqctl's (banners,
//! output, exit codes), through /api/user-limits.

use crate::api::segment;
use crate::exit::{CtlError, ExitCode};
use crate::{delete_or, output, Context};
use serde_json::{json, Value};

fn limit_path(user: &str, limit: &str) -> String {
    format!("/api/user-limits/{}/{}", segment(user), segment(limit))
}

/// `DEFINITION` is a JSON object of limits (`'{"max-connections": 10}'`); each is set in
/// turn, the others kept (RabbitMQ merges too).
pub fn set_user_limits(ctx: &Context, user: &str, definition: &str) -> Result<(), CtlError> {
    ctx.style.banner(&format!(
        "Setting user limits to \"{definition}\" for user \"{user}\" ..."
    ));
    let limits: Value = serde_json::from_str(definition).map_err(|e| {
        CtlError::new(
            ExitCode::Unavailable,
            format!("Could not parse JSON document: {e}"),
        )
    })?;
    let Value::Object(limits) = limits else {
        return Err(CtlError::new(
            ExitCode::Unavailable,
            format!("user limits must be a JSON object, found {definition}"),
        ));
    };
    for (name, value) in limits {
        match ctx
            .api
            .put(&limit_path(user, &name), &json!({ "value": value }))
        {
            Err(e) if e.status() == Some(404) => return Err(CtlError::user_unavailable(user)),
            // A refused limit (an unknown name, a value not an integer): 69 from rabbitmqctl.
            Err(e) if e.status() == Some(400) => {
                return Err(CtlError::new(
                    ExitCode::Unavailable,
                    CtlError::from(e).message,
                ))
            }
            other => other?,
        }
    }
    Ok(())
}

/// `LIMIT` is max-connections, max-channels or all.
pub fn clear_user_limits(ctx: &Context, user: &str, limit: &str) -> Result<(), CtlError> {
    ctx.style.banner(&match limit {
        "all" => format!("Clearing all limits for user \"{user}\" ..."),
        _ => format!("Clearing \"{limit}\" limit for user \"{user}\" ..."),
    });
    delete_or(ctx, &limit_path(user, limit), &[], || {
        CtlError::user_unavailable(user)
    })
}

/// Every object with limits (`owner`: "user" or "vhost") from the API's list at `path`, a
/// row each: the owner and its limits as JSON.
pub(crate) fn print_limits_table(ctx: &Context, path: &str, owner: &str) -> Result<(), CtlError> {
    let rows: Vec<Vec<Value>> = ctx
        .api
        .get(path)?
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| {
            vec![
                item[owner].clone(),
                Value::String(item["value"].to_string()),
            ]
        })
        .collect();
    print!("{}", output::render(&ctx.style, &[owner, "limits"], &rows));
    Ok(())
}

/// One user's limits as a JSON object (rabbitmqctl's default user is guest), or with
/// `global` a table of every user that has any.
pub fn list_user_limits(ctx: &Context, user: Option<&str>, global: bool) -> Result<(), CtlError> {
    if global {
        ctx.style.banner("Listing limits for all users ...");
        return print_limits_table(ctx, "/api/user-limits", "user");
    }
    let user = user.unwrap_or("guest");
    ctx.style
        .banner(&format!("Listing limits for user \"{user}\" ..."));
    let found = match ctx.api.get(&format!("/api/users/{}", segment(user))) {
        Ok(found) => found,
        Err(e) if e.status() == Some(404) => return Err(CtlError::user_unavailable(user)),
        Err(e) => return Err(e.into()),
    };
    let limits = match &found["limits"] {
        Value::Object(limits) => Value::Object(limits.clone()),
        _ => json!({}),
    };
    println!("{limits}");
    Ok(())
}

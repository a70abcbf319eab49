//! Users, virtual hosts and permissions: add_user, delete_user, change_password,
//! set_user_tags, add_vhost, delete_vhost, set_permissions, clear_permissions,
//! set_topic_permissions, clear_topic_permissions, list_user_permissions,
//! authenticate_user.
//!
//! The API's PUTs create or replace; where rabbitmqctl refuses (adding a user that exists)
//! or keeps something (a user's tags when the password changes), the command reads first.

use crate::api::segment;
use crate::exit::{CtlError, ExitCode};
use crate::{delete_or, require_vhost, Context};
use serde_json::{json, Value};

fn user_path(user: &str) -> String {
    format!("/api/users/{}", segment(user))
}

fn vhost_path(vhost: &str) -> String {
    format!("/api/vhosts/{}", segment(vhost))
}

/// A user as the API shows it, or rabbitmqctl's "does not exist" (67).
fn existing_user(ctx: &Context, user: &str) -> Result<Value, CtlError> {
    match ctx.api.get(&user_path(user)) {
        Ok(found) => Ok(found),
        Err(e) if e.status() == Some(404) => Err(CtlError::no_such_user(user)),
        Err(e) => Err(e.into()),
    }
}

/// The password argument, or one line of stdin when it is left out (as rabbitmqctl does, so
/// that passwords need not appear in the shell's history or the process list).
fn password_or_stdin(password: Option<String>) -> Result<String, CtlError> {
    if let Some(password) = password {
        return Ok(password);
    }
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| CtlError::new(ExitCode::DataErr, format!("reading the password: {e}")))?;
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(CtlError::usage(
            "a password is required (argument or stdin)",
        ));
    }
    Ok(password.to_owned())
}

pub fn add_user(ctx: &Context, user: &str, password: Option<String>) -> Result<(), CtlError> {
    let password = password_or_stdin(password)?;
    ctx.style.banner(&format!("Adding user \"{user}\" ..."));
    if ctx.api.exists(&user_path(user))? {
        // rabbitmqctl's text and code (70) for an existing user.
        return Err(CtlError::new(
            ExitCode::Software,
            format!("User \"{user}\" already exists"),
        ));
    }
    ctx.api
        .put(&user_path(user), &json!({"password": password, "tags": ""}))?;
    ctx.style.banner(
        "Done. Don't forget to grant the user permissions to some virtual hosts! \
         See 'warren ctl set_permissions --help' to learn more.",
    );
    Ok(())
}

pub fn delete_user(ctx: &Context, user: &str) -> Result<(), CtlError> {
    ctx.style.banner(&format!("Deleting user \"{user}\" ..."));
    delete_or(ctx, &user_path(user), &[], || CtlError::no_such_user(user))
}

pub fn change_password(
    ctx: &Context,
    user: &str,
    password: Option<String>,
) -> Result<(), CtlError> {
    let password = password_or_stdin(password)?;
    ctx.style
        .banner(&format!("Changing password for user \"{user}\" ..."));
    let existing = existing_user(ctx, user)?;
    // A PUT replaces the user: send its tags back so that only the password changes.
    let tags = tags_of(&existing).join(",");
    ctx.api.put(
        &user_path(user),
        &json!({"password": password, "tags": tags}),
    )?;
    Ok(())
}

pub fn set_user_tags(ctx: &Context, user: &str, tags: &[String]) -> Result<(), CtlError> {
    ctx.style.banner(&format!(
        "Setting tags for user \"{user}\" to [{}] ...",
        tags.join(", ")
    ));
    let existing = existing_user(ctx, user)?;
    // The stored hash goes back unchanged, so the password stays what it was.
    let mut body = json!({"tags": tags.join(",")});
    for field in ["password_hash", "hashing_algorithm"] {
        if let Some(value) = existing.get(field) {
            body[field] = value.clone();
        }
    }
    ctx.api.put(&user_path(user), &body)?;
    Ok(())
}

fn tags_of(user: &Value) -> Vec<String> {
    match user.get("tags") {
        // RabbitMQ 3.9+ sends a list; older versions a comma-separated string.
        Some(Value::Array(tags)) => tags
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        Some(Value::String(tags)) => tags
            .split(',')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

pub fn add_vhost(
    ctx: &Context,
    vhost: &str,
    description: Option<String>,
    tags: Option<String>,
    default_queue_type: Option<String>,
) -> Result<(), CtlError> {
    ctx.style.banner(&format!("Adding vhost \"{vhost}\" ..."));
    let mut body = json!({});
    if let Some(description) = description {
        body["description"] = json!(description);
    }
    if let Some(tags) = tags {
        body["tags"] = json!(tags);
    }
    if let Some(queue_type) = default_queue_type {
        body["default_queue_type"] = json!(queue_type);
    }
    ctx.api.put(&vhost_path(vhost), &body)?;
    Ok(())
}

pub fn delete_vhost(ctx: &Context, vhost: &str) -> Result<(), CtlError> {
    ctx.style.banner(&format!("Deleting vhost \"{vhost}\" ..."));
    delete_or(ctx, &vhost_path(vhost), &[], || {
        CtlError::no_such_vhost(vhost)
    })
}

fn permission_path(vhost: &str, user: &str) -> String {
    format!("/api/permissions/{}/{}", segment(vhost), segment(user))
}

pub fn set_permissions(
    ctx: &Context,
    user: &str,
    [configure, write, read]: [&str; 3],
) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Setting permissions for user \"{user}\" in vhost \"{vhost}\" ..."
    ));
    let body = json!({"configure": configure, "write": write, "read": read});
    put_permission(ctx, &permission_path(vhost, user), &body, user)
}

/// PUTs a permission; a refusal names whichever of the user and the vhost is missing.
fn put_permission(ctx: &Context, path: &str, body: &Value, user: &str) -> Result<(), CtlError> {
    match ctx.api.put(path, body) {
        // RabbitMQ answers 400 "vhost_or_user_not_found"; say which. A 400 with both
        // present is a bad regex: the API's reason says so.
        Err(e) if matches!(e.status(), Some(400 | 404)) => {
            user_and_vhost_exist(ctx, user)?;
            Err(e.into())
        }
        other => Ok(other?),
    }
}

pub fn clear_permissions(ctx: &Context, user: &str) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Clearing permissions for user \"{user}\" in vhost \"{vhost}\" ..."
    ));
    match ctx.api.delete(&permission_path(vhost, user), &[]) {
        // With both present the user had no permissions there, which is what was asked
        // for (rabbitmqctl succeeds too).
        Err(e) if e.status() == Some(404) => user_and_vhost_exist(ctx, user),
        other => Ok(other?),
    }
}

fn topic_permission_path(vhost: &str, user: &str) -> String {
    format!(
        "/api/topic-permissions/{}/{}",
        segment(vhost),
        segment(user)
    )
}

pub fn set_topic_permissions(
    ctx: &Context,
    user: &str,
    exchange: &str,
    [write, read]: [&str; 2],
) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&format!(
        "Setting topic permissions on \"{exchange}\" for user \"{user}\" in vhost \"{vhost}\" ..."
    ));
    let body = json!({"exchange": exchange, "write": write, "read": read});
    put_permission(ctx, &topic_permission_path(vhost, user), &body, user)
}

pub fn clear_topic_permissions(
    ctx: &Context,
    user: &str,
    exchange: Option<&str>,
) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    ctx.style.banner(&match exchange {
        None => format!("Clearing topic permissions for user \"{user}\" in vhost \"{vhost}\" ..."),
        Some(x) => format!(
            "Clearing topic permissions on \"{x}\" for user \"{user}\" in vhost \"{vhost}\" ..."
        ),
    });
    let path = topic_permission_path(vhost, user);
    let path = match exchange {
        None => path,
        Some(x) => format!("{path}/{}", segment(x)),
    };
    match ctx.api.delete(&path, &[]) {
        // As clear_permissions: none there is what was asked for.
        Err(e) if e.status() == Some(404) => user_and_vhost_exist(ctx, user),
        other => Ok(other?),
    }
}

/// rabbitmqctl list_user_permissions: the user's permissions in every vhost.
pub fn list_user_permissions(ctx: &Context, user: &str) -> Result<(), CtlError> {
    ctx.style
        .banner(&format!("Listing permissions for user \"{user}\" ..."));
    let found = match ctx.api.get(&format!("{}/permissions", user_path(user))) {
        Ok(found) => found,
        // rabbitmqctl 3.10.8: 69 for a user that does not exist here.
        Err(e) if e.status() == Some(404) => return Err(CtlError::user_unavailable(user)),
        Err(e) => return Err(e.into()),
    };
    let rows: Vec<Vec<Value>> = found
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            ["vhost", "configure", "write", "read"]
                .iter()
                .map(|k| p[*k].clone())
                .collect()
        })
        .collect();
    print!(
        "{}",
        crate::output::render(&ctx.style, &["vhost", "configure", "write", "read"], &rows)
    );
    Ok(())
}

/// rabbitmqctl authenticate_user: whether the broker accepts these credentials (asked of
/// the API as that user; a user without management tags is refused the API, not the login).
pub fn authenticate_user(ctx: &Context, user: &str, password: &str) -> Result<(), CtlError> {
    ctx.style
        .banner(&format!("Authenticating user \"{user}\" ..."));
    match ctx.api.as_user(user, password).get("/api/whoami") {
        Ok(_) => {}
        Err(crate::api::ApiError::Status {
            status: 401,
            reason,
        }) if reason.contains("Not management user") => {}
        Err(crate::api::ApiError::Status { status: 401, .. }) => {
            return Err(CtlError::new(
                ExitCode::DataErr,
                format!("failed to authenticate user \"{user}\""),
            ))
        }
        Err(e) => return Err(e.into()),
    }
    if !ctx.style.quiet {
        println!("Success");
    }
    Ok(())
}

/// rabbitmqctl's "does not exist" error for whichever of the user and the vhost is missing.
fn user_and_vhost_exist(ctx: &Context, user: &str) -> Result<(), CtlError> {
    if !ctx.api.exists(&user_path(user))? {
        return Err(CtlError::no_such_user(user));
    }
    // rabbitmqctl's 69 here, not the 65 of a missing vhost elsewhere.
    require_vhost(ctx, &ctx.vhost).map_err(|_| CtlError::vhost_unavailable(&ctx.vhost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_read_from_list_and_from_comma_separated_string() {
        assert_eq!(
            tags_of(&json!({"tags": ["administrator", "monitoring"]})),
            ["administrator", "monitoring"]
        );
        assert_eq!(tags_of(&json!({"tags": "a,b"})), ["a", "b"]);
        assert!(tags_of(&json!({"tags": ""})).is_empty());
        assert!(tags_of(&json!({})).is_empty());
    }
}

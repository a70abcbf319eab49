//! `warren ctl`: rabbitmqctl's everyday commands (list_queues, add_user, set_policy,
//! export_definitions, status…) against a running broker's HTTP management API. The API has
//! RabbitMQ's paths and JSON, so the same command works against Warren and RabbitMQ.
//!
//! Results go to stdout (tables by default, `--json` for programs); errors go to stderr on
//! one line, with rabbitmqctl's exit codes (see [`exit`]).

mod access;
mod api;
mod cli;
mod cluster;
mod columns;
mod exit;
mod operations;
mod output;
mod parameters;
mod quorum_status;
mod status;
mod trace;
mod user_limits;

use api::Api;
use clap::Parser;
use cli::{Columns, CtlCli, CtlCommand};
use columns::{extract, Listing, Source};
use exit::CtlError;
use output::Style;
use std::time::Duration;

/// `warren ctl`'s command line as clap defines it, named `ctl` (for its man page and shell
/// completions: crates/cli-docs).
pub fn command() -> clap::Command {
    <CtlCli as clap::CommandFactory>::command().name("ctl")
}

/// Runs `warren ctl ARGS` and returns the process's exit code.
pub fn main_with_args(args: Vec<String>) -> i32 {
    let cli = match CtlCli::try_parse_from(std::iter::once("warren ctl".to_owned()).chain(args)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::ExitCode::Usage as i32
            } else {
                0
            };
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("Error: {e}");
            e.code as i32
        }
    }
}

/// What every command needs: the API and how to print.
pub(crate) struct Context {
    pub api: Api,
    pub style: Style,
    pub vhost: String,
}

fn run(cli: CtlCli) -> Result<(), CtlError> {
    let global = &cli.global;
    let ca_certificates = match &global.cacert {
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            CtlError::new(
                exit::ExitCode::DataErr,
                format!("--cacert {}: {e}", path.display()),
            )
        })?),
        None => None,
    };
    let ctx = Context {
        api: Api::new(
            &global.url,
            &global.username,
            &global.password,
            Duration::from_secs(global.timeout_s.max(1)),
            ca_certificates.as_deref(),
        )?,
        style: Style {
            format: global.format(),
            quiet: global.quiet,
            table_headers: !global.no_table_headers,
        },
        vhost: global.vhost.clone(),
    };
    match cli.command {
        CtlCommand::ListQueues(Columns { columns }) => list(&ctx, &columns::QUEUES, &columns),
        CtlCommand::ListExchanges(Columns { columns }) => list(&ctx, &columns::EXCHANGES, &columns),
        CtlCommand::ListBindings(Columns { columns }) => list(&ctx, &columns::BINDINGS, &columns),
        CtlCommand::ListConnections(Columns { columns }) => {
            list(&ctx, &columns::CONNECTIONS, &columns)
        }
        CtlCommand::ListChannels(Columns { columns }) => list(&ctx, &columns::CHANNELS, &columns),
        CtlCommand::ListConsumers(Columns { columns }) => list(&ctx, &columns::CONSUMERS, &columns),
        CtlCommand::ListUsers => list(&ctx, &columns::USERS, &[]),
        CtlCommand::ListVhosts(Columns { columns }) => list(&ctx, &columns::VHOSTS, &columns),
        CtlCommand::ListPermissions => list(&ctx, &columns::PERMISSIONS, &[]),
        CtlCommand::ListPolicies => list(&ctx, &columns::POLICIES, &[]),
        CtlCommand::AddUser { user, new_password } => access::add_user(&ctx, &user, new_password),
        CtlCommand::DeleteUser { user } => access::delete_user(&ctx, &user),
        CtlCommand::ChangePassword { user, new_password } => {
            access::change_password(&ctx, &user, new_password)
        }
        CtlCommand::SetUserTags { user, tags } => access::set_user_tags(&ctx, &user, &tags),
        CtlCommand::SetPermissions {
            user,
            configure,
            write,
            read,
        } => access::set_permissions(&ctx, &user, [&configure, &write, &read]),
        CtlCommand::ClearPermissions { user } => access::clear_permissions(&ctx, &user),
        CtlCommand::SetTopicPermissions {
            user,
            exchange,
            write,
            read,
        } => access::set_topic_permissions(&ctx, &user, &exchange, [&write, &read]),
        CtlCommand::ClearTopicPermissions { user, exchange } => {
            access::clear_topic_permissions(&ctx, &user, exchange.as_deref())
        }
        CtlCommand::SetUserLimits { user, definition } => {
            user_limits::set_user_limits(&ctx, &user, &definition)
        }
        CtlCommand::ClearUserLimits { user, limit } => {
            user_limits::clear_user_limits(&ctx, &user, &limit)
        }
        CtlCommand::ListUserLimits { user, global } => {
            user_limits::list_user_limits(&ctx, user.as_deref(), global)
        }
        CtlCommand::SetVhostLimits { definition } => {
            parameters::set_vhost_limits(&ctx, &definition)
        }
        CtlCommand::ClearVhostLimits => parameters::clear_vhost_limits(&ctx),
        CtlCommand::ListVhostLimits { global } => parameters::list_vhost_limits(&ctx, global),
        CtlCommand::ListUserPermissions { user } => access::list_user_permissions(&ctx, &user),
        CtlCommand::AuthenticateUser { user, password } => {
            access::authenticate_user(&ctx, &user, &password)
        }
        CtlCommand::SetParameter {
            component,
            name,
            value,
        } => parameters::set_parameter(&ctx, &component, &name, &value),
        CtlCommand::ClearParameter { component, name } => {
            parameters::clear_parameter(&ctx, &component, &name)
        }
        CtlCommand::ListParameters => parameters::list_parameters(&ctx),
        CtlCommand::SetGlobalParameter { name, value } => {
            parameters::set_global_parameter(&ctx, &name, &value)
        }
        CtlCommand::ClearGlobalParameter { name } => {
            parameters::clear_global_parameter(&ctx, &name)
        }
        CtlCommand::ListGlobalParameters => parameters::list_global_parameters(&ctx),
        CtlCommand::AddVhost {
            name,
            description,
            tags,
            default_queue_type,
        } => access::add_vhost(&ctx, &name, description, tags, default_queue_type),
        CtlCommand::DeleteVhost { name } => access::delete_vhost(&ctx, &name),
        CtlCommand::SetPolicy {
            name,
            pattern,
            definition,
            priority,
            apply_to,
        } => operations::set_policy(&ctx, &name, &pattern, &definition, priority, &apply_to),
        CtlCommand::ClearPolicy { name } => operations::clear_policy(&ctx, &name),
        CtlCommand::CloseConnection {
            connection,
            explanation,
        } => operations::close_connection(&ctx, &connection, &explanation),
        CtlCommand::CloseAllConnections {
            explanation,
            global,
            limit,
            per_connection_delay,
        } => operations::close_all_connections(
            &ctx,
            &explanation,
            global,
            limit,
            std::time::Duration::from_millis(per_connection_delay),
        ),
        CtlCommand::StopApp => operations::switch_app(&ctx, false),
        CtlCommand::StartApp => operations::switch_app(&ctx, true),
        CtlCommand::SetVmMemoryHighWatermark { args } => {
            operations::set_vm_memory_high_watermark(&ctx, &args)
        }
        CtlCommand::SetDiskFreeLimit { limit } => operations::set_disk_free_limit(&ctx, &limit),
        CtlCommand::PurgeQueue { queue } => operations::purge_queue(&ctx, &queue),
        CtlCommand::TraceOn => trace::trace(&ctx, true),
        CtlCommand::TraceOff => trace::trace(&ctx, false),
        CtlCommand::DeleteQueue {
            queue,
            if_empty,
            if_unused,
        } => operations::delete_queue(&ctx, &queue, if_empty, if_unused),
        CtlCommand::ExportDefinitions { path } => operations::export_definitions(&ctx, &path),
        CtlCommand::ImportDefinitions { path } => operations::import_definitions(&ctx, &path),
        CtlCommand::Status => status::status(&ctx),
        CtlCommand::ClusterStatus => cluster::cluster_status(&ctx),
        CtlCommand::AddClusterNode { name, address } => {
            cluster::add_cluster_node(&ctx, &name, &address)
        }
        CtlCommand::ForgetClusterNode { name } => cluster::forget_cluster_node(&ctx, &name),
        CtlCommand::GrowQuorumQueues { name } => cluster::grow_quorum_queues(&ctx, &name),
        CtlCommand::QuorumStatus { args } => quorum_status::quorum_status(&ctx, &args),
    }
}

/// A list command: fetch the API's list, keep the selected columns, print.
fn list(ctx: &Context, listing: &Listing, args: &[String]) -> Result<(), CtlError> {
    let selected = listing.select(args)?;
    ctx.style.banner(&listing.banner(&ctx.vhost));
    let items = match ctx.api.get(&listing.path(&ctx.vhost)) {
        Ok(items) => items,
        Err(e) if listing.per_vhost && e.status() == Some(404) => {
            match require_vhost(ctx, &ctx.vhost) {
                Err(_) if listing.missing_vhost_lists_nothing => {
                    serde_json::Value::Array(Vec::new())
                }
                Err(missing) => return Err(missing),
                Ok(()) => return Err(e.into()),
            }
        }
        Err(e) => return Err(e.into()),
    };
    let items = items.as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<serde_json::Value>> = items
        .iter()
        .map(|item| {
            selected
                .iter()
                .map(|(_, source)| match (source, ctx.style.format) {
                    (Source::Table(_), f) if f != output::Format::Json => {
                        serde_json::Value::String(output::erlang_terms(&extract(item, *source)))
                    }
                    _ => extract(item, *source),
                })
                .collect()
        })
        .collect();
    let headers: Vec<&str> = selected.iter().map(|(name, _)| *name).collect();
    print!("{}", output::render(&ctx.style, &headers, &rows));
    Ok(())
}

/// rabbitmqctl's "Virtual host 'v' does not exist" (65) when `vhost` does not: asked after
/// a 404 in a vhost, to tell a missing vhost from a missing object.
pub(crate) fn require_vhost(ctx: &Context, vhost: &str) -> Result<(), CtlError> {
    if ctx
        .api
        .exists(&format!("/api/vhosts/{}", api::segment(vhost)))?
    {
        Ok(())
    } else {
        Err(CtlError::no_such_vhost(vhost))
    }
}

/// DELETE `path`; a 404 becomes `missing()`, the command's "does not exist" error.
pub(crate) fn delete_or(
    ctx: &Context,
    path: &str,
    headers: &[(&str, &str)],
    missing: impl FnOnce() -> CtlError,
) -> Result<(), CtlError> {
    match ctx.api.delete(path, headers) {
        Err(e) if e.status() == Some(404) => Err(missing()),
        other => Ok(other?),
    }
}

/// The error for an object of a vhost that the API did not find: the vhost's own
/// "does not exist" (65) when the vhost is what is missing, else `object_missing` (69).
pub(crate) fn missing_in_vhost(ctx: &Context, vhost: &str, object_missing: String) -> CtlError {
    match require_vhost(ctx, vhost) {
        Err(e) => e,
        Ok(()) => CtlError::new(exit::ExitCode::Unavailable, object_missing),
    }
}

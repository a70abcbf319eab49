//! trace_on and trace_off, as rabbitmqctl's (banner, result line, exit codes): a vhost's
//! firehose (`amq.rabbitmq.trace`) turned on or off through the HTTP API's vhost `tracing`
//! field, which RabbitMQ's API takes too.

use crate::api::segment;
use crate::exit::CtlError;
use crate::{require_vhost, Context};
use serde_json::json;

/// Turns tracing on (`on`) or off in `-p`'s vhost.
pub fn trace(ctx: &Context, on: bool) -> Result<(), CtlError> {
    let vhost = &ctx.vhost;
    let (starting, done) = match on {
        true => ("Starting", "enabled"),
        false => ("Stopping", "disabled"),
    };
    ctx.style
        .banner(&format!("{starting} tracing for vhost \"{vhost}\" ..."));
    // The API's PUT would create a missing vhost: refused first, with rabbitmqctl's
    // "does not exist" (65).
    require_vhost(ctx, vhost)?;
    ctx.api.put(
        &format!("/api/vhosts/{}", segment(vhost)),
        &json!({ "tracing": on }),
    )?;
    println!("Trace {done} for vhost {vhost}");
    Ok(())
}

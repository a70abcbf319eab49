//! Errors of `warren ctl` and the exit code each one ends the process with.
//!
//! The codes are rabbitmqctl's (its `RabbitMQ.CLI.Core.ExitCodes`, taken from BSD sysexits),
//! so scripts that branch on rabbitmqctl's exit status keep working: 64 usage, 65 bad data
//! (e.g. an unknown vhost), 67 unknown user, 69 unavailable (broker unreachable, object not
//! found), 70 internal/software error, 75 timeout. rabbitmqctl has no password, so it has
//! no code for refused credentials; `warren ctl` uses sysexits' 77 (EX_NOPERM) for them.

use std::fmt;

/// rabbitmqctl's exit codes (sysexits.h), plus 77 for refused credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    Usage = 64,
    DataErr = 65,
    NoUser = 67,
    Unavailable = 69,
    Software = 70,
    TempFail = 75,
    NoPerm = 77,
}

/// A failed command: what to tell the user and how to exit.
#[derive(Debug, PartialEq, Eq)]
pub struct CtlError {
    pub code: ExitCode,
    pub message: String,
}

impl CtlError {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Self {
        CtlError {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ExitCode::Usage, message)
    }

    pub fn no_such_vhost(vhost: &str) -> Self {
        // rabbitmqctl's own text for {no_such_vhost, V}.
        Self::new(
            ExitCode::DataErr,
            format!("Virtual host '{vhost}' does not exist"),
        )
    }

    pub fn no_such_user(user: &str) -> Self {
        Self::new(ExitCode::NoUser, format!("User \"{user}\" does not exist"))
    }

    /// Where rabbitmqctl (3.10.8, checked side by side) reports a missing vhost as
    /// unavailable (69) rather than as bad data: setting or clearing permissions in it.
    pub fn vhost_unavailable(vhost: &str) -> Self {
        Self::new(
            ExitCode::Unavailable,
            format!("Virtual host {vhost} does not exist"),
        )
    }

    /// Where rabbitmqctl reports a missing user as unavailable (69): the user limit
    /// commands.
    pub fn user_unavailable(user: &str) -> Self {
        Self::new(
            ExitCode::Unavailable,
            format!("User \"{user}\" does not exist"),
        )
    }
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CtlError {}

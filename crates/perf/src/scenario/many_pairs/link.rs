//! Where a worker runs: in the tool's own process when its descriptors suffice, else as a
//! worker process of its own (`warren perf many-pairs-worker`), because each AMQP connection
//! is a descriptor and a process may only hold RLIMIT_NOFILE of them. The step drives both
//! kinds the same way; a worker process takes its commands as JSON lines on stdin and answers
//! each with one JSON line on stdout (its stderr is the tool's).

use super::counters::Counters;
use super::worker::{Attached, Closed, Plan, Sent, Worker};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The argument after `warren perf` that starts a worker process.
pub const WORKER_ARG: &str = "many-pairs-worker";

#[derive(Debug, Serialize, Deserialize)]
enum Command {
    Attach(Plan),
    Send {
        start_ns: u64,
        duration_ms: u64,
        confirm_wait_ms: u64,
    },
    Progress,
    Close,
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Attached(Attached),
    Sent(Sent),
    Progress { received: u64 },
    Closed(Closed),
    Failed(String),
}

pub struct ProcessLink {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl ProcessLink {
    async fn request(&mut self, command: &Command) -> Result<Reply> {
        let mut line = serde_json::to_string(command)?;
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .context("writing to a worker process")?;
        self.stdin.flush().await?;
        let answer = self
            .stdout
            .next_line()
            .await?
            .ok_or_else(|| anyhow!("a worker process exited (see its messages above)"))?;
        match serde_json::from_str(&answer).context("a worker process's answer")? {
            Reply::Failed(why) => bail!("worker process: {why}"),
            reply => Ok(reply),
        }
    }
}

pub enum Link {
    Local(Box<Worker>),
    Process(Box<ProcessLink>),
}

impl Link {
    pub async fn attach_local(plan: Plan) -> (Link, Attached) {
        let (worker, attached) = Worker::attach(plan).await;
        (Link::Local(Box::new(worker)), attached)
    }

    /// Starts `exe perf many-pairs-worker` and has it attach `plan`'s groups.
    pub async fn attach_process(exe: &Path, plan: Plan) -> Result<(Link, Attached)> {
        let mut child = tokio::process::Command::new(exe)
            .args(["perf", WORKER_ARG])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting worker process {}", exe.display()))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        let mut link = ProcessLink {
            child,
            stdin,
            stdout,
        };
        match link.request(&Command::Attach(plan)).await? {
            Reply::Attached(a) => Ok((Link::Process(Box::new(link)), a)),
            other => bail!("worker process answered {other:?} to attach"),
        }
    }

    pub async fn send(
        &mut self,
        start_ns: u64,
        duration: Duration,
        confirm_wait: Duration,
    ) -> Result<Sent> {
        match self {
            Link::Local(w) => Ok(w.send(start_ns, duration, confirm_wait).await),
            Link::Process(p) => match p
                .request(&Command::Send {
                    start_ns,
                    duration_ms: duration.as_millis() as u64,
                    confirm_wait_ms: confirm_wait.as_millis() as u64,
                })
                .await?
            {
                Reply::Sent(s) => Ok(s),
                other => bail!("worker process answered {other:?} to send"),
            },
        }
    }

    /// The clients' live counts, when they run in this process (a worker process answers
    /// only between commands).
    pub fn counters(&self) -> Option<Arc<Counters>> {
        match self {
            Link::Local(w) => Some(w.counters()),
            Link::Process(_) => None,
        }
    }

    /// Messages received so far.
    pub async fn received(&mut self) -> Result<u64> {
        match self {
            Link::Local(w) => Ok(w.received()),
            Link::Process(p) => match p.request(&Command::Progress).await? {
                Reply::Progress { received } => Ok(received),
                other => bail!("worker process answered {other:?} to progress"),
            },
        }
    }

    pub async fn close(self) -> Result<Closed> {
        match self {
            Link::Local(w) => Ok(w.close().await),
            Link::Process(mut p) => {
                let closed = match p.request(&Command::Close).await? {
                    Reply::Closed(c) => c,
                    other => bail!("worker process answered {other:?} to close"),
                };
                let _ = tokio::time::timeout(Duration::from_secs(10), p.child.wait()).await;
                Ok(closed)
            }
        }
    }
}

/// `warren perf many-pairs-worker`: serves one worker's commands from stdin until `Close`.
pub async fn worker_main() -> Result<()> {
    crate::fd_limit::raise_soft_to_hard();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    let mut worker: Option<Worker> = None;
    while let Some(line) = lines.next_line().await? {
        let command: Command = serde_json::from_str(&line).context("a command from the tool")?;
        let closing = matches!(command, Command::Close);
        let reply = match command {
            Command::Attach(plan) if worker.is_none() => {
                let (w, attached) = Worker::attach(plan).await;
                worker = Some(w);
                Reply::Attached(attached)
            }
            Command::Close if worker.is_some() => {
                Reply::Closed(worker.take().expect("checked").close().await)
            }
            command => match (command, worker.as_mut()) {
                (
                    Command::Send {
                        start_ns,
                        duration_ms,
                        confirm_wait_ms,
                    },
                    Some(w),
                ) => Reply::Sent(
                    w.send(
                        start_ns,
                        Duration::from_millis(duration_ms),
                        Duration::from_millis(confirm_wait_ms),
                    )
                    .await,
                ),
                (Command::Progress, Some(w)) => Reply::Progress {
                    received: w.received(),
                },
                (command, _) => Reply::Failed(format!("{command:?} out of order")),
            },
        };
        let mut out = serde_json::to_string(&reply)?;
        out.push('\n');
        stdout.write_all(out.as_bytes()).await?;
        stdout.flush().await?;
        if closing {
            break;
        }
    }
    Ok(())
}

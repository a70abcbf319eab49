//! `warren ctl`'s command line: rabbitmqctl's command names, arguments and options, plus
//! where to find the broker's HTTP API (`--url`, `--username`, `--password`).

use crate::output::Format;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "warren ctl",
    about = "Administer a running Warren (or RabbitMQ) through its HTTP management API, \
             with rabbitmqctl's commands",
    disable_version_flag = true
)]
pub struct CtlCli {
    #[command(flatten)]
    pub global: GlobalOptions,
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// Options every command takes, anywhere on the line (as rabbitmqctl's `-p`, `-q`).
#[derive(Args, Debug)]
pub struct GlobalOptions {
    /// Base URL of the management API.
    #[arg(
        long,
        global = true,
        env = "WARREN_MGMT_URL",
        default_value = "http://127.0.0.1:15672"
    )]
    pub url: String,
    /// User for the API's HTTP Basic authentication.
    #[arg(long, global = true, env = "WARREN_USER", default_value = "guest")]
    pub username: String,
    /// Password for the API's HTTP Basic authentication.
    #[arg(
        long,
        global = true,
        env = "WARREN_PASS",
        default_value = "guest",
        hide_env_values = true,
        hide_default_value = true
    )]
    pub password: String,
    /// PEM file of the CA that signed an https API's certificate (default: public roots).
    #[arg(long, global = true, env = "WARREN_MGMT_CACERT")]
    pub cacert: Option<std::path::PathBuf>,
    /// Virtual host, for the commands that act in one.
    #[arg(short = 'p', long, global = true, default_value = "/")]
    pub vhost: String,
    /// Print JSON (same as --formatter json).
    #[arg(long, global = true)]
    pub json: bool,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub formatter: Format,
    /// No banner lines ("Listing queues ..."), only results.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Tables without their header line.
    #[arg(long, global = true)]
    pub no_table_headers: bool,
    /// Seconds to wait for the API's answer.
    #[arg(short, long = "timeout", global = true, default_value_t = 60)]
    pub timeout_s: u64,
}

/// Column arguments of the list commands, rabbitmqctl's info items (`name,messages` or
/// `name messages`).
#[derive(Args, Debug)]
pub struct Columns {
    pub columns: Vec<String>,
}

// Positional arguments must not share an id with a global option (`user`, not `username`;
// `new_password`, not `password`; `name`, not `vhost`): clap would overwrite the option.
#[derive(Subcommand, Debug)]
#[command(rename_all = "snake_case")]
pub enum CtlCommand {
    /// Lists queues and their properties (default columns: name messages).
    ListQueues(Columns),
    /// Lists exchanges (default columns: name type).
    ListExchanges(Columns),
    /// Lists bindings (default: all columns).
    ListBindings(Columns),
    /// Lists client connections (default columns: user peer_host peer_port state).
    ListConnections(Columns),
    /// Lists channels (default columns: pid user consumer_count messages_unacknowledged).
    ListChannels(Columns),
    /// Lists consumers in a vhost.
    ListConsumers(Columns),
    /// Lists users and their tags.
    ListUsers,
    /// Lists virtual hosts (default column: name).
    ListVhosts(Columns),
    /// Lists the users' permissions in a vhost.
    ListPermissions,
    /// Lists the policies of a vhost.
    ListPolicies,
    /// Creates a user; the password is read from stdin when not given.
    AddUser {
        #[arg(value_name = "USERNAME")]
        user: String,
        #[arg(value_name = "PASSWORD")]
        new_password: Option<String>,
    },
    /// Deletes a user.
    DeleteUser {
        #[arg(value_name = "USERNAME")]
        user: String,
    },
    /// Changes a user's password; read from stdin when not given.
    ChangePassword {
        #[arg(value_name = "USERNAME")]
        user: String,
        #[arg(value_name = "PASSWORD")]
        new_password: Option<String>,
    },
    /// Sets a user's tags (administrator, monitoring, management, policymaker…);
    /// none clears them.
    SetUserTags {
        #[arg(value_name = "USERNAME")]
        user: String,
        tags: Vec<String>,
    },
    /// Sets a user's configure, write and read permissions (regular expressions) in a vhost.
    SetPermissions {
        #[arg(value_name = "USERNAME")]
        user: String,
        configure: String,
        write: String,
        read: String,
    },
    /// Revokes a user's permissions in a vhost.
    ClearPermissions {
        #[arg(value_name = "USERNAME")]
        user: String,
    },
    /// Sets a user's topic permissions (write and read regular expressions matched against
    /// routing keys) on a topic exchange of a vhost.
    SetTopicPermissions {
        #[arg(value_name = "USERNAME")]
        user: String,
        exchange: String,
        write: String,
        read: String,
    },
    /// Revokes a user's topic permissions in a vhost, on every exchange or on one.
    ClearTopicPermissions {
        #[arg(value_name = "USERNAME")]
        user: String,
        exchange: Option<String>,
    },
    /// Sets a user's limits from a JSON document: max-connections, max-channels (a
    /// negative value is no limit).
    SetUserLimits {
        #[arg(value_name = "USERNAME")]
        user: String,
        #[arg(value_name = "DEFINITION")]
        definition: String,
    },
    /// Clears one of a user's limits (max-connections, max-channels) or all of them.
    ClearUserLimits {
        #[arg(value_name = "USERNAME")]
        user: String,
        #[arg(value_name = "LIMIT_TYPE")]
        limit: String,
    },
    /// Shows a user's limits (guest's by default), or with --global every user's.
    ListUserLimits {
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        global: bool,
    },
    /// Sets a vhost's limits from a JSON document: max-connections, max-queues (a negative
    /// value is no limit).
    SetVhostLimits {
        #[arg(value_name = "DEFINITION")]
        definition: String,
    },
    /// Clears every limit of a vhost.
    ClearVhostLimits,
    /// Shows a vhost's limits, or with --global every vhost's.
    ListVhostLimits {
        #[arg(long)]
        global: bool,
    },
    /// Lists a user's permissions in every vhost.
    ListUserPermissions {
        #[arg(value_name = "USERNAME")]
        user: String,
    },
    /// Checks a user's credentials against the broker.
    AuthenticateUser {
        #[arg(value_name = "USERNAME")]
        user: String,
        #[arg(value_name = "PASSWORD")]
        password: String,
    },
    /// Sets a runtime parameter of a component in a vhost (VALUE is JSON).
    SetParameter {
        component: String,
        name: String,
        value: String,
    },
    /// Clears a runtime parameter.
    ClearParameter { component: String, name: String },
    /// Lists a vhost's runtime parameters.
    ListParameters,
    /// Sets a global runtime parameter (VALUE is JSON).
    SetGlobalParameter { name: String, value: String },
    /// Clears a global runtime parameter.
    ClearGlobalParameter { name: String },
    /// Lists the global runtime parameters.
    ListGlobalParameters,
    /// Creates a virtual host.
    AddVhost {
        #[arg(value_name = "VHOST")]
        name: String,
        #[arg(long)]
        description: Option<String>,
        /// Comma-separated tags.
        #[arg(long)]
        tags: Option<String>,
        #[arg(long = "default-queue-type")]
        default_queue_type: Option<String>,
    },
    /// Deletes a virtual host and everything in it.
    DeleteVhost {
        #[arg(value_name = "VHOST")]
        name: String,
    },
    /// Sets or updates a policy.
    SetPolicy {
        name: String,
        /// Regular expression matched against queue or exchange names.
        pattern: String,
        /// The policy's definition, a JSON object ('{"max-length":1000}').
        definition: String,
        /// Which policy wins when several match: the highest.
        #[arg(long, default_value_t = 0)]
        priority: i64,
        /// What the policy applies to: queues, exchanges, all, classic_queues,
        /// quorum_queues or streams.
        #[arg(long = "apply-to", default_value = "all")]
        apply_to: String,
    },
    /// Clears a policy.
    ClearPolicy { name: String },
    /// Closes a connection (by its name, as list_connections shows it) with a reason.
    CloseConnection {
        connection: String,
        explanation: String,
    },
    /// Closes the connections of a vhost (every connection to the node with --global), or the
    /// first LIMIT of them, with a reason.
    CloseAllConnections {
        explanation: String,
        /// Every connection, whatever its vhost.
        #[arg(long)]
        global: bool,
        /// Close at most this many (0: all).
        #[arg(long, default_value_t = 0)]
        limit: usize,
        /// Wait this long between two closes.
        #[arg(
            long = "per-connection-delay",
            default_value_t = 0,
            value_name = "MILLISECONDS"
        )]
        per_connection_delay: u64,
    },
    /// Stops the AMQP side (rabbitmqctl stop_app): closes every client connection and the
    /// AMQP listeners; the broker process and its HTTP API keep running.
    StopApp,
    /// Starts the AMQP side again after stop_app (rabbitmqctl start_app).
    StartApp,
    /// Sets the memory alarm's threshold: a fraction of the machine's memory, or `absolute`
    /// and a value with units (1GB, 512MiB, 1000000).
    SetVmMemoryHighWatermark {
        #[arg(num_args = 1..=2, required = true, value_names = ["FRACTION | absolute", "VALUE"])]
        args: Vec<String>,
    },
    /// Sets the disk alarm's free-space limit: bytes, or a value with units (1GB, 512MiB).
    SetDiskFreeLimit {
        #[arg(value_name = "DISK_LIMIT")]
        limit: String,
    },
    /// Removes all ready messages from a queue.
    PurgeQueue { queue: String },
    /// Turns on the firehose of a vhost: a copy of every message published in it or
    /// delivered from it goes to its amq.rabbitmq.trace exchange.
    TraceOn,
    /// Turns off the firehose of a vhost.
    TraceOff,
    /// Deletes a queue, with its messages.
    DeleteQueue {
        queue: String,
        /// Only if it has no ready messages.
        #[arg(short = 'e', long)]
        if_empty: bool,
        /// Only if it has no consumers.
        #[arg(short = 'u', long)]
        if_unused: bool,
    },
    /// Writes the definitions (users, vhosts, permissions, policies, topology) as JSON to a
    /// file, or to stdout with "-".
    ExportDefinitions { path: String },
    /// Imports definitions from a JSON file, or from stdin with "-".
    ImportDefinitions { path: String },
    /// Shows the broker's status: versions, listeners, alarms, memory, disk, totals.
    Status,
    /// Shows the cluster: its nodes, which are running (as the failure detector sees them),
    /// the metadata group's leader and term, and each member's matched log index and lag.
    ClusterStatus,
    /// Adds a running node (started with --cluster-port and the cluster's secret) to the
    /// cluster, run against any member.
    AddClusterNode { name: String, address: String },
    /// Removes a stopped node from the cluster and from every quorum queue's group, run
    /// against another member (a running node is refused).
    ForgetClusterNode { name: String },
    /// Adds a member to every quorum queue's group below its size (rabbitmq-queues grow NODE
    /// all), e.g. a node that was wiped, forgotten and joined again; lists the queues.
    GrowQuorumQueues { name: String },
    /// Shows a quorum queue's Raft group as this node sees it (rabbitmq-queues
    /// quorum_status): each member's state, log, commit and snapshot index, term, and as the
    /// leader sees them its matched index and lag. QUEUE in -p's vhost, or VHOST QUEUE.
    QuorumStatus {
        #[arg(num_args = 1..=2, required = true, value_names = ["VHOST", "QUEUE"])]
        args: Vec<String>,
    },
}

impl GlobalOptions {
    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.formatter
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[&str]) -> Result<CtlCli, clap::Error> {
        CtlCli::try_parse_from(std::iter::once("warren ctl").chain(line.iter().copied()))
    }

    #[test]
    fn commands_take_rabbitmqctl_names_and_global_options_anywhere() {
        let cli = parse(&["list_queues", "-p", "v1", "name", "messages", "--json"]).unwrap();
        assert_eq!(cli.global.vhost, "v1");
        assert_eq!(cli.global.format(), Format::Json);
        match cli.command {
            CtlCommand::ListQueues(Columns { columns }) => {
                assert_eq!(columns, ["name", "messages"])
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&["--vhost", "v2", "-q", "purge_queue", "q1"]).unwrap();
        assert!(cli.global.quiet);
        assert_eq!(cli.global.vhost, "v2");
        assert!(matches!(cli.command, CtlCommand::PurgeQueue { queue } if queue == "q1"));
    }

    #[test]
    fn trace_on_and_off_take_the_vhost_option_and_no_argument() {
        let cli = parse(&["trace_on", "-p", "v1"]).unwrap();
        assert!(matches!(cli.command, CtlCommand::TraceOn));
        assert_eq!(cli.global.vhost, "v1");
        let cli = parse(&["trace_off"]).unwrap();
        assert!(matches!(cli.command, CtlCommand::TraceOff));
        assert_eq!(cli.global.vhost, "/");
        assert!(parse(&["trace_on", "v1"]).is_err());
    }

    #[test]
    fn set_policy_defaults_and_options() {
        let cli = parse(&["set_policy", "p1", "^a", r#"{"max-length":1}"#]).unwrap();
        match cli.command {
            CtlCommand::SetPolicy {
                priority, apply_to, ..
            } => {
                assert_eq!(priority, 0);
                assert_eq!(apply_to, "all");
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&[
            "set_policy",
            "--priority",
            "5",
            "--apply-to",
            "queues",
            "p1",
            "^a",
            "{}",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            CtlCommand::SetPolicy { priority: 5, ref apply_to, .. } if apply_to == "queues"
        ));
    }

    #[test]
    fn user_and_vhost_arguments_leave_the_credentials_and_vhost_options_alone() {
        let cli = parse(&[
            "--username",
            "admin",
            "--password",
            "s3cret",
            "add_user",
            "u3",
            "pw3",
        ])
        .unwrap();
        assert_eq!(cli.global.username, "admin");
        assert_eq!(cli.global.password, "s3cret");
        assert!(matches!(
            cli.command,
            CtlCommand::AddUser { ref user, new_password: Some(ref p) } if user == "u3" && p == "pw3"
        ));
        let cli = parse(&["-p", "v1", "delete_vhost", "v2"]).unwrap();
        assert_eq!(cli.global.vhost, "v1");
        assert!(matches!(cli.command, CtlCommand::DeleteVhost { ref name } if name == "v2"));
        let cli = parse(&[
            "--username",
            "admin",
            "set_permissions",
            "u3",
            "a",
            "b",
            "c",
        ])
        .unwrap();
        assert_eq!(cli.global.username, "admin");
    }

    #[test]
    fn missing_and_extra_arguments_are_errors() {
        assert!(parse(&["set_permissions", "u1", ".*", ".*"]).is_err());
        assert!(parse(&["delete_user"]).is_err());
        assert!(parse(&["list_users", "name"]).is_err());
        assert!(parse(&["no_such_command"]).is_err());
        assert!(parse(&["list_queues", "--formatter", "xml"]).is_err());
    }

    #[test]
    fn defaults_point_at_a_local_broker_as_guest() {
        // Guard against the environment of whoever runs the tests.
        if std::env::var_os("WARREN_MGMT_URL").is_some()
            || std::env::var_os("WARREN_USER").is_some()
        {
            return;
        }
        let cli = parse(&["status"]).unwrap();
        assert_eq!(cli.global.url, "http://127.0.0.1:15672");
        assert_eq!(cli.global.username, "guest");
        assert_eq!(cli.global.vhost, "/");
        assert_eq!(cli.global.format(), Format::Table);
    }
}

//! `warren`'s man pages and shell completions (bash, zsh, fish), generated from the clap
//! definitions the binary parses its command line with, so they cannot disagree with
//! `--help`. The binary's hidden `generate-manpage DIR` and `generate-completions SHELL`
//! call this at packaging time (packaging/debian/build.sh).
//!
//! `warren ctl` and `warren perf` take their arguments through to their own crates' parsers;
//! here those parsers' commands stand in their place, so `man warren-ctl` lists rabbitmqctl's
//! commands and `warren ctl <TAB>` completes them.

use clap::Command;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

/// The command tree a user meets: `root` (the binary's `Cli::command()`) without its hidden
/// subcommands, with `ctl` and `perf` as their crates define them.
pub fn documented(root: &Command) -> Command {
    let mut tree = Command::new("warren")
        .version(env!("CARGO_PKG_VERSION"))
        .about(root.get_about().cloned().unwrap_or_default())
        .subcommand_required(true)
        .disable_help_subcommand(true);
    if let Some(long_about) = root.get_long_about() {
        tree = tree.long_about(long_about.clone());
    }
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        tree = tree.subcommand(match sub.get_name() {
            "ctl" => warren_ctl::command(),
            "perf" => warren_perf::command(),
            _ => sub.clone(),
        });
    }
    tree
}

/// Writes a man page (section 1) for every command of `documented(root)` into `dir`:
/// `warren.1`, `warren-server.1`, `warren-ctl.1`, `warren-ctl-list_queues.1`… (each page's
/// COMMANDS section names its subcommands' pages, as clap_mangen renders them; the same
/// walk as `clap_mangen::generate_to`). Returns the files written.
pub fn write_man_pages(root: &Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn walk(cmd: Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub.clone(), dir, written)?;
        }
        written.push(clap_mangen::Man::new(cmd).generate_to(dir)?);
        Ok(())
    }
    std::fs::create_dir_all(dir)?;
    // Built, so that each subcommand's page is named after its whole path (`warren-ctl-…`).
    let mut tree = documented(root);
    tree.build();
    let mut written = Vec::new();
    walk(tree, dir, &mut written)?;
    Ok(written)
}

/// Writes the completion script of `shell` for `warren` to `out`.
pub fn write_completions(root: &Command, shell: Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut documented(root), "warren", out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Command {
        Command::new("warren")
            .about("a broker")
            .subcommand(Command::new("server").arg(clap::Arg::new("bind").long("bind")))
            .subcommand(Command::new("ctl"))
            .subcommand(Command::new("perf"))
            .subcommand(Command::new("generate-manpage").hide(true))
    }

    #[test]
    fn hidden_commands_leave_and_ctl_and_perf_bring_their_own() {
        let tree = documented(&root());
        let names: Vec<&str> = tree.get_subcommands().map(|s| s.get_name()).collect();
        assert_eq!(names, ["server", "ctl", "perf"]);
        let ctl = tree.find_subcommand("ctl").unwrap();
        assert!(ctl.find_subcommand("list_queues").is_some());
        assert!(ctl.get_arguments().any(|a| a.get_long() == Some("url")));
        let perf = tree.find_subcommand("perf").unwrap();
        assert!(perf.find_subcommand("scenario").is_some());
        tree.debug_assert();
    }

    #[test]
    fn man_pages_and_completions_name_every_command() {
        let dir = std::env::temp_dir().join(format!("warren-cli-docs-{}", std::process::id()));
        let pages = write_man_pages(&root(), &dir).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for page in [
            "warren.1",
            "warren-server.1",
            "warren-ctl.1",
            "warren-ctl-list_queues.1",
        ] {
            assert!(names.iter().any(|n| n == page), "{page} not in {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("generate")));
        let server = std::fs::read_to_string(dir.join("warren-server.1")).unwrap();
        assert!(server.contains("\\-\\-bind"), "{server}");
        std::fs::remove_dir_all(&dir).unwrap();
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut script = Vec::new();
            write_completions(&root(), shell, &mut script);
            let script = String::from_utf8(script).unwrap();
            assert!(script.contains("list_queues"), "{shell}: no ctl commands");
            assert!(
                !script.contains("generate-manpage"),
                "{shell}: hidden command"
            );
        }
    }
}

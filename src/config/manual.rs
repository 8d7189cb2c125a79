//! `kache completion` and `kache man`: shell completion scripts and man pages, generated
//! from the same clap definitions as `--help`, so they name exactly the flags kache takes.

use super::{Cli, ConfigError};
use clap::{Args, CommandFactory};

/// `kache completion`.
#[derive(Debug, Clone, Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `kache man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print (`serve` for `kache-serve(1)`); without one, the
    /// page of `kache` itself, which lists them.
    pub command: Option<String>,
}

/// The completion script for `args.shell`.
pub fn completion(args: &CompletionArgs) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "kache", &mut out);
    out
}

/// The man page (roff) of `kache`, or of the subcommand `args.command` (`kache-serve(1)`).
pub fn man(args: &ManArgs) -> Result<Vec<u8>, ConfigError> {
    let mut cli = Cli::command().disable_help_subcommand(true);
    // Built, the subcommands carry their full names (`kache serve`, `kache-serve`) and the
    // global flags (`--log-level`).
    cli.build();
    let page = match &args.command {
        None => cli,
        Some(name) => cli.find_subcommand(name).cloned().ok_or_else(|| {
            let names: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
            ConfigError::new("man", name, format!("no such command (one of: {})", names.join(", ")))
        })?,
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .source(format!("kache {}", crate::VERSION))
        .render(&mut out)
        .map_err(|e| ConfigError::new("man", args.command.as_deref().unwrap_or(""), e.to_string()))?;
    Ok(out)
}

//! `hccl ranktable`.

use std::process::ExitCode;

/// Subcommands of `hccl ranktable`.
#[derive(clap::Subcommand, Debug)]
pub enum RanktableCommand {}

/// Runs one `hccl ranktable` subcommand.
pub fn run(command: RanktableCommand) -> anyhow::Result<ExitCode> {
    match command {}
}

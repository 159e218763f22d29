//! `hccl topo`.

use std::process::ExitCode;

/// Subcommands of `hccl topo`.
#[derive(clap::Subcommand, Debug)]
pub enum TopoCommand {}

/// Runs one `hccl topo` subcommand.
pub fn run(command: TopoCommand) -> anyhow::Result<ExitCode> {
    match command {}
}

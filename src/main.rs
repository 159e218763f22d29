//! The `hccl` command line: rank tables, topologies, schedules, the simulator
//! and the `hccl_test`-style benchmark.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// hccl-rs: collective communication in the style of Huawei HCCL.
#[derive(Parser, Debug)]
#[command(name = "hccl", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check or generate HCCL rank table files (versions 1.0 and 1.2).
    #[command(subcommand)]
    Ranktable(cli::ranktable::RanktableCommand),
    /// Show a cluster topology: a preset, a rank table or a fabric file.
    #[command(subcommand)]
    Topo(cli::topo::TopoCommand),
    /// Print a rank's schedule for a collective, its cost estimate and the verifier's verdict.
    Plan(cli::plan::PlanArgs),
    /// Benchmark a collective over a size sweep (see `cli::test::ABOUT`).
    #[command(about = cli::test::ABOUT)]
    Test(Box<cli::test::TestArgs>),
    /// Run collectives on the simulated fabric, optionally under a fault plan; print results or the hang report (exit 4 on a hang, 3 on mismatched arguments, 2 on bad flags).
    Sim(Box<cli::sim::SimArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Warnings the library logs (and more with RUST_LOG or
    // ASCEND_GLOBAL_LOG_LEVEL) go to stderr.
    hccl::init_logging();
    let result = match cli.command {
        Command::Ranktable(c) => cli::ranktable::run(c),
        Command::Topo(c) => cli::topo::run(c),
        Command::Plan(c) => cli::plan::run(c),
        Command::Test(c) => cli::test::run(*c, "hccl test"),
        Command::Sim(c) => cli::sim::run(*c),
    };
    match result {
        Ok(code) => code,
        // A reader that closed the pipe (`hccl ... | head`) wants no more
        // output: that is not an error.
        Err(e) if cli::test::is_broken_pipe(&e) => cli::test::broken_pipe_exit(),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

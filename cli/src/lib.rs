//! The `hccl` and `hccl-test` programs, compiled once: the `hccl` command
//! line (rank tables, topologies, schedules, the simulator and the
//! `hccl_test`-style benchmark) and `hccl-test`, the benchmark alone.
//!
//! One module per subcommand; the two binaries are thin `main`s calling
//! [`hccl_main`] and [`hccl_test_main`]. The library they drive is `hccl`
//! (and `hccl-algos`, `hccl-sim`, `hccl-topology` for planning and
//! simulation); none of this crate's dependencies (clap, anyhow,
//! plotters, indicatif) reach the library.

#![forbid(unsafe_code)]
// Items of private modules say `pub(crate)`: what is `pub` is the API.
#![warn(unreachable_pub)]

use std::process::ExitCode;

use clap::{Args, FromArgMatches, Parser, Subcommand};

mod doctor;
mod flag_number;
mod memory_size;
mod outputs;
mod plan;
mod ranktable;
mod replay;
mod sim;
mod sim_size;
mod test;
mod topo;
mod workload;

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
    Ranktable(ranktable::RanktableCommand),
    /// Show a cluster topology: a preset, a rank table or a fabric file.
    #[command(subcommand)]
    Topo(topo::TopoCommand),
    /// Print a rank's schedule for a collective, its cost estimate and the verifier's verdict.
    Plan(plan::PlanArgs),
    /// Benchmark a collective over a size sweep (see `test::ABOUT`).
    #[command(about = test::ABOUT)]
    Test(Box<test::TestArgs>),
    /// Run collectives on the simulated fabric, optionally under a fault plan; print results or the hang report (exit 4 on a hang, 3 on mismatched arguments, 2 on bad flags).
    Sim(Box<sim::SimArgs>),
    /// Simulate one data-parallel training step of a model (ResNet-50, GPT-2, GPT-3 XL or a JSON workload) on the simulated fabric: baseline, DDP overlap, overlap + Top-K, overlap + INT8; step time, exposed communication, link utilisation.
    Workload(Box<workload::WorkloadArgs>),
    /// Name the root cause of a failed or hung job from its ranks' flight-recorder dumps (HCCL_FLIGHT_RECORDER_DIR); exit 4 when a cause is named.
    Doctor(doctor::DoctorArgs),
}

/// `hccl ARGS`: parses the process's arguments (exit 2 on bad flags, as
/// clap does), runs the subcommand and returns its exit code; an error
/// is printed to stderr with exit code 1.
pub fn hccl_main() -> ExitCode {
    hccl_main_from(std::env::args_os())
}

/// [`hccl_main`] with these arguments (the first is the program's name)
/// instead of the process's: for a host program, such as the Python
/// module's `python -m hccl_rs test ...`. Bad flags and `--help` exit the
/// process, as clap does.
pub fn hccl_main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    // Warnings the library logs (and more with RUST_LOG or
    // ASCEND_GLOBAL_LOG_LEVEL) go to stderr.
    hccl::init_logging();
    finish(match cli.command {
        Command::Ranktable(c) => ranktable::run(c),
        Command::Topo(c) => topo::run(c),
        Command::Plan(c) => plan::run(c),
        Command::Test(c) => test::run(*c, "hccl test"),
        Command::Sim(c) => sim::run(*c),
        Command::Workload(c) => workload::run(*c),
        Command::Doctor(c) => doctor::run(c),
    })
}

/// `hccl sim ARGS` (the first is the program's name, as for
/// [`hccl_main_from`]) returning what it would print and its exit code (0,
/// 4 a hang, 3 mismatched arguments) instead of printing them: for tests
/// that replay a real run's dumps as a user does (`hccl sim --replay DIR`,
/// the replay of `hccl doctor DIR --replay`), then run the files it wrote
/// (tests/tests/flight_netns.rs).
///
/// # Errors
/// Bad flags (clap's message), a first argument other than `sim`, or what
/// `hccl sim` fails with (unreadable dumps, a scenario it refuses).
pub fn sim_output<I, T>(args: I) -> anyhow::Result<(String, u8)>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    match Cli::try_parse_from(args)?.command {
        Command::Sim(a) => {
            let out = sim::execute(&a)?;
            Ok((out.output, out.code))
        }
        other => anyhow::bail!("sim_output runs `hccl sim` only, not {other:?}"),
    }
}

/// `hccl-test ARGS`: the same program as `hccl test ARGS` (CANN's
/// `hccl_test` / nccl-tests, on the simulator or over TCP) as its own
/// binary; exit codes as [`hccl_main`].
pub fn hccl_test_main() -> ExitCode {
    let cmd = test::TestArgs::augment_args(
        clap::Command::new("hccl-test").version(env!("CARGO_PKG_VERSION")),
    )
    .about(test::ABOUT);
    let args = match test::TestArgs::from_arg_matches(&cmd.get_matches()) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    hccl::init_logging();
    finish(test::run(args, "hccl-test"))
}

/// A usage error of the `hccl` subcommand at `path` (`["plan"]`,
/// `["topo", "show"]`) in clap's style: `error: MSG`, the subcommand's
/// usage line and the `--help` hint on stderr; exit status 2, the status
/// clap gives bad flags. For a flag's value that clap's parser accepts
/// but the subcommand cannot run (`--ranks 0`, `--preset nosuch`).
pub(crate) fn usage_error(path: &[&str], msg: impl std::fmt::Display) -> ExitCode {
    let mut cli = <Cli as clap::CommandFactory>::command();
    // Built, each subcommand's usage line starts `hccl plan`, not `plan`.
    cli.build();
    let sub = path
        .iter()
        .try_fold(&cli, |c, name| c.find_subcommand(name))
        .cloned();
    let mut cmd = sub.unwrap_or(cli);
    let _ = cmd
        .error(clap::error::ErrorKind::ValueValidation, msg)
        .print();
    ExitCode::from(2)
}

/// A subcommand's result as the process's exit code.
fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        // A reader that closed the pipe (`hccl ... | head`) wants no more
        // output: that is not an error.
        Err(e) if test::is_broken_pipe(&e) => test::broken_pipe_exit(),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

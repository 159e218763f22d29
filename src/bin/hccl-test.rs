//! `hccl-test ARGS`: the same program as `hccl test ARGS` (CANN's
//! `hccl_test` / nccl-tests on the simulator), as its own binary.

use std::process::ExitCode;

use clap::{Args, FromArgMatches};

// The `hccl` binary's CLI modules; only `test` is used here.
#[allow(dead_code)]
#[path = "../cli/mod.rs"]
mod cli;

fn main() -> ExitCode {
    let cmd = cli::test::TestArgs::augment_args(
        clap::Command::new("hccl-test").version(env!("CARGO_PKG_VERSION")),
    );
    let args = match cli::test::TestArgs::from_arg_matches(&cmd.get_matches()) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    match cli::test::run(args, "hccl-test") {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

//! `hccl-test ARGS`: the same program as `hccl test ARGS` (CANN's
//! `hccl_test` / nccl-tests, on the simulator or over TCP), as its own
//! binary.

use std::process::ExitCode;

use clap::{Args, FromArgMatches};

// The `hccl test` module of the `hccl` binary, compiled in here too.
#[path = "../cli/test.rs"]
mod test;

fn main() -> ExitCode {
    let cmd = test::TestArgs::augment_args(
        clap::Command::new("hccl-test").version(env!("CARGO_PKG_VERSION")),
    )
    .about(test::ABOUT);
    let args = match test::TestArgs::from_arg_matches(&cmd.get_matches()) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    hccl::init_logging();
    match test::run(args, "hccl-test") {
        Ok(code) => code,
        // A reader that closed the pipe (`hccl-test ... | head`).
        Err(e) if test::is_broken_pipe(&e) => test::broken_pipe_exit(),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

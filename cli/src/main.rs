//! The `hccl` command line: rank tables, topologies, schedules, the simulator
//! and the `hccl_test`-style benchmark (the code is in the `hccl_cli` library).

fn main() -> std::process::ExitCode {
    hccl_cli::hccl_main()
}

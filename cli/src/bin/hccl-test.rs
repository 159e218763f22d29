//! `hccl-test ARGS`: the same program as `hccl test ARGS` (CANN's
//! `hccl_test` / nccl-tests, on the simulator or over TCP), as its own
//! binary (the code is in the `hccl_cli` library).

fn main() -> std::process::ExitCode {
    hccl_cli::hccl_test_main()
}

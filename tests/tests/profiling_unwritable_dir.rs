//! A profiling directory that exists but takes no files (`/proc`, where not
//! even root can create one) fails the constructor on every backend, as a
//! directory that cannot be created does: creating it alone would pass and
//! lose the profiles at the end (own file: the profiling variables are read
//! once per process).

#[test]
fn a_directory_that_takes_no_files_fails_init_on_every_backend() {
    std::env::set_var("HCCL_PROFILING_ENABLE", "1");
    std::env::set_var("HCCL_PROFILING_OUTPUT_PATH", "/proc");
    let errors = hccl_conformance::init_errors();
    assert_eq!(errors.len(), 2, "sim and tcp");
    for e in errors {
        assert!(e.starts_with("HCCL_PROFILING_OUTPUT_PATH=\"/proc\""), "{e}");
        assert!(e.contains("cannot write /proc/"), "{e}");
    }
}

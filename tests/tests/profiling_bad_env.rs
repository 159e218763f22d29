//! A bad `HCCL_PROFILING_ENABLE` fails the communicator's constructor with
//! a message naming the variable and its value, like every other `HCCL_*`
//! variable (own file: the variables are read once per process).

#[test]
fn bad_profiling_value_fails_init_with_its_name() {
    std::env::set_var("HCCL_PROFILING_ENABLE", "yes please");
    for e in hccl_conformance::init_errors() {
        assert!(
            e.starts_with("HCCL_PROFILING_ENABLE=\"yes please\": not accepted; use 0 or 1"),
            "{e}"
        );
    }
}

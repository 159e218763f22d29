//! A bad `HCCL_PROFILING_ENABLE` fails every op with a message naming the
//! variable and its value (own file: the variables are read once per process).

#[test]
fn bad_profiling_value_fails_ops_with_its_name() {
    std::env::set_var("HCCL_PROFILING_ENABLE", "yes please");
    for (e, recv) in hccl_conformance::failing_all_reduces_on_sim() {
        assert!(e.contains("HCCL_PROFILING_ENABLE"), "{e}");
        assert!(e.contains("yes please"), "{e}");
        assert_eq!(recv, [0.0; 4], "nothing ran");
    }
}

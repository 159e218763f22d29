//! A bad `HCCL_PROFILING_ENABLE` fails every op with a message naming the
//! variable and its value (own file: the variables are read once per process).

use hccl::comm::{BackendKind, ReduceOp};
use hccl::Comm;

#[test]
fn bad_profiling_value_fails_ops_with_its_name() {
    std::env::set_var("HCCL_PROFILING_ENABLE", "yes please");
    let comms = Comm::init_all_on(BackendKind::Sim, 2).expect("init_all");
    for c in &comms {
        let mut recv = [0.0f32; 4];
        let e = c
            .all_reduce(&[1.0f32; 4], &mut recv, ReduceOp::Sum)
            .unwrap_err()
            .to_string();
        assert!(e.contains("HCCL_PROFILING_ENABLE"), "{e}");
        assert!(e.contains("yes please"), "{e}");
        assert_eq!(recv, [0.0; 4], "nothing ran");
    }
}

//! A profiling directory that cannot be created fails every op of a
//! communicator with a message naming the variable and the path (own file:
//! the profiling variables are read once per process).

use hccl::comm::{BackendKind, ReduceOp};
use hccl::Comm;

#[test]
fn unusable_profiling_directory_fails_ops_naming_it() {
    let file = std::env::temp_dir().join(format!("hccl-prof-file-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    std::env::set_var("HCCL_PROFILING_ENABLE", "1");
    std::env::set_var("HCCL_PROFILING_OUTPUT_PATH", file.join("sub"));
    let comms = Comm::init_all_on(BackendKind::Sim, 2).expect("init_all");
    for c in &comms {
        let mut recv = [0.0f32; 4];
        let e = c
            .all_reduce(&[1.0f32; 4], &mut recv, ReduceOp::Sum)
            .unwrap_err()
            .to_string();
        assert!(e.contains("HCCL_PROFILING_OUTPUT_PATH="), "{e}");
        assert!(e.contains("cannot create the directory"), "{e}");
    }
    let _ = std::fs::remove_file(&file);
}

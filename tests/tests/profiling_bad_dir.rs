//! A profiling directory that cannot be created fails every op of a
//! communicator with a message naming the variable and the path (own file:
//! the profiling variables are read once per process).

#[test]
fn unusable_profiling_directory_fails_ops_naming_it() {
    let file = std::env::temp_dir().join(format!("hccl-prof-file-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    std::env::set_var("HCCL_PROFILING_ENABLE", "1");
    std::env::set_var("HCCL_PROFILING_OUTPUT_PATH", file.join("sub"));
    for (e, _) in hccl_conformance::failing_all_reduces_on_sim() {
        assert!(e.contains("HCCL_PROFILING_OUTPUT_PATH="), "{e}");
        assert!(e.contains("cannot create the directory"), "{e}");
    }
    let _ = std::fs::remove_file(&file);
}

//! A profiling directory that cannot be created fails the communicator's
//! constructor with a message naming the variable and the path (own file:
//! the profiling variables are read once per process).

#[test]
fn unusable_profiling_directory_fails_init_naming_it() {
    let file = std::env::temp_dir().join(format!("hccl-prof-file-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    std::env::set_var("HCCL_PROFILING_ENABLE", "1");
    std::env::set_var("HCCL_PROFILING_OUTPUT_PATH", file.join("sub"));
    for e in hccl_conformance::init_errors() {
        assert!(e.starts_with("HCCL_PROFILING_OUTPUT_PATH="), "{e}");
        assert!(e.contains("cannot write"), "{e}");
    }
    let _ = std::fs::remove_file(&file);
}

//! Runs the `hccl_algo` fuzz target's body over its committed corpus
//! (cargo-fuzz needs nightly; this keeps the body exercised on stable).

include!("../../fuzz/bodies/hccl_algo.rs");

#[test]
fn seed_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/hccl_algo");
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    assert!(entries.len() >= 8, "seed corpus is missing: {entries:?}");
    for path in &entries {
        let data = std::fs::read(path).unwrap();
        check_hccl_algo(&data);
        let name = path.file_name().unwrap().to_string_lossy();
        let parsed = hccl_algos::select::HcclAlgo::parse(std::str::from_utf8(&data).unwrap());
        // bad_* seeds are refused, the others (HCCL's own examples) parse.
        assert_eq!(
            parsed.is_err(),
            name.starts_with("bad_"),
            "{name}: {parsed:?}"
        );
    }
}

//! Runs the `hccl_algo` fuzz target's body over its committed corpus
//! (cargo-fuzz needs nightly; this keeps the body exercised on stable).

include!("../../fuzz/bodies/hccl_algo.rs");
include!("../../fuzz/bodies/replay.rs");

#[test]
fn seed_corpus() {
    let entries = corpus("hccl_algo");
    assert!(
        entries.len() >= 8,
        "seed corpus is missing: {} files",
        entries.len()
    );
    for (name, data) in &entries {
        check_hccl_algo(data);
        let parsed = hccl_algos::select::HcclAlgo::parse(std::str::from_utf8(data).unwrap());
        // bad_* seeds are refused, the others (HCCL's own examples) parse.
        assert_eq!(
            parsed.is_err(),
            name.starts_with("bad_"),
            "{name}: {parsed:?}"
        );
    }
}

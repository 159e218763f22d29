//! Runs the `rank_table` fuzz target's body over the committed seed corpus
//! (cargo-fuzz needs nightly; this keeps the body exercised on stable).

include!("../../fuzz/bodies/rank_table.rs");
include!("../../fuzz/bodies/replay.rs");

#[test]
fn seed_corpus() {
    let entries = corpus("rank_table");
    assert!(
        entries.len() >= 8,
        "seed corpus is missing: {} files",
        entries.len()
    );
    let mut valid = 0;
    for (_, data) in &entries {
        check_rank_table(data);
        valid += usize::from(hccl_topology::RankTable::from_slice(data).is_ok());
    }
    // three valid seeds (so the round-trip branch runs, once with a key
    // outside HCCL's format), the rest invalid
    assert_eq!(valid, 3);
}

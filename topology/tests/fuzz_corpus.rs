//! Runs the `rank_table` fuzz target's body over the committed seed corpus
//! (cargo-fuzz needs nightly; this keeps the body exercised on stable).

include!("../../fuzz/bodies/rank_table.rs");

#[test]
fn seed_corpus() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/rank_table");
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    assert!(entries.len() >= 8, "seed corpus is missing: {entries:?}");
    let mut valid = 0;
    for path in &entries {
        let data = std::fs::read(path).unwrap();
        check_rank_table(&data);
        valid += usize::from(hccl_topology::RankTable::from_slice(&data).is_ok());
    }
    // two valid seeds (so the round-trip branch runs), the rest invalid
    assert_eq!(valid, 2);
}

// Body of the `rank_table` fuzz target, shared with the seed-corpus test in
// topology/tests/fuzz_corpus.rs (included with `include!`).
//
// Any bytes: parsing must not panic; a table that validates must serialise to
// JSON that parses back to an equal table. `to_json` writes HCCL's keys only,
// so keys outside the format (`ignored_keys`) are gone after the round trip
// (found by the fuzz smoke run: a misspelt `devicep` key) and the rest must
// be equal: the same JSON again.
fn check_rank_table(data: &[u8]) {
    if let Ok(table) = hccl_topology::RankTable::from_slice(data) {
        let json = table.to_json();
        let back = hccl_topology::RankTable::parse(&json).expect("re-parse of a valid table");
        if table.ignored_keys().is_empty() {
            assert_eq!(back, table, "round trip changed the table");
        } else {
            assert!(
                back.ignored_keys().is_empty(),
                "to_json wrote a key outside HCCL's format"
            );
            assert_eq!(back.to_json(), json, "round trip changed the table");
        }
        let cluster = hccl_topology::ClusterSpec::from_rank_table(&table);
        assert_eq!(cluster.world_size(), table.world_size());
    }
}

// Body of the `rank_table` fuzz target, shared with the seed-corpus test in
// topology/tests/fuzz_corpus.rs (included with `include!`).
//
// Any bytes: parsing must not panic; a table that validates must serialise to
// JSON that parses back to an equal table.
fn check_rank_table(data: &[u8]) {
    if let Ok(table) = hccl_topology::RankTable::from_slice(data) {
        let json = table.to_json();
        let back = hccl_topology::RankTable::parse(&json).expect("re-parse of a valid table");
        assert_eq!(back, table, "round trip changed the table");
        let cluster = hccl_topology::ClusterSpec::from_rank_table(&table);
        assert_eq!(cluster.world_size(), table.world_size());
    }
}

// Body of the `hccl_algo` fuzz target, shared with the corpus replay in
// algos/tests/fuzz_corpus.rs (included with `include!`).
//
// Any bytes as an `HCCL_ALGO` value: parsing must not panic; for a value
// that parses, wherever `spec_fitting` applies a setting, every rank of
// the op must plan (for each kind, a few layouts and every root).
fn check_hccl_algo(data: &[u8]) {
    use hccl_algos::collective::{CollectiveArgs, CollectiveKind as K};
    use hccl_algos::layout::GroupLayout;
    use hccl_algos::select::HcclAlgo;
    use hccl_algos::DataType;

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(h) = HcclAlgo::parse(text) else {
        return;
    };
    let layouts = [
        GroupLayout::servers(2, 4),
        GroupLayout::servers(3, 2),
        GroupLayout::flat(3),
    ];
    let kinds = [
        K::AllReduce,
        K::AllGather,
        K::ReduceScatter,
        K::Broadcast,
        K::Reduce,
        K::Scatter,
        K::Gather,
        K::AllToAll,
        K::Barrier,
    ];
    for layout in &layouts {
        let n = layout.world_size();
        for kind in kinds {
            let _ = h.spec_for(kind);
            let roots = if kind.is_rooted() { 0..n } else { 0..1 };
            for root in roots {
                let count = if kind == K::Barrier { 0 } else { 24 };
                let args = CollectiveArgs::new(kind, count, DataType::Fp32, n).with_root(root);
                if let Some(spec) = h.spec_fitting(&args, layout) {
                    for r in 0..n {
                        if let Err(e) = hccl_algos::algo::plan(&args, &spec, layout, r) {
                            panic!("{text:?} -> {spec} fits {kind} root {root}, but rank {r}: {e}");
                        }
                    }
                }
            }
        }
    }
}

// Body of the `fabric_file` fuzz target, shared with the corpus replay in
// sim/tests/fuzz_corpus.rs (included with `include!`).
//
// Any bytes as a fabric file: parsing must not panic; a fabric that
// validates must route every pair of its first ranks (it is checked
// connected), with a latency at least each hop's (sums saturate, never
// wrap) and a positive bottleneck; and a small one must simulate an
// AllReduce to an end or a timeout without panicking.
fn check_fabric_file(data: &[u8]) {
    use hccl_algos::algo::{AlgoSpec, Algorithm};
    use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
    use hccl_algos::DataType;

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(fabric) = hccl_topology::Fabric::from_fabric_json(text) else {
        return;
    };
    let n = fabric.world_size();
    assert_eq!(n, fabric.cluster().world_size());
    for s in 0..n.min(6) {
        for d in 0..n.min(6) {
            let route = fabric.route(s, d).expect("a validated fabric is connected");
            let lat = fabric.latency_ns(&route);
            for &e in route.edges() {
                assert!(
                    lat >= fabric.link(e).latency_ns,
                    "route latency below a hop's"
                );
            }
            let bw = fabric.bottleneck_gbps(&route);
            assert!(bw > 0.0, "bottleneck {bw}");
        }
    }
    let bisection = fabric.bisection_bandwidth_gbps();
    assert!(bisection >= 0.0, "bisection {bisection}");
    let _ = fabric.link_classes();
    let _ = fabric.to_dot();
    if (2..=16).contains(&n) && fabric.graph().edge_count() <= 256 {
        let mut sc = hccl_sim::Scenario::new(&fabric).exec_timeout_ns(fuzz_timeout(data));
        let w = sc.world();
        let args = CollectiveArgs::new(CollectiveKind::AllReduce, 1024, DataType::Fp32, n);
        sc.collective(w, args, AlgoSpec::Flat(Algorithm::Ring))
            .expect("a ring AllReduce fits any world");
        let report = sc.run().expect("a ring AllReduce runs");
        for t in report.ops[0].end_ns.iter().flatten() {
            assert!(*t < u64::MAX, "an op ended at the end of time");
        }
    }
}

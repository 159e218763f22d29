// Body of the `fault_plan` fuzz target, shared with the corpus replay in
// sim/tests/fuzz_corpus.rs (included with `include!`).
//
// Any bytes as a fault plan: parsing must not panic; a plan that parses
// must print to JSON that parses back to the same plan, and, resolved
// against the cluster the examples are written for (leaf-spine, 4 ranks,
// the three ops of examples/scenarios/two_comms_ok.json), must run to an
// end or a hang report without panicking (times add saturating).
fn check_fault_plan(data: &[u8]) {
    use hccl_sim::faults::{run_with_faults, FaultPlan};

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(plan) = FaultPlan::from_json(text) else {
        return;
    };
    let again = FaultPlan::from_json(&plan.to_json()).expect("re-parse of a valid plan");
    assert_eq!(again, plan, "round trip changed the plan");
    // Each fault runs an event or two; keep the run short.
    if plan.faults.len() > 64 {
        return;
    }
    static FABRIC: std::sync::OnceLock<hccl_topology::Fabric> = std::sync::OnceLock::new();
    let fabric = FABRIC
        .get_or_init(|| hccl_topology::build_preset(hccl_topology::Preset::LeafSpine, 4).unwrap());
    let file = hccl_sim::scenario_file::ScenarioFile::from_json(
        r#"{"communicators": {"world": [0, 1, 2, 3], "pairs": [0, 2]},
            "ops": [{"comm": "world", "collective": "all_reduce", "count": 4096, "algo": "ring"},
                    {"comm": "pairs", "collective": "broadcast", "count": 1024, "root": 1},
                    {"comm": "world", "collective": "all_gather", "count": 256, "dtype": "fp16"}]}"#,
    )
    .expect("the fuzz scenario parses");
    let sc = file
        .build(fabric, None)
        .expect("the fuzz scenario builds")
        .seed(7)
        .exec_timeout_ns(fuzz_timeout(data));
    if let Ok(run) = run_with_faults(&sc, &plan) {
        assert_eq!(run.report.ops.len(), 3);
        if let Some(hang) = run.hang(&sc, "fuzz") {
            assert!(!hang.to_text().is_empty());
        }
    }
}

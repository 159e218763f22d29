// Body of the `scenario_file` fuzz target, shared with the corpus replay in
// sim/tests/fuzz_corpus.rs (included with `include!`).
//
// Any bytes as a scenario file: parsing must not panic; a file that parses
// must serialise to JSON that parses back equal; building it on its own
// preset (small sizes) or a 4-rank leaf-spine must not panic, nor must a
// short run of what builds (huge counts included: sums saturate).
fn check_scenario_file(data: &[u8]) {
    use hccl_sim::scenario_file::ScenarioFile;
    use hccl_topology::{build_preset, Fabric, Preset};

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = ScenarioFile::from_json(text) else {
        return;
    };
    let json = serde_json::to_string(&file).expect("a scenario file serialises");
    let again = ScenarioFile::from_json(&json).expect("re-parse of a valid scenario file");
    assert_eq!(again, file, "round trip changed the file");
    static FABRIC: std::sync::OnceLock<Fabric> = std::sync::OnceLock::new();
    let default = FABRIC.get_or_init(|| build_preset(Preset::LeafSpine, 4).unwrap());
    // Its own preset only when small: building is linear in the servers, and
    // huge sizes are refused by an estimate (topology's tests cover that).
    let own = match (&file.preset, file.servers) {
        (Some(p), s) if s.unwrap_or(1) <= 16 => Preset::parse(p)
            .ok()
            .and_then(|p| build_preset(p, s.unwrap_or(1)).ok()),
        (None, Some(s)) if s <= 16 => build_preset(Preset::Atlas800tA2, s).ok(),
        _ => None,
    };
    let fabric = own.as_ref().unwrap_or(default);
    let Ok(sc) = file.build(fabric, None) else {
        return;
    };
    // Run only what stays short: a few ops (the step counts of the
    // algorithms do not grow with the count, so any count runs quickly).
    if file.ops.len() <= 8 {
        let sc = sc.exec_timeout_ns(fuzz_timeout(data));
        if let Ok(report) = sc.run() {
            assert_eq!(report.ops.len(), file.ops.len());
        }
    }
}

//! Runs the `fault_plan`, `scenario_file` and `fabric_file` fuzz targets'
//! bodies over their committed corpora (cargo-fuzz needs nightly; this
//! keeps the bodies exercised on stable), and checks what each seed is:
//! `issue22_*` are the inputs of issue 22 (numbers at the edge of their
//! type), refused with an error naming the field; `bad_*` are refused;
//! the rest (the examples among them) are accepted.

use hccl_sim::faults::FaultPlan;
use hccl_sim::scenario_file::ScenarioFile;
use hccl_topology::{build_preset, Fabric, Preset};

include!("../../fuzz/bodies/sim_common.rs");
include!("../../fuzz/bodies/fault_plan.rs");
include!("../../fuzz/bodies/scenario_file.rs");
include!("../../fuzz/bodies/fabric_file.rs");

include!("../../fuzz/bodies/replay.rs");

fn text(data: &[u8]) -> &str {
    std::str::from_utf8(data).unwrap_or("")
}

/// Replays `check` over `target`'s corpus; `accepts` says whether a seed is
/// accepted (`Err` carries the message), checked against its name.
fn replay(
    target: &str,
    min: usize,
    check: fn(&[u8]),
    accepts: fn(&[u8]) -> Result<(), String>,
    field: &str,
) {
    let seeds = corpus(target);
    assert!(
        seeds.len() >= min,
        "{target} corpus is missing: {} files",
        seeds.len()
    );
    let mut accepted = 0;
    for (name, data) in &seeds {
        check(data);
        let verdict = accepts(data);
        if name.starts_with("issue22_") {
            let e = verdict.expect_err(name);
            assert!(
                e.contains(field) && (e.contains("out of range") || e.contains("too large")),
                "{name}: {e}"
            );
        } else if name.starts_with("bad_") || name == "empty" {
            assert!(verdict.is_err(), "{name} is accepted");
        } else {
            verdict.unwrap_or_else(|e| panic!("{name}: {e}"));
            accepted += 1;
        }
    }
    assert!(accepted >= 2, "{target}: only {accepted} valid seeds");
}

#[test]
fn fault_plan_corpus() {
    replay(
        "fault_plan",
        10,
        check_fault_plan,
        |d| {
            FaultPlan::from_json(text(d))
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
        "faults[0].delay_ns",
    );
}

#[test]
fn scenario_file_corpus() {
    // A scenario is refused where its fabric is built: the preset size.
    replay(
        "scenario_file",
        6,
        check_scenario_file,
        |d| {
            let f = ScenarioFile::from_json(text(d)).map_err(|e| e.to_string())?;
            let preset = Preset::parse(f.preset.as_deref().unwrap_or("atlas800t-a2"))
                .map_err(|e| e.to_string())?;
            let fabric = build_preset(preset, f.servers.unwrap_or(1)).map_err(|e| e.to_string())?;
            f.build(&fabric, None)
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
        "servers = 4000000000",
    );
}

#[test]
fn fabric_file_corpus() {
    replay(
        "fabric_file",
        5,
        check_fabric_file,
        |d| {
            Fabric::from_fabric_json(text(d))
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
        "links[1].latency_ns",
    );
}

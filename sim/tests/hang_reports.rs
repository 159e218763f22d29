//! Hang reports, snapshot-tested as text (each snapshot reviewed by eye),
//! each asserting the root cause it must name.

use hccl_algos::algo::{AlgoSpec, Algorithm};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::faults::{run_with_faults, FaultPlan, LinkRef};
use hccl_sim::hang::{HangReport, RootCause, WaitState};
use hccl_sim::Scenario;
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions};

const RING: AlgoSpec = AlgoSpec::Flat(Algorithm::Ring);

/// Four single-NPU servers under one leaf switch (npu0..npu3, leaf0).
fn leaf(n: u32) -> Fabric {
    build_preset_with(Preset::LeafSpine, n, &PresetOptions::default()).unwrap()
}

fn all_reduce(n: u32) -> CollectiveArgs {
    CollectiveArgs::new(CollectiveKind::AllReduce, 256, DataType::Fp32, n).with_op(ReduceOp::Sum)
}

/// World AllReduce (ring, 1 KiB) on 4 ranks under `plan`.
fn world_hang(plan: &FaultPlan) -> HangReport {
    let f = leaf(4);
    let mut sc = Scenario::new(&f).seed(7);
    let w = sc.world();
    sc.collective(w, all_reduce(4), RING).unwrap();
    let run = run_with_faults(&sc, plan).unwrap();
    run.hang(&sc, "hccl sim --scenario s.json --faults f.json --seed 7")
        .expect("a hang")
}

#[test]
fn crashed_rank() {
    let h = world_hang(&FaultPlan::new().crash_at(2, 2500));
    // Rank 2 crashed before its step-1 send could leave (α = 2 us after the
    // step-0 receive): the ignored timeout armed for it is no stop time.
    assert!(h.time_ns < 1_000_000, "{}", h.time_ns);
    assert!(matches!(
        h.root_causes[0],
        RootCause::CrashedRank { rank: 2, .. }
    ));
    // Waits on the crashed rank name the crash, not a missing post.
    let on_2: Vec<&WaitState> = h
        .ranks
        .iter()
        .flat_map(|r| &r.waits)
        .filter(|w| w.peer == 2)
        .map(|w| &w.state)
        .collect();
    assert_eq!(on_2.len(), 7, "rank 1's 3 sends and rank 3's 4 receives");
    assert!(on_2
        .iter()
        .all(|s| **s == WaitState::PeerCrashedBeforePosting));
    let text = h.to_text();
    assert!(text.contains("rank 2 crashed before posting the matching receive"));
    assert!(!text.contains("rank 2 has not posted"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn missing_rank() {
    let h = world_hang(&FaultPlan::new().skip(3, 0));
    assert!(matches!(
        h.root_causes[..],
        [RootCause::NeverCalled { rank: 3, op: 0, .. }]
    ));
    // The queue drained: the stop is the last real event (the last
    // delivery), not a timeout that never became due.
    assert!(h.time_ns >= h.last_activity_ns && h.time_ns < 1_000_000);
    insta::assert_snapshot!(h.to_text());
}

#[test]
fn dead_link_without_alternative_route() {
    let h = world_hang(&FaultPlan::new().link_down(LinkRef::nodes("npu3", "leaf0"), 0));
    assert!(matches!(
        h.root_causes[..],
        [RootCause::DeadLink {
            alternative_route: false,
            ..
        }]
    ));
    insta::assert_snapshot!(h.to_text());
}

#[test]
fn mismatched_counts() {
    let h = world_hang(&FaultPlan::new().wrong_args(1, 0, Some(128), None, None, None));
    assert!(
        matches!(&h.root_causes[..], [RootCause::MismatchedArguments { field, .. }] if field == "count")
    );
    insta::assert_snapshot!(h.to_text());
}

#[test]
fn two_communicator_ordering_deadlock() {
    let f = leaf(2);
    let mut sc = Scenario::new(&f).seed(7);
    let a = sc.communicator("a", &[0, 1]).unwrap();
    let b = sc.communicator("b", &[0, 1]).unwrap();
    let op_a = sc.collective(a, all_reduce(2), RING).unwrap();
    let op_b = sc.collective(b, all_reduce(2), RING).unwrap();
    sc.rank_order(1, &[op_b, op_a]).unwrap();
    let run = run_with_faults(&sc, &FaultPlan::new()).unwrap();
    let h = run
        .hang(
            &sc,
            "hccl sim --scenario examples/scenarios/two_comm_deadlock.json --seed 7",
        )
        .unwrap();
    assert!(
        matches!(&h.root_causes[..], [RootCause::CommunicatorCycle { ranks, comms, .. }] if ranks == &[0, 1] && comms == &["a", "b"])
    );
    insta::assert_snapshot!(h.to_text());
    // The JSON form carries the same causes.
    let v: serde_json::Value = serde_json::from_str(&h.to_json()).unwrap();
    assert_eq!(v["root_causes"][0]["cause"], "communicator_cycle");
    assert_eq!(v["seed"], 7);
}

#[test]
fn a_skip_on_one_communicator_is_no_cross_communicator_cycle() {
    // examples/scenarios/two_comms_ok.json under examples/faults/skip_rank3.json.
    let f = leaf(4);
    let mut sc = Scenario::new(&f).seed(7);
    let w = sc.world();
    let pairs = sc.communicator("pairs", &[0, 2]).unwrap();
    sc.collective(w, all_reduce(4), RING).unwrap();
    let bcast =
        CollectiveArgs::new(CollectiveKind::Broadcast, 1024, DataType::Fp32, 2).with_root(1);
    sc.collective(pairs, bcast, RING).unwrap();
    let gather = CollectiveArgs::new(CollectiveKind::AllGather, 256, DataType::Fp16, 4);
    sc.collective(w, gather, RING).unwrap();
    let run = run_with_faults(&sc, &FaultPlan::new().skip(3, 0)).unwrap();
    let h = run.hang(&sc, "r").unwrap();
    assert!(
        matches!(
            h.root_causes[..],
            [RootCause::NeverCalled { rank: 3, op: 0, .. }]
        ),
        "{:?}",
        h.root_causes
    );
    // Tags read phase:tag, not the raw phase << 24 encoding.
    let text = h.to_text();
    assert!(
        text.contains(" tag 0:") && !text.contains("tag 16777216"),
        "{text}"
    );
}

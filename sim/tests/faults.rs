//! Every fault kind's effect, on hand-computable cases, plus the plan
//! format's strictness and determinism.

use hccl_algos::algo::{AlgoSpec, Algorithm};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::schedule::{BufKind, BufferSizes, Deps, Op, RankSchedule, Region, Step};
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::faults::{run_with_faults, FaultError, FaultPlan, FaultRun, LinkRef};
use hccl_sim::hang::{RootCause, WaitState};
use hccl_sim::{FixedPlans, Scenario};
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions};

/// `n` single-NPU servers: 25 GB/s and 1000 ns links, α = 2000 ns.
fn fabric(preset: Preset, n: u32) -> Fabric {
    let f = build_preset_with(preset, n, &PresetOptions::default()).unwrap();
    assert_eq!(
        f.params().msg_overhead_ns,
        2000,
        "α the hand computations assume"
    );
    f
}

fn sched(rank: u32, bytes: u64, op: Op) -> RankSchedule {
    RankSchedule {
        rank,
        buffers: BufferSizes {
            input: bytes,
            output: bytes,
            scratch: 0,
        },
        steps: vec![Step {
            op,
            deps: Deps::NONE,
        }],
    }
}

/// Rank 0 sends `bytes` to rank 1 (tag 7).
fn p2p(bytes: u64) -> FixedPlans {
    FixedPlans {
        label: "p2p".into(),
        dtype: DataType::Uint8,
        ranks: vec![
            sched(
                0,
                bytes,
                Op::Send {
                    peer: 1,
                    tag: 7,
                    src: Region::new(BufKind::Input, 0, bytes),
                },
            ),
            sched(
                1,
                bytes,
                Op::Recv {
                    peer: 0,
                    tag: 7,
                    dst: Region::new(BufKind::Output, 0, bytes),
                },
            ),
        ],
    }
}

fn p2p_run(plan: &FaultPlan) -> FaultRun {
    let f = fabric(Preset::Ring, 2);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(w, p2p(25_000)).unwrap(); // 1000 ns at 25 GB/s
    run_with_faults(&sc, plan).unwrap()
}

fn ends(run: &FaultRun) -> Vec<Option<u64>> {
    run.report.ops[0].end_ns.clone()
}

fn all_reduce(n: u32, count: u64) -> CollectiveArgs {
    CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, n).with_op(ReduceOp::Sum)
}

const RING: AlgoSpec = AlgoSpec::Flat(Algorithm::Ring);

/// A world AllReduce (ring) on `n` ranks of a ring fabric, under `plan`.
fn ring_all_reduce(n: u32, plan: &FaultPlan, seed: u64) -> (Fabric, FaultRun) {
    let f = fabric(Preset::Ring, n);
    let run = {
        let mut sc = Scenario::new(&f).seed(seed);
        let w = sc.world();
        sc.collective(w, all_reduce(n, 1024), RING).unwrap();
        run_with_faults(&sc, plan).unwrap()
    };
    (f, run)
}

// ---- the plan format ------------------------------------------------------

#[test]
fn plan_json_round_trips_and_rejects_unknown_fields_with_path() {
    let text = r#"{"faults": [
        {"kind": "link_down", "link": ["npu3", "leaf0"], "at_ns": 50000},
        {"kind": "link_degraded", "link": {"ranks": [0, 8]}, "bandwidth_factor": 0.25, "until_ns": 9},
        {"kind": "link_down", "link": 4, "directed": true},
        {"kind": "jitter", "max_ns": 500, "from": 1},
        {"kind": "drop", "from": 2, "to": 3, "nth": 1},
        {"kind": "drop", "probability": 0.5},
        {"kind": "crash", "rank": 5, "at_ns": 120000},
        {"kind": "crash", "rank": 6, "at_op": 2},
        {"kind": "slow_rank", "rank": 1, "delay_ns": 20000},
        {"kind": "skip", "rank": 7, "op": 1},
        {"kind": "wrong_args", "rank": 4, "op": 0, "count": 512, "dtype": "fp16", "reduce_op": "max", "root": 1}
    ]}"#;
    let plan = FaultPlan::from_json(text).unwrap();
    assert_eq!(plan.faults.len(), 11);
    assert_eq!(FaultPlan::from_json(&plan.to_json()).unwrap(), plan);
    assert_eq!(plan.faults[0].kind(), "link_down");

    let e = FaultPlan::from_json(r#"{"faults": [{"kind": "crash", "rank": 1, "at_nss": 5}]}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("faults[0]") && e.contains("at_nss") && e.contains("\"rank\":1"),
        "{e}"
    );
    let e = FaultPlan::from_json(r#"{"faults": [], "seed": 3}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("$.seed = 3"), "{e}");
    let e = FaultPlan::from_json(r#"{"faults": [{"kind": "drop", "probability": 1.5}]}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("faults[0].probability = 1.5") && e.contains("[0, 1]"),
        "{e}"
    );
    let e = FaultPlan::from_json(r#"{"faults": [{"kind": "drop", "nth": 2, "from": 1}]}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("faults[0].to"), "{e}");
    let e = FaultPlan::from_json(r#"{"faults": [{"kind": "crash", "rank": 1}]}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("at_ns or at_op"), "{e}");
    let e = FaultPlan::from_json(r#"{"faults": [{"kind": "melt", "rank": 1}]}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("faults[0]") && e.contains("melt"), "{e}");
    let e = FaultPlan::from_json("{\"faults\": [\n  {\"kind\": }]}").unwrap_err();
    assert!(matches!(e, FaultError::Syntax { line: 2, .. }), "{e}");
}

#[test]
fn times_past_the_accepted_range_are_refused_with_the_field() {
    // Issue 22: two slow_rank faults on one rank, each u64::MAX, overflowed
    // when the delays were combined.
    let text = r#"{"faults": [
        {"kind": "slow_rank", "rank": 1, "delay_ns": 18446744073709551615},
        {"kind": "slow_rank", "rank": 1, "delay_ns": 18446744073709551615}]}"#;
    let e = FaultPlan::from_json(text).unwrap_err().to_string();
    assert_eq!(
        e,
        "fault plan: faults[0].delay_ns = 18446744073709551615: is out of range: accepted 0..=2147483647000000000 ns (2147483647 s, HCCL_EXEC_TIMEOUT's longest)"
    );
    for (fault, field) in [
        (
            r#"{"kind": "jitter", "max_ns": 18446744073709551615}"#,
            "max_ns",
        ),
        (
            r#"{"kind": "crash", "rank": 0, "at_ns": 18446744073709551615}"#,
            "at_ns",
        ),
        (
            r#"{"kind": "link_down", "link": 0, "at_ns": 18446744073709551615}"#,
            "at_ns",
        ),
        (
            r#"{"kind": "link_down", "link": 0, "until_ns": 18446744073709551615}"#,
            "until_ns",
        ),
        (
            r#"{"kind": "link_degraded", "link": 0, "bandwidth_factor": 0.5, "until_ns": 18446744073709551615}"#,
            "until_ns",
        ),
    ] {
        let e = FaultPlan::from_json(&format!(r#"{{"faults": [{fault}]}}"#))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "faults[0].{field} = 18446744073709551615: is out of range"
            )),
            "{e}"
        );
    }
    // Builder plans are checked when resolved, too.
    let f = fabric(Preset::Ring, 2);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(w, p2p(8)).unwrap();
    let plan = FaultPlan::new().slow_rank(1, u64::MAX);
    let e = run_with_faults(&sc, &plan).unwrap_err().to_string();
    assert!(e.contains("faults[0].delay_ns"), "{e}");
    // In-range delays whose sum passes u64::MAX saturate: the slow rank
    // never starts, and the exec timeout says so, instead of a wrap.
    let max = hccl_topology::limits::MAX_TIME_NS;
    let plan = (0..9).fold(FaultPlan::new(), |p, _| p.slow_rank(1, max));
    let run = run_with_faults(&sc, &plan).unwrap();
    assert_eq!(run.report.ops[0].end_ns[1], None, "{:?}", run.report.ops[0]);
    let hang = run.hang(&sc, "replay").unwrap().to_text();
    assert!(
        hang.contains("rank 1 never starts op #0: its start delays (slow_rank faults) add up past 18446744073709551615 ns"),
        "{hang}"
    );
}

#[test]
fn plans_are_checked_against_fabric_and_scenario() {
    let f = fabric(Preset::LeafSpine, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 16), RING).unwrap();
    let err = |plan: FaultPlan| run_with_faults(&sc, &plan).unwrap_err().to_string();
    let e = err(FaultPlan::new().link_down(LinkRef::nodes("npu9", "leaf0"), 0));
    assert!(
        e.contains("faults[0].link[0] = \"npu9\"") && e.contains("'npu0'"),
        "{e}"
    );
    let e = err(FaultPlan::new().link_down(LinkRef::nodes("npu0", "npu1"), 0));
    assert!(e.contains("no link joins"), "{e}");
    let e = err(FaultPlan::new().link_down(LinkRef::Id(10_000), 0));
    assert!(e.contains("= 10000") && e.contains("links 0.."), "{e}");
    let e = err(FaultPlan::new().crash_at(4, 0));
    assert!(
        e.contains("faults[0].rank = 4") && e.contains("ranks 0..4"),
        "{e}"
    );
    let e = err(FaultPlan::new().skip(0, 3));
    assert!(
        e.contains("faults[0].op = 3") && e.contains("ops 0..1"),
        "{e}"
    );
    let e = err(FaultPlan::new().wrong_args(0, 0, Some(u64::MAX), None, None, None));
    assert!(e.contains("faults[0]") && e.contains("overflows"), "{e}");
}

// ---- link faults ----------------------------------------------------------

#[test]
fn degraded_link_multiplies_the_transfer_time() {
    // No fault: α 2000 + 1000 ns; the receiver one hop (1000 ns) later.
    assert_eq!(
        ends(&p2p_run(&FaultPlan::new())),
        vec![Some(3000), Some(4000)]
    );
    // Half the bandwidth: the 1000 ns transfer takes 2000 ns.
    let plan = FaultPlan::new().link_degraded(LinkRef::route(0, 1), 0.5, 0, None);
    assert_eq!(ends(&p2p_run(&plan)), vec![Some(4000), Some(5000)]);
    // A quarter: 4000 ns.
    let plan = FaultPlan::new().link_degraded(LinkRef::nodes("npu0", "npu1"), 0.25, 0, None);
    assert_eq!(ends(&p2p_run(&plan)), vec![Some(6000), Some(7000)]);
}

#[test]
fn degradation_window_ends_mid_transfer() {
    // Half rate over [0, 2500): the flow starts at 2000, sends 6250 B by
    // 2500, then the remaining 18750 B at full rate take 750 ns.
    let plan = FaultPlan::new().link_degraded(LinkRef::route(0, 1), 0.5, 0, Some(2500));
    let run = p2p_run(&plan);
    assert_eq!(ends(&run), vec![Some(3250), Some(4250)]);
    assert!(run
        .log
        .link_changes
        .iter()
        .any(|c| c.time_ns == 2500 && c.gbps == 25.0));
}

#[test]
fn link_down_for_a_window_delays_and_forever_hangs() {
    // Down over [0, 10000): the flow waits, then takes its 1000 ns.
    let plan = FaultPlan::new().link_down_window(LinkRef::route(0, 1), 0, 10_000);
    assert_eq!(ends(&p2p_run(&plan)), vec![Some(11_000), Some(12_000)]);
    // Down for good: a hang whose cause is the dead link.
    let plan = FaultPlan::new().link_down(LinkRef::route(0, 1), 0);
    let run = p2p_run(&plan);
    assert_eq!(ends(&run), vec![None, None]);
    let f = fabric(Preset::Ring, 2);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(w, p2p(25_000)).unwrap();
    let hang = run.hang(&sc, "replay").unwrap();
    assert!(
        matches!(
            hang.root_causes.as_slice(),
            [RootCause::DeadLink { messages, .. }] if messages == &[(0, 1)]
        ),
        "{:?}",
        hang.root_causes
    );
}

#[test]
fn a_ring_reroutes_nothing_but_the_report_sees_the_other_way_round() {
    // Ring of 4: npu1-npu2 down; the other way round the ring exists.
    let plan = FaultPlan::new().link_down(LinkRef::nodes("npu1", "npu2"), 0);
    let f = fabric(Preset::Ring, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 1024), RING).unwrap();
    let run = run_with_faults(&sc, &plan).unwrap();
    let hang = run.hang(&sc, "r").unwrap();
    let dead = hang
        .root_causes
        .iter()
        .find_map(|c| match c {
            RootCause::DeadLink {
                alternative_route,
                links,
                ..
            } => Some((*alternative_route, links.clone())),
            _ => None,
        })
        .expect("a dead-link cause");
    assert!(dead.0, "npu1 reaches npu2 the other way round the ring");
    assert!(dead
        .1
        .iter()
        .all(|l| (l.from == "npu1" && l.to == "npu2") || (l.from == "npu2" && l.to == "npu1")));
}

// ---- message faults -------------------------------------------------------

#[test]
fn jitter_is_deterministic_per_seed_and_bounded() {
    let plan = FaultPlan::new().jitter(5000);
    let base = ring_all_reduce(4, &FaultPlan::new(), 1).1.report;
    let a = ring_all_reduce(4, &plan, 1).1;
    let b = ring_all_reduce(4, &plan, 1).1;
    assert_eq!(a.report.trace_hash, b.report.trace_hash);
    assert_eq!(a.report.ops[0].end_ns, b.report.ops[0].end_ns);
    assert!(a.log.jittered.0 > 0);
    let t0 = base.ops[0].time_ns.unwrap();
    let t = a.report.ops[0].time_ns.unwrap();
    // Ring AllReduce on 4 ranks: 2(n-1) = 6 sequential messages per rank,
    // each delayed by at most 5000 ns.
    assert!(t > t0 && t <= t0 + 6 * 5000, "{t0} -> {t}");
    let differs =
        (2..6).any(|s| ring_all_reduce(4, &plan, s).1.report.trace_hash != a.report.trace_hash);
    assert!(differs, "other seeds draw other delays");
}

#[test]
fn nth_drop_hangs_on_that_message() {
    let plan = FaultPlan::new().drop_nth(0, 1, 1);
    let (f, run) = ring_all_reduce(4, &plan, 0);
    assert_eq!(run.log.drops.len(), 1);
    let d = &run.log.drops[0];
    assert_eq!((d.src, d.dst, d.op), (0, 1, 0));
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 1024), RING).unwrap();
    let hang = run.hang(&sc, "r").unwrap();
    let r1 = hang.ranks.iter().find(|r| r.rank == 1).unwrap();
    assert!(r1
        .waits
        .iter()
        .any(|w| w.peer == 0 && w.state == WaitState::Dropped));
    assert!(
        hang.root_causes.iter().any(|c| matches!(
            c,
            RootCause::DroppedMessage {
                src: 0,
                dst: 1,
                op: 0,
                ..
            }
        )),
        "{:?}",
        hang.root_causes
    );
}

#[test]
fn nth_drop_with_op_counts_within_that_op() {
    // Two ring AllReduces; rank 0 sends to rank 1 several times in each.
    // `nth: 1, op: 1` is the first 0 -> 1 message of op 1, not the first of
    // the run (which is in op 0).
    let f = fabric(Preset::Ring, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 1024), RING).unwrap();
    sc.collective(w, all_reduce(4, 1024), RING).unwrap();
    let plan = FaultPlan::from_json(
        r#"{"faults": [{"kind": "drop", "from": 0, "to": 1, "nth": 1, "op": 1}]}"#,
    )
    .unwrap();
    let run = run_with_faults(&sc, &plan).unwrap();
    assert!(run.report.ops[0].time_ns.is_some(), "op 0 is untouched");
    assert_eq!(run.log.drops.len(), 1, "{:?}", run.log);
    let d = &run.log.drops[0];
    assert_eq!((d.src, d.dst, d.op), (0, 1, 1));
    // The first 0 -> 1 message of a ring AllReduce carries tag 0:0.
    assert_eq!(d.tag, 0);
    assert!(run.log.unfired.is_empty(), "{:?}", run.log.unfired);
    // Without `op`, nth still counts over the whole run.
    let global = run_with_faults(&sc, &FaultPlan::new().drop_nth(0, 1, 1)).unwrap();
    assert_eq!(global.log.drops[0].op, 0);
}

#[test]
fn faults_that_never_fire_are_listed_with_their_index() {
    let f = fabric(Preset::Ring, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 64), RING).unwrap();
    let plan = FaultPlan::from_json(
        r#"{"faults": [
            {"kind": "slow_rank", "rank": 1, "delay_ns": 100},
            {"kind": "drop", "from": 0, "to": 1, "nth": 100, "op": 0},
            {"kind": "crash", "rank": 3, "at_ns": 1000000000}
        ]}"#,
    )
    .unwrap();
    let run = run_with_faults(&sc, &plan).unwrap();
    assert!(run.report.stall.is_none());
    // A 4-rank ring AllReduce: 3 reduce-scatter + 3 all-gather sends 0 -> 1.
    let lines = run.log.unfired_lines();
    assert_eq!(
        lines,
        vec![
            "fault 1 (drop of message 100 from rank 0 to rank 1 in op #0) never fired: only 6 matching message(s) were sent",
            "fault 2 (crash of rank 3 at 1000000000 ns) never fired",
        ],
        "the slow rank (fault 0) did act"
    );
    let json = serde_json::to_value(&run.log).unwrap();
    assert_eq!(json["unfired"][0]["fault"], 1);
    // A plan whose faults all act lists none (and its JSON has no field).
    let run = run_with_faults(&sc, &FaultPlan::new().drop_nth(0, 1, 1)).unwrap();
    assert!(run.log.unfired.is_empty());
    assert!(serde_json::to_value(&run.log)
        .unwrap()
        .get("unfired")
        .is_none());
}

#[test]
fn drop_probability_zero_changes_nothing_and_one_hangs() {
    let base = ring_all_reduce(4, &FaultPlan::new(), 3).1.report;
    let zero = ring_all_reduce(4, &FaultPlan::new().drop_probability(0.0), 3)
        .1
        .report;
    assert_eq!(zero.ops[0].end_ns, base.ops[0].end_ns);
    let one = ring_all_reduce(4, &FaultPlan::new().drop_probability(1.0), 3).1;
    assert!(one.report.stall.is_some());
    assert_eq!(one.log.drops.len(), 4, "every rank's first send is lost");
}

// ---- rank faults ----------------------------------------------------------

#[test]
fn crash_at_a_time_is_named_in_the_hang_report() {
    let plan = FaultPlan::new().crash_at(2, 2500);
    let (f, run) = ring_all_reduce(4, &plan, 0);
    assert_eq!(run.log.crashes.len(), 1);
    assert_eq!(
        (run.log.crashes[0].rank, run.log.crashes[0].time_ns),
        (2, 2500)
    );
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 1024), RING).unwrap();
    let hang = run.hang(&sc, "r").unwrap();
    assert!(
        matches!(&hang.root_causes[0], RootCause::CrashedRank { rank: 2, waited_on_by, .. } if !waited_on_by.is_empty())
    );
}

#[test]
fn crash_at_an_op_lets_earlier_ops_finish() {
    let f = fabric(Preset::Ring, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 64), RING).unwrap();
    sc.collective(w, all_reduce(4, 64), RING).unwrap();
    let run = run_with_faults(&sc, &FaultPlan::new().crash_at_op(3, 1)).unwrap();
    assert!(run.report.ops[0].time_ns.is_some(), "op 0 completes");
    assert_eq!(
        run.report.ops[1].start_ns[3], None,
        "rank 3 never starts op 1"
    );
    assert_eq!(run.log.crashes[0].op, Some(1));
    // A crash after the rank finished everything does no harm.
    let run = run_with_faults(&sc, &FaultPlan::new().crash_at(3, 1_000_000_000)).unwrap();
    assert!(run.report.stall.is_none() && run.log.crashes.is_empty());
}

#[test]
fn slow_rank_starts_each_op_late() {
    // Rank 1 posts its receive at 5000: match, then α + 1000 ns.
    let run = p2p_run(&FaultPlan::new().slow_rank(1, 5000));
    assert_eq!(ends(&run), vec![Some(8000), Some(9000)]);
    assert_eq!(run.report.ops[0].start_ns, vec![Some(0), Some(5000)]);
}

#[test]
fn skipped_op_is_a_hang_naming_the_rank_that_never_called() {
    let f = fabric(Preset::Ring, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 64), RING).unwrap();
    let run = run_with_faults(&sc, &FaultPlan::new().skip(3, 0)).unwrap();
    assert_eq!(run.log.skips.len(), 1);
    let hang = run.hang(&sc, "r").unwrap();
    assert!(
        hang.ranks.iter().all(|r| r.rank != 3),
        "rank 3 finished (nothing left)"
    );
    assert!(
        matches!(&hang.root_causes[..], [RootCause::NeverCalled { rank: 3, op: 0, why, .. }] if why.contains("skipped")),
        "{:?}",
        hang.root_causes
    );
}

#[test]
fn wrong_count_fails_every_rank_naming_field_values_and_peer() {
    let f = fabric(Preset::Ring, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 64), RING).unwrap();
    let run = run_with_faults(
        &sc,
        &FaultPlan::new().wrong_args(2, 0, Some(32), None, None, None),
    )
    .unwrap();
    let fs = &run.log.failures;
    let mut ranks: Vec<u32> = fs.iter().map(|f| f.rank).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, vec![0, 1, 2, 3], "every rank of the op fails");
    for f in fs {
        assert_eq!(f.field, "count");
        if f.rank == 2 {
            assert_eq!(
                (f.local.as_str(), f.remote.as_str(), f.peer),
                ("32", "64", 0)
            );
        } else {
            assert_eq!(
                (f.local.as_str(), f.remote.as_str(), f.peer),
                ("64", "32", 2)
            );
        }
        assert!(
            f.message.contains("EI0005") && f.message.contains("count mismatch"),
            "{}",
            f.message
        );
    }
    assert_eq!(run.log.altered, vec![(2, 0)], "the altered call is counted");
    let hang = run.hang(&sc, "r").unwrap();
    assert!(hang.ranks.iter().all(|r| r.state == "failed"));
    let text = hang.to_text();
    assert!(
        text.starts_with("FAILED: EI0005 argument mismatch in op #0") && !text.contains("HANG"),
        "{text}"
    );
}

#[test]
fn crashed_sender_starts_no_message_after_the_crash() {
    // Matched at 0; the flow would enter the fabric at α = 2000 and the
    // receive complete at 4000. A crash at 1000 stops it: nothing arrives.
    let run = p2p_run(&FaultPlan::new().crash_at(0, 1000));
    assert_eq!(ends(&run), vec![None, None]);
    let f = fabric(Preset::Ring, 2);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(w, p2p(25_000)).unwrap();
    let hang = run.hang(&sc, "r").unwrap();
    let r1 = hang.ranks.iter().find(|r| r.rank == 1).unwrap();
    assert_eq!(r1.waits[0].state, WaitState::PeerCrashed);
    // A crash after the flow entered the fabric (2000) lets it arrive: the
    // bytes already left; only the crashed rank's own send never completes.
    let run = p2p_run(&FaultPlan::new().crash_at(0, 2500));
    assert_eq!(ends(&run), vec![None, Some(4000)]);
}

#[test]
fn distinct_runs_hash_differently_and_the_same_run_the_same() {
    let f = fabric(Preset::Ring, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 64), RING).unwrap();
    let hash = |plan: &FaultPlan| run_with_faults(&sc, plan).unwrap().report.trace_hash;
    let a = FaultPlan::new().wrong_args(2, 0, Some(32), None, None, None);
    let b = FaultPlan::new().wrong_args(2, 0, Some(16), None, None, None);
    let c = FaultPlan::new().skip(3, 0);
    assert_eq!(hash(&a), hash(&a));
    assert_ne!(hash(&a), hash(&b), "both fail at 0 ns with no event");
    assert_ne!(hash(&a), hash(&c));
    assert_ne!(hash(&a), hash(&FaultPlan::new()));
}

#[test]
fn wrong_root_dtype_and_op_are_caught_too() {
    let f = fabric(Preset::Ring, 4);
    let check = |kind, plan: FaultPlan, field: &str| {
        let mut sc = Scenario::new(&f);
        let w = sc.world();
        let args = CollectiveArgs::new(kind, 64, DataType::Fp32, 4).with_op(ReduceOp::Sum);
        sc.collective(w, args, RING).unwrap();
        let run = run_with_faults(&sc, &plan).unwrap();
        assert_eq!(run.log.failures.len(), 4, "{field}");
        assert!(
            run.log.failures.iter().all(|f| f.field == field),
            "{:?}",
            run.log.failures
        );
    };
    check(
        CollectiveKind::Broadcast,
        FaultPlan::new().wrong_args(1, 0, None, None, None, Some(2)),
        "root",
    );
    check(
        CollectiveKind::AllReduce,
        FaultPlan::new().wrong_args(1, 0, None, Some(DataType::Fp16), None, None),
        "dtype",
    );
    check(
        CollectiveKind::AllReduce,
        FaultPlan::new().wrong_args(1, 0, None, None, Some(ReduceOp::Max), None),
        "op",
    );
    // A root on AllReduce is not compared: the run completes.
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.collective(w, all_reduce(4, 64), RING).unwrap();
    let run = run_with_faults(
        &sc,
        &FaultPlan::new().wrong_args(1, 0, None, None, None, Some(2)),
    )
    .unwrap();
    assert!(run.report.stall.is_none() && run.log.failures.is_empty());
}

#[test]
fn faults_combine_and_same_seed_same_trace() {
    let plan = FaultPlan::new()
        .jitter(300)
        .link_degraded(LinkRef::nodes("npu0", "npu1"), 0.5, 0, Some(40_000))
        .slow_rank(2, 700)
        .drop_probability(0.02);
    let runs: Vec<_> = (0..2).map(|_| ring_all_reduce(8, &plan, 42).1).collect();
    assert_eq!(runs[0].report.trace_hash, runs[1].report.trace_hash);
    assert_eq!(runs[0].log, runs[1].log);
    let plain = ring_all_reduce(8, &FaultPlan::new(), 42).1;
    assert_ne!(plain.report.trace_hash, runs[0].report.trace_hash);
}

#[test]
fn exec_timeout_names_a_slow_op() {
    let f = fabric(Preset::Ring, 2);
    let mut sc = Scenario::new(&f).exec_timeout_ns(Some(10_000));
    let w = sc.world();
    sc.op(w, p2p(25_000)).unwrap();
    // A hundredth of the bandwidth: 100 us of transfer, timeout 10 us.
    let plan = FaultPlan::new().link_degraded(LinkRef::route(0, 1), 0.01, 0, None);
    let run = run_with_faults(&sc, &plan).unwrap();
    let hang = run.hang(&sc, "r").unwrap();
    assert_eq!(hang.time_ns, 10_000);
    assert!(
        matches!(
            hang.root_causes[..],
            [RootCause::TooSlow {
                op: 0,
                timeout_ns: 10_000,
                ..
            }]
        ),
        "{:?}",
        hang.root_causes
    );
    assert!(hang
        .ranks
        .iter()
        .flat_map(|r| &r.waits)
        .all(|w| w.state == WaitState::InFlight));
}

//! Symmetry folding (`Scenario::symmetry`): a folded run's report equals
//! the full run's bit for bit (every rank's start and end, every link's
//! busy time and bytes), and whatever breaks the symmetry runs in full.

use hccl_algos::algo::{AlgoSpec, Algorithm, Levels};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::DataType;
use hccl_sim::faults::{run_with_faults, FaultPlan};
use hccl_sim::{Scenario, SimReport};
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions};

fn hier() -> AlgoSpec {
    AlgoSpec::Hierarchical(Levels {
        level0: Some(Algorithm::Ring),
        level1: Some(Algorithm::Ring),
        level2: None,
    })
}

/// Atlas 800T A2 servers (8 NPUs), `per_leaf` servers under each leaf, 2
/// spines (each leaf–spine link carries half the leaf's ports: the 8 ring
/// flows of one server pair fit on either spine).
fn atlas(servers: u32, per_leaf: u32) -> Fabric {
    let opts = PresetOptions {
        servers_per_leaf: Some(per_leaf),
        spines: Some(2),
        ..PresetOptions::default()
    };
    build_preset_with(Preset::Atlas800tA2, servers, &opts).unwrap()
}

fn scenario<'f>(f: &'f Fabric, count: u64, algo: AlgoSpec, symmetry: bool) -> Scenario<'f> {
    let mut sc = Scenario::new(f).window(4).symmetry(symmetry);
    let w = sc.world();
    let n = f.world_size();
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, n);
    sc.collective(w, args, algo).unwrap();
    sc
}

/// Everything of a report that describes the simulated system (not the
/// engine's counters and trace hash).
fn system(r: &SimReport) -> String {
    let ops = serde_json::to_string(&r.ops).unwrap();
    let links = serde_json::to_string(&r.links).unwrap();
    format!("{ops}\n{links}\n{}\n{:?}", r.end_time_ns, r.stall.is_some())
}

/// Runs `count` elements of `algo` on `f` both ways; returns the folded
/// period (0: ran in full).
fn both_ways(f: &Fabric, count: u64, algo: AlgoSpec) -> u64 {
    let full = scenario(f, count, algo, false).run().unwrap();
    let folded = scenario(f, count, algo, true).run().unwrap();
    assert_eq!(full.stats.folded_period, 0);
    assert!(full.stall.is_none() && folded.stall.is_none());
    // Every rank finished, at the same ns both ways.
    let ends = &full.ops[0].end_ns;
    assert_eq!(ends.len(), f.world_size() as usize);
    assert!(ends.iter().all(Option::is_some));
    assert_eq!(folded.ops[0].end_ns, full.ops[0].end_ns);
    assert_eq!(folded.ops[0].start_ns, full.ops[0].start_ns);
    assert_eq!(folded.links, full.links, "every link's busy time and bytes");
    assert_eq!(system(&folded), system(&full));
    if folded.stats.folded_period > 0 {
        assert!(folded.stats.events < full.stats.events);
    }
    folded.stats.folded_period
}

#[test]
fn hierarchical_allreduce_across_leaves_and_spines_folds_exactly() {
    // 16 servers, 2 per leaf: 8 leaves, so level 1 crosses spines, whose
    // ECMP choice (a hash of the pair) breaks the link orbits there: they
    // are slack links, checked never to limit a rate.
    let f = atlas(16, 2);
    let period = both_ways(&f, 128 * 1024, hier());
    assert_eq!(
        period, 16,
        "one leaf's two servers run, the others are images"
    );
}

#[test]
fn flat_ring_folds_exactly() {
    let f = atlas(8, 2);
    assert_eq!(both_ways(&f, 64 * 512, AlgoSpec::Flat(Algorithm::Ring)), 16);
    // A 1-D ring fabric: every rank is an image of rank 0.
    let ring = build_preset_with(Preset::Ring, 24, &PresetOptions::default()).unwrap();
    assert_eq!(
        both_ways(&ring, 24 * 1000, AlgoSpec::Flat(Algorithm::Ring)),
        1
    );
}

#[test]
fn uneven_blocks_run_in_full() {
    // 1 element more than a multiple of the ranks: one block is longer, so
    // ranks do not run images of each other's plans.
    let f = atlas(4, 2);
    assert_eq!(both_ways(&f, 32 * 100 + 1, hier()), 0);
}

#[test]
fn an_asymmetric_fabric_runs_in_full() {
    // 6 servers, 4 per leaf: leaves of 4 and 2 servers. No shift maps the
    // routes onto each other, so nothing folds; the result is the full run's.
    let f = atlas(6, 4);
    assert_eq!(both_ways(&f, 48 * 256, hier()), 0);
}

#[test]
fn a_fault_on_one_server_runs_in_full_with_the_full_result() {
    let f = atlas(8, 2);
    let plan = FaultPlan::from_json(
        r#"{"faults": [{"kind": "slow_rank", "rank": 9, "delay_ns": 20000}]}"#,
    )
    .unwrap();
    let count = 64 * 256;
    let faulted = run_with_faults(&scenario(&f, count, hier(), true), &plan).unwrap();
    let full = run_with_faults(&scenario(&f, count, hier(), false), &plan).unwrap();
    assert_eq!(faulted.report.stats.folded_period, 0);
    assert_eq!(system(&faulted.report), system(&full.report));
    assert_eq!(faulted.report.trace_hash, full.report.trace_hash);
    // The fault made the run asymmetric: server 1's ranks start later.
    let starts = &full.report.ops[0].start_ns;
    assert_ne!(starts[9], starts[1]);
    // Without it the same scenario folds.
    let clean = scenario(&f, count, hier(), true).run().unwrap();
    assert!(clean.stats.folded_period > 0);
}

/// The benchmark's default Atlas 800T A2 fabric (16 servers per leaf, 8
/// spines) at 4,096 ranks: 32 leaves, folded to one. Slow in debug builds:
/// `cargo test --release -p hccl-sim --test symmetry -- --ignored`.
#[test]
#[ignore]
fn hier_4096_on_the_default_atlas_fabric_folds_exactly() {
    let f = hccl_topology::build_preset(Preset::Atlas800tA2, 512).unwrap();
    assert_eq!(both_ways(&f, 1 << 28, hier()), 128);
}

#[test]
fn several_ops_fold_together() {
    // A ring then a hierarchical AllReduce on the world: both shift
    // symmetric, the second starts on each rank when its first ends.
    let f = atlas(8, 2);
    let n = f.world_size();
    let run = |symmetry: bool| {
        let mut sc = Scenario::new(&f).window(4).symmetry(symmetry);
        let w = sc.world();
        for (count, algo) in [
            (n as u64 * 300, AlgoSpec::Flat(Algorithm::Ring)),
            (n as u64 * 700, hier()),
        ] {
            let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, n);
            sc.collective(w, args, algo).unwrap();
        }
        sc.run().unwrap()
    };
    let (full, folded) = (run(false), run(true));
    assert_eq!(folded.stats.folded_period, 16);
    assert_eq!(full.ops.len(), 2);
    assert_eq!(system(&folded), system(&full));
}

#[test]
fn spines_that_can_limit_a_rate_run_in_full() {
    // One server per leaf and 8 spines: each leaf–spine link has one
    // port's bandwidth, and the 8 level-1 flows of a server pair hash onto
    // the spines unevenly, so some share a spine link (the spine choice
    // differs per pair: the servers' runs are not images of each other).
    let opts = PresetOptions {
        servers_per_leaf: Some(1),
        spines: Some(8),
        ..PresetOptions::default()
    };
    let f = build_preset_with(Preset::Atlas800tA2, 8, &opts).unwrap();
    assert_eq!(both_ways(&f, 64 * 1024, hier()), 0);
}

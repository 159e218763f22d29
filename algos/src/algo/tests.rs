//! Every algorithm × collective through the verifier.

use proptest::prelude::*;

use super::*;
use crate::collective::CollectiveArgs;
use crate::dtype::{DataType, ReduceOp};
use crate::verify::{verify, verify_with, VerifyOptions};

/// Arguments of `kind` for world `p`, with counts derived from `count`.
pub(crate) fn args_for(
    kind: CollectiveKind,
    p: u32,
    count: u64,
    root: u32,
    seed: u64,
) -> CollectiveArgs {
    CollectiveArgs::example(kind, p, count, DataType::Fp32, root, seed).unwrap()
}

/// Plans with `spec`, verifies, and returns the report; panics with the error.
pub(crate) fn check(
    args: &CollectiveArgs,
    spec: &AlgoSpec,
    layout: &GroupLayout,
) -> crate::verify::VerifyReport {
    let s =
        schedule(args, spec, layout).unwrap_or_else(|e| panic!("{spec} {}: plan: {e}", args.kind));
    verify(args, &s).unwrap_or_else(|e| {
        panic!(
            "{spec} {} p={} count={} root={} op={} in_place={}: {e}",
            args.kind, args.world_size, args.count, args.root, args.op, args.in_place
        )
    })
}

fn in_place_ok(kind: CollectiveKind) -> bool {
    !matches!(
        kind,
        CollectiveKind::AllToAllV
            | CollectiveKind::SendRecv
            | CollectiveKind::BatchSendRecv
            | CollectiveKind::Barrier
    )
}

#[test]
fn every_flat_algorithm_small_exhaustive() {
    for a in Algorithm::ALL {
        for kind in CollectiveKind::ALL {
            if !a.supports(kind) {
                continue;
            }
            for p in 1..=9u32 {
                for count in [0, 1, p as u64 - 1, p as u64 + 1, 3 * p as u64 + 2] {
                    for root in [0, p / 2, p - 1] {
                        for in_place in [false, true] {
                            if in_place && !in_place_ok(kind) {
                                continue;
                            }
                            let mut args =
                                args_for(kind, p, count, root, 1).with_in_place(in_place);
                            for op in ReduceOp::ALL {
                                args.op = op;
                                check(&args, &AlgoSpec::Flat(a), &GroupLayout::flat(p));
                                if !kind.is_reduction() {
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn count_zero_is_an_empty_plan() {
    for kind in CollectiveKind::ALL {
        if matches!(
            kind,
            CollectiveKind::Barrier | CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv
        ) {
            continue;
        }
        let args = args_for(kind, 5, 0, 0, 0);
        let args = if matches!(
            kind,
            CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV
        ) {
            CollectiveArgs::v_counts(
                kind == CollectiveKind::ReduceScatterV,
                vec![0; 5],
                DataType::Fp32,
            )
            .unwrap()
        } else if kind == CollectiveKind::AllToAllV {
            CollectiveArgs::all_to_all_v(vec![vec![0; 5]; 5], DataType::Fp32).unwrap()
        } else {
            args
        };
        let spec = AlgoSpec::Flat(Algorithm::supported_for(kind)[0]);
        for r in 0..5 {
            let (sizes, plan) = plan(&args, &spec, &GroupLayout::flat(5), r).unwrap();
            assert_eq!(plan.count(), 0, "{kind}");
            assert_eq!(sizes.input + sizes.output + sizes.scratch, 0, "{kind}");
        }
    }
}

#[test]
fn huge_counts_do_not_overflow_offsets() {
    // 3e9 fp64 elements = 24 GB per rank: offsets above 2^32 bytes.
    let count = 3_000_000_000u64;
    let args = CollectiveArgs::new(CollectiveKind::AllGather, count, DataType::Fp64, 4);
    let (sizes, plan) = plan(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(4),
        3,
    )
    .unwrap();
    assert_eq!(sizes.output, 4 * count * 8);
    let max_end = plan
        .flat_map(|s| {
            let (r, w) = crate::verify::accesses_of(&s.op);
            r.into_iter().chain(w)
        })
        .map(|r| r.end())
        .max()
        .unwrap();
    assert_eq!(
        max_end,
        4 * count * 8,
        "the last block ends exactly at the buffer's end"
    );
    // The verifier works on the same sizes (it tracks ranges, not bytes).
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp64, 3);
    let rep = check(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(3),
    );
    assert_eq!(rep.bytes_sent, 3 * 4 * (count * 8 / 3));
}

#[test]
fn plans_are_lazy_and_small() {
    // A plan holds a few words whatever the rank count: check the boxed
    // generator does not grow with p by stepping a 16384-rank ring plan.
    let p = 16384;
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, 1 << 20, DataType::Fp32, p);
    let (_, mut plan) = plan(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(p),
        77,
    )
    .unwrap();
    assert_eq!(
        plan.size_hint().1,
        None,
        "a generator, not a materialized Vec"
    );
    assert!(plan.next().is_some());
    assert_eq!(plan.count(), 4 * (p as usize - 1) - 1);
}

#[test]
fn large_world_fixed_cases() {
    for (kind, p) in [
        (CollectiveKind::AllReduce, 1024),
        (CollectiveKind::AllGather, 1000),
        (CollectiveKind::Broadcast, 1024),
    ] {
        let args = CollectiveArgs::new(kind, 5000, DataType::Fp32, p).with_root(p / 3);
        let s = schedule(
            &args,
            &AlgoSpec::Flat(Algorithm::Ring),
            &GroupLayout::flat(p),
        )
        .unwrap();
        verify_with(
            &args,
            &s,
            &VerifyOptions {
                check_races: false,
                ..VerifyOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{kind} p={p}: {e}"));
    }
}

#[test]
fn unsupported_pairs_name_the_alternatives() {
    let args = CollectiveArgs::new(CollectiveKind::AllToAll, 4, DataType::Fp32, 4);
    let e = plan(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(4),
        0,
    )
    .err()
    .unwrap();
    assert!(
        e.to_string()
            .contains("ring does not implement alltoall; use one of: mesh, pairwise"),
        "{e}"
    );
}

#[test]
fn hierarchical_small_exhaustive() {
    use CollectiveKind as K;
    let level_algos = [
        None,
        Some(Algorithm::Ring),
        Some(Algorithm::Mesh),
        Some(Algorithm::HalvingDoubling),
        Some(Algorithm::Tree),
    ];
    for (pods, servers, per) in [
        (1, 1, 1),
        (1, 1, 4),
        (1, 2, 4),
        (1, 3, 2),
        (1, 4, 1),
        (1, 5, 3),
        (2, 2, 2),
        (3, 2, 2),
        (2, 3, 1),
    ] {
        let layout = GroupLayout::pods(pods, servers, per);
        let p = layout.world_size();
        for kind in [
            K::AllReduce,
            K::AllGather,
            K::ReduceScatter,
            K::Broadcast,
            K::Reduce,
        ] {
            for &l0 in &level_algos {
                for &l1 in &level_algos {
                    for l2 in [None, Some(Algorithm::Ring)] {
                        let spec = AlgoSpec::Hierarchical(Levels {
                            level0: l0,
                            level1: l1,
                            level2: l2,
                        });
                        for count in [0, 1, p as u64 + 3, 4 * p as u64] {
                            for root in [0, p - 1, p / 2] {
                                for in_place in [false, true] {
                                    for op in [ReduceOp::Sum, ReduceOp::Avg] {
                                        let args =
                                            CollectiveArgs::new(kind, count, DataType::Fp32, p)
                                                .with_root(root)
                                                .with_in_place(in_place)
                                                .with_op(op);
                                        match schedule(&args, &spec, &layout) {
                                            Ok(s) => {
                                                verify(&args, &s).unwrap_or_else(|e| {
                                                    panic!("{spec} {kind} {pods}x{servers}x{per} count={count} root={root} in_place={in_place} {op}: {e}")
                                                });
                                            }
                                            Err(AlgoError::Unsupported { .. }) => {}
                                            Err(e) => panic!("{spec} {kind}: {e}"),
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn kind_strategy() -> impl Strategy<Value = CollectiveKind> {
    proptest::sample::select(CollectiveKind::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_algorithm_verifies(
        kind in kind_strategy(),
        p in 1u32..=64,
        count_sel in 0usize..6,
        big in 0u64..5000,
        root_frac in 0.0f64..1.0,
        in_place in any::<bool>(),
        op_i in 0usize..5,
        algo_i in 0usize..Algorithm::ALL.len(),
    ) {
        let count = [0, 1, p as u64 - 1, p as u64 + 1, big, 13 * p as u64 + 5][count_sel];
        let root = ((p as f64 * root_frac) as u32).min(p - 1);
        let mut args = args_for(kind, p, count, root, big).with_in_place(in_place && in_place_ok(kind));
        args.op = ReduceOp::ALL[op_i];
        let supported = Algorithm::supported_for(kind);
        let a = supported[algo_i % supported.len()];
        check(&args, &AlgoSpec::Flat(a), &GroupLayout::flat(p));
    }
}

fn log2_ceil(p: u32) -> u64 {
    nb::log2_ceil(p) as u64
}

#[test]
fn oneshot_allreduce_is_one_exchange_of_whole_vectors() {
    // HCCL's AllReduceMeshOneshot: one message on the critical path, every
    // rank sends its whole vector to each of the p - 1 others.
    for p in 2..=8u32 {
        for in_place in [false, true] {
            let count = 3 * p as u64 + 1;
            let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, p)
                .with_in_place(in_place);
            let rep = check(
                &args,
                &AlgoSpec::Flat(Algorithm::Oneshot),
                &GroupLayout::flat(p),
            );
            assert_eq!(rep.critical_path_messages, 1, "p={p} in_place={in_place}");
            let per_rank = (p as u64 - 1) * count * 4;
            assert_eq!(
                rep.bytes_sent,
                p as u64 * per_rank,
                "p={p} in_place={in_place}"
            );
        }
    }
}

#[test]
fn nhr_and_nb_take_ceil_log2_steps_for_any_p() {
    // HCCL's guide (NHR.md, NB.md): ReduceScatter and AllGather take
    // ⌈log2 p⌉ steps, AllReduce and Broadcast twice that, for every p;
    // every rank sends (p-1)/p of the vector in ReduceScatter/AllGather.
    use CollectiveKind as K;
    for p in 2..=40u32 {
        let l = log2_ceil(p);
        for a in [Algorithm::Nhr, Algorithm::Nb] {
            for (kind, steps) in [
                (K::ReduceScatter, l),
                (K::AllGather, l),
                (K::AllReduce, 2 * l),
                (K::Broadcast, 2 * l),
            ] {
                let count = if kind == K::AllReduce || kind == K::Broadcast {
                    p as u64 * 4
                } else {
                    4
                };
                let args = CollectiveArgs::new(kind, count, DataType::Fp32, p).with_root(p / 2);
                let rep = check(&args, &AlgoSpec::Flat(a), &GroupLayout::flat(p));
                if kind == K::Broadcast {
                    // The scatter's critical path can be shorter than ⌈log2 p⌉.
                    assert!(
                        (l + 1..=steps).contains(&rep.critical_path_messages),
                        "{a} {kind} p={p}: {rep:?}"
                    );
                } else {
                    assert_eq!(rep.critical_path_messages, steps, "{a} {kind} p={p}");
                }
                if matches!(kind, K::ReduceScatter | K::AllGather) {
                    // 4 elements per block, p - 1 blocks per rank.
                    assert_eq!(
                        rep.bytes_sent,
                        p as u64 * (p as u64 - 1) * 16,
                        "{a} {kind} p={p}"
                    );
                }
            }
        }
    }
}

#[test]
fn hd_reduce_scatter_folds_non_powers_of_two() {
    // Power of two: log2 p halving steps. Otherwise fold + ⌊log2 p⌋ + the
    // last send to the folded-out member (HCCL's RHD.md, steps 1-3).
    for (p, steps) in [
        (2, 1),
        (4, 2),
        (8, 3),
        (3, 3),
        (5, 4),
        (6, 4),
        (7, 4),
        (12, 5),
    ] {
        let args = CollectiveArgs::new(CollectiveKind::ReduceScatter, 3, DataType::Fp32, p);
        let rep = check(
            &args,
            &AlgoSpec::Flat(Algorithm::HalvingDoubling),
            &GroupLayout::flat(p),
        );
        assert_eq!(rep.critical_path_messages, steps, "p={p}");
    }
}

#[test]
fn log_step_plans_are_lazy_at_16384_ranks() {
    let p = 16384;
    for a in [Algorithm::Nhr, Algorithm::Nb, Algorithm::HalvingDoubling] {
        let args = CollectiveArgs::new(CollectiveKind::ReduceScatter, 2, DataType::Fp32, p);
        let (_, plan) = plan(&args, &AlgoSpec::Flat(a), &GroupLayout::flat(p), 12345).unwrap();
        assert_eq!(plan.size_hint().1, None, "{a}: a generator");
        // At most a few steps per round and ⌈log2 p⌉ = 14 rounds.
        let n = plan.count();
        assert!((14..=60).contains(&n), "{a}: {n} steps");
    }
}

#[test]
fn doubling_allreduce_exchanges_whole_vectors_in_log2_steps() {
    // HCCL's AllReduceDoubling: log2 p rounds, each moving the whole
    // vector both ways between partners; other p fold in and out (MPICH's
    // short-message AllReduce): two more messages on the critical path,
    // and the 2r folded members' vectors move twice more.
    for p in 2..=17u32 {
        for in_place in [false, true] {
            let count = 2 * p as u64 + 3;
            let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, p)
                .with_in_place(in_place);
            let rep = check(
                &args,
                &AlgoSpec::Flat(Algorithm::Doubling),
                &GroupLayout::flat(p),
            );
            let levels = 31 - p.leading_zeros();
            let pow = 1u32 << levels;
            let r = (p - pow) as u64;
            let fold = if r > 0 { 2 } else { 0 };
            assert_eq!(
                rep.critical_path_messages,
                levels as u64 + fold,
                "p={p} in_place={in_place}"
            );
            let vector = count * 4;
            let messages = pow as u64 * levels as u64 + 2 * r;
            assert_eq!(
                rep.bytes_sent,
                messages * vector,
                "p={p} in_place={in_place}"
            );
        }
    }
}

#[test]
fn a_level_that_lacks_a_phase_names_the_phase() {
    // level0 of a hierarchical AllReduce runs ReduceScatter and AllGather;
    // doubling (AllReduce only) cannot, and the error must say which.
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, 8, DataType::Fp32, 4);
    let spec: AlgoSpec = "level0:doubling;level1:ring".parse().unwrap();
    let e = plan(&args, &spec, &GroupLayout::servers(2, 2), 0)
        .err()
        .expect("doubling cannot be level0")
        .to_string();
    assert!(
        e.starts_with("algorithm doubling does not implement reduce_scatter"),
        "{e}"
    );
    assert!(
        !e.split("use one of").nth(1).unwrap().contains("doubling"),
        "{e}"
    );
}

#[test]
fn resolved_names_what_a_hierarchical_spec_runs() {
    let spec: AlgoSpec = "level0:NA;level1:ring".parse().unwrap();
    let servers = |s: u32, k: u32| {
        GroupLayout::from_parts(
            (0..s * k).map(|r| r / k).collect(),
            vec![0; (s * k) as usize],
        )
        .unwrap()
    };
    // One server of 8: level 1 has one member; level 0 defaults to mesh.
    assert_eq!(
        resolved(&spec, &servers(1, 8)),
        AlgoSpec::Flat(Algorithm::Mesh)
    );
    // Two servers: both levels run, NA filled in.
    assert_eq!(
        resolved(&spec, &servers(2, 8)).to_string(),
        "level0:mesh;level1:ring"
    );
    // One NPU per server: only level 1 runs.
    assert_eq!(
        resolved(&spec, &servers(4, 1)),
        AlgoSpec::Flat(Algorithm::Ring)
    );
    // Flat specs are what they say.
    let ring = AlgoSpec::Flat(Algorithm::Ring);
    assert_eq!(resolved(&ring, &servers(2, 8)), ring);
    // The label is the schedule: one server's NA;ring plans as mesh does.
    let args = args_for(CollectiveKind::AllReduce, 8, 64, 0, 1);
    let a = schedule(&args, &spec, &servers(1, 8)).unwrap();
    let b = schedule(&args, &AlgoSpec::Flat(Algorithm::Mesh), &servers(1, 8)).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

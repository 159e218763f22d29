//! Every algorithm, run on real bytes by the in-memory fabric, gives the
//! sequential reference's bytes; reductions do not depend on arrival order.
//!
//! Inputs for equality come from `verifiable_input` (exact in any reduction
//! order, see `hccl_algos::reference`). Case counts are kept small in debug
//! builds so the suite stays quick on 2 cores; `PROPTEST_CASES` raises them.

use hccl_algos::algo::{AlgoError, AlgoSpec, Algorithm, Levels};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::mem_transport::{run_collective, MemError};
use hccl_algos::reference::{reference, verifiable_inputs};
use hccl_algos::{DataType, ReduceOp};
use proptest::prelude::*;

/// Arguments of `kind` for `p` ranks; V variants and p2p get per-rank
/// counts spread around `count` (some zero), derived from `seed`.
fn args_for(
    kind: CollectiveKind,
    p: u32,
    count: u64,
    root: u32,
    dtype: DataType,
    op: ReduceOp,
    seed: u64,
) -> CollectiveArgs {
    CollectiveArgs::example(kind, p, count, dtype, root, seed)
        .unwrap()
        .with_op(op)
}

fn in_place_ok(kind: CollectiveKind) -> bool {
    use CollectiveKind as K;
    !matches!(
        kind,
        K::AllToAllV | K::SendRecv | K::BatchSendRecv | K::Barrier
    )
}

fn describe(args: &CollectiveArgs, spec: &AlgoSpec, seed: u64) -> String {
    format!(
        "{spec} {} p={} count={} root={} {} {} in_place={} seed={seed}",
        args.kind, args.world_size, args.count, args.root, args.dtype, args.op, args.in_place
    )
}

/// Runs `args` with `spec` on verifiable inputs and compares with the
/// reference. Returns false (nothing checked) only if the planner does not
/// implement the combination.
fn check_equal(args: &CollectiveArgs, spec: &AlgoSpec, layout: &GroupLayout, seed: u64) -> bool {
    let inputs = verifiable_inputs(args, seed);
    let want = reference(args, &inputs)
        .unwrap_or_else(|e| panic!("{}: reference: {e}", describe(args, spec, seed)));
    let got = match run_collective(args, spec, layout, inputs, seed) {
        Ok(g) => g,
        Err(MemError::Plan(AlgoError::Unsupported { .. })) => return false,
        Err(e) => panic!("{}: {e}", describe(args, spec, seed)),
    };
    for (r, (g, w)) in got.iter().zip(&want).enumerate() {
        if g != w {
            let esz = args.dtype.size() as usize;
            let first = g.iter().zip(w).position(|(a, b)| a != b).unwrap_or(0) / esz;
            panic!(
                "{}: rank {r} output differs from the reference at element {first} (of {} bytes; got {} bytes)",
                describe(args, spec, seed),
                w.len(),
                g.len()
            );
        }
    }
    if args.kind == CollectiveKind::AllReduce {
        assert!(
            got.windows(2).all(|w| w[0] == w[1]),
            "{}: AllReduce ranks differ",
            describe(args, spec, seed)
        );
    }
    true
}

/// Specs to try: every flat algorithm implementing `kind`.
fn flat_specs(kind: CollectiveKind) -> Vec<AlgoSpec> {
    Algorithm::supported_for(kind)
        .into_iter()
        .map(AlgoSpec::Flat)
        .collect()
}

#[test]
fn every_algorithm_collective_dtype_and_op() {
    let (p, count, root) = (5u32, 7u64, 2u32);
    let mut checked = 0;
    for kind in CollectiveKind::ALL {
        for spec in flat_specs(kind) {
            for dtype in DataType::ALL {
                let ops: &[ReduceOp] = if kind.is_reduction() {
                    &ReduceOp::ALL
                } else {
                    &[ReduceOp::Sum]
                };
                for &op in ops {
                    let args = args_for(kind, p, count, root, dtype, op, 11);
                    checked += check_equal(&args, &spec, &GroupLayout::flat(p), 11) as u32;
                }
            }
        }
    }
    // 14 collectives each have at least one algorithm; 4 of them reduce.
    assert!(
        checked >= (10 + 4 * 5) * 12,
        "only {checked} combinations ran"
    );
}

#[test]
fn log_step_algorithms_run_and_match_for_every_small_world() {
    // NHR and NB (AllReduce, ReduceScatter(V), AllGather(V), Broadcast) and
    // H-D_R ReduceScatter(V): every p in 1..=9 (powers of two and not), every
    // root, counts below, at and above p; each combination must really run.
    use CollectiveKind as K;
    let cases = [
        (Algorithm::Nhr, K::AllReduce),
        (Algorithm::Nhr, K::ReduceScatter),
        (Algorithm::Nhr, K::ReduceScatterV),
        (Algorithm::Nhr, K::AllGather),
        (Algorithm::Nhr, K::AllGatherV),
        (Algorithm::Nhr, K::Broadcast),
        (Algorithm::Nb, K::AllReduce),
        (Algorithm::Nb, K::ReduceScatter),
        (Algorithm::Nb, K::ReduceScatterV),
        (Algorithm::Nb, K::AllGather),
        (Algorithm::Nb, K::AllGatherV),
        (Algorithm::Nb, K::Broadcast),
        (Algorithm::HalvingDoubling, K::ReduceScatter),
        (Algorithm::HalvingDoubling, K::ReduceScatterV),
    ];
    let mut case = 0u64;
    for (a, kind) in cases {
        for p in 1..=9u32 {
            for count in [0, 1, p as u64 - 1, 2 * p as u64 + 3] {
                for root in 0..p {
                    if root > 0 && kind != K::Broadcast {
                        break;
                    }
                    for in_place in [false, true] {
                        case += 1;
                        let dtype = DataType::ALL[case as usize % 12];
                        let op = ReduceOp::ALL[case as usize % 5];
                        let args =
                            args_for(kind, p, count, root, dtype, op, case).with_in_place(in_place);
                        assert!(
                            check_equal(&args, &AlgoSpec::Flat(a), &GroupLayout::flat(p), case),
                            "{a} {kind} p={p} is not implemented"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn small_worlds_every_shape_exhaustively() {
    // Every algorithm, collective, rank count 1..=6, count in {0, 1, p-1,
    // p+1, 2p+3}, first/middle/last root, in and out of place. The dtype and
    // op rotate with the case so all of them appear.
    let mut case = 0usize;
    for kind in CollectiveKind::ALL {
        for spec in flat_specs(kind) {
            for p in 1..=6u32 {
                for count in [0, 1, p as u64 - 1, p as u64 + 1, 2 * p as u64 + 3] {
                    for root in [0, p / 2, p - 1] {
                        for in_place in [false, true] {
                            if in_place && !in_place_ok(kind) {
                                continue;
                            }
                            case += 1;
                            let dtype = DataType::ALL[case % 12];
                            let op = ReduceOp::ALL[case % 5];
                            let args = args_for(kind, p, count, root, dtype, op, case as u64)
                                .with_in_place(in_place);
                            check_equal(&args, &spec, &GroupLayout::flat(p), case as u64);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn hierarchical_specs_match_the_reference_where_implemented() {
    // Hierarchical composition over 2 servers x 3 ranks and 2 pods x 2
    // servers x 2 ranks; combinations the planner does not implement are
    // skipped, but some must run, the pipeline among them.
    let mut ran = 0;
    let mut pipelined = 0;
    for (layout, p) in [
        (GroupLayout::servers(2, 3), 6),
        (GroupLayout::pods(2, 2, 2), 8),
    ] {
        for kind in CollectiveKind::ALL {
            for a0 in [Algorithm::Ring, Algorithm::Mesh] {
                for a1 in [
                    Algorithm::Ring,
                    Algorithm::HalvingDoubling,
                    Algorithm::Nhr,
                    Algorithm::Pipeline,
                ] {
                    let pipe = a1 == Algorithm::Pipeline;
                    let spec = AlgoSpec::Hierarchical(Levels {
                        level0: Some(a0),
                        level1: Some(a1),
                        // The pipeline flattens pods into level 1.
                        level2: (p == 8 && !pipe).then_some(Algorithm::Ring),
                    });
                    for count in [0, 1, 5, 13] {
                        for in_place in [false, true] {
                            let args = args_for(
                                kind,
                                p,
                                count,
                                p - 2,
                                DataType::Fp32,
                                ReduceOp::Sum,
                                count,
                            )
                            .with_in_place(in_place && in_place_ok(kind));
                            let ok = check_equal(&args, &spec, &layout, count);
                            ran += ok as u32;
                            pipelined += (ok && pipe && count > 0) as u32;
                        }
                    }
                }
            }
        }
    }
    assert!(ran > 0, "no hierarchical combination is implemented");
    // Pipeline x mesh level 0 x {AllReduce, AllGather, ReduceScatter} x
    // 3 non-zero counts x 2 placements x 2 layouts (level0:ring is not
    // pipelined; count 0 is an empty plan for any spec).
    assert_eq!(pipelined, 3 * 3 * 2 * 2, "pipeline runs");
}

#[test]
fn pipeline_matches_the_reference_on_server_grids() {
    // HCCL's hierarchical pipeline on every grid of 1..=4 servers x
    // 1..=4 ranks plus odd shapes, counts 0, 1, < p, non-divisible and
    // larger, in and out of place; dtype and op rotate; half the runs use
    // the simulator's small executor window (8). Every case must really run.
    use hccl_algos::mem_transport::{run_collective_with, MemOptions, Order};
    let mut shapes: Vec<(u32, u32)> = (1..=4).flat_map(|s| (1..=4).map(move |k| (s, k))).collect();
    shapes.extend([(3, 5), (5, 2), (2, 8)]);
    let mut case = 0u64;
    for (servers, per) in shapes {
        let layout = GroupLayout::servers(servers, per);
        let p = servers * per;
        for kind in [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
        ] {
            for count in [0, 1, u64::from(p) - 1, 2 * u64::from(p) + 3, 257] {
                for in_place in [false, true] {
                    case += 1;
                    let dtype = DataType::ALL[case as usize % 12];
                    let op = ReduceOp::ALL[case as usize % 5];
                    let args = args_for(kind, p, count, 0, dtype, op, case).with_in_place(in_place);
                    let spec = AlgoSpec::Flat(Algorithm::Pipeline);
                    if case.is_multiple_of(2) {
                        assert!(
                            check_equal(&args, &spec, &layout, case),
                            "{}",
                            describe(&args, &spec, case)
                        );
                        continue;
                    }
                    let inputs = verifiable_inputs(&args, case);
                    let want = reference(&args, &inputs).unwrap();
                    let opts = MemOptions {
                        order: Order::Shuffled(case),
                        window: 8,
                        ..MemOptions::default()
                    };
                    let got = run_collective_with(&args, &spec, &layout, inputs, opts)
                        .unwrap_or_else(|e| panic!("{}: {e}", describe(&args, &spec, case)));
                    assert!(got == want, "{}: window 8", describe(&args, &spec, case));
                }
            }
        }
    }
}

/// Random floats with full mantissas: their sums depend on the order.
fn arbitrary_float_inputs(args: &CollectiveArgs, seed: u64) -> Vec<Vec<u8>> {
    let esz = args.dtype.size();
    (0..args.world_size)
        .map(|r| {
            let mut s = seed ^ ((r as u64) << 40) ^ 0xA5A5;
            (0..args.io_bytes(r).0 / esz)
                .flat_map(|_| {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let v = ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0;
                    match args.dtype {
                        DataType::Fp64 => v.to_le_bytes().to_vec(),
                        DataType::Fp16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
                        DataType::Bf16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
                        _ => (v as f32).to_le_bytes().to_vec(),
                    }
                })
                .collect()
        })
        .collect()
}

fn world() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 1u32..=16, 1 => 17u32..=64]
}

fn count_for(p: u32) -> impl Strategy<Value = u64> {
    let p = p as u64;
    prop_oneof![Just(0), Just(1), 0..p.max(1), Just(p + 1), (p..3 * p + 5)]
}

/// (kind, spec index, world, count, root, dtype, op, in_place, seed)
fn case() -> impl Strategy<
    Value = (
        CollectiveKind,
        usize,
        u32,
        u64,
        u32,
        DataType,
        ReduceOp,
        bool,
        u64,
    ),
> {
    (0usize..14, any::<usize>(), world()).prop_flat_map(|(k, spec, p)| {
        let kind = CollectiveKind::ALL[k];
        (
            Just(kind),
            Just(spec),
            Just(p),
            count_for(p),
            0..p,
            prop::sample::select(DataType::ALL.to_vec()),
            prop::sample::select(ReduceOp::ALL.to_vec()),
            any::<bool>(),
            any::<u64>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 96 } else { 512 }))]

    /// Random world sizes (1..=16, some up to 64), counts (0, 1, < p,
    /// non-divisible), roots, dtypes, ops, in-place and arrival orders:
    /// output bytes equal the reference's.
    #[test]
    fn output_equals_reference((kind, spec_i, p, count, root, dtype, op, in_place, seed) in case()) {
        let specs = flat_specs(kind);
        let spec = specs[spec_i % specs.len()];
        // Keep the biggest cases small: AllToAll moves p^2 * count elements.
        let count = if p > 16 { count.min(p as u64 + 1) } else { count };
        let args = args_for(kind, p, count, root, dtype, op, seed).with_in_place(in_place && in_place_ok(kind));
        check_equal(&args, &spec, &GroupLayout::flat(p), seed);
    }

    /// Deterministic reductions: with order-dependent float inputs, two
    /// arrival orders give the same bytes, and AllReduce gives the same bytes
    /// on every rank (the reduction order is fixed by the schedule).
    #[test]
    fn reductions_do_not_depend_on_arrival_order(
        k in 0usize..4,
        spec_i in any::<usize>(),
        p in 2u32..=12,
        count in 1u64..40,
        root in any::<u32>(),
        dtype in prop::sample::select(vec![DataType::Fp16, DataType::Bf16, DataType::Fp32, DataType::Fp64]),
        op in prop::sample::select(vec![ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Prod]),
        seeds in (any::<u64>(), any::<u64>()),
    ) {
        let kind = [CollectiveKind::AllReduce, CollectiveKind::ReduceScatter, CollectiveKind::Reduce, CollectiveKind::ReduceScatterV][k];
        let specs = flat_specs(kind);
        let spec = specs[spec_i % specs.len()];
        let args = args_for(kind, p, count, root % p, dtype, op, seeds.0);
        let inputs = arbitrary_float_inputs(&args, seeds.0);
        let layout = GroupLayout::flat(p);
        let a = run_collective(&args, &spec, &layout, inputs.clone(), seeds.0).unwrap();
        let b = run_collective(&args, &spec, &layout, inputs, seeds.1).unwrap();
        prop_assert_eq!(&a, &b, "{}", describe(&args, &spec, seeds.0));
        if kind == CollectiveKind::AllReduce {
            prop_assert!(a.windows(2).all(|w| w[0] == w[1]), "AllReduce ranks differ: {}", describe(&args, &spec, seeds.0));
        }
    }

    /// Hierarchical specs on random regular layouts (servers x ranks per
    /// server, sometimes two pods), random levels, kinds, dtypes, ops and
    /// arrival orders; unimplemented combinations are skipped.
    #[test]
    fn hierarchical_output_equals_reference(
        (pods, servers, per) in (1u32..=2, 1u32..=4, 1u32..=4),
        levels in prop::array::uniform3(prop::sample::select(Algorithm::ALL.to_vec())),
        k in 0usize..14,
        count in 0u64..20,
        root in any::<u32>(),
        dtype in prop::sample::select(DataType::ALL.to_vec()),
        op in prop::sample::select(ReduceOp::ALL.to_vec()),
        in_place in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let p = pods * servers * per;
        let kind = CollectiveKind::ALL[k];
        let spec = AlgoSpec::Hierarchical(Levels {
            level0: Some(levels[0]),
            level1: Some(levels[1]),
            level2: (pods > 1).then_some(levels[2]),
        });
        let args = args_for(kind, p, count, root % p, dtype, op, seed)
            .with_in_place(in_place && in_place_ok(kind));
        check_equal(&args, &spec, &GroupLayout::pods(pods, servers, per), seed);
    }
}

//! HCCL's hierarchical pipeline (`Algorithm::Pipeline`) through the
//! verifier: every small server grid, counts 0, 1, below the world size,
//! non-divisible and large, in and out of place, executor windows 2, 8 and
//! the default; plus its traffic shape, laziness at 16,384 ranks and errors.

use hccl_algos::algo::{plan, schedule, AlgoError, AlgoSpec, Algorithm, Levels};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::exec::DEFAULT_WINDOW;
use hccl_algos::layout::GroupLayout;
use hccl_algos::verify::{verify_with, VerifyOptions, VerifyReport};
use hccl_algos::{DataType, Op, ReduceOp};

const KINDS: [CollectiveKind; 3] = [
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce,
];

fn pipeline() -> AlgoSpec {
    AlgoSpec::Flat(Algorithm::Pipeline)
}

/// HCCL's spelling: `level0:NA;level1:pipeline`.
fn level1_pipeline() -> AlgoSpec {
    AlgoSpec::Hierarchical(Levels {
        level0: None,
        level1: Some(Algorithm::Pipeline),
        level2: None,
    })
}

fn check(
    args: &CollectiveArgs,
    spec: &AlgoSpec,
    layout: &GroupLayout,
    window: usize,
) -> VerifyReport {
    let s =
        schedule(args, spec, layout).unwrap_or_else(|e| panic!("{spec} {}: plan: {e}", args.kind));
    let opts = VerifyOptions {
        window,
        check_races: true,
    };
    verify_with(args, &s, &opts).unwrap_or_else(|e| {
        panic!(
            "{spec} {} {}x{} count={} {} in_place={} window={window}: {e}",
            args.kind,
            layout.server_count(),
            args.world_size / layout.server_count(),
            args.count,
            args.op,
            args.in_place
        )
    })
}

#[test]
fn every_small_grid_verifies() {
    let mut shapes: Vec<(u32, u32)> = (1..=4).flat_map(|s| (1..=8).map(move |k| (s, k))).collect();
    shapes.extend([(5, 3), (3, 5), (7, 2), (2, 7), (6, 1), (5, 5)]);
    let mut checked = 0;
    for (servers, per) in shapes {
        let layout = GroupLayout::servers(servers, per);
        let p = servers * per;
        for kind in KINDS {
            for count in [0, 1, u64::from(p) - 1, 3 * u64::from(p) + 2] {
                for in_place in [false, true] {
                    let ops: &[ReduceOp] = if kind == CollectiveKind::AllGather || in_place {
                        &[ReduceOp::Sum]
                    } else {
                        &[ReduceOp::Sum, ReduceOp::Avg]
                    };
                    for &op in ops {
                        let args = CollectiveArgs::new(kind, count, DataType::Fp32, p)
                            .with_in_place(in_place)
                            .with_op(op);
                        check(&args, &pipeline(), &layout, 8);
                        checked += 1;
                    }
                }
            }
            // The default window, the smallest safe window, and HCCL's spelling.
            let args = CollectiveArgs::new(kind, 2 * u64::from(p) + 1, DataType::Fp16, p);
            let a = check(&args, &pipeline(), &layout, DEFAULT_WINDOW);
            let b = check(&args, &level1_pipeline(), &layout, 2);
            assert_eq!(a, b, "the same plan whatever the spelling");
        }
    }
    assert!(checked > 700, "{checked}");
}

/// Bytes rank `r`'s sends carry to other servers and inside its server.
fn traffic(args: &CollectiveArgs, layout: &GroupLayout, r: u32) -> (u64, u64) {
    let (_, steps) = plan(args, &pipeline(), layout, r).unwrap();
    let (mut inter, mut intra) = (0, 0);
    for s in steps {
        if let Op::Send { peer, src, .. } = s.op {
            if layout.server_of(peer) == layout.server_of(r) {
                intra += src.len;
            } else {
                inter += src.len;
            }
        }
    }
    (inter, intra)
}

#[test]
fn allgather_crosses_servers_once_per_block_in_s_message_steps() {
    // HCCL's Pipeline.md: S - 1 ring steps between servers, each overlapped
    // with a mesh step, then one last mesh step: S messages on the critical
    // path. Each rank sends its (S - 1) received blocks plus its own to the
    // next server except the last, i.e. (S - 1) blocks, and every block it
    // holds (S of them) to its k - 1 server mates.
    for (s, k) in [(2u32, 4u32), (3, 2), (4, 8), (5, 3)] {
        let layout = GroupLayout::servers(s, k);
        let p = s * k;
        let n = 10u64;
        let args = CollectiveArgs::new(CollectiveKind::AllGather, n, DataType::Fp32, p);
        let rep = check(&args, &pipeline(), &layout, 8);
        assert_eq!(rep.critical_path_messages, u64::from(s), "{s}x{k}");
        assert_eq!(rep.bytes_sent, u64::from(p) * u64::from(p - 1) * n * 4);
        for r in [0, p - 1] {
            assert_eq!(
                traffic(&args, &layout, r),
                (u64::from(s - 1) * n * 4, u64::from(s * (k - 1)) * n * 4),
                "{s}x{k} rank {r}"
            );
        }
    }
}

#[test]
fn allreduce_is_reduce_scatter_then_allgather() {
    // 2 x (S messages) on the critical path; every rank sends 2(p-1)/p of
    // the vector, 2(S-1)/p of it across servers.
    let (s, k) = (3u32, 4u32);
    let layout = GroupLayout::servers(s, k);
    let p = s * k;
    let n = u64::from(p) * 5;
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, n, DataType::Fp32, p);
    let rep = check(&args, &pipeline(), &layout, 8);
    assert_eq!(rep.critical_path_messages, 2 * u64::from(s));
    assert_eq!(rep.max_rank_bytes_sent, 2 * u64::from(p - 1) * 5 * 4);
    assert_eq!(traffic(&args, &layout, 7).0, 2 * u64::from(s - 1) * 5 * 4);
}

#[test]
fn huge_counts_do_not_overflow_offsets() {
    // 3e9 fp64 elements per block: offsets far above 2^32 bytes.
    let layout = GroupLayout::servers(2, 2);
    for kind in KINDS {
        let args = CollectiveArgs::new(kind, 3_000_000_000, DataType::Fp64, 4);
        check(&args, &pipeline(), &layout, 8);
    }
}

#[test]
fn plans_are_lazy_at_16384_ranks() {
    // 2048 servers x 8: AllGather emits 2 + 2*7 steps per ring step, 14 for
    // the last mesh step and one copy, from a generator of a few words.
    let layout = GroupLayout::servers(2048, 8);
    let args = CollectiveArgs::new(CollectiveKind::AllGather, 4, DataType::Fp32, 16384);
    let (_, mut steps) = plan(&args, &pipeline(), &layout, 12345).unwrap();
    assert_eq!(steps.size_hint().1, None, "a generator, not a Vec");
    assert!(steps.next().is_some());
    assert_eq!(steps.count(), 2047 * 16 + 14);
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, 1 << 20, DataType::Fp32, 16384);
    let (sizes, steps) = plan(&args, &pipeline(), &layout, 9).unwrap();
    // Scratch: 2 x 7 intra slots + 2 inter slots of one 64-element block.
    assert_eq!(sizes.scratch, 16 * 64 * 4);
    assert!(steps.count() > 2 * 2047 * 16);
    // One server of 16,384 (a flat layout): the mesh, emitted one peer at
    // a time (the generator never queues a whole round of 2 x 16,383 steps).
    let flat = GroupLayout::flat(16384);
    let args = CollectiveArgs::new(CollectiveKind::AllGather, 1, DataType::Fp32, 16384);
    let (_, steps) = plan(&args, &pipeline(), &flat, 3).unwrap();
    assert_eq!(steps.count(), 1 + 2 * 16383);
}

#[test]
fn errors_name_what_is_wrong() {
    let args = CollectiveArgs::new(CollectiveKind::Broadcast, 8, DataType::Fp32, 8);
    let e = plan(&args, &level1_pipeline(), &GroupLayout::servers(2, 4), 0)
        .err()
        .unwrap();
    assert!(matches!(e, AlgoError::Unsupported { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("pipeline does not implement broadcast"),
        "{e}"
    );
    // The pipeline interleaves with a full mesh; level0:ring is not pipelined.
    let ring0 = AlgoSpec::Hierarchical(Levels {
        level0: Some(Algorithm::Ring),
        level1: Some(Algorithm::Pipeline),
        level2: None,
    });
    let args = CollectiveArgs::new(CollectiveKind::AllGather, 8, DataType::Fp32, 8);
    let e = plan(&args, &ring0, &GroupLayout::servers(2, 4), 0)
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .contains("level0:NA (or mesh);level1:pipeline"),
        "{e}"
    );
    // Servers of unequal size.
    let odd = GroupLayout::from_parts(vec![0, 0, 0, 1, 1, 2, 2, 2], vec![0; 8]).unwrap();
    let e = plan(&args, &pipeline(), &odd, 0).err().unwrap();
    assert!(matches!(e, AlgoError::Layout(_)), "{e}");
}

//! fp16/bf16 reductions round once per local fold (issue 13 item 1), on the
//! in-memory fabric: a rank that folds several inputs (mesh, one-shot,
//! pipeline) keeps the f32 partial between steps; every rank of an
//! AllReduce gets the same bits whatever the algorithm and arrival order.

use half::{bf16, f16};
use hccl_algos::algo::{AlgoError, AlgoSpec, Algorithm, Levels};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::mem_transport::{run_collective, MemError};
use hccl_algos::reference::reference;
use hccl_algos::{DataType, ReduceOp};
use proptest::prelude::*;

fn encode(dtype: DataType, v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| match dtype {
            DataType::Bf16 => bf16::from_f32(*x).to_le_bytes(),
            DataType::Fp16 => f16::from_f32(*x).to_le_bytes(),
            d => panic!("not a 16-bit float: {d}"),
        })
        .collect()
}

fn decode(dtype: DataType, b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| match dtype {
            DataType::Bf16 => bf16::from_le_bytes([c[0], c[1]]).to_f32(),
            _ => f16::from_le_bytes([c[0], c[1]]).to_f32(),
        })
        .collect()
}

/// Runs `args` with `spec`; `None` if the planner does not implement it.
fn run(
    args: &CollectiveArgs,
    spec: &AlgoSpec,
    layout: &GroupLayout,
    inputs: &[Vec<u8>],
    seed: u64,
) -> Option<Vec<Vec<u8>>> {
    match run_collective(args, spec, layout, inputs.to_vec(), seed) {
        Ok(o) => Some(o),
        Err(MemError::Plan(AlgoError::Unsupported { .. })) => None,
        Err(e) => panic!("{spec} {} {}: {e}", args.kind, args.dtype),
    }
}

/// The case: one large input and seven small ones. bf16 has 8
/// significant bits: 256 + 1 rounds back to 256 (a tie, to even), so a
/// fold that rounds per input returns 256; the exact sum 263 rounds once to
/// 264. fp16 (11 bits) the same at 2048: 2055 rounds to 2056.
#[test]
fn a_fold_of_eight_inputs_rounds_once_on_mesh_oneshot_and_pipeline() {
    for (dtype, big, want) in [
        (DataType::Bf16, 256.0, 264.0),
        (DataType::Fp16, 2048.0, 2056.0),
    ] {
        let p = 8u32;
        let count = 16u64;
        let flat = GroupLayout::flat(p);
        let two = GroupLayout::servers(2, 4);
        let pipe = AlgoSpec::Hierarchical(Levels {
            level0: Some(Algorithm::Mesh),
            level1: Some(Algorithm::Pipeline),
            level2: None,
        });
        let cases = [
            (
                CollectiveKind::AllReduce,
                AlgoSpec::Flat(Algorithm::Mesh),
                &flat,
            ),
            (
                CollectiveKind::AllReduce,
                AlgoSpec::Flat(Algorithm::Oneshot),
                &flat,
            ),
            (
                CollectiveKind::ReduceScatter,
                AlgoSpec::Flat(Algorithm::Mesh),
                &flat,
            ),
            (
                CollectiveKind::Reduce,
                AlgoSpec::Flat(Algorithm::Mesh),
                &flat,
            ),
            (CollectiveKind::AllReduce, pipe, &two),
        ];
        for (kind, spec, layout) in cases {
            for in_place in [false, true] {
                let args = CollectiveArgs::new(kind, count, dtype, p)
                    .with_root(3)
                    .with_in_place(in_place);
                let inputs: Vec<Vec<u8>> = (0..p)
                    .map(|r| {
                        let n = args.io_bytes(r).0 / 2;
                        let v = if r == 0 { big } else { 1.0 };
                        encode(dtype, &vec![v; n as usize])
                    })
                    .collect();
                let got = run(&args, &spec, layout, &inputs, 7)
                    .unwrap_or_else(|| panic!("{spec} {kind} is implemented"));
                for (r, out) in got.iter().enumerate() {
                    if kind == CollectiveKind::Reduce && r != 3 {
                        continue;
                    }
                    let vals = decode(dtype, out);
                    assert!(
                        vals.iter().all(|v| *v == want),
                        "{spec} {kind} {dtype} in_place={in_place}: rank {r} got {vals:?}, want {want} \
                         (the exact sum {} rounded once)",
                        big + 7.0
                    );
                }
            }
        }
    }
}

/// Avg divides the f32 sum and rounds once: bf16 (256 + 7·1) / 8 = 32.875
/// rounds to 33 (bf16 spacing 0.25 from 32 to 64: 32.875 is a tie between
/// 32.75 and 33, to even); rounding the sum first gives 256 / 8 = 32.
#[test]
fn avg_divides_the_f32_sum_and_rounds_once() {
    let (p, dtype) = (8u32, DataType::Bf16);
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, 8, dtype, p).with_op(ReduceOp::Avg);
    let inputs: Vec<Vec<u8>> = (0..p)
        .map(|r| encode(dtype, &[if r == 0 { 256.0 } else { 1.0 }; 8]))
        .collect();
    for a in [Algorithm::Mesh, Algorithm::Oneshot] {
        let got = run(&args, &AlgoSpec::Flat(a), &GroupLayout::flat(p), &inputs, 3).unwrap();
        for out in &got {
            assert_eq!(decode(dtype, out), vec![33.0; 8], "{a}");
        }
    }
}

/// Xorshift64 from `seed` (made odd, so never stuck at 0).
fn xorshift(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed | 1;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// Each rank's input of `args` (a 16-bit dtype): `values` of its element
/// count, seeded by `seed` and the rank.
fn rank_inputs(
    args: &CollectiveArgs,
    values: fn(usize, u64) -> Vec<f32>,
    seed: u64,
) -> Vec<Vec<u8>> {
    (0..args.world_size)
        .map(|r| {
            let n = args.io_bytes(r).0 as usize / 2;
            encode(args.dtype, &values(n, seed ^ u64::from(r) << 32))
        })
        .collect()
}

/// Values with mixed magnitudes and signs, so that rounding shows.
fn rough_values(n: usize, seed: u64) -> Vec<f32> {
    xorshift(seed)
        .take(n)
        .map(|x| {
            let mant = (x % 2000) as f32 - 1000.0;
            let exp = ((x >> 20) % 9) as i32 - 6; // fp16 sums stay finite
            mant * 2f32.powi(exp)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Every algorithm of AllReduce / ReduceScatter / Reduce on rough
    /// fp16/bf16 values: AllReduce ranks agree bit for bit, two arrival
    /// orders give the same bytes, and the mesh family (one fold per block,
    /// in rank order) equals the reference: the f32 rank-order sum rounded once.
    #[test]
    fn every_algorithm_agrees_across_ranks_and_the_mesh_family_rounds_once(
        p in 2u32..=9,
        count in 1u64..40,
        seed in any::<u64>(),
        bf in any::<bool>(),
    ) {
        let dtype = if bf { DataType::Bf16 } else { DataType::Fp16 };
        for kind in [CollectiveKind::AllReduce, CollectiveKind::ReduceScatter, CollectiveKind::Reduce] {
            let args = CollectiveArgs::new(kind, count, dtype, p).with_root(p - 1);
            let inputs = rank_inputs(&args, rough_values, seed);
            let want = reference(&args, &inputs).unwrap();
            for a in Algorithm::supported_for(kind) {
                let spec = AlgoSpec::Flat(a);
                let layout = GroupLayout::flat(p);
                let Some(got) = run(&args, &spec, &layout, &inputs, seed) else { continue };
                let again = run(&args, &spec, &layout, &inputs, seed ^ 0x5555).unwrap();
                prop_assert_eq!(&got, &again, "{} {}: arrival order changed the bytes", a, kind);
                if kind == CollectiveKind::AllReduce {
                    prop_assert!(got.windows(2).all(|w| w[0] == w[1]), "{} AllReduce ranks differ", a);
                }
                if matches!(a, Algorithm::Mesh | Algorithm::Oneshot) {
                    for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                        if kind == CollectiveKind::Reduce && r as u32 != p - 1 {
                            continue;
                        }
                        prop_assert_eq!(g, w, "{} {} rank {}", a, kind, r);
                    }
                }
            }
        }
    }
}

/// Inputs whose f32 sums are exact in any order for up to 16 ranks: small
/// integers times powers of two (|k| < 128, 2^-4 to 2^7: 8 + 11 + 4 bits),
/// whose partial sums fp16/bf16 mostly cannot hold.
fn exact_values(n: usize, seed: u64) -> Vec<f32> {
    xorshift(seed)
        .take(n)
        .map(|x| {
            let k = (x % 255) as f32 - 127.0;
            let e = ((x >> 16) % 12) as i32 - 4;
            k * 2f32.powi(e)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// `ReducePrecision::Fp32` as `Comm` runs it (widen, the f32 op, narrow
    /// once): every algorithm of AllReduce / ReduceScatter / Reduce, in
    /// place or not, equals the exact sum rounded once (the reference, whose
    /// f32 fold is exact for these inputs).
    #[test]
    fn fp32_partials_give_every_algorithm_the_once_rounded_exact_sum(
        p in 2u32..=9,
        count in 1u64..40,
        seed in any::<u64>(),
        bf in any::<bool>(),
        in_place in any::<bool>(),
    ) {
        use hccl_algos::precision::{narrow, widen};
        use hccl_algos::ReducePrecision;
        let dtype = if bf { DataType::Bf16 } else { DataType::Fp16 };
        for kind in [CollectiveKind::AllReduce, CollectiveKind::ReduceScatter, CollectiveKind::Reduce] {
            let args = CollectiveArgs::new(kind, count, dtype, p)
                .with_root(p / 2)
                .with_in_place(in_place);
            let inputs = rank_inputs(&args, exact_values, seed);
            let want = reference(&args, &inputs).unwrap();
            let wide = ReducePrecision::Fp32.widened(&args).unwrap();
            let wide_inputs: Vec<Vec<u8>> =
                inputs.iter().map(|i| widen(dtype, i).unwrap()).collect();
            for a in Algorithm::supported_for(kind) {
                let spec = AlgoSpec::Flat(a);
                let Some(got) = run(&wide, &spec, &GroupLayout::flat(p), &wide_inputs, seed) else {
                    continue;
                };
                for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                    if kind == CollectiveKind::Reduce && r as u32 != p / 2 {
                        continue;
                    }
                    let mut out = vec![0u8; g.len() / 2];
                    narrow(dtype, g, &mut out).unwrap();
                    prop_assert_eq!(&out, w, "{} {} rank {} in_place={}", a, kind, r, in_place);
                }
            }
        }
    }
}

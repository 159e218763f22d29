//! fp16/bf16 AllReduce through `Comm` on the simulator and on TCP over
//! loopback (issue 13 item 1): a rank's fold of several inputs rounds once
//! (mesh, one-shot), and every rank gets the same bits on every algorithm,
//! the same on both backends.
//!
//! With `ReducePrecision::Fp32` (`HCCL_REDUCE_PRECISION=fp32`) every
//! algorithm returns the correctly rounded sum of inputs whose f32 sum is
//! exact, and ranks that disagree on the setting fail naming it.
//!
//! One test, so the `HCCL_ALGO` it sets is not raced by another test.

use half::bf16;
use hccl::comm::{BackendKind, ReduceOp, ReducePrecision};
use hccl::Comm;
use hccl_algos::algo::{AlgoSpec, Algorithm};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::DataType;

const P: u32 = 8;
const N: usize = 16;

/// Inputs: rank 0 holds 256 and every other rank 1 (the case), then
/// mixed magnitudes so that partial sums round on every algorithm.
fn input(rank: u32) -> Vec<bf16> {
    let mut v = vec![bf16::from_f32(if rank == 0 { 256.0 } else { 1.0 }); N];
    v.extend((0..N).map(|i| {
        let x =
            (rank as f32 + 1.0) * 1.37f32.powi(i as i32 % 9) * if i % 3 == 0 { -1.0 } else { 1.0 };
        bf16::from_f32(x)
    }));
    v
}

/// Inputs whose f32 sum is exact: small integers times powers of two
/// (|k| < 128, 2^-4 to 2^8: at most 8 + 12 + 3 bits), with partial sums
/// that bf16 (8 bits) cannot hold.
fn exact_input(rank: u32) -> Vec<bf16> {
    (0..2 * N as u32)
        .map(|i| {
            let k = ((rank * 37 + i * 11) % 255) as f32 - 127.0;
            let e = ((rank * 5 + i * 3) % 13) as i32 - 4;
            bf16::from_f32(k * 2f32.powi(e))
        })
        .collect()
}

/// The exact sum of every rank's `exact_input`, rounded once to bf16.
fn exact_sum() -> Vec<bf16> {
    let mut sum = vec![0f64; 2 * N];
    for r in 0..P {
        for (s, x) in sum.iter_mut().zip(exact_input(r)) {
            *s += f64::from(x.to_f32());
        }
    }
    sum.into_iter().map(|s| bf16::from_f32(s as f32)).collect()
}

/// Every rank's AllReduce output, with the algorithm `comm` ran.
fn all_reduce(backend: BackendKind) -> Vec<(AlgoSpec, Vec<bf16>)> {
    let comms = Comm::init_all_on(backend, P).unwrap();
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let args =
                    CollectiveArgs::new(CollectiveKind::AllReduce, 2 * N as u64, DataType::Bf16, P);
                let spec = c.algorithm(&args).unwrap();
                let send = input(c.rank());
                let mut recv = vec![bf16::ZERO; 2 * N];
                c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                (spec, recv)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn bf16_all_reduce_rounds_folds_once_and_agrees_across_ranks_and_backends() {
    for (algo, a) in [
        ("allreduce=level0:mesh", Algorithm::Mesh),
        ("oneshot", Algorithm::Oneshot),
        ("allreduce=level0:ring", Algorithm::Ring),
        ("H-D_R", Algorithm::HalvingDoubling),
        ("NHR", Algorithm::Nhr),
        ("doubling", Algorithm::Doubling),
    ] {
        std::env::set_var("HCCL_ALGO", algo);
        let sim = all_reduce(BackendKind::Sim);
        let tcp = all_reduce(BackendKind::Tcp);
        for (backend, outs) in [("sim", &sim), ("tcp", &tcp)] {
            for (r, (spec, out)) in outs.iter().enumerate() {
                let ran = match spec {
                    AlgoSpec::Flat(x) => Some(*x),
                    AlgoSpec::Hierarchical(l) => l.level0,
                };
                assert_eq!(
                    ran,
                    Some(a),
                    "{backend} rank {r}: HCCL_ALGO={algo} ran {spec}"
                );
                assert_eq!(
                    out, &outs[0].1,
                    "{backend} {algo}: rank {r} differs from rank 0"
                );
            }
        }
        assert_eq!(sim[0].1, tcp[0].1, "{algo}: the simulator and TCP differ");
        if matches!(a, Algorithm::Mesh | Algorithm::Oneshot) {
            // 256 + 7 x 1 = 263, rounded once: 264 (per input: 256).
            for (backend, outs) in [("sim", &sim), ("tcp", &tcp)] {
                let first: Vec<f32> = outs[0].1[..N].iter().map(|x| x.to_f32()).collect();
                assert_eq!(first, vec![264.0; N], "{backend} {algo}");
            }
        }
    }
    std::env::remove_var("HCCL_ALGO");
    fp32_partials_give_every_algorithm_the_once_rounded_exact_sum();
}

/// Every rank's outputs of two AllReduces with `ReducePrecision::Fp32` (the
/// issue's inputs, separate buffers; `exact_input`, in place) and one
/// Avg.
fn all_reduce_fp32(backend: BackendKind) -> Vec<Vec<Vec<bf16>>> {
    let comms = Comm::init_all_on(backend, P).unwrap();
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                c.set_reduce_precision(ReducePrecision::Fp32);
                let mut a = vec![bf16::ZERO; 2 * N];
                c.all_reduce(&input(c.rank()), &mut a, ReduceOp::Sum)
                    .unwrap();
                let mut b = exact_input(c.rank());
                c.all_reduce_in_place(&mut b, ReduceOp::Sum).unwrap();
                let mut avg = vec![bf16::ZERO; N];
                let ones = vec![bf16::from_f32(if c.rank() == 0 { 256.0 } else { 1.0 }); N];
                c.all_reduce(&ones, &mut avg, ReduceOp::Avg).unwrap();
                vec![a, b, avg]
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Part of the one test above (it sets `HCCL_ALGO` too).
fn fp32_partials_give_every_algorithm_the_once_rounded_exact_sum() {
    let want = exact_sum();
    for algo in [
        "allreduce=level0:mesh",
        "oneshot",
        "allreduce=level0:ring",
        "H-D_R",
        "NHR",
        "NB",
        "doubling",
    ] {
        std::env::set_var("HCCL_ALGO", algo);
        for backend in [BackendKind::Sim, BackendKind::Tcp] {
            for (r, outs) in all_reduce_fp32(backend).iter().enumerate() {
                let first: Vec<f32> = outs[0][..N].iter().map(|x| x.to_f32()).collect();
                assert_eq!(
                    first,
                    vec![264.0; N],
                    "{backend:?} {algo} rank {r}: 256 + 7 x 1"
                );
                assert_eq!(
                    outs[1], want,
                    "{backend:?} {algo} rank {r}: exact inputs, in place"
                );
                // (256 + 7) / 8 = 32.875, rounded once: 33.
                let avg: Vec<f32> = outs[2].iter().map(|x| x.to_f32()).collect();
                assert_eq!(avg, vec![33.0; N], "{backend:?} {algo} rank {r}: avg");
            }
        }
    }
    std::env::remove_var("HCCL_ALGO");

    // Ranks that disagree fail on every rank, naming the setting.
    for backend in [BackendKind::Sim, BackendKind::Tcp] {
        let comms = Comm::init_all_on(backend, 4).unwrap();
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    if c.rank() == 2 {
                        c.set_reduce_precision(ReducePrecision::Fp32);
                    }
                    let mut out = vec![bf16::ZERO; 4];
                    c.all_reduce(&[bf16::ONE; 4], &mut out, ReduceOp::Sum)
                        .map(|()| out)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            let e = h
                .join()
                .unwrap()
                .expect_err("mismatched precisions must fail");
            assert!(
                e.contains("reduce precision mismatch"),
                "{backend:?} rank {r}: {e}"
            );
        }
    }
}

//! fp16/bf16 AllReduce through `Comm` on the simulator and on TCP over
//! loopback (issue 13 item 1): a rank's fold of several inputs rounds once
//! (mesh, one-shot), and every rank gets the same bits on every algorithm,
//! the same on both backends.
//!
//! One test, so the `HCCL_ALGO` it sets is not raced by another test.

use half::bf16;
use hccl::comm::{BackendKind, ReduceOp};
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
}

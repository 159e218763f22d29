//! The compressed exchanges on the simulator backend and on TCP (ranks
//! as threads of this process, `Comm::init_all_on`).

use hccl::comm::ReduceOp;
use hccl::{BackendKind, Comm};
use hccl_compress::{
    sparse_wins, CompressError, Compression, ErrorFeedback, Int8, Path, Selection, TopK,
};

const BACKENDS: [BackendKind; 2] = [BackendKind::Sim, BackendKind::Tcp];

/// `f` on every rank of a fresh `n`-rank communicator, one thread each.
fn on_ranks<R: Send>(backend: BackendKind, n: u32, f: impl Fn(&Comm) -> R + Sync) -> Vec<R> {
    let comms = Comm::init_all_on(backend, n).unwrap();
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for c in comms {
        c.destroy().unwrap();
    }
    out
}

/// Rank `r`'s gradient at `step`: integer-valued, distinct per rank.
fn int_grad(r: u32, step: u32, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as i64 * 37 + i64::from(r) * 101 + i64::from(step) * 13) % 199 - 99) as f32)
        .collect()
}

/// Rank `r`'s gradient with fractions, so sums round and order matters.
fn frac_grad(r: u32, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7 + r as usize * 31) % 97) as f32 * 0.013_7 - 0.61 + r as f32 * 1e-3)
        .collect()
}

#[test]
fn sparse_exchange_equals_a_dense_all_reduce_of_the_masked_tensors() {
    for backend in BACKENDS {
        for (p, selection) in [
            (2, Selection::Exact),
            (4, Selection::Sampled { sample_ratio: 0.01 }),
        ] {
            let topk = TopK::new(0.05).unwrap().with_selection(selection).unwrap();
            on_ranks(backend, p, |c| {
                let mut fb = ErrorFeedback::new();
                for step in 0..3 {
                    let grad = int_grad(c.rank(), step, 1000);
                    // The masked tensor this rank sends, by the same encoder.
                    let (sent, _) = topk.encode(&grad, &fb).unwrap();
                    let mut masked = vec![0f32; grad.len()];
                    for (&i, &v) in sent.indices.iter().zip(&sent.values) {
                        masked[i as usize] = v;
                    }
                    let mut want = vec![0f32; grad.len()];
                    c.all_reduce(&masked, &mut want, ReduceOp::Sum).unwrap();
                    let mut got = grad.clone();
                    let ex = topk.all_reduce(c, &mut got, &mut fb).unwrap();
                    assert_eq!(ex.path, Path::Sparse { k: 50 }, "{backend:?} p={p}");
                    assert_eq!(ex.payload_bytes, 400);
                    assert_eq!(got, want, "{backend:?} p={p} step {step}");
                    assert!(got.iter().filter(|x| **x != 0.0).count() <= 50 * p as usize);
                }
            });
        }
    }
}

#[test]
fn sent_plus_new_residual_is_grad_plus_old_residual() {
    let topk = TopK::new(0.1).unwrap();
    let mut fb = ErrorFeedback::new();
    for step in 0..5 {
        let grad = frac_grad(step, 513);
        let old: Vec<f32> = if fb.residual().is_empty() {
            vec![0.0; grad.len()]
        } else {
            fb.residual().to_vec()
        };
        let (sent, next) = topk.encode(&grad, &fb).unwrap();
        assert_eq!(sent.indices.len(), 52);
        let mut dense_sent = vec![0f32; grad.len()];
        for (&i, &v) in sent.indices.iter().zip(&sent.values) {
            dense_sent[i as usize] = v;
        }
        for i in 0..grad.len() {
            assert_eq!(
                (dense_sent[i] + next.residual()[i]).to_bits(),
                (grad[i] + old[i]).to_bits(),
                "step {step} element {i}"
            );
        }
        // What is sent leaves the residual.
        assert!(sent
            .indices
            .iter()
            .all(|&i| next.residual()[i as usize] == 0.0));
        fb = next;
    }
}

#[test]
fn int8_sent_plus_new_residual_is_grad_plus_old_residual_within_one_rounding() {
    let q = Int8::new(64).unwrap();
    let one = on_ranks(BackendKind::Sim, 1, |c| {
        let mut fb = ErrorFeedback::new();
        let mut outs = Vec::new();
        for step in 0..3 {
            let grad = frac_grad(step, 300);
            let old: Vec<f32> = fb_or_zero(&fb, grad.len());
            let mut got = grad.clone();
            let mut next = fb.clone();
            q.all_reduce(c, &mut got, &mut next).unwrap();
            for i in 0..grad.len() {
                let lhs = got[i] + next.residual()[i];
                let rhs = grad[i] + old[i];
                assert!(
                    (lhs - rhs).abs() <= 1e-6 * rhs.abs().max(1.0),
                    "{i}: {lhs} {rhs}"
                );
            }
            outs.push(got);
            fb = next;
        }
        outs
    });
    assert_eq!(one.len(), 1);
}

fn fb_or_zero(fb: &ErrorFeedback, len: usize) -> Vec<f32> {
    if fb.residual().is_empty() {
        vec![0.0; len]
    } else {
        fb.residual().to_vec()
    }
}

#[test]
fn int8_is_exact_where_the_scale_is_one() {
    // Each block's largest magnitude is 127: scale 1, integers travel exactly.
    let q = Int8::new(128).unwrap();
    for backend in BACKENDS {
        on_ranks(backend, 3, |c| {
            let mut grad: Vec<f32> = (0..1000)
                .map(|i| ((i * 11 + c.rank() as i32 * 5) % 255 - 127) as f32)
                .collect();
            for b in grad.chunks_mut(128) {
                b[0] = 127.0;
            }
            let mut want = vec![0f32; grad.len()];
            c.all_reduce(&grad, &mut want, ReduceOp::Sum).unwrap();
            let mut fb = ErrorFeedback::new();
            let ex = q.all_reduce(c, &mut grad, &mut fb).unwrap();
            assert_eq!(ex.path, Path::Int8);
            assert_eq!(ex.payload_bytes, 8 * 4 + 1000);
            assert_eq!(grad, want, "{backend:?}");
            assert!(fb.residual().iter().all(|&x| x == 0.0));
        });
    }
}

#[test]
fn every_rank_gets_the_same_bits() {
    let schemes = [
        Compression::TopK(TopK::new(0.02).unwrap()),
        Compression::TopK(
            TopK::new(0.02)
                .unwrap()
                .with_momentum(0.9)
                .unwrap()
                .with_selection(Selection::Sampled { sample_ratio: 0.01 })
                .unwrap(),
        ),
        Compression::Int8(Int8::default()),
        Compression::None,
    ];
    for backend in BACKENDS {
        for scheme in &schemes {
            let outs = on_ranks(backend, 4, |c| {
                let mut fb = ErrorFeedback::new();
                let mut bits = Vec::new();
                for _ in 0..2 {
                    let mut g = frac_grad(c.rank(), 5000);
                    scheme.all_reduce(c, &mut g, &mut fb).unwrap();
                    bits.extend(g.iter().map(|x| x.to_bits()));
                }
                bits
            });
            assert!(outs.iter().any(|b| b.iter().any(|&x| x != 0)));
            for (r, o) in outs.iter().enumerate() {
                assert!(
                    o == &outs[0],
                    "{backend:?} {}: rank {r} differs",
                    scheme.describe()
                );
            }
        }
    }
}

#[test]
fn buckets_of_different_sizes_fail_on_every_rank_naming_both() {
    for backend in BACKENDS {
        for scheme in [
            Compression::TopK(TopK::new(0.01).unwrap()),
            Compression::Int8(Int8::default()),
        ] {
            let outs = on_ranks(backend, 3, |c| {
                // Rank 2's bucket has one element more: same k at 1%.
                let len = if c.rank() == 2 { 1001 } else { 1000 };
                let mut g = vec![1.5f32; len];
                let mut fb = ErrorFeedback::new();
                let e = scheme.all_reduce(c, &mut g, &mut fb).unwrap_err();
                assert!(g.iter().all(|&x| x == 1.5), "the bucket was changed");
                assert!(fb.residual().is_empty());
                e
            });
            for e in outs {
                assert!(matches!(e, CompressError::BucketMismatch { .. }), "{e}");
                let t = e.to_string();
                assert!(t.contains("rank 0 has 1000 elements"), "{t}");
                assert!(t.contains("rank 2 has 1001 elements"), "{t}");
            }
        }
    }
}

#[test]
fn residual_of_another_bucket_fails_every_rank() {
    let topk = TopK::new(0.1).unwrap();
    let outs = on_ranks(BackendKind::Sim, 2, |c| {
        let mut fb = ErrorFeedback::new();
        let mut g = vec![1.0f32; 100];
        topk.all_reduce(c, &mut g, &mut fb).unwrap();
        // Rank 1 reuses the state on a bucket of 50 elements.
        let mut g = vec![1.0f32; if c.rank() == 1 { 50 } else { 100 }];
        topk.all_reduce(c, &mut g, &mut fb).unwrap_err().to_string()
    });
    assert!(outs[1].contains("residual"), "{}", outs[1]);
    assert!(outs[1].contains("100 elements, 50 expected"), "{}", outs[1]);
    assert!(outs[0].contains("rank 1 has 50 elements"), "{}", outs[0]);
}

#[test]
fn the_byte_cost_rule_picks_dense_above_its_density_and_sends_everything() {
    // 8 ranks, 8-byte pairs: sparse below 12.5%.
    assert!(sparse_wins(8, 1000, 124));
    assert!(!sparse_wins(8, 1000, 125));
    assert!(sparse_wins(2, 1000, 499));
    assert!(!sparse_wins(2, 1000, 500));
    let topk = TopK::new(0.6).unwrap();
    for backend in BACKENDS {
        on_ranks(backend, 2, |c| {
            let grad = int_grad(c.rank(), 0, 200);
            let mut want = vec![0f32; 200];
            c.all_reduce(&grad, &mut want, ReduceOp::Sum).unwrap();
            let mut got = grad.clone();
            let mut fb = ErrorFeedback::new();
            let ex = topk.all_reduce(c, &mut got, &mut fb).unwrap();
            assert_eq!(ex.path, Path::Dense);
            assert_eq!(got, want);
            assert!(fb.residual().is_empty());
        });
    }
}

#[test]
fn bad_settings_name_the_field_and_value() {
    for r in [0.0, -0.1, 1.5, f64::NAN] {
        let e = TopK::new(r).unwrap_err().to_string();
        assert!(e.starts_with("ratio = "), "{e}");
    }
    let e = TopK::new(0.1)
        .unwrap()
        .with_selection(Selection::Sampled { sample_ratio: 2.0 })
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("sample_ratio = 2"), "{e}");
    assert!(TopK::new(0.1).unwrap().with_momentum(1.0).is_err());
    assert!(Int8::new(0)
        .unwrap_err()
        .to_string()
        .starts_with("block = 0"));
}

#[test]
fn wire_ops_are_the_collectives_the_exchange_makes() {
    use hccl::comm::DataType;
    use hccl_compress::WireKind;
    for p in [2u32, 4] {
        for (compression, len) in [
            (Compression::None, 1000),
            (Compression::TopK(TopK::new(0.01).unwrap()), 1000),
            // Above 1/P density: the rule picks dense.
            (Compression::TopK(TopK::new(0.6).unwrap()), 1000),
            (Compression::Int8(Int8::new(64).unwrap()), 1000),
        ] {
            let ops = compression.wire_ops(len, p);
            let exchanges = on_ranks(BackendKind::Sim, p, |c| {
                let mut g = int_grad(c.rank(), 0, len);
                let mut fb = ErrorFeedback::new();
                compression.all_reduce(c, &mut g, &mut fb).unwrap()
            });
            let data = *ops.last().unwrap();
            let ex = exchanges[0];
            assert!(exchanges.iter().all(|e| *e == ex));
            let (kind, dtype) = match ex.path {
                Path::Dense => (WireKind::AllReduce, DataType::Fp32),
                Path::Sparse { .. } => (WireKind::AllGather, DataType::Uint32),
                Path::Int8 => (WireKind::AllGather, DataType::Uint8),
            };
            let what = compression.describe();
            assert_eq!((data.kind, data.dtype), (kind, dtype), "{what} on {p}");
            assert_eq!(data.count * dtype.size(), ex.payload_bytes, "{what} on {p}");
            // The compressed exchanges first check the bucket (3 u64).
            let checked = !matches!(compression, Compression::None);
            assert_eq!(ops.len(), 1 + usize::from(checked), "{what}");
        }
    }
}

//! The Reducer and OverlappedGradientSync on the simulator backend and on
//! TCP (ranks as threads of this process).

use std::sync::Arc;

use hccl::{BackendKind, Comm};
use hccl_compress::{
    CompressError, Compression, OverlappedGradientSync, Path, Reducer, ReducerConfig, TopK,
};

const BACKENDS: [BackendKind; 2] = [BackendKind::Sim, BackendKind::Tcp];

/// `f` on every rank of a fresh `n`-rank communicator, one thread each.
fn on_ranks<R: Send>(backend: BackendKind, n: u32, f: impl Fn(Arc<Comm>) -> R + Sync) -> Vec<R> {
    let comms: Vec<Arc<Comm>> = Comm::init_all_on(backend, n)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect();
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                let c = Arc::clone(c);
                let f = &f;
                s.spawn(move || f(c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for c in comms {
        Arc::try_unwrap(c).unwrap().destroy().unwrap();
    }
    out
}

const SIZES: [usize; 6] = [300, 50, 700, 20, 1000, 64];

/// Small caps so the model spans several buckets: first 400 B, then 2000 B.
fn config(compression: Compression, average: bool) -> ReducerConfig {
    ReducerConfig {
        first_bucket_bytes: 400,
        bucket_cap_bytes: 2000,
        compression,
        average,
        rebuild: true,
    }
}

/// Rank `r`'s gradient of parameter `p` at `step`: integer-valued.
fn grad(r: u32, step: u32, p: usize, i: usize) -> f32 {
    ((i * 3 + p * 17 + r as usize * 5 + step as usize * 7) % 41) as f32 - 20.0
}

/// The average over `n` ranks (exact: integer sums over a power of two).
fn average(n: u32, step: u32, p: usize, i: usize) -> f32 {
    (0..n).map(|r| grad(r, step, p, i)).sum::<f32>() / n as f32
}

#[test]
fn buckets_fill_in_reverse_parameter_order_and_reduce_to_the_average() {
    for backend in BACKENDS {
        on_ranks(backend, 2, |c| {
            let mut red = Reducer::new(c.clone(), &SIZES, config(Compression::None, true)).unwrap();
            // 4-byte elements: 64 + 1000 (>= 400 B) close the first bucket.
            assert_eq!(red.buckets()[0], vec![5, 4]);
            for step in 0..3 {
                // A rank-dependent ready order in step 0: rank 0's is adopted.
                let mut order: Vec<usize> = (0..SIZES.len()).rev().collect();
                if step == 0 && c.rank() == 1 {
                    order.swap(0, 3);
                }
                for &p in &order {
                    let g = red.grad_mut(p).unwrap();
                    for (i, x) in g.iter_mut().enumerate() {
                        *x = grad(c.rank(), step, p, i);
                    }
                    red.mark_ready(p).unwrap();
                }
                let stats = red.finish().unwrap();
                assert!(stats.paths.iter().all(|p| *p == Path::Dense));
                assert_eq!(stats.payload_bytes, 4 * SIZES.iter().sum::<usize>() as u64);
                for p in 0..SIZES.len() {
                    let g = red.grad(p).unwrap();
                    for (i, &x) in g.iter().enumerate() {
                        assert_eq!(
                            x,
                            average(2, step, p, i),
                            "{backend:?} step {step} p {p} i {i}"
                        );
                    }
                }
            }
        });
    }
}

#[test]
fn the_rebuild_adopts_rank_0s_ready_order_on_every_rank() {
    let plans = on_ranks(BackendKind::Sim, 3, |c| {
        let mut red = Reducer::new(c.clone(), &SIZES, config(Compression::None, false)).unwrap();
        // Step 1's ready order: forward order on rank 0, reversed elsewhere.
        let order: Vec<usize> = if c.rank() == 0 {
            (0..SIZES.len()).collect()
        } else {
            (0..SIZES.len()).rev().collect()
        };
        for &p in &order {
            red.grad_mut(p).unwrap().fill(c.rank() as f32 + 1.0);
            red.mark_ready(p).unwrap();
        }
        red.finish().unwrap();
        // The reduced step-1 gradients survived the rebuild.
        for p in 0..SIZES.len() {
            assert!(red.grad(p).unwrap().iter().all(|&x| x == 6.0));
        }
        red.buckets().to_vec()
    });
    // Rank 0's order, bucketed: 300 (1200 B >= 400), 50+700 and 20+1000 (>= 2000 B), 64.
    let want = vec![vec![0], vec![1, 2], vec![3, 4], vec![5]];
    for p in plans {
        assert_eq!(p, want);
    }
}

#[test]
fn a_reordered_bucket_on_one_rank_is_an_error_on_every_rank_naming_it() {
    for backend in BACKENDS {
        let errors = on_ranks(backend, 3, |c| {
            // Rank 2 builds parameters 1 and 2 in the other order: the
            // same bucket lengths, other gradients paired.
            let sizes: &[usize] = if c.rank() == 2 {
                &[100, 300, 200, 400]
            } else {
                &[100, 200, 300, 400]
            };
            let cfg = ReducerConfig {
                first_bucket_bytes: 400,
                bucket_cap_bytes: 2000,
                ..ReducerConfig::default()
            };
            Reducer::new(c, sizes, cfg).err().map(|e| e.to_string())
        });
        for e in errors {
            let e = e.expect("the plans differ: every rank fails");
            assert!(e.contains("the first differing bucket is bucket 1:"), "{e}");
            assert!(e.contains("rank 0 has 2 parameters, 500 elements"), "{e}");
            assert!(e.contains("rank 2 has 2 parameters, 500 elements"), "{e}");
        }
    }
}

#[test]
fn another_compression_on_one_rank_is_a_plan_mismatch() {
    let errors = on_ranks(BackendKind::Sim, 2, |c| {
        let comp = if c.rank() == 0 {
            Compression::None
        } else {
            Compression::TopK(TopK::new(0.01).unwrap())
        };
        Reducer::new(c, &SIZES, config(comp, true)).err()
    });
    for e in errors {
        assert!(
            matches!(e, Some(CompressError::PlanMismatch { .. })),
            "{e:?}"
        );
        assert!(e.unwrap().to_string().contains("bucket 0"));
    }
}

#[test]
fn top_k_buckets_give_every_rank_the_same_gradients() {
    for backend in BACKENDS {
        let outs = on_ranks(backend, 2, |c| {
            let topk = Compression::TopK(TopK::new(0.05).unwrap());
            let mut red = Reducer::new(c.clone(), &SIZES, config(topk, true)).unwrap();
            let mut all = Vec::new();
            for step in 0..3 {
                for p in (0..SIZES.len()).rev() {
                    let g = red.grad_mut(p).unwrap();
                    for (i, x) in g.iter_mut().enumerate() {
                        *x = grad(c.rank(), step, p, i) * 0.37;
                    }
                    red.mark_ready(p).unwrap();
                }
                let stats = red.finish().unwrap();
                assert!(stats.paths.iter().all(|p| matches!(p, Path::Sparse { .. })));
                for p in 0..SIZES.len() {
                    all.extend(red.grad(p).unwrap().iter().map(|x| x.to_bits()));
                }
            }
            all
        });
        assert_eq!(outs[0], outs[1], "{backend:?}");
        assert!(outs[0].iter().any(|&x| x != 0));
    }
}

#[test]
fn overlapped_sync_returns_each_steps_average_one_step_later() {
    for backend in BACKENDS {
        on_ranks(backend, 2, |c| {
            let mut sync =
                OverlappedGradientSync::new(c.clone(), &SIZES, config(Compression::None, true))
                    .unwrap();
            for step in 0..4u32 {
                for p in (0..SIZES.len()).rev() {
                    let g = sync.grad_mut(p).unwrap();
                    for (i, x) in g.iter_mut().enumerate() {
                        *x = grad(c.rank(), step, p, i);
                    }
                    sync.mark_ready(p).unwrap();
                }
                let prev = sync.end_step().unwrap();
                assert_eq!(prev.is_none(), step == 0);
                if let Some(prev) = prev {
                    for p in 0..SIZES.len() {
                        for (i, &x) in prev.grad(p).unwrap().iter().enumerate() {
                            assert_eq!(x, average(2, step - 1, p, i), "{backend:?} step {step}");
                        }
                    }
                }
            }
            let last = sync.flush().unwrap();
            assert_eq!(last.grad(0).unwrap()[0], average(2, 3, 0, 0));
        });
    }
}

#[test]
fn misuse_is_an_error_naming_the_parameter() {
    on_ranks(BackendKind::Sim, 1, |c| {
        let mut red = Reducer::new(c, &SIZES, ReducerConfig::default()).unwrap();
        let e = red.grad_mut(6).unwrap_err().to_string();
        assert!(e.contains("parameter 6 does not exist"), "{e}");
        red.mark_ready(2).unwrap();
        let e = red.mark_ready(2).unwrap_err().to_string();
        assert!(
            e.contains("parameter 2 was marked ready twice in step 1"),
            "{e}"
        );
        red.finish().unwrap();
    });
    let e = on_ranks(BackendKind::Sim, 1, |c| {
        let cfg = ReducerConfig {
            bucket_cap_bytes: 0,
            ..ReducerConfig::default()
        };
        Reducer::new(c, &SIZES, cfg).err().unwrap().to_string()
    });
    assert!(e[0].starts_with("bucket_cap_bytes = 0"), "{}", e[0]);
}

#[test]
fn bucket_plan_is_the_reducers_first_plan_and_checks_its_order() {
    let cfg = config(Compression::None, true);
    let order: Vec<usize> = (0..SIZES.len()).rev().collect();
    let plan = cfg.bucket_plan(&SIZES, &order).unwrap();
    let built = on_ranks(BackendKind::Sim, 2, |c| {
        Reducer::new(c, &SIZES, cfg.clone())
            .unwrap()
            .buckets()
            .to_vec()
    });
    assert_eq!(built[0], plan);
    // 64 + 1000 elements pass the first cap of 400 bytes at once.
    assert_eq!(plan[0], vec![5, 4]);
    for bad in [
        vec![5, 4, 3, 2, 1],
        vec![5, 4, 3, 2, 1, 1],
        vec![6, 4, 3, 2, 1, 0],
    ] {
        match cfg.bucket_plan(&SIZES, &bad) {
            Err(CompressError::Config { field: "order", .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let zero = ReducerConfig {
        bucket_cap_bytes: 0,
        ..cfg.clone()
    };
    assert!(matches!(
        zero.bucket_plan(&SIZES, &order),
        Err(CompressError::Config {
            field: "bucket_cap_bytes",
            ..
        })
    ));
}

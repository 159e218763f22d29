//! The same conformance cases with every rank a thread of this process:
//! on the simulator (`BackendKind::Sim`) and on TCP over loopback
//! (`Comm::init_all`), plus split, async ops and abort.

use std::sync::Arc;

use hccl::comm::{BackendKind, ReduceOp};
use hccl::{Comm, CommError};

/// Runs every case on `world` ranks of `backend`, one thread per rank.
fn conformance(backend: BackendKind, world: u32) {
    let results = hccl_conformance::on_threads(backend, world, |c| {
        for (i, case) in hccl_conformance::cases(c.size()).iter().enumerate() {
            hccl_conformance::run_case(&c, case, i as u64)
                .map_err(|e| format!("{}: {e}", case.name()))?;
        }
        Ok::<_, String>(())
    });
    for (r, res) in results.into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("{backend:?} rank {r} of {world}: {e}"));
    }
}

#[test]
fn sim_conformance_2_and_3_ranks() {
    conformance(BackendKind::Sim, 2);
    conformance(BackendKind::Sim, 3);
}

#[test]
fn tcp_threads_conformance_4_ranks() {
    conformance(BackendKind::Tcp, 4);
}

/// Split, typed and async calls, and the same program on both backends.
fn program(backend: BackendKind) -> Vec<Vec<f32>> {
    let comms = Comm::init_all_on(backend, 4).unwrap();
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let r = c.rank() as f32;
                // Even and odd ranks form two communicators.
                let sub = c.split(Some(c.rank() % 2), c.rank()).unwrap().unwrap();
                assert_eq!(sub.size(), 2);
                let mut v = vec![r; 3];
                sub.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
                let h = c.all_reduce_async(vec![r + 1.0; 2], ReduceOp::Max);
                let m = h.wait().unwrap();
                let mut g = vec![0.0f32; 4];
                c.all_gather(&[r * 10.0], &mut g).unwrap();
                vec![v, m, g]
            })
        })
        .collect();
    hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
}

#[test]
fn same_program_same_answers_on_tcp_and_sim() {
    let tcp = program(BackendKind::Tcp);
    let sim = program(BackendKind::Sim);
    assert_eq!(tcp, sim);
    // Rank 0 (even group {0, 2}): 0 + 2; max of r+1 is 4; gather 0,10,20,30.
    assert_eq!(tcp[0], vec![2.0; 3]);
    assert_eq!(tcp[1], vec![4.0; 2]);
    assert_eq!(tcp[2], vec![0.0, 10.0, 20.0, 30.0]);
    // Rank 1 (odd group {1, 3}).
    assert_eq!(tcp[3], vec![4.0; 3]);
}

#[test]
fn abort_twice_is_a_noop_and_peers_fail() {
    let comms: Vec<Arc<Comm>> = Comm::init_all_on(BackendKind::Tcp, 2)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect();
    comms[0].abort();
    comms[0].abort();
    let e = comms[0]
        .all_reduce(&[1.0f32], &mut [0.0], ReduceOp::Sum)
        .unwrap_err();
    assert!(e.to_string().contains("aborted"), "{e}");
    let e = comms[1]
        .all_reduce(&[1.0f32], &mut [0.0], ReduceOp::Sum)
        .unwrap_err();
    assert!(e.to_string().contains("rank 0"), "{e}");
    assert!(comms[1].async_error().is_some());
}

#[test]
fn wrong_buffer_length_is_an_error_before_anything_moves() {
    let comms = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    let e = comms[0].all_gather(&[1u8, 2], &mut [0u8; 3]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "comm 'world' AllGather: receive buffer has 3 bytes, the call needs 4"
    );
    assert_eq!(e.hccl_result(), 1, "HCCL_E_PARA");
    // Refused before it took a turn: the communicator is still usable.
    assert!(comms[0].async_error().is_none());
    let out = hccl_conformance::on_comms(comms, |c| {
        let mut recv = [0u8; 4];
        c.all_gather(&[c.rank() as u8; 2], &mut recv).map(|()| recv)
    });
    for r in out {
        assert_eq!(r.unwrap(), [0, 0, 1, 1]);
    }
}

#[test]
fn typed_wrappers_follow_hccl_shapes_on_sim() {
    typed_wrappers(BackendKind::Sim);
}

#[test]
fn typed_wrappers_follow_hccl_shapes_on_tcp() {
    typed_wrappers(BackendKind::Tcp);
}

/// Every typed wrapper, checked against the collective's definition by hand
/// (3 ranks; rank r contributes values r*10 + i).
fn typed_wrappers(backend: BackendKind) {
    let comms = Comm::init_all_on(backend, 3).unwrap();
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let r = c.rank() as i32;
                let mine: Vec<i32> = (0..3).map(|i| r * 10 + i).collect();
                // ReduceScatter in place: block r of the sum lands in block r.
                let mut rs: Vec<i32> = (0..6).map(|i| r * 10 + i).collect();
                c.reduce_scatter_in_place(&mut rs, ReduceOp::Sum).unwrap();
                let sum_at = |i: i32| 30 + 3 * i; // (0+10+20) + 3i
                assert_eq!(
                    &rs[2 * r as usize..2 * r as usize + 2],
                    &[sum_at(2 * r), sum_at(2 * r + 1)]
                );
                // AllGather in place: rank r's input is its own block.
                let mut ag = vec![-1i32; 3];
                ag[r as usize] = r * 7;
                c.all_gather_in_place(&mut ag).unwrap();
                assert_eq!(ag, vec![0, 7, 14]);
                // Broadcast from rank 2.
                let mut b = if r == 2 { vec![5i32, 6] } else { vec![0, 0] };
                c.broadcast(&mut b, 2).unwrap();
                assert_eq!(b, vec![5, 6]);
                // Reduce (max) to rank 1: only the root has an output.
                let mut red = vec![0i32; if r == 1 { 3 } else { 0 }];
                c.reduce(&mine, &mut red, ReduceOp::Max, 1).unwrap();
                if r == 1 {
                    assert_eq!(red, vec![20, 21, 22]);
                }
                // Scatter from rank 0 and gather back to rank 0.
                let src: Vec<i32> = if r == 0 { vec![100, 101, 102] } else { vec![] };
                let mut one = [0i32];
                c.scatter(&src, &mut one, 0).unwrap();
                assert_eq!(one[0], 100 + r);
                let mut back = vec![0i32; if r == 0 { 3 } else { 0 }];
                c.gather(&one, &mut back, 0).unwrap();
                if r == 0 {
                    assert_eq!(back, vec![100, 101, 102]);
                }
                // AllToAll: block j of rank i goes to block i of rank j.
                let mut a2a = vec![0i32; 3];
                c.all_to_all(&mine, &mut a2a).unwrap();
                assert_eq!(a2a, vec![r, 10 + r, 20 + r]);
                c.barrier().unwrap();
                // Shapes that do not split are errors, not panics.
                assert!(c.all_gather_in_place(&mut [0i32; 4]).is_err());
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// `abort()` from another thread interrupts an op that would otherwise wait
/// for `HCCL_EXEC_TIMEOUT` (1836 s by default), on both backends.
#[test]
fn abort_interrupts_a_running_op() {
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let comms: Vec<Arc<Comm>> = Comm::init_all_on(backend, 2)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect();
        let c0 = Arc::clone(&comms[0]);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Rank 1 never calls: this waits until aborted.
            let r = c0.all_reduce(&[1.0f32; 4], &mut [0.0; 4], ReduceOp::Sum);
            let _ = tx.send(r);
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        comms[0].abort();
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{backend:?}: the op did not return after abort"));
        let e = r.unwrap_err().to_string();
        assert!(e.contains("aborted"), "{backend:?}: {e}");
    }
}

/// Runs `f(rank, comm)` on one thread per rank of a fresh `n`-rank
/// communicator; each result is `None` if the rank had not returned
/// within 20 s (far below `HCCL_EXEC_TIMEOUT`'s default of 1836 s, so a
/// rank that waits for a failed peer shows up as `None`).
fn per_rank<R: Send + 'static>(
    backend: BackendKind,
    n: u32,
    f: impl Fn(u32, Comm) -> R + Send + Sync + 'static,
) -> Vec<Option<R>> {
    let f = Arc::new(f);
    let rxs: Vec<_> = Comm::init_all_on(backend, n)
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(r, c)| {
            let (tx, rx) = std::sync::mpsc::channel();
            let f = Arc::clone(&f);
            std::thread::spawn(move || {
                let _ = tx.send(f(r as u32, c));
            });
            rx
        })
        .collect();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    rxs.into_iter()
        .map(|rx| {
            rx.recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
                .ok()
        })
        .collect()
}

/// The error `ranks` got, in order; panics naming the rank if one
/// succeeded or had not returned ([`per_rank`]'s `None`).
fn errors<T: std::fmt::Debug>(
    backend: BackendKind,
    out: &[Option<Result<T, String>>],
    ranks: impl IntoIterator<Item = usize>,
) -> Vec<(usize, String)> {
    ranks
        .into_iter()
        .map(|r| match &out[r] {
            Some(Err(e)) => (r, e.clone()),
            other => panic!("{backend:?} rank {r}: {other:?}"),
        })
        .collect()
}

/// A rank's bad buffer is refused on that rank alone before its call
/// takes a turn: the call is not an op, so the rank's next call (the same
/// op with a right buffer) is the op its peers wait in, and every rank
/// gets the right result.
#[test]
fn a_ranks_bad_buffer_is_refused_locally_and_its_retry_completes_the_op_on_both_backends() {
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 3, |r, c| {
            let mut refused = None;
            if r == 1 {
                let e = c
                    .all_reduce(&[1.0f32; 4], &mut [0.0; 3], ReduceOp::Sum)
                    .unwrap_err();
                refused = Some((e.hccl_result(), e.to_string()));
            }
            let mut recv = [0.0f32; 4];
            c.all_reduce(&[1.0f32; 4], &mut recv, ReduceOp::Sum)
                .map(|()| (refused, recv))
                .map_err(|e| e.to_string())
        });
        for (r, o) in out.into_iter().enumerate() {
            let (refused, recv) = o
                .unwrap_or_else(|| panic!("{backend:?} rank {r} hung"))
                .unwrap_or_else(|e| panic!("{backend:?} rank {r}: {e}"));
            assert_eq!(recv, [3.0; 4], "{backend:?} rank {r}");
            if r == 1 {
                let (code, text) = refused.unwrap();
                assert_eq!(code, 1, "{backend:?}: {text}");
                assert_eq!(
                    text, "comm 'world' AllReduce: receive buffer has 12 bytes, the call needs 16",
                    "{backend:?}"
                );
            }
        }
    }
}

#[test]
fn a_count_mismatch_fails_every_simulated_rank_naming_both() {
    let out = per_rank(BackendKind::Sim, 3, |r, c| {
        let n = if r == 1 { 11 } else { 10 };
        c.all_reduce(&vec![1.0f32; n], &mut vec![0.0; n], ReduceOp::Sum)
            .map_err(|e| e.to_string())
    });
    for (r, e) in errors(BackendKind::Sim, &out, 0..out.len()) {
        assert!(e.contains("count mismatch"), "rank {r}: {e}");
        assert_eq!(e.matches("AllReduce #0").count(), 1, "rank {r}: {e}");
        assert!(
            e.contains("11 on rank 1") && e.contains("10 on rank"),
            "rank {r}: {e}"
        );
    }
}

#[test]
fn a_dropped_communicator_is_a_lost_peer_on_both_backends() {
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 3, |r, c| {
            if r == 1 {
                drop(c);
                return Ok(());
            }
            c.all_reduce(&[1.0f32; 4], &mut [0.0; 4], ReduceOp::Sum)
                .map_err(|e| e.to_string())
        });
        for (r, e) in errors(backend, &out, [0, 2]) {
            assert!(
                e.contains("rank 1") && e.contains("destroyed its communicator"),
                "{backend:?} rank {r}: {e}"
            );
        }
    }
}

#[test]
fn all_gather_v_counts_that_differ_across_ranks_fail_every_rank() {
    // Rank 1 believes rank 0 sends 3 elements, the others 2: every rank
    // fails naming the per-rank counts, on both backends (it used to slip
    // past the check on the simulator, two ranks "succeeding").
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 3, |r, c| {
            let counts: [u64; 3] = if r == 1 { [3, 2, 2] } else { [2, 2, 2] };
            let displs = [0, counts[0], counts[0] + counts[1]];
            let send = vec![r as i32; counts[r as usize] as usize];
            let mut recv = vec![0i32; counts.iter().sum::<u64>() as usize];
            c.all_gather_v(&send, &mut recv, &counts, &displs)
                .map_err(|e| e.to_string())
        });
        for (r, e) in errors(backend, &out, 0..out.len()) {
            assert!(
                e.contains("per-rank counts mismatch"),
                "{backend:?} rank {r}: {e}"
            );
            // The counts themselves, not their hashes: at least the
            // reporting rank's own list.
            assert!(
                (e.contains("counts [2, 2, 2]") || e.contains("counts [3, 2, 2]"))
                    && !e.contains("hash"),
                "{backend:?} rank {r}: {e}"
            );
        }
    }
}

#[test]
fn split_color_u32_max_is_a_color_like_any_other() {
    // It once collided with the marker of `None`: rank 0 (no color) was
    // counted into the u32::MAX group.
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 3, |r, c| {
            let color = (r != 0).then_some(u32::MAX);
            let sub = c.split(color, r).map_err(|e| e.to_string())?;
            match sub {
                None => Ok(0),
                Some(s) => {
                    let mut v = [1u32];
                    s.all_reduce_in_place(&mut v, ReduceOp::Sum)
                        .map_err(|e| e.to_string())?;
                    Ok(s.size() * 100 + v[0])
                }
            }
        });
        let got: Vec<Option<Result<u32, String>>> = out;
        assert_eq!(
            got,
            vec![Some(Ok(0)), Some(Ok(202)), Some(Ok(202))],
            "{backend:?}"
        );
    }
}

/// `Comm::sub_comm` (HCCL's `HcclCreateSubCommConfig`): only the members
/// call it, in the order `rank_ids` gives them; rank 3 never does.
#[test]
fn a_sub_comm_is_made_by_its_members_only_on_both_backends() {
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 4, |r, c| {
            if r == 3 {
                return Ok::<_, String>((0, 0, 0.0));
            }
            // Rank 2 is the sub-communicator's rank 0.
            let sub = c.sub_comm(&[2, 0, 1], "trio").map_err(|e| e.to_string())?;
            let mut v = [r as f32 + 1.0];
            sub.all_reduce_in_place(&mut v, ReduceOp::Sum)
                .map_err(|e| e.to_string())?;
            Ok((sub.rank(), sub.size(), v[0]))
        });
        assert_eq!(
            out,
            vec![
                Some(Ok((1, 3, 6.0))),
                Some(Ok((2, 3, 6.0))),
                Some(Ok((0, 3, 6.0))),
                Some(Ok((0, 0, 0.0)))
            ],
            "{backend:?}"
        );
    }
}

#[test]
fn a_sub_comms_bad_rank_list_is_refused_before_any_exchange() {
    let out = per_rank(BackendKind::Sim, 2, |r, c| {
        if r == 1 {
            return Vec::<(u32, String)>::new();
        }
        [&[][..], &[0, 0], &[0, 2], &[1]]
            .iter()
            .map(|ids| match c.sub_comm(ids, "bad") {
                Err(e) => (e.hccl_result(), e.to_string()),
                Ok(_) => (0, "made".into()),
            })
            .collect()
    });
    let got = out[0].clone().expect("rank 0 answered");
    let texts: Vec<&str> = got.iter().map(|(_, t)| t.as_str()).collect();
    assert!(got.iter().all(|(code, _)| *code == 1), "{got:?}");
    assert!(texts[0].contains("rank_ids is empty"), "{texts:?}");
    assert!(texts[1].contains("rank 0 is listed twice"), "{texts:?}");
    assert!(
        texts[2].contains("rank_ids[1] = 2 is not a rank"),
        "{texts:?}"
    );
    assert!(
        texts[3].contains("this rank (0) is not in rank_ids [1]"),
        "{texts:?}"
    );
}

#[test]
fn a_rank_table_naming_another_host_says_so() {
    // examples/rank_table_2x8.json puts server 0 at 192.0.2.10
    // (TEST-NET-1), which is no address of this host: the error must blame
    // the table, not HCCL_IF_IP, which the user never set.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/rank_table_2x8.json"
    );
    let e = Comm::init_cluster_info(path, 0).unwrap_err().to_string();
    assert!(e.starts_with("rank table="), "{e}");
    assert!(
        e.contains("192.0.2.10") && e.contains("not an address of this host"),
        "{e}"
    );
    assert!(!e.contains("HCCL_IF_IP"), "{e}");
}

#[test]
fn non_roots_may_pass_buffers_they_do_not_use_as_in_mpi() {
    // The common idiom allocates the root's shapes on every rank.
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 3, |r, c| {
            let mut all = vec![-1i32; 3];
            c.gather(&[r as i32 * 10], &mut all, 1)
                .map_err(|e| e.to_string())?;
            let mut mine = [0i32];
            c.scatter(&[5, 6, 7], &mut mine, 1)
                .map_err(|e| e.to_string())?;
            let mut sum = [0i32; 2];
            c.reduce(&[1, r as i32], &mut sum, ReduceOp::Sum, 1)
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((all, mine[0], sum))
        });
        for (r, o) in out.into_iter().enumerate() {
            let (all, mine, sum) = o
                .expect("returned")
                .unwrap_or_else(|e| panic!("{backend:?} rank {r}: {e}"));
            assert_eq!(mine, [5, 6, 7][r], "{backend:?} rank {r}");
            if r == 1 {
                assert_eq!(all, vec![0, 10, 20], "{backend:?}");
                assert_eq!(sum, [3, 3], "{backend:?}");
            } else {
                // Untouched.
                assert_eq!(all, vec![-1; 3], "{backend:?} rank {r}");
                assert_eq!(sum, [0, 0], "{backend:?} rank {r}");
            }
        }
    }
}

/// The backend-neutral variant of a failure, by name.
fn variant(e: &CommError) -> &'static str {
    match e {
        CommError::Mismatch(_) => "Mismatch",
        CommError::PeerLost(_) => "PeerLost",
        CommError::Remote(_) => "Remote",
        CommError::Timeout(_) => "Timeout",
        _ => "another variant",
    }
}

#[test]
fn simulated_failures_carry_the_same_hccl_codes_and_variants_as_tcp() {
    // A program branching on HcclResult, or matching the error, must see
    // the same on both backends: 21 (HCCL_E_REMOTE) and
    // `CommError::Mismatch` for a mismatch, 13 and `CommError::PeerLost`
    // for a lost peer.
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 2, |r, c| {
            let n = if r == 1 { 5 } else { 4 };
            let e = c
                .all_reduce(&vec![1.0f32; n], &mut vec![0.0; n], ReduceOp::Sum)
                .unwrap_err();
            (e.hccl_result(), variant(&e))
        });
        let mismatch = Some((21, "Mismatch"));
        assert_eq!(out, vec![mismatch, mismatch], "{backend:?} mismatch");
        let out = per_rank(backend, 2, |r, c| {
            if r == 1 {
                drop(c);
                return (0, "");
            }
            let e = c
                .all_reduce(&[1.0f32], &mut [0.0], ReduceOp::Sum)
                .unwrap_err();
            (e.hccl_result(), variant(&e))
        });
        assert_eq!(out[0], Some((13, "PeerLost")), "{backend:?} lost peer");
    }
}

#[test]
fn argument_errors_found_before_the_op_is_queued_stay_on_their_rank() {
    // Checks in the typed wrappers (block shapes, V layouts, world size)
    // return before an op exists: rank 1's bad call is refused there, and
    // its good call then runs the op the others wait in.
    type Case = fn(u32, &Comm, bool) -> Result<(), String>;
    let cases: [(&str, Case); 3] = [
        (
            "7 elements do not split into 3 equal blocks",
            |_, c, bad| {
                let n = if bad { 7 } else { 6 };
                c.all_to_all(&vec![1i32; n], &mut vec![0; n])
                    .map_err(|e| e.to_string())
            },
        ),
        ("recv_displs", |r, c, bad| {
            // Rank 1's displacement runs past its receive buffer.
            let displs = if bad { [0, 1, 9] } else { [0, 1, 2] };
            c.all_gather_v(&[r as i32], &mut [0i32; 3], &[1, 1, 1], &displs)
                .map_err(|e| e.to_string())
        }),
        ("world_size", |_, c, bad| {
            let n = if bad { 4 } else { 3 };
            let args = hccl_algos::collective::CollectiveArgs::new(
                hccl_algos::collective::CollectiveKind::AllReduce,
                1,
                hccl_algos::DataType::Int32,
                n,
            );
            c.collective(&args, &[0; 4], &mut [0; 4])
                .map_err(|e| e.to_string())
        }),
    ];
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        for (want, case) in cases {
            let out = per_rank(backend, 3, move |r, c| {
                let refused = (r == 1).then(|| case(r, &c, true));
                case(r, &c, false).map(|()| refused)
            });
            for (r, o) in out.into_iter().enumerate() {
                let refused = o
                    .unwrap_or_else(|| panic!("{backend:?} {want}: rank {r} hung"))
                    .unwrap_or_else(|e| panic!("{backend:?} {want}: rank {r}: {e}"));
                if r == 1 {
                    let e = refused.unwrap().unwrap_err();
                    assert!(e.contains(want), "{backend:?} {want}: {e}");
                }
            }
        }
    }
}

#[test]
fn errors_on_a_split_communicator_name_world_ranks_on_both_backends() {
    // Issue 13 item 11: in the odd group {1, 3}, local rank 1 (global 3)
    // leaves; local rank 0 (global 1) must say who is who.
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 4, |r, c| {
            let sub = c.split(Some(r % 2), r).unwrap().unwrap();
            if r == 3 {
                drop(sub);
                return Ok(());
            }
            if r != 1 {
                return Ok(());
            }
            sub.all_reduce(&[1.0f32; 4], &mut [0.0; 4], ReduceOp::Sum)
                .map_err(|e| e.to_string())
        });
        for (r, e) in errors(backend, &out, [1]) {
            assert!(
                e.contains("rank 0 (global 1) lost rank 1 (global 3)")
                    && e.contains("comm 'world/split"),
                "{backend:?} rank {r}: {e}"
            );
        }
    }
}

/// A split takes the same number of the parent's sequence numbers on
/// both backends, so the parent's next op is named alike in errors (a
/// hang replayed in the simulator names the op the job named): it was
/// `#1` on the simulator and `#2` on TCP, which exchanges root infos.
#[test]
fn the_op_after_a_split_has_the_same_seq_on_both_backends() {
    let mut named = Vec::new();
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let out = per_rank(backend, 2, |r, c| {
            let color = if r == 0 { None } else { Some(0) };
            let _sub = c.split(color, r).unwrap();
            let n = if r == 1 { 5 } else { 4 };
            c.all_reduce(&vec![1.0f32; n], &mut vec![0.0; n], ReduceOp::Sum)
                .map_err(|e| e.to_string())
        });
        let e = errors(backend, &out, [0]).remove(0).1;
        let seq = e
            .split("AllReduce #")
            .nth(1)
            .and_then(|t| t.split(':').next())
            .map(str::to_owned);
        named.push((backend, seq, e));
    }
    assert!(named[0].1.is_some(), "{named:?}");
    assert_eq!(named[0].1, named[1].1, "{named:?}");
}

/// A rank whose op fails with its own prefixed error tells the others
/// its reason without that prefix: "aborted by rank 1: rank 1 failed:
/// <reason>", the op named once (TCP: 3 ranks, a count mismatch).
#[test]
fn a_failed_ranks_reason_names_the_op_once_on_tcp() {
    let out = per_rank(BackendKind::Tcp, 3, |r, c| {
        let n = if r == 1 { 11 } else { 10 };
        c.all_reduce(&vec![1.0f32; n], &mut vec![0.0; n], ReduceOp::Sum)
            .map_err(|e| e.to_string())
    });
    for (r, e) in errors(BackendKind::Tcp, &out, 0..out.len()) {
        eprintln!("Tcp rank {r}: {e}");
        assert!(e.matches("AllReduce #0").count() <= 1, "rank {r}: {e}");
    }
}

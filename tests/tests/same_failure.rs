//! The same failure gives every rank the same `CommError` variant and
//! `HcclResult` code on the simulator and on TCP, and the same words
//! (issue 15, "errors keep their types"). Its own test binary:
//! `HCCL_EXEC_TIMEOUT` is process-wide.

use std::sync::{Arc, Barrier};

use hccl::comm::{BackendKind, ReduceOp};
use hccl::{Comm, CommError};

const BACKENDS: [BackendKind; 2] = [BackendKind::Tcp, BackendKind::Sim];

/// Every rank's (variant, code, text) of `f`'s error, or `None` for a
/// rank that returned `Ok` (or did not return in 20 s). Every rank keeps
/// its communicator until all have returned, so a rank that skips the op
/// is not a lost peer.
fn per_rank(
    backend: BackendKind,
    n: u32,
    f: impl Fn(u32, &Comm) -> Result<(), CommError> + Send + Sync + 'static,
) -> Vec<Option<(&'static str, u32, String)>> {
    // 1 s per op (the same value in every test of this binary).
    std::env::set_var("HCCL_EXEC_TIMEOUT", "1");
    let f = Arc::new(f);
    let done = Arc::new(Barrier::new(n as usize));
    let rxs: Vec<_> = Comm::init_all_on(backend, n)
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(r, c)| {
            let (tx, rx) = std::sync::mpsc::channel();
            let (f, done) = (Arc::clone(&f), Arc::clone(&done));
            std::thread::spawn(move || {
                let out = f(r as u32, &c)
                    .err()
                    .map(|e| (variant(&e), e.hccl_result(), e.to_string()));
                let _ = tx.send(out);
                done.wait();
                drop(c);
            });
            rx
        })
        .collect();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    rxs.into_iter()
        .map(|rx| {
            rx.recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
                .ok()
                .flatten()
        })
        .collect()
}

/// The variant of a failure, by name.
fn variant(e: &CommError) -> &'static str {
    match e {
        CommError::Mismatch(_) => "Mismatch",
        CommError::PeerLost(_) => "PeerLost",
        CommError::Remote(_) => "Remote",
        CommError::Timeout(_) => "Timeout",
        CommError::Buffer { .. } => "Buffer",
        _ => "another variant",
    }
}

/// Checks rank `r`'s outcome: `want` (variant, code), and its text holds
/// every one of `has`.
fn check(
    backend: BackendKind,
    out: &[Option<(&'static str, u32, String)>],
    r: usize,
    want: (&str, u32),
    has: &[&str],
) {
    let Some((v, code, text)) = &out[r] else {
        panic!("{backend:?} rank {r}: no error");
    };
    eprintln!("{backend:?} rank {r}: {text}");
    assert_eq!((*v, *code), want, "{backend:?} rank {r}: {text}");
    for s in has {
        assert!(
            text.contains(s),
            "{backend:?} rank {r}: {text:?} lacks {s:?}"
        );
    }
    assert!(
        !text.contains("simulator: "),
        "{backend:?} rank {r}: {text}"
    );
}

#[test]
fn a_rank_that_never_calls_the_op_is_a_timeout_on_every_waiting_rank_on_both_backends() {
    for backend in BACKENDS {
        let out = per_rank(backend, 4, |r, c| {
            if r == 2 {
                return Ok(());
            }
            c.all_reduce(&[1.0f32; 5], &mut [0.0; 5], ReduceOp::Sum)
        });
        assert!(out[2].is_none(), "{backend:?} rank 2: {:?}", out[2]);
        for r in [0, 1, 3] {
            check(
                backend,
                &out,
                r,
                ("Timeout", 9),
                &["comm 'world' AllReduce #0: ", "rank 2"],
            );
            let text = &out[r].as_ref().unwrap().2;
            // No "rank 3: rank 3 timed out", no rank named twice. A rank
            // told by a peer's abort reads "aborted by rank 0: rank 0 timed
            // out ..." (the peer, then its words), whichever comes first.
            for p in 0..4 {
                let told = text.replace(&format!("aborted by rank {p}: "), "");
                let stutter = format!("rank {p}: rank {p} ");
                assert!(!told.contains(&stutter), "{backend:?} rank {r}: {text}");
            }
            assert!(
                !text.contains("rank 2 (tag"),
                "{backend:?} rank {r}: {text}"
            );
        }
    }
}

#[test]
fn a_count_mismatch_is_a_mismatch_on_every_rank_in_one_wording_on_both_backends() {
    for backend in BACKENDS {
        let out = per_rank(backend, 4, |r, c| {
            let n = if r == 1 { 4 } else { 5 };
            c.all_reduce(&vec![1.0f32; n], &mut vec![0.0; n], ReduceOp::Sum)
        });
        for r in 0..4 {
            check(
                backend,
                &out,
                r,
                ("Mismatch", 21),
                &["comm 'world' AllReduce #0: ", "count mismatch, "],
            );
            let text = &out[r].as_ref().unwrap().2;
            // Both values, each with its rank, in one form.
            let four = text.contains("4 on rank 1");
            let five = (0..4).any(|p| p != 1 && text.contains(&format!("5 on rank {p}")));
            assert!(four && five, "{backend:?} rank {r}: {text}");
            // The simulator compares every rank's call, as each TCP rank
            // compares the signatures it receives: none relays another's.
            if backend == BackendKind::Sim {
                assert!(!text.contains("aborted by"), "rank {r}: {text}");
            }
        }
    }
}

/// A rank's own buffer error is refused before its call takes a turn
/// (`HCCL_E_PARA`, the op named without a seq: the call is not an op), so
/// for the ranks that made the call it is a rank that never called it.
#[test]
fn a_ranks_own_buffer_error_is_local_and_its_peers_wait_for_it_on_both_backends() {
    for backend in BACKENDS {
        let out = per_rank(backend, 4, |r, c| {
            let mut recv = vec![0.0f32; if r == 1 { 4 } else { 5 }];
            c.all_reduce(&[1.0f32; 5], &mut recv, ReduceOp::Sum)
        });
        check(
            backend,
            &out,
            1,
            ("Buffer", 1),
            &["comm 'world' AllReduce: receive buffer has 16 bytes, the call needs 20"],
        );
        for r in [0, 2, 3] {
            check(
                backend,
                &out,
                r,
                ("Timeout", 9),
                &["comm 'world' AllReduce #0: ", "rank 1"],
            );
        }
    }
}

//! HCCL's `HcclCommInitAll` pattern: one thread drives every communicator.
//! With [`hccl::group`] it works; a plain loop of blocking calls fails at
//! once with advice ([`CommError::Undriven`]) instead of timing out; and a
//! program that drives each communicator from its own thread, some of
//! them late, is not failed. Its own test binary: the variables are
//! process-wide.

use hccl::comm::BackendKind;
use hccl::comm::ReduceOp;
use hccl::{Comm, CommError};
use hccl_conformance::drop_together;

/// Ops time out after 3 s, so the advice comes after 1.5 s: an error that
/// is a timeout means the pattern was not recognised.
fn short_timeout() {
    std::env::set_var("HCCL_EXEC_TIMEOUT", "3");
}

fn group_loop(backend: BackendKind) {
    short_timeout();
    let n = 4;
    let comms = Comm::init_all_on(backend, n).unwrap();
    let send: Vec<Vec<f32>> = (0..n).map(|r| vec![(r + 1) as f32; 5]).collect();
    let mut recv = vec![vec![0f32; 5]; n as usize];
    let mut gathered = vec![vec![0f32; 5 * n as usize]; n as usize];
    hccl::group(|g| {
        for (((c, s), r), a) in comms.iter().zip(&send).zip(&mut recv).zip(&mut gathered) {
            g.call(c, move |c| {
                c.all_reduce(s, r, ReduceOp::Sum)?;
                c.all_gather(s, a)
            });
        }
    })
    .unwrap();
    for r in 0..n as usize {
        assert_eq!(recv[r], vec![10.0; 5], "rank {r}'s AllReduce");
        let expect: Vec<f32> = (1..=n).flat_map(|v| vec![v as f32; 5]).collect();
        assert_eq!(gathered[r], expect, "rank {r}'s AllGather");
    }
    drop_together(comms);
}

#[test]
fn group_drives_every_communicator_from_one_thread_on_sim() {
    group_loop(BackendKind::Sim);
}

#[test]
fn group_drives_every_communicator_from_one_thread_on_tcp() {
    group_loop(BackendKind::Tcp);
}

#[test]
fn group_returns_the_first_error_in_call_order() {
    short_timeout();
    let comms = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    let send = [1.0f32; 4];
    let mut short = [0f32; 3];
    let mut ok = [0f32; 4];
    let e = hccl::group(|g| {
        g.call(&comms[0], |c| {
            c.all_reduce(&send, &mut short, ReduceOp::Sum)
        });
        g.call(&comms[1], |c| c.all_reduce(&send, &mut ok, ReduceOp::Sum));
    })
    .unwrap_err();
    assert!(
        matches!(e, CommError::Shape { .. } | CommError::Buffer { .. }),
        "rank 0's own error comes first: {e}"
    );
    drop_together(comms);
}

/// The loop HCCL programs write: blocking calls, one communicator after
/// the other, from the thread that made them.
fn sequential_loop(backend: BackendKind) {
    short_timeout();
    let comms = Comm::init_all_on(backend, 3).unwrap();
    let send = [1.0f32; 4];
    let mut recv = [0f32; 4];
    let e = comms[0]
        .all_reduce(&send, &mut recv, ReduceOp::Sum)
        .unwrap_err();
    assert!(matches!(e, CommError::Undriven(_)), "{e}");
    let msg = e.to_string();
    for part in [
        "AllReduce #0 on comm 'world' (rank 0 of 3)",
        "ranks [1, 2]",
        "hccl::group",
    ] {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
    assert_eq!(e.hccl_result(), 1, "HCCL_E_PARA");
    assert_eq!(recv, [0.0; 4], "the receive buffer was touched");
    drop_together(comms);
}

#[test]
fn blocking_loop_from_the_creating_thread_fails_with_advice_on_sim() {
    sequential_loop(BackendKind::Sim);
}

#[test]
fn blocking_loop_from_the_creating_thread_fails_with_advice_on_tcp() {
    sequential_loop(BackendKind::Tcp);
}

#[test]
fn blocking_recv_from_an_undriven_peer_fails_with_advice() {
    short_timeout();
    let comms = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    let mut buf = [0u8; 8];
    let e = comms[1].recv(&mut buf, 0).unwrap_err();
    assert!(matches!(e, CommError::Undriven(_)), "{e}");
    assert!(
        e.to_string().contains("Recv on comm 'world' (rank 1 of 2)"),
        "{e}"
    );
    drop_together(comms);
}

/// The creating thread drives rank 0 while threads it spawned drive the
/// others, which reach the op later: not a mistake, no error.
fn late_threads(backend: BackendKind) {
    short_timeout();
    let n = 3;
    let comms = Comm::init_all_on(backend, n).unwrap();
    let send = [2.0f32; 4];
    std::thread::scope(|s| {
        for c in &comms[1..] {
            s.spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                let mut r = [0f32; 4];
                c.all_reduce(&send, &mut r, ReduceOp::Sum).unwrap();
                assert_eq!(r, [6.0; 4]);
            });
        }
        let mut r = [0f32; 4];
        comms[0].all_reduce(&send, &mut r, ReduceOp::Sum).unwrap();
        assert_eq!(r, [6.0; 4]);
    });
    drop_together(comms);
}

#[test]
fn ranks_driven_by_their_own_threads_are_not_flagged_on_sim() {
    late_threads(BackendKind::Sim);
}

#[test]
fn ranks_driven_by_their_own_threads_are_not_flagged_on_tcp() {
    late_threads(BackendKind::Tcp);
}

/// One thread issues async AllReduces on every rank but the last, then a
/// blocking one on the last: its peers are driven by their ops' threads,
/// so it completes.
#[test]
fn async_ops_count_as_driven() {
    short_timeout();
    let n = 3;
    let comms = Comm::init_all_on(BackendKind::Sim, n).unwrap();
    let handles: Vec<_> = comms[..2]
        .iter()
        .map(|c| c.all_reduce_async(vec![1.0f32; 4], ReduceOp::Sum))
        .collect();
    let mut r = [0f32; 4];
    comms[2]
        .all_reduce(&[1.0f32; 4], &mut r, ReduceOp::Sum)
        .unwrap();
    assert_eq!(r, [3.0; 4]);
    for h in handles {
        assert_eq!(h.wait().unwrap(), vec![3.0; 4]);
    }
    drop_together(comms);
}

/// A call in a group that panics aborts its communicator, so the peer
/// waiting in the op it never ran fails at once naming it (not at the
/// 3 s timeout), and the panic reaches the caller.
fn panic_in_group(backend: BackendKind) {
    short_timeout();
    let comms = Comm::init_all_on(backend, 2).unwrap();
    let mut peer_result = None;
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        hccl::group(|g| {
            g.call(&comms[0], |_| panic!("user bug"));
            g.call(&comms[1], |c| {
                let mut r = [0f32; 4];
                peer_result = Some(c.all_reduce(&[1f32; 4], &mut r, ReduceOp::Sum));
                Ok(())
            });
        })
    }));
    assert!(panicked.is_err(), "the panic is resumed");
    let e = peer_result.unwrap().unwrap_err();
    assert!(
        !matches!(e, CommError::Timeout(_)),
        "the peer failed at its timeout: {e}"
    );
    assert!(e.to_string().contains("hccl::group panicked"), "{e}");
    drop_together(comms);
}

#[test]
fn a_panicking_group_call_fails_its_peers_at_once_on_sim() {
    panic_in_group(BackendKind::Sim);
}

#[test]
fn a_panicking_group_call_fails_its_peers_at_once_on_tcp() {
    panic_in_group(BackendKind::Tcp);
}

/// The peers of a call failed as undriven are told why (on TCP they saw
/// only a lost connection, "the peer destroyed its communicator").
#[test]
fn peers_of_an_undriven_call_are_told_why_on_tcp() {
    short_timeout();
    let comms = Comm::init_all_on(BackendKind::Tcp, 2).unwrap();
    let mut r = [0f32; 4];
    let e = comms[0]
        .all_reduce(&[1f32; 4], &mut r, ReduceOp::Sum)
        .unwrap_err();
    assert!(matches!(e, CommError::Undriven(_)), "{e}");
    let e = comms[1]
        .all_reduce(&[1f32; 4], &mut r, ReduceOp::Sum)
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("cannot complete"), "{msg}");
    assert!(!msg.contains("destroyed"), "{msg}");
    drop_together(comms);
}

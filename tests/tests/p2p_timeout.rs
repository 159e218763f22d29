//! `HCCL_EXEC_TIMEOUT` bounds point-to-point waits on both backends, and
//! the error names the peer and what was expected. Its own test binary:
//! the variables are process-wide.

use std::time::{Duration, Instant};

use hccl::comm::BackendKind;
use hccl::{Comm, CommError};
use hccl_conformance::drop_together;

fn short_timeouts() {
    // 1 s per op; 1 MB of unreceived bytes per pair (simulator senders wait past it).
    std::env::set_var("HCCL_EXEC_TIMEOUT", "1");
    std::env::set_var("HCCL_BUFFSIZE", "1");
}

/// `n` ranks made on another thread: the test thread then waits for a
/// silent peer as a rank's own thread would, rather than as the creator of
/// a peer nothing drives (which fails at once, see `init_all_one_thread.rs`).
fn comms_made_elsewhere(backend: BackendKind, n: u32) -> Vec<Comm> {
    std::thread::spawn(move || Comm::init_all_on(backend, n))
        .join()
        .unwrap()
        .unwrap()
}

/// Rank 1 receives from rank 0, which never sends: the receive fails after
/// about the timeout (well before 30 s), naming rank 0 and the message.
fn receive_from_a_silent_peer(backend: BackendKind, expect: &[&str]) {
    short_timeouts();
    let comms = comms_made_elsewhere(backend, 2);
    let t = Instant::now();
    let mut buf = [0.0f32; 4];
    let e = comms[1].recv(&mut buf, 0).unwrap_err();
    // One match for a timeout on every backend, with HCCL_E_TIMEOUT.
    assert!(matches!(e, CommError::Timeout(_)), "{e:?}");
    assert_eq!(e.hccl_result(), 9, "{e}");
    let e = e.to_string();
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    for s in expect {
        assert!(e.contains(s), "{e:?} lacks {s:?}");
    }
    assert_eq!(buf, [0.0; 4], "the buffer was touched");
    // Drop the ranks together: each one's goodbye waits for the other's.
    drop_together(comms);
}

#[test]
fn receive_times_out_on_tcp() {
    receive_from_a_silent_peer(
        BackendKind::Tcp,
        &[
            "Recv (rank 0 -> rank 1, message 0 of the pair)",
            "timed out after 1 s waiting for rank 0 (tag 0: received 0 of 16 bytes)",
        ],
    );
}

#[test]
fn receive_times_out_on_sim() {
    receive_from_a_silent_peer(
        BackendKind::Sim,
        &[
            "Recv (rank 0 -> rank 1, message 0 of the pair)",
            "rank 1 timed out after 1 s waiting for message 0 of the pair from rank 0 (4 elements of Fp32)",
        ],
    );
}

/// On the simulator a send past `HCCL_BUFFSIZE` waits for its receiver, as
/// a TCP sender stalls on backpressure, and fails after the timeout; the
/// failure breaks the world, so the peer's next op fails naming it.
#[test]
fn unreceived_send_past_buffsize_times_out_on_sim() {
    short_timeouts();
    let comms = comms_made_elsewhere(BackendKind::Sim, 2);
    let big = vec![1u8; 2 << 20];
    let e = comms[0].send(&big, 1).unwrap_err().to_string();
    assert!(
        e.contains(
            "rank 0 timed out after 1 s waiting for rank 1 to receive message 0 (2097152 bytes)"
        ),
        "{e}"
    );
    assert!(e.contains("HCCL_BUFFSIZE, 1048576 bytes"), "{e}");
    let e = comms[1].recv(&mut [0u8; 1], 0).unwrap_err().to_string();
    assert!(e.contains("aborted by rank 0"), "{e}");
    // A small send is left for the receiver and returns at once.
    let comms = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    comms[0].send(&[1u8; 100], 1).unwrap();
}

/// Rank 0 sends 2 MiB (past HCCL_BUFFSIZE, 1 MB) and drops the handle;
/// rank 1 destroys without receiving: rank 0's destroy reports the send,
/// which could not be delivered, on both backends.
fn a_large_send_to_a_rank_that_destroys_is_reported(backend: BackendKind) {
    short_timeouts();
    let mut comms = comms_made_elsewhere(backend, 2).into_iter();
    let (c0, c1) = (comms.next().unwrap(), comms.next().unwrap());
    let sender = std::thread::spawn(move || {
        drop(c0.send_async(vec![1f32; 524_288], 1));
        c0.destroy().map_err(|e| e.to_string())
    });
    let _ = c1.destroy();
    let e = sender.join().unwrap().unwrap_err();
    assert!(
        e.contains("destroy on rank 0:")
            && (e.contains("a send to rank 1 failed")
                || e.contains("1 send (to rank 1) still pending")),
        "{backend:?}: {e}"
    );
}

#[test]
fn a_large_send_to_a_rank_that_destroys_is_reported_on_tcp() {
    a_large_send_to_a_rank_that_destroys_is_reported(BackendKind::Tcp);
}

#[test]
fn a_large_send_to_a_rank_that_destroys_is_reported_on_sim() {
    a_large_send_to_a_rank_that_destroys_is_reported(BackendKind::Sim);
}

/// A send that waits for its receiver (2 MiB, past HCCL_BUFFSIZE, 1 MB)
/// to a receive of another count fails with the receiver's words, at once
/// (not a timeout), on both backends; the receive fails too. (A small one
/// returns Ok and the sender learns at its next op: see `p2p.rs`.)
fn a_waiting_mismatched_send_fails_with_the_receivers_words(backend: BackendKind) {
    short_timeouts();
    let mut comms = comms_made_elsewhere(backend, 2).into_iter();
    let (c0, c1) = (comms.next().unwrap(), comms.next().unwrap());
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0f32; 524_287];
        let r = c1.recv(&mut buf, 0).map_err(|e| e.to_string());
        (r, c1)
    });
    let e = c0.send(&vec![1f32; 524_288], 1).unwrap_err();
    let (r, c1) = receiver.join().unwrap();
    assert!(
        !matches!(e, CommError::Timeout(_)),
        "{backend:?}: the send waited for the timeout: {e}"
    );
    let e = e.to_string();
    assert!(
        e.contains("send/recv mismatch, count: rank 0 sends 524288, rank 1 receives 524287"),
        "{backend:?}: {e}"
    );
    assert!(r.is_err(), "{backend:?}: the receive took the message");
    drop_together([c0, c1]);
}

#[test]
fn a_waiting_mismatched_send_fails_with_the_receivers_words_on_tcp() {
    a_waiting_mismatched_send_fails_with_the_receivers_words(BackendKind::Tcp);
}

#[test]
fn a_waiting_mismatched_send_fails_with_the_receivers_words_on_sim() {
    a_waiting_mismatched_send_fails_with_the_receivers_words(BackendKind::Sim);
}

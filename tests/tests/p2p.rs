//! Point-to-point: send/recv (`Comm::send` / `Comm::recv`), batches
//! (`Comm::batch_send_recv`) and async sends and receives, interleaved with
//! collectives; mismatches and bad peers. Every case runs on TCP threads and
//! on the simulator backend, which must agree.

use std::time::{Duration, Instant};

use hccl::comm::{BackendKind, CommError, ReduceOp};
use hccl::{Comm, P2pItem, P2pKind};
use hccl_conformance::on_threads;

/// `name_on_tcp` and `name_on_sim` tests running `name(backend)`.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod on_tcp {
            $(#[test]
            fn $name() {
                super::$name(hccl::comm::BackendKind::Tcp)
            })*
        }
        mod on_sim {
            $(#[test]
            fn $name() {
                super::$name(hccl::comm::BackendKind::Sim)
            })*
        }
    };
}

on_both!(
    send_recv_every_pair_and_dtype_between_all_reduces,
    messages_of_a_pair_arrive_in_order,
    mismatched_count_or_dtype_fails_on_the_receiver,
    bad_peer_is_an_immediate_error,
    two_senders_to_one_receiver_do_not_collide,
    ring_exchange_in_one_batch,
    batch_items_meet_plain_sends_and_receives_in_order,
    bad_batch_items_are_immediate_errors,
    async_sends_and_receives,
    an_async_send_then_destroy_is_delivered,
    a_failed_async_op_nobody_waited_for_is_destroys_error,
    a_message_nobody_received_is_the_receivers_destroy_error,
    an_unreceived_async_send_then_destroy_on_one_thread_is_reported,
    after_a_count_mismatch_the_sender_reads_the_receivers_words,
);

/// Element `i` of the message from `s` to `d`: exact in f32 (< 2^24).
fn value(s: u32, d: u32, i: usize) -> u32 {
    (i as u32) ^ (s * 1000 + d)
}

/// Every ordered pair of 3 ranks exchanges f32 messages of 0, 1 and 2^20
/// elements, then u8, i64 and f64 ones; ranks outside a pair move on. An
/// all_reduce before, between and after must still be right, which fails
/// if a p2p op consumed the collective seq on some ranks only.
fn send_recv_every_pair_and_dtype_between_all_reduces(backend: BackendKind) {
    let out = on_threads(backend, 3, |c| {
        let me = c.rank();
        let all_reduce = |x: f64| {
            let mut v = [x, 2.0 * x];
            c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
            v
        };
        let mut sums = vec![all_reduce(f64::from(me))];
        let pairs: Vec<(u32, u32)> = (0..3)
            .flat_map(|s| (0..3).map(move |d| (s, d)))
            .filter(|(s, d)| s != d)
            .collect();
        for &n in &[0usize, 1, 1 << 20] {
            for &(s, d) in &pairs {
                let msg: Vec<f32> = (0..n).map(|i| value(s, d, i) as f32).collect();
                if me == s {
                    c.send(&msg, d).unwrap();
                } else if me == d {
                    let mut got = vec![-1.0f32; n];
                    c.recv(&mut got, s).unwrap();
                    assert!(got == msg, "f32 x {n} from {s} to {d} differs");
                }
            }
            sums.push(all_reduce(f64::from(me) + n as f64));
        }
        for &(s, d) in &pairs {
            let bytes: Vec<u8> = (0..1000).map(|i| value(s, d, i) as u8).collect();
            let longs: Vec<i64> = (0..3).map(|i| -i64::from(value(s, d, i)) << 33).collect();
            let doubles: Vec<f64> = (0..7).map(|i| f64::from(s * 10 + d + i) / 8.0).collect();
            if me == s {
                c.send(&bytes, d).unwrap();
                c.send(&longs, d).unwrap();
                c.send(&doubles, d).unwrap();
            } else if me == d {
                let mut b = vec![0u8; 1000];
                let mut l = vec![0i64; 3];
                let mut h = vec![0.0f64; 7];
                c.recv(&mut b, s).unwrap();
                c.recv(&mut l, s).unwrap();
                c.recv(&mut h, s).unwrap();
                assert_eq!((b, l, h), (bytes, longs, doubles), "{s} -> {d}");
            }
        }
        sums.push(all_reduce(10.0 * f64::from(me)));
        sums
    });
    // Ranks contribute x = r (+ n), 2x: sums over r = 0, 1, 2.
    let expected = vec![
        [3.0, 6.0],
        [3.0, 6.0],
        [6.0, 12.0],
        [
            3.0 + 3.0 * f64::from(1u32 << 20),
            6.0 + 6.0 * f64::from(1u32 << 20),
        ],
        [30.0, 60.0],
    ];
    for (r, sums) in out.into_iter().enumerate() {
        assert_eq!(sums, expected, "rank {r}");
    }
}

/// Messages of one pair arrive in the order sent, even when the sender runs
/// ahead of the receiver and a third rank takes no part.
fn messages_of_a_pair_arrive_in_order(backend: BackendKind) {
    let out = on_threads(backend, 3, |c| {
        let mut got = Vec::new();
        match c.rank() {
            0 => {
                for k in 1..=4u32 {
                    c.send(&vec![k; k as usize], 2).unwrap();
                }
            }
            2 => {
                for k in 1..=4usize {
                    let mut b = vec![0u32; k];
                    c.recv(&mut b, 0).unwrap();
                    got.push(b);
                }
            }
            _ => {}
        }
        let mut v = [c.rank() + 1];
        c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
        (got, v[0])
    });
    assert_eq!(
        out[2].0,
        vec![vec![1], vec![2, 2], vec![3, 3, 3], vec![4, 4, 4, 4]]
    );
    assert!(out.iter().all(|(_, s)| *s == 6), "{out:?}");
}

/// The receiver refuses a message whose count (or dtype) differs from its
/// call, names both values and ranks, and leaves its buffer untouched.
fn mismatched_count_or_dtype_fails_on_the_receiver(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        if c.rank() == 0 {
            let _ = c.send(&[1.0f32; 5], 1);
            None
        } else {
            let mut buf = [-1.0f32; 4];
            let e = c.recv(&mut buf, 0).unwrap_err();
            Some((e.to_string(), buf))
        }
    });
    let (e, buf) = out[1].clone().unwrap();
    assert!(
        e.contains("send/recv mismatch, count: rank 0 sends 5, rank 1 receives 4"),
        "{e}"
    );
    assert_eq!(buf, [-1.0; 4]);

    let out = on_threads(backend, 2, |c| {
        if c.rank() == 1 {
            let _ = c.send(&[7u32; 4], 0);
            None
        } else {
            let mut buf = [0.5f32; 4];
            Some(c.recv(&mut buf, 1).map_err(|e| (e.to_string(), buf)))
        }
    });
    let (e, buf) = out[0].clone().unwrap().unwrap_err();
    assert!(
        e.contains("dtype: rank 1 sends uint32, rank 0 receives fp32"),
        "{e}"
    );
    assert_eq!(buf, [0.5; 4]);
}

/// A peer out of range, or this rank itself, fails at once (nothing waits
/// for another rank) with HCCL_E_PARA, and leaves the communicator usable.
fn bad_peer_is_an_immediate_error(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        let e = c.recv(&mut [0.0f32; 3], 2).unwrap_err();
        assert!(
            matches!(
                e,
                CommError::Peer {
                    peer: 2,
                    size: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.hccl_result(), 1);
        let me = c.rank();
        let e = c.send(&[1u8], me).unwrap_err();
        assert!(matches!(e, CommError::Peer { .. }), "{e}");
        let mut v = [me + 1];
        c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
        v[0]
    });
    assert_eq!(out, vec![3, 3]);
    let comms = Comm::init_all_on(backend, 2).unwrap();
    assert_eq!(
        comms[0].recv(&mut [0u16; 1], 5).unwrap_err().to_string(),
        "Recv: peer rank 5 is not another rank of this communicator (this is rank 0 of 2); pass a rank in 0..2 other than 0"
    );
}

/// Two senders' first messages to one receiver share their pair number;
/// the one from the rank not being received from waits for its recv
/// instead of being compared with the running one (the counts differ).
/// Rank 0 sends late so rank 2's message arrives during the recv from 0.
fn two_senders_to_one_receiver_do_not_collide(backend: BackendKind) {
    let out = on_threads(backend, 3, |c| {
        let mut got = (vec![], vec![]);
        match c.rank() {
            0 => {
                std::thread::sleep(std::time::Duration::from_millis(300));
                c.send(&[5i32; 5], 1).unwrap();
            }
            1 => {
                let mut a = vec![0i32; 5];
                let mut b = vec![0i32; 3];
                c.recv(&mut a, 0).unwrap();
                c.recv(&mut b, 2).unwrap();
                got = (a, b);
            }
            _ => c.send(&[3i32; 3], 1).unwrap(),
        }
        let mut v = [1i32];
        c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
        (got, v[0])
    });
    assert_eq!(out[1].0, (vec![5; 5], vec![3; 3]));
    assert!(out.iter().all(|(_, s)| *s == 3), "{out:?}");
}

/// A ring exchange in one batch: every rank sends 1 Mi f32 to r+1 and
/// 1000 i16 to r−1 and receives both, plus a zero-count item; the items are
/// listed receives first, which would deadlock if they ran one by one.
fn ring_exchange_in_one_batch(backend: BackendKind) {
    let n = 4u32;
    let out = on_threads(backend, n, move |c| {
        let (me, next, prev) = (c.rank(), (c.rank() + 1) % n, (c.rank() + n - 1) % n);
        let big: Vec<f32> = (0..1 << 20).map(|i| value(me, next, i) as f32).collect();
        let small: Vec<i16> = (0..1000).map(|i| -(value(me, prev, i) as i16)).collect();
        let mut from_prev = vec![0.0f32; 1 << 20];
        let mut from_next = vec![0i16; 1000];
        let mut nothing: [u64; 0] = [];
        let mut items = [
            P2pItem::recv(&mut from_prev, prev),
            P2pItem::recv(&mut from_next, next),
            P2pItem::send(&big, next),
            P2pItem::send(&small, prev),
            P2pItem::recv(&mut nothing, next),
            P2pItem::send(&[0u64; 0], prev),
        ];
        assert_eq!(items[0].kind(), P2pKind::Recv);
        assert_eq!(items[2].count(), 1 << 20);
        c.batch_send_recv(&mut items).unwrap();
        let ok_prev = from_prev
            .iter()
            .enumerate()
            .all(|(i, &x)| x == value(prev, me, i) as f32);
        let ok_next = from_next
            .iter()
            .enumerate()
            .all(|(i, &x)| x == -(value(next, me, i) as i16));
        (ok_prev, ok_next)
    });
    assert_eq!(out, vec![(true, true); 4]);
}

/// Items to one peer are numbered in list order, so a batch's sends meet
/// the peer's plain receives (and its receives the peer's plain sends) in
/// order, and later plain messages of the pair follow on.
fn batch_items_meet_plain_sends_and_receives_in_order(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        if c.rank() == 0 {
            let (a, b) = ([1u32, 2], [3u32, 4, 5]);
            let mut back = [0u32; 3];
            let mut items = [
                P2pItem::send(&a, 1),
                P2pItem::recv(&mut back, 1),
                P2pItem::send(&b, 1),
            ];
            c.batch_send_recv(&mut items).unwrap();
            c.send(&[6u32], 1).unwrap();
            vec![back.to_vec()]
        } else {
            let mut a = [0u32; 2];
            let mut b = [0u32; 3];
            let mut six = [0u32; 1];
            c.send(&[7u32, 8, 9], 0).unwrap();
            c.recv(&mut a, 0).unwrap();
            let mut items = [P2pItem::recv(&mut b, 0), P2pItem::recv(&mut six, 0)];
            c.batch_send_recv(&mut items).unwrap();
            vec![a.to_vec(), b.to_vec(), six.to_vec()]
        }
    });
    assert_eq!(out[0], vec![vec![7, 8, 9]]);
    assert_eq!(out[1], vec![vec![1, 2], vec![3, 4, 5], vec![6]]);
}

/// A bad peer or a wrong buffer length in a batch fails at once, naming
/// the item, and leaves the communicator usable.
fn bad_batch_items_are_immediate_errors(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        let me = c.rank();
        let mut r = [0.0f32; 2];
        let mut items = [P2pItem::send(&[1.0f32], 1 - me), P2pItem::recv(&mut r, 9)];
        let e = c.batch_send_recv(&mut items).unwrap_err();
        assert!(matches!(e, CommError::Peer { peer: 9, .. }), "{e}");
        assert!(
            e.to_string().starts_with(&format!(
                "BatchSendRecv item 1 (Recv): peer rank 9 is not another rank of this communicator (this is rank {me} of 2)"
            )),
            "{e}"
        );
        let mut bytes = [0u8; 7];
        let mut items = [P2pItem::recv_bytes(
            &mut bytes,
            2,
            hccl::comm::DataType::Fp32,
            1 - me,
        )];
        let e = c.batch_send_recv(&mut items).unwrap_err().to_string();
        assert_eq!(
            e,
            "BatchSendRecv item 0 (Recv): receive buffer has 7 bytes, the call needs 8"
        );
        assert!(c.batch_send_recv(&mut []).is_ok());
        let mut v = [me + 1];
        c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
        v[0]
    });
    assert_eq!(out, vec![3, 3]);
}

/// Async sends and receives return their buffers, complete in call order
/// with the rank's other ops, and report `is_done`.
fn async_sends_and_receives(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        if c.rank() == 0 {
            let h1 = c.send_async(vec![1.5f64; 3], 1);
            let h2 = c.send_async(vec![2.5f64; 100_000], 1);
            let mut v = [1i32];
            c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
            let a = h1.wait().unwrap();
            let b = h2.wait().unwrap();
            let bad = c.recv_async(vec![0u8; 1], 0).wait().unwrap_err();
            assert!(matches!(bad, CommError::Peer { .. }), "{bad}");
            (a.len() + b.len(), vec![], v[0])
        } else {
            let h1 = c.recv_async(vec![0.0f64; 3], 0);
            let h2 = c.recv_async(vec![0.0f64; 100_000], 0);
            let deadline = Instant::now() + Duration::from_secs(60);
            while !h2.is_done() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(h2.is_done(), "the async receive never finished");
            let mut v = [1i32];
            c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
            let a = h1.wait().unwrap();
            let b = h2.wait().unwrap();
            let ok = a == vec![1.5; 3] && b.iter().all(|&x| x == 2.5);
            (b.len(), vec![ok], v[0])
        }
    });
    assert_eq!(out[0], (100_003, vec![], 2));
    assert_eq!(out[1], (100_000, vec![true], 2));
}

/// `send_async`, the handle dropped, then `destroy`: destroy returns Ok
/// once the message is out, and the receiver, which calls later, gets it.
fn an_async_send_then_destroy_is_delivered(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        if c.rank() == 0 {
            drop(c.send_async(vec![7u32; 100_000], 1));
            c.destroy().map(|()| Vec::new())
        } else {
            std::thread::sleep(Duration::from_millis(200));
            let mut buf = vec![0u32; 100_000];
            let r = c.recv(&mut buf, 0).map(|()| buf);
            c.destroy().unwrap();
            r
        }
    });
    let mut out = out.into_iter();
    assert_eq!(out.next().unwrap().unwrap(), Vec::<u32>::new());
    assert!(out.next().unwrap().unwrap().iter().all(|&x| x == 7));
}

/// An async receive that fails (the sender sends 4 elements, it expects 8)
/// with its handle dropped: destroy reports the failure, naming the op.
fn a_failed_async_op_nobody_waited_for_is_destroys_error(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        if c.rank() == 0 {
            drop(c.recv_async(vec![0u32; 8], 1));
            c.destroy().map_err(|e| e.to_string())
        } else {
            let _ = c.send(&[1u32; 4], 0);
            let _ = c.destroy();
            Ok(())
        }
    });
    let e = out[0].clone().unwrap_err();
    assert!(
        e.contains("destroy on rank 0: 1 async op whose handle was dropped without waiting failed")
            && e.contains("a receive from rank 1 failed:"),
        "{e}"
    );
}

/// Rank 0 sends a small (4 KiB) and a large (1 MiB) message that reach
/// rank 1 (an all_reduce after them orders it), but rank 1 never receives
/// them: rank 1's destroy fails naming both, rank 0's succeeds.
fn a_message_nobody_received_is_the_receivers_destroy_error(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        if c.rank() == 0 {
            let a = c.send_async(vec![1f32; 1024], 1);
            let b = c.send_async(vec![2f32; 262_144], 1);
            let mut v = [1.0f32];
            c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
            drop((a, b));
        } else {
            let mut v = [1.0f32];
            c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
        }
        c.destroy().map_err(|e| e.to_string())
    });
    let e = out[1].clone().unwrap_err();
    assert!(
        e.contains("destroy on rank 1: 2 messages (from rank 0 (4096 bytes, message 0 of the pair), from rank 0 (1048576 bytes, message 1 of the pair)) were never received"),
        "{e}"
    );
    assert_eq!(out[0], Ok(()));
}

/// The trial's program: one thread, `send_async` of 1024 floats to rank 1,
/// the handle dropped, then destroy rank 0 and rank 1, which never
/// received it: rank 1's destroy says so.
fn an_unreceived_async_send_then_destroy_on_one_thread_is_reported(backend: BackendKind) {
    for _ in 0..20 {
        let mut comms = Comm::init_all_on(backend, 2).unwrap().into_iter();
        let (c0, c1) = (comms.next().unwrap(), comms.next().unwrap());
        drop(c0.send_async(vec![1f32; 1024], 1));
        assert_eq!(c0.destroy().map_err(|e| e.to_string()), Ok(()));
        let e = c1.destroy().unwrap_err().to_string();
        assert!(
            e.contains("destroy on rank 1: 1 message from rank 0 (4096 bytes, message 0 of the pair) was never received"),
            "{e}"
        );
    }
}

/// After a count mismatch (5 sent, 4 expected) the small send has
/// returned Ok (eager, as MPI's), and the sender's next op fails with the
/// receiver's element-level words, not bytes.
fn after_a_count_mismatch_the_sender_reads_the_receivers_words(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        let r = if c.rank() == 0 {
            c.send(&[1.0f32; 5], 1)
        } else {
            c.recv(&mut [0.0f32; 4], 0)
        };
        let mut v = [1.0f32];
        let next = c.all_reduce_in_place(&mut v, ReduceOp::Sum);
        (r.is_ok(), next.map_err(|e| e.to_string()))
    });
    let e = out[0].1.clone().unwrap_err();
    assert!(
        e.contains("aborted by rank 1")
            && e.contains("send/recv mismatch, count: rank 0 sends 5, rank 1 receives 4"),
        "{e}"
    );
    assert!(!e.contains("bytes"), "{e}");
    assert!(out[0].0, "the small send did not complete eagerly");
    assert!(!out[1].0, "the receive took a message of another count");
    assert!(out[1].1.is_err());
}

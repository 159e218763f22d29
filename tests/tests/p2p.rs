//! Point-to-point send/recv (`Comm::send` / `Comm::recv`) on TCP threads,
//! interleaved with collectives; mismatches and bad peers; the simulator
//! backend's refusal.

use hccl::comm::{BackendKind, CommError, ReduceOp};
use hccl::Comm;

/// Runs `f(comm)` on every rank of a fresh `world`-rank communicator, one
/// thread each, and returns the results in rank order.
fn on_threads<R: Send + 'static>(
    backend: BackendKind,
    world: u32,
    f: impl Fn(Comm) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let comms = Comm::init_all_on(backend, world).expect("init_all");
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| {
            let f = f.clone();
            std::thread::spawn(move || f(c))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Element `i` of the message from `s` to `d`: exact in f32 (< 2^24).
fn value(s: u32, d: u32, i: usize) -> u32 {
    (i as u32) ^ (s * 1000 + d)
}

/// Every ordered pair of 3 ranks exchanges f32 messages of 0, 1 and 2^20
/// elements, then u8, i64 and f64 ones; ranks outside a pair move on. An
/// all_reduce before, between and after must still be right, which fails
/// if a p2p op consumed the collective seq on some ranks only.
#[test]
fn send_recv_every_pair_and_dtype_between_all_reduces() {
    let out = on_threads(BackendKind::Tcp, 3, |c| {
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
#[test]
fn messages_of_a_pair_arrive_in_order() {
    let out = on_threads(BackendKind::Tcp, 3, |c| {
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
#[test]
fn mismatched_count_or_dtype_fails_on_the_receiver() {
    let out = on_threads(BackendKind::Tcp, 2, |c| {
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

    let out = on_threads(BackendKind::Tcp, 2, |c| {
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
        e.contains("dtype: rank 1 sends Uint32, rank 0 receives Fp32"),
        "{e}"
    );
    assert_eq!(buf, [0.5; 4]);
}

/// A peer out of range, or this rank itself, fails at once (nothing waits
/// for another rank) with HCCL_E_PARA, and leaves the communicator usable.
#[test]
fn bad_peer_is_an_immediate_error() {
    let out = on_threads(BackendKind::Tcp, 2, |c| {
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
    let comms = Comm::init_all_on(BackendKind::Tcp, 2).unwrap();
    assert_eq!(
        comms[0].recv(&mut [0u16; 1], 5).unwrap_err().to_string(),
        "Recv: peer rank 5 is not another rank of this communicator (this is rank 0 of 2); pass a rank in 0..2 other than 0"
    );
}

/// The simulator backend runs one scenario per op with every rank, so it
/// refuses a lone send or recv (HCCL_E_NOT_SUPPORT) and stays usable.
#[test]
fn sim_backend_refuses_point_to_point() {
    let out = on_threads(BackendKind::Sim, 2, |c| {
        let e = if c.rank() == 0 {
            c.send(&[1.0f32], 1).unwrap_err()
        } else {
            c.recv(&mut [0.0f32], 0).unwrap_err()
        };
        assert!(matches!(e, CommError::Unsupported(_)), "{e}");
        assert_eq!(e.hccl_result(), 5);
        assert!(e.to_string().contains("use HCCL_BACKEND=tcp"), "{e}");
        let mut v = [c.rank() + 1];
        c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
        v[0]
    });
    assert_eq!(out, vec![3, 3]);
}

/// Two senders' first messages to one receiver share their pair number;
/// the one from the rank not being received from waits for its recv
/// instead of being compared with the running one (the counts differ).
/// Rank 0 sends late so rank 2's message arrives during the recv from 0.
#[test]
fn two_senders_to_one_receiver_do_not_collide() {
    let out = on_threads(BackendKind::Tcp, 3, |c| {
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

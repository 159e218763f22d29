//! The TCP transport over loopback, ranks as threads of this process:
//! data movement, chunking and backpressure, and every failure path
//! (bootstrap timeout, expired session, stranger, wrong length, mismatched
//! signature, lost peer, execution timeout). Plans are written by hand here
//! so the transport is tested independently of the algorithms.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use hccl_algos::schedule::{BufKind, Deps, Op, RankPlan, Region, Step};
use hccl_hw::tcp::{OpBuffers, OpInfo, RootInfo, TcpConfig, TcpError, TcpRank};

mod common;
use common::{cfg, ctx, describe, f32s, op_info, recv_plan, root, run_allreduce, send_plan, COMM};

/// Runs `f(rank)` on `n` threads after connecting each.
fn with_ranks<R: Send + 'static>(
    n: u32,
    cfg: TcpConfig,
    f: impl Fn(Result<TcpRank, TcpError>, u32) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let info = root(&cfg);
    let f = Arc::new(f);
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let (cfg, f) = (cfg.clone(), Arc::clone(&f));
            std::thread::spawn(move || f(TcpRank::connect(cfg, &info, n, r, COMM), r))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn three_ranks_allreduce_twice_including_large_chunked_messages() {
    // 1 MB budget per peer forces early 6 MiB messages through backpressure;
    // 6 MiB is more pieces than a send copies ahead, so refills run too.
    let cfg = TcpConfig {
        unexpected_bound: 1 << 20,
        ..cfg()
    };
    let out = with_ranks(3, cfg, |t, r| {
        let mut t = t.unwrap();
        let small: Vec<f32> = (0..5).map(|i| (i * 10 + r) as f32).collect();
        let a = run_allreduce(&mut t, 0, &f32s(&small), [1; 32]).unwrap();
        let big: Vec<f32> = (0..(3 << 19) + 3)
            .map(|i| (i % 1000) as f32 * (r + 1) as f32)
            .collect();
        let b = run_allreduce(&mut t, 1, &f32s(&big), [1; 32]).unwrap();
        (a, b)
    });
    let want_small: Vec<f32> = (0..5).map(|i| (i * 10) as f32 * 3.0 + 3.0).collect();
    let want_big: Vec<f32> = (0..(3 << 19) + 3)
        .map(|i| (i % 1000) as f32 * 6.0)
        .collect();
    for (a, b) in out {
        assert_eq!(a, f32s(&want_small));
        assert!(b == f32s(&want_big), "large all-reduce differs");
    }
}

#[test]
fn hosts_counts_the_distinct_listener_addresses() {
    // Every loopback address is this host, but addresses are all a rank
    // knows of its peers: 127.0.0.1 and 127.0.0.2 count as two hosts
    // (which steers small AllReduces from doubling to one-shot, see
    // `hccl_algos::select::choose`).
    let out = with_ranks(3, cfg(), |t, _| t.unwrap().hosts());
    assert_eq!(out, vec![1, 1, 1]);
    let info = root(&cfg());
    let hs: Vec<_> = (0..3u32)
        .map(|r| {
            let cfg = TcpConfig {
                if_ip: Some(
                    if r == 2 { "127.0.0.2" } else { "127.0.0.1" }
                        .parse()
                        .unwrap(),
                ),
                ..cfg()
            };
            std::thread::spawn(move || TcpRank::connect(cfg, &info, 3, r, COMM).unwrap().hosts())
        })
        .collect();
    let hosts: Vec<u32> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(hosts, vec![2, 2, 2]);
}

/// Whether two thread ranks pinned to `pins` (before they bootstrap: a
/// rank reports its own thread's affinity) find that they fit the host.
#[cfg(target_os = "linux")]
fn fit_when_pinned(pins: [usize; 2]) -> Vec<bool> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let info = root(&cfg());
    let hs: Vec<_> = (0..2u32)
        .map(|r| {
            std::thread::spawn(move || {
                let mut set = CpuSet::new();
                set.set(pins[r as usize]).unwrap();
                sched_setaffinity(Pid::from_raw(0), &set).unwrap();
                TcpRank::connect(cfg(), &info, 2, r, COMM)
                    .unwrap()
                    .ranks_fit_cpus()
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[cfg(target_os = "linux")]
#[test]
fn ranks_pinned_one_per_cpu_fit_their_host_and_two_on_one_cpu_do_not() {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    let mine = sched_getaffinity(Pid::from_raw(0)).unwrap();
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| mine.is_set(c).unwrap())
        .collect();
    // Each sees one CPU either way; only the union tells them apart.
    assert_eq!(fit_when_pinned([cpus[0], cpus[0]]), [false, false]);
    // (A machine with one CPU cannot pin two ranks apart.)
    if let [a, b, ..] = cpus[..] {
        assert_eq!(fit_when_pinned([a, b]), [true, true]);
    }
}

#[test]
fn a_burst_of_whole_messages_past_the_socket_buffer_arrives_intact() {
    // 256 one-piece messages (15 MiB) to a rank that starts receiving late
    // and buffers at most 1 MB early: the sender writes the first frames
    // itself, the socket fills mid-frame, the writer task takes the rest
    // of that frame and every later one. Any reordering or lost tail
    // would scramble the bytes or the tags.
    const N: u64 = 256;
    const LEN: u64 = 60 << 10;
    let cfg = TcpConfig {
        unexpected_bound: 1 << 20,
        ..cfg()
    };
    let input: Vec<u8> = (0..N * LEN).map(|i| (i % 251) as u8).collect();
    let want = input.clone();
    let out = with_ranks(2, cfg, move |t, r| {
        let mut t = t.unwrap();
        let region = |buf, i: u64| Region::new(buf, i * LEN, LEN);
        let steps: Vec<Step> = (0..N)
            .map(|i| {
                let op = if r == 0 {
                    Op::Send {
                        peer: 1,
                        tag: i as u32,
                        src: region(BufKind::Input, i),
                    }
                } else {
                    Op::Recv {
                        peer: 0,
                        tag: i as u32,
                        dst: region(BufKind::Output, i),
                    }
                };
                Step {
                    op,
                    deps: Deps::NONE,
                }
            })
            .collect();
        if r == 1 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut output = vec![0u8; if r == 1 { (N * LEN) as usize } else { 0 }];
        let src: &[u8] = if r == 0 { &input } else { &[] };
        let bufs = OpBuffers::separate(src, &mut output, &mut []);
        t.run(
            &ctx(r, 0),
            &common::op_info([3; 32]),
            bufs,
            Box::new(steps.into_iter()),
        )
        .unwrap();
        output
    });
    assert!(out[1] == want, "the burst arrived scrambled");
}

#[test]
fn zero_byte_op_completes() {
    let out = with_ranks(2, cfg(), |t, _| {
        run_allreduce(&mut t.unwrap(), 0, &[], [0; 32]).map(|v| v.len())
    });
    for o in out {
        assert_eq!(o.unwrap(), 0);
    }
}

#[test]
fn mismatched_signature_fails_every_rank_naming_the_peer() {
    let out = with_ranks(3, cfg(), |t, r| {
        let sig = if r == 2 { [9; 32] } else { [1; 32] };
        run_allreduce(&mut t.unwrap(), 0, &f32s(&[1.0; 4]), sig).unwrap_err()
    });
    for (r, e) in out.iter().enumerate() {
        let s = e.to_string();
        assert!(
            matches!(e, TcpError::Mismatch { .. } | TcpError::Aborted { .. }),
            "rank {r}: {s}"
        );
        assert!(
            s.contains("AllReduce #0") && s.contains("signature mismatch with rank"),
            "rank {r}: {s}"
        );
    }
    assert!(out.iter().any(|e| matches!(e, TcpError::Mismatch { .. })));
}

#[test]
fn wrong_length_names_peer_op_and_both_lengths() {
    let out = with_ranks(2, cfg(), |t, r| {
        let mut t = t.unwrap();
        // Rank 1 sends 8 bytes where rank 0 expects 4.
        let plan: RankPlan = if r == 0 {
            recv_plan(1, 4)
        } else {
            send_plan(0, 8)
        };
        let input = [0u8; 8];
        let mut out = [0u8; 8];
        let info = OpInfo {
            name: "Broadcast",
            sig: [0; 32],
            describe: &describe,
        };
        let bufs = OpBuffers::separate(&input, &mut out, &mut []);
        let res = t.run(&ctx(r, 5), &info, bufs, plan);
        if r == 1 && res.is_ok() {
            // The sender finished its part first; the abort reaches it after
            // (polled, bounded at 20 s).
            for _ in 0..200 {
                if let Some(e) = t.async_error() {
                    return (e, out);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            panic!("rank 1 never learned of the failure");
        }
        (res.unwrap_err(), out)
    });
    let (e0, out0) = &out[0];
    assert!(
        matches!(
            e0,
            TcpError::LengthMismatch {
                expected: 4,
                received: 8,
                peer: 1,
                seq: 5,
                ..
            }
        ),
        "{e0}"
    );
    assert_eq!(
        e0.to_string(),
        "Broadcast #5: rank 0 expected 4 bytes from rank 1 (tag 0) but the message has 8 bytes"
    );
    assert_eq!(out0, &[0u8; 8], "the receive buffer was not touched");
    let e1 = out[1].0.to_string();
    assert!(
        e1.contains("aborted by rank 0") && e1.contains("expected 4 bytes"),
        "{e1}"
    );
}

#[test]
fn lost_peer_fails_the_waiting_rank_with_bytes_and_seq() {
    let out = with_ranks(2, cfg(), |t, r| {
        let mut t = t.unwrap();
        if r == 1 {
            drop(t); // leaves without running the op
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
        Some(run_allreduce(&mut t, 3, &f32s(&[1.0; 6]), [0; 32]).unwrap_err())
    });
    let e = out[0].as_ref().unwrap();
    // The plan posts its send first: the error is about sending 24 bytes.
    assert!(
        matches!(
            e,
            TcpError::PeerLost {
                peer: 1,
                seq: 3,
                expected: 24,
                received: 0,
                ..
            }
        ),
        "{e}"
    );
    let s = e.to_string();
    assert!(s.starts_with("AllReduce #3: rank 0 lost rank 1 (the peer destroyed its communicator) while sending 24 bytes"), "{s}");
}

/// A timeout names a peer that never called the op once, as the cause,
/// not again for the messages posted for it (the sum-up of many messages
/// from a peer that did call is `core::failure`'s unit test).
#[test]
fn a_timeout_names_a_peer_that_never_called_once() {
    let cfg = TcpConfig {
        exec_timeout: Some(Duration::from_millis(500)),
        ..cfg()
    };
    let out = with_ranks(2, cfg, |t, r| {
        let mut t = t.unwrap();
        if r == 1 {
            // Never sends; stays connected past rank 0's timeout.
            std::thread::sleep(Duration::from_millis(1500));
            return None;
        }
        let tags = [100u32, 2, 20, 1, 10];
        let steps: Vec<Step> = tags
            .iter()
            .enumerate()
            .map(|(i, &tag)| Step {
                op: Op::Recv {
                    peer: 1,
                    tag,
                    // Scratch: receives into the output wait for every
                    // rank's signature, so they would not be posted.
                    dst: Region::new(BufKind::Scratch, 4 * i as u64, 4),
                },
                deps: Deps::NONE,
            })
            .collect();
        let plan: RankPlan = Box::new(steps.into_iter());
        let mut scratch = vec![0u8; 20];
        let bufs = OpBuffers::separate(&[], &mut [], &mut scratch);
        Some(
            t.run(&ctx(0, 0), &op_info([0; 32]), bufs, plan)
                .unwrap_err(),
        )
    });
    let e = out[0].as_ref().unwrap();
    assert!(matches!(e, TcpError::Timeout { rank: 0, .. }), "{e}");
    assert!(
        e.to_string().contains(
            "waiting for rank 1, which never called the op (arrived: rank 0); the peer is slow"
        ),
        "{e}"
    );
}

#[test]
fn slow_rank_past_exec_timeout_fails_waiters_then_itself() {
    let cfg = TcpConfig {
        exec_timeout: Some(Duration::from_millis(800)),
        ..cfg()
    };
    let out = with_ranks(2, cfg, |t, r| {
        let mut t = t.unwrap();
        if r == 1 {
            std::thread::sleep(Duration::from_millis(2000));
        }
        let e = run_allreduce(&mut t, 0, &f32s(&[1.0; 2]), [0; 32]).unwrap_err();
        (e, ())
    });
    let (e0, ()) = &out[0];
    assert!(matches!(e0, TcpError::Timeout { rank: 0, .. }), "{e0}");
    assert!(
        e0.to_string()
            .contains("waiting for rank 1, which never called the op (arrived: rank 0)"),
        "{e0}"
    );
    let e1 = out[1].0.to_string();
    assert!(
        e1.contains("unusable") || e1.contains("aborted by rank 0"),
        "{e1}"
    );
}

#[test]
fn bootstrap_timeout_names_missing_ranks_and_late_rank_gets_expired() {
    let cfg = TcpConfig {
        connect_timeout: Duration::from_millis(1000),
        ..cfg()
    };
    let info = root(&cfg);
    let hs: Vec<_> = [0u32, 2]
        .into_iter()
        .map(|r| {
            let cfg = cfg.clone();
            std::thread::spawn(move || TcpRank::connect(cfg, &info, 4, r, COMM).unwrap_err())
        })
        .collect();
    for h in hs {
        let e = h.join().unwrap();
        assert!(
            matches!(&e, TcpError::BootstrapTimeout { joined: 2, nranks: 4, missing, .. } if missing == &vec![1, 3]),
            "{e}"
        );
        assert!(
            e.to_string().starts_with(
                "bootstrap timed out after 1 s: 2 of 4 ranks connected, missing [1, 3]"
            ),
            "{e}"
        );
    }
    let late = TcpRank::connect(cfg, &info, 4, 1, COMM).unwrap_err();
    assert!(
        matches!(late, TcpError::SessionExpired { rank: 1, .. }),
        "{late}"
    );
    assert!(late.to_string().starts_with("session expired"), "{late}");
}

/// A rank that joins and then dies (its connection to the root closes)
/// ends the bootstrap for every other rank at once, naming it, instead
/// of leaving them to wait for `HCCL_CONNECT_TIMEOUT`.
#[test]
fn a_rank_that_leaves_the_bootstrap_fails_the_others_naming_it() {
    use hccl_hw::tcp::wire::{self, CpuSet, CtrlKind, Join};
    let cfg = TcpConfig {
        connect_timeout: Duration::from_secs(60),
        ..cfg()
    };
    let info = root(&cfg);
    let mut doomed = TcpStream::connect(info.addr).unwrap();
    // Of 4 ranks: 2 joins and dies, 0 and 1 wait, 3 never comes.
    let join = Join {
        nranks: 4,
        rank: 2,
        data_addr: "127.0.0.1:9".parse().unwrap(),
        cpus: CpuSet::first(1),
    };
    doomed
        .write_all(&wire::encode_ctrl(
            CtrlKind::Join,
            info.session,
            &join.encode(),
        ))
        .unwrap();
    let hs: Vec<_> = [0u32, 1]
        .into_iter()
        .map(|r| {
            let cfg = cfg.clone();
            std::thread::spawn(move || TcpRank::connect(cfg, &info, 4, r, COMM).unwrap_err())
        })
        .collect();
    // Let them join first (either order gives the same words, below).
    std::thread::sleep(Duration::from_millis(300));
    drop(doomed);
    for h in hs {
        let e = h.join().unwrap();
        assert!(
            matches!(
                e,
                TcpError::BootstrapRankLeft { .. } | TcpError::SessionExpired { .. }
            ),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("rank 2 (from 127.0.0.1:")
                && text.contains("left before every rank joined: its process exited")
                && text.contains("(3 of 4 ranks had joined)"),
            "{text}"
        );
    }
}

/// A "root" that accepts the connection but never answers (another
/// program on the port) is named as such, not as a bootstrap timeout of
/// "0 of n ranks, missing []".
#[test]
fn a_listener_that_never_answers_is_not_taken_for_a_root() {
    // The kernel completes connections into the backlog without accept().
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let info = RootInfo {
        addr: silent.local_addr().unwrap(),
        session: 7,
    };
    let cfg = TcpConfig {
        connect_timeout: Duration::from_millis(500),
        ..cfg()
    };
    let e = TcpRank::connect(cfg, &info, 2, 1, COMM).unwrap_err();
    assert!(matches!(e, TcpError::NotARoot { rank: 1, .. }), "{e}");
    let text = e.to_string();
    // The wait is stated as it is: the timeout plus the verdict margin.
    assert!(
        text.contains(&format!(
            "the listener at {} accepted the connection but sent no answer within 0.5 s (HCCL_CONNECT_TIMEOUT) plus the 2 s a rank gives the root's verdict",
            info.addr
        )),
        "{text}"
    );
    assert!(text.contains("is not an hccl-rs root"), "{text}");
}

/// Serves `answer` to every connection on a fresh listener (first bytes,
/// then `hold` before closing), for at most `n` connections.
fn impostor(answer: &'static [u8], hold: Duration, n: usize) -> RootInfo {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let info = RootInfo {
        addr: l.local_addr().unwrap(),
        session: 7,
    };
    std::thread::spawn(move || {
        for s in l.incoming().take(n) {
            let Ok(mut s) = s else { continue };
            let _ = s.write_all(answer);
            std::thread::sleep(hold);
        }
    });
    info
}

/// A listener that accepts and closes at once is said to have closed the
/// connection, not "cannot reach the root ... raise HCCL_CONNECT_TIMEOUT".
#[test]
fn a_listener_that_closes_the_connection_is_named_as_not_a_root() {
    let info = impostor(b"", Duration::ZERO, 1);
    let e = TcpRank::connect(cfg(), &info, 2, 1, COMM).unwrap_err();
    assert!(matches!(e, TcpError::NotARoot { rank: 1, .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!("the listener at {} ", info.addr))
            && text.contains("closed")
            && text.contains("is not an hccl-rs root"),
        "{text}"
    );
    assert!(!text.contains("raise HCCL_CONNECT_TIMEOUT"), "{text}");
}

/// A listener that greets in another protocol (an SSH banner) is named as
/// such; one that sends a few bytes and holds the connection runs into the
/// stated wait.
#[test]
fn a_listener_that_speaks_another_protocol_is_named_as_not_a_root() {
    let info = impostor(
        b"SSH-2.0-OpenSSH_9.6 banner of a stranger\r\n",
        Duration::from_secs(3),
        1,
    );
    let e = TcpRank::connect(cfg(), &info, 2, 1, COMM).unwrap_err();
    assert!(matches!(e, TcpError::NotARoot { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("answered in another protocol (bad magic"),
        "{e}"
    );
    let info = impostor(b"HC", Duration::from_secs(4), 1);
    let cfg = TcpConfig {
        connect_timeout: Duration::from_millis(300),
        ..cfg()
    };
    let e = TcpRank::connect(cfg, &info, 2, 1, COMM).unwrap_err();
    assert!(e.to_string().contains("sent no answer within 0.3 s"), "{e}");
}

#[test]
fn strangers_are_closed_and_never_become_ranks() {
    let cfg = cfg();
    let info = root(&cfg);
    // Garbage, then a well-formed join with a wrong session id.
    let mut junk = TcpStream::connect(info.addr).unwrap();
    junk.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let wrong = RootInfo {
        session: info.session ^ 1,
        ..info
    };
    let c2 = cfg.clone();
    let imposter =
        std::thread::spawn(move || TcpRank::connect(c2, &wrong, 2, 1, COMM).unwrap_err());
    let e = imposter.join().unwrap();
    assert!(matches!(e, TcpError::Rejected { .. }), "{e}");
    assert!(e.to_string().contains("session id"), "{e}");
    // The real ranks still form the communicator.
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let mut t = TcpRank::connect(cfg, &info, 2, r, COMM).unwrap();
                run_allreduce(&mut t, 0, &f32s(&[r as f32 + 1.0]), [0; 32]).unwrap()
            })
        })
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), f32s(&[3.0]));
    }
}

#[test]
fn abort_twice_is_a_noop_and_later_ops_fail() {
    let out = with_ranks(2, cfg(), |t, _| {
        let mut t = t.unwrap();
        t.abort();
        t.abort();
        run_allreduce(&mut t, 0, &f32s(&[1.0]), [0; 32]).unwrap_err()
    });
    for e in out {
        assert!(matches!(e, TcpError::Broken(_)), "{e}");
    }
}

/// Issue 13 item 2: a signature mismatch fails every rank before a byte
/// lands in any receive buffer, even on the ranks whose neighbours agree
/// with them (the data of agreeing peers arrives first).
#[test]
fn a_mismatch_leaves_every_receive_buffer_untouched() {
    let out = with_ranks(4, cfg(), |t, r| {
        let mut t = t.unwrap();
        let sig = if r == 3 { [9; 32] } else { [1; 32] };
        if r == 3 {
            // The others exchange their data first.
            std::thread::sleep(Duration::from_millis(300));
        }
        let input = f32s(&[1.0; 256]);
        let mut out = vec![0xABu8; input.len()];
        let bufs = OpBuffers::separate(&input, &mut out, &mut []);
        let plan = common::naive_allreduce(r, 4, input.len() as u64);
        let e = t.run(&ctx(r, 0), &op_info(sig), bufs, plan).unwrap_err();
        (e, out.iter().all(|&b| b == 0xAB))
    });
    for (r, (e, untouched)) in out.iter().enumerate() {
        let s = e.to_string();
        assert!(
            s.contains("AllReduce #0") && s.contains("signature mismatch with rank"),
            "rank {r}: {s}"
        );
        assert!(untouched, "rank {r}'s receive buffer was written: {s}");
    }
}

/// Issue 13 item 3: with two of eight ranks never calling the op, every
/// waiting rank's timeout names those two and the six that arrived, not
/// whichever arrived peer it happened to wait on.
#[test]
fn a_timeout_names_the_ranks_that_never_called() {
    let cfg = TcpConfig {
        exec_timeout: Some(Duration::from_millis(1000)),
        ..cfg()
    };
    let out = with_ranks(8, cfg, |t, r| {
        let mut t = t.unwrap();
        if r >= 6 {
            // Never calls; stays connected past the others' timeout.
            std::thread::sleep(Duration::from_millis(2500));
            return None;
        }
        Some(run_allreduce(&mut t, 0, &f32s(&[1.0; 8]), [1; 32]).unwrap_err())
    });
    for (r, e) in out.iter().take(6).enumerate() {
        let e = e.as_ref().unwrap();
        let s = e.to_string();
        let named = s.contains(
            "ranks [6, 7], which never called the op (arrived: ranks [0, 1, 2, 3, 4, 5])",
        );
        // A rank may fail first with a peer's abort that says the same.
        assert!(named, "rank {r}: {s}");
        assert!(s.contains("AllReduce #0"), "rank {r}: {s}");
    }
}

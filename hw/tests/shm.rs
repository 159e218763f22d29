//! The same-host shared-memory rings (`hccl_hw::shm`): every frame of a
//! same-host pair travels in them, byte-exact, with the cross-memory path
//! on (small messages as bytes, large ones as descriptors in the rings) and
//! off (every byte through the rings); `HCCL_SHM_DISABLE=1` on one rank
//! keeps exactly its pairs on the socket; ring pressure (a 6 MiB message
//! through 256 KiB rings) and an early message that waits for budget;
//! the inline bounds; whole messages written from the op's buffers only
//! with nothing queued ahead of them.
#![cfg(target_os = "linux")]

use std::sync::Arc;

use hccl_algos::schedule::{BufKind, Deps, Op, Region};
use hccl_hw::tcp::{OpBuffers, TcpConfig, TcpRank};

mod common;
use common::{ctx, f32s, op_info, root, run_allreduce, step, COMM};

/// The tests' config with the rings on.
fn cfg() -> TcpConfig {
    TcpConfig {
        shm: true,
        ..common::cfg()
    }
}

const SIG: [u8; 32] = [5; 32];

fn input_of(r: u32, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i % 1000) as f32) * (r + 1) as f32 + r as f32)
        .collect()
}

fn expected(n: u32, count: usize) -> Vec<u8> {
    let tri = (n * (n + 1) / 2) as f32;
    let ranks = (n * (n - 1) / 2) as f32;
    f32s(
        &(0..count)
            .map(|i| (i % 1000) as f32 * tri + ranks)
            .collect::<Vec<_>>(),
    )
}

/// Runs a small and a large all-reduce on `n` thread ranks, each with its
/// config; returns (small ok, large ok, ring peers) per rank.
fn threads(n: u32, cfgs: Vec<TcpConfig>) -> Vec<(bool, bool, Vec<u32>)> {
    let info = root(&cfgs[0]);
    let cfgs = Arc::new(cfgs);
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let cfgs = Arc::clone(&cfgs);
            std::thread::spawn(move || {
                let mut t = TcpRank::connect(cfgs[r as usize].clone(), &info, n, r, COMM).unwrap();
                let peers = t.shm_peers();
                let small = run_allreduce(&mut t, 0, &f32s(&input_of(r, 5)), SIG).unwrap();
                let count = (3 << 19) + 3;
                let big = run_allreduce(&mut t, 1, &f32s(&input_of(r, count)), SIG).unwrap();
                (small == expected(n, 5), big == expected(n, count), peers)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn same_host_pairs_talk_through_the_rings_with_and_without_cma() {
    let n = 3;
    for intra_cma in [true, false] {
        // A 1 MB budget: early large messages wait for it while the rings
        // keep carrying the frames behind them.
        let c = TcpConfig {
            intra_cma,
            unexpected_bound: 1 << 20,
            ..cfg()
        };
        for (r, (small, big, peers)) in threads(n, vec![c.clone(); 3]).into_iter().enumerate() {
            assert!(small && big, "cma {intra_cma}, rank {r}: result differs");
            let others: Vec<u32> = (0..n).filter(|&p| p != r as u32).collect();
            assert_eq!(peers, others, "cma {intra_cma}, rank {r}: ring peers");
        }
    }
}

#[test]
fn shm_disable_on_one_rank_keeps_its_pairs_on_the_socket() {
    let off = TcpConfig::from_lookup(|k| (k == "HCCL_SHM_DISABLE").then(|| "1".into())).unwrap();
    let off = TcpConfig {
        shm: off.shm,
        ..cfg()
    };
    let on = TcpConfig::from_lookup(|k| (k == "HCCL_SHM_DISABLE").then(|| "0".into())).unwrap();
    assert!(on.shm);
    assert!(!off.shm);
    let n = 3;
    let out = threads(n, vec![cfg(), off, cfg()]);
    let want = [vec![2], vec![], vec![0]];
    for (r, (small, big, peers)) in out.into_iter().enumerate() {
        assert!(small && big, "rank {r}: result differs");
        assert_eq!(peers, want[r], "rank {r}: ring peers");
    }
}

/// Session 16's inline bounds on a ring link: an out-of-place op lends a
/// 16 KiB message when the ranks fit the CPUs (`INLINE_ON_RINGS_FIT`,
/// 8 KiB) and sends it as bytes when they do not; an in-place op sends it
/// as bytes either way (it rewrites what it lends right after the peer
/// read it). Both arrive whole.
#[test]
fn ring_links_lend_16_kib_out_of_place_only_when_the_ranks_fit_the_cpus() {
    const LEN: u64 = 16 << 10;
    let info = root(&cfg());
    let fit = std::thread::available_parallelism().map_or(1, |c| c.get()) >= 2;
    let hs: Vec<_> = (0..2u32)
        .map(|r| {
            std::thread::spawn(move || {
                let mut t = TcpRank::connect(cfg(), &info, 2, r, COMM).unwrap();
                assert_eq!(
                    t.shm_peers(),
                    vec![1 - r],
                    "rank {r}: the pair is on a ring"
                );
                let mine: Vec<u8> = (0..2 * LEN).map(|i| (i as u32 * 3 + r) as u8).collect();
                let mut lent = Vec::new();
                for (seq, in_place) in [(0, false), (1, true)] {
                    // Send the first LEN bytes, receive the peer's into the
                    // next LEN (one buffer in place, two otherwise).
                    let (src, dst) = if in_place {
                        (
                            Region::new(BufKind::Input, 0, LEN),
                            Region::new(BufKind::Output, 0, LEN),
                        )
                    } else {
                        (
                            Region::new(BufKind::Input, 0, LEN),
                            Region::new(BufKind::Output, LEN, LEN),
                        )
                    };
                    let plan = Box::new(
                        vec![
                            step(
                                Op::Send {
                                    peer: 1 - r,
                                    tag: 0,
                                    src,
                                },
                                Deps::NONE,
                            ),
                            step(
                                Op::Recv {
                                    peer: 1 - r,
                                    tag: 0,
                                    dst,
                                },
                                Deps::NONE,
                            ),
                        ]
                        .into_iter(),
                    );
                    let mut user = mine.clone();
                    let mut output = vec![0u8; 2 * LEN as usize];
                    let before = t.cma_stats().pieces_lent;
                    let bufs = if in_place {
                        OpBuffers::in_place(&mut user, (0, LEN), (LEN, LEN), &mut []).unwrap()
                    } else {
                        OpBuffers::separate(&mine, &mut output, &mut [])
                    };
                    t.run(&ctx(r, seq), &op_info(SIG), bufs, plan).unwrap();
                    lent.push(t.cma_stats().pieces_lent - before);
                    let got = if in_place {
                        &user[LEN as usize..]
                    } else {
                        &output[LEN as usize..]
                    };
                    let want: Vec<u8> = (0..LEN).map(|i| (i as u32 * 3 + 1 - r) as u8).collect();
                    assert!(
                        got == &want[..],
                        "rank {r}, in place {in_place}: bytes differ"
                    );
                }
                lent
            })
        })
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        let lent = h.join().unwrap();
        assert_eq!(
            lent[0],
            u64::from(fit),
            "rank {r}: out of place, ranks fit the CPUs: {fit}"
        );
        assert_eq!(lent[1], 0, "rank {r}: in place");
    }
}

/// Whole byte-stream messages go into the ring straight from the op's
/// buffers (no send piece) only when nothing for that peer is ahead of
/// them: a 4 KiB exchange is written so; in the next op a 1 KiB message
/// posted right behind a 300 KiB one (which overfills the ring, so its
/// tail waits for the writer task) is queued behind it, not written ahead
/// of it or into it. Every byte arrives where it belongs.
#[test]
fn whole_messages_skip_the_send_piece_only_with_nothing_ahead_of_them() {
    const BIG: u64 = 300 << 10;
    const SMALL: u64 = 1 << 10;
    const MID: u64 = 4 << 10;
    // Every message as bytes through the rings, whatever its size.
    let c = TcpConfig {
        intra_cma: false,
        ..cfg()
    };
    let info = root(&c);
    let pattern = |of: u32, len: u64| -> Vec<u8> {
        (0..len).map(|i| (i as u32 * 7 + of * 13) as u8).collect()
    };
    let hs: Vec<_> = (0..2u32)
        .map(|r| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut t = TcpRank::connect(c, &info, 2, r, COMM).unwrap();
                assert_eq!(
                    t.shm_peers(),
                    vec![1 - r],
                    "rank {r}: the pair is on a ring"
                );
                let p = 1 - r;
                // (tag, offset, length) of each message, the same both ways.
                let mut written = Vec::new();
                for (seq, msgs) in [
                    (0, vec![(0, 0, MID)]),
                    (1, vec![(0, 0, BIG), (1, BIG, SMALL)]),
                ] {
                    let sends = msgs.iter().map(|&(tag, off, len)| Op::Send {
                        peer: p,
                        tag,
                        src: Region::new(BufKind::Input, off, len),
                    });
                    let recvs = msgs.iter().map(|&(tag, off, len)| Op::Recv {
                        peer: p,
                        tag,
                        dst: Region::new(BufKind::Output, off, len),
                    });
                    let plan: Vec<_> = sends.chain(recvs).map(|op| step(op, Deps::NONE)).collect();
                    let total = msgs.iter().map(|m| m.2).sum();
                    let mine = pattern(r, total);
                    let mut out = vec![0u8; total as usize];
                    let before = t.cma_stats().messages_written_direct;
                    let bufs = OpBuffers::separate(&mine, &mut out, &mut []);
                    t.run(
                        &ctx(r, seq),
                        &op_info(SIG),
                        bufs,
                        Box::new(plan.into_iter()),
                    )
                    .unwrap();
                    assert!(out == pattern(p, total), "rank {r}, op {seq}: bytes differ");
                    written.push(t.cma_stats().messages_written_direct - before);
                }
                written
            })
        })
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        assert_eq!(
            h.join().unwrap(),
            [1, 0],
            "rank {r}: messages written from the op's buffers, per op"
        );
    }
}

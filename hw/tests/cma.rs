//! The same-host fast path (cross-memory attach, `hccl_hw::tcp::cma`):
//! byte-exact results with it on, as threads and as processes; the probe's
//! fallback when `HCCL_INTRA_CMA_ENABLE=0`; a hand-written peer that sends
//! bad descriptors or withdraws a loan (its lend word poisoned); and a
//! hand-written receiver that checks that the pieces are the sender's own
//! buffer, unchanged until acked, that a send completes only with its last
//! ack, and that a failing sender poisons its lend word before it returns.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use hccl_algos::algo::{plan, AlgoSpec, Algorithm};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::{BufKind, Op, Region};
use hccl_algos::{DataType, ReduceOp};
use hccl_hw::tcp::cma::{self, LendWord, Token};
use hccl_hw::tcp::rank::{LATE_TAG, LEND_AHEAD, SEND_PIECE};
use hccl_hw::tcp::wire::{
    self, CmaProbe, CpuSet, CtrlKind, FrameHeader, FrameKind, Join, PieceDesc, SessionId, ShmOffer,
    Signature, CMA_PROBE_LEN, CTRL_HEADER_LEN, FRAME_HEADER_LEN, LEND_POISON, PIECE_DESC_LEN,
    SHM_OFFER_LEN,
};
use hccl_hw::tcp::{OpBuffers, RootInfo, TcpConfig, TcpError, TcpRank};

mod common;
use common::{cfg, ctx, f32s, one_step, op_info, recv_plan, root, run_allreduce, send_plan, COMM};

/// The signature of every op here.
const SIG: Signature = [3; 32];

/// Rank `r`'s input: values whose sums are exact in f32.
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

/// Runs two all-reduces (small, then 6 MiB + 12 bytes) on `n` thread ranks
/// with per-rank configs; returns each rank's results, fast-path peers and
/// counters.
/// (small result, large result, fast-path peers, pieces lent, bytes lent).
type RankOut = (Vec<u8>, Vec<u8>, Vec<u32>, u64, u64);

fn threads(n: u32, cfgs: Vec<TcpConfig>) -> Vec<RankOut> {
    let info = root(&cfgs[0]);
    let cfgs = Arc::new(cfgs);
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let cfgs = Arc::clone(&cfgs);
            std::thread::spawn(move || {
                let mut t = TcpRank::connect(cfgs[r as usize].clone(), &info, n, r, COMM).unwrap();
                let small = run_allreduce(&mut t, 0, &f32s(&input_of(r, 5)), SIG).unwrap();
                let big =
                    run_allreduce(&mut t, 1, &f32s(&input_of(r, (3 << 19) + 3)), SIG).unwrap();
                let s = t.cma_stats();
                (small, big, t.cma_peers(), s.pieces_lent, s.bytes_lent)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn threads_with_the_fast_path_get_exact_results_through_descriptors() {
    // A 1 MB budget per peer: early 6 MiB messages wait for budget in the
    // reader's queue while acks still flow.
    let c = TcpConfig {
        unexpected_bound: 1 << 20,
        ..cfg()
    };
    let n = 3;
    let out = threads(n, vec![c.clone(), c.clone(), c]);
    let big_bytes = 4 * ((3u64 << 19) + 3);
    for (r, (small, big, peers, pieces, bytes)) in out.into_iter().enumerate() {
        assert_eq!(small, expected(n, 5), "rank {r} small");
        assert!(big == expected(n, (3 << 19) + 3), "rank {r}: large differs");
        let others: Vec<u32> = (0..n).filter(|&p| p != r as u32).collect();
        assert_eq!(peers, others, "rank {r} fast-path peers");
        // The 20-byte messages went as bytes (at most MAX_INLINE_ON_CMA),
        // the large ones as pieces: 2 peers × (6 MiB + 12).
        assert_eq!(bytes, 2 * big_bytes, "rank {r} bytes lent");
        assert_eq!(
            pieces,
            2 * big_bytes.div_ceil(SEND_PIECE as u64),
            "rank {r}"
        );
    }
}

#[test]
fn one_rank_with_the_switch_off_turns_its_pairs_to_bytes() {
    let off = TcpConfig::from_lookup(|k| (k == "HCCL_INTRA_CMA_ENABLE").then(|| "0".to_string()))
        .unwrap();
    let off = TcpConfig {
        intra_cma: off.intra_cma,
        ..cfg()
    };
    assert!(!off.intra_cma);
    let n = 3;
    // Rank 1 has it off: pairs (0,1) and (1,2) go as bytes, (0,2) not.
    let out = threads(n, vec![cfg(), off, cfg()]);
    let want_peers = [vec![2], vec![], vec![0]];
    let big_bytes = 4 * ((3u64 << 19) + 3);
    for (r, (small, big, peers, _, bytes)) in out.into_iter().enumerate() {
        assert_eq!(small, expected(n, 5), "rank {r} small");
        assert!(big == expected(n, (3 << 19) + 3), "rank {r}: large differs");
        assert_eq!(peers, want_peers[r], "rank {r} fast-path peers");
        let lent = if r == 1 { 0 } else { big_bytes };
        assert_eq!(bytes, lent, "rank {r} bytes lent");
    }
}

/// Child side of [`processes_get_exact_results_with_the_fast_path_on_and_off`];
/// runs only when that test spawns this binary with `CMA_CHILD_RANK` set.
#[test]
#[ignore = "child process of processes_get_exact_results_with_the_fast_path_on_and_off"]
fn cma_child_process() {
    let Ok(rank) = std::env::var("CMA_CHILD_RANK") else {
        return;
    };
    let rank: u32 = rank.parse().unwrap();
    let n: u32 = std::env::var("CMA_CHILD_N").unwrap().parse().unwrap();
    let info: RootInfo = std::env::var("CMA_CHILD_ROOT").unwrap().parse().unwrap();
    let env = TcpConfig::from_env().unwrap();
    let c = TcpConfig {
        intra_cma: env.intra_cma,
        ..cfg()
    };
    let on = c.intra_cma;
    let mut t = TcpRank::connect(c, &info, n, rank, COMM).unwrap();
    let count = (3 << 19) + 3;
    let out = run_allreduce(&mut t, 0, &f32s(&input_of(rank, count)), SIG).unwrap();
    assert!(out == expected(n, count), "rank {rank}: result differs");
    let others: Vec<u32> = (0..n).filter(|&p| p != rank).collect();
    let want: Vec<u32> = if on { others } else { vec![] };
    assert_eq!(t.cma_peers(), want, "rank {rank}");
    let lent = t.cma_stats().bytes_lent;
    assert_eq!(
        lent,
        if on {
            (n as u64 - 1) * 4 * count as u64
        } else {
            0
        }
    );
}

#[test]
fn processes_get_exact_results_with_the_fast_path_on_and_off() {
    let exe = std::env::current_exe().unwrap();
    for enable in ["1", "0"] {
        let n = 3;
        let info = root(&cfg());
        let kids: Vec<_> = (0..n)
            .map(|r| {
                Command::new(&exe)
                    .args(["cma_child_process", "--exact", "--ignored", "--nocapture"])
                    .env("CMA_CHILD_RANK", r.to_string())
                    .env("CMA_CHILD_N", n.to_string())
                    .env("CMA_CHILD_ROOT", info.to_string())
                    .env("HCCL_INTRA_CMA_ENABLE", enable)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect::<Vec<_>>();
        let kids: Vec<_> = kids
            .into_iter()
            .map(|k| k.wait_with_output().unwrap())
            .collect();
        for (r, k) in kids.iter().enumerate() {
            let out = String::from_utf8_lossy(&k.stdout);
            assert!(
                k.status.success() && out.contains("1 passed"),
                "HCCL_INTRA_CMA_ENABLE={enable} rank {r}: {}\n{out}\n{}",
                k.status,
                String::from_utf8_lossy(&k.stderr)
            );
        }
    }
}

// ---- a hand-written peer: rank 1 of 2, speaking the wire protocol ----

/// Rank 1's side of a bootstrap with real rank 0, through the probe
/// exchange (offering and accepting the fast path). Returns the connection
/// from rank 0, rank 0's verified pid and the token (kept alive).
fn fake_rank1(info: &RootInfo) -> (TcpStream, u32, Token) {
    let session = info.session;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut root = TcpStream::connect(info.addr).unwrap();
    let join = Join {
        nranks: 2,
        rank: 1,
        data_addr: listener.local_addr().unwrap(),
        cpus: CpuSet::first(1),
    };
    root.write_all(&wire::encode_ctrl(CtrlKind::Join, session, &join.encode()))
        .unwrap();
    let mut h = [0u8; CTRL_HEADER_LEN];
    root.read_exact(&mut h).unwrap();
    let head = wire::decode_ctrl_header(&h).unwrap();
    assert_eq!(head.kind, CtrlKind::Table);
    let mut body = vec![0u8; head.body_len as usize];
    root.read_exact(&mut body).unwrap();
    // Rank 0 connects and says hello.
    let (mut s, _) = listener.accept().unwrap();
    s.read_exact(&mut h).unwrap();
    let head = wire::decode_ctrl_header(&h).unwrap();
    assert_eq!(head.kind, CtrlKind::Hello);
    let mut body = vec![0u8; head.body_len as usize];
    s.read_exact(&mut body).unwrap();
    s.write_all(&wire::encode_ctrl(CtrlKind::HelloAck, session, &[]))
        .unwrap();
    // The probe exchange.
    let token = Token::new(session);
    let mut probe = frame(session, FrameKind::CmaProbe, 0, 0, CMA_PROBE_LEN as u64);
    probe.extend_from_slice(&token.probe(true).encode());
    s.write_all(&probe).unwrap();
    let theirs_h = read_frame(&mut s, session);
    assert_eq!(theirs_h.kind, FrameKind::CmaProbe);
    let mut b = [0u8; CMA_PROBE_LEN];
    s.read_exact(&mut b).unwrap();
    let theirs = CmaProbe::decode(&b).unwrap();
    cma::verify(&theirs).unwrap();
    s.write_all(&frame(session, FrameKind::CmaReply, 0, 1, 0))
        .unwrap();
    let reply = read_frame(&mut s, session);
    assert_eq!(
        (reply.kind, reply.tag),
        (FrameKind::CmaReply, 1),
        "rank 0 said ok"
    );
    // The shared-memory offer: this hand-written rank declines, so every
    // frame stays on the socket, where it reads and writes them.
    let mut offer = frame(session, FrameKind::ShmOffer, 0, 0, SHM_OFFER_LEN as u64);
    let decline = ShmOffer {
        willing: false,
        fd: 0,
        cap: 0,
        token: [0; wire::SHM_TOKEN_LEN],
    };
    offer.extend_from_slice(&decline.encode());
    s.write_all(&offer).unwrap();
    let theirs_offer = read_frame(&mut s, session);
    assert_eq!(theirs_offer.kind, FrameKind::ShmOffer);
    let mut b = [0u8; SHM_OFFER_LEN];
    s.read_exact(&mut b).unwrap();
    assert!(
        ShmOffer::decode(&b).unwrap().willing,
        "rank 0 offers its segment"
    );
    (s, theirs.pid, token)
}

fn frame(session: SessionId, kind: FrameKind, seq: u64, tag: u32, len: u64) -> Vec<u8> {
    FrameHeader {
        kind,
        session,
        comm: COMM,
        seq,
        tag,
        len,
        sig: [3; 32],
    }
    .encode()
    .to_vec()
}

/// The hand-written peer's op start for op 0: its signature, which rank 0
/// waits for before it writes its output (see `hccl_hw::tcp::rank`).
fn op_start(session: SessionId) -> Vec<u8> {
    frame(session, FrameKind::OpStart, 0, 0, 0)
}

fn read_frame(s: &mut TcpStream, session: SessionId) -> FrameHeader {
    let mut b = [0u8; FRAME_HEADER_LEN];
    s.read_exact(&mut b).unwrap();
    FrameHeader::decode(&b, session).unwrap()
}

/// A lend word of the hand-written peer, open under `id`.
fn open_word(id: u64) -> LendWord {
    let w = LendWord::new();
    w.open(id);
    w
}

/// A descriptor of `bytes` (in this process) lent under `w`'s value.
fn desc_of(bytes: &[u8], w: &LendWord) -> PieceDesc {
    PieceDesc {
        addr: bytes.as_ptr() as u64,
        len: bytes.len() as u64,
        word: w.addr(),
        expected: w.get(),
    }
}

/// Writes an ack of `d` (op 0, tag 0).
fn ack(s: &mut TcpStream, session: SessionId, d: PieceDesc) {
    let mut b = frame(session, FrameKind::CmaAck, 0, 0, PIECE_DESC_LEN as u64);
    b.extend_from_slice(&d.encode());
    s.write_all(&b).unwrap();
}

/// The next frame from rank 0 that is not an op start.
fn read_data_frame(s: &mut TcpStream, session: SessionId) -> FrameHeader {
    loop {
        let h = read_frame(s, session);
        if h.kind != FrameKind::OpStart {
            return h;
        }
    }
}

fn read_desc(s: &mut TcpStream) -> PieceDesc {
    let mut b = [0u8; PIECE_DESC_LEN];
    s.read_exact(&mut b).unwrap();
    PieceDesc::decode(&b, u64::MAX, u64::MAX).unwrap()
}

/// Real rank 0 receives `len` bytes from the fake rank 1 (seq 0, tag 0)
/// while the fake sends `desc` as the message's first piece.
fn rank0_receives_a_bad_piece(len: u64, desc: PieceDesc) -> (TcpError, Vec<u8>) {
    rank0_receives(len, |session| {
        let mut msg = frame(session, FrameKind::DataCma, 0, 0, len);
        msg.extend_from_slice(&desc.encode());
        msg
    })
}

/// Real rank 0 receives `len` bytes from the fake rank 1 (seq 0, tag 0)
/// while the fake writes `bytes(session)`; returns rank 0's error and
/// receive buffer (filled with 0xAA before).
fn rank0_receives(len: u64, bytes: impl FnOnce(SessionId) -> Vec<u8>) -> (TcpError, Vec<u8>) {
    let c = cfg();
    let info = root(&c);
    let rank0 = std::thread::spawn(move || {
        let mut t = TcpRank::connect(c, &info, 2, 0, COMM).unwrap();
        assert_eq!(t.cma_peers(), vec![1]);
        let mut out = vec![0xAAu8; len as usize];
        let plan = recv_plan(1, len);
        let e = t
            .run(
                &ctx(0, 0),
                &op_info(SIG),
                OpBuffers::separate(&[], &mut out, &mut []),
                plan,
            )
            .unwrap_err();
        t.abort(); // no linger for a goodbye the fake never sends
        (e, out)
    });
    let (mut s, _, _token) = fake_rank1(&info);
    s.write_all(&bytes(info.session)).unwrap();
    let r = rank0.join().unwrap();
    drop(s);
    r
}

#[test]
fn a_descriptor_naming_unmapped_memory_fails_the_op_naming_peer_and_bytes() {
    let w = open_word(1);
    let (e, out) = rank0_receives_a_bad_piece(
        1 << 20,
        PieceDesc {
            addr: 4096,
            len: 256 << 10,
            word: w.addr(),
            expected: 1,
        },
    );
    assert!(
        matches!(
            e,
            TcpError::PeerLost {
                peer: 1,
                seq: 0,
                expected: 1048576,
                received: 0,
                ..
            }
        ),
        "{e}"
    );
    let s = e.to_string();
    assert!(
        s.starts_with("AllReduce #0: rank 0 lost rank 1 (cross-memory read of 262144 bytes at 0x1000 from pid"),
        "{s}"
    );
    assert!(s.contains("EFAULT"), "{s}");
    assert!(
        out.iter().all(|&b| b == 0xAA),
        "the receive buffer was not touched"
    );
}

#[test]
fn a_descriptor_longer_than_its_message_is_a_protocol_error() {
    let (e, out) = rank0_receives_a_bad_piece(
        4096,
        PieceDesc {
            addr: 0x10_0000,
            len: 8192,
            word: 0x20_0000,
            expected: 1,
        },
    );
    assert!(matches!(e, TcpError::Protocol { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "protocol error from rank 1: piece descriptor (bytes left in the message) length 8192 exceeds the bound 4096"
    );
    assert!(
        out.iter().all(|&b| b == 0xAA),
        "the receive buffer was not touched"
    );
}

/// Rank 0 of 2 (real) sends `len` bytes of `data` to rank 1 (op 0, tag 0)
/// with `cfg`; returns the op's result, the counters and the data.
fn rank0_sends(
    c: TcpConfig,
    info: RootInfo,
    data: Vec<u8>,
) -> std::thread::JoinHandle<(Result<(), TcpError>, hccl_hw::tcp::CmaStats, Vec<u8>)> {
    std::thread::spawn(move || {
        let mut t = TcpRank::connect(c, &info, 2, 0, COMM).unwrap();
        let len = data.len() as u64;
        let plan = send_plan(1, len);
        let r = t.run(
            &ctx(0, 0),
            &op_info(SIG),
            OpBuffers::separate(&data, &mut [], &mut []),
            plan,
        );
        let stats = t.cma_stats();
        if r.is_err() {
            t.abort(); // no linger for a goodbye the fake never sends
        }
        drop(t);
        (r, stats, data)
    })
}

#[test]
fn lent_pieces_are_the_senders_own_buffer_unchanged_and_the_send_ends_with_the_last_ack() {
    const PIECE: u64 = SEND_PIECE as u64;
    const AHEAD: usize = LEND_AHEAD as usize;
    let len: u64 = 17 * (1 << 20) + 100; // more pieces than LEND_AHEAD
    let pieces = len.div_ceil(PIECE);
    assert!(pieces > AHEAD as u64);
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
    let data = payload.clone();
    let base = data.as_ptr() as u64; // the heap block moves with the Vec
    let c = cfg();
    let info = root(&c);
    let rank0 = rank0_sends(c, info, data);
    let (mut s, pid, _token) = fake_rank1(&info);
    assert_eq!(pid, std::process::id());
    let session = info.session;
    // Rank 0 waits for its predecessor's op start before it may finish.
    s.write_all(&op_start(session)).unwrap();
    let mut unacked: Vec<(PieceDesc, u64)> = Vec::new(); // (piece, offset in message)
    let mut at = 0u64;
    let mut acked = 0;
    let mut last = None;
    while at < len || !unacked.is_empty() {
        if unacked.len() == AHEAD || at == len {
            if unacked.len() == AHEAD {
                // Rank 0 must stop here: nothing more may come before an ack.
                s.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                let mut b = [0u8; 1];
                let r = s.read(&mut b);
                assert!(
                    matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
                    "a frame came with {AHEAD} pieces unacked: {r:?}"
                );
                s.set_read_timeout(None).unwrap();
            }
            // Read the oldest piece only now, long after it was lent,
            // through the lend word check: it still holds its bytes.
            let (d, off) = unacked.remove(0);
            let mut got = vec![0u8; d.len as usize];
            cma::read_lent(pid, &d, &mut got).unwrap();
            assert!(
                got[..] == payload[off as usize..(off + d.len) as usize],
                "piece at offset {off} changed before its ack"
            );
            if unacked.is_empty() && at == len {
                // Everything read but the last ack withheld: the send step,
                // and so the op, must still be running.
                std::thread::sleep(Duration::from_millis(300));
                assert!(
                    !rank0.is_finished(),
                    "rank 0's op ended before the last piece was acked"
                );
                last = Some(d);
            }
            ack(&mut s, session, d);
            acked += 1;
            continue;
        }
        let h = read_data_frame(&mut s, session);
        match h.kind {
            FrameKind::DataCma => assert_eq!((at, h.len), (0, len)),
            FrameKind::CmaMore => assert!(at > 0),
            k => panic!("unexpected {k:?}"),
        }
        let d = read_desc(&mut s);
        assert_eq!(d.len, PIECE.min(len - at));
        assert_eq!(
            d.addr,
            base + at,
            "the piece is the sender's own input, not a copy"
        );
        unacked.push((d, at));
        at += d.len;
    }
    // Goodbye, so that rank 0's destroy need not wait for it.
    s.write_all(&frame(session, FrameKind::Bye, 0, 0, 0))
        .unwrap();
    let (r, stats, data) = rank0.join().unwrap();
    r.unwrap();
    assert_eq!(stats.pieces_lent, pieces);
    assert_eq!(stats.bytes_lent, len);
    assert_eq!(acked, pieces);
    assert_eq!(stats.outstanding, 0, "nothing lent after the op");
    // After the op the loan is withdrawn: a stale descriptor of it no
    // longer validates, though the bytes are still there.
    let d = last.unwrap();
    let mut got = vec![0u8; d.len as usize];
    assert_eq!(
        cma::read_lent(pid, &d, &mut got),
        Err(cma::LentReadError::Withdrawn { found: LEND_POISON })
    );
    drop(data);
}

#[test]
fn a_send_whose_last_piece_is_never_acked_does_not_complete() {
    // Two pieces; the fake reads both, acks the first and sends its op
    // start: everything but the last ack. Were the send complete once its
    // descriptors were written, the op would succeed.
    let len: u64 = SEND_PIECE as u64 + 4096;
    let c = TcpConfig {
        exec_timeout: Some(Duration::from_secs(1)),
        ..cfg()
    };
    let info = root(&c);
    let rank0 = rank0_sends(c, info, vec![9u8; len as usize]);
    let (mut s, pid, _token) = fake_rank1(&info);
    let session = info.session;
    s.write_all(&op_start(session)).unwrap();
    let mut descs = Vec::new();
    for kind in [FrameKind::DataCma, FrameKind::CmaMore] {
        assert_eq!(read_data_frame(&mut s, session).kind, kind);
        let d = read_desc(&mut s);
        let mut got = vec![0u8; d.len as usize];
        cma::read_lent(pid, &d, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == 9));
        descs.push(d);
    }
    ack(&mut s, session, descs[0]);
    let (r, stats, _) = rank0.join().unwrap();
    let e = r.unwrap_err();
    assert!(
        matches!(&e, TcpError::Timeout { waiting, .. } if waiting == "rank 1 to take 1 sent message(s)"),
        "{e}"
    );
    assert_eq!((stats.pieces_lent, stats.outstanding), (2, 1));
}

#[test]
fn a_failing_sender_cuts_its_cross_memory_message_and_the_abort_gets_through() {
    let len: u64 = 20 << 20; // 80 pieces; rank 0 stops at 64 without acks
    let c = TcpConfig {
        exec_timeout: Some(Duration::from_secs(1)),
        ..cfg()
    };
    let info = root(&c);
    // The fake hands rank 0's thread the first descriptor it got.
    let (first_tx, first_rx) = std::sync::mpsc::channel::<PieceDesc>();
    let rank0 = std::thread::spawn(move || {
        let mut t = TcpRank::connect(c, &info, 2, 0, COMM).unwrap();
        let data = vec![5u8; len as usize];
        let plan = send_plan(1, len);
        let e = t
            .run(
                &ctx(0, 0),
                &op_info(SIG),
                OpBuffers::separate(&data, &mut [], &mut []),
                plan,
            )
            .unwrap_err();
        // The error is back, the communicator not yet aborted: the lend
        // word already holds the poison, and the lent piece (still
        // readable: `data` lives) no longer validates.
        let d = first_rx.recv().unwrap();
        let mut word = [0u8; 8];
        cma::read_remote(std::process::id(), d.word, &mut word).unwrap();
        let mut got = vec![0u8; d.len as usize];
        let stale = cma::read_lent(std::process::id(), &d, &mut got);
        let stats = t.cma_stats();
        t.abort();
        (e, stats, u64::from_ne_bytes(word), d.expected, stale)
    });
    let (mut s, _, _token) = fake_rank1(&info);
    let session = info.session;
    let mut pieces = 0;
    let reason = loop {
        let h = read_frame(&mut s, session);
        match h.kind {
            FrameKind::OpStart => {}
            FrameKind::DataCma | FrameKind::CmaMore => {
                let d = read_desc(&mut s);
                if pieces == 0 {
                    first_tx.send(d).unwrap();
                }
                pieces += 1;
            }
            FrameKind::Abort => {
                let mut r = vec![0u8; h.len as usize];
                s.read_exact(&mut r).unwrap();
                break String::from_utf8(r).unwrap();
            }
            k => panic!("unexpected {k:?} after {pieces} pieces"),
        }
    };
    let (e, stats, word, expected, stale) = rank0.join().unwrap();
    assert!(matches!(e, TcpError::Timeout { .. }), "{e}");
    assert_eq!(pieces, LEND_AHEAD, "no piece was lent after the failure");
    assert_eq!(
        (stats.pieces_lent, stats.outstanding),
        (LEND_AHEAD as u64, LEND_AHEAD as u64)
    );
    assert!(reason.contains("timed out"), "{reason}");
    assert_ne!(expected, LEND_POISON);
    assert_eq!(
        word, LEND_POISON,
        "the failed op returned with its loan open"
    );
    assert_eq!(
        stale,
        Err(cma::LentReadError::Withdrawn { found: LEND_POISON })
    );
}

#[test]
fn an_abort_between_the_pieces_of_a_message_fails_the_receiver_with_its_reason() {
    let piece = vec![0x42u8; 256 << 10];
    let desc = desc_of(&piece, &open_word(1));
    let (e, out) = rank0_receives(1 << 20, |session| {
        let mut b = frame(session, FrameKind::DataCma, 0, 0, 1 << 20);
        b.extend_from_slice(&desc.encode());
        let why = b"rank 1: out of luck";
        b.extend_from_slice(&frame(session, FrameKind::Abort, 0, 0, why.len() as u64));
        b.extend_from_slice(why);
        b
    });
    assert!(
        matches!(&e, TcpError::Aborted { by: 1, reason, .. } if reason == "rank 1: out of luck"),
        "{e}"
    );
    // The first piece may have landed (if the receive was posted by then),
    // nothing after it.
    assert!(out[..256 << 10].iter().all(|&b| b == 0x42 || b == 0xAA));
    assert!(out[256 << 10..].iter().all(|&b| b == 0xAA));
    drop(piece);
}

/// Real rank 0 receives 2 pieces from the fake rank 1 (op 0, tag 0)
/// through a plain receive, or a reduce into 0xAA-filled output: the fake
/// lends the first piece under an open lend word, waits for its ack, then
/// poisons the word (its op "failed") and lends the second, followed by
/// an abort frame with `abort` as its reason if given. Returns rank 0's
/// error and output.
fn rank0_reads_a_withdrawn_piece(
    reduce: bool,
    abort: Option<&str>,
) -> (TcpError, Vec<u8>, PieceDesc) {
    const PIECE: usize = 256 << 10;
    let len = 2 * PIECE as u64;
    let c = cfg();
    let info = root(&c);
    let rank0 = std::thread::spawn(move || {
        let mut t = TcpRank::connect(c, &info, 2, 0, COMM).unwrap();
        let zeros = vec![0u8; len as usize];
        let mut out = vec![0xAAu8; len as usize];
        let all_out = Region::new(BufKind::Output, 0, len);
        let op = if reduce {
            Op::RecvReduce {
                peer: 1,
                tag: 0,
                local: Region::new(BufKind::Input, 0, len),
                dst: all_out,
                op: ReduceOp::Sum,
            }
        } else {
            Op::Recv {
                peer: 1,
                tag: 0,
                dst: all_out,
            }
        };
        let plan = one_step(op);
        let r = t.run(
            &ctx(0, 0),
            &op_info(SIG),
            OpBuffers::separate(&zeros, &mut out, &mut []),
            plan,
        );
        t.abort();
        (r, out)
    });
    let (mut s, _, _token) = fake_rank1(&info);
    let session = info.session;
    let payload = f32s(&vec![1.5f32; 2 * PIECE / 4]);
    let w = open_word(77);
    let first = desc_of(&payload[..PIECE], &w);
    let mut b = op_start(session);
    b.extend_from_slice(&frame(session, FrameKind::DataCma, 0, 0, len));
    b.extend_from_slice(&first.encode());
    s.write_all(&b).unwrap();
    let h = read_data_frame(&mut s, session);
    assert_eq!(h.kind, FrameKind::CmaAck, "the valid piece is taken");
    assert_eq!(read_desc(&mut s), first);
    // The lender's op fails now; a descriptor it sent before the failure
    // (same lend value) is read after it.
    let second = desc_of(&payload[PIECE..], &w);
    w.poison();
    let mut b = frame(session, FrameKind::CmaMore, 0, 0, PIECE_DESC_LEN as u64);
    b.extend_from_slice(&second.encode());
    if let Some(why) = abort {
        b.extend_from_slice(&frame(session, FrameKind::Abort, 0, 0, why.len() as u64));
        b.extend_from_slice(why.as_bytes());
    }
    s.write_all(&b).unwrap();
    let (r, out) = rank0.join().unwrap();
    drop(s);
    (r.unwrap_err(), out, second)
}

fn assert_lender_failed(e: &TcpError, second: PieceDesc) {
    assert!(
        matches!(
            e,
            TcpError::LenderFailed {
                peer: 1,
                rank: 0,
                seq: 0,
                len: 262144,
                expected: 77,
                found: LEND_POISON,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "AllReduce #0: rank 1's op failed while lending its buffer: rank 0 discarded 262144 bytes it had read out of it (its lend word at {:#x} holds 0, the piece was lent under 77); see rank 1's error",
            second.word
        )
    );
}

#[test]
fn a_piece_whose_lend_word_was_poisoned_fails_a_plain_receive() {
    // No abort follows: after WITHDRAWN_GRACE, the lend word's verdict.
    let (e, out, second) = rank0_reads_a_withdrawn_piece(false, None);
    assert_lender_failed(&e, second);
    // The first piece landed in place; what the second left is not
    // reported as received (the op failed).
    assert!(out[..256 << 10]
        .chunks(4)
        .all(|c| c == 1.5f32.to_le_bytes()));
}

#[test]
fn a_piece_whose_lend_word_was_poisoned_is_never_reduced() {
    let (e, out, second) = rank0_reads_a_withdrawn_piece(true, None);
    assert_lender_failed(&e, second);
    // 0 + 1.5 for the first piece; the second was read into a chunk,
    // refused, and never reduced into the output.
    assert!(out[..256 << 10]
        .chunks(4)
        .all(|c| c == 1.5f32.to_le_bytes()));
    assert!(out[256 << 10..].iter().all(|&b| b == 0xAA));
}

#[test]
fn a_withdrawn_piece_followed_by_the_lenders_abort_fails_with_the_lenders_reason() {
    let why = "rank 1: AllReduce #0: rank 1 lost rank 2 (connection closed by the peer)";
    let (e, out, _) = rank0_reads_a_withdrawn_piece(true, Some(why));
    assert!(
        matches!(&e, TcpError::Aborted { by: 1, reason, .. } if reason == why),
        "{e}"
    );
    assert!(out[256 << 10..].iter().all(|&b| b == 0xAA));
}

#[test]
fn ring_allreduce_with_plain_and_reducing_receives_is_exact() {
    // The ring's all-gather half receives into place (read straight into
    // the posted region when it is posted first), its reduce-scatter half
    // reduces chunks: both paths, byte-exact.
    let n = 3;
    let count: u64 = (5 << 18) + 3; // 5 MiB + 12 bytes of fp32
    let c = cfg();
    let info = root(&c);
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut t = TcpRank::connect(c, &info, n, r, COMM).unwrap();
                let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, n)
                    .with_op(ReduceOp::Sum);
                let spec = AlgoSpec::Flat(Algorithm::Ring);
                let (sizes, p) = plan(&args, &spec, &GroupLayout::flat(n), r).unwrap();
                let input = f32s(&input_of(r, count as usize));
                let mut out = vec![0u8; input.len()];
                let mut scratch = vec![0u8; sizes.scratch as usize];
                let bufs = OpBuffers::separate(&input, &mut out, &mut scratch);
                t.run(&ctx(r, 0), &op_info(SIG), bufs, p).unwrap();
                (out, t.cma_stats())
            })
        })
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        let (out, stats) = h.join().unwrap();
        assert!(out == expected(n, count as usize), "rank {r} differs");
        assert!(
            stats.bytes_read > 0 && stats.bytes_lent > 0,
            "rank {r}: {stats:?}"
        );
    }
}

/// `len` zeroed bytes starting `offset` bytes into a page: the Vec and the
/// start.
fn at_page_offset(len: usize, offset: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + 8192];
    let start = (4096 + offset - v.as_ptr() as usize % 4096) % 4096;
    (v, start)
}

#[test]
fn ring_allreduce_is_exact_whatever_the_page_offsets_of_the_buffers() {
    // Pieces land in chunks at the lender's page offset, and plain
    // receives 1-31 bytes past the sender's offset go through such a
    // chunk (`tcp::chunk`): every combination gives the same bytes.
    let n = 3;
    let count: u64 = (1 << 18) + 3; // 1 MiB + 12 bytes of fp32
    let len = count as usize * 4;
    for offsets in [[0usize, 16, 8], [1, 31, 0], [16, 16, 48]] {
        let c = cfg();
        let info = root(&c);
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let c = c.clone();
                let off = offsets[r as usize];
                std::thread::spawn(move || {
                    let mut t = TcpRank::connect(c, &info, n, r, COMM).unwrap();
                    let args =
                        CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, n)
                            .with_op(ReduceOp::Sum);
                    let spec = AlgoSpec::Flat(Algorithm::Ring);
                    let (sizes, p) = plan(&args, &spec, &GroupLayout::flat(n), r).unwrap();
                    let (mut inb, i0) = at_page_offset(len, off);
                    inb[i0..i0 + len].copy_from_slice(&f32s(&input_of(r, count as usize)));
                    let (mut outb, o0) = at_page_offset(len, off);
                    let sl = sizes.scratch as usize;
                    let (mut scb, s0) = at_page_offset(sl, (off + 7) % 64);
                    let bufs = OpBuffers::separate(
                        &inb[i0..i0 + len],
                        &mut outb[o0..o0 + len],
                        &mut scb[s0..s0 + sl],
                    );
                    t.run(&ctx(r, 0), &op_info(SIG), bufs, p).unwrap();
                    outb[o0..o0 + len].to_vec()
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            let out = h.join().unwrap();
            assert!(
                out == expected(n, count as usize),
                "offsets {offsets:?}: rank {r} differs"
            );
        }
    }
}

/// Reads `s` (a hand-written rank 1's socket) up to the ack of piece `d`;
/// only op starts may come before it.
fn await_ack(s: &mut TcpStream, session: SessionId, d: PieceDesc) {
    loop {
        let h = read_frame(s, session);
        if h.kind == FrameKind::CmaAck {
            assert_eq!(read_desc(s), d, "the ack names the piece");
            return;
        }
        assert_eq!(h.kind, FrameKind::OpStart);
    }
}

/// Rank 0 receives 6 MiB from a hand-written rank 1 that lends it in
/// 256 KiB pieces, one at a time, each after the previous one's ack (so
/// rank 0 has posted its plain receive long before the last ones come).
/// With `distance`, rank 0's receive buffer sits that many bytes past the
/// payload modulo 4096. Returns whether every byte arrived, and the stats.
fn receive_lent_pieces(distance: Option<usize>) -> (bool, hccl_hw::tcp::CmaStats) {
    const PIECE: u64 = 256 << 10;
    let len = 24 * PIECE;
    let c = cfg();
    let info = root(&c);
    let payload: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
    let from = payload.as_ptr() as usize;
    let rank0 = std::thread::spawn(move || {
        let mut t = TcpRank::connect(c, &info, 2, 0, COMM).unwrap();
        let mut space = vec![0u8; len as usize + 4096];
        let base = space.as_ptr() as usize;
        let at = distance.map_or(0, |d| (from + d).wrapping_sub(base) % 4096);
        let out = &mut space[at..at + len as usize];
        let plan = recv_plan(1, len);
        t.run(
            &ctx(0, 0),
            &op_info(SIG),
            OpBuffers::separate(&[], out, &mut []),
            plan,
        )
        .unwrap();
        (out.to_vec(), t.cma_stats())
    });
    let (mut s, _, _token) = fake_rank1(&info);
    let session = info.session;
    s.write_all(&op_start(session)).unwrap();
    let w = open_word(1);
    for (i, chunk) in payload.chunks(PIECE as usize).enumerate() {
        let d = desc_of(chunk, &w);
        let kind = if i == 0 {
            FrameKind::DataCma
        } else {
            FrameKind::CmaMore
        };
        let flen = if i == 0 { len } else { PIECE_DESC_LEN as u64 };
        let mut b = frame(session, kind, 0, 0, flen);
        b.extend_from_slice(&d.encode());
        s.write_all(&b).unwrap();
        await_ack(&mut s, session, d);
    }
    s.write_all(&frame(session, FrameKind::Bye, 0, 0, 0))
        .unwrap();
    let (out, stats) = rank0.join().unwrap();
    assert_eq!(stats.bytes_read, len);
    (out == payload, stats)
}

/// An op's start reads no piece that came before it (session 16): a rank
/// one op behind read its peer's next piece there, before posting its own
/// sends, and the two ranks then copied in turn. The piece waits, first in
/// line, and the op's first wait reads it whole.
#[test]
fn an_op_start_leaves_an_early_piece_for_the_first_wait() {
    const LEN: u64 = 256 << 10;
    let c = cfg();
    let info = root(&c);
    let payload: Vec<u8> = (0..LEN).map(|i| (i * 7 % 253) as u8).collect();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel();
    let rank0 = std::thread::spawn(move || {
        let mut t = TcpRank::connect(c, &info, 2, 0, COMM).unwrap();
        sent_rx.recv().unwrap();
        // Time for the frames to reach rank 0's reader task.
        std::thread::sleep(Duration::from_millis(200));
        let mut out = vec![0u8; LEN as usize];
        let info0 = op_info(SIG);
        let bufs = OpBuffers::separate(&[], &mut out, &mut []);
        // Nothing posted, nothing lent: dropped at once.
        drop(t.begin(&ctx(0, 0), &info0, bufs).unwrap());
        let at_start = t.cma_stats().bytes_read;
        let plan = recv_plan(1, LEN);
        let bufs = OpBuffers::separate(&[], &mut out, &mut []);
        t.run(&ctx(0, 0), &op_info(SIG), bufs, plan).unwrap();
        (at_start, out, t.cma_stats().bytes_read)
    });
    let (mut s, _, _token) = fake_rank1(&info);
    let session = info.session;
    s.write_all(&op_start(session)).unwrap();
    let w = open_word(1);
    let d = desc_of(&payload, &w);
    let mut b = frame(session, FrameKind::DataCma, 0, 0, LEN);
    b.extend_from_slice(&d.encode());
    s.write_all(&b).unwrap();
    sent_tx.send(()).unwrap();
    await_ack(&mut s, session, d);
    s.write_all(&frame(session, FrameKind::Bye, 0, 0, 0))
        .unwrap();
    let (at_start, out, read) = rank0.join().unwrap();
    assert_eq!(at_start, 0, "the op's start read the early piece");
    assert_eq!(read, LEN);
    assert!(out == payload, "received bytes differ");
}

#[test]
fn pieces_for_a_posted_plain_receive_land_in_place_without_a_chunk() {
    let (same, stats) = receive_lent_pieces(Some(0));
    assert!(same, "received bytes differ");
    assert!(
        stats.bytes_read_direct >= 256 << 10,
        "no piece went straight into the posted receive: {stats:?}"
    );
}

/// A kernel copy to an address 1-31 bytes past the source's page offset
/// is 5x slower on AMD Zen (`hccl_algos::kernels::copy`): such pieces go
/// through a chunk at the source's offset, and arrive just the same.
#[test]
fn pieces_for_an_aliased_plain_receive_go_through_a_chunk() {
    for distance in [1, 16, 31] {
        let (same, stats) = receive_lent_pieces(Some(distance));
        assert!(same, "received bytes differ at distance {distance}");
        assert_eq!(stats.bytes_read_direct, 0, "distance {distance}: {stats:?}");
    }
}

/// Issue 13 item 4: a peer that said it was still waiting for a signature
/// at half its timeout (`LATE_TAG`) may time out and fail the op, so this
/// rank must not succeed before that peer says every signature agreed
/// (`AGREED_TAG`), even with its signature and its whole message here.
/// (The hand-written peer never does: as if it timed out.)
#[test]
fn an_op_waits_for_a_late_peer_to_confirm_before_it_succeeds() {
    let c = TcpConfig {
        exec_timeout: Some(Duration::from_secs(1)),
        ..cfg()
    };
    let info = root(&c);
    let rank0 = std::thread::spawn(move || {
        let mut t = TcpRank::connect(c, &info, 2, 0, COMM).unwrap();
        let mut out = vec![0u8; 64];
        let plan = recv_plan(1, 64);
        let r = t.run(
            &ctx(0, 0),
            &op_info(SIG),
            OpBuffers::separate(&[], &mut out, &mut []),
            plan,
        );
        (r, out)
    });
    let (mut s, _, _token) = fake_rank1(&info);
    let session = info.session;
    let mut b = op_start(session);
    b.extend_from_slice(&frame(session, FrameKind::OpStart, 0, LATE_TAG, 0));
    b.extend_from_slice(&frame(session, FrameKind::Data, 0, 0, 64));
    b.extend_from_slice(&[5u8; 64]);
    s.write_all(&b).unwrap();
    let (r, _) = rank0.join().unwrap();
    let e = r.unwrap_err();
    assert!(
        matches!(&e, TcpError::Timeout { waiting, .. } if waiting.contains("rank 1 to confirm")),
        "{e}"
    );
    drop(s);
}

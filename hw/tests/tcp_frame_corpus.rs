//! Runs the `tcp_frame` fuzz target's body over its committed seed corpus
//! (cargo-fuzz needs nightly; this keeps the body exercised on stable),
//! and over the same seeds mutated byte by byte.
//!
//! The seeds are made with the public encoders by [`seeds`]; after a wire
//! change, rewrite them with
//! `cargo test -p hccl-hw --test tcp_frame_corpus -- --ignored`.

use std::net::SocketAddr;

use hccl_hw::tcp::wire::{
    self, CmaProbe, CpuSet, CtrlKind, FrameHeader, FrameKind, Join, PieceDesc, RejectCode,
    ShmOffer, TableEntry,
};

include!("../../fuzz/bodies/tcp_frame.rs");

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/tcp_frame");
const SESSION: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;

fn header(kind: FrameKind, len: u64) -> FrameHeader {
    FrameHeader {
        kind,
        session: SESSION,
        comm: 0xc0de,
        seq: 7,
        tag: 3,
        len,
        sig: [0x5a; wire::SIG_LEN],
    }
}

fn frame(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut v = header(kind, payload.len() as u64).encode().to_vec();
    v.extend_from_slice(payload);
    v
}

/// (file name, bytes): one valid frame of each kind and one valid control
/// message of each kind, then truncated and corrupted variants.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let addr: SocketAddr = "10.1.2.3:60001".parse().unwrap();
    let addr6: SocketAddr = "[fe80::1]:29500".parse().unwrap();
    let desc = PieceDesc {
        addr: 0x7f00_0000_1000,
        len: 4096,
        word: 0x5555_0000_0040,
        expected: 3,
    }
    .encode();
    let probe = CmaProbe {
        offer: true,
        pid: 4242,
        addr: 0x5555_0000,
        token: [9; wire::CMA_TOKEN_LEN],
    }
    .encode();
    let offer = ShmOffer {
        willing: true,
        fd: 7,
        cap: 256 << 10,
        token: [5; wire::SHM_TOKEN_LEN],
    }
    .encode();
    let mut s: Vec<(String, Vec<u8>)> = vec![
        (
            "frame_data".into(),
            frame(FrameKind::Data, &[1, 2, 3, 4, 5, 6, 7, 8]),
        ),
        ("frame_data_empty".into(), frame(FrameKind::Data, &[])),
        ("frame_op_start".into(), frame(FrameKind::OpStart, &[])),
        (
            "frame_abort".into(),
            frame(FrameKind::Abort, b"rank 1: count mismatch"),
        ),
        ("frame_bye".into(), frame(FrameKind::Bye, &[])),
        ("frame_data_cma".into(), {
            let mut v = header(FrameKind::DataCma, 8192).encode().to_vec();
            v.extend_from_slice(&desc);
            v
        }),
        ("frame_cma_probe".into(), frame(FrameKind::CmaProbe, &probe)),
        ("frame_cma_reply".into(), frame(FrameKind::CmaReply, &[])),
        ("frame_cma_ack".into(), frame(FrameKind::CmaAck, &desc)),
        ("frame_cma_more".into(), frame(FrameKind::CmaMore, &desc)),
        ("frame_shm_offer".into(), frame(FrameKind::ShmOffer, &offer)),
        ("frame_shm_reply".into(), frame(FrameKind::ShmReply, &[])),
        (
            "ctrl_join".into(),
            wire::encode_ctrl(
                CtrlKind::Join,
                SESSION,
                &Join {
                    nranks: 4,
                    rank: 2,
                    data_addr: addr,
                    cpus: CpuSet::first(8),
                }
                .encode(),
            ),
        ),
        (
            "ctrl_table".into(),
            wire::encode_ctrl(
                CtrlKind::Table,
                SESSION,
                &wire::encode_table(&[
                    TableEntry {
                        data_addr: addr,
                        cpus: 8,
                    },
                    TableEntry {
                        data_addr: addr6,
                        cpus: 192,
                    },
                ]),
            ),
        ),
        (
            "ctrl_reject".into(),
            wire::encode_ctrl(
                CtrlKind::Reject,
                SESSION,
                &wire::encode_reject(RejectCode::Expired, "session expired"),
            ),
        ),
        (
            "ctrl_hello".into(),
            wire::encode_ctrl(CtrlKind::Hello, SESSION, &wire::encode_hello(1, 3)),
        ),
        (
            "ctrl_hello_ack".into(),
            wire::encode_ctrl(CtrlKind::HelloAck, SESSION, &[]),
        ),
    ];
    let valid = s.clone();
    let patch = |name: &str, at: usize, b: &[u8]| {
        let mut v = valid.iter().find(|(n, _)| n == name).unwrap().1.clone();
        v[at..at + b.len()].copy_from_slice(b);
        v
    };
    s.extend([
        ("bad_truncated_header".into(), valid[0].1[..40].to_vec()),
        ("bad_magic".into(), patch("frame_data", 0, b"HCCX")),
        (
            "bad_version".into(),
            patch("frame_data", 4, &1u16.to_le_bytes()),
        ),
        ("bad_kind".into(), patch("frame_data", 6, &[0xee])),
        (
            "bad_abort_too_long".into(),
            patch("frame_abort", 48, &(1u64 << 40).to_le_bytes()),
        ),
        (
            "bad_bye_with_payload".into(),
            patch("frame_bye", 48, &1u64.to_le_bytes()),
        ),
        (
            "bad_probe_short".into(),
            patch("frame_cma_probe", 48, &3u64.to_le_bytes()),
        ),
        ("bad_probe_offer".into(), patch("frame_cma_probe", 88, &[7])),
        (
            "bad_desc_empty".into(),
            patch("frame_cma_ack", 96, &0u64.to_le_bytes()),
        ),
        (
            "bad_desc_wraps".into(),
            patch("frame_cma_more", 88, &u64::MAX.to_le_bytes()),
        ),
        (
            "bad_desc_too_long".into(),
            patch("frame_data_cma", 96, &(1u64 << 30).to_le_bytes()),
        ),
        (
            "bad_desc_word_null".into(),
            patch("frame_cma_more", 104, &0u64.to_le_bytes()),
        ),
        (
            "bad_desc_word_unaligned".into(),
            patch("frame_data_cma", 104, &0x5555_0000_0041u64.to_le_bytes()),
        ),
        (
            "bad_desc_expects_poison".into(),
            patch("frame_cma_ack", 112, &wire::LEND_POISON.to_le_bytes()),
        ),
        (
            "bad_ctrl_body_too_long".into(),
            patch("ctrl_join", 24, &u32::MAX.to_le_bytes()),
        ),
        ("bad_ctrl_kind".into(), patch("ctrl_join", 6, &[0])),
        (
            "bad_table_count".into(),
            patch("ctrl_table", 28, &1000u32.to_le_bytes()),
        ),
        ("bad_addr_family".into(), patch("ctrl_join", 40, &[5])),
        (
            "bad_reserved_nonzero".into(),
            patch("frame_data", 44, &[1, 2, 3, 4]),
        ),
        ("empty".into(), vec![]),
    ]);
    s
}

include!("../../fuzz/bodies/replay.rs");

fn accepted_frame(b: &[u8]) -> Option<FrameHeader> {
    let h: &[u8; wire::FRAME_HEADER_LEN] = b.get(..wire::FRAME_HEADER_LEN)?.try_into().ok()?;
    FrameHeader::decode(h, SESSION).ok()
}

fn accepted_ctrl(b: &[u8]) -> bool {
    b.get(..wire::CTRL_HEADER_LEN)
        .and_then(|h| <&[u8; wire::CTRL_HEADER_LEN]>::try_from(h).ok())
        .is_some_and(|h| wire::decode_ctrl_header(h).is_ok())
}

#[test]
fn seed_corpus() {
    let seeds = corpus("tcp_frame");
    assert!(
        seeds.len() >= 30,
        "seed corpus is missing: {} files",
        seeds.len()
    );
    let mut frames = Vec::new();
    let mut ctrl = 0;
    for (name, data) in &seeds {
        check_tcp_frame(data);
        if let Some(h) = accepted_frame(data) {
            frames.push(h.kind);
        }
        ctrl += usize::from(accepted_ctrl(data));
        // Bad seeds must really be bad where they were made bad.
        if name.starts_with("bad_") && name != "bad_reserved_nonzero" {
            let full_frame_ok = accepted_frame(data).is_some_and(|h| {
                let rest = &data[wire::FRAME_HEADER_LEN..];
                match h.kind {
                    FrameKind::CmaProbe => rest
                        .get(..wire::CMA_PROBE_LEN)
                        .is_some_and(|b| CmaProbe::decode(b.try_into().unwrap()).is_ok()),
                    FrameKind::ShmOffer => rest
                        .get(..wire::SHM_OFFER_LEN)
                        .is_some_and(|b| ShmOffer::decode(b.try_into().unwrap()).is_ok()),
                    FrameKind::CmaAck | FrameKind::CmaMore | FrameKind::DataCma => {
                        let left = if h.kind == FrameKind::DataCma {
                            h.len
                        } else {
                            wire::MAX_CMA_PIECE
                        };
                        rest.get(..wire::PIECE_DESC_LEN).is_some_and(|b| {
                            PieceDesc::decode(b.try_into().unwrap(), left, wire::MAX_CMA_PIECE)
                                .is_ok()
                        })
                    }
                    _ => true,
                }
            });
            let ctrl_ok = accepted_ctrl(data) && {
                let body = &data[wire::CTRL_HEADER_LEN..];
                Join::decode(body).is_ok() || wire::decode_table(body).is_ok()
            };
            assert!(!full_frame_ok && !ctrl_ok, "{name} is accepted");
        }
    }
    // Every frame kind once, plus the empty data frame, the header whose
    // reserved bytes are not zero (decode ignores them) and the seven whose
    // header is valid but whose probe or descriptor is not.
    frames.sort_by_key(|k| *k as u8);
    assert_eq!(frames.len(), 20, "{frames:?}");
    for k in 1..=11u8 {
        assert!(
            frames.iter().any(|f| *f as u8 == k),
            "no valid frame of kind {k}"
        );
    }
    // Five control kinds and the bad table count (its header is fine).
    assert!(ctrl >= 6, "{ctrl} control headers accepted");
}

/// Every seed with each byte flipped, and each prefix: the body's
/// properties hold on inputs near valid ones (a cheap stand-in for the
/// fuzzer's own mutations).
#[test]
fn mutated_seeds() {
    for (_, data) in corpus("tcp_frame") {
        for i in 0..data.len() {
            let mut m = data.clone();
            m[i] ^= 0xff;
            check_tcp_frame(&m);
            check_tcp_frame(&data[..i]);
        }
    }
}

#[test]
#[ignore = "rewrites fuzz/corpus/tcp_frame; run after a wire format change"]
fn regenerate_seed_corpus() {
    let _ = std::fs::remove_dir_all(DIR);
    std::fs::create_dir_all(DIR).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(format!("{DIR}/{name}"), bytes).unwrap();
    }
}

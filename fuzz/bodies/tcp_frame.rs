// Body of the `tcp_frame` fuzz target, shared with the seed-corpus test in
// hw/tests/tcp_frame_corpus.rs (included with `include!`).
//
// Any bytes, read as what a TCP peer could send (a data-frame header and
// what follows it, a control message, bare bodies): decoding must not
// panic; an accepted header must re-encode to the same bytes (apart from
// the bytes the format marks "reserved (0)", which decoding ignores) and
// respect the documented bounds; an accepted body must decode again,
// unchanged, from its own encoding.
fn check_tcp_frame(data: &[u8]) {
    use hccl_hw::tcp::wire::{
        self, CmaProbe, CtrlKind, FrameHeader, FrameKind, Join, PieceDesc, ShmOffer,
    };

    // Bytes 7 and 44..48 of a frame header and byte 7 of a control header
    // are reserved: written as 0, not checked on decode.
    fn same_but_reserved(a: &[u8], b: &[u8], reserved: &[usize]) -> bool {
        a.len() == b.len() && (0..a.len()).all(|i| reserved.contains(&i) || a[i] == b[i])
    }

    // Data-plane frame: the first 88 bytes are a header.
    if let Some(head) = data.get(..wire::FRAME_HEADER_LEN) {
        let head: &[u8; wire::FRAME_HEADER_LEN] = head.try_into().expect("88 bytes");
        let mut session = [0u8; 16];
        session.copy_from_slice(&head[8..24]);
        let session = u128::from_le_bytes(session);
        // Another session is always refused, whatever else is wrong or right.
        if let Ok(h) = FrameHeader::decode(head, session ^ 1) {
            panic!(
                "accepted a header of session {:#x} as {:#x}: {h:?}",
                h.session,
                session ^ 1
            );
        }
        if let Ok(h) = FrameHeader::decode(head, session) {
            assert!(
                same_but_reserved(&h.encode(), head, &[7, 44, 45, 46, 47]),
                "header does not re-encode to its bytes: {h:?}"
            );
            assert_eq!(h.session, session);
            let bound = match h.kind {
                FrameKind::Data | FrameKind::DataCma => u64::MAX,
                FrameKind::Abort => wire::MAX_ABORT_REASON,
                FrameKind::OpStart
                | FrameKind::Bye
                | FrameKind::CmaReply
                | FrameKind::ShmReply => 0,
                FrameKind::CmaProbe => wire::CMA_PROBE_LEN as u64,
                FrameKind::ShmOffer => wire::SHM_OFFER_LEN as u64,
                FrameKind::CmaAck | FrameKind::CmaMore => wire::PIECE_DESC_LEN as u64,
            };
            assert!(
                h.len <= bound,
                "{:?} frame with len {} > {bound}",
                h.kind,
                h.len
            );
            let rest = &data[wire::FRAME_HEADER_LEN..];
            match h.kind {
                FrameKind::CmaProbe => {
                    assert_eq!(h.len, wire::CMA_PROBE_LEN as u64);
                    if let Some(b) = rest.get(..wire::CMA_PROBE_LEN) {
                        let b: &[u8; wire::CMA_PROBE_LEN] = b.try_into().expect("probe bytes");
                        if let Ok(p) = CmaProbe::decode(b) {
                            assert_eq!(&p.encode(), b, "probe does not re-encode");
                        }
                    }
                }
                FrameKind::ShmOffer => {
                    assert_eq!(h.len, wire::SHM_OFFER_LEN as u64);
                    if let Some(b) = rest.get(..wire::SHM_OFFER_LEN) {
                        let b: &[u8; wire::SHM_OFFER_LEN] = b.try_into().expect("offer bytes");
                        if let Ok(o) = ShmOffer::decode(b) {
                            assert_eq!(&o.encode(), b, "shm offer does not re-encode");
                        }
                    }
                }
                FrameKind::DataCma | FrameKind::CmaAck | FrameKind::CmaMore => {
                    if let Some(b) = rest.get(..wire::PIECE_DESC_LEN) {
                        let b: &[u8; wire::PIECE_DESC_LEN] = b.try_into().expect("desc bytes");
                        // A piece must fit in what is left of its message:
                        // all of it for the first piece (the header's len);
                        // acks and later pieces are checked as the
                        // transport does without stream state, by the bound.
                        let left = match h.kind {
                            FrameKind::DataCma => h.len,
                            _ => wire::MAX_CMA_PIECE,
                        };
                        if let Ok(d) = PieceDesc::decode(b, left, wire::MAX_CMA_PIECE) {
                            assert_eq!(&d.encode(), b, "descriptor does not re-encode");
                            assert!(d.len > 0 && d.len <= left && d.len <= wire::MAX_CMA_PIECE);
                            assert!(d.addr.checked_add(d.len).is_some());
                            assert!(
                                d.word != 0 && d.word % 8 == 0 && d.word.checked_add(8).is_some()
                            );
                            assert_ne!(
                                d.expected,
                                wire::LEND_POISON,
                                "a descriptor expects the poison"
                            );
                        }
                    }
                }
                _ => {}
            }
        }
    }

    // Control message: 28-byte header, then the body.
    if let Some(head) = data.get(..wire::CTRL_HEADER_LEN) {
        let head: &[u8; wire::CTRL_HEADER_LEN] = head.try_into().expect("28 bytes");
        if let Ok(h) = wire::decode_ctrl_header(head) {
            assert!(h.body_len <= wire::MAX_CTRL_BODY, "body_len {}", h.body_len);
            let rest = &data[wire::CTRL_HEADER_LEN..];
            let body = rest.get(..h.body_len as usize).unwrap_or(rest);
            if body.len() == h.body_len as usize {
                let again = wire::encode_ctrl(h.kind, h.session, body);
                assert!(
                    same_but_reserved(&again[..wire::CTRL_HEADER_LEN], head, &[7]),
                    "control header does not re-encode: {h:?}"
                );
            }
            match h.kind {
                CtrlKind::Join => {
                    if let Ok(j) = Join::decode(body) {
                        assert_eq!(Join::decode(&j.encode()), Ok(j));
                    }
                }
                CtrlKind::Table => {
                    if let Ok(t) = wire::decode_table(body) {
                        assert_eq!(wire::decode_table(&wire::encode_table(&t)), Ok(t));
                    }
                }
                CtrlKind::Reject => {
                    if let Ok((code, why)) = wire::decode_reject(body) {
                        let again = wire::encode_reject(code, &why);
                        assert_eq!(wire::decode_reject(&again), Ok((code, why)));
                    }
                }
                CtrlKind::Hello | CtrlKind::HelloAck => {
                    if let Ok((from, to)) = wire::decode_hello(body) {
                        assert_eq!(wire::encode_hello(from, to), body);
                    }
                }
            }
        }
    }

    // Every body decoder on the bare bytes: no panic, bounded by the input.
    if let Ok(a) = wire::decode_addr(data) {
        let mut v = Vec::new();
        wire::encode_addr(&a, &mut v);
        assert_eq!(wire::decode_addr(&v), Ok(a));
    }
    if let Ok(t) = wire::decode_table(data) {
        assert!(
            t.len() <= data.len() / 23,
            "{} table entries from {} bytes",
            t.len(),
            data.len()
        );
    }
    let _ = Join::decode(data);
    let _ = wire::decode_reject(data);
    let _ = wire::decode_hello(data);
}

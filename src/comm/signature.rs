//! Op signatures on the wire: 32 bytes, normalized so that byte equality
//! is exactly `OpSignature::check_consistent` (the op only for reductions,
//! the root only for rooted kinds) plus the algorithm: ranks that run
//! different schedules (a different `HCCL_ALGO` on one rank) would
//! otherwise exchange the wrong messages or wait for ones never sent.

use hccl_algos::algo::{AlgoSpec, Algorithm, Levels};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind, OpSignature};
use hccl_algos::schedule::Rank;
use hccl_algos::{DataType, ReduceOp};
use hccl_hw::tcp::wire::Signature;

/// Encodes `s`: kind, dtype, op (0xFF if unused), root (u32::MAX if unused), count.
pub(crate) fn encode(s: &OpSignature) -> Signature {
    let mut b = [0u8; 32];
    b[0] = CollectiveKind::ALL
        .iter()
        .position(|k| *k == s.kind)
        .unwrap_or(0xFF) as u8;
    b[1] = s.dtype as u32 as u8;
    b[2] = if s.kind.is_reduction() {
        s.op as u32 as u8
    } else {
        0xFF
    };
    let root = if s.kind.is_rooted() { s.root } else { u32::MAX };
    b[4..8].copy_from_slice(&root.to_le_bytes());
    b[8..16].copy_from_slice(&s.count.to_le_bytes());
    b[16..24].copy_from_slice(&s.counts.to_le_bytes());
    b
}

/// [`encode`] with the algorithm in bytes 24..28: `[1, a]` for a flat
/// algorithm, `[2, l0, l1, l2]` per level (0xFF for `NA`), indices into
/// `Algorithm::ALL`.
pub(crate) fn encode_with_algo(s: &OpSignature, spec: &AlgoSpec) -> Signature {
    let mut b = encode(s);
    let idx = |a: Option<Algorithm>| {
        a.and_then(|a| Algorithm::ALL.iter().position(|x| *x == a))
            .map_or(0xFF, |i| i as u8)
    };
    b[24..28].copy_from_slice(&match spec {
        AlgoSpec::Flat(a) => [1, idx(Some(*a)), 0, 0],
        AlgoSpec::Hierarchical(l) => [2, idx(l.level0), idx(l.level1), idx(l.level2)],
    });
    b
}

/// [`encode_with_algo`] with byte 3 = 1 if the op runs widened to f32
/// (`HCCL_REDUCE_PRECISION=fp32` on an fp16/bf16 reduction), else 0: ranks
/// that disagree would send messages of different lengths.
pub(crate) fn encode_full(s: &OpSignature, spec: &AlgoSpec, wide: bool) -> Signature {
    let mut b = encode_with_algo(s, spec);
    b[3] = u8::from(wide);
    b
}

/// The precision name of [`encode_full`]'s byte 3.
fn precision_name(wide: bool) -> &'static str {
    if wide {
        "fp32"
    } else {
        "native"
    }
}

/// The algorithm [`encode_with_algo`] put in `b`, if any.
pub(crate) fn decode_algo(b: &Signature) -> Option<AlgoSpec> {
    let algo = |i: u8| Algorithm::ALL.get(i as usize).copied();
    match b[24] {
        1 => algo(b[25]).map(AlgoSpec::Flat),
        2 => Some(AlgoSpec::Hierarchical(Levels {
            level0: algo(b[25]),
            level1: algo(b[26]),
            level2: algo(b[27]),
        })),
        _ => None,
    }
}

/// Decodes [`encode`]'s bytes (unused fields come back as 0 / sum).
pub(crate) fn decode(b: &Signature) -> Option<OpSignature> {
    let kind = *CollectiveKind::ALL.get(b[0] as usize)?;
    let dtype = DataType::from_hccl(b[1].into())?;
    let op = ReduceOp::ALL
        .get(b[2] as usize)
        .copied()
        .unwrap_or(ReduceOp::Sum);
    let root = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let word = |i: usize| {
        let mut c = [0u8; 8];
        c.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(c)
    };
    Some(OpSignature {
        kind,
        count: word(8),
        dtype,
        op,
        root: if root == u32::MAX { 0 } else { root },
        counts: word(16),
    })
}

/// The mismatch message: field, both values, both ranks. `args` are this
/// rank's (whose signature is `local`): the wire carries only a hash of
/// the V counts, so for them the message gives this rank's counts and
/// says that the peer's differ.
pub(crate) fn describe(
    args: &CollectiveArgs,
    local: &OpSignature,
    (spec, wide): (&AlgoSpec, bool),
    me: Rank,
    remote: &Signature,
    peer: Rank,
) -> String {
    let Some(r) = decode(remote) else {
        return format!("rank {peer} sent an op signature this build cannot read (a different hccl-rs version?)");
    };
    let consistent = OpSignature::check_consistent(local, &r, peer);
    if consistent.is_ok() && (remote[3] == 1) != wide {
        // Before the algorithm: the choice depends on the bytes moved.
        return format!(
            "reduce precision mismatch, {} on rank {me}, {} on rank {peer}; set HCCL_REDUCE_PRECISION (or Comm::set_reduce_precision) alike on every rank",
            precision_name(wide),
            precision_name(remote[3] == 1)
        );
    }
    match (consistent, decode_algo(remote)) {
        (Err(e), _) if local.counts != r.counts && e.field == "per-rank counts" => format!(
            "{} mismatch, {} on rank {me}, different ones on rank {peer}; every rank must call the collective with the same arguments",
            e.field,
            local_counts(args)
        ),
        (Err(e), _) => format!(
            "{} mismatch, {} on rank {me}, {} on rank {peer}; every rank must call the collective with the same arguments",
            e.field, e.local, e.remote
        ),
        (Ok(()), Some(theirs)) if theirs != *spec => format!(
            "algorithm mismatch, {spec} on rank {me}, {theirs} on rank {peer}; set HCCL_ALGO alike on every rank"
        ),
        (Ok(()), _) => format!("rank {peer} runs a different op (signature bytes differ)"),
    }
}

/// The V counts of `args` as a list (AllGatherV / ReduceScatterV) or its
/// AllToAllV send matrix row by row, at most 64 numbers.
pub(crate) fn local_counts(args: &CollectiveArgs) -> String {
    let list = |v: &mut dyn Iterator<Item = u64>, n: usize| {
        let shown: Vec<String> = v.take(64).map(|c| c.to_string()).collect();
        let more = if n > 64 { ", ..." } else { "" };
        format!("[{}{more}]", shown.join(", "))
    };
    match (&args.counts, &args.send_matrix) {
        (Some(c), _) => format!("counts {}", list(&mut c.counts().iter().copied(), c.len())),
        (None, Some(m)) => {
            let n = m.n();
            let mut all = (0..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .map(|(i, j)| m.get(i, j));
            format!("send matrix (row by row) {}", list(&mut all, n * n))
        }
        (None, None) => "none".into(),
    }
}

/// The signature every point-to-point message carries: kind SendRecv and
/// the data type; the count is 0 because one op (a batch) sends messages of
/// different counts under one signature. A count mismatch shows as a length
/// mismatch instead, which [`super::p2p`] words in elements.
pub(crate) fn p2p_signature(dtype: DataType) -> OpSignature {
    OpSignature {
        kind: CollectiveKind::SendRecv,
        count: 0,
        dtype,
        op: ReduceOp::Sum,
        root: 0,
        counts: 0,
    }
}

/// The mismatch message of a point-to-point message from `src` to `dst`:
/// the sender's and the receiver's count (if known) and data type.
pub(crate) fn p2p_mismatch(
    src: Rank,
    dst: Rank,
    counts: Option<(u64, u64)>,
    dtypes: (DataType, DataType),
) -> String {
    let mut diffs = Vec::new();
    if let Some((sent, expected)) = counts.filter(|(a, b)| a != b) {
        diffs.push(format!(
            "count: rank {src} sends {sent}, rank {dst} receives {expected}"
        ));
    }
    if dtypes.0 != dtypes.1 {
        diffs.push(format!(
            "dtype: rank {src} sends {}, rank {dst} receives {}",
            dtypes.0, dtypes.1
        ));
    }
    format!(
        "send/recv mismatch, {}; call send and recv with the same count and data type",
        diffs.join("; ")
    )
}

/// The mismatch message when a point-to-point message's signature differs
/// from this receiver's ([`p2p_signature`] of `dtype`).
pub(crate) fn describe_p2p(dtype: DataType, me: Rank, remote: &Signature, peer: Rank) -> String {
    let Some(r) = decode(remote) else {
        return format!(
            "rank {peer} sent a message this build cannot read (a different hccl-rs version?)"
        );
    };
    if r.kind != CollectiveKind::SendRecv {
        return format!(
            "rank {peer} sent a {} message where rank {me} expects a point-to-point message",
            r.kind
        );
    }
    p2p_mismatch(peer, me, None, (r.dtype, dtype))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(count: u64) -> CollectiveArgs {
        CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, 4)
    }

    #[test]
    fn a_v_count_mismatch_shows_the_local_counts() {
        let mine = CollectiveArgs::v_counts(false, vec![3, 0, 5], DataType::Fp32).unwrap();
        let theirs = CollectiveArgs::v_counts(false, vec![3, 1, 5], DataType::Fp32).unwrap();
        let remote = encode(&theirs.signature());
        let ring = AlgoSpec::Flat(Algorithm::Ring);
        assert_eq!(
            describe(&mine, &mine.signature(), (&ring, false), 0, &remote, 2),
            "per-rank counts mismatch, counts [3, 0, 5] on rank 0, different ones on rank 2; every rank must call the collective with the same arguments"
        );
    }

    #[test]
    fn a_reduce_precision_mismatch_names_the_setting_before_the_algorithm() {
        let a = CollectiveArgs::new(CollectiveKind::AllReduce, 6, DataType::Bf16, 4);
        let s = a.signature();
        let remote = encode_full(&s, &AlgoSpec::Flat(Algorithm::Mesh), true);
        let ring = AlgoSpec::Flat(Algorithm::Ring);
        assert_eq!(
            describe(&a, &s, (&ring, false), 0, &remote, 3),
            "reduce precision mismatch, native on rank 0, fp32 on rank 3; set HCCL_REDUCE_PRECISION (or Comm::set_reduce_precision) alike on every rank"
        );
        assert_ne!(encode_full(&s, &ring, true), encode_full(&s, &ring, false));
    }

    fn sig(kind: CollectiveKind, count: u64, op: ReduceOp, root: u32) -> OpSignature {
        OpSignature {
            kind,
            count,
            dtype: DataType::Fp32,
            op,
            root,
            counts: 0,
        }
    }

    #[test]
    fn byte_equality_is_consistency() {
        // The op is ignored for data movement, the root for unrooted kinds.
        let a = sig(CollectiveKind::AllGather, 4, ReduceOp::Sum, 0);
        let b = sig(CollectiveKind::AllGather, 4, ReduceOp::Max, 3);
        assert_eq!(encode(&a), encode(&b));
        let c = sig(CollectiveKind::Reduce, 4, ReduceOp::Sum, 1);
        let d = sig(CollectiveKind::Reduce, 4, ReduceOp::Sum, 2);
        assert_ne!(encode(&c), encode(&d));
        assert_eq!(decode(&encode(&c)), Some(c));
    }

    #[test]
    fn describe_names_field_values_and_ranks() {
        let local = sig(CollectiveKind::AllReduce, 6, ReduceOp::Sum, 0);
        let remote = encode(&sig(CollectiveKind::AllReduce, 4, ReduceOp::Sum, 0));
        let ring = AlgoSpec::Flat(Algorithm::Ring);
        assert_eq!(
            describe(&args(6), &local, (&ring, false), 2, &remote, 1),
            "count mismatch, 6 on rank 2, 4 on rank 1; every rank must call the collective with the same arguments"
        );
    }

    #[test]
    fn the_algorithm_travels_and_a_difference_is_named() {
        let s = sig(CollectiveKind::AllReduce, 6, ReduceOp::Sum, 0);
        let specs = [
            AlgoSpec::Flat(Algorithm::Ring),
            AlgoSpec::Flat(Algorithm::Doubling),
            "level0:mesh;level1:H-D_R".parse().unwrap(),
            "level0:NA;level1:ring;level2:NB".parse().unwrap(),
        ];
        for a in &specs {
            assert_eq!(decode_algo(&encode_with_algo(&s, a)).as_ref(), Some(a));
            for b in &specs {
                assert_eq!(
                    encode_with_algo(&s, a) == encode_with_algo(&s, b),
                    a == b,
                    "{a} vs {b}"
                );
            }
        }
        let remote = encode_with_algo(&s, &specs[0]);
        assert_eq!(
            describe(&args(6), &s, (&specs[1], false), 0, &remote, 3),
            "algorithm mismatch, doubling on rank 0, ring on rank 3; set HCCL_ALGO alike on every rank"
        );
    }
}

//! Typed V variants (`Comm::all_gather_v`, `reduce_scatter_v`,
//! `all_to_all_v`) with counts and displacements that are not packed (gaps,
//! blocks out of rank order, overlapping send blocks), on TCP threads and
//! on the simulator, against `hccl_algos::reference`; bad counts and
//! displacements are errors naming the field, index and value;
//! AllToAllV counts that disagree across ranks are a mismatch.

use hccl::comm::{BackendKind, CommError, ReduceOp};
use hccl::Comm;
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::reference::reference;
use hccl_algos::DataType;
use hccl_conformance::on_threads;

fn le_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_le(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Rank r's element i: distinct across ranks and positions.
fn val(r: usize, i: usize) -> i32 {
    (100 * r + i) as i32 + 1
}

/// Copies packed `src` into blocks of `out` at `displs` with `counts`.
fn place(src: &[i32], counts: &[u64], displs: &[u64], out: &mut [i32]) {
    let mut at = 0;
    for (&c, &d) in counts.iter().zip(displs) {
        let (c, d) = (c as usize, d as usize);
        out[d..d + c].copy_from_slice(&src[at..at + c]);
        at += c;
    }
}

const SENTINEL: i32 = -7;

/// AllGatherV into blocks out of rank order with gaps: block 0 last,
/// rank 1 sends nothing; the gaps keep their sentinel.
fn all_gather_v(backend: BackendKind) {
    let counts = [2u64, 0, 3];
    let displs = [6u64, 0, 1];
    let out = on_threads(backend, 3, move |c| {
        let r = c.rank() as usize;
        let send: Vec<i32> = (0..counts[r] as usize).map(|i| val(r, i)).collect();
        let mut recv = vec![SENTINEL; 9];
        c.all_gather_v(&send, &mut recv, &counts, &displs).unwrap();
        recv
    });
    let args = CollectiveArgs::v_counts(false, counts.to_vec(), DataType::Int32).unwrap();
    let inputs: Vec<Vec<u8>> = (0..3)
        .map(|r| {
            le_bytes(
                &(0..counts[r] as usize)
                    .map(|i| val(r, i))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let want = reference(&args, &inputs).unwrap();
    for (r, got) in out.iter().enumerate() {
        let mut expect = vec![SENTINEL; 9];
        place(&from_le(&want[r]), &counts, &displs, &mut expect);
        assert_eq!(got, &expect, "rank {r}");
    }
    // By hand, for rank 0: rank 2's block at 1..4, rank 0's at 6..8.
    assert_eq!(
        out[0],
        vec![SENTINEL, 201, 202, 203, SENTINEL, SENTINEL, 1, 2, SENTINEL]
    );
}

/// ReduceScatterV from overlapping send blocks (allowed: they are read).
fn reduce_scatter_v(backend: BackendKind) {
    let counts = [1u64, 4, 2];
    let displs = [3u64, 0, 4];
    let out = on_threads(backend, 3, move |c| {
        let r = c.rank() as usize;
        let send: Vec<f32> = (0..6).map(|i| val(r, i) as f32).collect();
        let mut recv = vec![0.0f32; counts[r] as usize];
        c.reduce_scatter_v(&send, &counts, &displs, &mut recv, ReduceOp::Sum)
            .unwrap();
        recv
    });
    let args = CollectiveArgs::v_counts(true, counts.to_vec(), DataType::Fp32)
        .unwrap()
        .with_op(ReduceOp::Sum);
    let packed = |r: usize| -> Vec<u8> {
        counts
            .iter()
            .zip(&displs)
            .flat_map(|(&c, &d)| (d..d + c).map(move |i| val(r, i as usize) as f32))
            .flat_map(f32::to_le_bytes)
            .collect()
    };
    let inputs: Vec<Vec<u8>> = (0..3).map(packed).collect();
    let want = reference(&args, &inputs).unwrap();
    for (r, got) in out.iter().enumerate() {
        let got: Vec<u8> = got.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(got, want[r], "rank {r}");
    }
    // By hand, rank 0 gets element 3 summed over ranks: 4 + 104 + 204.
    assert_eq!(out[0], vec![312.0]);
}

/// AllToAllV with send blocks in reverse rank order and a one-element gap
/// between receive blocks.
fn all_to_all_v(backend: BackendKind) {
    let n = 3usize;
    let m = |i: usize, j: usize| ((i + 2 * j) % 3) as u64;
    let out = on_threads(backend, 3, move |c| {
        let r = c.rank() as usize;
        let send_counts: Vec<u64> = (0..n).map(|j| m(r, j)).collect();
        // Block n-1 first, block 0 last.
        let mut send_displs = vec![0u64; n];
        let mut at = 0;
        for j in (0..n).rev() {
            send_displs[j] = at;
            at += send_counts[j];
        }
        let send: Vec<i32> = (0..at as usize).map(|i| val(r, i)).collect();
        let recv_counts: Vec<u64> = (0..n).map(|i| m(i, r)).collect();
        let recv_displs: Vec<u64> = (0..n)
            .scan(0u64, |at, i| {
                let d = *at;
                *at += recv_counts[i] + 1;
                Some(d)
            })
            .collect();
        let len = recv_displs[n - 1] + recv_counts[n - 1];
        let mut recv = vec![SENTINEL; len as usize];
        c.all_to_all_v(
            &send,
            &send_counts,
            &send_displs,
            &mut recv,
            &recv_counts,
            &recv_displs,
        )
        .unwrap();
        (
            send,
            send_counts,
            send_displs,
            recv,
            recv_counts,
            recv_displs,
        )
    });
    let rows: Vec<Vec<u64>> = (0..n).map(|i| (0..n).map(|j| m(i, j)).collect()).collect();
    let args = CollectiveArgs::all_to_all_v(rows, DataType::Int32).unwrap();
    let inputs: Vec<Vec<u8>> = out
        .iter()
        .map(|(send, counts, displs, ..)| {
            let packed: Vec<i32> = counts
                .iter()
                .zip(displs)
                .flat_map(|(&c, &d)| send[d as usize..(d + c) as usize].to_vec())
                .collect();
            le_bytes(&packed)
        })
        .collect();
    let want = reference(&args, &inputs).unwrap();
    for (r, (_, _, _, recv, counts, displs)) in out.iter().enumerate() {
        let mut expect = vec![SENTINEL; recv.len()];
        place(&from_le(&want[r]), counts, displs, &mut expect);
        assert_eq!(recv, &expect, "rank {r}");
    }
    // By hand: rank 1 gets m(0,1) = 2 elements from rank 0, which are rank
    // 0's block 1, stored after its block 2 (m(0,2) = 1 element): 2, 3.
    assert_eq!(&out[1].3[..2], &[val(0, 1), val(0, 2)]);
}

#[test]
fn v_variants_match_the_reference_on_sim() {
    all_gather_v(BackendKind::Sim);
    reduce_scatter_v(BackendKind::Sim);
    all_to_all_v(BackendKind::Sim);
}

#[test]
fn v_variants_match_the_reference_on_tcp() {
    all_gather_v(BackendKind::Tcp);
    reduce_scatter_v(BackendKind::Tcp);
    all_to_all_v(BackendKind::Tcp);
}

fn counts_error(e: CommError) -> (String, &'static str, Option<usize>, u64) {
    let s = e.to_string();
    match e {
        CommError::Counts {
            field,
            index,
            value,
            ..
        } => (s, field, index, value),
        other => panic!("not a Counts error: {other}"),
    }
}

/// Local argument errors: nothing is sent, nothing panics, each error
/// names the field, the index and the value, and the communicator stays
/// usable.
#[test]
fn bad_counts_and_displacements_name_field_index_and_value() {
    let comms = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    let c = &comms[0];
    let mut recv = [0i32; 4];

    let (s, field, index, value) =
        counts_error(c.all_gather_v(&[1, 2], &mut recv, &[2], &[0]).unwrap_err());
    assert_eq!((field, index, value), ("recv_counts", None, 1));
    assert_eq!(
        s,
        "AllGatherV: recv_counts has 1 entries; pass one entry per rank (2)"
    );

    let (s, field, index, value) = counts_error(
        c.all_gather_v(&[1, 2], &mut recv, &[2, 2], &[0, 3])
            .unwrap_err(),
    );
    assert_eq!((field, index, value), ("recv_displs", Some(1), 3));
    assert_eq!(
        s,
        "AllGatherV: recv_displs[1] = 3; block 1 of 2 elements would end at element 5 but the receive buffer has 4"
    );

    // A displacement near u64::MAX: checked, not wrapped.
    let (_, field, index, value) = counts_error(
        c.all_gather_v(&[1, 2], &mut recv, &[2, 2], &[0, u64::MAX])
            .unwrap_err(),
    );
    assert_eq!((field, index, value), ("recv_displs", Some(1), u64::MAX));

    let (s, field, index, value) = counts_error(
        c.all_gather_v(&[1, 2], &mut recv, &[2, 2], &[0, 1])
            .unwrap_err(),
    );
    assert_eq!((field, index, value), ("recv_displs", Some(1), 1));
    assert!(s.contains("overlaps block 0 (elements 0..2)"), "{s}");

    let (s, field, index, value) = counts_error(
        c.all_gather_v(&[1, 2, 3], &mut recv, &[2, 2], &[0, 2])
            .unwrap_err(),
    );
    assert_eq!((field, index, value), ("recv_counts", Some(0), 2));
    assert!(s.contains("sends 3 elements"), "{s}");

    let (s, field, index, value) = counts_error(
        c.reduce_scatter_v(&[1.0f32; 4], &[1, 100], &[0, 0], &mut [0.0], ReduceOp::Sum)
            .unwrap_err(),
    );
    assert_eq!((field, index, value), ("send_counts", Some(1), 100));
    assert_eq!(
        s,
        "ReduceScatterV: send_counts[1] = 100; the send buffer has only 4 elements"
    );

    let (_, field, index, value) = counts_error(
        c.all_to_all_v(&[1u8; 3], &[1, 2], &[0, 1], &mut [0u8; 2], &[1, 1], &[0])
            .unwrap_err(),
    );
    assert_eq!((field, index, value), ("recv_displs", None, 1));
    // None of these calls took a turn (HCCL_E_PARA, nothing sent): the
    // communicator is usable.
    assert!(c.async_error().is_none());
    let out = hccl_conformance::on_comms(comms, |c| {
        let mut recv = [0i32; 2];
        c.all_gather_v(&[c.rank() as i32 + 1], &mut recv, &[1, 1], &[0, 1])
            .map(|()| recv)
    });
    for r in out {
        assert_eq!(r.unwrap(), [1, 2]);
    }
}

/// AllToAllV counts that disagree across ranks (rank 0 sends rank 1 two
/// elements, rank 1 expects one) are a mismatch on every rank, in the same
/// words (`HCCL_E_REMOTE`), and leave the communicator unusable, as
/// AllGatherV's counts that differ, on both backends.
fn all_to_all_v_counts_that_disagree(backend: BackendKind) {
    let out = on_threads(backend, 2, |c| {
        let (sc, rc): ([u64; 2], [u64; 2]) = if c.rank() == 0 {
            ([1, 2], [1, 1])
        } else {
            ([1, 1], [1, 1])
        };
        let send = [0u16; 3];
        let mut recv = [0u16; 2];
        let e = c
            .all_to_all_v(
                &send[..(sc[0] + sc[1]) as usize],
                &sc,
                &[0, sc[0]],
                &mut recv,
                &rc,
                &[0, 1],
            )
            .unwrap_err();
        let mismatch = matches!(e, CommError::Mismatch(_));
        let next = c.all_reduce(&[1i32], &mut [0], ReduceOp::Sum).unwrap_err();
        (mismatch, e.hccl_result(), e.to_string(), next.hccl_result())
    });
    assert_eq!(
        out[0].2, out[1].2,
        "{backend:?}: the same words on every rank"
    );
    for (r, (mismatch, code, s, next)) in out.iter().enumerate() {
        assert!(*mismatch, "{backend:?} rank {r}: {s}");
        assert_eq!(*code, 21, "{backend:?} rank {r}: HCCL_E_REMOTE: {s}");
        assert_eq!(*next, 4, "{backend:?} rank {r}: unusable after");
    }
    // The counts' AllGather is op #0, the AllToAllV op #1.
    assert_eq!(
        out[0].2,
        "comm 'world' AllToAllV #1: per-rank counts mismatch, recv_counts[0] = 1 on rank 1, but rank 0 sends it 2 elements (its send_counts[1]); every rank's send_counts[j] must equal rank j's recv_counts[i]",
        "{backend:?}"
    );
}

#[test]
fn all_to_all_v_counts_that_disagree_are_a_mismatch_on_every_rank_on_sim() {
    all_to_all_v_counts_that_disagree(BackendKind::Sim);
}

#[test]
fn all_to_all_v_counts_that_disagree_are_a_mismatch_on_every_rank_on_tcp() {
    all_to_all_v_counts_that_disagree(BackendKind::Tcp);
}

//! Device buffers on the portable backends: on the simulator and on TCP
//! a `DeviceBuffer` is host memory the buffer owns, so a program written
//! for NPUs runs unchanged. Every conformance case with its buffers in
//! device buffers, the typed calls ([`hccl_conformance::device`]), and
//! the errors: another rank's buffer, a copy of the wrong length, a
//! mismatch that must leave the receive buffer as it was.

use std::sync::Arc;

use hccl::comm::{BackendKind, ReduceOp};
use hccl::{Comm, CommError, DeviceBuffer};
use hccl_conformance::{on_comms, on_threads, run_all_in, Memory};

#[test]
fn every_conformance_case_runs_on_device_buffers_on_sim_and_tcp() {
    for (backend, world) in [
        (BackendKind::Sim, 2),
        (BackendKind::Sim, 3),
        (BackendKind::Tcp, 3),
    ] {
        let fails = on_threads(backend, world, |c| run_all_in(c, Memory::Device));
        for (r, f) in fails.iter().enumerate() {
            assert!(f.is_empty(), "{backend:?}, {world} ranks, rank {r}: {f:#?}");
        }
    }
}

#[test]
fn typed_calls_on_device_buffers_give_the_hand_computed_results() {
    for (backend, world) in [
        (BackendKind::Sim, 2),
        (BackendKind::Sim, 3),
        (BackendKind::Tcp, 2),
        (BackendKind::Tcp, 3),
    ] {
        let fails = on_threads(backend, world, |c| {
            hccl_conformance::device::typed_calls(&c)
        });
        for f in &fails {
            assert!(f.is_empty(), "{backend:?}, {world} ranks: {f:#?}");
        }
    }
}

#[test]
fn a_device_buffer_is_host_memory_of_its_length_and_type_here() {
    let comms = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    let mut b = comms[0].device_buffer::<i64>(3).unwrap();
    assert!(!b.on_npu());
    assert_eq!((b.len(), b.bytes(), b.is_empty()), (3, 24, false));
    assert_eq!(b.dtype(), hccl::comm::DataType::Int64);
    assert_eq!(b.to_vec().unwrap(), vec![0; 3], "zeroed");
    b.copy_from_host(&[1, 2, 3]).unwrap();
    let mut out = [0i64; 3];
    b.copy_to_host(&mut out).unwrap();
    assert_eq!(out, [1, 2, 3]);
    hccl_conformance::drop_together(comms);
}

#[test]
fn a_copy_of_the_wrong_length_names_the_field_and_both_lengths() {
    let comms = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    let mut b = comms[0].device_buffer_from(&[1f32, 2.0, 3.0]).unwrap();
    let e = b.copy_from_host(&[9.0, 9.0]).unwrap_err();
    assert!(matches!(e, CommError::Shape { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "DeviceBuffer<fp32>::copy_from_host: src.len() = 2 but the device buffer holds 3 elements; pass a slice of exactly DeviceBuffer::len() elements"
    );
    let mut out = [7f32; 4];
    let e = b.copy_to_host(&mut out).unwrap_err();
    assert!(e.to_string().contains("dst.len() = 4"), "{e}");
    assert_eq!(out, [7.0; 4], "dst untouched");
    assert_eq!(b.to_vec().unwrap(), vec![1.0, 2.0, 3.0], "buffer untouched");
    hccl_conformance::drop_together(comms);
}

/// Every rank's result of `f(rank, comm, buffers)` where `buffers[r]` are
/// two device buffers (3 f32 each) allocated by `alloc(r)`'s communicator.
fn with_buffers<T: Send + 'static>(
    backend: BackendKind,
    n: u32,
    alloc: impl Fn(u32) -> u32,
    f: impl Fn(u32, &Comm, DeviceBuffer<f32>, DeviceBuffer<f32>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let comms = Comm::init_all_on(backend, n).unwrap();
    let mut bufs: Vec<_> = (0..n)
        .map(|r| {
            let c = &comms[alloc(r) as usize];
            Some((
                c.device_buffer_from(&[1f32; 3]).unwrap(),
                c.device_buffer_from(&[-7f32; 3]).unwrap(),
            ))
        })
        .collect();
    let f = Arc::new(f);
    let with: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(r, c)| (c, bufs[r].take().unwrap()))
        .collect();
    let hs: Vec<_> = with
        .into_iter()
        .map(|(c, (s, o))| {
            let f = Arc::clone(&f);
            std::thread::spawn(move || f(c.rank(), &c, s, o))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn another_ranks_buffer_is_refused_on_its_rank_before_anything_moves() {
    for backend in [BackendKind::Sim, BackendKind::Tcp] {
        // Rank 1 passes rank 0's buffers, then its own; the others their own.
        let out = with_buffers(
            backend,
            3,
            |r| if r == 1 { 0 } else { r },
            |r, c, s, mut o| {
                let refused = (r == 1).then(|| {
                    let e = c.all_reduce(&s, &mut o, ReduceOp::Sum).unwrap_err();
                    (e, o.to_vec().unwrap())
                });
                // The refused call took no turn: this call is the op the
                // others wait in.
                let (s, mut o) = (
                    c.device_buffer_from(&[1f32; 3]).unwrap(),
                    c.device_buffer(3).unwrap(),
                );
                c.all_reduce(&s, &mut o, ReduceOp::Sum).unwrap();
                (refused, o.to_vec().unwrap())
            },
        );
        for (r, (refused, o)) in out.into_iter().enumerate() {
            assert_eq!(o, vec![3.0; 3], "{backend:?} rank {r}");
            let Some((e, untouched)) = refused else {
                continue;
            };
            assert_eq!(
                untouched,
                vec![-7.0; 3],
                "{backend:?}: receive buffer untouched"
            );
            let t = e.to_string();
            assert!(matches!(e, CommError::WrongDevice { .. }), "{e:?}");
            assert_eq!(e.hccl_result(), 1, "HCCL_E_PARA");
            assert!(
                t.starts_with("AllReduce: the send buffer is a device buffer of rank 0 of communicator 'world'"),
                "{t}"
            );
            assert_eq!(
                t.matches("rank 1 of communicator 'world'").count(),
                1,
                "named once: {t}"
            );
        }
    }
}

#[test]
fn another_ranks_buffer_is_refused_in_point_to_point_and_in_place_calls() {
    let out = with_buffers(
        BackendKind::Sim,
        2,
        |r| 1 - r,
        |r, c, s, mut o| {
            let p2p = match r {
                0 => c.send(&s, 1),
                _ => c.recv(&mut o, 0),
            };
            let in_place = c.broadcast(&mut o, 0);
            (p2p.err(), in_place.err(), o.to_vec().unwrap())
        },
    );
    for (r, (p2p, in_place, o)) in out.into_iter().enumerate() {
        let p2p = p2p.expect("refused").to_string();
        let what = if r == 0 {
            "Send: the send buffer"
        } else {
            "Recv: the receive buffer"
        };
        assert!(p2p.starts_with(what), "rank {r}: {p2p}");
        assert!(
            p2p.contains(&format!("of rank {} of", 1 - r)),
            "rank {r}: {p2p}"
        );
        let in_place = in_place.expect("refused").to_string();
        assert!(
            in_place.contains("in-place buffer is a device buffer")
                || in_place.contains("unusable"),
            "rank {r}: {in_place}"
        );
        assert_eq!(o, vec![-7.0; 3], "rank {r}");
    }
}

#[test]
fn a_split_takes_its_parents_buffers_and_a_mismatch_leaves_them_untouched() {
    for backend in [BackendKind::Sim, BackendKind::Tcp] {
        let out = on_threads(backend, 3, |c| {
            let r = c.rank();
            let s = c.device_buffer_from(&[r as f32 + 1.0; 2]).unwrap();
            let mut o = c.device_buffer_from(&[-7f32; 2]).unwrap();
            let sub = c.split(Some(0), r).unwrap().unwrap();
            sub.all_reduce(&s, &mut o, ReduceOp::Sum).unwrap();
            let reduced = o.to_vec().unwrap();
            // Counts differ across ranks: every rank fails, nothing written.
            let n = 2 + r as usize;
            let s = c.device_buffer_from(&vec![1f32; n]).unwrap();
            let mut o = c.device_buffer_from(&vec![-7f32; n]).unwrap();
            let e = c.all_reduce(&s, &mut o, ReduceOp::Sum).unwrap_err();
            drop(sub);
            (reduced, e, o.to_vec().unwrap())
        });
        for (r, (reduced, e, o)) in out.into_iter().enumerate() {
            assert_eq!(reduced, vec![6.0; 2], "{backend:?} rank {r}");
            assert!(
                matches!(e, CommError::Mismatch(_)),
                "{backend:?} rank {r}: {e:?}"
            );
            assert!(e.to_string().contains("count mismatch"), "{e}");
            assert!(o.iter().all(|&x| x == -7.0), "{backend:?} rank {r}: {o:?}");
        }
    }
}

#[test]
fn the_same_device_program_runs_on_every_backend_here() {
    let program = |c: Comm| {
        let r = c.rank() as f32;
        let s = c.device_buffer_from(&[r, 2.0 * r]).unwrap();
        let mut o = c.device_buffer::<f32>(4).unwrap();
        c.all_gather(&s, &mut o).unwrap();
        o.to_vec().unwrap()
    };
    let sim = on_threads(BackendKind::Sim, 2, program);
    let tcp = on_comms(Comm::init_all_on(BackendKind::Tcp, 2).unwrap(), program);
    assert_eq!(sim, tcp);
    assert_eq!(sim[0], vec![0.0, 0.0, 1.0, 2.0]);
}

//! The flight recorder on both backends, in one process (ranks as
//! threads): every op is recorded, the first failed op writes a dump per
//! rank holding the failed op's record, and `Comm::flight_record` gives
//! the ring on demand. Its own test binary: the `HCCL_FLIGHT_RECORDER_*`
//! and `HCCL_EXEC_TIMEOUT` variables are process-wide and read when a
//! communicator is made.

use std::path::PathBuf;

use hccl::comm::{BackendKind, ReduceOp};
use hccl::flight::{self, DumpReason, ErrorKind, OpState};
use hccl::Comm;

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hccl-flight-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs `f(rank, comm)` on every rank of a fresh 2-rank communicator.
fn on_ranks<R: Send>(backend: BackendKind, f: impl Fn(u32, &Comm) -> R + Sync) -> Vec<R> {
    let comms = Comm::init_all_on(backend, 2).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(c.rank(), c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn a_mismatch_dumps_every_rank_with_the_failed_op_on_both_backends() {
    std::env::set_var("HCCL_EXEC_TIMEOUT", "5");
    for backend in [BackendKind::Tcp, BackendKind::Sim] {
        let d = dir(&format!("{backend:?}"));
        std::env::set_var(flight::ENV_DIR, &d);
        std::env::remove_var(flight::ENV_ENTRIES);
        let on_demand = on_ranks(backend, |r, c| {
            let send = vec![1f32; 4];
            let mut recv = vec![0f32; 4];
            c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
            let ring = c.flight_record().expect("the recorder is on by default");
            // Rank 1 calls the second op with another count.
            let n = if r == 1 { 5 } else { 4 };
            let send = vec![1f32; n];
            let mut recv = vec![0f32; n];
            assert!(c.all_reduce(&send, &mut recv, ReduceOp::Sum).is_err());
            ring
        });
        let first = &on_demand[0];
        assert_eq!(first.header.reason, DumpReason::OnDemand);
        assert_eq!(first.ops.len(), 1, "{backend:?}");
        assert_eq!(first.ops[0].state, OpState::Done);
        assert_eq!(first.ops[0].kind, "AllReduce");
        assert_eq!((first.ops[0].count, first.ops[0].bytes), (4, 16));

        let dumps = flight::read_dumps(&d).unwrap();
        assert_eq!(dumps.len(), 2, "{backend:?}: {dumps:?}");
        for (r, dump) in dumps.iter().enumerate() {
            let h = &dump.header;
            assert_eq!((h.comm.as_str(), h.rank, h.size), ("world", r as u32, 2));
            assert_eq!(h.reason, DumpReason::Mismatch, "{backend:?} rank {r}");
            let last = dump.ops.last().unwrap();
            assert_eq!(last.seq, Some(1));
            assert_eq!(last.state, OpState::Failed, "{backend:?} rank {r}");
            assert_eq!(last.count, if r == 1 { 5 } else { 4 });
            let e = last.error.as_ref().unwrap();
            assert_eq!(
                e.kind,
                ErrorKind::Mismatch,
                "{backend:?} rank {r}: {}",
                e.text
            );
            assert!(e.text.contains("count mismatch"), "{}", e.text);
        }
        let _ = std::fs::remove_dir_all(&d);
    }
    // HCCL_FLIGHT_RECORDER_ENTRIES=0 turns it off (in this one test: the
    // variables are process-wide).
    std::env::set_var(flight::ENV_ENTRIES, "0");
    let rings = on_ranks(BackendKind::Sim, |_, c| c.flight_record().is_none());
    std::env::remove_var(flight::ENV_ENTRIES);
    assert_eq!(rings, [true, true]);
}

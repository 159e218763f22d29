//! Argument errors a rank finds from its own call alone (a root out of
//! range, a buffer of the wrong size, a V call's lists of the wrong length
//! or blocks outside their buffer, a peer out of range, the wrong world
//! size) are `HCCL_E_PARA` before anything moves, and leave the
//! communicator usable: after each, with every rank making the same bad
//! call, the next good op succeeds on every rank, on the simulator and on
//! TCP (HCCL's `HCCL_E_PARA` returns, NCCL's `ncclInvalidArgument`).

use hccl::comm::{BackendKind, ReduceOp};
use hccl::{Comm, CommError};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::DataType;
use hccl_conformance::on_threads;

const WORLD: u32 = 2;

/// A bad call every rank makes: its name and the call.
type Bad = (&'static str, fn(&Comm) -> Result<(), CommError>);

fn bad_calls() -> Vec<Bad> {
    vec![
        ("broadcast root = size", |c| {
            c.broadcast(&mut [1.0f32; 4], WORLD)
        }),
        ("reduce root = 99", |c| {
            c.reduce(&[1.0f32; 4], &mut [0.0; 4], ReduceOp::Sum, 99)
        }),
        ("scatter root = 5", |c| {
            c.scatter(&[1.0f32; 8], &mut [0.0; 4], 5)
        }),
        ("gather root = size", |c| {
            c.gather(&[1.0f32; 4], &mut [0.0; 8], WORLD)
        }),
        ("all_reduce receive buffer larger", |c| {
            c.all_reduce(&[1.0f32; 4], &mut [0.0; 8], ReduceOp::Sum)
        }),
        ("all_reduce receive buffer smaller", |c| {
            c.all_reduce(&[1.0f32; 4], &mut [0.0; 2], ReduceOp::Sum)
        }),
        ("all_gather receive buffer too small", |c| {
            c.all_gather(&[1.0f32; 4], &mut [0.0; 5])
        }),
        ("reduce_scatter send 5, receive 2", |c| {
            c.reduce_scatter(&[1.0f32; 5], &mut [0.0; 2], ReduceOp::Sum)
        }),
        ("all_to_all 5 elements on 2 ranks", |c| {
            c.all_to_all(&[1.0f32; 5], &mut [0.0; 5])
        }),
        ("all_gather_in_place 5 elements on 2 ranks", |c| {
            c.all_gather_in_place(&mut [1.0f32; 5])
        }),
        ("all_gather_v recv_counts of 1 entry", |c| {
            c.all_gather_v(&[1.0f32; 2], &mut [0.0; 4], &[2], &[0])
        }),
        ("all_gather_v recv_displs of 3 entries", |c| {
            c.all_gather_v(&[1.0f32; 2], &mut [0.0; 4], &[2, 2], &[0, 2, 4])
        }),
        ("all_gather_v block past the buffer", |c| {
            c.all_gather_v(&[1.0f32; 2], &mut [0.0; 4], &[2, 2], &[0, 100])
        }),
        ("all_gather_v own count not the send length", |c| {
            c.all_gather_v(&[1.0f32; 3], &mut [0.0; 4], &[2, 2], &[0, 2])
        }),
        ("all_gather_v overlapping receive blocks", |c| {
            c.all_gather_v(&[1.0f32; 2], &mut [0.0; 4], &[2, 2], &[0, 1])
        }),
        ("reduce_scatter_v send_counts of 3 entries", |c| {
            c.reduce_scatter_v(
                &[1.0f32; 4],
                &[2, 1, 1],
                &[0, 2, 3],
                &mut [0.0; 2],
                ReduceOp::Sum,
            )
        }),
        ("reduce_scatter_v receive buffer too small", |c| {
            c.reduce_scatter_v(&[1.0f32; 4], &[2, 2], &[0, 2], &mut [0.0; 1], ReduceOp::Sum)
        }),
        ("all_to_all_v recv_displs of 1 entry", |c| {
            c.all_to_all_v(&[1.0f32; 4], &[2, 2], &[0, 2], &mut [0.0; 4], &[2, 2], &[0])
        }),
        ("all_to_all_v send count past the buffer", |c| {
            c.all_to_all_v(
                &[1.0f32; 4],
                &[2, 20],
                &[0, 2],
                &mut [0.0; 4],
                &[2, 2],
                &[0, 2],
            )
        }),
        ("collective with args.world_size 3", |c| {
            let args = CollectiveArgs::new(CollectiveKind::AllReduce, 1, DataType::Int32, 3);
            c.collective(&args, &[0; 4], &mut [0; 4])
        }),
        ("collective_in_place with a buffer too small", |c| {
            let args = CollectiveArgs::new(CollectiveKind::AllReduce, 4, DataType::Int32, WORLD);
            c.collective_in_place(&args, &mut [0; 15])
        }),
        ("collective_async with a send buffer too large", |c| {
            let args = CollectiveArgs::new(CollectiveKind::AllReduce, 1, DataType::Int32, WORLD);
            c.collective_async(args, vec![0; 8]).wait().map(drop)
        }),
        ("collective_async broadcast root = size", |c| {
            let args = CollectiveArgs::new(CollectiveKind::Broadcast, 1, DataType::Int32, WORLD)
                .with_root(WORLD);
            c.collective_async(args, vec![0; 4]).wait().map(drop)
        }),
        ("send to itself", |c| c.send(&[1.0f32; 4], c.rank())),
        ("recv from rank 7", |c| c.recv(&mut [0.0f32; 4], 7)),
    ]
}

/// Every bad call of [`bad_calls`] on every rank, each followed by a good
/// AllReduce: the bad call fails with `HCCL_E_PARA`, the AllReduce sums.
fn bad_calls_leave_the_communicator_usable(backend: BackendKind) {
    let out = on_threads(backend, WORLD, |c| {
        let mut failures = Vec::new();
        for (name, bad) in bad_calls() {
            match bad(&c) {
                Ok(()) => failures.push(format!("{name}: succeeded")),
                Err(e) if e.hccl_result() != 1 => {
                    failures.push(format!("{name}: code {}: {e}", e.hccl_result()))
                }
                Err(_) => {}
            }
            let mut recv = [0.0f32; 4];
            match c.all_reduce(&[1.0f32; 4], &mut recv, ReduceOp::Sum) {
                Ok(()) if recv == [WORLD as f32; 4] => {}
                Ok(()) => failures.push(format!("{name}: then all_reduce gave {recv:?}")),
                Err(e) => failures.push(format!("{name}: then all_reduce failed: {e}")),
            }
        }
        if let Some(e) = c.async_error() {
            failures.push(format!("async_error: {e}"));
        }
        failures
    });
    for (r, failures) in out.into_iter().enumerate() {
        assert!(failures.is_empty(), "{backend:?} rank {r}: {failures:#?}");
    }
}

#[test]
fn local_argument_errors_leave_the_communicator_usable_on_sim() {
    bad_calls_leave_the_communicator_usable(BackendKind::Sim);
}

#[test]
fn local_argument_errors_leave_the_communicator_usable_on_tcp() {
    bad_calls_leave_the_communicator_usable(BackendKind::Tcp);
}

//! Shared helpers of the conformance suite: the case list, running a case
//! on one rank of a [`Comm`] and checking its bytes against
//! `hccl_algos::reference`.
//!
//! The same cases run on TCP (ranks as processes of the `conformance_rank`
//! binary, see `tests/tcp.rs`) and on the simulator (ranks as threads of
//! `Comm::init_all` with `HCCL_BACKEND=sim`, see `tests/sim.rs`).

use hccl::comm::{DataType, ReduceOp};
use hccl::{Comm, CommError};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::reference::{reference, verifiable_inputs};

/// One conformance case: a collective call every rank makes.
#[derive(Clone, Debug)]
pub struct Case {
    /// The arguments (world size filled in by [`cases`]).
    pub args: CollectiveArgs,
}

impl Case {
    /// A short printable name.
    pub fn name(&self) -> String {
        let a = &self.args;
        format!(
            "{:?}/{}/{}/n{}/root{}{}",
            a.kind,
            a.dtype,
            a.op,
            a.count,
            a.root,
            if a.in_place { "/inplace" } else { "" }
        )
    }
}

/// Every case for `world` ranks: each collective (uneven and zero counts,
/// several dtypes and ops, every in-place form HCCL has, a non-zero root).
pub fn cases(world: u32) -> Vec<Case> {
    use CollectiveKind as K;
    let mut out = Vec::new();
    let mut add = |kind, count, dtype, op, root: u32, in_place| {
        let args = CollectiveArgs::new(kind, count, dtype, world)
            .with_op(op)
            .with_root(root % world)
            .with_in_place(in_place);
        out.push(Case { args });
    };
    let last = world - 1;
    for &(count, dtype) in &[
        (0u64, DataType::Fp32),
        (1, DataType::Int32),
        (13, DataType::Fp32),
        (1001, DataType::Bf16),
    ] {
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            add(K::AllReduce, count, dtype, op, 0, false);
        }
        add(K::ReduceScatter, count, dtype, ReduceOp::Sum, 0, false);
        add(K::AllGather, count, dtype, ReduceOp::Sum, 0, false);
        add(K::Broadcast, count, dtype, ReduceOp::Sum, last, true);
        add(K::Reduce, count, dtype, ReduceOp::Sum, last, false);
        add(K::Scatter, count, dtype, ReduceOp::Sum, last, false);
        add(K::Gather, count, dtype, ReduceOp::Sum, 0, false);
        add(K::AllToAll, count, dtype, ReduceOp::Sum, 0, false);
    }
    for &(count, dtype) in &[
        (7u64, DataType::Int8),
        (300_000, DataType::Fp32),
        (5, DataType::Fp16),
        (9, DataType::Uint64),
    ] {
        add(K::AllReduce, count, dtype, ReduceOp::Sum, 0, true);
        add(K::ReduceScatter, count, dtype, ReduceOp::Sum, 0, true);
        add(K::AllGather, count, dtype, ReduceOp::Sum, 0, true);
        add(K::Reduce, count, dtype, ReduceOp::Prod, 0, true);
    }
    add(K::AllReduce, 1000, DataType::Fp64, ReduceOp::Avg, 0, false);
    add(K::AllReduce, 1000, DataType::Int64, ReduceOp::Min, 0, false);
    add(K::Barrier, 0, DataType::Uint8, ReduceOp::Sum, 0, false);
    out
}

/// Runs `case` on this rank of `comm` (inputs from seed `seed`) and checks
/// the output against the reference, byte for byte.
///
/// # Errors
/// The communicator's error, or a description of the first wrong byte.
pub fn run_case(comm: &Comm, case: &Case, seed: u64) -> Result<(), String> {
    let a = &case.args;
    let r = comm.rank();
    let inputs = verifiable_inputs(a, seed);
    let want = reference(a, &inputs).map_err(|e| format!("reference: {e}"))?;
    let want = &want[r as usize];
    let input = &inputs[r as usize];
    let (_, outb) = a.io_bytes(r);
    let got = match a.alias(r) {
        Some(al) => {
            let len = (al.input_at + input.len() as u64).max(al.output_at + outb) as usize;
            let mut buf = vec![0u8; len];
            buf[al.input_at as usize..al.input_at as usize + input.len()].copy_from_slice(input);
            comm.collective_in_place(a, &mut buf)
                .map_err(|e: CommError| e.to_string())?;
            buf[al.output_at as usize..(al.output_at + outb) as usize].to_vec()
        }
        None => {
            let mut out = vec![0u8; outb as usize];
            comm.collective(&a.clone().with_in_place(false), input, &mut out)
                .map_err(|e| e.to_string())?;
            out
        }
    };
    if &got != want {
        let i = got
            .iter()
            .zip(want)
            .position(|(x, y)| x != y)
            .unwrap_or(got.len().min(want.len()));
        return Err(format!(
            "rank {r}: {} bytes, expected {}; first difference at byte {i}",
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

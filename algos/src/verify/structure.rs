//! Structure: one schedule per rank, buffer sizes, dependencies, regions,
//! peers, reduce ops and element alignment.

use super::VerifyError;
use crate::collective::CollectiveArgs;
use crate::dtype::ReduceOp;
use crate::schedule::{BufKind, Op, Rank, RankSchedule, Region, StepId};

pub(super) fn buf_size(s: &RankSchedule, b: BufKind) -> u64 {
    match b {
        BufKind::Input => s.buffers.input,
        BufKind::Output => s.buffers.output,
        BufKind::Scratch => s.buffers.scratch,
    }
}

/// Regions an op reads and writes.
#[cfg(test)]
pub(crate) fn accesses_of(op: &Op) -> (Vec<Region>, Vec<Region>) {
    accesses(op)
}

pub(super) fn accesses(op: &Op) -> (Vec<Region>, Vec<Region>) {
    match *op {
        Op::Send { src, .. } => (vec![src], vec![]),
        Op::Recv { dst, .. } => (vec![], vec![dst]),
        Op::RecvReduce { local, dst, .. } => (vec![local], vec![dst]),
        Op::Copy { src, dst } => (vec![src], vec![dst]),
        Op::LocalReduce { src, dst, .. } => (vec![src, dst], vec![dst]),
        Op::Divide { dst, .. } => (vec![dst], vec![dst]),
    }
}

pub(super) fn check_structure(
    args: &CollectiveArgs,
    scheds: &[RankSchedule],
) -> Result<(), VerifyError> {
    let world = args.world_size;
    if scheds.len() != world as usize || scheds.iter().enumerate().any(|(i, s)| s.rank != i as Rank)
    {
        let index = scheds
            .iter()
            .enumerate()
            .find(|(i, s)| s.rank != *i as Rank)
            .map_or(scheds.len().min(world as usize), |(i, _)| i);
        return Err(VerifyError::RankCount {
            got: scheds.len(),
            world,
            index,
        });
    }
    let esz = args.dtype.size();
    let want_op = if args.op == ReduceOp::Avg {
        ReduceOp::Sum
    } else {
        args.op
    };
    for s in scheds {
        let rank = s.rank;
        let (inb, outb) = args.io_bytes(rank);
        for (buf, got, expected) in [
            (BufKind::Input, s.buffers.input, inb),
            (BufKind::Output, s.buffers.output, outb),
        ] {
            if got != expected {
                return Err(VerifyError::BufferSize {
                    rank,
                    buf,
                    got,
                    expected,
                });
            }
        }
        for (i, step) in s.steps.iter().enumerate() {
            let step_id = i as StepId;
            let bad = |what: String| VerifyError::BadStep {
                rank,
                step: step_id,
                what,
            };
            if let Some(&dep) = step.deps.ids().iter().find(|&&d| d >= step_id) {
                return Err(VerifyError::BadDep {
                    rank,
                    step: step_id,
                    dep,
                });
            }
            if let Some(peer) = step.op.peer() {
                if peer >= world || peer == rank {
                    return Err(VerifyError::BadPeer {
                        rank,
                        step: step_id,
                        peer,
                        world,
                    });
                }
            }
            let (reads, writes) = accesses(&step.op);
            for r in reads.iter().chain(&writes) {
                let size = buf_size(s, r.buf);
                if r.offset.checked_add(r.len).is_none_or(|e| e > size) {
                    return Err(VerifyError::OutOfBounds {
                        rank,
                        step: step_id,
                        region: *r,
                        size,
                    });
                }
            }
            let same_len = |a: Region, b: Region, what: &str| {
                if a.len != b.len {
                    Err(bad(format!("{what}: {a} and {b} differ in length")))
                } else {
                    Ok(())
                }
            };
            let reduce_checks = |op: ReduceOp, regions: &[Region]| -> Result<(), VerifyError> {
                if !args.kind.is_reduction() {
                    return Err(bad(format!(
                        "reduction ({op}) in {}, which moves data only",
                        args.kind
                    )));
                }
                if op != want_op {
                    return Err(bad(format!(
                        "reduce op {op}, the collective needs {want_op}"
                    )));
                }
                if let Some(r) = regions
                    .iter()
                    .find(|r| r.offset % esz != 0 || r.len % esz != 0)
                {
                    return Err(bad(format!(
                        "region {r} is not aligned to {esz}-byte elements"
                    )));
                }
                Ok(())
            };
            match step.op {
                Op::RecvReduce { local, dst, op, .. } => {
                    same_len(local, dst, "recv-reduce")?;
                    reduce_checks(op, &[local, dst])?;
                }
                Op::LocalReduce { src, dst, op } => {
                    same_len(src, dst, "local reduce")?;
                    reduce_checks(op, &[src, dst])?;
                }
                Op::Copy { src, dst } => same_len(src, dst, "copy")?,
                Op::Divide { dst, divisor } => {
                    if args.op != ReduceOp::Avg || !args.kind.is_reduction() {
                        return Err(bad(format!("divide of {dst}, but the op is not avg")));
                    }
                    if divisor != world {
                        return Err(bad(format!(
                            "divide by {divisor}, avg divides by world size {world}"
                        )));
                    }
                    reduce_checks(want_op, &[dst])?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

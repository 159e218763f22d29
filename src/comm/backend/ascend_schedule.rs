//! Schedule mode of the Ascend backend (`HCCL_ASCEND_MODE=schedule`, and
//! native mode's calls HCCL lacks): the facade's plan for this rank, the
//! one the simulator and TCP run, executed over HCCL's point-to-point
//! calls.
//!
//! **How.** The plan's three buffers (input, output, scratch) live in host
//! memory, placed as the call's in-place alias says. HCCL's batch call
//! completes only when all its items have, matches a pair's messages in
//! call order (not by tag) and takes one send to and one receive from
//! each peer per batch; so the messages are put into *rounds* that every
//! rank computes alike from every rank's plan (each rank plans all ranks,
//! the same call the facade makes): a symbolic run of all plans in which
//! a round takes, in rank and step order, each message whose send and
//! receive are both ready, at most one per ordered pair. Every message of
//! round k is then ready on both sides once rounds before k are done, so
//! each batch completes and no rank waits for another's later round. A
//! rank runs its local steps (`Copy`, `LocalReduce`, `Divide`, and the
//! reduction of a `RecvReduce`, with `hccl_algos::kernels`) on the host
//! as soon as they are ready, and each of its non-empty rounds as one
//! `HcclBatchSendRecv`, staged through one device buffer (sends copied in
//! before, receives copied out after). Messages of 0 bytes travel as 1
//! byte, so that they still order the ranks (a Barrier).
//!
//! **Cost.** Every message crosses PCIe twice more than in native mode
//! and every wave is a stream synchronisation: this mode is for running a
//! verified hccl-rs algorithm on the hardware unchanged, not for speed.

use std::collections::BTreeMap;

use hccl_algos::collective::CollectiveArgs;
use hccl_algos::kernels;
use hccl_algos::schedule::{BufKind, Op, Region, Step};
use hccl_algos::select::PlannedOp;
use hccl_algos::DataType;
use hccl_ascend_sys::types::{HCCL_DATA_TYPE_UINT8, HCCL_RECV, HCCL_SEND};

use super::ascend::{align, err, AscendBackend};
use crate::comm::run::UserBufs;
use crate::comm::CommError;

/// The plan's memory on the host: the user's (input and output placed as
/// the call places them) and scratch.
struct Mem {
    user: Vec<u8>,
    input_at: usize,
    output_at: usize,
    input_len: usize,
    output_len: usize,
    scratch: Vec<u8>,
}

impl Mem {
    /// The bytes of `r`, or an error naming the region.
    fn get(&mut self, op: &str, r: Region) -> Result<&mut [u8], CommError> {
        let (base, limit, buf) = match r.buf {
            BufKind::Input => (self.input_at, self.input_len, &mut self.user),
            BufKind::Output => (self.output_at, self.output_len, &mut self.user),
            BufKind::Scratch => (0, self.scratch.len(), &mut self.scratch),
        };
        let (off, len) = (r.offset as usize, r.len as usize);
        if off.checked_add(len).is_none_or(|end| end > limit) {
            return Err(CommError::Shape {
                op: op.to_string(),
                detail: format!(
                    "schedule mode: region {:?} [{off}, +{len}) leaves its buffer of {limit} bytes",
                    r.buf
                ),
            });
        }
        Ok(&mut buf[base + off..base + off + len])
    }

    fn read(&mut self, op: &str, r: Region) -> Result<Vec<u8>, CommError> {
        Ok(self.get(op, r)?.to_vec())
    }
}

/// `(peer, tag, is_send)` of a communication step.
fn comm_of(op: &Op) -> Option<(u32, u32, bool)> {
    match *op {
        Op::Send { peer, tag, .. } => Some((peer, tag, true)),
        Op::Recv { peer, tag, .. } | Op::RecvReduce { peer, tag, .. } => Some((peer, tag, false)),
        _ => None,
    }
}

/// Runs `planned` (this rank's plan of `args`) on the user's buffers;
/// `plans` gives every rank's plan (for the rounds).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    b: &mut AscendBackend,
    op: &str,
    args: &CollectiveArgs,
    plans: Vec<PlannedOp>,
    user: UserBufs<'_>,
    rank: u32,
) -> Result<(), CommError> {
    let (inb, outb) = args.io_bytes(rank);
    let (inb, outb) = (inb as usize, outb as usize);
    let scratch = plans
        .get(rank as usize)
        .map_or(0, |p| p.sizes.scratch as usize);
    let mut mem = match &user {
        UserBufs::Separate(i, _) => {
            let mut u = i.to_vec();
            u.resize(inb + outb, 0);
            Mem {
                user: u,
                input_at: 0,
                output_at: inb,
                input_len: inb,
                output_len: outb,
                scratch: vec![0; scratch],
            }
        }
        UserBufs::InPlace(buf) => {
            let a = args.alias(rank);
            Mem {
                user: buf.to_vec(),
                input_at: a.map_or(0, |a| a.input_at as usize),
                output_at: a.map_or(0, |a| a.output_at as usize),
                input_len: inb,
                output_len: outb,
                scratch: vec![0; scratch],
            }
        }
    };
    let all: Vec<Vec<Step>> = plans.into_iter().map(|p| p.plan.collect()).collect();
    let mut rounds = rounds(&all).map_err(|detail| CommError::Shape {
        op: op.to_string(),
        detail: format!("schedule mode: {detail}"),
    })?;
    let mine = std::mem::take(&mut rounds[rank as usize]);
    execute(b, op, args.dtype, &all[rank as usize], &mine, &mut mem)?;
    // Only a finished op writes the user's output.
    match user {
        UserBufs::Separate(_, o) => {
            o.copy_from_slice(&mem.user[mem.output_at..mem.output_at + outb])
        }
        UserBufs::InPlace(buf) => buf.copy_from_slice(&mem.user),
    }
    Ok(())
}

/// Whether step `i` of `steps` may run, with `done` the finished steps.
fn ready(steps: &[Step], i: usize, done: &[bool]) -> bool {
    let d = &steps[i].deps;
    (!d.all_before || done[..i].iter().all(|x| *x)) && d.ids().iter().all(|&j| done[j as usize])
}

/// Marks every ready local step of `steps` done, until none is ready.
fn local_fixpoint(
    steps: &[Step],
    done: &mut [bool],
    mut run: impl FnMut(usize) -> Result<(), CommError>,
) -> Result<(), CommError> {
    let mut ran = true;
    while ran {
        ran = false;
        for i in 0..steps.len() {
            if !done[i] && comm_of(&steps[i].op).is_none() && ready(steps, i, done) {
                run(i)?;
                done[i] = true;
                ran = true;
            }
        }
    }
    Ok(())
}

/// The rounds of every rank (see the module docs): `rounds[r][k]` are the
/// communication steps of rank `r` in round `k` (empty where `r` has none).
fn rounds(plans: &[Vec<Step>]) -> Result<Vec<Vec<Vec<usize>>>, String> {
    let n = plans.len();
    let mut done: Vec<Vec<bool>> = plans.iter().map(|p| vec![false; p.len()]).collect();
    // The receive step of each message: (sender, receiver, tag) -> step.
    let mut recv_of: BTreeMap<(u32, u32, u32), usize> = BTreeMap::new();
    for (r, p) in plans.iter().enumerate() {
        for (i, s) in p.iter().enumerate() {
            if let Some((peer, tag, false)) = comm_of(&s.op) {
                recv_of.insert((peer, r as u32, tag), i);
            }
        }
    }
    let mut out: Vec<Vec<Vec<usize>>> = vec![Vec::new(); n];
    loop {
        for (r, p) in plans.iter().enumerate() {
            local_fixpoint(p, &mut done[r], |_| Ok(())).map_err(|e| e.to_string())?;
        }
        if done.iter().all(|d| d.iter().all(|x| *x)) {
            return Ok(out);
        }
        let mut round: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut used: Vec<(u32, u32)> = Vec::new();
        for (s, p) in plans.iter().enumerate() {
            for i in 0..p.len() {
                let Some((d, tag, true)) = comm_of(&p[i].op) else {
                    continue;
                };
                if done[s][i] || !ready(p, i, &done[s]) || used.contains(&(s as u32, d)) {
                    continue;
                }
                let Some(&j) = recv_of.get(&(s as u32, d, tag)) else {
                    return Err(format!(
                        "rank {s}'s send to rank {d} (tag {tag}) has no receive"
                    ));
                };
                let dp = plans
                    .get(d as usize)
                    .ok_or(format!("rank {s} sends to rank {d}, not a rank"))?;
                if done[d as usize][j] || !ready(dp, j, &done[d as usize]) {
                    continue;
                }
                used.push((s as u32, d));
                round[s].push(i);
                round[d as usize].push(j);
            }
        }
        if round.iter().all(Vec::is_empty) {
            let stuck: Vec<String> = (0..n)
                .filter_map(|r| {
                    done[r]
                        .iter()
                        .position(|x| !x)
                        .map(|i| format!("rank {r} step {i}"))
                })
                .collect();
            return Err(format!(
                "the plans cannot go on (deadlock at {})",
                stuck.join(", ")
            ));
        }
        for (r, steps) in round.iter().enumerate() {
            for &i in steps {
                done[r][i] = true;
            }
        }
        for (r, steps) in round.into_iter().enumerate() {
            out[r].push(steps);
        }
    }
}

/// This rank's run: ready local steps on the host, then each non-empty
/// round as one batch.
fn execute(
    b: &mut AscendBackend,
    op: &str,
    dtype: DataType,
    steps: &[Step],
    rounds: &[Vec<usize>],
    mem: &mut Mem,
) -> Result<(), CommError> {
    let mut done = vec![false; steps.len()];
    let kernel = |e: kernels::KernelError| CommError::Shape {
        op: op.to_string(),
        detail: e.to_string(),
    };
    let local = |i: usize, mem: &mut Mem| -> Result<(), CommError> {
        match steps[i].op {
            Op::Copy { src, dst } => {
                let v = mem.read(op, src)?;
                mem.get(op, dst)?.copy_from_slice(&v);
            }
            Op::LocalReduce { src, dst, op: rop } => {
                let v = mem.read(op, src)?;
                kernels::reduce(dtype, rop, mem.get(op, dst)?, &v).map_err(kernel)?;
            }
            Op::Divide { dst, divisor } => {
                kernels::divide(dtype, mem.get(op, dst)?, divisor).map_err(kernel)?;
            }
            _ => {}
        }
        Ok(())
    };
    for round in rounds.iter().filter(|r| !r.is_empty()) {
        local_fixpoint(steps, &mut done, |i| local(i, mem))?;
        run_wave(b, op, dtype, steps, round, mem)?;
        for &i in round {
            done[i] = true;
        }
    }
    local_fixpoint(steps, &mut done, |i| local(i, mem))?;
    if let Some(i) = done.iter().position(|x| !x) {
        return Err(CommError::Shape {
            op: op.to_string(),
            detail: format!("schedule mode: step {i} never became ready"),
        });
    }
    Ok(())
}

/// One `HcclBatchSendRecv` of `wave`'s messages, staged through the
/// device, then the receives written (and reduced) into `mem`.
fn run_wave(
    b: &mut AscendBackend,
    op: &str,
    dtype: DataType,
    steps: &[Step],
    wave: &[usize],
    mem: &mut Mem,
) -> Result<(), CommError> {
    // Staged length of each message: 0 bytes travel as 1.
    let len_of = |i: usize| (steps[i].op.bytes() as usize).max(1);
    let mut at = Vec::with_capacity(wave.len());
    let mut total = 0;
    for &i in wave {
        at.push(total);
        total += align(len_of(i));
    }
    let e = |x| err(op, x);
    let mut outgoing = Vec::new();
    for &i in wave {
        if let Op::Send { src, .. } = steps[i].op {
            let mut v = mem.read(op, src)?;
            v.resize(len_of(i), 0);
            outgoing.push(v);
        } else {
            outgoing.push(Vec::new());
        }
    }
    let mut incoming: Vec<Vec<u8>> = Vec::with_capacity(wave.len());
    {
        let (lib, comm, stream, staging) = b.staging(total)?;
        for (k, v) in outgoing.iter().enumerate() {
            lib.copy_to_device(staging, at[k], v).map_err(e)?;
        }
        let list: Vec<_> = wave
            .iter()
            .zip(&at)
            .map(|(&i, &off)| {
                let (peer, kind) = match steps[i].op {
                    Op::Send { peer, .. } => (peer, HCCL_SEND),
                    Op::Recv { peer, .. } | Op::RecvReduce { peer, .. } => (peer, HCCL_RECV),
                    _ => (0, HCCL_SEND),
                };
                (
                    kind,
                    staging,
                    off,
                    len_of(i) as u64,
                    HCCL_DATA_TYPE_UINT8,
                    peer,
                )
            })
            .collect();
        lib.batch_send_recv(&list, comm, stream).map_err(e)?;
        for (k, &i) in wave.iter().enumerate() {
            let mut v = Vec::new();
            if comm_of(&steps[i].op).is_some_and(|c| !c.2) {
                v = vec![0u8; len_of(i)];
                lib.copy_from_device(&mut v, staging, at[k]).map_err(e)?;
            }
            incoming.push(v);
        }
    }
    for (k, &i) in wave.iter().enumerate() {
        match steps[i].op {
            Op::Recv { dst, .. } => {
                let n = dst.len as usize;
                mem.get(op, dst)?.copy_from_slice(&incoming[k][..n]);
            }
            Op::RecvReduce {
                local,
                dst,
                op: rop,
                ..
            } => {
                let n = dst.len as usize;
                let mut acc = mem.read(op, local)?;
                kernels::reduce(dtype, rop, &mut acc, &incoming[k][..n]).map_err(|x| {
                    CommError::Shape {
                        op: op.to_string(),
                        detail: x.to_string(),
                    }
                })?;
                mem.get(op, dst)?.copy_from_slice(&acc);
            }
            _ => {}
        }
    }
    Ok(())
}

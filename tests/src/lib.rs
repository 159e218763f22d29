//! Shared helpers of the conformance suite: the case list, running a case
//! on one rank of a [`Comm`] and checking its bytes against
//! `hccl_algos::reference`.
//!
//! The same cases run on TCP (ranks as processes of the `conformance_rank`
//! binary, see `tests/tests/tcp.rs`) and, with every rank a thread of one
//! process ([`on_threads`] over `Comm::init_all_on`), on the simulator
//! (`BackendKind::Sim`) and on TCP over loopback (see
//! `tests/tests/in_process.rs`).

pub mod device;
pub mod procs;

/// Drops `comms` together, each on its own thread: a rank's goodbye waits
/// for its peers', so dropping them one after another would wait in turn.
pub fn drop_together(comms: impl IntoIterator<Item = Comm>) {
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| std::thread::spawn(move || drop(c)))
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

use hccl::comm::{BackendKind, DataType, ReduceOp};
use hccl::{Comm, CommError, P2pItem};
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
        // V variants and point-to-point carry per-rank counts: show the
        // largest rank's bytes instead of the unused `count`.
        let size = match a.kind {
            CollectiveKind::AllGatherV
            | CollectiveKind::ReduceScatterV
            | CollectiveKind::AllToAllV
            | CollectiveKind::SendRecv
            | CollectiveKind::BatchSendRecv => format!("max{}B", a.message_bytes()),
            _ => format!("n{}", a.count),
        };
        format!(
            "{:?}/{}/{}/{size}/root{}{}",
            a.kind,
            a.dtype,
            a.op,
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
    // Longer than host TCP's slice (1 MiB): sliced when the ranks fit
    // their CPUs (`hccl_algos::select::plan_op`).
    add(
        K::AllReduce,
        1_500_001,
        DataType::Fp32,
        ReduceOp::Sum,
        0,
        false,
    );
    add(
        K::AllReduce,
        700_001,
        DataType::Fp32,
        ReduceOp::Avg,
        0,
        true,
    );
    add(K::AllReduce, 1000, DataType::Fp64, ReduceOp::Avg, 0, false);
    add(K::AllReduce, 1000, DataType::Int64, ReduceOp::Min, 0, false);
    add(K::Barrier, 0, DataType::Uint8, ReduceOp::Sum, 0, false);
    // V variants with uneven per-rank counts (some 0), and point-to-point:
    // one SendRecv from the last rank, batches where every rank sends to
    // r+1 and receives from r+2 (small, and past the socket buffers).
    for (i, &(kind, count, dtype, op, in_place)) in [
        (K::AllGatherV, 5u64, DataType::Fp32, ReduceOp::Sum, false),
        (K::AllGatherV, 2, DataType::Int16, ReduceOp::Sum, true),
        (K::ReduceScatterV, 7, DataType::Int32, ReduceOp::Max, false),
        (K::ReduceScatterV, 3, DataType::Fp32, ReduceOp::Sum, true),
        (K::AllToAllV, 4, DataType::Fp16, ReduceOp::Sum, false),
        (K::SendRecv, 1000, DataType::Fp32, ReduceOp::Sum, false),
        (K::BatchSendRecv, 3, DataType::Int64, ReduceOp::Sum, false),
        (
            K::BatchSendRecv,
            300_000,
            DataType::Fp32,
            ReduceOp::Sum,
            false,
        ),
    ]
    .iter()
    .enumerate()
    {
        let args = CollectiveArgs::example(kind, world, count, dtype, last, i as u64)
            .expect("example arguments")
            .with_op(op)
            .with_in_place(in_place);
        out.push(Case { args });
    }
    out
}

/// Runs a SendRecv / BatchSendRecv case through [`Comm::batch_send_recv`]:
/// this rank's transfers of the global list, in list order, as items over
/// slices of its packed input and output (a transfer to itself is copied
/// here: the API takes only other ranks). Returns the packed output.
fn run_p2p(comm: &Comm, a: &CollectiveArgs, input: &[u8]) -> Result<Vec<u8>, CommError> {
    let r = comm.rank();
    let esz = a.dtype.size() as usize;
    let mut out = vec![0u8; a.io_bytes(r).1 as usize];
    let mut to_self = false;
    {
        let (mut ins, mut outs): (&[u8], &mut [u8]) = (input, &mut out);
        let mut items = Vec::new();
        for t in a.pairs.iter().flat_map(|p| p.iter()) {
            let len = t.count as usize * esz;
            to_self |= t.src == r && t.dst == r;
            let sent = (t.src == r).then(|| {
                let (head, tail) = ins.split_at(len);
                ins = tail;
                head
            });
            let got = (t.dst == r).then(|| {
                let (head, tail) = std::mem::take(&mut outs).split_at_mut(len);
                outs = tail;
                head
            });
            match (sent, got) {
                (Some(_), Some(_)) => {}
                (Some(b), None) => items.push(P2pItem::send_bytes(b, t.count, a.dtype, t.dst)),
                (None, Some(b)) => items.push(P2pItem::recv_bytes(b, t.count, a.dtype, t.src)),
                (None, None) => {}
            }
        }
        comm.batch_send_recv(&mut items)?;
    }
    // Transfers to itself: with sends and receives packed in list order,
    // walk the list again to find each one's input and output block.
    if to_self {
        let (mut i_at, mut o_at) = (0usize, 0usize);
        for t in a.pairs.iter().flat_map(|p| p.iter()) {
            let len = t.count as usize * esz;
            if t.src == r && t.dst == r {
                out[o_at..o_at + len].copy_from_slice(&input[i_at..i_at + len]);
            }
            if t.src == r {
                i_at += len;
            }
            if t.dst == r {
                o_at += len;
            }
        }
    }
    Ok(out)
}

/// Where a case's buffers are: host slices, or device buffers of the
/// communicator (`Comm::device_buffer`: NPU memory on the Ascend backend,
/// host memory the buffer owns on TCP and the simulator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// `&[u8]` / `&mut [u8]`.
    Host,
    /// `DeviceBuffer<u8>`s, filled with `copy_from_host` and read back
    /// with `to_vec` after the op.
    Device,
}

/// [`run_p2p`] on device buffers: one per transfer of this rank (sends
/// filled from the packed input, receives read back into the packed
/// output after the batch).
fn run_p2p_device(comm: &Comm, a: &CollectiveArgs, input: &[u8]) -> Result<Vec<u8>, CommError> {
    let r = comm.rank();
    let esz = a.dtype.size() as usize;
    let mut out = vec![0u8; a.io_bytes(r).1 as usize];
    let (mut i_at, mut o_at) = (0usize, 0usize);
    // (peer, count, device buffer, output offset) of each transfer.
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    for t in a.pairs.iter().flat_map(|p| p.iter()) {
        let len = t.count as usize * esz;
        match (t.src == r, t.dst == r) {
            (true, true) => out[o_at..o_at + len].copy_from_slice(&input[i_at..i_at + len]),
            (true, false) => sends.push((
                t.dst,
                t.count,
                comm.device_buffer_from(&input[i_at..i_at + len])?,
            )),
            (false, true) => recvs.push((t.src, t.count, comm.device_buffer::<u8>(len)?, o_at)),
            (false, false) => {}
        }
        if t.src == r {
            i_at += len;
        }
        if t.dst == r {
            o_at += len;
        }
    }
    // Items in the transfers' list order, as run_p2p posts them.
    let mut order: Vec<(usize, bool)> = Vec::new();
    {
        let (mut si, mut ri) = (0, 0);
        for t in a.pairs.iter().flat_map(|p| p.iter()) {
            match (t.src == r, t.dst == r) {
                (true, false) => {
                    order.push((si, true));
                    si += 1;
                }
                (false, true) => {
                    order.push((ri, false));
                    ri += 1;
                }
                _ => {}
            }
        }
    }
    {
        let mut send_items: Vec<Option<P2pItem<'_>>> = sends
            .iter()
            .map(|(peer, count, b)| Some(P2pItem::send_bytes(b, *count, a.dtype, *peer)))
            .collect();
        let mut recv_items: Vec<Option<P2pItem<'_>>> = recvs
            .iter_mut()
            .map(|(peer, count, b, _)| Some(P2pItem::recv_bytes(b, *count, a.dtype, *peer)))
            .collect();
        let mut items: Vec<P2pItem<'_>> = order
            .iter()
            .filter_map(|&(i, send)| match send {
                true => send_items[i].take(),
                false => recv_items[i].take(),
            })
            .collect();
        comm.batch_send_recv(&mut items)?;
    }
    for (_, _, b, at) in &recvs {
        let v = b.to_vec()?;
        out[*at..*at + v.len()].copy_from_slice(&v);
    }
    Ok(out)
}

/// Runs `case` on this rank of `comm` (inputs from seed `seed`) and checks
/// the output against the reference, byte for byte.
///
/// # Errors
/// The communicator's error, or a description of the first wrong byte.
pub fn run_case(comm: &Comm, case: &Case, seed: u64) -> Result<(), String> {
    run_case_in(comm, case, seed, Memory::Host)
}

/// [`run_case`] with the buffers in `mem`.
///
/// # Errors
/// The communicator's error, or a description of the first wrong byte.
pub fn run_case_in(comm: &Comm, case: &Case, seed: u64, mem: Memory) -> Result<(), String> {
    let a = &case.args;
    let r = comm.rank();
    let inputs = verifiable_inputs(a, seed);
    let want = reference(a, &inputs).map_err(|e| format!("reference: {e}"))?;
    let want = &want[r as usize];
    let input = &inputs[r as usize];
    let (_, outb) = a.io_bytes(r);
    let p2p = matches!(
        a.kind,
        CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv
    );
    let s = |e: CommError| e.to_string();
    let got = match (a.alias(r), mem) {
        _ if p2p && mem == Memory::Host => run_p2p(comm, a, input).map_err(s)?,
        _ if p2p => run_p2p_device(comm, a, input).map_err(s)?,
        (Some(al), _) => {
            let len = (al.input_at + input.len() as u64).max(al.output_at + outb) as usize;
            let mut buf = vec![0u8; len];
            buf[al.input_at as usize..al.input_at as usize + input.len()].copy_from_slice(input);
            if mem == Memory::Host {
                comm.collective_in_place(a, &mut buf).map_err(s)?;
            } else {
                let mut d = comm.device_buffer_from(&buf).map_err(s)?;
                comm.collective_in_place(a, &mut d).map_err(s)?;
                buf = d.to_vec().map_err(s)?;
            }
            buf[al.output_at as usize..(al.output_at + outb) as usize].to_vec()
        }
        (None, Memory::Host) => {
            let mut out = vec![0u8; outb as usize];
            comm.collective(&a.clone().with_in_place(false), input, &mut out)
                .map_err(s)?;
            out
        }
        (None, Memory::Device) => {
            let din = comm.device_buffer_from(input).map_err(s)?;
            let mut dout = comm.device_buffer::<u8>(outb as usize).map_err(s)?;
            comm.collective(&a.clone().with_in_place(false), &din, &mut dout)
                .map_err(s)?;
            dout.to_vec().map_err(s)?
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

/// Runs `f(comm)` on every rank of a fresh `world`-rank communicator of
/// `backend` (`Comm::init_all_on`), one thread each, and returns the
/// results in rank order.
///
/// # Panics
/// If the communicator cannot be created or a rank's thread panics.
pub fn on_threads<R: Send + 'static>(
    backend: BackendKind,
    world: u32,
    f: impl Fn(Comm) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    on_comms(Comm::init_all_on(backend, world).expect("init_all"), f)
}

/// Every case of [`cases`] on this rank of `comm` (case `i` with seed
/// `i`), in order: the failures, each named by its case. Every rank must
/// run it.
pub fn run_all(comm: Comm) -> Vec<String> {
    run_all_in(comm, Memory::Host)
}

/// [`run_all`] with every buffer in `mem`.
pub fn run_all_in(comm: Comm, mem: Memory) -> Vec<String> {
    let mut bad = Vec::new();
    for (i, case) in cases(comm.size()).iter().enumerate() {
        if let Err(e) = run_case_in(&comm, case, i as u64, mem) {
            bad.push(format!("{}: {e}", case.name()));
        }
    }
    bad
}

/// Runs `f(comm)` on every one of `comms` (the ranks of one communicator
/// of this process, however made), one thread each, and returns the
/// results in rank order.
///
/// # Panics
/// If a rank's thread panics.
pub fn on_comms<R: Send + 'static>(
    comms: Vec<Comm>,
    f: impl Fn(Comm) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| {
            let f = f.clone();
            std::thread::spawn(move || f(c))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// For tests whose environment makes building a communicator fail: the
/// error of a 2-rank simulator `init_all` and of a TCP one (both check the
/// `HCCL_*` settings before anything else).
///
/// # Panics
/// If a communicator is built.
pub fn init_errors() -> Vec<String> {
    [BackendKind::Sim, BackendKind::Tcp]
        .into_iter()
        .map(|b| match Comm::init_all_on(b, 2) {
            Ok(_) => panic!("{b:?}: the communicator should not be built"),
            Err(e) => e.to_string(),
        })
        .collect()
}

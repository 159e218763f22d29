//! Typed V variants: AllGatherV, ReduceScatterV and AllToAllV with
//! per-rank counts and displacements in elements (HCCL's
//! `HcclAllGatherV`, `HcclReduceScatterV`, `HcclAlltoAllV`).
//!
//! The schedules take packed blocks (displacement = prefix sum of the
//! counts, see `hccl_algos::collective`). Packed user layouts run in the
//! user's memory (a host slice or a [`super::DeviceBuffer`], on the NPU
//! itself in native mode); any other layout (gaps, reordered blocks) is
//! staged through one packed host buffer, one extra copy of the affected
//! side (an NPU buffer's side is copied to the host and back).
//! Receive blocks must not overlap (which rank's data would win is
//! undefined); send blocks may.

use hccl_algos::collective::CollectiveArgs;
use hccl_algos::kernels::copy;

use super::device::{self, elems, Buffer, BufferMut, In, Out, Side, SideMut};
use super::{Comm, CommError, Element, ReduceOp};

/// One rank's block: element offset and count.
#[derive(Clone, Copy)]
struct Block {
    at: u64,
    count: u64,
}

/// The arguments naming one side's layout.
struct Layout<'a> {
    op: &'static str,
    counts_field: &'static str,
    displs_field: &'static str,
    counts: &'a [u64],
    displs: &'a [u64],
    /// "send buffer" / "receive buffer".
    buffer: &'static str,
    /// Elements in that buffer.
    len: usize,
    /// Blocks must not overlap (receive side).
    disjoint: bool,
}

impl<'a> Layout<'a> {
    /// The send side: `send_counts` / `send_displs` in a send buffer of
    /// `len` elements; blocks may overlap.
    fn send(op: &'static str, counts: &'a [u64], displs: &'a [u64], len: usize) -> Self {
        Layout {
            op,
            counts_field: "send_counts",
            displs_field: "send_displs",
            counts,
            displs,
            buffer: "send buffer",
            len,
            disjoint: false,
        }
    }

    /// The receive side: `recv_counts` / `recv_displs` in a receive buffer
    /// of `len` elements; blocks must not overlap.
    fn recv(op: &'static str, counts: &'a [u64], displs: &'a [u64], len: usize) -> Self {
        Layout {
            op,
            counts_field: "recv_counts",
            displs_field: "recv_displs",
            counts,
            displs,
            buffer: "receive buffer",
            len,
            disjoint: true,
        }
    }

    /// Checks this rank's own entry (`me`, after [`Layout::blocks`]
    /// checked the length) against the `len` elements it `does` ("sends")
    /// with its other buffer (`buffer`, "send buffer").
    fn own(&self, me: usize, len: usize, does: &str, buffer: &str) -> Result<(), CommError> {
        if len as u64 == self.counts[me] {
            return Ok(());
        }
        Err(self.error(
            self.counts_field,
            Some(me),
            self.counts[me],
            format!("this rank (rank {me}) {does} {len} elements (its {buffer}'s length)"),
        ))
    }

    fn error(
        &self,
        field: &'static str,
        index: Option<usize>,
        value: u64,
        reason: String,
    ) -> CommError {
        CommError::Counts {
            op: self.op,
            field,
            index,
            value,
            reason,
        }
    }

    /// Checks both lists' lengths (`n` entries) and every block's bounds
    /// and overlaps; returns the blocks.
    fn blocks(&self, n: usize) -> Result<Vec<Block>, CommError> {
        for (field, list) in [
            (self.counts_field, self.counts),
            (self.displs_field, self.displs),
        ] {
            if list.len() != n {
                return Err(self.error(
                    field,
                    None,
                    list.len() as u64,
                    format!("pass one entry per rank ({n})"),
                ));
            }
        }
        let len = self.len as u64;
        let mut blocks = Vec::with_capacity(n);
        for (i, (&count, &at)) in self.counts.iter().zip(self.displs).enumerate() {
            if count > len {
                return Err(self.error(
                    self.counts_field,
                    Some(i),
                    count,
                    format!("the {} has only {len} elements", self.buffer),
                ));
            }
            match at.checked_add(count) {
                Some(end) if end <= len => blocks.push(Block { at, count }),
                _ => {
                    return Err(self.error(
                        self.displs_field,
                        Some(i),
                        at,
                        format!(
                            "block {i} of {count} elements would end at element {} but the {} has {len}",
                            u128::from(at) + u128::from(count),
                            self.buffer
                        ),
                    ))
                }
            }
        }
        if self.disjoint {
            let mut order: Vec<usize> = (0..n).filter(|&i| blocks[i].count > 0).collect();
            order.sort_by_key(|&i| (blocks[i].at, i));
            for w in order.windows(2) {
                let (a, b) = (blocks[w[0]], blocks[w[1]]);
                if a.at + a.count > b.at {
                    return Err(self.error(
                        self.displs_field,
                        Some(w[1]),
                        b.at,
                        format!(
                            "block {} (elements {}..{}) overlaps block {} (elements {}..{}) of the {}; receive blocks must not overlap",
                            w[1],
                            b.at,
                            b.at + b.count,
                            w[0],
                            a.at,
                            a.at + a.count,
                            self.buffer
                        ),
                    ));
                }
            }
        }
        Ok(blocks)
    }
}

/// True if `blocks` are packed in rank order and fill `len` elements.
fn packed(blocks: &[Block], len: usize) -> bool {
    let mut at = 0u64;
    for b in blocks {
        if b.at != at {
            return false;
        }
        at += b.count;
    }
    at == len as u64
}

/// `buf`'s blocks (elements of `esz` bytes), packed in rank order.
fn gather_blocks(buf: &[u8], blocks: &[Block], esz: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.iter().map(|b| b.count as usize * esz).sum());
    for b in blocks {
        copy::extend(
            &mut out,
            &buf[b.at as usize * esz..(b.at + b.count) as usize * esz],
        );
    }
    out
}

/// Copies packed `src` into `buf`'s blocks (elements of `esz` bytes).
fn scatter_blocks(src: &[u8], buf: &mut [u8], blocks: &[Block], esz: usize) {
    let mut at = 0usize;
    for b in blocks {
        let n = b.count as usize * esz;
        let to = b.at as usize * esz;
        copy::copy(&mut buf[to..to + n], &src[at..at + n]);
        at += n;
    }
}

impl Comm {
    /// The packed host copy of an unpacked send side's `blocks` (an NPU
    /// buffer is read to the host first).
    fn packed_send(
        &self,
        op: &'static str,
        side: Side<'_>,
        blocks: &[Block],
        esz: usize,
    ) -> Result<Vec<u8>, CommError> {
        let input = self.resolve(&op, "send buffer", side)?;
        match input {
            In::Host(b) => Ok(gather_blocks(b, blocks, esz)),
            #[cfg(feature = "ascend")]
            In::Npu(n) => {
                let mut host = vec![0u8; n.len()];
                n.read(op, &mut host).map_err(|e| self.fail_local(e))?;
                Ok(gather_blocks(&host, blocks, esz))
            }
        }
    }

    /// Runs `args` with `input` into a packed host buffer of `total`
    /// bytes, then copies its blocks into the unpacked receive side
    /// (an NPU buffer through a host copy of it), only once the op has
    /// succeeded.
    fn unpacked_recv(
        &self,
        (op, args): (&'static str, &CollectiveArgs),
        input: Side<'_>,
        output: SideMut<'_>,
        (blocks, esz, total): (&[Block], usize, usize),
    ) -> Result<(), CommError> {
        let out = self.resolve_mut(&op, "receive buffer", output)?;
        let mut tmp = vec![0u8; total];
        match out {
            Out::Host(o) => {
                self.collective_sides(args, input, SideMut::Host(&mut tmp))?;
                scatter_blocks(&tmp, o, blocks, esz);
                Ok(())
            }
            #[cfg(feature = "ascend")]
            Out::Npu(n) => {
                let mut host = vec![0u8; n.len()];
                n.read(op, &mut host).map_err(|e| self.fail_local(e))?;
                self.collective_sides(args, input, SideMut::Host(&mut tmp))?;
                scatter_blocks(&tmp, &mut host, blocks, esz);
                n.write(op, &host)
            }
        }
    }

    /// AllGatherV (HCCL's `HcclAllGatherV`): rank i's `send`
    /// (`recv_counts[i]` elements) lands in every rank's `recv` at element
    /// `recv_displs[i]`. `recv_counts` and `recv_displs` have one entry per
    /// rank and are the same on every rank; elements of `recv` outside the
    /// blocks are left as they were. `send` and `recv` are host slices or
    /// [`super::DeviceBuffer`]s of this rank's device.
    ///
    /// # Errors
    /// Before anything moves (`HCCL_E_PARA`; the communicator stays
    /// usable): [`CommError::Counts`] naming the field, rank index and
    /// value: a list of the wrong length, a block past the end of `recv`,
    /// overlapping receive blocks, `send.len() != recv_counts[rank]`. Then
    /// as [`Comm::collective`] (counts that differ across ranks are a
    /// mismatch there).
    pub fn all_gather_v<S, R>(
        &self,
        send: &S,
        recv: &mut R,
        recv_counts: &[u64],
        recv_displs: &[u64],
    ) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        const OP: &str = "AllGatherV";
        let n = self.size() as usize;
        let dtype = <S::Elem as Element>::DTYPE;
        let (send_len, recv_len) = (elems(send), elems(recv));
        // This rank's own arguments: refused before anything moves, the
        // communicator usable ([`Comm::collective`]).
        let layout = Layout::recv(OP, recv_counts, recv_displs, recv_len);
        let blocks = layout.blocks(n)?;
        layout.own(self.rank() as usize, send_len, "sends", "send buffer")?;
        let args = CollectiveArgs::v_counts(false, recv_counts.to_vec(), dtype)?;
        let (input, output) = (device::side(send), device::side_mut(recv));
        if packed(&blocks, recv_len) {
            return self.collective_sides(&args, input, output);
        }
        let esz = dtype.size() as usize;
        let total = recv_counts.iter().sum::<u64>() as usize * esz;
        self.unpacked_recv((OP, &args), input, output, (&blocks, esz, total))
    }

    /// ReduceScatterV (HCCL's `HcclReduceScatterV`): rank i receives in
    /// `recv` the reduction over ranks of their send block i
    /// (`send_counts[i]` elements at `send_displs[i]` of `send`).
    /// `send_counts` and `send_displs` have one entry per rank and are the
    /// same on every rank. Host slices or device buffers.
    ///
    /// # Errors
    /// Before anything moves (`HCCL_E_PARA`; the communicator stays
    /// usable): [`CommError::Counts`] naming the field, rank index and
    /// value: a list of the wrong length, a block past the end of `send`,
    /// `recv.len() != send_counts[rank]`. Then as [`Comm::collective`].
    pub fn reduce_scatter_v<S, R>(
        &self,
        send: &S,
        send_counts: &[u64],
        send_displs: &[u64],
        recv: &mut R,
        op: ReduceOp,
    ) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        const OP: &str = "ReduceScatterV";
        let n = self.size() as usize;
        let dtype = <S::Elem as Element>::DTYPE;
        let (send_len, recv_len) = (elems(send), elems(recv));
        let layout = Layout::send(OP, send_counts, send_displs, send_len);
        let blocks = layout.blocks(n)?;
        layout.own(self.rank() as usize, recv_len, "receives", "receive buffer")?;
        let args = CollectiveArgs::v_counts(true, send_counts.to_vec(), dtype)?.with_op(op);
        if packed(&blocks, send_len) {
            return self.collective_sides(&args, device::side(send), device::side_mut(recv));
        }
        let tmp = self.packed_send(OP, device::side(send), &blocks, dtype.size() as usize)?;
        self.collective_sides(&args, Side::Host(&tmp), device::side_mut(recv))
    }

    /// AllToAllV (HCCL's `HcclAlltoAllV`): this rank sends
    /// `send_counts[j]` elements at `send_displs[j]` of `send` to rank j,
    /// and receives `recv_counts[i]` elements from rank i at
    /// `recv_displs[i]` of `recv`. Each list has one entry per rank.
    /// Before moving data the ranks exchange their counts (one AllGather
    /// of 2 × size u64 per rank), so that the schedule sees the whole
    /// matrix and every rank fails alike if rank i's `send_counts[j]`
    /// differs from rank j's `recv_counts[i]`. Host slices or device
    /// buffers.
    ///
    /// # Errors
    /// Before the exchange, this rank's own argument errors
    /// (`HCCL_E_PARA`; nothing is sent and the communicator stays usable):
    /// [`CommError::Counts`] naming the field, rank index and value for a
    /// list of the wrong length, a block past the end of its buffer or
    /// overlapping receive blocks; [`CommError::WrongDevice`]. After it,
    /// counts that disagree across ranks: [`CommError::Mismatch`]
    /// (`HCCL_E_REMOTE`) with the same text on every rank, naming both
    /// entries and both ranks, and the communicator unusable, as a
    /// mismatch of AllGatherV's counts. Then as [`Comm::collective`].
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all_v<S, R>(
        &self,
        send: &S,
        send_counts: &[u64],
        send_displs: &[u64],
        recv: &mut R,
        recv_counts: &[u64],
        recv_displs: &[u64],
    ) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        const OP: &str = "AllToAllV";
        let n = self.size() as usize;
        let dtype = <S::Elem as Element>::DTYPE;
        let (send_len, recv_len) = (elems(send), elems(recv));
        // This rank's own arguments, its buffers' device included: refused
        // before the counts exchange, the communicator usable.
        let send_blocks = Layout::send(OP, send_counts, send_displs, send_len).blocks(n)?;
        let recv_blocks = Layout::recv(OP, recv_counts, recv_displs, recv_len).blocks(n)?;
        self.resolve(&OP, "send buffer", device::side(send))?;
        self.resolve_mut(&OP, "receive buffer", device::side_mut(recv))?;
        // Row i of `all`: rank i's send counts, then its receive counts.
        let mine: Vec<u64> = send_counts.iter().chain(recv_counts).copied().collect();
        let mut all = vec![0u64; 2 * n * n];
        self.all_gather(&mine, &mut all)?;
        let sent = |i: usize, j: usize| all[2 * n * i + j];
        let expects = |j: usize, i: usize| all[2 * n * j + n + i];
        for i in 0..n {
            for j in 0..n {
                if sent(i, j) != expects(j, i) {
                    // Every rank sees the same matrix, so every rank fails
                    // here alike: a mismatch, as AllGatherV's counts.
                    return Err(self.fail_mismatch(
                        OP,
                        format!(
                            "per-rank counts mismatch, recv_counts[{i}] = {} on rank {j}, but rank {i} sends it {} elements (its send_counts[{j}]); every rank's send_counts[j] must equal rank j's recv_counts[i]",
                            expects(j, i),
                            sent(i, j)
                        ),
                    ));
                }
            }
        }
        let rows = (0..n)
            .map(|i| (0..n).map(|j| sent(i, j)).collect())
            .collect();
        let args = CollectiveArgs::all_to_all_v(rows, dtype)?;
        let esz = dtype.size() as usize;
        let staged_in;
        let input = if packed(&send_blocks, send_len) {
            device::side(send)
        } else {
            staged_in = self.packed_send(OP, device::side(send), &send_blocks, esz)?;
            Side::Host(&staged_in)
        };
        let output = device::side_mut(recv);
        if packed(&recv_blocks, recv_len) {
            return self.collective_sides(&args, input, output);
        }
        let total = recv_counts.iter().sum::<u64>() as usize * esz;
        self.unpacked_recv((OP, &args), input, output, (&recv_blocks, esz, total))
    }
}

//! Typed V variants: AllGatherV, ReduceScatterV and AllToAllV with
//! per-rank counts and displacements in elements (HCCL's
//! `HcclAllGatherV`, `HcclReduceScatterV`, `HcclAlltoAllV`).
//!
//! The schedules take packed blocks (displacement = prefix sum of the
//! counts, see `hccl_algos::collective`). Packed user layouts run in the
//! user's memory; any other layout (gaps, reordered blocks) is staged
//! through one packed buffer, one extra copy of the affected side.
//! Receive blocks must not overlap (which rank's data would win is
//! undefined); send blocks may.

use hccl_algos::collective::CollectiveArgs;

use super::element::{bytes, bytes_mut};
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

fn zeroed<T: Element>(n: u64) -> Vec<T> {
    vec![<T as bytemuck::Zeroable>::zeroed(); n as usize]
}

/// `buf`'s blocks, packed in rank order.
fn gather_blocks<T: Element>(buf: &[T], blocks: &[Block]) -> Vec<T> {
    let mut out = Vec::with_capacity(blocks.iter().map(|b| b.count as usize).sum());
    for b in blocks {
        out.extend_from_slice(&buf[b.at as usize..(b.at + b.count) as usize]);
    }
    out
}

/// Copies packed `src` into `buf`'s blocks.
fn scatter_blocks<T: Element>(src: &[T], buf: &mut [T], blocks: &[Block]) {
    let mut at = 0usize;
    for b in blocks {
        let n = b.count as usize;
        buf[b.at as usize..b.at as usize + n].copy_from_slice(&src[at..at + n]);
        at += n;
    }
}

impl Comm {
    /// AllGatherV (HCCL's `HcclAllGatherV`): rank i's `send`
    /// (`recv_counts[i]` elements) lands in every rank's `recv` at element
    /// `recv_displs[i]`. `recv_counts` and `recv_displs` have one entry per
    /// rank and are the same on every rank; elements of `recv` outside the
    /// blocks are left as they were.
    ///
    /// # Errors
    /// [`CommError::Counts`] naming the field, rank index and value: a list
    /// of the wrong length, a block past the end of `recv`, overlapping
    /// receive blocks, `send.len() != recv_counts[rank]`. Then as
    /// [`Comm::collective`].
    pub fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        recv_counts: &[u64],
        recv_displs: &[u64],
    ) -> Result<(), CommError> {
        const OP: &str = "AllGatherV";
        let n = self.size() as usize;
        let checked = (|| {
            let layout = Layout::recv(OP, recv_counts, recv_displs, recv.len());
            let blocks = layout.blocks(n)?;
            layout.own(self.rank() as usize, send.len(), "sends", "send buffer")?;
            let args = CollectiveArgs::v_counts(false, recv_counts.to_vec(), T::DTYPE)?;
            Ok((blocks, args))
        })();
        let (blocks, args) = checked.map_err(|e| self.fail_local(e))?;
        if packed(&blocks, recv.len()) {
            return self.collective(&args, bytes(send), bytes_mut(recv));
        }
        let mut tmp = zeroed::<T>(recv_counts.iter().sum());
        self.collective(&args, bytes(send), bytes_mut(&mut tmp))?;
        scatter_blocks(&tmp, recv, &blocks);
        Ok(())
    }

    /// ReduceScatterV (HCCL's `HcclReduceScatterV`): rank i receives in
    /// `recv` the reduction over ranks of their send block i
    /// (`send_counts[i]` elements at `send_displs[i]` of `send`).
    /// `send_counts` and `send_displs` have one entry per rank and are the
    /// same on every rank.
    ///
    /// # Errors
    /// [`CommError::Counts`] naming the field, rank index and value: a list
    /// of the wrong length, a block past the end of `send`,
    /// `recv.len() != send_counts[rank]`. Then as [`Comm::collective`].
    pub fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[u64],
        send_displs: &[u64],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        const OP: &str = "ReduceScatterV";
        let n = self.size() as usize;
        let checked = (|| {
            let layout = Layout::send(OP, send_counts, send_displs, send.len());
            let blocks = layout.blocks(n)?;
            layout.own(
                self.rank() as usize,
                recv.len(),
                "receives",
                "receive buffer",
            )?;
            let args = CollectiveArgs::v_counts(true, send_counts.to_vec(), T::DTYPE)?.with_op(op);
            Ok((blocks, args))
        })();
        let (blocks, args) = checked.map_err(|e| self.fail_local(e))?;
        if packed(&blocks, send.len()) {
            return self.collective(&args, bytes(send), bytes_mut(recv));
        }
        let tmp = gather_blocks(send, &blocks);
        self.collective(&args, bytes(&tmp), bytes_mut(recv))
    }

    /// AllToAllV (HCCL's `HcclAlltoAllV`): this rank sends
    /// `send_counts[j]` elements at `send_displs[j]` of `send` to rank j,
    /// and receives `recv_counts[i]` elements from rank i at
    /// `recv_displs[i]` of `recv`. Each list has one entry per rank.
    /// Before moving data the ranks exchange their counts (one AllGather
    /// of 2 × size u64 per rank), so that the schedule sees the whole
    /// matrix and every rank fails alike if rank i's `send_counts[j]`
    /// differs from rank j's `recv_counts[i]`.
    ///
    /// # Errors
    /// [`CommError::Counts`] naming the field, rank index and value: a list
    /// of the wrong length, a block past the end of its buffer, overlapping
    /// receive blocks, or counts that disagree across ranks (on every
    /// rank). Then as [`Comm::collective`].
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[u64],
        send_displs: &[u64],
        recv: &mut [T],
        recv_counts: &[u64],
        recv_displs: &[u64],
    ) -> Result<(), CommError> {
        const OP: &str = "AllToAllV";
        let n = self.size() as usize;
        let checked = (|| {
            let send_blocks = Layout::send(OP, send_counts, send_displs, send.len()).blocks(n)?;
            let recv_blocks = Layout::recv(OP, recv_counts, recv_displs, recv.len()).blocks(n)?;
            Ok((send_blocks, recv_blocks))
        })();
        let (send_blocks, recv_blocks) = checked.map_err(|e| self.fail_local(e))?;
        // Row i of `all`: rank i's send counts, then its receive counts.
        let mine: Vec<u64> = send_counts.iter().chain(recv_counts).copied().collect();
        let mut all = vec![0u64; 2 * n * n];
        self.all_gather(&mine, &mut all)?;
        let sent = |i: usize, j: usize| all[2 * n * i + j];
        let expects = |j: usize, i: usize| all[2 * n * j + n + i];
        for i in 0..n {
            for j in 0..n {
                if sent(i, j) != expects(j, i) {
                    return Err(CommError::Counts {
                        op: OP,
                        field: "recv_counts",
                        index: Some(i),
                        value: expects(j, i),
                        reason: format!(
                            "on rank {j}, but rank {i} sends it {} elements (its send_counts[{j}]); every rank's send_counts[j] must equal rank j's recv_counts[i]",
                            sent(i, j)
                        ),
                    });
                }
            }
        }
        let rows = (0..n)
            .map(|i| (0..n).map(|j| sent(i, j)).collect())
            .collect();
        let args = CollectiveArgs::all_to_all_v(rows, T::DTYPE)?;
        let staged_in;
        let input: &[T] = if packed(&send_blocks, send.len()) {
            send
        } else {
            staged_in = gather_blocks(send, &send_blocks);
            &staged_in
        };
        if packed(&recv_blocks, recv.len()) {
            return self.collective(&args, bytes(input), bytes_mut(recv));
        }
        let mut tmp = zeroed::<T>(recv_counts.iter().sum());
        self.collective(&args, bytes(input), bytes_mut(&mut tmp))?;
        scatter_blocks(&tmp, recv, &recv_blocks);
        Ok(())
    }
}

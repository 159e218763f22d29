//! The typed collectives (HCCL's `HcclAllReduce`, `HcclAllGather`, ...):
//! element slices in, [`Comm::collective`] on their bytes underneath.

use std::sync::Arc;

use hccl_algos::collective::{CollectiveArgs, CollectiveKind};

use super::element::{bytes, bytes_mut};
use super::{drain, Comm, CommError, DataType, Element, OpHandle, ReduceOp};

impl Comm {
    pub(crate) fn args(&self, kind: CollectiveKind, count: u64, dtype: DataType) -> CollectiveArgs {
        CollectiveArgs::new(kind, count, dtype, self.shared.size)
    }

    pub(crate) fn per_rank(&self, kind: CollectiveKind, total: usize) -> Result<usize, CommError> {
        let n = self.shared.size as usize;
        if !total.is_multiple_of(n) {
            let e = CommError::Shape {
                op: format!("{kind:?}"),
                detail: format!("{total} elements do not split into {n} equal blocks"),
            };
            return Err(self.fail_local(e));
        }
        Ok(total / n)
    }

    /// The arguments of `kind` on `count` elements of `T` (the typed wrappers' common start).
    fn of<T: Element>(&self, kind: CollectiveKind, count: usize) -> CollectiveArgs {
        self.args(kind, count as u64, T::DTYPE)
    }

    /// Runs `a` on typed buffers: their bytes underneath.
    fn run_typed<T: Element>(
        &self,
        a: CollectiveArgs,
        send: &[T],
        recv: &mut [T],
    ) -> Result<(), CommError> {
        self.collective(&a, bytes(send), bytes_mut(recv))
    }

    /// Runs `a` in place on a typed buffer: its bytes underneath.
    fn run_typed_in_place<T: Element>(
        &self,
        a: CollectiveArgs,
        buf: &mut [T],
    ) -> Result<(), CommError> {
        self.collective_in_place(&a, bytes_mut(buf))
    }

    /// AllReduce: `recv[i] = op over ranks of send[i]`; equal lengths.
    ///
    /// # Errors
    /// Lengths differ; transport and consistency errors.
    pub fn all_reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let a = self
            .of::<T>(CollectiveKind::AllReduce, send.len())
            .with_op(op);
        self.run_typed(a, send, recv)
    }

    /// AllReduce in place on `buf`.
    ///
    /// # Errors
    /// Transport and consistency errors.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let a = self
            .of::<T>(CollectiveKind::AllReduce, buf.len())
            .with_op(op);
        self.run_typed_in_place(a, buf)
    }

    /// AllReduce on its own thread; returns the reduced buffer.
    pub fn all_reduce_async<T: Element>(&self, send: Vec<T>, op: ReduceOp) -> OpHandle<Vec<T>> {
        let a = self
            .of::<T>(CollectiveKind::AllReduce, send.len())
            .with_op(op);
        let h = self.collective_async(a, bytes(&send).to_vec());
        // Waiting `h` marks its failure seen: this handle reports it instead.
        let (asyncs, id) = (
            Arc::clone(&self.shared.asyncs),
            self.shared.asyncs.reserve(),
        );
        let kind = drain::AsyncKind::Collective(CollectiveKind::AllReduce.name());
        let report = Arc::clone(&asyncs);
        OpHandle::spawn("hccl-op-cast".into(), move || {
            let r = h.wait().map(|b| {
                let mut v =
                    vec![<T as bytemuck::Zeroable>::zeroed(); b.len() / std::mem::size_of::<T>()];
                bytes_mut(&mut v).copy_from_slice(&b);
                v
            });
            report.note_result(id, kind, &r);
            r
        })
        .reported_to(&asyncs, id)
    }

    /// ReduceScatter: `send` holds `size` blocks of `recv.len()` elements;
    /// rank r gets the reduction of every rank's block r.
    ///
    /// # Errors
    /// `send.len() != size * recv.len()`; transport and consistency errors.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let a = self
            .of::<T>(CollectiveKind::ReduceScatter, recv.len())
            .with_op(op);
        self.run_typed(a, send, recv)
    }

    /// ReduceScatter in place: `buf` is the send buffer; rank r's result
    /// lands in its own block `buf[r*count..(r+1)*count]`.
    ///
    /// # Errors
    /// `buf.len()` not a multiple of `size`; transport and consistency errors.
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let count = self.per_rank(CollectiveKind::ReduceScatter, buf.len())?;
        let a = self
            .of::<T>(CollectiveKind::ReduceScatter, count)
            .with_op(op);
        self.run_typed_in_place(a, buf)
    }

    /// AllGather: `recv` = every rank's `send`, in rank order.
    ///
    /// # Errors
    /// `recv.len() != size * send.len()`; transport and consistency errors.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let a = self.of::<T>(CollectiveKind::AllGather, send.len());
        self.run_typed(a, send, recv)
    }

    /// AllGather in place: rank r's input is its own block of `buf`.
    ///
    /// # Errors
    /// `buf.len()` not a multiple of `size`; transport and consistency errors.
    pub fn all_gather_in_place<T: Element>(&self, buf: &mut [T]) -> Result<(), CommError> {
        let count = self.per_rank(CollectiveKind::AllGather, buf.len())?;
        let a = self.of::<T>(CollectiveKind::AllGather, count);
        self.run_typed_in_place(a, buf)
    }

    /// Broadcast `buf` from `root` to every rank (HCCL's `HcclBroadcast`, in place).
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range; transport and consistency errors.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: u32) -> Result<(), CommError> {
        let a = self
            .of::<T>(CollectiveKind::Broadcast, buf.len())
            .with_root(root);
        self.run_typed_in_place(a, buf)
    }

    /// Reduce to `root`: `recv` (root only; ignored elsewhere, any size) = op over ranks of `send`.
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range, lengths; transport and consistency errors.
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: u32,
    ) -> Result<(), CommError> {
        let a = self
            .of::<T>(CollectiveKind::Reduce, send.len())
            .with_op(op)
            .with_root(root);
        self.run_typed(a, send, recv)
    }

    /// Scatter from `root`: rank r gets block r of the root's `send`
    /// (`size * recv.len()` elements on the root; ignored elsewhere, any size).
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range, lengths; transport and consistency errors.
    pub fn scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: u32,
    ) -> Result<(), CommError> {
        let a = self
            .of::<T>(CollectiveKind::Scatter, recv.len())
            .with_root(root);
        self.run_typed(a, send, recv)
    }

    /// Gather to `root`: the root's `recv` = every rank's `send` in rank
    /// order (`recv` ignored elsewhere, any size).
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range, lengths; transport and consistency errors.
    pub fn gather<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: u32,
    ) -> Result<(), CommError> {
        let a = self
            .of::<T>(CollectiveKind::Gather, send.len())
            .with_root(root);
        self.run_typed(a, send, recv)
    }

    /// AllToAll: block j of rank i's `send` goes to block i of rank j's
    /// `recv`; both hold `size` equal blocks.
    ///
    /// # Errors
    /// Lengths; transport and consistency errors.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let count = self.per_rank(CollectiveKind::AllToAll, send.len())?;
        let a = self.of::<T>(CollectiveKind::AllToAll, count);
        self.run_typed(a, send, recv)
    }

    /// Returns once every rank has entered the barrier.
    ///
    /// # Errors
    /// Transport errors.
    pub fn barrier(&self) -> Result<(), CommError> {
        let a = self.args(CollectiveKind::Barrier, 0, DataType::Uint8);
        self.collective(&a, &[], &mut [])
    }
}

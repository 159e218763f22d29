//! The typed collectives (HCCL's `HcclAllReduce`, `HcclAllGather`, ...):
//! buffers of elements in (host slices or [`super::DeviceBuffer`]s, any
//! [`Buffer`]), [`Comm::collective`]'s path on their bytes underneath.
//! Lengths are in elements; the send and receive buffers of a call hold
//! the same element type, whose [`Element::DTYPE`] is the call's. Besides
//! the errors each call lists, a device buffer of another rank's device
//! fails every call with [`CommError::WrongDevice`] before anything moves.
//! Errors a rank finds from its own arguments (lengths, blocks, roots,
//! devices) come before the call takes a turn: `HCCL_E_PARA`, and the
//! communicator stays usable (see [`Comm::collective`]).

use std::sync::Arc;

use hccl_algos::collective::{CollectiveArgs, CollectiveKind};

use super::device::{self, elems, Buffer, BufferMut};
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
            return Err(e);
        }
        Ok(total / n)
    }

    /// The arguments of `kind` on `count` elements of `T` (the typed wrappers' common start).
    fn of<T: Element>(&self, kind: CollectiveKind, count: usize) -> CollectiveArgs {
        self.args(kind, count as u64, T::DTYPE)
    }

    /// Runs `a` on typed buffers: their bytes underneath.
    fn run_typed<S, R>(&self, a: CollectiveArgs, send: &S, recv: &mut R) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut + ?Sized,
    {
        self.collective_sides(&a, device::side(send), device::side_mut(recv))
    }

    /// Runs `a` in place on a typed buffer: its bytes underneath.
    fn run_typed_in_place<B>(&self, a: CollectiveArgs, buf: &mut B) -> Result<(), CommError>
    where
        B: BufferMut + ?Sized,
    {
        self.collective_in_place_side(&a, device::side_mut(buf))
    }

    /// AllReduce: `recv[i] = op over ranks of send[i]`; equal lengths.
    ///
    /// `send` and `recv` (as every buffer of the typed calls) are host
    /// slices (`&[T]`, `&Vec<T>`, `&[T; N]`) or [`super::DeviceBuffer`]s
    /// of this rank's device, in any mix: `c.all_reduce(&dev_send, &mut
    /// dev_recv, ReduceOp::Sum)` runs HCCL's call on the NPU's memory on
    /// the Ascend backend (native mode).
    ///
    /// # Errors
    /// Lengths differ; transport and consistency errors.
    pub fn all_reduce<S, R>(&self, send: &S, recv: &mut R, op: ReduceOp) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        let a = self
            .of::<S::Elem>(CollectiveKind::AllReduce, elems(send))
            .with_op(op);
        self.run_typed(a, send, recv)
    }

    /// AllReduce in place on `buf`.
    ///
    /// # Errors
    /// Transport and consistency errors.
    pub fn all_reduce_in_place<B>(&self, buf: &mut B, op: ReduceOp) -> Result<(), CommError>
    where
        B: BufferMut + ?Sized,
    {
        let a = self
            .of::<B::Elem>(CollectiveKind::AllReduce, elems(buf))
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
    pub fn reduce_scatter<S, R>(
        &self,
        send: &S,
        recv: &mut R,
        op: ReduceOp,
    ) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        let a = self
            .of::<S::Elem>(CollectiveKind::ReduceScatter, elems(recv))
            .with_op(op);
        self.run_typed(a, send, recv)
    }

    /// ReduceScatter in place: `buf` is the send buffer; rank r's result
    /// lands in its own block `buf[r*count..(r+1)*count]`.
    ///
    /// # Errors
    /// `buf.len()` not a multiple of `size`; transport and consistency errors.
    pub fn reduce_scatter_in_place<B>(&self, buf: &mut B, op: ReduceOp) -> Result<(), CommError>
    where
        B: BufferMut + ?Sized,
    {
        let count = self.per_rank(CollectiveKind::ReduceScatter, elems(buf))?;
        let a = self
            .of::<B::Elem>(CollectiveKind::ReduceScatter, count)
            .with_op(op);
        self.run_typed_in_place(a, buf)
    }

    /// AllGather: `recv` = every rank's `send`, in rank order.
    ///
    /// # Errors
    /// `recv.len() != size * send.len()`; transport and consistency errors.
    pub fn all_gather<S, R>(&self, send: &S, recv: &mut R) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        let a = self.of::<S::Elem>(CollectiveKind::AllGather, elems(send));
        self.run_typed(a, send, recv)
    }

    /// AllGather in place: rank r's input is its own block of `buf`.
    ///
    /// # Errors
    /// `buf.len()` not a multiple of `size`; transport and consistency errors.
    pub fn all_gather_in_place<B>(&self, buf: &mut B) -> Result<(), CommError>
    where
        B: BufferMut + ?Sized,
    {
        let count = self.per_rank(CollectiveKind::AllGather, elems(buf))?;
        let a = self.of::<B::Elem>(CollectiveKind::AllGather, count);
        self.run_typed_in_place(a, buf)
    }

    /// Broadcast `buf` from `root` to every rank (HCCL's `HcclBroadcast`, in place).
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range; transport and consistency errors.
    pub fn broadcast<B>(&self, buf: &mut B, root: u32) -> Result<(), CommError>
    where
        B: BufferMut + ?Sized,
    {
        let a = self
            .of::<B::Elem>(CollectiveKind::Broadcast, elems(buf))
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
    pub fn reduce<S, R>(
        &self,
        send: &S,
        recv: &mut R,
        op: ReduceOp,
        root: u32,
    ) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        let a = self
            .of::<S::Elem>(CollectiveKind::Reduce, elems(send))
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
    pub fn scatter<S, R>(&self, send: &S, recv: &mut R, root: u32) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        let a = self
            .of::<S::Elem>(CollectiveKind::Scatter, elems(recv))
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
    pub fn gather<S, R>(&self, send: &S, recv: &mut R, root: u32) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        let a = self
            .of::<S::Elem>(CollectiveKind::Gather, elems(send))
            .with_root(root);
        self.run_typed(a, send, recv)
    }

    /// AllToAll: block j of rank i's `send` goes to block i of rank j's
    /// `recv`; both hold `size` equal blocks.
    ///
    /// # Errors
    /// Lengths; transport and consistency errors.
    pub fn all_to_all<S, R>(&self, send: &S, recv: &mut R) -> Result<(), CommError>
    where
        S: Buffer + ?Sized,
        R: BufferMut<Elem = S::Elem> + ?Sized,
    {
        let count = self.per_rank(CollectiveKind::AllToAll, elems(send))?;
        let a = self.of::<S::Elem>(CollectiveKind::AllToAll, count);
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

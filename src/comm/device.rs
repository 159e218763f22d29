//! Device buffers (HCCL's `aclrtMalloc`'d memory, NCCL's device pointers)
//! and the [`Buffer`] / [`BufferMut`] traits through which every typed
//! collective, the byte-level [`Comm::collective`] and point-to-point take
//! host slices and device buffers alike.
//!
//! **Where the memory is.** [`Comm::device_buffer`] allocates on the
//! communicator's device:
//!
//! - on the Ascend backend (`--features ascend`), device memory of the
//!   rank's NPU (`aclrtMalloc`, freed with `aclrtFree` on drop). In native
//!   mode a collective is HCCL's call on those device pointers, with no
//!   host copy; in schedule mode (and for the calls HCCL lacks: Gather,
//!   `Avg`, a V call on a CANN without it, and under
//!   `HCCL_REDUCE_PRECISION=fp32`) the op is staged through host memory:
//!   the device input copied to the host, the host path run, the output
//!   copied back once the op has succeeded;
//! - on TCP and the simulator, host memory owned by the buffer. A program
//!   written for NPUs (allocate, `copy_from_host`, collectives on device
//!   buffers, `copy_to_host`) so runs unchanged on a laptop, as the C
//!   API's host ACL runtime (`capi/`) runs CANN programs; an error there
//!   would make every device program untestable without an NPU.
//!
//! **Which communicator may use it.** A buffer belongs to the device of
//! the rank that allocated it, as device memory does: any communicator of
//! that device takes it (a [`Comm::split`] of it, another communicator on
//! the same NPU), another rank's communicator refuses it with
//! [`CommError::WrongDevice`] before anything moves (on TCP and the
//! simulator a rank's "device" is its world rank of the communicator
//! family it was allocated in).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use super::element::{bytes, bytes_mut};
use super::{Comm, CommError, DataType, Element, Shared};

#[cfg(feature = "ascend")]
use super::backend::ascend::Npu;

/// The device a buffer's memory is on: one rank's.
#[derive(Clone, Debug)]
pub(crate) enum Home {
    /// Host memory standing for the device of world rank `rank` of the
    /// communicators made together as `world` (TCP and the simulator).
    Host {
        /// A process-unique number of the world communicator.
        world: u64,
        /// The world rank.
        rank: u32,
        /// The world communicator's name, for errors.
        comm: String,
    },
    /// An NPU of one CANN library (the Ascend backend).
    #[cfg(feature = "ascend")]
    Npu {
        /// The library the memory came from.
        lib: std::sync::Arc<hccl_ascend_sys::Library>,
        /// The device id (`aclrtSetDevice`).
        device: i32,
    },
}

impl Home {
    /// A fresh host home for world rank `rank` of a new communicator `comm`.
    pub(crate) fn fresh_host(rank: u32, comm: &str) -> Home {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Home::Host {
            world: NEXT.fetch_add(1, Ordering::Relaxed),
            rank,
            comm: comm.to_string(),
        }
    }

    fn same(&self, other: &Home) -> bool {
        match (self, other) {
            (
                Home::Host { world, rank, .. },
                Home::Host {
                    world: w, rank: r, ..
                },
            ) => world == w && rank == r,
            #[cfg(feature = "ascend")]
            (Home::Npu { lib, device }, Home::Npu { lib: l, device: d }) => {
                std::sync::Arc::ptr_eq(lib, l) && device == d
            }
            #[cfg(feature = "ascend")]
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            Home::Host { rank, comm, .. } => {
                format!(
                    "rank {rank} of communicator '{comm}' (host memory standing for its device)"
                )
            }
            #[cfg(feature = "ascend")]
            Home::Npu { lib, device } => format!("NPU {device} (CANN at {})", lib.hccl_path()),
        }
    }
}

impl Shared {
    /// The device this rank's buffers are on (a host home is made on
    /// first use; a split takes its parent's).
    pub(crate) fn home(&self) -> &Home {
        self.home
            .get_or_init(|| Home::fresh_host(self.rank, &self.name))
    }
}

/// A buffer's memory once checked against the communicator: host bytes
/// (a slice, or a device buffer that is host memory) or NPU memory.
pub(crate) enum In<'a> {
    Host(&'a [u8]),
    #[cfg(feature = "ascend")]
    Npu(&'a Npu),
}

/// [`In`], writable.
pub(crate) enum Out<'a> {
    Host(&'a mut [u8]),
    #[cfg(feature = "ascend")]
    Npu(&'a Npu),
}

#[cfg(feature = "ascend")]
impl In<'_> {
    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        match self {
            In::Host(b) => b.len(),
            In::Npu(n) => n.len(),
        }
    }
}

#[cfg(feature = "ascend")]
impl Out<'_> {
    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        match self {
            Out::Host(b) => b.len(),
            Out::Npu(n) => n.len(),
        }
    }
}

/// A buffer as a call sees it, before the check against the
/// communicator's device.
pub(crate) enum Side<'a> {
    Host(&'a [u8]),
    Device(&'a Home, In<'a>),
}

/// [`Side`], writable.
pub(crate) enum SideMut<'a> {
    Host(&'a mut [u8]),
    Device(&'a Home, Out<'a>),
}

/// A readable buffer's memory, as the library sees it (opaque).
#[doc(hidden)]
pub struct Raw<'a>(pub(crate) Side<'a>);

/// A writable buffer's memory, as the library sees it (opaque).
#[doc(hidden)]
pub struct RawMut<'a>(pub(crate) SideMut<'a>);

mod sealed {
    /// What the library reads of a buffer; implemented here only.
    pub trait Sealed {
        /// Elements held.
        fn elems(&self) -> usize;
        /// The memory.
        fn raw(&self) -> super::Raw<'_>;
    }

    /// What the library writes of a buffer; implemented here only.
    pub trait SealedMut {
        /// The memory, writable.
        fn raw_mut(&mut self) -> super::RawMut<'_>;
    }
}

/// Memory a collective reads: a host slice (`[T]`, `[T; N]`, `Vec<T>`,
/// references to them) or a [`DeviceBuffer<T>`], of element type
/// [`Buffer::Elem`]. Sealed: these are all the kinds there are.
pub trait Buffer: sealed::Sealed {
    /// The element type (its [`Element::DTYPE`] is the call's data type).
    type Elem: Element;
}

/// Memory a collective writes: as [`Buffer`], mutable.
pub trait BufferMut: Buffer + sealed::SealedMut {}

impl<T: Element> sealed::Sealed for [T] {
    fn elems(&self) -> usize {
        self.len()
    }
    fn raw(&self) -> Raw<'_> {
        Raw(Side::Host(bytes(self)))
    }
}
impl<T: Element> sealed::SealedMut for [T] {
    fn raw_mut(&mut self) -> RawMut<'_> {
        RawMut(SideMut::Host(bytes_mut(self)))
    }
}
impl<T: Element> Buffer for [T] {
    type Elem = T;
}
impl<T: Element> BufferMut for [T] {}

impl<T: Element, const N: usize> sealed::Sealed for [T; N] {
    fn elems(&self) -> usize {
        N
    }
    fn raw(&self) -> Raw<'_> {
        self[..].raw()
    }
}
impl<T: Element, const N: usize> sealed::SealedMut for [T; N] {
    fn raw_mut(&mut self) -> RawMut<'_> {
        self[..].raw_mut()
    }
}
impl<T: Element, const N: usize> Buffer for [T; N] {
    type Elem = T;
}
impl<T: Element, const N: usize> BufferMut for [T; N] {}

impl<T: Element> sealed::Sealed for Vec<T> {
    fn elems(&self) -> usize {
        self.len()
    }
    fn raw(&self) -> Raw<'_> {
        self[..].raw()
    }
}
impl<T: Element> sealed::SealedMut for Vec<T> {
    fn raw_mut(&mut self) -> RawMut<'_> {
        self[..].raw_mut()
    }
}
impl<T: Element> Buffer for Vec<T> {
    type Elem = T;
}
impl<T: Element> BufferMut for Vec<T> {}

impl<B: Buffer + ?Sized> sealed::Sealed for &B {
    fn elems(&self) -> usize {
        (**self).elems()
    }
    fn raw(&self) -> Raw<'_> {
        (**self).raw()
    }
}
impl<B: Buffer + ?Sized> Buffer for &B {
    type Elem = B::Elem;
}

impl<B: Buffer + ?Sized> sealed::Sealed for &mut B {
    fn elems(&self) -> usize {
        (**self).elems()
    }
    fn raw(&self) -> Raw<'_> {
        (**self).raw()
    }
}
impl<B: BufferMut + ?Sized> sealed::SealedMut for &mut B {
    fn raw_mut(&mut self) -> RawMut<'_> {
        (**self).raw_mut()
    }
}
impl<B: Buffer + ?Sized> Buffer for &mut B {
    type Elem = B::Elem;
}
impl<B: BufferMut + ?Sized> BufferMut for &mut B {}

/// The memory of a [`DeviceBuffer`].
enum Mem<T> {
    Host(Vec<T>),
    #[cfg(feature = "ascend")]
    Npu {
        npu: Npu,
        len: usize,
    },
}

/// `len` elements of `T` on a communicator's device (see the module
/// docs): NPU memory from `aclrtMalloc` on the Ascend backend, host
/// memory on TCP and the simulator. Made by [`Comm::device_buffer`] or
/// [`Comm::device_buffer_from`]; freed on drop (`aclrtFree`). Pass it
/// wherever a collective takes a buffer (`&buf` to send, `&mut buf` to
/// receive); the element type is `T`, so a data-type mismatch with a
/// typed call does not compile, and the byte-level calls take a
/// `DeviceBuffer<u8>` whose length is checked in bytes. `Send + Sync`.
///
/// An AllReduce on device buffers, here on 2 simulated ranks (the same
/// code runs on NPUs with `Comm::init_all_ascend`, `--features ascend`):
///
/// ```
/// use hccl::comm::ReduceOp;
/// use hccl::{BackendKind, Comm};
///
/// let comms = Comm::init_all_on(BackendKind::Sim, 2)?;
/// let sums = std::thread::scope(|s| {
///     let ranks: Vec<_> = comms
///         .iter()
///         .map(|c| {
///             s.spawn(move || {
///                 let send = c.device_buffer_from(&[c.rank() as f32 + 1.0; 4])?;
///                 let mut recv = c.device_buffer::<f32>(4)?;
///                 c.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
///                 recv.to_vec()
///             })
///         })
///         .collect();
///     ranks.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
/// });
/// for sum in sums {
///     assert_eq!(sum?, vec![3.0; 4]);
/// }
/// # Ok::<(), hccl::CommError>(())
/// ```
pub struct DeviceBuffer<T: Element> {
    mem: Mem<T>,
    home: Home,
    _t: PhantomData<T>,
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("dtype", &T::DTYPE)
            .field("len", &self.len())
            .field("device", &self.home.describe())
            .finish()
    }
}

impl<T: Element> DeviceBuffer<T> {
    /// Elements held.
    pub fn len(&self) -> usize {
        match &self.mem {
            Mem::Host(v) => v.len(),
            #[cfg(feature = "ascend")]
            Mem::Npu { len, .. } => *len,
        }
    }

    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size in bytes (`len() * dtype().size()`).
    pub fn bytes(&self) -> u64 {
        self.len() as u64 * T::DTYPE.size()
    }

    /// The element type's HCCL data type.
    pub fn dtype(&self) -> DataType {
        T::DTYPE
    }

    /// Whether the memory is an NPU's (`false`: host memory, on TCP and
    /// the simulator).
    pub fn on_npu(&self) -> bool {
        match self.mem {
            Mem::Host(_) => false,
            #[cfg(feature = "ascend")]
            Mem::Npu { .. } => true,
        }
    }

    fn check_len(&self, what: &str, field: &str, got: usize) -> Result<(), CommError> {
        if got == self.len() {
            return Ok(());
        }
        Err(CommError::Shape {
            op: format!("DeviceBuffer<{}>::{what}", T::DTYPE),
            detail: format!(
                "{field}.len() = {got} but the device buffer holds {} elements; pass a slice of exactly DeviceBuffer::len() elements",
                self.len()
            ),
        })
    }

    /// Copies `src` into the buffer (host to device, `aclrtMemcpy`).
    ///
    /// # Errors
    /// [`CommError::Shape`] naming `src.len()` and the buffer's length if
    /// they differ (nothing is copied); CANN's copy error.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<(), CommError> {
        self.check_len("copy_from_host", "src", src.len())?;
        match &mut self.mem {
            Mem::Host(v) => {
                v.copy_from_slice(src);
                Ok(())
            }
            #[cfg(feature = "ascend")]
            Mem::Npu { npu, .. } => npu.write("DeviceBuffer::copy_from_host", bytes(src)),
        }
    }

    /// Copies the buffer into `dst` (device to host, `aclrtMemcpy`).
    ///
    /// # Errors
    /// [`CommError::Shape`] naming `dst.len()` and the buffer's length if
    /// they differ (`dst` is left as it was); CANN's copy error.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<(), CommError> {
        self.check_len("copy_to_host", "dst", dst.len())?;
        match &self.mem {
            Mem::Host(v) => {
                dst.copy_from_slice(v);
                Ok(())
            }
            #[cfg(feature = "ascend")]
            Mem::Npu { npu, .. } => npu.read("DeviceBuffer::copy_to_host", bytes_mut(dst)),
        }
    }

    /// The buffer's elements, copied to a new host `Vec`.
    ///
    /// # Errors
    /// CANN's copy error.
    pub fn to_vec(&self) -> Result<Vec<T>, CommError> {
        let mut v = vec![<T as bytemuck::Zeroable>::zeroed(); self.len()];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}

impl<T: Element> sealed::Sealed for DeviceBuffer<T> {
    fn elems(&self) -> usize {
        self.len()
    }
    fn raw(&self) -> Raw<'_> {
        let mem = match &self.mem {
            Mem::Host(v) => In::Host(bytes(v)),
            #[cfg(feature = "ascend")]
            Mem::Npu { npu, .. } => In::Npu(npu),
        };
        Raw(Side::Device(&self.home, mem))
    }
}
impl<T: Element> sealed::SealedMut for DeviceBuffer<T> {
    fn raw_mut(&mut self) -> RawMut<'_> {
        let mem = match &mut self.mem {
            Mem::Host(v) => Out::Host(bytes_mut(v)),
            #[cfg(feature = "ascend")]
            Mem::Npu { npu, .. } => Out::Npu(npu),
        };
        RawMut(SideMut::Device(&self.home, mem))
    }
}
impl<T: Element> Buffer for DeviceBuffer<T> {
    type Elem = T;
}
impl<T: Element> BufferMut for DeviceBuffer<T> {}

/// The elements in a buffer (crate-internal view of the sealed trait).
pub(crate) fn elems<B: Buffer + ?Sized>(b: &B) -> usize {
    sealed::Sealed::elems(b)
}

/// A buffer's memory (crate-internal view of the sealed trait).
pub(crate) fn side<B: Buffer + ?Sized>(b: &B) -> Side<'_> {
    sealed::Sealed::raw(b).0
}

/// A buffer's memory, writable (crate-internal view of the sealed trait).
pub(crate) fn side_mut<B: BufferMut + ?Sized>(b: &mut B) -> SideMut<'_> {
    sealed::SealedMut::raw_mut(b).0
}

impl Comm {
    /// A buffer of `len` zeroed elements of `T` on this rank's device
    /// (see the module docs: NPU memory from `aclrtMalloc` on the Ascend
    /// backend, host memory on TCP and the simulator). Usable by every
    /// communicator of this rank's device; freed on drop.
    ///
    /// # Errors
    /// [`CommError::Shape`] if `len` elements overflow the address space;
    /// CANN's allocation or copy error (`CommError::Ascend`:
    /// `aclrtMalloc` out of device memory names the function and code).
    pub fn device_buffer<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>, CommError> {
        let home = self.shared.home().clone();
        let size = len.checked_mul(std::mem::size_of::<T>());
        let Some(_size) = size else {
            return Err(CommError::Shape {
                op: format!("Comm::device_buffer::<{}>", T::DTYPE),
                detail: format!("len = {len} elements overflow the address space"),
            });
        };
        let mem = match &home {
            Home::Host { .. } => Mem::Host(vec![<T as bytemuck::Zeroable>::zeroed(); len]),
            #[cfg(feature = "ascend")]
            Home::Npu { lib, device } => Mem::Npu {
                npu: Npu::alloc(lib, *device, _size)?,
                len,
            },
        };
        Ok(DeviceBuffer {
            mem,
            home,
            _t: PhantomData,
        })
    }

    /// A buffer on this rank's device holding a copy of `src`
    /// ([`Comm::device_buffer`] then [`DeviceBuffer::copy_from_host`]).
    ///
    /// # Errors
    /// As [`Comm::device_buffer`].
    pub fn device_buffer_from<T: Element>(&self, src: &[T]) -> Result<DeviceBuffer<T>, CommError> {
        let mut b = self.device_buffer(src.len())?;
        b.copy_from_host(src)?;
        Ok(b)
    }

    /// `side` checked against this rank's device: its memory, or
    /// [`CommError::WrongDevice`] naming `op` and `what` (the op's buffer;
    /// `op` is formatted only then, not on every call).
    pub(crate) fn resolve<'a>(
        &self,
        op: &dyn std::fmt::Display,
        what: &'static str,
        side: Side<'a>,
    ) -> Result<In<'a>, CommError> {
        match side {
            Side::Host(b) => Ok(In::Host(b)),
            Side::Device(home, mem) => {
                self.shared.check_home(op, what, home)?;
                Ok(mem)
            }
        }
    }

    /// [`Comm::resolve`], writable.
    pub(crate) fn resolve_mut<'a>(
        &self,
        op: &dyn std::fmt::Display,
        what: &'static str,
        side: SideMut<'a>,
    ) -> Result<Out<'a>, CommError> {
        match side {
            SideMut::Host(b) => Ok(Out::Host(b)),
            SideMut::Device(home, mem) => {
                self.shared.check_home(op, what, home)?;
                Ok(mem)
            }
        }
    }
}

impl Shared {
    /// [`CommError::WrongDevice`] unless `home` is this rank's device.
    pub(crate) fn check_home(
        &self,
        op: &dyn std::fmt::Display,
        what: &'static str,
        home: &Home,
    ) -> Result<(), CommError> {
        let here = self.home();
        if here.same(home) {
            return Ok(());
        }
        Err(CommError::WrongDevice {
            op: op.to_string(),
            what,
            from: home.describe(),
            // A host home names its rank and communicator already.
            here: match here {
                Home::Host { .. } => here.describe(),
                #[cfg(feature = "ascend")]
                Home::Npu { .. } => format!(
                    "{} (rank {} of communicator '{}')",
                    here.describe(),
                    self.rank,
                    self.name
                ),
            },
        })
    }
}

/// A collective's memory with at least one side on an NPU, checked
/// against the communicator's device.
#[cfg(feature = "ascend")]
pub(crate) enum DevBufs<'a> {
    /// Separate send and receive memory.
    Separate(In<'a>, Out<'a>),
    /// One NPU buffer, placed as `CollectiveArgs::alias` says.
    InPlace(&'a Npu),
}

#[cfg(feature = "ascend")]
impl Comm {
    /// The run path of a collective with NPU memory (`run_locked`'s twin):
    /// the buffers checked against the call, then the backend's own call
    /// on the device pointers when it has one ([`super::backend::Backend::direct`]:
    /// native mode), else the op staged through host memory, the device
    /// output written only once the op has succeeded.
    pub(crate) fn run_device_locked(
        shared: &Shared,
        st: &mut super::State,
        seq: u64,
        args: &hccl_algos::collective::CollectiveArgs,
        bufs: DevBufs<'_>,
    ) -> Result<(), CommError> {
        use super::run::{check_lens, Call, Lens, UserBufs};
        let op = format!("comm '{}' {:?} #{seq}", shared.name, args.kind);
        args.validate()?;
        let rank = shared.rank;
        let (inb, outb) = args.io_bytes(rank);
        let (inb, outb) = (inb as usize, outb as usize);
        // An unused buffer may have any size, as on the host path.
        let lens = match &bufs {
            DevBufs::Separate(i, o) => Lens::Separate(
                if inb == 0 { 0 } else { i.len() },
                if outb == 0 { 0 } else { o.len() },
            ),
            DevBufs::InPlace(n) => Lens::InPlace(n.len()),
        };
        check_lens(&op, args, rank, lens)?;
        let wide = super::lock(&shared.precision).widened(args).is_some();
        let direct = !wide && st.backend.as_ref().is_some_and(|b| b.direct(args));
        if direct {
            let prepared = Comm::prepare(shared, seq, (args, args, false))?;
            return Comm::run_on_backend(shared, st, prepared, Call::Device(bufs));
        }
        match bufs {
            DevBufs::Separate(i, o) => {
                let staged;
                let input: &[u8] = match i {
                    In::Host(b) => b,
                    In::Npu(n) => {
                        let mut v = vec![0u8; inb];
                        n.read(&op, &mut v)?;
                        staged = v;
                        &staged
                    }
                };
                match o {
                    Out::Host(b) => {
                        let user = Call::Host(UserBufs::Separate(input, b));
                        Comm::run_locked(shared, st, seq, args, user)
                    }
                    Out::Npu(n) => {
                        let mut out = vec![0u8; outb];
                        let user = Call::Host(UserBufs::Separate(input, &mut out));
                        Comm::run_locked(shared, st, seq, args, user)?;
                        n.write(&op, &out)
                    }
                }
            }
            DevBufs::InPlace(n) => {
                let mut host = vec![0u8; n.len()];
                n.read(&op, &mut host)?;
                let user = Call::Host(UserBufs::InPlace(&mut host));
                Comm::run_locked(shared, st, seq, args, user)?;
                n.write(&op, &host)
            }
        }
    }
}

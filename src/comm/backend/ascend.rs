//! The Ascend backend (`--features ascend`, `HCCL_BACKEND=ascend`): each
//! rank is an HCCL communicator of CANN, opened at run time through
//! [`hccl_ascend_sys`], on one NPU with its own stream and device buffers.
//!
//! Two modes (`HCCL_ASCEND_MODE`, [`AscendMode`]):
//!
//! - **native** (default): each collective is HCCL's own call
//!   (`HcclAllReduce`, ...) on device buffers and the rank's stream. The
//!   facade's checks, ordering, profiling and flight recorder run as on
//!   every backend; the algorithm is HCCL's. What HCCL has no call for
//!   (Gather, the `Avg` reduce op, the V calls on a CANN without
//!   `HcclAllGatherV` / `HcclReduceScatterV`) runs as in schedule mode.
//! - **schedule**: the facade's plan (hccl-rs's verified schedule, the one
//!   the simulator and TCP run) is executed by [`super::ascend_schedule`]
//!   over `HcclBatchSendRecv`, with copies and reductions on the host.
//!
//! Before each collective the ranks exchange their op signatures (one
//! 32-byte `HcclAllGather`, `HCCL_ASCEND_CHECK=0` skips it), so a mismatch
//! fails every rank with TCP's words before HCCL runs the op.
//!
//! Point-to-point calls are one `HcclBatchSendRecv` per call in both
//! modes. Host slices are copied to device buffers the backend owns (kept
//! and grown between ops) and back; a [`crate::DeviceBuffer`] ([`Npu`]
//! memory) is passed to HCCL as it is, in native mode's collectives and
//! in point-to-point calls of both modes (schedule mode stages a
//! collective's device buffers through the host, in the facade). Every
//! call synchronises the stream before it returns (`hccl_ascend_sys`'s
//! safety model).

use std::borrow::Cow;
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::ReduceOp;
use hccl_ascend_sys::types::{HcclRootInfo, HCCL_RECV, HCCL_SEND};
use hccl_ascend_sys::{AscendError, At, DeviceMem, Library, Stream};
use hccl_hw::tcp::AbortKind;

use super::{ascend_schedule, Backend, Interrupt, Prepared, Splitter};
use crate::comm::device::{DevBufs, In, Out};
use crate::comm::p2p::{P2pBuf, P2pItem, P2pKind};
use crate::comm::plan::HostFit;
use crate::comm::profile::OpTime;
use crate::comm::run::UserBufs;
use crate::comm::{lock, signature, BackendError, BackendKind, CommError, Shared};

/// How the Ascend backend runs collectives (`HCCL_ASCEND_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AscendMode {
    /// `native`: HCCL's own collective calls (HCCL's algorithms).
    #[default]
    Native,
    /// `schedule`: hccl-rs's plans over `HcclBatchSendRecv`, copies and
    /// reductions staged through host memory.
    Schedule,
}

impl AscendMode {
    /// `HCCL_ASCEND_MODE` (`native` or `schedule`, any case; unset:
    /// native).
    ///
    /// # Errors
    /// [`CommError::Env`] for another value.
    pub fn from_env() -> Result<AscendMode, CommError> {
        let v = std::env::var("HCCL_ASCEND_MODE").unwrap_or_default();
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "native" => Ok(AscendMode::Native),
            "schedule" => Ok(AscendMode::Schedule),
            _ => Err(CommError::Env {
                var: "HCCL_ASCEND_MODE",
                value: v,
                reason: "accepted: native (HCCL's collectives, the default), schedule (hccl-rs's plans over HcclBatchSendRecv)".into(),
            }),
        }
    }
}

/// Where CANN is and how to run on it: what [`crate::Comm::init_all_ascend`]
/// takes ([`AscendSettings::from_env`] reads the variables).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AscendSettings {
    /// The directory holding `libhccl.so` and `libascendcl.so` (`None`:
    /// `$ASCEND_HOME_PATH/lib64`, `$ASCEND_TOOLKIT_HOME/lib64`, then the
    /// system path; see [`hccl_ascend_sys::Library::load`]).
    pub library_dir: Option<PathBuf>,
    /// The mode (`HCCL_ASCEND_MODE`).
    pub mode: AscendMode,
}

impl AscendSettings {
    /// `HCCL_ASCEND_MODE`, and the libraries found through
    /// `ASCEND_HOME_PATH` as CANN's `set_env.sh` sets it.
    ///
    /// # Errors
    /// [`CommError::Env`] for a bad `HCCL_ASCEND_MODE`.
    pub fn from_env() -> Result<AscendSettings, CommError> {
        Ok(AscendSettings {
            library_dir: None,
            mode: AscendMode::from_env()?,
        })
    }
}

/// A CANN error as the facade reports it, in the op `op` ("" if none).
pub(crate) fn err(op: &str, error: AscendError) -> CommError {
    CommError::Ascend {
        op: op.to_string(),
        error,
    }
}

/// The library of `dir` (or of the environment), opened once per process
/// with `aclInit` called.
pub(crate) fn library(dir: Option<&Path>) -> Result<Arc<Library>, CommError> {
    static LIBS: Mutex<Vec<(Option<PathBuf>, Arc<Library>)>> = Mutex::new(Vec::new());
    let mut libs = lock(&LIBS);
    if let Some((_, l)) = libs.iter().find(|(d, _)| d.as_deref() == dir) {
        return Ok(Arc::clone(l));
    }
    let lib = match dir {
        Some(d) => Library::load_from(d),
        None => Library::load(),
    }
    .map_err(|e| err("", e))?;
    refuse_own_library_under_env(&lib)?;
    lib.init().map_err(|e| err("", e))?;
    libs.push((dir.map(Path::to_path_buf), Arc::clone(&lib)));
    Ok(lib)
}

/// hccl-rs's own `libhccl.so` (the C API, which holds ACL too) reads
/// `HCCL_BACKEND` as well and runs its ranks only on TCP or the simulator:
/// under `HCCL_BACKEND=ascend` every communicator it builds fails (with
/// `HCCL_E_NOT_SUPPORT`), so say why before any call is made.
fn refuse_own_library_under_env(lib: &Library) -> Result<(), CommError> {
    let Ok(v) = std::env::var("HCCL_BACKEND") else {
        return Ok(());
    };
    if !lib.acl_in_hccl() || !v.trim().eq_ignore_ascii_case("ascend") {
        return Ok(());
    }
    Err(CommError::Env {
        var: "HCCL_BACKEND",
        value: v,
        reason: format!(
            "{} is hccl-rs's own libhccl.so (hccl-capi install's prefix: it holds the ACL runtime too), which reads HCCL_BACKEND as well and runs its ranks only on tcp or sim; leave HCCL_BACKEND unset in this process and choose the Ascend backend with --transport ascend (hccl test) or BackendKind::Ascend (Comm::from_env_on, Comm::init_all_ascend)",
            lib.hccl_path()
        ),
    })
}

thread_local! {
    /// The (library, device) this thread last set with `aclrtSetDevice`.
    static CURRENT: Cell<Option<(usize, i32)>> = const { Cell::new(None) };
}

/// Makes `device` this thread's device (ACL's device is per thread; ops
/// of a communicator may come from any thread).
pub(crate) fn on_device(lib: &Arc<Library>, device: i32) -> Result<(), CommError> {
    let key = (Arc::as_ptr(lib) as usize, device);
    if CURRENT.with(|c| c.get()) == Some(key) {
        return Ok(());
    }
    lib.set_device(device).map_err(|e| err("", e))?;
    CURRENT.with(|c| c.set(Some(key)));
    Ok(())
}

/// The NPU of `rank` of a job launched by a launcher or a rank table:
/// `ASCEND_DEVICE_ID` if set (CANN's variable), else the launcher's local
/// rank (`LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`), else `rank` modulo
/// the NPUs this process sees (`aclrtGetDeviceCount`).
pub(crate) fn device_for(lib: &Library, rank: u32) -> Result<i32, CommError> {
    for var in [
        "ASCEND_DEVICE_ID",
        "LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
    ] {
        if let Ok(v) = std::env::var(var) {
            return v.trim().parse::<i32>().map_err(|_| CommError::Env {
                var,
                value: v,
                reason: "not a device number (see `npu-smi info`)".into(),
            });
        }
    }
    let n = lib.device_count().map_err(|e| err("", e))?;
    if n == 0 {
        return Err(CommError::Unsupported(
            "aclrtGetDeviceCount found no NPU: check `npu-smi info` and that the driver is loaded"
                .into(),
        ));
    }
    Ok((rank % n) as i32)
}

/// The NPU memory of a [`crate::DeviceBuffer`] on the Ascend backend:
/// `aclrtMalloc`'d on `device` of `lib`, freed (on that device) on drop.
pub(crate) struct Npu {
    lib: Arc<Library>,
    device: i32,
    pub(crate) mem: DeviceMem,
}

impl Npu {
    /// `len` bytes on `device`, zeroed (a host copy of zeros: ACL's
    /// memset is not among the calls loaded).
    pub(crate) fn alloc(lib: &Arc<Library>, device: i32, len: usize) -> Result<Npu, CommError> {
        const OP: &str = "Comm::device_buffer";
        on_device(lib, device)?;
        let mem = lib.malloc(len).map_err(|e| err(OP, e))?;
        lib.copy_to_device(&mem, 0, &vec![0u8; len])
            .map_err(|e| err(OP, e))?;
        Ok(Npu {
            lib: Arc::clone(lib),
            device,
            mem,
        })
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        self.mem.len()
    }

    /// Host to device: `src` at offset 0, in op `op` (errors name it).
    pub(crate) fn write(&self, op: &str, src: &[u8]) -> Result<(), CommError> {
        on_device(&self.lib, self.device)?;
        self.lib
            .copy_to_device(&self.mem, 0, src)
            .map_err(|e| err(op, e))
    }

    /// Device to host: the first `dst.len()` bytes, in op `op`.
    pub(crate) fn read(&self, op: &str, dst: &mut [u8]) -> Result<(), CommError> {
        on_device(&self.lib, self.device)?;
        self.lib
            .copy_from_device(dst, &self.mem, 0)
            .map_err(|e| err(op, e))
    }
}

impl Drop for Npu {
    fn drop(&mut self) {
        // aclrtFree runs on the memory's device.
        let _ = on_device(&self.lib, self.device);
    }
}

/// One side of a native call's input: host bytes (copied into the kept
/// input buffer), the kept input buffer as it is, or the user's device
/// memory at a byte offset.
enum Src<'a> {
    Host(&'a [u8]),
    Kept,
    Dev(&'a DeviceMem, usize),
}

/// A native call's output: host bytes (copied back from the kept output
/// buffer) or the user's device memory at a byte offset.
enum Dst<'a> {
    Host(&'a mut [u8]),
    Dev(&'a DeviceMem, usize),
}

/// One rank's communicator of CANN's HCCL.
pub(crate) struct AscendBackend {
    lib: Arc<Library>,
    comm: hccl_ascend_sys::Comm,
    stream: Stream,
    device: i32,
    mode: AscendMode,
    exec_timeout: Option<Duration>,
    /// Device buffers kept between ops: input, output, staging.
    bufs: [Option<DeviceMem>; 3],
    /// Why this rank failed or was aborted (later ops fail with it).
    broken: Arc<Mutex<Option<String>>>,
    started: Option<Instant>,
    /// Compare the ranks' op signatures before each collective
    /// (`HCCL_ASCEND_CHECK`, default on).
    check: bool,
}

/// `HCCL_ASCEND_CHECK`: `0` skips the signature exchange before each
/// collective (one 32-byte `HcclAllGather`); anything else, or unset,
/// keeps it. Set it alike on every rank.
fn check_from_env() -> bool {
    std::env::var("HCCL_ASCEND_CHECK")
        .ok()
        .is_none_or(|v| v.trim() != "0")
}

/// Which kept device buffer.
#[derive(Clone, Copy)]
pub(crate) enum Buf {
    In = 0,
    Out = 1,
    Staging = 2,
}

impl AscendBackend {
    /// A backend over `comm`, on `device`, with a new stream (this thread
    /// must have `device` set).
    pub(crate) fn new(
        lib: Arc<Library>,
        comm: hccl_ascend_sys::Comm,
        device: i32,
        mode: AscendMode,
        exec_timeout: Option<Duration>,
    ) -> Result<AscendBackend, CommError> {
        on_device(&lib, device)?;
        let stream = lib.stream().map_err(|e| err("", e))?;
        Ok(AscendBackend {
            lib,
            comm,
            stream,
            device,
            mode,
            exec_timeout,
            bufs: [None, None, None],
            broken: Arc::default(),
            started: None,
            check: check_from_env(),
        })
    }

    /// Joins `nranks` ranks as `rank` through CANN's `root` on `device`
    /// (`HcclCommInitRootInfo`; blocks until every rank joined).
    pub(crate) fn join(
        lib: &Arc<Library>,
        root: &HcclRootInfo,
        (nranks, rank, device): (u32, u32, i32),
        mode: AscendMode,
        exec_timeout: Option<Duration>,
    ) -> Result<AscendBackend, CommError> {
        on_device(lib, device)?;
        let comm = lib
            .init_root_info(nranks, root, rank)
            .map_err(|e| err("", e))?;
        AscendBackend::new(Arc::clone(lib), comm, device, mode, exec_timeout)
    }

    /// The communicator's ranks (`HcclGetRankSize`).
    pub(crate) fn size(&self) -> Result<u32, CommError> {
        self.comm.size().map_err(|e| err("", e))
    }

    /// Kept device buffer `which`, at least `len` bytes (grown, never
    /// shrunk).
    pub(crate) fn buf(&mut self, which: Buf, len: usize) -> Result<&DeviceMem, CommError> {
        let slot = &mut self.bufs[which as usize];
        if slot.as_ref().is_none_or(|m| m.len() < len) {
            *slot = None;
            let m = self.lib.malloc(len.max(64)).map_err(|e| err("", e))?;
            *slot = Some(m);
        }
        match slot.as_ref() {
            Some(m) => Ok(m),
            None => Err(CommError::Broken("device buffer missing".into())),
        }
    }

    /// The staging buffer (at least `len` bytes), with the library,
    /// communicator and stream, for the schedule and p2p paths.
    pub(crate) fn staging(
        &mut self,
        len: usize,
    ) -> Result<(&Arc<Library>, &hccl_ascend_sys::Comm, &Stream, &DeviceMem), CommError> {
        self.buf(Buf::Staging, len)?;
        let m = self.bufs[Buf::Staging as usize]
            .as_ref()
            .ok_or_else(|| CommError::Broken("staging buffer missing".into()))?;
        Ok((&self.lib, &self.comm, &self.stream, m))
    }

    /// What every op does first: the communicator is usable, this thread
    /// is on its NPU, and (unless `HCCL_ASCEND_CHECK=0`) the ranks agree
    /// on the op. Returns the op's name for errors and its start time.
    fn begin(&mut self, sh: &Shared, op: &Prepared<'_>) -> Result<(String, Instant), CommError> {
        self.check_broken()?;
        on_device(&self.lib, self.device)?;
        let name = format!("comm '{}' {:?} #{}", sh.name, op.args.kind, op.seq);
        let start = Instant::now();
        self.started = Some(start);
        if self.check {
            self.agree(&name, op, sh.rank, sh.size)?;
        }
        Ok((name, start))
    }

    /// Every rank's op signature (as TCP encodes it, without the
    /// algorithm: in native mode HCCL picks it), gathered with one
    /// `HcclAllGather`; ranks that called different ops, counts, types,
    /// ops or roots all fail before HCCL runs the op, with TCP's words.
    fn agree(
        &mut self,
        name: &str,
        op: &Prepared<'_>,
        me: u32,
        size: u32,
    ) -> Result<(), CommError> {
        const W: usize = hccl_hw::tcp::wire::SIG_LEN;
        let mut mine = signature::encode(&op.sig);
        mine[3] = u8::from(op.wide);
        let n = size as usize;
        let (lib, comm, stream, staging) = self.staging(W * (n + 1))?;
        let e = |x| err(name, x);
        lib.copy_to_device(staging, 0, &mine).map_err(e)?;
        comm.all_gather(
            (staging, 0),
            (staging, W),
            W as u64,
            hccl_ascend_sys::types::HCCL_DATA_TYPE_UINT8,
            stream,
        )
        .map_err(e)?;
        let mut all = vec![0u8; W * n];
        lib.copy_from_device(&mut all, staging, W).map_err(e)?;
        for (peer, theirs) in all.chunks(W).enumerate() {
            let mut remote = [0u8; W];
            remote.copy_from_slice(theirs);
            if remote != mine {
                let spec = op.planned.algo;
                let text = signature::describe(
                    op.called,
                    &op.sig,
                    (&spec, op.wide),
                    me,
                    &remote,
                    peer as u32,
                );
                return Err(CommError::Mismatch(BackendError::Ascend(format!(
                    "{name}: {text}"
                ))));
            }
        }
        Ok(())
    }

    fn check_broken(&self) -> Result<(), CommError> {
        match lock(&self.broken).as_ref() {
            Some(r) => Err(CommError::Broken(r.clone())),
            None => Ok(()),
        }
    }

    /// Whether HCCL has a call for `args` (else it runs as a schedule).
    fn native_call(&self, args: &CollectiveArgs) -> bool {
        if args.kind.is_reduction() && args.op == ReduceOp::Avg {
            return false;
        }
        match args.kind {
            CollectiveKind::Gather | CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => {
                false
            }
            CollectiveKind::AllGatherV => self.lib.supports("HcclAllGatherV"),
            CollectiveKind::ReduceScatterV => self.lib.supports("HcclReduceScatterV"),
            _ => true,
        }
    }

    /// HCCL's own call for `args`: host input copied to the device, the
    /// call (on the user's device memory where a side is a device
    /// buffer), host output copied back.
    fn native(
        &mut self,
        op: &str,
        args: &CollectiveArgs,
        input: Src<'_>,
        output: Dst<'_>,
        me: u32,
    ) -> Result<(), CommError> {
        let e = |x| err(op, x);
        let (inb, outb) = args.io_bytes(me);
        let (inb, outb) = (inb as usize, outb as usize);
        let dt = args.dtype as i32;
        let rop = args.op as i32;
        let count = args.count;
        // Reduce's non-roots pass their input as the (unwritten) receive
        // buffer; Broadcast runs in the output buffer.
        if !matches!(input, Src::Dev(..)) {
            self.buf(Buf::In, inb)?;
        }
        if matches!(output, Dst::Host(_)) {
            self.buf(
                Buf::Out,
                outb.max(if args.kind == CollectiveKind::Reduce {
                    inb
                } else {
                    0
                }),
            )?;
        }
        let lib = Arc::clone(&self.lib);
        let missing = || CommError::Broken("device buffers missing".into());
        let din: At<'_> = match &input {
            Src::Host(_) | Src::Kept => (self.bufs[0].as_ref().ok_or_else(missing)?, 0),
            Src::Dev(m, at) => (*m, *at),
        };
        let dout: At<'_> = match &output {
            Dst::Host(_) => (self.bufs[1].as_ref().ok_or_else(missing)?, 0),
            Dst::Dev(m, at) => (*m, *at),
        };
        let (c, s) = (&self.comm, &self.stream);
        if let Src::Host(b) = input {
            let to = match args.kind {
                CollectiveKind::Broadcast => dout,
                _ => din,
            };
            lib.copy_to_device(to.0, to.1, b).map_err(e)?;
        }
        let r = match args.kind {
            CollectiveKind::AllReduce => c.all_reduce(din, dout, count, dt, rop, s),
            CollectiveKind::Broadcast => c.broadcast(dout, count, dt, args.root, s),
            CollectiveKind::ReduceScatter => c.reduce_scatter(din, dout, count, dt, rop, s),
            CollectiveKind::AllGather => c.all_gather(din, dout, count, dt, s),
            CollectiveKind::Reduce => {
                let recv = if me == args.root { dout } else { din };
                c.reduce(din, recv, count, dt, rop, args.root, s)
            }
            CollectiveKind::Scatter => c.scatter(din, dout, count, dt, args.root, s),
            CollectiveKind::AllToAll => c.all_to_all(din, dout, count, dt, s),
            CollectiveKind::AllToAllV => {
                let m = args.send_matrix.as_ref().ok_or_else(|| CommError::Shape {
                    op: op.to_string(),
                    detail: "AllToAllV without a count matrix".into(),
                })?;
                let (n, r) = (m.n(), me as usize);
                let sc: Vec<u64> = (0..n).map(|j| m.get(r, j)).collect();
                let sd: Vec<u64> = (0..n).map(|j| m.send_displ(r, j)).collect();
                let rc: Vec<u64> = (0..n).map(|i| m.get(i, r)).collect();
                let rd: Vec<u64> = (0..n).map(|i| m.recv_displ(r, i)).collect();
                c.all_to_all_v((din, &sc, &sd), (dout, &rc, &rd), dt, s)
            }
            CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => {
                let v = args.counts.as_ref().ok_or_else(|| CommError::Shape {
                    op: op.to_string(),
                    detail: "a V call without counts".into(),
                })?;
                let cs: Vec<u64> = v.counts().to_vec();
                let ds: Vec<u64> = (0..v.len()).map(|i| v.displ(i)).collect();
                let mine = v.count(me as usize);
                if args.kind == CollectiveKind::AllGatherV {
                    c.all_gather_v((din, mine), (dout, &cs, &ds), dt, s)
                } else {
                    c.reduce_scatter_v((din, &cs, &ds), (dout, mine), dt, rop, s)
                }
            }
            CollectiveKind::Barrier => c.barrier(s),
            CollectiveKind::Gather | CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => {
                return Err(CommError::Unsupported(format!(
                    "{op}: HCCL has no call for {:?}",
                    args.kind
                )))
            }
        };
        r.map_err(e)?;
        match output {
            Dst::Host(o) => lib.copy_from_device(o, dout.0, dout.1).map_err(e),
            Dst::Dev(..) => Ok(()),
        }
    }

    /// A direct collective on device memory (native mode): see
    /// [`Backend::run_device`]. An in-place call's input is first copied
    /// on the device into the kept input buffer (HCCL's calls differ in
    /// which overlaps they allow; Broadcast is one buffer anyway).
    fn native_device(
        &mut self,
        op: &str,
        args: &CollectiveArgs,
        bufs: DevBufs<'_>,
        me: u32,
    ) -> Result<(), CommError> {
        match bufs {
            DevBufs::Separate(i, o) => {
                let input = match i {
                    In::Host(b) => Src::Host(b),
                    In::Npu(n) => Src::Dev(&n.mem, 0),
                };
                let output = match o {
                    Out::Host(b) => Dst::Host(b),
                    Out::Npu(n) => Dst::Dev(&n.mem, 0),
                };
                self.native(op, args, input, output, me)
            }
            DevBufs::InPlace(n) => {
                let (ia, oa) = args
                    .alias(me)
                    .map_or((0, 0), |a| (a.input_at as usize, a.output_at as usize));
                if args.kind == CollectiveKind::Broadcast {
                    return self.native(op, args, Src::Dev(&n.mem, ia), Dst::Dev(&n.mem, oa), me);
                }
                let inb = args.io_bytes(me).0 as usize;
                self.buf(Buf::In, inb)?;
                if let Some(kept) = &self.bufs[Buf::In as usize] {
                    self.lib
                        .copy_device((kept, 0), (&n.mem, ia), inb)
                        .map_err(|x| err(op, x))?;
                }
                self.native(op, args, Src::Kept, Dst::Dev(&n.mem, oa), me)
            }
        }
    }
}

/// The user's input (copied when it overlaps the output) and output of
/// a call on `rank`.
pub(crate) fn split_user<'a>(
    args: &CollectiveArgs,
    rank: u32,
    user: UserBufs<'a>,
) -> (Cow<'a, [u8]>, &'a mut [u8]) {
    let (inb, outb) = args.io_bytes(rank);
    let (inb, outb) = (inb as usize, outb as usize);
    match (user, args.alias(rank)) {
        (UserBufs::Separate(i, o), _) => (Cow::Borrowed(i), o),
        (UserBufs::InPlace(b), Some(a)) => {
            let (ia, oa) = (a.input_at as usize, a.output_at as usize);
            let input = b[ia..ia + inb].to_vec();
            (Cow::Owned(input), &mut b[oa..oa + outb])
        }
        (UserBufs::InPlace(b), None) => {
            let input = b[..inb].to_vec();
            (Cow::Owned(input), &mut b[..outb])
        }
    }
}

impl Drop for AscendBackend {
    fn drop(&mut self) {
        // HcclCommDestroy and the frees run on this thread's device.
        let _ = on_device(&self.lib, self.device);
    }
}

impl Backend for AscendBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Ascend
    }

    /// One host, ranks not sliced: the plans schedule mode runs (HCCL
    /// chooses its own in native mode); doubling then ends at
    /// `DOUBLING_MAX_BYTES_OVERSUBSCRIBED`, as on a crowded TCP host. The
    /// same on every rank.
    fn host_fit(&self) -> HostFit {
        HostFit {
            hosts: 1,
            ranks_fit_cpus: false,
        }
    }

    fn exec_timeout(&self) -> Option<Duration> {
        self.exec_timeout
    }

    /// Marks the rank failed: an HCCL call that runs cannot be ended
    /// from outside (CANN 8.1.RC1 has no abort for it); the next op fails.
    fn interrupter(&self) -> Interrupt {
        let b = Arc::clone(&self.broken);
        Arc::new(move |reason: &str| {
            lock(&b).get_or_insert_with(|| reason.to_string());
        })
    }

    fn run(
        &mut self,
        sh: &Shared,
        op: Prepared<'_>,
        user: UserBufs<'_>,
    ) -> Result<OpTime, CommError> {
        let (name, start) = self.begin(sh, &op)?;
        if self.direct(op.args) {
            let (input, output) = split_user(op.args, sh.rank, user);
            self.native(
                &name,
                op.args,
                Src::Host(&input),
                Dst::Host(output),
                sh.rank,
            )?;
        } else {
            // Every rank's plan: the rounds are computed from all of them.
            let mut plans = (0..sh.size)
                .map(|r| match r == sh.rank {
                    true => Ok(None),
                    false => sh.plan_of(op.args, r).map(Some),
                })
                .collect::<Result<Vec<_>, CommError>>()?;
            plans[sh.rank as usize] = Some(op.planned);
            let plans = plans.into_iter().flatten().collect();
            ascend_schedule::run(self, &name, op.args, plans, user, sh.rank)?;
        }
        Ok(OpTime::Measured(start, Instant::now()))
    }

    fn started(&self) -> Option<Instant> {
        self.started
    }

    fn npu(&self) -> Option<(Arc<Library>, i32)> {
        Some((Arc::clone(&self.lib), self.device))
    }

    /// Native mode's HCCL calls (not the ones run as schedules).
    fn direct(&self, args: &CollectiveArgs) -> bool {
        self.mode == AscendMode::Native && self.native_call(args)
    }

    /// HCCL's call on the device buffers' own memory, after the same
    /// signature check as [`Backend::run`]; host sides (a mix) go through
    /// the kept buffers.
    fn run_device(
        &mut self,
        sh: &Shared,
        op: Prepared<'_>,
        bufs: DevBufs<'_>,
    ) -> Result<OpTime, CommError> {
        let (name, start) = self.begin(sh, &op)?;
        self.native_device(&name, op.args, bufs, sh.rank)?;
        Ok(OpTime::Measured(start, Instant::now()))
    }

    /// One `HcclBatchSendRecv` of every item, staged through one device
    /// buffer; a pair's items in message-number order (HCCL matches a
    /// pair's messages in call order). Items of count 0 move nothing.
    fn p2p(
        &mut self,
        _sh: &Shared,
        name: &str,
        items: &mut [P2pItem<'_>],
        numbers: &[u64],
    ) -> Result<(), CommError> {
        self.check_broken()?;
        on_device(&self.lib, self.device)?;
        self.started = Some(Instant::now());
        let mut order: Vec<usize> = (0..items.len()).filter(|&i| items[i].count > 0).collect();
        order.sort_by_key(|&i| (items[i].peer, items[i].kind() == P2pKind::Recv, numbers[i]));
        // HCCL takes one send to and one receive from each peer per
        // batch: round k holds each pair's k-th message, on every rank.
        let mut rounds: Vec<Vec<usize>> = Vec::new();
        let mut seen: Vec<((u32, bool), usize)> = Vec::new();
        for &i in &order {
            let key = (items[i].peer, items[i].kind() == P2pKind::Recv);
            let k = match seen.iter_mut().find(|(x, _)| *x == key) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    seen.push((key, 0));
                    0
                }
            };
            if rounds.len() <= k {
                rounds.push(Vec::new());
            }
            rounds[k].push(i);
        }
        for round in rounds {
            self.p2p_batch(name, items, &round)?;
        }
        Ok(())
    }

    fn fail(&mut self, reason: &str, _kind: AbortKind) {
        lock(&self.broken).get_or_insert_with(|| reason.to_string());
    }

    fn async_error(&mut self) -> Option<CommError> {
        match self.comm.async_error() {
            Ok(Some(code)) => Some(err(
                "",
                AscendError::Hccl {
                    func: "HcclGetCommAsyncError",
                    code,
                    text: self.lib.error_string(code),
                    recent: self.lib.recent_error(),
                },
            )),
            Ok(None) => None,
            Err(e) => Some(err("", e)),
        }
    }

    /// HCCL does not say.
    fn unreceived(&mut self) -> Vec<(u32, u64, u64)> {
        Vec::new()
    }

    fn splitter(&self) -> Box<dyn Splitter> {
        Box::new(AscendSplitter {
            lib: Arc::clone(&self.lib),
            device: self.device,
            mode: self.mode,
            exec_timeout: self.exec_timeout,
        })
    }
}

impl AscendBackend {
    /// One `HcclBatchSendRecv` of `items[round]` (at most one send to and
    /// one receive from each peer), staged through one device buffer.
    fn p2p_batch(
        &mut self,
        name: &str,
        items: &mut [P2pItem<'_>],
        round: &[usize],
    ) -> Result<(), CommError> {
        // A host item's offset in the staging buffer; device buffers
        // (`None`) go to HCCL as they are.
        let mut at = Vec::with_capacity(round.len());
        let mut total = 0usize;
        for &i in round {
            if let P2pBuf::Npu { .. } = items[i].buf {
                at.push(None);
            } else {
                at.push(Some(total));
                total += align(items[i].len());
            }
        }
        let (lib, comm, stream, staging) = self.staging(total)?;
        let e = |x| err(name, x);
        for (k, &i) in round.iter().enumerate() {
            if let (P2pBuf::Send(b), Some(off)) = (&items[i].buf, at[k]) {
                lib.copy_to_device(staging, off, b).map_err(e)?;
            }
        }
        let list: Vec<_> = round
            .iter()
            .zip(&at)
            .map(|(&i, off)| {
                let it = &items[i];
                let kind = match it.kind() {
                    P2pKind::Send => HCCL_SEND,
                    P2pKind::Recv => HCCL_RECV,
                };
                let (mem, off) = match (&it.buf, off) {
                    (P2pBuf::Npu { npu, .. }, _) => (&npu.mem, 0),
                    (_, off) => (staging, off.unwrap_or(0)),
                };
                (kind, mem, off, it.count, it.dtype as i32, it.peer)
            })
            .collect();
        lib.batch_send_recv(&list, comm, stream).map_err(e)?;
        drop(list);
        for (k, &i) in round.iter().enumerate() {
            if let (P2pBuf::Recv(b), Some(off)) = (&mut items[i].buf, at[k]) {
                lib.copy_from_device(b, staging, off).map_err(e)?;
            }
        }
        Ok(())
    }
}

/// `n` rounded up to 64 bytes (each staged message starts aligned).
pub(crate) fn align(n: usize) -> usize {
    n.div_ceil(64) * 64
}

/// An Ascend split or sub-communicator: its rank 0 calls
/// `HcclGetRootInfo`; the token is the 4108-byte `HcclRootInfo`; each
/// member joins it with `HcclCommInitRootInfo` on its parent's device.
struct AscendSplitter {
    lib: Arc<Library>,
    device: i32,
    mode: AscendMode,
    exec_timeout: Option<Duration>,
}

impl Splitter for AscendSplitter {
    fn token_len(&self) -> usize {
        hccl_ascend_sys::types::HCCL_ROOT_INFO_BYTES
    }

    fn host(&self, _members: &[u32]) -> Result<Vec<u8>, CommError> {
        on_device(&self.lib, self.device)?;
        let r = self.lib.root_info().map_err(|e| err("split", e))?;
        Ok(r.to_bytes())
    }

    fn join(
        self: Box<Self>,
        token: &[u8],
        _name: &str,
        size: u32,
        new_rank: u32,
    ) -> Result<Box<dyn Backend>, CommError> {
        let root = HcclRootInfo::from_bytes(token).ok_or_else(|| {
            CommError::Unsupported(format!(
                "split: a token of {} bytes is not an HcclRootInfo (4108 bytes)",
                token.len()
            ))
        })?;
        let b = AscendBackend::join(
            &self.lib,
            &root,
            (size, new_rank, self.device),
            self.mode,
            self.exec_timeout,
        )?;
        Ok(Box::new(b))
    }
}

/// `ndev` ranks in this process on NPUs `0..ndev`, one thread each:
/// `HcclGetRootInfo` once, then `HcclCommInitRootInfo` on every rank's
/// thread (CANN's multi-thread pattern).
pub(crate) fn init_all(
    ndev: u32,
    s: &AscendSettings,
    exec_timeout: Option<Duration>,
) -> Result<Vec<AscendBackend>, CommError> {
    let lib = library(s.library_dir.as_deref())?;
    let have = lib.device_count().map_err(|e| err("", e))?;
    if ndev > have {
        return Err(CommError::Unsupported(format!(
            "init_all({ndev}) on Ascend: this process sees {have} NPUs (aclrtGetDeviceCount); check `npu-smi info` and ASCEND_RT_VISIBLE_DEVICES"
        )));
    }
    on_device(&lib, 0)?;
    let root = lib.root_info().map_err(|e| err("", e))?;
    let mode = s.mode;
    crate::comm::init::on_rank_threads(ndev, "Ascend", move |r| {
        AscendBackend::join(&lib, &root, (ndev, r, r as i32), mode, exec_timeout)
    })
}

/// Rank `rank` of the communicator of an HCCL rank table
/// (`HcclCommInitClusterInfo`), on [`device_for`]'s NPU.
pub(crate) fn init_cluster_info(
    path: &Path,
    rank: u32,
    s: &AscendSettings,
    exec_timeout: Option<Duration>,
) -> Result<AscendBackend, CommError> {
    let lib = library(s.library_dir.as_deref())?;
    let device = device_for(&lib, rank)?;
    on_device(&lib, device)?;
    let comm = lib.init_cluster_info(path, rank).map_err(|e| err("", e))?;
    AscendBackend::new(lib, comm, device, s.mode, exec_timeout)
}

/// `HcclGetRootInfo` on `device`: the 4108 bytes every rank passes to
/// [`AscendBackend::join`].
pub(crate) fn root_info(s: &AscendSettings, device: i32) -> Result<Vec<u8>, CommError> {
    let lib = library(s.library_dir.as_deref())?;
    on_device(&lib, device)?;
    Ok(lib.root_info().map_err(|e| err("", e))?.to_bytes())
}

/// Joins through root info bytes from [`root_info`].
pub(crate) fn join_bytes(
    root: &[u8],
    (nranks, rank, device): (u32, u32, Option<i32>),
    s: &AscendSettings,
    exec_timeout: Option<Duration>,
) -> Result<AscendBackend, CommError> {
    let lib = library(s.library_dir.as_deref())?;
    let root = HcclRootInfo::from_bytes(root).ok_or_else(|| CommError::Shape {
        op: "init_ascend_root_info".into(),
        detail: format!(
            "root info has {} bytes; HcclRootInfo has 4108 (HCCL_ROOT_INFO_BYTES)",
            root.len()
        ),
    })?;
    let device = match device {
        Some(d) => d,
        None => device_for(&lib, rank)?,
    };
    AscendBackend::join(&lib, &root, (nranks, rank, device), s.mode, exec_timeout)
}

//! The run path of a collective: the world-size check, the call's
//! arguments and the user's buffers checked against it before it takes a
//! turn (a refused call is not an op), `HCCL_REDUCE_PRECISION=fp32`
//! widening, planning ([`Comm::prepare`]), then the backend, then the
//! profile record.

use hccl_algos::collective::CollectiveArgs;

use super::backend::Prepared;
use super::device::{self, Buffer, BufferMut, In, Out};
use super::local::Waits;
use super::plan::{self, PlannedOp};
use super::recorder::{self, OpDesc};
use super::{drain, lock, Comm, CommError, OpHandle, Shared, State};

/// A collective's kind as errors name it (`AllReduce`), formatted only
/// when one is made.
struct KindName(hccl_algos::collective::CollectiveKind);

impl std::fmt::Display for KindName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// The user's memory for one call.
pub(crate) enum UserBufs<'a> {
    /// Separate send and receive buffers.
    Separate(&'a [u8], &'a mut [u8]),
    /// One buffer, placed as `CollectiveArgs::alias` says.
    InPlace(&'a mut [u8]),
}

/// A call's memory as the run path takes it: host bytes, or (with
/// `--features ascend`) memory of which some is on an NPU.
pub(crate) enum Call<'a> {
    Host(UserBufs<'a>),
    #[cfg(feature = "ascend")]
    Device(device::DevBufs<'a>),
}

impl Comm {
    /// Runs a collective on bytes: `input` and `output` sized as
    /// `args.io_bytes(rank)` says (HCCL's untyped calls with a data type).
    /// `args.world_size` must be this communicator's size. Each buffer is
    /// host bytes (`&[u8]`, `Vec<u8>`) or a `DeviceBuffer<u8>` of this
    /// rank's device (see [`super::DeviceBuffer`]), in any mix.
    ///
    /// # Errors
    /// This rank's own argument errors, found before the call takes a turn
    /// or sends anything (`HCCL_E_PARA`; the call is not an op and the
    /// communicator stays usable, as in HCCL; peers that made the call
    /// with good arguments pair it with this rank's next collective):
    /// `args.world_size` not the communicator's, the kind's argument
    /// rules (a root out of range, ...), a buffer of the wrong size,
    /// [`CommError::WrongDevice`] for another device's buffer. Then
    /// transport and consistency errors, which fail the op on every rank
    /// and leave the communicator unusable ([`CommError::Broken`]).
    pub fn collective<S, R>(
        &self,
        args: &CollectiveArgs,
        input: &S,
        output: &mut R,
    ) -> Result<(), CommError>
    where
        S: Buffer<Elem = u8> + ?Sized,
        R: BufferMut<Elem = u8> + ?Sized,
    {
        self.collective_sides(args, device::side(input), device::side_mut(output))
    }

    /// [`Comm::collective`] on a call's memory of any kind (the typed
    /// calls' common path).
    pub(crate) fn collective_sides(
        &self,
        args: &CollectiveArgs,
        input: device::Side<'_>,
        output: device::SideMut<'_>,
    ) -> Result<(), CommError> {
        self.check_world(args)?;
        let name = KindName(args.kind);
        let i = self.resolve(&name, "send buffer", input)?;
        let o = self.resolve_mut(&name, "receive buffer", output)?;
        let bufs = match (i, o) {
            (In::Host(i), Out::Host(o)) => Call::Host(UserBufs::Separate(i, o)),
            #[cfg(feature = "ascend")]
            (i, o) => Call::Device(device::DevBufs::Separate(i, o)),
        };
        self.check_call(args, Lens::of(args, self.shared.rank, &bufs))?;
        let t = self.take_ticket();
        let call = self.enter_blocking(&format_args!("{:?} #{}", args.kind, t.1), Waits::All);
        let r = Comm::run_at(&self.shared, t, args, bufs);
        Comm::end_blocking(call, r)
    }

    /// Runs a collective in place on one buffer placed as
    /// `CollectiveArgs::alias` says (`args.in_place` is set for you): host
    /// bytes or a `DeviceBuffer<u8>` of this rank's device.
    ///
    /// # Errors
    /// As [`Comm::collective`]; kinds without an in-place form.
    pub fn collective_in_place<B>(
        &self,
        args: &CollectiveArgs,
        buf: &mut B,
    ) -> Result<(), CommError>
    where
        B: BufferMut<Elem = u8> + ?Sized,
    {
        self.collective_in_place_side(args, device::side_mut(buf))
    }

    /// [`Comm::collective_in_place`] on memory of any kind.
    pub(crate) fn collective_in_place_side(
        &self,
        args: &CollectiveArgs,
        buf: device::SideMut<'_>,
    ) -> Result<(), CommError> {
        self.check_world(args)?;
        let args = args.clone().with_in_place(true);
        let b = self.resolve_mut(&KindName(args.kind), "in-place buffer", buf)?;
        let bufs = match b {
            Out::Host(b) => Call::Host(UserBufs::InPlace(b)),
            #[cfg(feature = "ascend")]
            Out::Npu(n) => Call::Device(device::DevBufs::InPlace(n)),
        };
        self.check_call(&args, Lens::of(&args, self.shared.rank, &bufs))?;
        let t = self.take_ticket();
        let call = self.enter_blocking(&format_args!("{:?} #{}", args.kind, t.1), Waits::All);
        let r = Comm::run_at(&self.shared, t, &args, bufs);
        Comm::end_blocking(call, r)
    }

    /// [`Comm::collective`] on its own thread, with owned buffers: returns
    /// the output buffer (allocated to `args.io_bytes(rank).1` bytes). A
    /// call refused for its own arguments (as [`Comm::collective`]'s) takes
    /// no turn: its handle fails with the error and the communicator stays
    /// usable.
    pub fn collective_async(&self, args: CollectiveArgs, input: Vec<u8>) -> OpHandle<Vec<u8>> {
        let rank = self.shared.rank;
        let ticket = self
            .check_world(&args)
            .and_then(|()| {
                let (inb, outb) = args.io_bytes(rank);
                let used = if inb == 0 { 0 } else { input.len() };
                self.check_call(&args, Lens::Separate(used, outb as usize))
            })
            .map(|()| self.take_ticket());
        let name = match &ticket {
            Ok((_, seq)) => format!("hccl-op-{seq}"),
            Err(_) => "hccl-op-refused".into(),
        };
        let kind = drain::AsyncKind::Collective(args.kind.name());
        self.spawn_async(name, kind, move |shared| {
            let (turn, seq) = ticket?;
            let mut out = vec![0u8; args.io_bytes(shared.rank).1 as usize];
            Comm::run_at(
                shared,
                (turn, seq),
                &args,
                Call::Host(UserBufs::Separate(&input, &mut out)),
            )
            .map(|()| out)
        })
    }

    /// Checks a call against its arguments on this rank before it takes a
    /// turn: the kind's own rules (`CollectiveArgs::validate`: a root out
    /// of range, ...), then the memory's `lens` ([`check_lens`]). These are
    /// errors a rank finds from its own arguments alone (`HCCL_E_PARA`): a
    /// call refused here is not an op (it takes no sequence number and
    /// sends nothing), so the communicator stays usable, as in HCCL.
    pub(crate) fn check_call(&self, args: &CollectiveArgs, lens: Lens) -> Result<(), CommError> {
        args.validate()?;
        let op = format!("comm '{}' {:?}", self.shared.name, args.kind);
        check_lens(&op, args, self.shared.rank, lens)
    }

    /// The plan this rank runs `args` with on this communicator: the
    /// algorithm, the buffer sizes (bytes) and this rank's steps. It is the
    /// plan a call with these arguments runs (the run path plans through the
    /// same function), on any backend: `HCCL_ALGO` where it fits (parsed when
    /// the communicator was built), else the host policy for where the ranks
    /// run (`hccl_algos::select::plan_op`). With `HCCL_REDUCE_PRECISION=fp32`
    /// an fp16/bf16 reduction is planned in f32, as it runs. Takes no turn and
    /// sends nothing; `args` as given (set `in_place` for an in-place call).
    /// Compare two plans with [`PlannedOp::collect`].
    ///
    /// # Errors
    /// [`CommError::Shape`] if `args.world_size` is not this communicator's
    /// size; [`CommError::Algo`] for arguments that do not validate or plan.
    pub fn planned(&self, args: &CollectiveArgs) -> Result<PlannedOp, CommError> {
        self.check_world(args)?;
        args.validate()?;
        let precision = *lock(&self.shared.precision);
        match precision.widened(args) {
            Some(wide) => self.shared.plan(&wide),
            None => self.shared.plan(args),
        }
    }

    pub(crate) fn check_world(&self, args: &CollectiveArgs) -> Result<(), CommError> {
        if args.world_size != self.shared.size {
            return Err(CommError::Shape {
                op: format!("{:?}", args.kind),
                detail: format!(
                    "args.world_size = {} but the communicator has {} ranks",
                    args.world_size, self.shared.size
                ),
            });
        }
        Ok(())
    }

    /// Runs `args` with seq `seq` once it is turn `turn`.
    pub(crate) fn run_at(
        shared: &Shared,
        (turn, seq): (u64, u64),
        args: &CollectiveArgs,
        user: Call<'_>,
    ) -> Result<(), CommError> {
        let id = recorder::queue(shared, OpDesc::collective(turn, seq, args));
        let mut ran = None;
        let r = Comm::at_turn(shared, turn, |st| {
            recorder::running(shared, id);
            let r = Comm::run_locked(shared, st, seq, args, user);
            ran = st.ran.take();
            r
        });
        recorder::ended(shared, id, &r, ran);
        r
    }

    pub(crate) fn run_locked(
        shared: &Shared,
        st: &mut State,
        seq: u64,
        args: &CollectiveArgs,
        user: Call<'_>,
    ) -> Result<(), CommError> {
        if let Some(e) = lock(&shared.error).clone() {
            return Err(e.into_broken());
        }
        #[allow(clippy::infallible_destructuring_match)] // one arm without `ascend`
        let user = match user {
            Call::Host(u) => u,
            #[cfg(feature = "ascend")]
            Call::Device(d) => return Comm::run_device_locked(shared, st, seq, args, d),
        };
        // Named as the backends name the op, so that this rank's error
        // carries the prefix its peers' have.
        let op = format!("comm '{}' {:?} #{seq}", shared.name, args.kind);
        args.validate()?;
        let rank = shared.rank;
        let (inb, outb) = args.io_bytes(rank);
        let alias = args.alias(rank);
        // A buffer this rank does not use (a non-root's receive buffer of
        // Gather or Reduce, its send buffer of Scatter) may have any size
        // and is left alone, as MPI and NCCL ignore it.
        let user = match user {
            UserBufs::Separate(i, o) => UserBufs::Separate(
                if inb == 0 { &i[..0] } else { i },
                if outb == 0 { &mut o[..0] } else { o },
            ),
            u => u,
        };
        // Check the user's memory against the call before anything moves.
        match &user {
            UserBufs::Separate(i, o) => {
                check_lens(&op, args, rank, Lens::Separate(i.len(), o.len()))?
            }
            UserBufs::InPlace(b) => check_lens(&op, args, rank, Lens::InPlace(b.len()))?,
        }
        let precision = *lock(&shared.precision);
        let Some(wide) = precision.widened(args) else {
            let op = Comm::prepare(shared, seq, (args, args, false))?;
            return Comm::run_on_backend(shared, st, op, Call::Host(user));
        };
        // HCCL_REDUCE_PRECISION=fp32: the op in f32 on widened copies, the
        // output rounded once back into the user's buffer.
        let prepared = Comm::prepare(shared, seq, (&wide, args, true))?;
        let kernel = |e: hccl_algos::kernels::KernelError| CommError::Shape {
            op: op.clone(),
            detail: e.to_string(),
        };
        let dtype = args.dtype;
        match user {
            UserBufs::Separate(i, o) => {
                let wi = hccl_algos::precision::widen(dtype, i).map_err(kernel)?;
                let mut wo = vec![0u8; 2 * o.len()];
                let bufs = Call::Host(UserBufs::Separate(&wi, &mut wo));
                Comm::run_on_backend(shared, st, prepared, bufs)?;
                hccl_algos::precision::narrow(dtype, &wo, o).map_err(kernel)
            }
            UserBufs::InPlace(b) => {
                let mut wb = hccl_algos::precision::widen(dtype, b).map_err(kernel)?;
                let bufs = Call::Host(UserBufs::InPlace(&mut wb));
                Comm::run_on_backend(shared, st, prepared, bufs)?;
                let at = alias.map_or(0, |a| a.output_at) as usize;
                let out = &mut b[at..at + outb as usize];
                let wout = &wb[2 * at..2 * (at + outb as usize)];
                hccl_algos::precision::narrow(dtype, wout, out).map_err(kernel)
            }
        }
    }

    /// Plans op `seq`: the one place that computes algorithm, buffer
    /// sizes and this rank's schedule, for every backend ([`plan::plan`]
    /// on the backend's [`plan::HostFit`]), and the op signature that the
    /// ranks compare. `args` are what runs (f32 for a widened op),
    /// `called` what the user called (the signature and the profile use
    /// them), `wide` whether the op was widened.
    pub(crate) fn prepare<'a>(
        shared: &Shared,
        seq: u64,
        (args, called, wide): (&'a CollectiveArgs, &'a CollectiveArgs, bool),
    ) -> Result<Prepared<'a>, CommError> {
        let planned: PlannedOp = shared.plan(args)?;
        Ok(Prepared {
            seq,
            args,
            called,
            sig: called.signature(),
            wide,
            planned,
        })
    }

    /// Runs a checked, planned op on the backend and records it in the
    /// profile.
    pub(crate) fn run_on_backend(
        shared: &Shared,
        st: &mut State,
        op: Prepared<'_>,
        user: Call<'_>,
    ) -> Result<(), CommError> {
        let Some(backend) = st.backend.as_mut() else {
            return Err(CommError::Broken("the communicator was aborted".into()));
        };
        let (seq, called, spec) = (op.seq, op.called, op.planned.algo);
        let r = match user {
            Call::Host(u) => backend.run(shared, op, u),
            #[cfg(feature = "ascend")]
            Call::Device(d) => backend.run_device(shared, op, d),
        };
        if shared.flight.is_some() {
            let started = backend.started();
            let ran = recorder::Ran::of(shared, (seq, spec, started), &r, || {
                backend.never_started(seq)
            });
            st.ran = Some(ran);
        }
        let time = r?;
        if let Some(p) = &shared.profile {
            p.record(&shared.name, seq, called, &spec, time);
        }
        Ok(())
    }
}

impl Shared {
    /// This rank's plan of `args` (what runs: f32 when widened): the one
    /// planning call of the run path and of [`Comm::planned`].
    pub(crate) fn plan(&self, args: &CollectiveArgs) -> Result<PlannedOp, CommError> {
        plan::plan(args, self.rank, self.fit, self.algo.as_ref())
    }

    /// Rank `rank`'s plan of `args`, as that rank computes it (the same
    /// arguments, host fit and `HCCL_ALGO`): for a backend that orders the
    /// ranks' messages itself (the Ascend backend's schedule mode).
    #[cfg(feature = "ascend")]
    pub(crate) fn plan_of(&self, args: &CollectiveArgs, rank: u32) -> Result<PlannedOp, CommError> {
        plan::plan(args, rank, self.fit, self.algo.as_ref())
    }
}

/// The lengths (bytes) of a call's memory, for [`check_lens`].
pub(crate) enum Lens {
    /// Send and receive buffers (a buffer the rank does not use: 0).
    Separate(usize, usize),
    /// One in-place buffer.
    InPlace(usize),
}

impl Lens {
    /// The lengths of `call`'s memory on `rank` for `args`: a buffer the
    /// rank does not use counts as 0 (it may have any size, as in MPI).
    pub(crate) fn of(args: &CollectiveArgs, rank: u32, call: &Call<'_>) -> Lens {
        let (inb, outb) = args.io_bytes(rank);
        let used = |bytes: u64, len: usize| if bytes == 0 { 0 } else { len };
        match call {
            Call::Host(UserBufs::Separate(i, o)) => {
                Lens::Separate(used(inb, i.len()), used(outb, o.len()))
            }
            Call::Host(UserBufs::InPlace(b)) => Lens::InPlace(b.len()),
            #[cfg(feature = "ascend")]
            Call::Device(device::DevBufs::Separate(i, o)) => {
                Lens::Separate(used(inb, i.len()), used(outb, o.len()))
            }
            #[cfg(feature = "ascend")]
            Call::Device(device::DevBufs::InPlace(n)) => Lens::InPlace(n.len()),
        }
    }
}

/// Checks a call's memory against `args` on `rank` before anything
/// moves: [`CommError::Buffer`] naming the buffer, both sizes and `op`.
pub(crate) fn check_lens(
    op: &str,
    args: &CollectiveArgs,
    rank: u32,
    lens: Lens,
) -> Result<(), CommError> {
    let (inb, outb) = args.io_bytes(rank);
    let need = |what, expected: u64, got: usize| {
        if expected != got as u64 {
            Err(CommError::Buffer {
                op: op.to_string(),
                what,
                expected,
                got: got as u64,
            })
        } else {
            Ok(())
        }
    };
    match lens {
        Lens::Separate(i, o) => {
            need("send buffer", inb, i)?;
            need("receive buffer", outb, o)
        }
        Lens::InPlace(b) => {
            let len = match args.alias(rank) {
                Some(a) => (a.input_at + inb).max(a.output_at + outb),
                None => inb.max(outb),
            };
            need("in-place buffer", len, b)
        }
    }
}

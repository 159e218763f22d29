//! The public builder: a fabric, communicators and a list of ops.

use std::collections::BTreeMap;
use std::rc::Rc;

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::{BufferSizes, Rank, RankPlan, RankSchedule};
use hccl_algos::select::PlannedOp;
use hccl_algos::DataType;
use hccl_topology::{DeviceParams, Fabric};

use crate::collective::{Collective, PlannedCollective};
use crate::engine::Engine;
use crate::error::SimError;
use crate::hooks::{Hooks, NoHooks};
use crate::report::SimReport;
use crate::trace::TraceHash;

/// Whether ranks hold real bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Lengths only: no buffers are allocated, nothing is reduced. For scale.
    #[default]
    Timing,
    /// Real bytes per rank, reduced with `hccl_algos::kernels`; outputs are
    /// returned in [`crate::OpResult::outputs`]. For correctness.
    Data,
}

/// The α–β–γ device costs the engine charges (β comes from the links).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostParams {
    /// α: fixed overhead per message, ns, between a match and the flow start.
    pub msg_overhead_ns: u64,
    /// γ: local reduce bandwidth, GB/s of output (`f64::INFINITY`: free).
    pub reduce_gbps: f64,
    /// Local copy bandwidth, GB/s (`f64::INFINITY`: free).
    pub copy_gbps: f64,
    /// Fixed cost of every op on every rank before its first step, ns (the
    /// host launch and synchronisation a wall-clock benchmark includes; see
    /// `DeviceParams::op_overhead_ns`). 0: none.
    pub op_overhead_ns: u64,
}

impl From<DeviceParams> for CostParams {
    fn from(p: DeviceParams) -> Self {
        CostParams {
            msg_overhead_ns: p.msg_overhead_ns,
            reduce_gbps: p.reduce_gbps,
            copy_gbps: p.copy_gbps,
            op_overhead_ns: p.op_overhead_ns,
        }
    }
}

/// Where each rank's plan of one op comes from.
///
/// Implemented by [`FixedPlans`] (hand-written schedules) and by collective
/// ops built from `hccl_algos` arguments and algorithms.
pub trait PlanSource {
    /// A short name for results and errors, e.g. `AllReduce ring 1 GiB`.
    fn label(&self) -> String;

    /// Element type of the op's buffers (for reductions).
    fn dtype(&self) -> DataType;

    /// The buffers and the lazy plan of communicator rank `rank` of `size`.
    ///
    /// # Errors
    /// A message saying why the op cannot run on this rank.
    fn plan(&self, rank: Rank, size: u32) -> Result<(BufferSizes, RankPlan), String>;

    /// nccl-tests' "size" in bytes of the op and its bus-bandwidth factor
    /// for a communicator of `size` ranks (DESIGN.md, "Names and units").
    /// Default `(0, 1.0)`: no bandwidth figures.
    fn bandwidth_basis(&self, size: u32) -> (u64, f64) {
        let _ = size;
        (0, 1.0)
    }

    /// In-place calls: `Some((input_at, output_at))` places the rank's
    /// input and output in one address space (input byte `x` is byte
    /// `x + input_at` of it, output byte `y` is byte `y + output_at`).
    /// Default `None`: separate buffers.
    fn alias(&self, rank: Rank) -> Option<(u64, u64)> {
        let _ = rank;
        None
    }

    /// Timing-mode shift symmetry of the plans on a communicator of `size`:
    /// `Some(d)` promises that communicator rank `r + d` (mod `size`) runs
    /// the plan of rank `r` with every peer moved by `d` — the same step
    /// kinds, lengths, tags and dependencies — so the simulator may run one
    /// rank per orbit ([`Scenario::symmetry`]). Default `None`: no promise.
    fn shift_period(&self, size: u32) -> Option<u32> {
        let _ = size;
        None
    }

    /// The collective call this op makes, if it is one (fault injection
    /// builds altered calls from it; the consistency check compares its
    /// [`hccl_algos::collective::OpSignature`]). Default `None`.
    fn collective(&self) -> Option<&Collective> {
        None
    }
}

/// Hand-written per-rank schedules as a [`PlanSource`] (tests, reproducing
/// hangs with exact step orders).
#[derive(Debug, Clone)]
pub struct FixedPlans {
    /// Name in results.
    pub label: String,
    /// Element type.
    pub dtype: DataType,
    /// One schedule per communicator rank, in rank order.
    pub ranks: Vec<RankSchedule>,
}

impl PlanSource for FixedPlans {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn dtype(&self) -> DataType {
        self.dtype
    }

    fn plan(&self, rank: Rank, size: u32) -> Result<(BufferSizes, RankPlan), String> {
        if self.ranks.len() != size as usize {
            return Err(format!(
                "{} schedules for a communicator of {size} ranks; give one per rank",
                self.ranks.len()
            ));
        }
        let s = &self.ranks[rank as usize];
        Ok((s.buffers, Box::new(s.steps.clone().into_iter())))
    }
}

/// A communicator of a scenario, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CommId(pub usize);

/// An op of a scenario, by index (ops run in this order on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub usize);

/// A communicator: a named subset of fabric ranks.
#[derive(Debug, Clone)]
pub(crate) struct CommEntry {
    pub name: String,
    /// FNV-1a of the name: the same on every member.
    pub id: u64,
    /// Communicator rank -> fabric rank.
    pub members: Vec<u32>,
    /// Fabric rank -> communicator rank (`u32::MAX`: not a member).
    pub index_of: Vec<u32>,
}

/// One op of a scenario.
pub(crate) struct OpEntry {
    pub label: String,
    pub comm: usize,
    /// Sequence number on its communicator, from 0.
    pub seq: u64,
    pub source: Rc<dyn PlanSource>,
    /// Data mode inputs per communicator rank (`None`: generated).
    pub inputs: Option<Vec<Vec<u8>>>,
}

/// A simulation to run: a fabric, communicators, ops, a seed and a mode.
///
/// Every rank runs the ops of the communicators it belongs to **in the
/// order they were added**, one after the other (an op starts on a rank
/// when the rank's previous op has finished there).
/// [`Scenario::rank_order`] gives one rank another order — how a program
/// that calls two communicators in different orders on different ranks (a
/// classic deadlock) is written down.
pub struct Scenario<'f> {
    pub(crate) fabric: &'f Fabric,
    pub(crate) comms: Vec<CommEntry>,
    pub(crate) ops: Vec<OpEntry>,
    pub(crate) seed: u64,
    pub(crate) mode: Mode,
    pub(crate) costs: CostParams,
    pub(crate) window: usize,
    pub(crate) exec_timeout_ns: Option<u64>,
    pub(crate) orders: BTreeMap<u32, Vec<usize>>,
    pub(crate) symmetry: bool,
}

impl<'f> Scenario<'f> {
    /// An empty scenario on `fabric`, seed 0, timing mode, the fabric's
    /// device costs, the executor's default window, no timeout.
    pub fn new(fabric: &'f Fabric) -> Scenario<'f> {
        Scenario {
            fabric,
            comms: Vec::new(),
            ops: Vec::new(),
            seed: 0,
            mode: Mode::Timing,
            costs: fabric.params().into(),
            window: hccl_algos::exec::DEFAULT_WINDOW,
            exec_timeout_ns: None,
            orders: BTreeMap::new(),
            symmetry: false,
        }
    }

    /// The fabric.
    pub fn fabric(&self) -> &'f Fabric {
        self.fabric
    }

    /// Seeds the engine's RNG (used by hooks) and the generated inputs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Timing-only or data mode.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Overrides the fabric's α, γ and copy bandwidth.
    pub fn costs(mut self, costs: CostParams) -> Self {
        self.costs = costs;
        self
    }

    /// Symmetry folding (default off): when every op promises a shift
    /// symmetry ([`PlanSource::shift_period`]) and the fabric is proved to
    /// keep it (the `fold` module's rules: same routes shape for every
    /// image, consistent link orbits, slack links that never limit a rate),
    /// [`Scenario::run`] simulates one rank per orbit and copies its times to
    /// the others. The report is the full run's, except the engine's own
    /// counters and trace hash ([`crate::EngineStats::folded_period`] says
    /// whether it folded). Timing mode without hooks only; anything else, or
    /// a folded run that stalls or fails, runs in full.
    pub fn symmetry(mut self, on: bool) -> Self {
        self.symmetry = on;
        self
    }

    /// Executor window: steps a rank may have pulled but not completed
    /// (default `hccl_algos::exec::DEFAULT_WINDOW`; at least 1). Smaller
    /// windows use less memory per rank; schedules are verified
    /// deadlock-free under the default.
    pub fn window(mut self, steps: usize) -> Self {
        self.window = steps.max(1);
        self
    }

    /// `HCCL_EXEC_TIMEOUT` in virtual time: a rank still in an op this many
    /// ns after starting it stops the run with a [`crate::Stall`].
    pub fn exec_timeout_ns(mut self, ns: Option<u64>) -> Self {
        self.exec_timeout_ns = ns;
        self
    }

    /// A communicator named `name` over fabric ranks `ranks` (communicator
    /// rank `i` is `ranks[i]`).
    ///
    /// # Errors
    /// [`SimError::EmptyCommunicator`], [`SimError::RankOutOfRange`],
    /// [`SimError::DuplicateRank`].
    pub fn communicator(&mut self, name: &str, ranks: &[u32]) -> Result<CommId, SimError> {
        let world = self.fabric.world_size();
        if ranks.is_empty() {
            return Err(SimError::EmptyCommunicator { comm: name.into() });
        }
        let mut index_of = vec![u32::MAX; world as usize];
        for (i, &r) in ranks.iter().enumerate() {
            let slot = index_of
                .get_mut(r as usize)
                .ok_or(SimError::RankOutOfRange {
                    comm: name.into(),
                    rank: r,
                    world_size: world,
                })?;
            if *slot != u32::MAX {
                return Err(SimError::DuplicateRank {
                    comm: name.into(),
                    rank: r,
                });
            }
            *slot = i as u32;
        }
        let mut id = TraceHash::default();
        for b in name.bytes() {
            id.byte(b);
        }
        self.comms.push(CommEntry {
            name: name.into(),
            id: id.value(),
            members: ranks.to_vec(),
            index_of,
        });
        Ok(CommId(self.comms.len() - 1))
    }

    /// The communicator `world` over every fabric rank, created on first use.
    pub fn world(&mut self) -> CommId {
        if let Some(i) = self.comms.iter().position(|c| c.name == "world") {
            return CommId(i);
        }
        let all: Vec<u32> = (0..self.fabric.world_size()).collect();
        self.communicator("world", &all)
            .expect("every fabric rank, once each, is a valid communicator")
    }

    /// Appends an op on `comm`; in data mode inputs are generated from the seed.
    ///
    /// # Errors
    /// [`SimError::UnknownCommunicator`].
    pub fn op(
        &mut self,
        comm: CommId,
        source: impl PlanSource + 'static,
    ) -> Result<OpId, SimError> {
        self.push_op(comm, Rc::new(source), None)
    }

    /// Appends an op with explicit data-mode inputs, one per communicator rank.
    ///
    /// # Errors
    /// [`SimError::UnknownCommunicator`]; an input of the wrong length is
    /// reported by [`Scenario::run`] as [`SimError::InputLength`].
    pub fn op_with_inputs(
        &mut self,
        comm: CommId,
        source: impl PlanSource + 'static,
        inputs: Vec<Vec<u8>>,
    ) -> Result<OpId, SimError> {
        self.push_op(comm, Rc::new(source), Some(inputs))
    }

    /// Sets the data-mode inputs of an op already added (one per
    /// communicator rank), replacing generated ones.
    ///
    /// # Errors
    /// [`SimError::UnknownOp`] for an op id the scenario does not have.
    pub fn set_inputs(&mut self, op: OpId, inputs: Vec<Vec<u8>>) -> Result<(), SimError> {
        let count = self.ops.len();
        let entry = self
            .ops
            .get_mut(op.0)
            .ok_or(SimError::UnknownOp { op: op.0, count })?;
        entry.inputs = Some(inputs);
        Ok(())
    }

    fn push_op(
        &mut self,
        comm: CommId,
        source: Rc<dyn PlanSource>,
        inputs: Option<Vec<Vec<u8>>>,
    ) -> Result<OpId, SimError> {
        if comm.0 >= self.comms.len() {
            return Err(SimError::UnknownCommunicator {
                op: source.label(),
                comm: comm.0,
                count: self.comms.len(),
            });
        }
        let seq = self.ops.iter().filter(|o| o.comm == comm.0).count() as u64;
        self.ops.push(OpEntry {
            label: source.label(),
            comm: comm.0,
            seq,
            source,
            inputs,
        });
        Ok(OpId(self.ops.len() - 1))
    }

    /// Makes fabric rank `rank` run exactly `ops`, in this order, instead of
    /// every op of its communicators in scenario order.
    ///
    /// # Errors
    /// [`SimError::RankOutOfRange`] for an unknown rank,
    /// [`SimError::NotAMember`] if an op's communicator does not contain it.
    pub fn rank_order(&mut self, rank: u32, ops: &[OpId]) -> Result<(), SimError> {
        let world = self.fabric.world_size();
        if rank >= world {
            return Err(SimError::RankOutOfRange {
                comm: "(rank order)".into(),
                rank,
                world_size: world,
            });
        }
        for op in ops {
            let entry = self.ops.get(op.0);
            let comm = entry.map(|o| &self.comms[o.comm]);
            if comm.is_none_or(|c| c.index_of[rank as usize] == u32::MAX) {
                return Err(SimError::NotAMember {
                    rank,
                    op: op.0,
                    comm: comm.map_or_else(|| "(no such op)".into(), |c| c.name.clone()),
                });
            }
        }
        self.orders.insert(rank, ops.iter().map(|o| o.0).collect());
        Ok(())
    }

    /// Appends a collective on `comm`: `args.world_size` must be the
    /// communicator's size; the layout (server and super pod of each
    /// communicator rank) comes from the fabric's cluster.
    ///
    /// # Errors
    /// [`SimError::UnknownCommunicator`]; [`SimError::Plan`] if the layout
    /// cannot be built. Bad arguments or an algorithm that does not implement
    /// the collective are reported by [`Scenario::run`] as [`SimError::Plan`].
    pub fn collective(
        &mut self,
        comm: CommId,
        args: CollectiveArgs,
        algo: AlgoSpec,
    ) -> Result<OpId, SimError> {
        let layout = self.layout_of(comm, &args)?;
        self.op(comm, Collective { args, algo, layout })
    }

    /// Appends a collective on `comm` that runs the given per-rank plans
    /// (`plans[r]` for communicator rank `r`, e.g. from
    /// `hccl_algos::select::plan_op`) instead of planning an algorithm here:
    /// how a backend that planned an op runs exactly that schedule on the
    /// simulator. The layout is the fabric's, as for
    /// [`Scenario::collective`]; see [`PlannedCollective`].
    ///
    /// # Errors
    /// As [`Scenario::collective`], and [`SimError::Plan`] if `plans` is
    /// empty. A plan count other than the communicator's size, or plans for
    /// different algorithms, are reported by [`Scenario::run`] as
    /// [`SimError::Plan`].
    pub fn planned(
        &mut self,
        comm: CommId,
        args: CollectiveArgs,
        plans: Vec<PlannedOp>,
    ) -> Result<OpId, SimError> {
        let layout = self.layout_of(comm, &args)?;
        let Some(algo) = plans.first().map(|p| p.algo) else {
            return Err(SimError::Plan {
                op: self.ops.len(),
                label: args.kind.name().into(),
                rank: 0,
                reason: "no plans given; give one per communicator rank".into(),
            });
        };
        let call = Collective { args, algo, layout };
        self.op(comm, PlannedCollective::new(call, plans))
    }

    /// The layout (server and super pod of each rank) of `comm` from the
    /// fabric's cluster, for an op with `args`.
    fn layout_of(&self, comm: CommId, args: &CollectiveArgs) -> Result<GroupLayout, SimError> {
        let members = &self
            .comms
            .get(comm.0)
            .ok_or_else(|| SimError::UnknownCommunicator {
                op: args.kind.name().into(),
                comm: comm.0,
                count: self.comms.len(),
            })?
            .members;
        let cluster = self.fabric.cluster();
        let server_of = members
            .iter()
            .map(|&r| cluster.server_of(r).unwrap_or(0))
            .collect();
        let pod_of = members
            .iter()
            .map(|&r| cluster.super_pod_of(r).unwrap_or(0))
            .collect();
        GroupLayout::from_parts(server_of, pod_of).map_err(|e| SimError::Plan {
            op: self.ops.len(),
            label: args.kind.name().into(),
            rank: 0,
            reason: e.to_string(),
        })
    }

    /// Runs the scenario without faults.
    ///
    /// # Errors
    /// Bad input or a broken schedule ([`SimError`]); a hang is not an
    /// error but [`SimReport::stall`].
    pub fn run(&self) -> Result<SimReport, SimError> {
        if let Some(fold) = crate::fold::analyse(self) {
            match Engine::new(self, &mut NoHooks, Some(fold)).run() {
                Ok(r) if r.stall.is_none() => return Ok(r),
                _ => {} // the full run reports the stall or error exactly
            }
        }
        self.run_with_hooks(&mut NoHooks)
    }

    /// Runs the scenario with `hooks` (faults, observers).
    ///
    /// # Errors
    /// As [`Scenario::run`].
    pub fn run_with_hooks(&self, hooks: &mut dyn Hooks) -> Result<SimReport, SimError> {
        Engine::new(self, hooks, None).run()
    }
}

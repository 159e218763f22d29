//! Collectives from `hccl_algos` as a [`PlanSource`]: planned here from
//! an algorithm ([`Collective`]), or planned by the caller, one plan per
//! rank ([`PlannedCollective`]).

use std::cell::RefCell;

use hccl_algos::algo::{self, AlgoSpec};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::{BufferSizes, Rank, RankPlan};
use hccl_algos::select::PlannedOp;
use hccl_algos::DataType;

use crate::scenario::PlanSource;

/// A collective call: its arguments, the algorithm, and where the
/// communicator's ranks sit (for hierarchical algorithms).
#[derive(Debug, Clone)]
pub struct Collective {
    /// The arguments (their `world_size` is the communicator's size).
    pub args: CollectiveArgs,
    /// The algorithm, flat or per level.
    pub algo: AlgoSpec,
    /// Server and super pod of each communicator rank.
    pub layout: GroupLayout,
}

impl Collective {
    /// Whether the arguments fit a communicator of `size` ranks.
    fn check_size(&self, size: u32) -> Result<(), String> {
        if size != self.args.world_size {
            return Err(format!(
                "the arguments are for {} ranks but the communicator has {size}; set world_size to the communicator size",
                self.args.world_size
            ));
        }
        Ok(())
    }
}

/// nccl-tests' bus-bandwidth factor of `kind` on `n` ranks (DESIGN.md,
/// "Names and units"; nccl-tests `doc/PERFORMANCE.md`): AllReduce
/// `2(n-1)/n`; AllGather, ReduceScatter, AllToAll and their V forms,
/// Scatter and Gather `(n-1)/n`; Broadcast, Reduce, Send/Recv `1`.
pub fn busbw_factor(kind: CollectiveKind, n: u32) -> f64 {
    use CollectiveKind as K;
    let n = f64::from(n.max(1));
    match kind {
        K::AllReduce => 2.0 * (n - 1.0) / n,
        K::AllGather
        | K::ReduceScatter
        | K::AllToAll
        | K::AllToAllV
        | K::AllGatherV
        | K::ReduceScatterV
        | K::Scatter
        | K::Gather => (n - 1.0) / n,
        K::Broadcast | K::Reduce | K::SendRecv | K::BatchSendRecv | K::Barrier => 1.0,
    }
}

/// `1536` -> `1.5 KiB`, for labels.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.3} {}", UNITS[u]).replace(".000 ", " ")
    }
}

impl PlanSource for Collective {
    fn label(&self) -> String {
        format!(
            "{} {} {}",
            self.args.kind.name(),
            self.algo,
            human_bytes(self.args.message_bytes())
        )
    }

    fn dtype(&self) -> DataType {
        self.args.dtype
    }

    fn plan(&self, rank: Rank, size: u32) -> Result<(BufferSizes, RankPlan), String> {
        self.check_size(size)?;
        algo::plan(&self.args, &self.algo, &self.layout, rank).map_err(|e| e.to_string())
    }

    fn bandwidth_basis(&self, size: u32) -> (u64, f64) {
        (
            self.args.message_bytes(),
            busbw_factor(self.args.kind, size),
        )
    }

    fn alias(&self, rank: Rank) -> Option<(u64, u64)> {
        self.args.alias(rank).map(|a| (a.input_at, a.output_at))
    }

    fn collective(&self) -> Option<&Collective> {
        Some(self)
    }

    fn shift_period(&self, size: u32) -> Option<u32> {
        shift_period(self, size)
    }
}

/// The shift period of the plans of `c` (see [`PlanSource::shift_period`]),
/// for the algorithms whose plans are known to be shift-symmetric: an
/// AllReduce whose every block has the same length (`count` a multiple of
/// the ranks, so no block gets the remainder's extra element), flat ring
/// (period 1) or hierarchical ring over ring on a regular layout with one
/// level-1 group (period: ranks per server). Proved for every rank of
/// mid-size cases by `tests::declared_shift_periods_hold_for_every_rank`.
fn shift_period(c: &Collective, size: u32) -> Option<u32> {
    use hccl_algos::algo::{Algorithm, Levels};
    let a = &c.args;
    if a.kind != CollectiveKind::AllReduce
        || a.world_size != size
        || size < 2
        || a.count == 0
        || !a.count.is_multiple_of(u64::from(size))
    {
        return None;
    }
    match c.algo {
        AlgoSpec::Flat(Algorithm::Ring) => Some(1),
        AlgoSpec::Hierarchical(Levels {
            level0: Some(Algorithm::Ring),
            level1: Some(Algorithm::Ring),
            level2: None,
        }) => {
            let shape = c.layout.regular().ok()?;
            let k = shape.ranks_per_server;
            (k >= 1 && size.is_multiple_of(k)).then_some(k)
        }
        _ => None,
    }
}

/// A collective call whose per-rank plans were made by the caller (for
/// example by `hccl_algos::select::plan_op`, as a host backend plans it:
/// sliced, with the host policy's algorithm), so the simulator runs
/// exactly that schedule instead of planning `call.algo` itself.
///
/// `call` describes the op (its label, signature, alias and bandwidth
/// figures; fault injection re-plans altered calls from it). Each rank's
/// plan is run once: a second run of the same op reports an error.
pub struct PlannedCollective {
    call: Collective,
    plans: RefCell<Vec<Option<PlannedOp>>>,
    /// Per-rank in-place placement, when given ([`Self::with_aliases`]).
    aliases: Option<Vec<Option<(u64, u64)>>>,
}

impl PlannedCollective {
    /// The call `call` with `plans[r]` as communicator rank `r`'s plan.
    /// Checked when a rank starts the op ([`PlanSource::plan`]): one plan
    /// per rank, each for `call.algo`.
    pub fn new(call: Collective, plans: Vec<PlannedOp>) -> PlannedCollective {
        PlannedCollective {
            call,
            plans: RefCell::new(plans.into_iter().map(Some).collect()),
            aliases: None,
        }
    }

    /// Places rank `r`'s input and output as `aliases[r]` says
    /// ([`PlanSource::alias`]; a rank beyond the list: separate buffers)
    /// instead of as `call.args.alias(r)`: for ranks that called the op
    /// differently, one in place and another not (HCCL lets each rank
    /// choose), each with a plan made for its own call.
    pub fn with_aliases(mut self, aliases: Vec<Option<(u64, u64)>>) -> PlannedCollective {
        self.aliases = Some(aliases);
        self
    }
}

impl std::fmt::Debug for PlannedCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedCollective")
            .field("call", &self.call)
            .field("plans", &self.plans.borrow().len())
            .finish()
    }
}

impl PlanSource for PlannedCollective {
    fn label(&self) -> String {
        self.call.label()
    }

    fn dtype(&self) -> DataType {
        self.call.dtype()
    }

    fn plan(&self, rank: Rank, size: u32) -> Result<(BufferSizes, RankPlan), String> {
        self.call.check_size(size)?;
        let mut plans = self.plans.borrow_mut();
        if plans.len() != size as usize {
            return Err(format!(
                "{} plans given for a communicator of {size} ranks; give one per rank",
                plans.len()
            ));
        }
        let slot = plans
            .get_mut(rank as usize)
            .ok_or_else(|| format!("rank {rank} is not in a communicator of {size} ranks"))?;
        let op = slot
            .take()
            .ok_or_else(|| format!("rank {rank}'s given plan has run already; give a new op"))?;
        if op.algo != self.call.algo {
            return Err(format!(
                "rank {rank}'s plan is for {}, the op's algorithm is {}; plan every rank with the same algorithm",
                op.algo, self.call.algo
            ));
        }
        Ok((op.sizes, op.plan))
    }

    fn bandwidth_basis(&self, size: u32) -> (u64, f64) {
        self.call.bandwidth_basis(size)
    }

    fn alias(&self, rank: Rank) -> Option<(u64, u64)> {
        match &self.aliases {
            Some(a) => a.get(rank as usize).copied().flatten(),
            None => self.call.alias(rank),
        }
    }

    fn collective(&self) -> Option<&Collective> {
        Some(&self.call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_follow_nccl_tests() {
        assert_eq!(busbw_factor(CollectiveKind::AllReduce, 8), 1.75);
        assert_eq!(busbw_factor(CollectiveKind::AllGather, 4), 0.75);
        assert_eq!(busbw_factor(CollectiveKind::Broadcast, 4), 1.0);
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(1536), "1.500 KiB");
    }

    /// What timing mode sees of a step of rank `r` of `n`: the op's kind
    /// and length, its peer relative to `r`, its tag and its dependencies.
    fn timing_view(s: &hccl_algos::Step, r: u32, n: u32) -> String {
        use hccl_algos::schedule::Op;
        let rel = s.op.peer().map(|p| (p + n - r) % n);
        let tag = match s.op {
            Op::Send { tag, .. } | Op::Recv { tag, .. } | Op::RecvReduce { tag, .. } => Some(tag),
            _ => None,
        };
        let kind = format!("{:?}", s.op);
        let kind = kind
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_string();
        format!("{kind} {} {rel:?} {tag:?} {:?}", s.op.bytes(), s.deps)
    }

    #[test]
    fn declared_shift_periods_hold_for_every_rank() {
        use hccl_algos::algo::{Algorithm, Levels};
        let hier = AlgoSpec::Hierarchical(Levels {
            level0: Some(Algorithm::Ring),
            level1: Some(Algorithm::Ring),
            level2: None,
        });
        let ring = AlgoSpec::Flat(Algorithm::Ring);
        // (algo, servers, ranks per server, count, expected period)
        let cases = [
            (ring, 1, 12, 12 * 50, Some(1)),
            (ring, 3, 4, 12 * 50 + 5, None),
            (hier, 6, 8, 48 * 64, Some(8)),
            (hier, 5, 4, 20 * 7, Some(4)),
            (hier, 6, 8, 48 * 64 + 8, None),
            (hier, 4, 1, 4 * 9, Some(1)),
            (AlgoSpec::Flat(Algorithm::Mesh), 1, 8, 8 * 4, None),
        ];
        for (algo, servers, per, count, want) in cases {
            let n = servers * per;
            let c = Collective {
                args: CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, n),
                algo,
                layout: GroupLayout::servers(servers, per),
            };
            let got = c.shift_period(n);
            assert_eq!(got, want, "{algo} {servers}x{per} count {count}");
            let view = |r: u32| -> Vec<String> {
                let (_, plan) = c.plan(r, n).unwrap();
                plan.map(|s| timing_view(&s, r, n)).collect()
            };
            let Some(d) = got else {
                // An uneven count really breaks it: some server's plan is
                // not an image of server 0's.
                if !count.is_multiple_of(u64::from(n)) {
                    assert!((per..n).any(|r| view(r) != view(r % per)), "{algo} {count}");
                }
                continue;
            };
            let reps: Vec<Vec<String>> = (0..d).map(view).collect();
            for r in d..n {
                assert_eq!(
                    view(r),
                    reps[(r % d) as usize],
                    "{algo} {servers}x{per}: rank {r} is not an image of rank {}",
                    r % d
                );
            }
        }
    }

    mod planned {
        use hccl_algos::algo::Algorithm;
        use hccl_algos::reference::{reference, verifiable_inputs};
        use hccl_algos::select::{plan_op, HostFit, SLICE_BYTES};
        use hccl_algos::ReduceOp;
        use hccl_topology::{build_preset, Preset};

        use super::*;
        use crate::{Mode, Scenario, SimError};

        const FIT: HostFit = HostFit {
            hosts: 1,
            ranks_fit_cpus: true,
        };

        /// A 3-rank AllReduce of about 2.5 slices (and a ragged count).
        fn args() -> CollectiveArgs {
            let count = (5 * SLICE_BYTES / 2) / 4 + 7;
            CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, 3)
                .with_op(ReduceOp::Sum)
        }

        fn plans(args: &CollectiveArgs) -> Vec<PlannedOp> {
            let layout = GroupLayout::flat(args.world_size);
            (0..args.world_size)
                .map(|r| plan_op(args, &layout, r, FIT, None).unwrap())
                .collect()
        }

        #[test]
        fn a_sliced_allreduce_given_as_plans_produces_the_reference_result() {
            let args = args();
            let given = plans(&args);
            // The plans are sliced: more steps than the algorithm unsliced.
            let whole = algo::plan(&args, &given[0].algo, &GroupLayout::flat(3), 0)
                .unwrap()
                .1
                .count();
            let sliced = plan_op(&args, &GroupLayout::flat(3), 0, FIT, None)
                .unwrap()
                .plan
                .count();
            assert!(sliced >= 3 * whole, "{sliced} steps vs {whole} unsliced");
            let fabric = build_preset(Preset::FullMesh, 3).unwrap();
            let mut sc = Scenario::new(&fabric).mode(Mode::Data);
            let world = sc.world();
            let op = sc.planned(world, args.clone(), given).unwrap();
            let inputs = verifiable_inputs(&args, 5);
            sc.set_inputs(op, inputs.clone()).unwrap();
            let report = sc.run().unwrap();
            assert!(report.stall.is_none(), "{:?}", report.stall);
            let outputs = report.ops[0].outputs.clone().unwrap();
            assert_eq!(outputs, reference(&args, &inputs).unwrap());
        }

        #[test]
        fn plans_that_do_not_match_the_communicator_are_reported() {
            let args = args();
            let fabric = build_preset(Preset::FullMesh, 3).unwrap();
            let run = |plans: Vec<PlannedOp>| {
                let mut sc = Scenario::new(&fabric).mode(Mode::Data);
                let world = sc.world();
                sc.planned(world, args.clone(), plans)?;
                sc.run().map(drop)
            };
            let mut two = plans(&args);
            two.pop();
            let e = run(two).unwrap_err().to_string();
            assert!(
                e.contains("2 plans given for a communicator of 3 ranks"),
                "{e}"
            );
            let mut mixed = plans(&args);
            let mesh = AlgoSpec::Flat(Algorithm::Mesh);
            assert_ne!(mixed[0].algo, mesh, "the test needs another algorithm");
            mixed[2] =
                hccl_algos::select::plan_spec(&args, &mesh, &GroupLayout::flat(3), 2, FIT).unwrap();
            let e = run(mixed).unwrap_err().to_string();
            assert!(e.contains("rank 2's plan is for mesh"), "{e}");
            let e = run(Vec::new()).unwrap_err();
            assert!(matches!(e, SimError::Plan { .. }), "{e}");
        }

        #[test]
        fn ranks_that_call_in_place_and_not_run_each_their_own_plan() {
            // HCCL lets the root of a Broadcast call in place while the
            // others pass separate buffers: each rank's plan is for its own
            // call, and so is its placement.
            let separate =
                CollectiveArgs::new(CollectiveKind::Broadcast, 13, DataType::Fp32, 2).with_root(1);
            let in_place = separate.clone().with_in_place(true);
            let layout = GroupLayout::flat(2);
            let plans = vec![
                plan_op(&separate, &layout, 0, FIT, None).unwrap(),
                plan_op(&in_place, &layout, 1, FIT, None).unwrap(),
            ];
            let call = Collective {
                args: separate.clone(),
                algo: plans[0].algo,
                layout,
            };
            let aliases = vec![None, in_place.alias(1).map(|a| (a.input_at, a.output_at))];
            let source = PlannedCollective::new(call, plans).with_aliases(aliases);
            let fabric = build_preset(Preset::FullMesh, 2).unwrap();
            let mut sc = Scenario::new(&fabric).mode(Mode::Data);
            let world = sc.world();
            let inputs = verifiable_inputs(&separate, 3);
            sc.op_with_inputs(world, source, inputs.clone()).unwrap();
            let report = sc.run().unwrap();
            let outputs = report.ops[0].outputs.clone().unwrap();
            assert_eq!(outputs, reference(&separate, &inputs).unwrap());
        }
    }
}

//! Host policy: the algorithm and the plan a collective runs with between
//! host processes (TCP, and the simulator backend when it runs what TCP
//! would). The selector ([`super::explain`]) with host-TCP link costs,
//! adjusted by measured thresholds (one-shot and doubling for small
//! AllReduces, no mesh for large ones, slicing of large AllReduces), under
//! a fitting `HCCL_ALGO` setting.
//!
//! One function, [`plan_op`], turns (args, layout, rank, [`HostFit`],
//! `HCCL_ALGO`) into a [`PlannedOp`] (algorithm, buffer sizes, plan). It
//! reads no environment and no clock: every rank that passes the same
//! arguments plans the same op, whichever backend runs it.

use std::fmt;

use crate::algo::slice::plan_sliced;
use crate::algo::{plan, AlgoError, AlgoSpec, Algorithm};
use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::layout::GroupLayout;
use crate::schedule::{BufferSizes, Rank, RankPlan, RankSchedule};

use super::{explain, predict, CostModel, HcclAlgo, LinkCost};

/// Host TCP link costs: α ≈ 30 µs per message (a loopback hop through the
/// kernel and the I/O tasks, order of magnitude measured with
/// `tcp_allreduce_bench`), ≈ 3 GB/s per connection, host reduce ≈ 5 GB/s.
/// Round figures for ranking algorithms, not predictions.
pub const TCP_COST: LinkCost = LinkCost {
    alpha_ns: 30_000.0,
    bandwidth_gbps: 3.0,
    reduce_gbps: 5.0,
};

/// Largest message (bytes, as `CollectiveArgs::message_bytes`) for which
/// host TCP keeps the selector's mesh with more than two ranks; above it
/// the selector's best other candidate is used (for AllReduce on a power
/// of two ranks, H-D_R). The selector prices mesh with one link per peer (a
/// server's full mesh), but here a rank's `p − 1` concurrent messages share
/// one process's thread and one memory bus (the same-host fast path, like
/// a NIC port shared by the peers). Measured with `tcp_allreduce_bench`
/// on 4 processes (2-core VM, load average 4–5, same-host fast path on):
/// mesh ahead up to 64 KiB, ring ahead from 128 KiB, by up to 2–3× at
/// 2–32 MiB. The replacement was the ring until H-D_R measured ahead of
/// it (4 processes, quiet, 2 runs, commit 92b76c5: 1.76–2.59 vs
/// 1.74–1.87 GB/s busbw at 1 MiB, 2.52–2.73 vs 1.48–2.03 at 2–8 MiB,
/// 1.93–2.13 vs 1.28–1.36 at 16 MiB): 4 steps instead of 6, the same
/// bytes.
pub const MESH_MAX_BYTES: u64 = 64 << 10;

/// Largest AllReduce (bytes) host TCP runs with the one-shot algorithm
/// (at most 8 ranks, on more than one host); above it a selector's
/// one-shot becomes its next candidate.
/// HCCL's 910B AllReduce operator uses the same bound for its one-shot
/// executors (`HCCL_SMALL_COUNT_128_KB`, `all_reduce_operator.cc` in
/// hicann/hccl). Measured with `tcp_allreduce_bench` (2-core VM, same-host
/// path on, 2 runs, commit cf9c188): 2 processes, one-shot 14–15 µs vs
/// ring 20–57 and mesh 22–30 at 8 KiB, ahead up to 256 KiB (48–51 vs
/// 64–75 µs), even at 512 KiB; 4 processes, one-shot 62–86 µs vs mesh
/// 102–132 and ring 112–140 at 8 KiB, within the noise of both at
/// 32–128 KiB, behind from 256 KiB (408–411 vs ring 358–467 µs). The
/// cost model alone stops at ~48 KiB with 4 ranks (it prices TCP's
/// reductions at 5 GB/s and pipelines nothing).
pub const ONESHOT_MAX_BYTES: u64 = 128 << 10;

/// Largest AllReduce (bytes) host TCP runs with recursive doubling when
/// every rank is on one host (at most 8 ranks). There a message costs CPU
/// time more than wire time (a system call on each side, on cores the
/// ranks share), so doubling's `log2 p` messages per rank beat one-shot's
/// `p − 1`; across hosts one-shot's single round wins (HCCL's rule).
/// Measured with `tcp_allreduce_bench`, quiet 2-core VM, 2 runs each,
/// µs per op, doubling vs one-shot: 4 processes 57 vs 67–79 at 8 KiB,
/// 73–77 vs 99–135 at 32 KiB, 149–173 vs 191–194 at 128 KiB (H-D_R
/// 160–195), 261–304 vs 357–436 at 256 KiB (H-D_R 227–244, so H-D_R from
/// there); 3 processes 37–42 vs 39–40 at 8 KiB, 85–87 vs 121–137 at
/// 128 KiB; 8 processes 331–353 vs 307–532 at 8 KiB, 1064–1180 vs
/// 2181–2298 at 128 KiB; 2 processes equal (one exchange either way).
pub const DOUBLING_MAX_BYTES: u64 = 128 << 10;

/// [`DOUBLING_MAX_BYTES`] when a host runs more ranks than it has CPUs
/// ([`HostFit::ranks_fit_cpus`] false) and the ranks are a power of two.
/// There the TCP transport's rings carry messages up to 32 KiB as bytes
/// (`hccl_hw`'s `MAX_INLINE_ON_RINGS`) and lend longer ones, whose sends
/// wait for the peer's ack, and the peer, sharing a core, is often not
/// running. Doubling sends the whole vector per round, so above 32 KiB
/// every message is lent; H-D_R's are half and a quarter of it, so at
/// 64 KiB all of them go as bytes. Measured with `tcp_allreduce_bench`,
/// 4 processes on a 2-core AMD EPYC (Zen 3) VM, quiet, 5 interleaved
/// runs, medians, µs, doubling / H-D_R / ring (session 17): 32 KiB 91.5 /
/// 90.2 / 130.0; 64 KiB 158.9 / 97.7 / 159.7; 128 KiB 258 / 198 / 210;
/// 1 MiB 1887 / 922 / 998 (Open MPI 135-141 µs at 64 KiB in the same
/// hour). The bound was 64 KiB while the rings' inline bound was too
/// (sessions 11-14); session 15 tried 32 KiB on an Intel Xeon VM in one
/// noisy series and found 64 KiB slower there (217 vs 121 µs), which
/// was not re-measured.
pub const DOUBLING_MAX_BYTES_OVERSUBSCRIBED: u64 = 32 << 10;

/// [`DOUBLING_MAX_BYTES_OVERSUBSCRIBED`] for a number of ranks that is
/// not a power of two. H-D_R then folds the extra ranks in and out with
/// whole-vector messages, lent like doubling's, so it saves no lending
/// and adds steps: 3 processes on the same VM, 4 interleaved runs,
/// medians, doubling / H-D_R: 64 KiB 71.9 / 85.8 µs, 128 KiB 126 / 136.
pub const DOUBLING_MAX_BYTES_OVERSUBSCRIBED_UNEVEN: u64 = 64 << 10;

/// Slice length (bytes) of an AllReduce that [`plan_op`] slices: the op
/// runs as independent AllReduces of at most this many bytes whose steps
/// interleave (`crate::algo::slice`), so each slice's reduce-scatter
/// result is sent on while it is still in the CPU's cache. Measured with
/// `tcp_allreduce_bench` (2 processes, ring, 2-core VM, quiet, 3 runs
/// each, interleaved, µs per op) with no slicing / 512 KiB / 1 MiB / 2 MiB
/// slices: 16 MiB 3598–4068 / 2454–2566 / 2041–2445 / 2382–2924 (one run
/// of each of 1 and 2 MiB hit a slow spell: 3511, 5496); 32 MiB
/// 10104–10511 / 6423–6930 / 6039–8438 / 6251–9369; 64 MiB 16299–31611 /
/// 16772–17928 / 15159–20690 / 15560–20476; 1–8 MiB equal within the
/// noise but for 512 KiB slices at 2 MiB (437–484 vs 356–400). With more
/// ranks than CPUs (4 processes on 2 cores, H-D_R) every slice's extra
/// messages cost context switches and 1–4 MiB slices were up to 1.5×
/// slower at 1–8 MiB, so [`plan_op`] slices only when the ranks fit
/// their CPUs ([`HostFit::ranks_fit_cpus`]).
pub const SLICE_BYTES: u64 = 1 << 20;

/// Where a communicator's ranks run, as the host policy needs it. Every
/// rank must pass the same (TCP computes both from the bootstrap's table,
/// which every rank receives alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostFit {
    /// Distinct hosts the ranks run on (TCP: distinct listener addresses,
    /// `hccl_hw::tcp::TcpRank::hosts`). Steers small AllReduces: doubling
    /// on one host, one-shot across hosts.
    pub hosts: u32,
    /// Whether every host has at least as many CPUs as ranks on it (TCP:
    /// `hccl_hw::tcp::TcpRank::ranks_fit_cpus`). Steers slicing
    /// ([`SLICE_BYTES`]).
    pub ranks_fit_cpus: bool,
}

/// One rank's part of a collective as the host policy planned it: what
/// [`plan_op`] returns, for a backend to run.
pub struct PlannedOp {
    /// The algorithm chosen (as [`choose`] would say).
    pub algo: AlgoSpec,
    /// The buffer sizes the plan assumes, bytes.
    pub sizes: BufferSizes,
    /// The rank's steps, generated lazily.
    pub plan: RankPlan,
}

impl PlannedOp {
    /// The steps collected into memory, with the algorithm: for printing,
    /// and for comparing two plans (a [`RankPlan`] is a lazy iterator and
    /// compares as nothing). `rank` is the rank the op was planned for.
    pub fn collect(self, rank: Rank) -> (AlgoSpec, RankSchedule) {
        let schedule = RankSchedule {
            rank,
            buffers: self.sizes,
            steps: self.plan.collect(),
        };
        (self.algo, schedule)
    }
}

impl fmt::Debug for PlannedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlannedOp")
            .field("algo", &self.algo)
            .field("sizes", &self.sizes)
            .finish_non_exhaustive()
    }
}

/// The algorithm a communicator (flat layout) runs `args` with between
/// hosts: what [`plan_op`] chooses on `GroupLayout::flat(args.world_size)`.
/// For reports such as `Comm::algorithm`; see [`plan_op`] for the rule.
/// Arguments that do not plan get the choice all the same ([`plan_op`]
/// reports them).
pub fn choose(args: &CollectiveArgs, fit: HostFit, forced: Option<&HcclAlgo>) -> AlgoSpec {
    choose_on(args, &GroupLayout::flat(args.world_size), fit, forced)
}

/// Plans rank `rank`'s part of `args` on `layout` between hosts.
///
/// The algorithm: `forced` (the parsed `HCCL_ALGO`) if its setting fits
/// the collective ([`HcclAlgo::spec_fitting`]; one that does not, such as
/// `pairwise` for an AllReduce, changes nothing), else the selector's
/// choice with [`TCP_COST`] on every level, adjusted for hosts: AllReduce
/// on at most 8 ranks runs recursive doubling up to [`DOUBLING_MAX_BYTES`]
/// ([`DOUBLING_MAX_BYTES_OVERSUBSCRIBED`] or, for a number of ranks that
/// is not a power of two, [`DOUBLING_MAX_BYTES_OVERSUBSCRIBED_UNEVEN`]
/// when the ranks do not fit their CPUs) when `fit.hosts` is 1, else
/// one-shot up to [`ONESHOT_MAX_BYTES`]; above it, and for a flat mesh
/// over more than two ranks above [`MESH_MAX_BYTES`] (an AllReduce at any
/// size when the ranks do not fit their CPUs), the selector's cheapest
/// candidate that is neither mesh nor one-shot (the ring if none). The
/// plan: as [`plan_spec`].
///
/// # Errors
/// As [`crate::algo::plan`]: arguments that do not validate, a layout or
/// rank that does not match `args.world_size`, a chosen algorithm that
/// does not plan the collective (a forced one is only taken where it does).
pub fn plan_op(
    args: &CollectiveArgs,
    layout: &GroupLayout,
    rank: Rank,
    fit: HostFit,
    forced: Option<&HcclAlgo>,
) -> Result<PlannedOp, AlgoError> {
    // Checked before choosing: the selector indexes the layout by rank.
    args.validate()?;
    if layout.world_size() != args.world_size {
        return Err(AlgoError::LayoutSize {
            layout: layout.world_size(),
            world: args.world_size,
        });
    }
    let algo = choose_on(args, layout, fit, forced);
    plan_spec(args, &algo, layout, rank, fit)
}

/// Plans rank `rank`'s part of `args` with `algo` (chosen by the caller)
/// between hosts: an AllReduce longer than [`SLICE_BYTES`] in slices of at
/// most that length when `fit.ranks_fit_cpus`, anything else as
/// [`crate::algo::plan`]. For a forced algorithm (`hccl test --algo`, a
/// benchmark); [`plan_op`] chooses and calls this.
///
/// # Errors
/// As [`crate::algo::plan`].
pub fn plan_spec(
    args: &CollectiveArgs,
    algo: &AlgoSpec,
    layout: &GroupLayout,
    rank: Rank,
    fit: HostFit,
) -> Result<PlannedOp, AlgoError> {
    let (sizes, plan) = if fit.ranks_fit_cpus {
        plan_sliced(args, algo, layout, rank, SLICE_BYTES)?
    } else {
        plan(args, algo, layout, rank)?
    };
    Ok(PlannedOp {
        algo: *algo,
        sizes,
        plan,
    })
}

/// The largest AllReduce (bytes) recursive doubling runs on one host of
/// `ranks` ranks.
fn doubling_max(ranks: u32, fit: HostFit) -> u64 {
    if fit.ranks_fit_cpus {
        DOUBLING_MAX_BYTES
    } else if ranks.is_power_of_two() {
        DOUBLING_MAX_BYTES_OVERSUBSCRIBED
    } else {
        DOUBLING_MAX_BYTES_OVERSUBSCRIBED_UNEVEN
    }
}

/// [`plan_op`]'s choice of algorithm on `layout`.
fn choose_on(
    args: &CollectiveArgs,
    layout: &GroupLayout,
    fit: HostFit,
    forced: Option<&HcclAlgo>,
) -> AlgoSpec {
    if let Some(spec) = forced.and_then(|e| e.spec_fitting(args, layout)) {
        return spec;
    }
    // Fixed before any costing: this runs for every op.
    let oneshot = AlgoSpec::Flat(Algorithm::Oneshot);
    let bytes = args.message_bytes();
    if args.kind == CollectiveKind::AllReduce && args.world_size <= 8 {
        if fit.hosts == 1 && bytes <= doubling_max(args.world_size, fit) {
            return AlgoSpec::Flat(Algorithm::Doubling);
        }
        if fit.hosts > 1 && bytes <= ONESHOT_MAX_BYTES {
            return oneshot;
        }
    }
    let cost = CostModel {
        level0: TCP_COST,
        level1: TCP_COST,
        level2: TCP_COST,
        level0_patterns: None,
    };
    // The selector's candidates, cheapest first (what `select` picks from
    // without HCCL_ALGO; the ring if none is costable).
    let ring = AlgoSpec::Flat(Algorithm::Ring);
    let candidates: Vec<AlgoSpec> = explain(args, layout, &cost)
        .into_iter()
        .map(|c| c.spec)
        .collect();
    let spec = candidates.first().copied().unwrap_or(ring);
    let mesh = AlgoSpec::Flat(Algorithm::Mesh);
    // On a crowded host doubling past its bound lends every message
    // (see DOUBLING_MAX_BYTES_OVERSUBSCRIBED); the cost model, which
    // prices messages only, would still pick it up to ~128 KiB.
    let crowded = fit.hosts == 1 && !fit.ranks_fit_cpus;
    let doubling = AlgoSpec::Flat(Algorithm::Doubling);
    // Nor a mesh AllReduce there (more than two ranks): its p - 1
    // messages at once with two ranks per core ran behind H-D_R (4
    // processes, session 17, 5 interleaved runs, medians: 48 KiB 105 vs
    // 90 µs, 64 KiB 130 vs 107).
    let crowded_allreduce = crowded && args.kind == CollectiveKind::AllReduce;
    let too_big = |s: &AlgoSpec| {
        *s == oneshot
            || (*s == mesh && args.world_size > 2 && (bytes > MESH_MAX_BYTES || crowded_allreduce))
            || (*s == doubling && crowded && bytes > doubling_max(args.world_size, fit))
    };
    if too_big(&spec) {
        let next = candidates.into_iter().find(|s| !too_big(s) && *s != mesh);
        return next
            .or_else(|| predict(args, &ring, layout, &cost).map(|_| ring))
            .unwrap_or(spec);
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{DataType, ReduceOp};

    fn allreduce(bytes: u64, n: u32) -> CollectiveArgs {
        CollectiveArgs::new(CollectiveKind::AllReduce, bytes / 4, DataType::Fp32, n)
            .with_op(ReduceOp::Sum)
    }

    fn on(hosts: u32) -> HostFit {
        HostFit {
            hosts,
            ranks_fit_cpus: true,
        }
    }

    #[test]
    fn an_hccl_algo_that_does_not_fit_leaves_the_host_choice_alone() {
        let h = |v: &str| HcclAlgo::parse(v).unwrap();
        let args = allreduce(8 << 10, 4);
        let layout = GroupLayout::flat(4);
        // What a communicator runs without HCCL_ALGO on one host: doubling.
        assert_eq!(
            choose(&args, on(1), None),
            AlgoSpec::Flat(Algorithm::Doubling)
        );
        // pairwise (AllToAll's) and an alltoall-only setting do not plan an
        // AllReduce: the choice must not move to the plain selector's.
        for v in ["pairwise", "alltoall=level0:NA;level1:pairwise"] {
            assert_eq!(h(v).spec_fitting(&args, &layout), None, "{v}");
            assert_eq!(
                choose(&args, on(1), Some(&h(v))),
                AlgoSpec::Flat(Algorithm::Doubling),
                "{v}"
            );
        }
        // One that fits wins.
        assert_eq!(
            choose(&args, on(1), Some(&h("ring"))),
            AlgoSpec::Flat(Algorithm::Ring)
        );
    }

    #[test]
    fn large_messages_over_more_than_two_ranks_take_neither_mesh_nor_oneshot() {
        let hd = AlgoSpec::Flat(Algorithm::HalvingDoubling);
        for hosts in [1, 2] {
            assert_eq!(choose(&allreduce(1 << 20, 4), on(hosts), None), hd);
            assert_eq!(choose(&allreduce(64 << 20, 8), on(hosts), None), hd);
            for n in 3..=9 {
                for bytes in [1 << 20, 64 << 20] {
                    let s = choose(&allreduce(bytes, n), on(hosts), None);
                    assert!(
                        ![Algorithm::Mesh, Algorithm::Oneshot, Algorithm::Doubling]
                            .iter()
                            .any(|a| s == AlgoSpec::Flat(*a)),
                        "{n} ranks, {bytes} bytes: {s}"
                    );
                }
            }
        }
    }

    #[test]
    fn small_allreduces_double_on_one_host_and_run_one_shot_across_hosts() {
        let oneshot = AlgoSpec::Flat(Algorithm::Oneshot);
        let doubling = AlgoSpec::Flat(Algorithm::Doubling);
        for n in [2, 3, 4, 8] {
            for (hosts, small, max) in [
                (1, doubling, DOUBLING_MAX_BYTES),
                (2, oneshot, ONESHOT_MAX_BYTES),
            ] {
                for bytes in [4, 8 << 10, max] {
                    let s = choose(&allreduce(bytes, n), on(hosts), None);
                    assert_eq!(s, small, "{n} ranks on {hosts} hosts, {bytes} bytes");
                }
                // Above the bound the selector decides (it may still pick
                // doubling just above it: log2 p messages), never one-shot.
                for bytes in [max + 4, 1 << 20, 64 << 20] {
                    let s = choose(&allreduce(bytes, n), on(hosts), None);
                    let large = bytes >= 1 << 20;
                    assert!(
                        s != oneshot && !(large && s == doubling),
                        "{n} ranks on {hosts} hosts, {bytes} bytes: {s}"
                    );
                }
            }
        }
        // Beyond 8 ranks, and for other collectives, the selector decides.
        assert_ne!(choose(&allreduce(8 << 10, 9), on(2), None), oneshot);
    }

    #[test]
    fn an_oversubscribed_host_doubles_only_up_to_its_own_bound() {
        let crowded = HostFit {
            hosts: 1,
            ranks_fit_cpus: false,
        };
        let doubling = AlgoSpec::Flat(Algorithm::Doubling);
        let hd = AlgoSpec::Flat(Algorithm::HalvingDoubling);
        let max = DOUBLING_MAX_BYTES_OVERSUBSCRIBED;
        assert!(max < DOUBLING_MAX_BYTES);
        assert_eq!(choose(&allreduce(max, 4), crowded, None), doubling);
        assert_eq!(choose(&allreduce(max + 4, 4), crowded, None), hd);
        // Not mesh either, up to MESH_MAX_BYTES, which the cost model
        // prefers at 48-64 KiB.
        for kib in [48, 56, 64] {
            assert_eq!(
                choose(&allreduce(kib << 10, 4), crowded, None),
                hd,
                "{kib} KiB"
            );
        }
        assert_eq!(choose(&allreduce(DOUBLING_MAX_BYTES, 4), crowded, None), hd);
        // With a CPU per rank the bound stays DOUBLING_MAX_BYTES.
        assert_eq!(
            choose(&allreduce(DOUBLING_MAX_BYTES, 4), on(1), None),
            doubling
        );
        // Three ranks keep doubling to the uneven bound (H-D_R would fold
        // whole vectors in and out), then take the selector's next choice.
        let uneven = DOUBLING_MAX_BYTES_OVERSUBSCRIBED_UNEVEN;
        assert!(uneven > max);
        assert_eq!(choose(&allreduce(uneven, 3), crowded, None), doubling);
        assert_ne!(choose(&allreduce(uneven + 4, 3), crowded, None), doubling);
    }

    #[test]
    fn plan_op_slices_large_allreduces_only_when_the_ranks_fit_their_cpus() {
        let args = allreduce(8 * SLICE_BYTES, 2);
        let layout = GroupLayout::flat(2);
        let steps = |fit| {
            let op = plan_op(&args, &layout, 0, fit, None).unwrap();
            assert_eq!(op.algo, choose(&args, fit, None));
            op.collect(0).1.steps.len()
        };
        let whole = crate::algo::plan(&args, &choose(&args, on(1), None), &layout, 0)
            .unwrap()
            .1
            .count();
        let unsliced = HostFit {
            hosts: 1,
            ranks_fit_cpus: false,
        };
        assert_eq!(steps(unsliced), whole);
        // Eight slices, each at least the whole op's steps.
        assert!(steps(on(1)) >= 8 * whole, "{} vs {whole}", steps(on(1)));
    }

    #[test]
    fn plan_op_reports_a_layout_of_another_size_instead_of_panicking() {
        // Large enough to reach the selector, which indexes the layout.
        let args = allreduce(1 << 20, 4);
        let e = plan_op(&args, &GroupLayout::flat(2), 0, on(1), None).unwrap_err();
        assert!(
            matches!(
                e,
                AlgoError::LayoutSize {
                    layout: 2,
                    world: 4
                }
            ),
            "{e}"
        );
        let e = plan_op(&args, &GroupLayout::flat(4), 4, on(1), None).unwrap_err();
        assert!(
            matches!(e, AlgoError::RankOutOfRange { rank: 4, world: 4 }),
            "{e}"
        );
    }
}

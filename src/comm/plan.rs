//! Planning, in one place for every backend: the algorithm, buffer sizes
//! and this rank's schedule of an op, from the call and where the ranks
//! run ([`HostFit`], which the backend reports). Backends receive the
//! [`PlannedOp`] and run it; none of them chooses an algorithm.
//!
//! `HostFit` and `PlannedOp` have the shape of the host policy that moves
//! into `hccl-algos` (issue 15): this module then becomes a thin call.

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::{BufferSizes, Rank, RankPlan};

use super::CommError;

/// Where a communicator's ranks run, as the algorithm choice needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostFit {
    /// Distinct hosts the ranks run on (1: all on this host).
    pub(crate) hosts: u32,
    /// Every host has a CPU per rank it runs (then a long AllReduce is
    /// sliced; see `hccl_hw::tcp::select::SLICE_BYTES`).
    pub(crate) ranks_fit_cpus: bool,
}

/// One rank's plan of one op: what every backend runs.
pub(crate) struct PlannedOp {
    /// The algorithm (the same on every rank).
    pub(crate) algo: AlgoSpec,
    /// Bytes of this rank's input, output and scratch buffers.
    pub(crate) sizes: BufferSizes,
    /// This rank's steps.
    pub(crate) plan: RankPlan,
}

/// The algorithm for `args` on ranks placed as `fit`: `HCCL_ALGO` where it
/// fits the collective, else the host policy
/// ([`hccl_hw::tcp::choose_algo`]). Every rank computes the same.
///
/// # Errors
/// [`CommError`] if `HCCL_ALGO` does not parse.
pub(crate) fn choose(args: &CollectiveArgs, fit: HostFit) -> Result<AlgoSpec, CommError> {
    Ok(hccl_hw::tcp::choose_algo(args, fit.hosts)?)
}

/// Plans `rank`'s part of `args` on a flat layout: [`choose`], then the
/// schedule (sliced when `fit.ranks_fit_cpus`, see
/// [`hccl_hw::tcp::plan_op`]).
///
/// # Errors
/// As [`choose`]; [`CommError::Algo`] if the algorithm cannot plan the call.
pub(crate) fn plan(
    args: &CollectiveArgs,
    rank: Rank,
    fit: HostFit,
) -> Result<PlannedOp, CommError> {
    let algo = choose(args, fit)?;
    let layout = GroupLayout::flat(args.world_size);
    let (sizes, plan) = hccl_hw::tcp::plan_op(args, &algo, &layout, rank, fit.ranks_fit_cpus)?;
    Ok(PlannedOp { algo, sizes, plan })
}

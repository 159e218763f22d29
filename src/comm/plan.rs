//! Planning, in one place for every backend: the algorithm, buffer sizes
//! and this rank's schedule of an op, from the call, where the ranks run
//! ([`HostFit`], which the backend reports) and the communicator's
//! `HCCL_ALGO` (parsed once, when it was built). Backends receive the
//! [`PlannedOp`] and run it; none of them chooses an algorithm.
//!
//! The policy itself is `hccl_algos::select::host` (one function,
//! [`hccl_algos::select::plan_op`]); this module reads `HCCL_ALGO`.

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::Rank;
use hccl_algos::select::HcclAlgo;
pub(crate) use hccl_algos::select::{HostFit, PlannedOp};

use super::CommError;

/// `HCCL_ALGO`, parsed (`None`: unset or blank). Read when a communicator
/// is built, not per op.
///
/// # Errors
/// [`CommError::Env`] naming the variable, its value and what is wrong.
pub(crate) fn algo_env() -> Result<Option<HcclAlgo>, CommError> {
    let value = std::env::var("HCCL_ALGO").ok();
    HcclAlgo::from_setting(value.as_deref()).map_err(|e| CommError::Env {
        var: "HCCL_ALGO",
        value: value.unwrap_or_default(),
        reason: e.to_string().trim_start_matches("HCCL_ALGO: ").to_string(),
    })
}

/// The algorithm for `args` on ranks placed as `fit`: `forced` (the
/// communicator's `HCCL_ALGO`) where it fits the collective, else the host
/// policy ([`hccl_algos::select::choose`]). Every rank computes the same.
pub(crate) fn choose(args: &CollectiveArgs, fit: HostFit, forced: Option<&HcclAlgo>) -> AlgoSpec {
    hccl_algos::select::choose(args, fit, forced)
}

/// Plans `rank`'s part of `args` on a flat layout
/// ([`hccl_algos::select::plan_op`]: [`choose`]'s algorithm, sliced when
/// `fit.ranks_fit_cpus`).
///
/// # Errors
/// [`CommError::Algo`] if the arguments or the algorithm cannot plan.
pub(crate) fn plan(
    args: &CollectiveArgs,
    rank: Rank,
    fit: HostFit,
    forced: Option<&HcclAlgo>,
) -> Result<PlannedOp, CommError> {
    let layout = GroupLayout::flat(args.world_size);
    Ok(hccl_algos::select::plan_op(
        args, &layout, rank, fit, forced,
    )?)
}

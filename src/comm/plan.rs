//! Planning, in one place for every backend: the algorithm, buffer sizes
//! and this rank's schedule of an op, from the call and where the ranks
//! run ([`HostFit`], which the backend reports). Backends receive the
//! [`PlannedOp`] and run it; none of them chooses an algorithm.
//!
//! The policy itself is `hccl_algos::select::host` (one function,
//! [`hccl_algos::select::plan_op`]); this module adds `HCCL_ALGO`.

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::Rank;
use hccl_algos::select::HcclAlgo;
pub(crate) use hccl_algos::select::{HostFit, PlannedOp};

use super::CommError;

/// `HCCL_ALGO`, parsed (`None`: unset or blank).
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

/// The algorithm for `args` on ranks placed as `fit`: `HCCL_ALGO` where it
/// fits the collective, else the host policy
/// ([`hccl_algos::select::choose`]). Every rank computes the same.
///
/// # Errors
/// [`CommError`] if `HCCL_ALGO` does not parse.
pub(crate) fn choose(args: &CollectiveArgs, fit: HostFit) -> Result<AlgoSpec, CommError> {
    Ok(hccl_algos::select::choose(args, fit, algo_env()?.as_ref()))
}

/// Plans `rank`'s part of `args` on a flat layout
/// ([`hccl_algos::select::plan_op`]: [`choose`]'s algorithm, sliced when
/// `fit.ranks_fit_cpus`).
///
/// # Errors
/// As [`choose`]; [`CommError::Algo`] if the algorithm cannot plan the call.
pub(crate) fn plan(
    args: &CollectiveArgs,
    rank: Rank,
    fit: HostFit,
) -> Result<PlannedOp, CommError> {
    let layout = GroupLayout::flat(args.world_size);
    let forced = algo_env()?;
    Ok(hccl_algos::select::plan_op(
        args,
        &layout,
        rank,
        fit,
        forced.as_ref(),
    )?)
}

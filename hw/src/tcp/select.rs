//! Algorithm choice for host TCP: `HCCL_ALGO` if it names one for the
//! collective, else `hccl_algos::select` with host-TCP link costs.

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::layout::GroupLayout;
use hccl_algos::select::{select, CostModel, HcclAlgo, LinkCost};

use super::error::TcpError;

/// Host TCP link costs: α ≈ 30 µs per message (a loopback hop through the
/// kernel and the I/O tasks, order of magnitude measured with
/// `tcp_allreduce_bench`), ≈ 3 GB/s per connection, host reduce ≈ 5 GB/s.
/// Round figures for ranking algorithms, not predictions.
pub const TCP_COST: LinkCost = LinkCost {
    alpha_ns: 30_000.0,
    bandwidth_gbps: 3.0,
    reduce_gbps: 5.0,
};

/// The algorithm to run `args` with over TCP (all ranks compute the same).
///
/// # Errors
/// [`TcpError::Config`] if `HCCL_ALGO` does not parse.
pub fn choose_algo(args: &CollectiveArgs) -> Result<AlgoSpec, TcpError> {
    let env = HcclAlgo::from_env().map_err(|e| TcpError::Config {
        var: "HCCL_ALGO",
        value: std::env::var("HCCL_ALGO").unwrap_or_default(),
        reason: e.to_string(),
    })?;
    let cost = CostModel {
        level0: TCP_COST,
        level1: TCP_COST,
        level2: TCP_COST,
    };
    let layout = GroupLayout::flat(args.world_size);
    Ok(select(args, &layout, &cost, env.as_ref()).spec)
}

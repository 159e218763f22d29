//! Algorithm choice for host TCP: `HCCL_ALGO` if it names one for the
//! collective, else `hccl_algos::select` with host-TCP link costs.

use hccl_algos::algo::{AlgoSpec, Algorithm};
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::layout::GroupLayout;
use hccl_algos::select::{predict, select, CostModel, HcclAlgo, LinkCost};

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

/// Largest message (bytes, as `CollectiveArgs::message_bytes`) for which
/// host TCP keeps the selector's mesh with more than two ranks; above it
/// the ring is used. The selector prices mesh with one link per peer (a
/// server's full mesh), but here a rank's `p − 1` concurrent messages share
/// one process's thread and one memory bus (the same-host fast path, like
/// a NIC port shared by the peers). Measured with `tcp_allreduce_bench`
/// on 4 processes (2-core VM, load average 4–5, same-host fast path on):
/// mesh ahead up to 64 KiB, ring ahead from 128 KiB, by up to 2–3× at
/// 2–32 MiB.
pub const MESH_MAX_BYTES: u64 = 64 << 10;

/// The algorithm to run `args` with over TCP (all ranks compute the same):
/// `HCCL_ALGO` if set, else the selector's choice, with a flat mesh over
/// more than two ranks replaced by the ring above [`MESH_MAX_BYTES`].
///
/// # Errors
/// [`TcpError::Config`] if `HCCL_ALGO` does not parse.
pub fn choose_algo(args: &CollectiveArgs) -> Result<AlgoSpec, TcpError> {
    let env = HcclAlgo::from_env().map_err(|e| TcpError::Config {
        var: "HCCL_ALGO",
        value: std::env::var("HCCL_ALGO").unwrap_or_default(),
        reason: e.to_string().trim_start_matches("HCCL_ALGO: ").to_string(),
    })?;
    let cost = CostModel {
        level0: TCP_COST,
        level1: TCP_COST,
        level2: TCP_COST,
        level0_patterns: None,
    };
    let layout = GroupLayout::flat(args.world_size);
    let spec = select(args, &layout, &cost, env.as_ref()).spec;
    let ring = AlgoSpec::Flat(Algorithm::Ring);
    if env.is_none()
        && spec == AlgoSpec::Flat(Algorithm::Mesh)
        && args.world_size > 2
        && args.message_bytes() > MESH_MAX_BYTES
        && predict(args, &ring, &layout, &cost).is_some()
    {
        return Ok(ring);
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_algos::collective::CollectiveKind;
    use hccl_algos::{DataType, ReduceOp};

    fn allreduce(bytes: u64, n: u32) -> CollectiveArgs {
        CollectiveArgs::new(CollectiveKind::AllReduce, bytes / 4, DataType::Fp32, n)
            .with_op(ReduceOp::Sum)
    }

    #[test]
    fn large_messages_over_more_than_two_ranks_take_the_ring_not_the_mesh() {
        if std::env::var_os("HCCL_ALGO").is_some() {
            return; // the user's choice wins; nothing to check here
        }
        let ring = AlgoSpec::Flat(Algorithm::Ring);
        assert_eq!(choose_algo(&allreduce(1 << 20, 4)).unwrap(), ring);
        assert_eq!(choose_algo(&allreduce(64 << 20, 8)).unwrap(), ring);
        // Small ones keep whatever the selector picks (mesh, for 4 ranks).
        let small = choose_algo(&allreduce(8 << 10, 4)).unwrap();
        let layout = GroupLayout::flat(4);
        let cost = CostModel {
            level0: TCP_COST,
            level1: TCP_COST,
            level2: TCP_COST,
            level0_patterns: None,
        };
        assert_eq!(
            small,
            select(&allreduce(8 << 10, 4), &layout, &cost, None).spec
        );
    }
}

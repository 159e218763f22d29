//! Algorithm choice for host TCP: `HCCL_ALGO` if it names one for the
//! collective, else `hccl_algos::select` with host-TCP link costs.

use hccl_algos::algo::slice::plan_sliced;
use hccl_algos::algo::{plan, AlgoError, AlgoSpec, Algorithm};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::{BufferSizes, Rank, RankPlan};
use hccl_algos::select::{explain, predict, CostModel, HcclAlgo, LinkCost};

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

/// Slice length (bytes) of an AllReduce that [`plan_op`] slices: the op
/// runs as independent AllReduces of at most this many bytes whose steps
/// interleave (`hccl_algos::algo::slice`), so each slice's reduce-scatter
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
/// their CPUs.
pub const SLICE_BYTES: u64 = 1 << 20;

/// Plans one rank's part of `args` with `algo` for host TCP: an AllReduce
/// longer than [`SLICE_BYTES`] in slices of at most that length when
/// `ranks_fit_cpus` ([`super::TcpRank::ranks_fit_cpus`], the same on every
/// rank), anything else as `hccl_algos::algo::plan`.
///
/// # Errors
/// As `hccl_algos::algo::plan`.
pub fn plan_op(
    args: &CollectiveArgs,
    algo: &AlgoSpec,
    layout: &GroupLayout,
    rank: Rank,
    ranks_fit_cpus: bool,
) -> Result<(BufferSizes, RankPlan), AlgoError> {
    if ranks_fit_cpus {
        plan_sliced(args, algo, layout, rank, SLICE_BYTES)
    } else {
        plan(args, algo, layout, rank)
    }
}

/// `HCCL_ALGO`, parsed.
fn algo_env() -> Result<Option<HcclAlgo>, TcpError> {
    HcclAlgo::from_env().map_err(|e| TcpError::Config {
        var: "HCCL_ALGO",
        value: std::env::var("HCCL_ALGO").unwrap_or_default(),
        reason: e.to_string().trim_start_matches("HCCL_ALGO: ").to_string(),
    })
}

/// Checks that `HCCL_ALGO` parses (a communicator's constructor calls it,
/// so a bad value fails there rather than at the first op).
///
/// # Errors
/// [`TcpError::Config`] naming `HCCL_ALGO` and its value.
pub fn check_algo_env() -> Result<(), TcpError> {
    algo_env().map(drop)
}

/// The algorithm to run `args` with over TCP on a communicator whose ranks
/// listen on `hosts` distinct addresses ([`super::TcpRank::hosts`]; all
/// ranks compute the same): `HCCL_ALGO` if its setting fits the collective
/// (`HcclAlgo::spec_fitting`; one that does not, such as `pairwise` for an
/// AllReduce, changes nothing), else the selector's choice
/// adjusted for hosts: AllReduce on at most 8 ranks runs recursive
/// doubling up to [`DOUBLING_MAX_BYTES`] when `hosts` is 1, else one-shot
/// up to [`ONESHOT_MAX_BYTES`]; above it, and for a flat mesh over more
/// than two ranks above [`MESH_MAX_BYTES`], the selector's cheapest
/// candidate that is neither mesh nor one-shot (the ring if none).
///
/// # Errors
/// [`TcpError::Config`] if `HCCL_ALGO` does not parse.
pub fn choose_algo(args: &CollectiveArgs, hosts: u32) -> Result<AlgoSpec, TcpError> {
    Ok(choose_with(args, hosts, algo_env()?.as_ref()))
}

/// [`choose_algo`] with the `HCCL_ALGO` setting given.
fn choose_with(args: &CollectiveArgs, hosts: u32, env: Option<&HcclAlgo>) -> AlgoSpec {
    let cost = CostModel {
        level0: TCP_COST,
        level1: TCP_COST,
        level2: TCP_COST,
        level0_patterns: None,
    };
    let layout = GroupLayout::flat(args.world_size);
    if let Some(spec) = env.and_then(|e| e.spec_fitting(args, &layout)) {
        return spec;
    }
    // Fixed before any costing: this runs for every op.
    let oneshot = AlgoSpec::Flat(Algorithm::Oneshot);
    let bytes = args.message_bytes();
    if args.kind == CollectiveKind::AllReduce && args.world_size <= 8 {
        if hosts == 1 && bytes <= DOUBLING_MAX_BYTES {
            return AlgoSpec::Flat(Algorithm::Doubling);
        }
        if hosts > 1 && bytes <= ONESHOT_MAX_BYTES {
            return oneshot;
        }
    }
    // The selector's candidates, cheapest first (what `select` picks from
    // without HCCL_ALGO; the ring if none is costable).
    let ring = AlgoSpec::Flat(Algorithm::Ring);
    let candidates: Vec<AlgoSpec> = explain(args, &layout, &cost)
        .into_iter()
        .map(|c| c.spec)
        .collect();
    let spec = candidates.first().copied().unwrap_or(ring);
    let mesh = AlgoSpec::Flat(Algorithm::Mesh);
    let too_big = |s: &AlgoSpec| {
        *s == oneshot || (*s == mesh && args.world_size > 2 && bytes > MESH_MAX_BYTES)
    };
    if too_big(&spec) {
        let next = candidates.into_iter().find(|s| !too_big(s) && *s != mesh);
        return next
            .or_else(|| predict(args, &ring, &layout, &cost).map(|_| ring))
            .unwrap_or(spec);
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_algos::{DataType, ReduceOp};

    fn allreduce(bytes: u64, n: u32) -> CollectiveArgs {
        CollectiveArgs::new(CollectiveKind::AllReduce, bytes / 4, DataType::Fp32, n)
            .with_op(ReduceOp::Sum)
    }

    #[test]
    fn an_hccl_algo_that_does_not_fit_leaves_the_tcp_choice_alone() {
        let h = |v: &str| HcclAlgo::parse(v).unwrap();
        let args = allreduce(8 << 10, 4);
        let layout = GroupLayout::flat(4);
        // What choose_algo runs without HCCL_ALGO on one host: doubling.
        assert_eq!(
            choose_with(&args, 1, None),
            AlgoSpec::Flat(Algorithm::Doubling)
        );
        // pairwise (AllToAll's) and an alltoall-only setting do not plan an
        // AllReduce: the choice must not move to the plain selector's.
        for v in ["pairwise", "alltoall=level0:NA;level1:pairwise"] {
            assert_eq!(h(v).spec_fitting(&args, &layout), None, "{v}");
            assert_eq!(
                choose_with(&args, 1, Some(&h(v))),
                AlgoSpec::Flat(Algorithm::Doubling),
                "{v}"
            );
        }
        // One that fits wins.
        assert_eq!(
            choose_with(&args, 1, Some(&h("ring"))),
            AlgoSpec::Flat(Algorithm::Ring)
        );
    }

    #[test]
    fn large_messages_over_more_than_two_ranks_take_neither_mesh_nor_oneshot() {
        if std::env::var_os("HCCL_ALGO").is_some() {
            return; // the user's choice wins; nothing to check here
        }
        let hd = AlgoSpec::Flat(Algorithm::HalvingDoubling);
        for hosts in [1, 2] {
            assert_eq!(choose_algo(&allreduce(1 << 20, 4), hosts).unwrap(), hd);
            assert_eq!(choose_algo(&allreduce(64 << 20, 8), hosts).unwrap(), hd);
            for n in 3..=9 {
                for bytes in [1 << 20, 64 << 20] {
                    let s = choose_algo(&allreduce(bytes, n), hosts).unwrap();
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
        if std::env::var_os("HCCL_ALGO").is_some() {
            return;
        }
        let oneshot = AlgoSpec::Flat(Algorithm::Oneshot);
        let doubling = AlgoSpec::Flat(Algorithm::Doubling);
        for n in [2, 3, 4, 8] {
            for (hosts, small, max) in [
                (1, doubling, DOUBLING_MAX_BYTES),
                (2, oneshot, ONESHOT_MAX_BYTES),
            ] {
                for bytes in [4, 8 << 10, max] {
                    let s = choose_algo(&allreduce(bytes, n), hosts).unwrap();
                    assert_eq!(s, small, "{n} ranks on {hosts} hosts, {bytes} bytes");
                }
                // Above the bound the selector decides (it may still pick
                // doubling just above it: log2 p messages), never one-shot.
                for bytes in [max + 4, 1 << 20, 64 << 20] {
                    let s = choose_algo(&allreduce(bytes, n), hosts).unwrap();
                    let large = bytes >= 1 << 20;
                    assert!(
                        s != oneshot && !(large && s == doubling),
                        "{n} ranks on {hosts} hosts, {bytes} bytes: {s}"
                    );
                }
            }
        }
        // Beyond 8 ranks, and for other collectives, the selector decides.
        assert_ne!(choose_algo(&allreduce(8 << 10, 9), 2).unwrap(), oneshot);
    }
}

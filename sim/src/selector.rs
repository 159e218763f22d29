//! What `hccl_algos`'s selector needs to know about a simulated cluster,
//! read off its [`Fabric`]: the group layout (server and super pod of each
//! rank) and the α–β–γ [`CostModel`]. One place for both, so that `hccl
//! test` (cli) and the C API's `HCCL_TIMING=sim` pick the same algorithms
//! on the same cluster.

use hccl_algos::layout::GroupLayout;
use hccl_algos::select::{CostModel, LinkCost, PatternGbps};
use hccl_topology::Fabric;

/// Server and super pod of every rank, for hierarchical algorithms.
pub fn layout(fabric: &Fabric) -> GroupLayout {
    let c = fabric.cluster();
    let n = c.world_size();
    let server_of = (0..n).map(|r| c.server_of(r).unwrap_or(0)).collect();
    let pod_of = (0..n).map(|r| c.super_pod_of(r).unwrap_or(0)).collect();
    GroupLayout::from_parts(server_of, pod_of).unwrap_or_else(|_| GroupLayout::flat(n.max(1)))
}

/// The selector's α–β–γ costs read off the fabric: per level, the
/// bottleneck bandwidth and latency of a route from rank 0 to the first
/// rank on another NPU of its server (level 0), another server (level 1)
/// and another super pod (level 2); α = the device's per-message overhead
/// plus the route latency; γ = the device's reduce bandwidth. A level the
/// cluster does not have copies the level below.
pub fn cost_model(fabric: &Fabric) -> CostModel {
    let c = fabric.cluster();
    let params = fabric.params();
    let n = c.world_size();
    let probe = |pick: &dyn Fn(u32) -> bool| -> Option<LinkCost> {
        let dst = (1..n).find(|&r| pick(r))?;
        let route = fabric.route(0, dst).ok()?;
        Some(LinkCost {
            alpha_ns: params.msg_overhead_ns as f64 + fabric.latency_ns(&route) as f64,
            bandwidth_gbps: fabric.bottleneck_gbps(&route),
            reduce_gbps: params.reduce_gbps,
        })
    };
    let s0 = c.server_of(0);
    let p0 = c.super_pod_of(0);
    let fallback = LinkCost {
        alpha_ns: params.msg_overhead_ns as f64,
        bandwidth_gbps: 1.0,
        reduce_gbps: params.reduce_gbps,
    };
    let l0 = probe(&|r| c.server_of(r) == s0);
    let l1 = probe(&|r| c.server_of(r) != s0 && c.super_pod_of(r) == p0);
    let l2 = probe(&|r| c.super_pod_of(r) != p0);
    let level0 = l0.or(l1).or(l2).unwrap_or(fallback);
    let level1 = l1.or(l2).unwrap_or(level0);
    let level2 = l2.unwrap_or(level1);
    CostModel {
        level0,
        level1,
        level2,
        level0_patterns: level0_patterns(fabric, level0.bandwidth_gbps),
    }
}

/// The per-flow bandwidth of rank 0's server under the ring, mesh and
/// doubling patterns ([`PatternGbps`]), each flow getting its link's
/// bandwidth divided by the number of the pattern's routes on it (the
/// slowest flow counts). `None` when every pattern gets the level-0
/// bandwidth anyway (a full mesh) or the server has fewer than three NPUs.
fn level0_patterns(fabric: &Fabric, level0_gbps: f64) -> Option<PatternGbps> {
    let c = fabric.cluster();
    let s0 = c.server_of(0);
    let m: Vec<u32> = (0..c.world_size())
        .filter(|&r| c.server_of(r) == s0)
        .collect();
    let k = m.len();
    if k < 3 {
        return None;
    }
    let ring: Vec<(u32, u32)> = (0..k).map(|i| (m[i], m[(i + 1) % k])).collect();
    let mesh: Vec<(u32, u32)> = (0..k)
        .flat_map(|i| (0..k).filter(move |&j| j != i).map(move |j| (i, j)))
        .map(|(i, j)| (m[i], m[j]))
        .collect();
    let share = |pairs: &[(u32, u32)]| -> Option<f64> {
        let routes = pairs
            .iter()
            .map(|&(a, b)| fabric.route(a, b).ok())
            .collect::<Option<Vec<_>>>()?;
        let mut load = std::collections::BTreeMap::<usize, u32>::new();
        for r in &routes {
            for e in r.edges() {
                *load.entry(e.index()).or_default() += 1;
            }
        }
        Some(
            routes
                .iter()
                .flat_map(|r| r.edges().iter())
                .map(|&e| fabric.link(e).bandwidth_gbps / f64::from(load[&e.index()]))
                .fold(f64::INFINITY, f64::min),
        )
    };
    let mut doubling = f64::INFINITY;
    let mut d = 1;
    while d < k {
        let pairs: Vec<(u32, u32)> = (0..k)
            .filter(|&i| i ^ d < k)
            .map(|i| (m[i], m[i ^ d]))
            .collect();
        doubling = doubling.min(share(&pairs)?);
        d <<= 1;
    }
    let p = PatternGbps {
        ring: share(&ring)?,
        mesh: share(&mesh)?,
        doubling,
    };
    let full = |g: f64| g >= level0_gbps * (1.0 - 1e-9);
    (!(full(p.ring) && full(p.mesh) && full(p.doubling))).then_some(p)
}

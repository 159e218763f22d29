//! The α–β–γ cost model per topology level: what an algorithm is
//! predicted to cost for a collective on a layout ([`predict`]).
//!
//! Hockney's model as HCCL's algorithm guide uses it (`coll_algo_intro`,
//! "耗时评估"): one step moving and reducing `n` bytes costs
//! `α + nβ + nγ`, with α the fixed latency of a message, β = 1/bandwidth and
//! γ = 1/reduce-bandwidth. Per-algorithm totals, for `p` members and an
//! `n`-byte vector (Thakur, Rabenseifner & Gropp 2005, "Optimization of
//! collective communication operations in MPICH", IJHPCA 19(1), §3–4):
//!
//! | algorithm | AllReduce | ReduceScatter / AllGather (n = whole vector) |
//! |---|---|---|
//! | ring | `2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ` | `(p-1)α + (p-1)/p·nβ (+ (p-1)/p·nγ)` |
//! | H-D_R, p = 2^k | `2 log2 p·α + 2(p-1)/p·nβ + (p-1)/p·nγ` | `log2 p·α + (p-1)/p·nβ` |
//! | H-D_R, other p | the power-of-two part for `p' = 2^⌊log2 p⌋`, plus `2(α + nβ) + nγ` to fold | plus `2α + nβ`-ish folding |
//! | mesh (HCCL `Mesh.md`) | `2α + 2/p·nβ + (p-1)/p·nγ` | `α + 1/p·nβ (+ (p-1)/p·nγ)` |
//! | oneshot (AllReduce only) | `α + nβ + (p-1)·nγ` | — |
//! | doubling (AllReduce only), p = 2^k | `log2 p·(α + nβ + nγ)`; other p: fold as H-D_R | — |
//! | NB, any p | `2⌈log2 p⌉α + 2(p-1)/p·nβ + (p-1)/p·nγ` | `⌈log2 p⌉α + (p-1)/p·nβ (+ (p-1)/p·nγ)` |
//! | NHR, any p | as NB, plus `x/p·n(β+γ)` per phase | as NB, plus `x/p·nβ (+γ)` |
//!
//! NB and NHR are HCCL's formulas (guide `NB.md` and `NHR.md`, "Time
//! consumption"); their Broadcast (Scatter + AllGather) is
//! `2⌈log2 p⌉α + 2(p-1)/p·nβ`. hccl-rs's NHR pairs the halves of an odd
//! interval with one member left over, whose message a neighbour receives
//! in addition to its own: `x` sums, over the tree levels, the largest such
//! extra message (in blocks) of the level. H-D_R ReduceScatter for
//! `p ≠ 2^k` follows `RHD.md`: fold `α + n(β+γ)`, halving
//! `Σ_{i=1..⌊log2 p⌋} (α + ⌈p/2^i⌉/p·n(β+γ))`, last send `α + nβ/p`.
//!
//! Broadcast/Reduce: chain `(p-2+C)(α + nβ/C)` with `C` chunks (+γ),
//! binomial tree `⌈log2 p⌉(α + nβ)`, mesh Broadcast = Scatter + AllGather
//! `2α + 2/p·nβ`, mesh Reduce = ReduceScatter + Gather
//! `2α + 2/p·nβ + (p-1)/p·nγ`; mesh Scatter/Gather `α + 1/p·nβ`. AllToAll with `n` bytes per rank: pairwise
//! `(p-1)(α + nβ/p)`, mesh `α + (p-1)/p·nβ`. Hierarchical plans add their
//! phases, each with its level's [`LinkCost`] (HCCL's hierarchical scheme,
//! e.g. AllReduce = level0 ReduceScatter + level1 AllReduce on `n/k0` +
//! level0 AllGather). Mesh and oneshot are candidates only inside a server
//! (HCCL uses them for the intra-server full mesh) or for flat groups of at
//! most 8. Oneshot sends whole vectors where mesh sends blocks and folds
//! `p` of them, so it beats mesh only while
//! `α > (1 − 2/p)·nβ + (p−1)²/p·nγ`, i.e. for small AllReduces (HCCL's 910B operator takes its one-shot executors up to
//! 128 KiB, `HCCL_SMALL_COUNT_128_KB` in `all_reduce_operator.cc`).
//!
//! **Pipeline** (HCCL's guide, `coll_algo_intro/Pipeline.md`, table 1), on
//! `S` servers of `k` ranks (`p = S·k`), `B = n/p` bytes per block, inter
//! = the level-1 link (level 2 if the layout has several super pods),
//! intra = the level-0 link:
//! `T_AG = (S-1)·max(α_inter + Bβ_inter, α_intra + Bβ_intra) + α_intra + Bβ_intra`;
//! ReduceScatter the same plus `(p-1)·Bγ`; AllReduce `2·T_AG + (p-1)·Bγ`.
//! The guide's table has no γ term; hccl-rs adds the reductions every
//! ReduceScatter does. The intra step costs one block per link because the
//! `k − 1` messages go to distinct peers over the server's full mesh. With
//! one server the pipeline is the mesh, so it is not a separate candidate.

use crate::algo::{AlgoSpec, Algorithm};
use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::layout::GroupLayout;

/// Cost parameters of one level's links.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkCost {
    /// Fixed cost of one message, ns.
    pub alpha_ns: f64,
    /// Link bandwidth, GB/s (G = 10^9); β = 1 / bandwidth.
    pub bandwidth_gbps: f64,
    /// Reduction throughput, GB/s; γ = 1 / reduce bandwidth.
    pub reduce_gbps: f64,
}

impl LinkCost {
    /// β in ns per byte.
    pub fn beta(&self) -> f64 {
        1.0 / self.bandwidth_gbps.max(1e-9)
    }

    /// γ in ns per byte.
    pub fn gamma(&self) -> f64 {
        1.0 / self.reduce_gbps.max(1e-9)
    }
}

/// Link costs per level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Inside a server.
    pub level0: LinkCost,
    /// Between servers.
    pub level1: LinkCost,
    /// Between super pods.
    pub level2: LinkCost,
    /// Bandwidth per flow inside a server under each algorithm's traffic
    /// pattern, when a server is not a full mesh (910A's two groups of four
    /// joined over PCIe, a ring): there the flows of one step share links,
    /// which one route's bottleneck (`level0`) does not show. `None`: every
    /// pattern gets `level0`'s bandwidth (a full mesh, as `Mesh.md` assumes).
    pub level0_patterns: Option<PatternGbps>,
}

/// Bandwidth per flow, GB/s, of a server's fabric under three traffic
/// patterns: each member's flow gets its max-min share of the links its
/// route crosses when every flow of the pattern runs at once; the slowest
/// flow counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PatternGbps {
    /// Rank `i` to `i + 1` (ring, chain broadcast).
    pub ring: f64,
    /// Every ordered pair at once (mesh, pairwise AllToAll).
    pub mesh: f64,
    /// Rank `i` with `i XOR 2^k`, the slowest step `k` (H-D_R, NHR, NB,
    /// tree: the doubling family).
    pub doubling: f64,
}

impl CostModel {
    /// `level0` as algorithm `a` sees it (see [`CostModel::level0_patterns`]).
    fn level0_for(&self, a: Algorithm) -> LinkCost {
        let Some(p) = self.level0_patterns else {
            return self.level0;
        };
        let g = match a {
            Algorithm::Ring => p.ring,
            Algorithm::Mesh | Algorithm::Pairwise | Algorithm::Oneshot => p.mesh,
            _ => p.doubling,
        };
        LinkCost {
            bandwidth_gbps: g,
            ..self.level0
        }
    }
}

impl Default for CostModel {
    /// An Atlas 800T A2-like default: HCCS inside a server (≈ 56 GB/s per
    /// link, ~2 µs per message), one 200 GbE RoCE port per NPU between servers
    /// (25 GB/s, ~10 µs), super pods behind a further spine (12.5 GB/s,
    /// ~15 µs); reductions at 100 GB/s. Round figures for ranking algorithms,
    /// not measurements.
    fn default() -> Self {
        CostModel {
            level0: LinkCost {
                alpha_ns: 2_000.0,
                bandwidth_gbps: 56.0,
                reduce_gbps: 100.0,
            },
            level1: LinkCost {
                alpha_ns: 10_000.0,
                bandwidth_gbps: 25.0,
                reduce_gbps: 100.0,
            },
            level2: LinkCost {
                alpha_ns: 15_000.0,
                bandwidth_gbps: 12.5,
                reduce_gbps: 100.0,
            },
            level0_patterns: None,
        }
    }
}

fn log2_ceil(p: u32) -> f64 {
    if p <= 1 {
        0.0
    } else {
        (32 - (p - 1).leading_zeros()) as f64
    }
}

/// Blocks of the extra messages NHR's odd splits add along the tree (see
/// the module docs): for each level `d`, the largest odd interval size `s`
/// at that level (sizes are `⌊p/2^d⌋` or `⌈p/2^d⌉`) adds `⌊s/2⌋` blocks.
fn nhr_extra_blocks(p: u32) -> f64 {
    let mut x = 0u32;
    let mut d = 0;
    while d < 32 && p >> d > 1 {
        let lo = p >> d;
        let hi = p.div_ceil(1 << d);
        let odd = [hi, lo].into_iter().find(|s| s % 2 == 1 && *s >= 3);
        x += odd.map_or(0, |s| s / 2);
        d += 1;
    }
    x as f64
}

/// Time of a flat algorithm for `kind` over `p` members with link `l`;
/// `n` = message bytes as in the module table. None if not implemented.
pub(super) fn flat_cost(
    kind: CollectiveKind,
    a: Algorithm,
    p: u32,
    n: f64,
    l: &LinkCost,
) -> Option<f64> {
    use CollectiveKind as K;
    if !a.supports(kind) {
        return None;
    }
    if p <= 1 {
        // A group of one sends no message: its output is its input, at
        // most a local copy, which no algorithm here prices.
        return Some(0.0);
    }
    let (al, be, ga) = (l.alpha_ns, l.beta(), l.gamma());
    let pf = p as f64;
    let frac = if p == 0 { 0.0 } else { (pf - 1.0) / pf };
    let pow = if p == 0 {
        1
    } else {
        1u32 << (31 - p.leading_zeros())
    };
    let fold = p != pow;
    let lg = (pow as f64).log2();
    let t = match (kind, a) {
        (K::AllReduce, Algorithm::Ring) => {
            2.0 * (pf - 1.0) * al + 2.0 * frac * n * be + frac * n * ga
        }
        (K::AllReduce, Algorithm::HalvingDoubling) => {
            let pfr = (pow as f64 - 1.0) / pow as f64;
            let base = 2.0 * lg * al + 2.0 * pfr * n * be + pfr * n * ga;
            base + if fold {
                2.0 * (al + n * be) + n * ga
            } else {
                0.0
            }
        }
        // Mesh: HCCL's algorithm guide, `docs/en/user_guide/coll_algo_intro/Mesh.md`
        // (hicann/hccl), table 1: every peer's block moves at once on its own
        // link, so one step costs `α + nβ/p`; reductions `(p-1)/p·nγ`.
        (K::AllReduce, Algorithm::Mesh) => 2.0 * al + 2.0 * n / pf * be + frac * n * ga,
        // One-shot: each member's whole vector crosses every link once, at
        // once; every member folds p vectors.
        (K::AllReduce, Algorithm::Oneshot) => al + n * be + (pf - 1.0) * n * ga,
        // Recursive doubling: log2 p' exchanges of the whole vector, each
        // reduced; folding adds a reduced step in and a step out.
        (K::AllReduce, Algorithm::Doubling) => {
            lg * (al + n * (be + ga))
                + if fold {
                    2.0 * (al + n * be) + n * ga
                } else {
                    0.0
                }
        }
        (K::AllReduce, Algorithm::Nb) => {
            2.0 * log2_ceil(p) * al + 2.0 * frac * n * be + frac * n * ga
        }
        (K::AllReduce, Algorithm::Nhr) => {
            let x = nhr_extra_blocks(p) / pf * n;
            2.0 * log2_ceil(p) * al + 2.0 * (frac * n + x) * be + (frac * n + x) * ga
        }
        (K::ReduceScatter | K::ReduceScatterV, Algorithm::Nb) => {
            log2_ceil(p) * al + frac * n * (be + ga)
        }
        (K::ReduceScatter | K::ReduceScatterV, Algorithm::Nhr) => {
            let x = nhr_extra_blocks(p) / pf * n;
            log2_ceil(p) * al + (frac * n + x) * (be + ga)
        }
        (K::ReduceScatter | K::ReduceScatterV, Algorithm::HalvingDoubling) => {
            if fold {
                let halving: f64 = (1..=lg as u32)
                    .map(|i| al + p.div_ceil(1 << i) as f64 / pf * n * (be + ga))
                    .sum();
                (al + n * (be + ga)) + halving + (al + n / pf * be)
            } else {
                lg * al + frac * n * (be + ga)
            }
        }
        (K::AllGather | K::AllGatherV, Algorithm::Nb) => log2_ceil(p) * al + frac * n * be,
        (K::AllGather | K::AllGatherV, Algorithm::Nhr) => {
            let x = nhr_extra_blocks(p) / pf * n;
            log2_ceil(p) * al + (frac * n + x) * be
        }
        (K::Broadcast, Algorithm::Nb) => 2.0 * log2_ceil(p) * al + 2.0 * frac * n * be,
        (K::Broadcast, Algorithm::Nhr) => {
            let x = nhr_extra_blocks(p) / pf * n;
            2.0 * log2_ceil(p) * al + (2.0 * frac * n + x) * be
        }
        (K::ReduceScatter | K::ReduceScatterV, Algorithm::Ring) => {
            (pf - 1.0) * al + frac * n * (be + ga)
        }
        (K::ReduceScatter | K::ReduceScatterV, Algorithm::Mesh) => al + n / pf * be + frac * n * ga,
        (K::AllGather | K::AllGatherV, Algorithm::Ring) => (pf - 1.0) * al + frac * n * be,
        (K::AllGather | K::AllGatherV, Algorithm::HalvingDoubling) => {
            lg * al + frac * n * be + if fold { 2.0 * al + n * be } else { 0.0 }
        }
        (K::AllGather | K::AllGatherV, Algorithm::Mesh) => al + n / pf * be,
        (K::Broadcast | K::Reduce, Algorithm::Ring) => {
            let c = 1.0_f64.max((n / (512.0 * 1024.0)).min(64.0)).floor();
            let g = if kind == K::Reduce { ga } else { 0.0 };
            if p <= 1 {
                0.0
            } else {
                (pf - 2.0 + c) * (al + n / c * (be + g))
            }
        }
        (K::Broadcast | K::Reduce, Algorithm::Tree) => {
            let g = if kind == K::Reduce { ga } else { 0.0 };
            log2_ceil(p) * (al + n * (be + g))
        }
        (K::Broadcast | K::Reduce, Algorithm::Mesh) => {
            let g = if kind == K::Reduce {
                frac * n * ga
            } else {
                0.0
            };
            2.0 * al + 2.0 * n / pf * be + g
        }
        (K::Scatter | K::Gather, Algorithm::Ring) => (pf - 1.0) * al + frac * n * be,
        (K::Scatter | K::Gather, Algorithm::Mesh) => al + n / pf * be,
        (K::AllToAll | K::AllToAllV, Algorithm::Pairwise) => (pf - 1.0) * (al + n / pf * be),
        (K::AllToAll | K::AllToAllV, Algorithm::Mesh) => al + frac * n * be,
        (K::Barrier, _) => log2_ceil(p) * al,
        (K::SendRecv | K::BatchSendRecv, _) => al + n * be,
        _ => return None,
    };
    Some(t)
}

/// HCCL's pipeline time (see the module docs) for `kind` on `servers` ×
/// `per` ranks and an `n`-byte message; None if not implemented or on one server.
fn pipeline_cost(
    kind: CollectiveKind,
    servers: u32,
    per: u32,
    n: f64,
    inter: &LinkCost,
    intra: &LinkCost,
) -> Option<f64> {
    use CollectiveKind as K;
    if servers < 2 {
        return None;
    }
    let p = f64::from(servers) * f64::from(per);
    let b = n / p;
    let intra_step = intra.alpha_ns + b * intra.beta();
    let step = (inter.alpha_ns + b * inter.beta()).max(intra_step);
    let ag = f64::from(servers - 1) * step + intra_step;
    let reduce = (p - 1.0) * b * intra.gamma();
    match kind {
        K::AllGather => Some(ag),
        K::ReduceScatter => Some(ag + reduce),
        K::AllReduce => Some(2.0 * ag + reduce),
        _ => None,
    }
}

/// The link cost a mesh sees on a level where each rank has one port to a
/// switch (level 1 and 2), not a link per peer as in a server's full mesh:
/// its `p − 1` concurrent messages share the port max-min fairly, each at
/// `1/(p−1)` of the bandwidth, so `Mesh.md`'s per-link `nβ/p` becomes
/// `(p−1)/p·nβ`. The port also starts those messages one after another,
/// so a mesh step pays the per-message overhead `(p−1)·α`, not `Mesh.md`'s
/// single `α` (which assumes a link, and a DMA engine, per peer). Without
/// it a 128-server level-1 mesh looked `2·126·α` cheaper than the ring
/// and won at every size. Other algorithms send one message at a time:
/// unchanged.
fn port_shared(a: Algorithm, p: u32, l: &LinkCost) -> LinkCost {
    if matches!(a, Algorithm::Mesh | Algorithm::Oneshot) && p > 2 {
        let peers = (p - 1) as f64;
        LinkCost {
            alpha_ns: l.alpha_ns * peers,
            bandwidth_gbps: l.bandwidth_gbps / peers,
            ..*l
        }
    } else {
        *l
    }
}

/// Predicted time of `spec` for `args` on `layout`, ns; None if the spec
/// does not implement the collective or the layout does not fit it.
pub fn predict(
    args: &CollectiveArgs,
    spec: &AlgoSpec,
    layout: &GroupLayout,
    cost: &CostModel,
) -> Option<f64> {
    use CollectiveKind as K;
    let kind = args.kind;
    let p = args.world_size;
    let n = args.message_bytes() as f64;
    let servers = layout.server_count();
    let pods = (0..p).map(|r| layout.pod_of(r)).max().unwrap_or(0) + 1;
    let pipelined = match spec {
        AlgoSpec::Flat(a) => *a == Algorithm::Pipeline,
        AlgoSpec::Hierarchical(l) => {
            l.level1 == Some(Algorithm::Pipeline)
                && matches!(l.level0, None | Some(Algorithm::Mesh))
                && l.level2.is_none()
        }
    };
    if pipelined {
        let per = layout.regular().ok()?.ranks_per_server;
        let inter = if pods > 1 { &cost.level2 } else { &cost.level1 };
        let intra = cost.level0_for(Algorithm::Mesh);
        return pipeline_cost(kind, p / per, per, n, inter, &intra);
    }
    match spec {
        AlgoSpec::Flat(a) => {
            // Flat traffic crosses the slowest level the layout has.
            let l0 = cost.level0_for(*a);
            let l = if pods > 1 {
                &cost.level2
            } else if servers > 1 {
                &cost.level1
            } else {
                &l0
            };
            if matches!(*a, Algorithm::Mesh | Algorithm::Oneshot)
                && (servers > 1 || p > 8)
                && !matches!(kind, K::AllToAll | K::AllToAllV)
            {
                return None;
            }
            flat_cost(kind, *a, p, n, l)
        }
        AlgoSpec::Hierarchical(lv) => {
            let shape = layout.regular().ok()?;
            let k0 = shape.ranks_per_server;
            let k1 = shape.servers_per_pod * shape.pods;
            let a0 = lv.level0.unwrap_or(if k0 <= 8 {
                Algorithm::Mesh
            } else {
                Algorithm::Ring
            });
            let a1 = lv.level1.unwrap_or(if k1.is_power_of_two() {
                Algorithm::HalvingDoubling
            } else {
                Algorithm::Ring
            });
            let l0 = cost.level0_for(a0);
            let c0 = |kind, n| flat_cost(kind, a0, k0, n, &l0);
            let l1 = port_shared(a1, k1, &cost.level1);
            let c1 = |kind, n| flat_cost(kind, a1, k1, n, &l1);
            match kind {
                K::AllReduce => Some(
                    c0(K::ReduceScatter, n)?
                        + c1(K::AllReduce, n / k0 as f64)?
                        + c0(K::AllGather, n)?,
                ),
                K::AllGather => Some(c0(K::AllGather, n / k1 as f64)? + c1(K::AllGather, n)?),
                K::ReduceScatter => {
                    Some(c1(K::ReduceScatter, n)? + c0(K::ReduceScatter, n / k1 as f64)?)
                }
                K::Broadcast => Some(c1(K::Broadcast, n)? + c0(K::Broadcast, n)?),
                K::Reduce => Some(c0(K::Reduce, n)? + c1(K::Reduce, n)?),
                _ => None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_match_hand_computed_values() {
        let l = LinkCost {
            alpha_ns: 1000.0,
            bandwidth_gbps: 10.0,
            reduce_gbps: 20.0,
        };
        // Ring AllReduce, p = 4, n = 1e6 B: 6α + 1.5 nβ + 0.75 nγ = 6000 + 150000 + 37500.
        let t = flat_cost(CollectiveKind::AllReduce, Algorithm::Ring, 4, 1e6, &l).unwrap();
        assert!((t - 193_500.0).abs() < 1e-6, "{t}");
        // H-D_R, p = 6: p' = 4: 4α + 1.5nβ + .75nγ + fold 2(α + nβ) + nγ.
        let t = flat_cost(
            CollectiveKind::AllReduce,
            Algorithm::HalvingDoubling,
            6,
            1e6,
            &l,
        )
        .unwrap();
        assert!(
            (t - (4000.0 + 150_000.0 + 37_500.0 + 2.0 * (1000.0 + 100_000.0) + 50_000.0)).abs()
                < 1e-6,
            "{t}"
        );
    }

    #[test]
    fn mesh_formulas_match_hccl_guide_by_hand() {
        // Mesh.md table 1, p = 4, n = 1e6 B, α = 1000 ns, β = 0.1 ns/B, γ = 0.05 ns/B:
        // nβ/p = 25000, (p-1)/p·nγ = 37500.
        let l = LinkCost {
            alpha_ns: 1000.0,
            bandwidth_gbps: 10.0,
            reduce_gbps: 20.0,
        };
        let c = |k| flat_cost(k, Algorithm::Mesh, 4, 1e6, &l).unwrap();
        let near = |t: f64, want: f64| assert!((t - want).abs() < 1e-6, "{t} != {want}");
        near(
            c(CollectiveKind::ReduceScatter),
            1000.0 + 25_000.0 + 37_500.0,
        );
        near(c(CollectiveKind::AllGather), 1000.0 + 25_000.0);
        near(c(CollectiveKind::AllReduce), 2000.0 + 50_000.0 + 37_500.0);
        near(c(CollectiveKind::Scatter), 1000.0 + 25_000.0);
        near(c(CollectiveKind::Gather), 1000.0 + 25_000.0);
        near(c(CollectiveKind::Broadcast), 2000.0 + 50_000.0);
        near(c(CollectiveKind::Reduce), 2000.0 + 50_000.0 + 37_500.0);
        // Between servers the 3 messages share one port: (p-1)/p·nβ = 75000,
        // and start one after another on it: (p-1)·α = 3000.
        let l1 = port_shared(Algorithm::Mesh, 4, &l);
        let t = flat_cost(CollectiveKind::AllGather, Algorithm::Mesh, 4, 1e6, &l1).unwrap();
        near(t, 3000.0 + 75_000.0);
    }

    #[test]
    fn log_step_formulas_match_hccl_guide_by_hand() {
        let l = LinkCost {
            alpha_ns: 1000.0,
            bandwidth_gbps: 10.0,
            reduce_gbps: 20.0,
        };
        let c = |k, a, p| flat_cost(k, a, p, 1e6, &l).unwrap();
        // NB AllReduce p = 5: 2*3 α + 2*0.8 nβ + 0.8 nγ = 6000 + 160000 + 40000.
        assert!((c(CollectiveKind::AllReduce, Algorithm::Nb, 5) - 206_000.0).abs() < 1e-6);
        // NB AllGather p = 8: 3α + 7/8 nβ = 3000 + 87500.
        assert!((c(CollectiveKind::AllGather, Algorithm::Nb, 8) - 90_500.0).abs() < 1e-6);
        // NHR p = 8 has no odd split: the guide's formula exactly.
        assert!(
            (c(CollectiveKind::ReduceScatter, Algorithm::Nhr, 8) - (3000.0 + 87_500.0 + 43_750.0))
                .abs()
                < 1e-6
        );
        // NHR p = 5: splits 5 -> 3 + 2 -> ...: levels' largest odd sizes 5, 3:
        // x = 2 + 1 = 3 blocks of n/5.
        assert_eq!(nhr_extra_blocks(5), 3.0);
        assert_eq!(nhr_extra_blocks(6), 1.0);
        assert_eq!(nhr_extra_blocks(16), 0.0);
        let t = c(CollectiveKind::AllGather, Algorithm::Nhr, 5);
        assert!((t - (3000.0 + (0.8e6 + 0.6e6) * 0.1)).abs() < 1e-6, "{t}");
        // H-D_R ReduceScatter p = 6 (RHD.md): fold α + n(β+γ) = 151000;
        // halving ⌈6/2⌉ = 3, ⌈6/4⌉ = 2 blocks: 2α + 5/6 n(β+γ) = 2000 + 125000;
        // last send α + nβ/6.
        let t = c(CollectiveKind::ReduceScatter, Algorithm::HalvingDoubling, 6);
        let want = 151_000.0 + 2000.0 + 125_000.0 + 1000.0 + 1e5 / 6.0;
        assert!((t - want).abs() < 1e-6, "{t} vs {want}");
    }

    #[test]
    fn pipeline_formula_matches_hccl_guide_by_hand() {
        let inter = LinkCost {
            alpha_ns: 1000.0,
            bandwidth_gbps: 10.0,
            reduce_gbps: 20.0,
        };
        let intra = LinkCost {
            alpha_ns: 100.0,
            bandwidth_gbps: 50.0,
            reduce_gbps: 20.0,
        };
        // S = 4, k = 8, n = 3.2e6 B: B = 1e5 B; inter step 1000 + 1e4 =
        // 11000 ns, intra step 100 + 2000 = 2100 ns: 3 * 11000 + 2100.
        let ag = pipeline_cost(CollectiveKind::AllGather, 4, 8, 3.2e6, &inter, &intra).unwrap();
        assert!((ag - 35_100.0).abs() < 1e-6, "{ag}");
        // ReduceScatter adds (p-1) B γ = 31 * 1e5 / 20 = 155000.
        let rs = pipeline_cost(CollectiveKind::ReduceScatter, 4, 8, 3.2e6, &inter, &intra).unwrap();
        assert!((rs - 190_100.0).abs() < 1e-6, "{rs}");
        let ar = pipeline_cost(CollectiveKind::AllReduce, 4, 8, 3.2e6, &inter, &intra).unwrap();
        assert!((ar - (70_200.0 + 155_000.0)).abs() < 1e-6, "{ar}");
        // Intra-bound: a slow server link makes the max pick the intra step.
        let slow = LinkCost {
            bandwidth_gbps: 1.0,
            ..intra
        };
        let ag = pipeline_cost(CollectiveKind::AllGather, 2, 2, 4e5, &inter, &slow).unwrap();
        assert!((ag - 2.0 * 100_100.0).abs() < 1e-6, "{ag}");
        assert_eq!(
            pipeline_cost(CollectiveKind::AllGather, 1, 8, 1e6, &inter, &intra),
            None,
            "one server: the mesh"
        );
        assert_eq!(
            pipeline_cost(CollectiveKind::Broadcast, 2, 8, 1e6, &inter, &intra),
            None
        );
    }
}

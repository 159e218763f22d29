//! Algorithm selection: an α–β–γ cost model per topology level, and
//! `HCCL_ALGO` overrides in HCCL's syntax.
//!
//! # Cost model
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

use std::collections::BTreeMap;
use std::fmt;

use crate::algo::{AlgoSpec, Algorithm, Levels};
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

/// One candidate the selector considered.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The algorithm(s).
    pub spec: AlgoSpec,
    /// Predicted time, ns.
    pub predicted_ns: f64,
}

/// The selector's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// What to run.
    pub spec: AlgoSpec,
    /// Its predicted time, ns (None when forced by `HCCL_ALGO` and not costable).
    pub predicted_ns: Option<f64>,
    /// Why: "cheapest of N candidates", "the only candidate" or "HCCL_ALGO".
    pub reason: String,
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
fn flat_cost(kind: CollectiveKind, a: Algorithm, p: u32, n: f64, l: &LinkCost) -> Option<f64> {
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

/// Every candidate for `args` on `layout` with its predicted time, cheapest
/// first: the flat algorithms implementing the collective (the pipeline
/// among them when the layout has several servers) and, when the layout
/// has several servers and is regular, level0 (mesh, ring) × level1 (ring,
/// H-D_R, NHR, NB, tree, mesh, doubling) combinations.
pub fn explain(args: &CollectiveArgs, layout: &GroupLayout, cost: &CostModel) -> Vec<Candidate> {
    let mut specs: Vec<AlgoSpec> = Algorithm::ALL.into_iter().map(AlgoSpec::Flat).collect();
    if layout.server_count() > 1 && layout.regular().is_ok() {
        for l0 in [Algorithm::Mesh, Algorithm::Ring] {
            for l1 in [
                Algorithm::Ring,
                Algorithm::HalvingDoubling,
                Algorithm::Nhr,
                Algorithm::Nb,
                Algorithm::Tree,
                Algorithm::Mesh,
                Algorithm::Doubling,
            ] {
                specs.push(AlgoSpec::Hierarchical(Levels {
                    level0: Some(l0),
                    level1: Some(l1),
                    level2: None,
                }));
            }
        }
    }
    if matches!(
        args.kind,
        CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv | CollectiveKind::Barrier
    ) {
        // One schedule each, whatever the name: listing every name would
        // repeat it.
        specs.truncate(1);
    }
    let mut out: Vec<Candidate> = specs
        .into_iter()
        .filter_map(|spec| {
            predict(args, &spec, layout, cost).map(|t| Candidate {
                spec,
                predicted_ns: t,
            })
        })
        .collect();
    // Rounded to the picosecond: algorithms whose formulas agree (one-shot
    // and doubling on 2 ranks) tie exactly and keep the order of
    // `Algorithm::ALL` (a stable sort), instead of taking turns by
    // floating-point rounding from one size to the next.
    let key = |c: &Candidate| (c.predicted_ns * 1e3).round();
    out.sort_by(|a, b| key(a).total_cmp(&key(b)));
    out
}

/// Picks the algorithm: the `HCCL_ALGO` override for this collective if
/// any, else the cheapest candidate of [`explain`] (ring if none is costable).
pub fn select(
    args: &CollectiveArgs,
    layout: &GroupLayout,
    cost: &CostModel,
    env: Option<&HcclAlgo>,
) -> Selection {
    let forced = env.and_then(|e| e.spec_for(args.kind));
    if let Some(spec) = env.and_then(|e| e.spec_fitting(args, layout)) {
        return Selection {
            predicted_ns: predict(args, &spec, layout, cost),
            spec,
            reason: "HCCL_ALGO".into(),
        };
    }
    let c = explain(args, layout, cost);
    let ignored = forced
        .map(|f| format!("HCCL_ALGO {f} does not fit {}; ", args.kind))
        .unwrap_or_default();
    match c.first() {
        Some(best) => Selection {
            spec: best.spec,
            predicted_ns: Some(best.predicted_ns),
            reason: if c.len() == 1 {
                format!("{ignored}the only candidate")
            } else {
                format!("{ignored}cheapest of {} candidates", c.len())
            },
        },
        None => Selection {
            spec: AlgoSpec::Flat(Algorithm::Ring),
            predicted_ns: None,
            reason: "no costable candidate; ring".into(),
        },
    }
}

/// A parsed `HCCL_ALGO` value.
///
/// Syntax (HCCL's docs, `hccl_env/HCCL_ALGO.md`): global
/// `level0:NA;level1:<algo>[;level2:<algo>]`, or per op
/// `<op>=level0:NA;level1:<algo>/<op>=...` with `<op>` one of `allgather`
/// (also AllGatherV), `reducescatter` (also ReduceScatterV), `allreduce`,
/// `broadcast`, `reduce`, `scatter`, `alltoall` (also AllToAllV). HCCL
/// accepts only `NA` for level0; hccl-rs also accepts `ring` and `mesh`
/// there. Level values: `ring`, `H-D_R`, `NHR`, `NB`, `pipeline`,
/// `pairwise`, plus hccl-rs's `mesh`, `tree`, `oneshot` and `doubling`
/// (AllReduce only, as HCCL's one-shot and doubling templates); HCCL's `NHR_V1` and `AHC`
/// are not implemented and are rejected. hccl-rs also accepts a bare
/// algorithm name (`ring`), meaning that algorithm flat over the whole group
/// for every op it fits (as `hccl test --algo ring`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HcclAlgo {
    /// A bare algorithm name: flat over the whole group, for every op.
    pub flat: Option<Algorithm>,
    /// Setting for every op without its own.
    pub global: Option<Levels>,
    /// Settings per HCCL op name.
    pub per_op: BTreeMap<String, Levels>,
}

/// HCCL's op names in `HCCL_ALGO`.
pub const HCCL_ALGO_OPS: [&str; 7] = [
    "allgather",
    "reducescatter",
    "allreduce",
    "broadcast",
    "reduce",
    "scatter",
    "alltoall",
];

/// Error of parsing `HCCL_ALGO`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HcclAlgoError {
    /// An op name HCCL does not accept.
    #[error("HCCL_ALGO: unknown op {value:?}; accepted: {}", HCCL_ALGO_OPS.join(", "))]
    Op {
        /// The rejected op name.
        value: String,
    },
    /// A level name other than level0/1/2.
    #[error("HCCL_ALGO: unknown level {value:?} in {part:?}; accepted: level0, level1, level2")]
    Level {
        /// The rejected level.
        value: String,
        /// The setting it appeared in.
        part: String,
    },
    /// An algorithm name that is not accepted.
    #[error("HCCL_ALGO: unknown algorithm {value:?} for {level}; accepted: {accepted}")]
    Algo {
        /// The rejected algorithm.
        value: String,
        /// Its level.
        level: String,
        /// The accepted values.
        accepted: String,
    },
    /// A setting without `levelN:value`.
    #[error("HCCL_ALGO: malformed setting {part:?}; expected level0:NA;level1:<algo> or <op>=level0:NA;level1:<algo>/...")]
    Syntax {
        /// The malformed part.
        part: String,
    },
    /// The same op set twice.
    #[error("HCCL_ALGO: op {op:?} is set twice")]
    Duplicate {
        /// The op.
        op: String,
    },
}

fn parse_levels(s: &str) -> Result<Levels, HcclAlgoError> {
    let mut l = Levels::default();
    let mut any = false;
    for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (level, value) = part
            .split_once(':')
            .ok_or_else(|| HcclAlgoError::Syntax { part: part.into() })?;
        let (level, value) = (level.trim(), value.trim());
        let accepted = match level {
            "level0" => "NA, ring, mesh",
            "level1" | "level2" => {
                "NA, ring, H-D_R, NHR, NB, pipeline, pairwise, mesh, tree, oneshot, doubling"
            }
            _ => {
                return Err(HcclAlgoError::Level {
                    value: level.into(),
                    part: part.into(),
                });
            }
        };
        let algo = if value == "NA" {
            None
        } else {
            let a = value
                .parse::<Algorithm>()
                .ok()
                .filter(|a| level != "level0" || matches!(a, Algorithm::Ring | Algorithm::Mesh));
            match a {
                Some(a) => Some(a),
                None => {
                    return Err(HcclAlgoError::Algo {
                        value: value.into(),
                        level: level.into(),
                        accepted: accepted.into(),
                    })
                }
            }
        };
        match level {
            "level0" => l.level0 = algo,
            "level1" => l.level1 = algo,
            _ => l.level2 = algo,
        }
        any = true;
    }
    if !any {
        return Err(HcclAlgoError::Syntax { part: s.into() });
    }
    Ok(l)
}

impl HcclAlgo {
    /// Parses an `HCCL_ALGO` value (see the type's docs).
    ///
    /// # Errors
    /// [`HcclAlgoError`] naming the bad value and the accepted ones.
    pub fn parse(s: &str) -> Result<HcclAlgo, HcclAlgoError> {
        let s = s.trim();
        let mut out = HcclAlgo::default();
        if !s.contains([':', '=', ';', '/']) {
            // A bare word: an algorithm name or nothing.
            return match s.parse::<Algorithm>() {
                Ok(a) => {
                    out.flat = Some(a);
                    Ok(out)
                }
                Err(e) => Err(HcclAlgoError::Algo {
                    value: s.into(),
                    level: "all ops".into(),
                    accepted: format!(
                        "{} (or level0:NA;level1:<algo>, <op>=level0:NA;level1:<algo>/...)",
                        e.accepted
                    ),
                }),
            };
        }
        if !s.contains('=') {
            out.global = Some(parse_levels(s)?);
            return Ok(out);
        }
        for item in s.split('/').map(str::trim).filter(|i| !i.is_empty()) {
            let (op, levels) = item
                .split_once('=')
                .ok_or_else(|| HcclAlgoError::Syntax { part: item.into() })?;
            let op = op.trim();
            if !HCCL_ALGO_OPS.contains(&op) {
                return Err(HcclAlgoError::Op { value: op.into() });
            }
            if out
                .per_op
                .insert(op.into(), parse_levels(levels)?)
                .is_some()
            {
                return Err(HcclAlgoError::Duplicate { op: op.into() });
            }
        }
        Ok(out)
    }

    /// Reads and parses the `HCCL_ALGO` environment variable; `Ok(None)` if unset.
    ///
    /// # Errors
    /// As [`HcclAlgo::parse`].
    pub fn from_env() -> Result<Option<HcclAlgo>, HcclAlgoError> {
        match std::env::var("HCCL_ALGO") {
            Ok(v) if !v.trim().is_empty() => HcclAlgo::parse(&v).map(Some),
            _ => Ok(None),
        }
    }

    /// The forced spec for `kind`, if any: its op's setting, else the
    /// global one. A setting with every level `NA` forces nothing.
    pub fn spec_for(&self, kind: CollectiveKind) -> Option<AlgoSpec> {
        if let Some(a) = self.flat {
            return Some(AlgoSpec::Flat(a));
        }
        let l = kind
            .hccl_algo_name()
            .and_then(|name| self.per_op.get(name))
            .or(self.global.as_ref())?;
        if l.level0.is_none() && l.level1.is_none() && l.level2.is_none() {
            return None;
        }
        Some(AlgoSpec::Hierarchical(*l))
    }

    /// The forced spec for `args` on `layout`, made to fit, as HCCL applies
    /// a global `HCCL_ALGO` only to the ops it suits: the setting
    /// ([`HcclAlgo::spec_for`]) if it plans as given; else the first of its
    /// level0, level1, level2 algorithms that plans flat over the whole
    /// group (e.g. `alltoall=level0:NA;level1:pairwise`, which hccl-rs does
    /// not compose across levels, runs pairwise over all ranks); else
    /// `None`, and the caller keeps its default (the selector).
    ///
    /// "Plans" means for the whole op: rank 0 and the root both plan. That
    /// covers every rank, as the phases a rank runs depend only on whether
    /// it shares the root's local index (hierarchical Broadcast and Reduce
    /// run level 1 only there), and the root always does; rank 0 alone
    /// missed a root elsewhere (issue 22). The `fit_holds_for_every_rank`
    /// test checks this against planning every rank.
    pub fn spec_fitting(&self, args: &CollectiveArgs, layout: &GroupLayout) -> Option<AlgoSpec> {
        let forced = self.spec_for(args.kind)?;
        let fits = |s: &AlgoSpec| {
            let plans = |r: u32| crate::algo::plan(args, s, layout, r).is_ok();
            plans(0) && (args.root == 0 || plans(args.root))
        };
        if fits(&forced) {
            return Some(forced);
        }
        let AlgoSpec::Hierarchical(l) = forced else {
            return None;
        };
        [l.level0, l.level1, l.level2]
            .into_iter()
            .flatten()
            .map(AlgoSpec::Flat)
            .find(fits)
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<32} {:>14.1} us",
            self.spec.to_string(),
            self.predicted_ns / 1000.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DataType;

    #[test]
    fn a_bare_name_is_flat_for_every_op_it_fits() {
        let h = HcclAlgo::parse(" ring ").unwrap();
        assert_eq!(h.flat, Some(Algorithm::Ring));
        let layout = GroupLayout::servers(2, 4);
        let ar = CollectiveArgs::new(CollectiveKind::AllReduce, 64, DataType::Fp32, 8);
        assert_eq!(
            h.spec_fitting(&ar, &layout),
            Some(AlgoSpec::Flat(Algorithm::Ring))
        );
        let a2a = CollectiveArgs::new(CollectiveKind::AllToAll, 64, DataType::Fp32, 8);
        assert_eq!(h.spec_fitting(&a2a, &layout), None, "ring has no alltoall");
        let e = HcclAlgo::parse("rign").unwrap_err().to_string();
        assert!(
            e.contains("unknown algorithm \"rign\"") && e.contains("oneshot"),
            "a typo names itself and the accepted names: {e}"
        );
    }

    #[test]
    fn a_forced_setting_applies_only_where_it_fits() {
        let layout = GroupLayout::servers(2, 4);
        let cost = CostModel::default();
        let a2a = CollectiveArgs::new(CollectiveKind::AllToAll, 1024, DataType::Fp32, 8);
        // HCCL's own per-op example: level1 pairwise, which hccl-rs does not
        // compose with a level0 for AllToAll, runs pairwise over all ranks.
        let h = HcclAlgo::parse("alltoall=level0:NA;level1:pairwise").unwrap();
        assert_eq!(
            h.spec_fitting(&a2a, &layout),
            Some(AlgoSpec::Flat(Algorithm::Pairwise))
        );
        let s = select(&a2a, &layout, &cost, Some(&h));
        assert_eq!(s.spec, AlgoSpec::Flat(Algorithm::Pairwise));
        assert_eq!(s.reason, "HCCL_ALGO");
        // A global ring fits AllReduce as given (hierarchical) ...
        let g = HcclAlgo::parse("level0:NA;level1:ring").unwrap();
        let ar = CollectiveArgs::new(CollectiveKind::AllReduce, 1024, DataType::Fp32, 8);
        assert_eq!(
            g.spec_fitting(&ar, &layout),
            g.spec_for(CollectiveKind::AllReduce)
        );
        // ... a barrier flat (no hierarchical barrier) ...
        let bar = CollectiveArgs::new(CollectiveKind::Barrier, 0, DataType::Fp32, 8);
        assert_eq!(
            g.spec_fitting(&bar, &layout),
            Some(AlgoSpec::Flat(Algorithm::Ring))
        );
        // ... and not AllToAll at all: the selector runs it and says why.
        assert_eq!(g.spec_fitting(&a2a, &layout), None);
        let s = select(&a2a, &layout, &cost, Some(&g));
        assert_eq!(s.spec, select(&a2a, &layout, &cost, None).spec);
        assert!(s.reason.starts_with("HCCL_ALGO"), "{}", s.reason);
        assert!(s.reason.contains("does not fit alltoall"), "{}", s.reason);
    }

    #[test]
    fn a_global_setting_that_misses_a_root_is_not_applied() {
        // Issue 22: planned on rank 0 only, `level1:pairwise` passed for a
        // Broadcast rooted on rank 1, and rank 1 then had no plan.
        let layout = GroupLayout::servers(2, 8);
        let h = HcclAlgo::parse("level0:NA;level1:pairwise").unwrap();
        for root in [0, 1, 9] {
            let b = CollectiveArgs::new(CollectiveKind::Broadcast, 1024, DataType::Fp32, 16)
                .with_root(root);
            assert_eq!(h.spec_fitting(&b, &layout), None, "root {root}");
            let s = select(&b, &layout, &CostModel::default(), Some(&h));
            for r in 0..16 {
                assert!(
                    crate::algo::plan(&b, &s.spec, &layout, r).is_ok(),
                    "root {root} rank {r}"
                );
            }
        }
    }

    /// Wherever `spec_fitting` applies a setting, every rank plans: the
    /// rule (rank 0 and the root) against the whole op, for each setting,
    /// kind, root and a few layouts.
    #[test]
    fn fit_holds_for_every_rank() {
        use CollectiveKind as K;
        let names = [
            "ring", "mesh", "H-D_R", "NHR", "NB", "pipeline", "pairwise", "tree", "oneshot",
            "doubling",
        ];
        let mut settings: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        for n in names {
            settings.push(format!("level0:NA;level1:{n}"));
            settings.push(format!("level0:ring;level1:{n}"));
            settings.push(format!("level0:mesh;level1:NA;level2:{n}"));
        }
        let layouts = [
            GroupLayout::servers(2, 4),
            GroupLayout::servers(3, 2),
            GroupLayout::servers(1, 5),
            GroupLayout::flat(3),
        ];
        let kinds = [
            K::AllReduce,
            K::AllGather,
            K::ReduceScatter,
            K::Broadcast,
            K::Reduce,
            K::Scatter,
            K::Gather,
            K::AllToAll,
            K::Barrier,
        ];
        let mut applied = 0;
        for text in &settings {
            let h = HcclAlgo::parse(text).unwrap();
            for layout in &layouts {
                let n = layout.world_size();
                for kind in kinds {
                    let roots = if kind.is_rooted() { 0..n } else { 0..1 };
                    for root in roots {
                        let count = if kind == K::Barrier { 0 } else { 24 };
                        let args =
                            CollectiveArgs::new(kind, count, DataType::Fp32, n).with_root(root);
                        let Some(spec) = h.spec_fitting(&args, layout) else {
                            continue;
                        };
                        applied += 1;
                        for r in 0..n {
                            if let Err(e) = crate::algo::plan(&args, &spec, layout, r) {
                                panic!("{text} -> {spec} for {kind} root {root} on {n} ranks: rank {r}: {e}");
                            }
                        }
                    }
                }
            }
        }
        assert!(applied > 500, "only {applied} fits: the loop tests little");
    }

    #[test]
    fn parses_hccl_examples() {
        let g = HcclAlgo::parse("level0:NA;level1:H-D_R").unwrap();
        assert_eq!(
            g.global,
            Some(Levels {
                level0: None,
                level1: Some(Algorithm::HalvingDoubling),
                level2: None
            })
        );
        let p = HcclAlgo::parse("allreduce=level0:NA;level1:ring/allgather=level0:NA;level1:H-D_R")
            .unwrap();
        assert_eq!(p.per_op["allreduce"].level1, Some(Algorithm::Ring));
        assert_eq!(
            p.spec_for(CollectiveKind::AllGatherV),
            Some(AlgoSpec::Hierarchical(Levels {
                level0: None,
                level1: Some(Algorithm::HalvingDoubling),
                level2: None
            }))
        );
        assert_eq!(
            p.spec_for(CollectiveKind::Broadcast),
            None,
            "unset ops are chosen automatically"
        );
        let l2 = HcclAlgo::parse("level0:NA;level1:NB;level2:ring").unwrap();
        assert_eq!(l2.global.unwrap().level2, Some(Algorithm::Ring));
    }

    #[test]
    fn bad_values_name_value_and_accepted() {
        let e = HcclAlgo::parse("level0:NA;level1:fast")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"fast\"") && e.contains("H-D_R") && e.contains("level1"),
            "{e}"
        );
        let e = HcclAlgo::parse("allreduse=level0:NA;level1:ring")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"allreduse\"") && e.contains("reducescatter"),
            "{e}"
        );
        let e = HcclAlgo::parse("level3:ring").unwrap_err().to_string();
        assert!(e.contains("\"level3\""), "{e}");
        let e = HcclAlgo::parse("level0:H-D_R").unwrap_err().to_string();
        assert!(e.contains("NA, ring, mesh"), "{e}");
        let e = HcclAlgo::parse("level1:AHC").unwrap_err().to_string();
        assert!(e.contains("\"AHC\""), "{e}");
    }

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
    fn equal_formulas_tie_in_a_fixed_order() {
        // On 2 ranks one-shot and doubling both cost α + nβ + nγ; the
        // choice must not flip between sizes by rounding.
        let layout = GroupLayout::flat(2);
        let cost = CostModel::default();
        for count in (1..200u64).map(|i| i * 513) {
            let a = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, 2);
            let order: Vec<AlgoSpec> = explain(&a, &layout, &cost)
                .into_iter()
                .map(|c| c.spec)
                .collect();
            let pos = |x| order.iter().position(|s| *s == AlgoSpec::Flat(x));
            assert!(
                pos(Algorithm::Oneshot) < pos(Algorithm::Doubling),
                "count {count}: {order:?}"
            );
        }
    }

    #[test]
    fn small_messages_prefer_few_steps_large_prefer_bandwidth() {
        let layout = GroupLayout::flat(64);
        let cost = CostModel::default();
        let small = CollectiveArgs::new(CollectiveKind::AllReduce, 16, DataType::Fp32, 64);
        let s = select(&small, &layout, &cost, None);
        // 64 bytes: recursive doubling's log2 p steps beat H-D_R's 2 log2 p.
        assert_eq!(
            s.spec,
            AlgoSpec::Flat(Algorithm::Doubling),
            "{:?}",
            explain(&small, &layout, &cost)
        );
        // 64 MiB: doubling sends log2 p whole vectors, H-D_R two in all.
        let big = CollectiveArgs::new(CollectiveKind::AllReduce, 16 << 20, DataType::Fp32, 64);
        let order: Vec<AlgoSpec> = explain(&big, &layout, &cost)
            .into_iter()
            .map(|c| c.spec)
            .collect();
        let pos = |a| order.iter().position(|s| *s == AlgoSpec::Flat(a)).unwrap();
        assert!(
            pos(Algorithm::HalvingDoubling) < pos(Algorithm::Doubling),
            "{order:?}"
        );
        let bcast = CollectiveArgs::new(CollectiveKind::Broadcast, 1 << 28, DataType::Fp32, 64);
        // 1 GiB: the bandwidth-optimal schedules (Scatter + AllGather in
        // 2 log2 p steps, then the pipelined chain) beat the tree's log2 p · nβ.
        let order: Vec<AlgoSpec> = explain(&bcast, &layout, &cost)
            .into_iter()
            .map(|c| c.spec)
            .collect();
        let pos = |a| order.iter().position(|s| *s == AlgoSpec::Flat(a)).unwrap();
        assert!(
            pos(Algorithm::Nhr) < pos(Algorithm::Ring)
                && pos(Algorithm::Ring) < pos(Algorithm::Tree),
            "{order:?}"
        );
        let tiny = CollectiveArgs::new(CollectiveKind::Broadcast, 1, DataType::Fp32, 64);
        assert_eq!(
            select(&tiny, &layout, &cost, None).spec,
            AlgoSpec::Flat(Algorithm::Tree)
        );
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

    #[test]
    fn large_multi_server_messages_pick_the_pipeline() {
        let layout = GroupLayout::servers(4, 8);
        let cost = CostModel::default();
        for kind in [CollectiveKind::AllGather, CollectiveKind::AllReduce] {
            let big = CollectiveArgs::new(kind, 1 << 24, DataType::Fp32, 32);
            let c = explain(&big, &layout, &cost);
            assert_eq!(
                c[0].spec,
                AlgoSpec::Flat(Algorithm::Pipeline),
                "{kind}: {c:?}"
            );
            // Small messages: the pipeline's S - 1 inter-server latencies lose
            // to log-step level-1 algorithms.
            let small = CollectiveArgs::new(kind, 1, DataType::Fp32, 32);
            let s = select(&small, &layout, &cost, None);
            assert_ne!(s.spec, AlgoSpec::Flat(Algorithm::Pipeline), "{kind}");
        }
        // explain lists NHR and NB as level-1 choices; the pipeline is no
        // candidate on one server.
        let args = CollectiveArgs::new(CollectiveKind::AllGather, 1 << 20, DataType::Fp32, 32);
        let names: Vec<String> = explain(&args, &layout, &cost)
            .iter()
            .map(|c| c.spec.to_string())
            .collect();
        for want in [
            "level0:mesh;level1:NHR",
            "level0:ring;level1:NB",
            "pipeline",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
        }
        let flat = explain(&args, &GroupLayout::flat(32), &cost);
        assert!(flat
            .iter()
            .all(|c| c.spec != AlgoSpec::Flat(Algorithm::Pipeline)));
        // HCCL's spelling is costed the same.
        let env = HcclAlgo::parse("level0:NA;level1:pipeline").unwrap();
        let s = select(&args, &layout, &cost, Some(&env));
        assert_eq!(
            s.predicted_ns,
            predict(&args, &AlgoSpec::Flat(Algorithm::Pipeline), &layout, &cost)
        );
        assert!(s.predicted_ns.is_some());
    }

    #[test]
    fn many_servers_never_pick_a_level1_mesh() {
        // 128 servers x 8: a level-1 mesh sends 127 messages through each
        // NPU's one RoCE port. By hand, AllReduce level1 on n/8 = 8 MiB,
        // k1 = 128: mesh 2·127α + 2·127/128·8Mi·β ≈ 2540 + 664 µs; H-D_R
        // 2·7α + the same bandwidth term ≈ 140 + 664 µs.
        let layout = GroupLayout::servers(128, 8);
        let cost = CostModel::default();
        for bytes in [1u64 << 10, 64 << 20] {
            let args =
                CollectiveArgs::new(CollectiveKind::AllReduce, bytes / 4, DataType::Fp32, 1024);
            let s = select(&args, &layout, &cost, None);
            assert!(
                !s.spec.to_string().contains("level1:mesh"),
                "{bytes} B: {:?}",
                explain(&args, &layout, &cost)
            );
            let mesh = AlgoSpec::Hierarchical(Levels {
                level0: Some(Algorithm::Mesh),
                level1: Some(Algorithm::Mesh),
                level2: None,
            });
            let hd = AlgoSpec::Hierarchical(Levels {
                level0: Some(Algorithm::Mesh),
                level1: Some(Algorithm::HalvingDoubling),
                level2: None,
            });
            let (tm, th) = (
                predict(&args, &mesh, &layout, &cost).unwrap(),
                predict(&args, &hd, &layout, &cost).unwrap(),
            );
            // Same bandwidth terms: the gap is (2·127 − 2·7)·α = 240 α.
            assert!((tm - th - 240.0 * 10_000.0).abs() < 1e-3, "{tm} {th}");
        }
    }

    #[test]
    fn multi_server_prefers_hierarchical_and_env_overrides() {
        let layout = GroupLayout::servers(4, 8);
        let cost = CostModel::default();
        let args = CollectiveArgs::new(CollectiveKind::AllReduce, 1 << 24, DataType::Fp32, 32);
        let s = select(&args, &layout, &cost, None);
        // A layout-aware spec: a level composition or the pipeline (which
        // interleaves the two levels).
        assert!(
            matches!(
                s.spec,
                AlgoSpec::Hierarchical(_) | AlgoSpec::Flat(Algorithm::Pipeline)
            ),
            "{:?}",
            explain(&args, &layout, &cost)
        );
        let env = HcclAlgo::parse("allreduce=level0:NA;level1:ring").unwrap();
        let s = select(&args, &layout, &cost, Some(&env));
        assert_eq!(s.reason, "HCCL_ALGO");
        assert_eq!(s.spec.to_string(), "level0:NA;level1:ring");
    }

    #[test]
    fn a_group_of_one_costs_no_message() {
        let cost = CostModel::default();
        let layout = GroupLayout::servers(1, 1);
        for kind in CollectiveKind::ALL {
            let args = CollectiveArgs::new(kind, 1 << 20, DataType::Fp32, 1);
            for a in Algorithm::ALL {
                let t = flat_cost(kind, a, 1, 4e6, &cost.level0);
                assert!(matches!(t, None | Some(0.0)), "{kind} {a} on 1 rank: {t:?}");
            }
            // The list `hccl plan --ranks 1` prints: oneshot and mesh
            // were 2 and 4 us.
            for c in explain(&args, &layout, &cost) {
                assert_eq!(c.predicted_ns, 0.0, "{kind} {} on 1 rank", c.spec);
            }
        }
        // Two ranks still pay their messages.
        let two = flat_cost(
            CollectiveKind::AllReduce,
            Algorithm::Oneshot,
            2,
            0.0,
            &cost.level0,
        );
        assert_eq!(two, Some(cost.level0.alpha_ns));
    }
}

//! Algorithm selection: the cheapest candidate of an α–β–γ cost model per
//! topology level ([`cost`]), `HCCL_ALGO` overrides in HCCL's syntax
//! ([`hccl_algo`]), and the host transports' policy on top of both
//! ([`host`]: thresholds, slicing, one plan per op).

use std::fmt;

use crate::algo::{AlgoSpec, Algorithm, Levels};
use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::layout::GroupLayout;

pub mod cost;
pub mod hccl_algo;
pub mod host;

pub use cost::{predict, CostModel, LinkCost, PatternGbps};
pub use hccl_algo::{HcclAlgo, HcclAlgoError, HCCL_ALGO_OPS};
pub use host::{
    choose, plan_op, plan_spec, HostFit, PlannedOp, DOUBLING_MAX_BYTES,
    DOUBLING_MAX_BYTES_OVERSUBSCRIBED, DOUBLING_MAX_BYTES_OVERSUBSCRIBED_UNEVEN, MESH_MAX_BYTES,
    ONESHOT_MAX_BYTES, SLICE_BYTES, TCP_COST,
};

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
    use super::cost::flat_cost;
    use super::*;
    use crate::dtype::DataType;

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

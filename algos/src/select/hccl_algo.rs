//! `HCCL_ALGO`: HCCL's syntax for forcing algorithms, parsed, and fitted
//! to a collective on a layout. The caller reads the variable (this crate
//! reads no environment) and hands its value to [`HcclAlgo::from_setting`].

use std::collections::BTreeMap;

use crate::algo::{AlgoSpec, Algorithm, Levels};
use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::layout::GroupLayout;

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

    /// Parses the value of the `HCCL_ALGO` variable as the caller read it
    /// (`None`: unset); a blank value counts as unset, `Ok(None)`. This
    /// crate reads no environment: the facade and the CLI read the
    /// variable and pass its value here.
    ///
    /// # Errors
    /// As [`HcclAlgo::parse`].
    pub fn from_setting(value: Option<&str>) -> Result<Option<HcclAlgo>, HcclAlgoError> {
        match value {
            Some(v) if !v.trim().is_empty() => HcclAlgo::parse(v).map(Some),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DataType;
    use crate::select::{select, CostModel};

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
    fn an_unset_or_blank_setting_forces_nothing_and_a_bad_one_names_itself() {
        assert_eq!(HcclAlgo::from_setting(None), Ok(None));
        assert_eq!(HcclAlgo::from_setting(Some("  ")), Ok(None));
        assert_eq!(
            HcclAlgo::from_setting(Some("ring")).unwrap(),
            HcclAlgo::parse("ring").ok()
        );
        let e = HcclAlgo::from_setting(Some("rign"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"rign\""), "{e}");
    }
}

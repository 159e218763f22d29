//! Hierarchical planning: phases per topology level (server, pod, super
//! pod) over a regular layout, as HCCL's `level0`/`level1`/`level2`.

use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::layout::{GroupLayout, Regular};
use crate::schedule::Rank;

use super::gen::{self, Blocks, Ctx, Gen, Group};
use super::phase::{
    phase_ag, phase_ar, phase_bcast, phase_reduce, phase_rs, phase_tag, Env, Planned, Setup,
};
use super::{AlgoError, AlgoSpec, Algorithm, Levels};

/// Default algorithm of a level when the spec says `NA`.
fn level_default(level: usize, size: u32) -> Algorithm {
    match level {
        0 if size <= 8 => Algorithm::Mesh,
        0 => Algorithm::Ring,
        _ if size.is_power_of_two() => Algorithm::HalvingDoubling,
        _ => Algorithm::Ring,
    }
}

/// What `spec` runs on `layout`, to label it: a hierarchical spec with each
/// `NA` level replaced by its default and without the levels that have a
/// single member (level 1 on one server); left with one level, that
/// level's flat algorithm (its group is the whole communicator, so the
/// schedule is the flat one). `spec` itself for a flat spec, an irregular
/// layout, or a single rank.
pub fn resolved(spec: &AlgoSpec, layout: &GroupLayout) -> AlgoSpec {
    let AlgoSpec::Hierarchical(l) = spec else {
        return *spec;
    };
    let Ok(shape) = layout.regular() else {
        return *spec;
    };
    // The group sizes of `build_hier`.
    let sizes = if l.level2.is_some() {
        [shape.ranks_per_server, shape.servers_per_pod, shape.pods]
    } else {
        [
            shape.ranks_per_server,
            shape.servers_per_pod * shape.pods,
            1,
        ]
    };
    let set = [l.level0, l.level1, l.level2];
    let ran: Vec<Option<Algorithm>> = (0..3)
        .map(|i| (sizes[i] > 1).then(|| set[i].unwrap_or_else(|| level_default(i, sizes[i]))))
        .collect();
    match ran.iter().flatten().collect::<Vec<_>>().as_slice() {
        [] => *spec,
        [only] => AlgoSpec::Flat(**only),
        _ => AlgoSpec::Hierarchical(Levels {
            level0: ran[0].or(l.level0),
            level1: ran[1].or(l.level1),
            level2: ran[2].or(l.level2),
        }),
    }
}

/// Hierarchical composition over a regular layout (see [`GroupLayout::regular`]).
///
/// Only the first phase is built here; each later one when it starts,
/// by planning again and keeping that phase (the same inputs give the
/// same phases, so the steps are those of building all of them at once).
pub(super) fn build_hier(
    args: &CollectiveArgs,
    levels: &Levels,
    layout: &GroupLayout,
    rank: Rank,
) -> Planned {
    let shape = layout.regular()?;
    let first = hier_phases(args, levels, shape, rank, 0)?;
    let Some(gen) = first.kept else {
        return Ok((first.scratch, gen::seq(Vec::new())));
    };
    let (args, levels) = (args.clone(), *levels);
    let build = move |i: u32| -> Box<dyn Gen> {
        hier_phases(&args, &levels, shape, rank, i)
            .ok()
            .and_then(|p| p.kept)
            .expect("a plan that was built once builds again")
    };
    Ok((
        first.scratch,
        gen::seq_lazy(gen, first.count, Box::new(build)),
    ))
}

/// The phases of a hierarchical plan, counted, with one of them kept.
struct Phases {
    keep: u32,
    count: u32,
    kept: Option<Box<dyn Gen>>,
    /// Scratch bytes the whole plan needs.
    scratch: u64,
}

impl Phases {
    fn add(&mut self, g: Box<dyn Gen>) {
        if self.count == self.keep {
            self.kept = Some(g);
        }
        self.count += 1;
    }

    fn push(&mut self, (scratch, g): (u64, Box<dyn Gen>)) {
        self.scratch = self.scratch.max(scratch);
        self.add(g);
    }
}

/// Plans the phases of `rank` on `shape`, keeping phase `keep`.
fn hier_phases(
    args: &CollectiveArgs,
    levels: &Levels,
    shape: Regular,
    rank: Rank,
    keep: u32,
) -> Result<Phases, AlgoError> {
    use CollectiveKind as K;
    let kind = args.kind;
    let esz = args.dtype.size();
    let env = Env { kind, esz };
    let unsupported = || {
        AlgoError::Unsupported {
        algo: AlgoSpec::Hierarchical(*levels).to_string(),
        kind,
        supported: "flat algorithms (hierarchical composition covers all_reduce, all_gather, reduce_scatter, broadcast, reduce)"
            .into(),
    }
    };
    let k0 = shape.ranks_per_server;
    // Without a level-2 algorithm, super pods are flattened into level 1.
    let (k1, k2) = if levels.level2.is_some() {
        (shape.servers_per_pod, shape.pods)
    } else {
        (shape.servers_per_pod * shape.pods, 1)
    };
    let p = args.world_size;
    let local = rank % k0;
    let server_base = rank - local;
    let pod_size = k0 * k1;
    let in_pod = rank % pod_size;
    let pod_base = rank - in_pod;
    let groups = [
        (
            Group {
                base: server_base,
                stride: 1,
                size: k0,
            },
            local,
        ),
        (
            Group {
                base: pod_base + local,
                stride: k0,
                size: k1,
            },
            in_pod / k0,
        ),
        (
            Group {
                base: in_pod,
                stride: pod_size,
                size: k2,
            },
            rank / pod_size,
        ),
    ];
    let algos = [levels.level0, levels.level1, levels.level2];
    let algo_of = |l: usize| algos[l].unwrap_or_else(|| level_default(l, groups[l].0.size));
    let Setup {
        op,
        divide,
        input,
        output,
        scratch,
    } = Setup::of(args);
    let ctx = |l: usize, phase: u32| Ctx {
        g: groups[l].0,
        me: groups[l].1,
        op,
        tag0: phase_tag(phase),
    };
    let same = args.in_place;
    let n = args.count;
    // Rooted ops: the root's local index, and the group of the ranks with
    // that index on every server (the servers' local roots).
    let (root_local, root_server) = (args.root % k0, args.root / k0);
    let roots_ctx = |phase: u32| Ctx {
        g: Group {
            base: root_local,
            stride: k0,
            size: p / k0,
        },
        me: rank / k0,
        op,
        tag0: phase_tag(phase),
    };
    // Levels with more than one member, innermost first.
    let used: Vec<usize> = (0..3).filter(|&l| groups[l].0.size > 1).collect();
    let mut phases = Phases {
        keep,
        count: 0,
        kept: None,
        scratch: 0,
    };
    match kind {
        K::AllReduce => {
            if used.is_empty() {
                phases.push(phase_ar(
                    env,
                    Algorithm::Ring,
                    ctx(0, 0),
                    n,
                    input,
                    output,
                    same,
                    divide,
                )?);
            }
            // Reduce-scatter down the levels, all-reduce at the top, all-gather back.
            let (mut off, mut len) = (0u64, n);
            let mut src = input;
            let mut src_same = same;
            let mut stack = Vec::new();
            for (i, &l) in used.iter().enumerate() {
                let c = ctx(l, i as u32);
                if i + 1 == used.len() {
                    let here = output.shift(off);
                    phases.push(phase_ar(
                        env,
                        algo_of(l),
                        c,
                        len,
                        src.shift(off),
                        here,
                        src_same,
                        divide,
                    )?);
                } else {
                    let blocks = Blocks::Even {
                        total: len,
                        parts: c.g.size,
                    };
                    let mine = output.shift(off + blocks.off(c.me));
                    phases.push(phase_rs(
                        env,
                        algo_of(l),
                        c,
                        blocks.clone(),
                        src.shift(off),
                        mine,
                        scratch,
                        src_same,
                        None,
                    )?);
                    stack.push((l, blocks.clone(), off));
                    (off, len) = (off + blocks.off(c.me), blocks.len(c.me));
                    src = output;
                    src_same = true;
                }
            }
            for (j, (l, blocks, off)) in stack.into_iter().rev().enumerate() {
                let c = ctx(l, (used.len() + j) as u32);
                phases.push(phase_ag(
                    env,
                    algo_of(l),
                    c,
                    blocks,
                    None,
                    output.shift(off),
                )?);
            }
        }
        K::AllGather => {
            // Gather inside the server, then whole servers, then whole pods:
            // at level l a member's block is everything below it.
            let mut own_src = (!same).then_some(input);
            let mut each = n;
            for (l, &(g, _)) in groups.iter().enumerate() {
                if g.size > 1 || (l == 2 && phases.count == 0) {
                    // Element offset of this group's region in the output.
                    let region = [server_base as u64 * n, pod_base as u64 * n, 0][l];
                    let a = if g.size > 1 {
                        algo_of(l)
                    } else {
                        Algorithm::Ring
                    };
                    phases.push(phase_ag(
                        env,
                        a,
                        ctx(l, l as u32),
                        Blocks::uniform(each, g.size),
                        own_src,
                        output.shift(region),
                    )?);
                    own_src = None;
                }
                each *= g.size as u64;
            }
        }
        K::ReduceScatter if k2 == 1 && k1 > 1 => {
            // Between servers first (each server gets its ranks' blocks,
            // summed over same-local-index ranks), then inside the server.
            let chunk = n * k0 as u64;
            let staged = scratch;
            let rest = staged.shift(chunk);
            let r1 = phase_rs(
                env,
                algo_of(1),
                ctx(1, 0),
                Blocks::uniform(chunk, k1),
                input,
                staged,
                rest,
                false,
                None,
            )?;
            let r0 = phase_rs(
                env,
                algo_of(0),
                ctx(0, 1),
                Blocks::uniform(n, k0),
                staged,
                output,
                rest,
                false,
                divide,
            )?;
            phases.scratch = chunk * esz + r1.0.max(r0.0);
            phases.add(r1.1);
            phases.add(r0.1);
        }
        K::ReduceScatter if k2 == 1 => {
            phases.push(phase_rs(
                env,
                algo_of(0),
                ctx(0, 0),
                Blocks::uniform(n, k0),
                input,
                output,
                scratch,
                same,
                divide,
            )?);
        }
        K::Broadcast => {
            if local == root_local && p > k0 {
                let c = roots_ctx(0);
                phases.push(phase_bcast(
                    env,
                    algo_of(1),
                    c,
                    n,
                    root_server,
                    input,
                    output,
                    same,
                )?);
            }
            let from = if rank == args.root && p <= k0 {
                input
            } else {
                output
            };
            let same0 = if rank == args.root && p <= k0 {
                same
            } else {
                true
            };
            phases.push(phase_bcast(
                env,
                algo_of(0),
                ctx(0, 1),
                n,
                root_local,
                from,
                output,
                same0,
            )?);
        }
        K::Reduce => {
            let is_root = rank == args.root;
            // Partial result of the server at its local root: the output on
            // the global root, scratch elsewhere.
            let acc = if is_root { output } else { scratch };
            let spare = scratch.shift(n);
            let single = p <= k0;
            let r0 = phase_reduce(
                env,
                algo_of(0),
                ctx(0, 0),
                n,
                root_local,
                input,
                acc,
                spare,
                same && is_root,
                if single { divide } else { None },
            )?;
            phases.push(r0);
            if local == root_local && !single {
                let c = roots_ctx(1);
                phases.push(phase_reduce(
                    env,
                    algo_of(1),
                    c,
                    n,
                    root_server,
                    acc,
                    output,
                    spare,
                    is_root,
                    divide,
                )?);
            }
            // The accumulator sits below the phases' own scratch.
            phases.scratch += n * esz;
        }
        _ => return Err(unsupported()),
    }
    Ok(phases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Step;
    use crate::DataType;

    /// A plan whose later phases are built as they start emits the steps
    /// of the same phases built at once (two and three levels, every kind
    /// the composition covers, ranks on every server position).
    #[test]
    fn lazy_phases_give_the_steps_of_all_phases_built_at_once() {
        let layout = GroupLayout::pods(2, 3, 4);
        let shape = layout.regular().unwrap();
        let ring = Some(Algorithm::Ring);
        let level_sets = [
            Levels {
                level0: ring,
                level1: ring,
                level2: None,
            },
            Levels {
                level0: Some(Algorithm::Mesh),
                level1: Some(Algorithm::HalvingDoubling),
                level2: ring,
            },
        ];
        let mut multi_phase = 0;
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::Broadcast,
            CollectiveKind::Reduce,
        ] {
            for levels in &level_sets {
                for rank in [0, 5, 7, 23] {
                    let args = CollectiveArgs::new(kind, 96, DataType::Fp32, 24).with_root(7);
                    let Ok((_, lazy)) = build_hier(&args, levels, &layout, rank) else {
                        continue;
                    };
                    let count = hier_phases(&args, levels, shape, rank, 0).unwrap().count;
                    let all: Vec<Box<dyn Gen>> = (0..count)
                        .map(|i| {
                            hier_phases(&args, levels, shape, rank, i)
                                .unwrap()
                                .kept
                                .unwrap()
                        })
                        .collect();
                    let got: Vec<Step> = gen::into_plan(lazy).collect();
                    let want: Vec<Step> = gen::into_plan(gen::seq(all)).collect();
                    assert!(!want.is_empty(), "{kind:?} {levels:?} rank {rank}");
                    assert_eq!(got, want, "{kind:?} {levels:?} rank {rank}");
                    multi_phase += usize::from(count >= 2);
                }
            }
        }
        assert!(multi_phase >= 20, "only {multi_phase} plans had 2+ phases");
    }
}

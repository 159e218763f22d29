//! Hierarchical planning: phases per topology level (server, pod, super
//! pod) over a regular layout, as HCCL's `level0`/`level1`/`level2`.

use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::layout::GroupLayout;
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
pub(super) fn build_hier(
    args: &CollectiveArgs,
    levels: &Levels,
    layout: &GroupLayout,
    rank: Rank,
) -> Planned {
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
    let shape = layout.regular()?;
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
    let mut phases: Vec<Box<dyn Gen>> = Vec::new();
    let mut scratch_need = 0u64;
    let mut push = |r: (u64, Box<dyn Gen>), phases: &mut Vec<Box<dyn Gen>>| {
        scratch_need = scratch_need.max(r.0);
        phases.push(r.1);
    };
    match kind {
        K::AllReduce => {
            if used.is_empty() {
                push(
                    phase_ar(
                        env,
                        Algorithm::Ring,
                        ctx(0, 0),
                        n,
                        input,
                        output,
                        same,
                        divide,
                    )?,
                    &mut phases,
                );
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
                    push(
                        phase_ar(
                            env,
                            algo_of(l),
                            c,
                            len,
                            src.shift(off),
                            here,
                            src_same,
                            divide,
                        )?,
                        &mut phases,
                    );
                } else {
                    let blocks = Blocks::Even {
                        total: len,
                        parts: c.g.size,
                    };
                    let mine = output.shift(off + blocks.off(c.me));
                    push(
                        phase_rs(
                            env,
                            algo_of(l),
                            c,
                            blocks.clone(),
                            src.shift(off),
                            mine,
                            scratch,
                            src_same,
                            None,
                        )?,
                        &mut phases,
                    );
                    stack.push((l, blocks.clone(), off));
                    (off, len) = (off + blocks.off(c.me), blocks.len(c.me));
                    src = output;
                    src_same = true;
                }
            }
            for (j, (l, blocks, off)) in stack.into_iter().rev().enumerate() {
                let c = ctx(l, (used.len() + j) as u32);
                push(
                    phase_ag(env, algo_of(l), c, blocks, None, output.shift(off))?,
                    &mut phases,
                );
            }
        }
        K::AllGather => {
            // Gather inside the server, then whole servers, then whole pods:
            // at level l a member's block is everything below it.
            let mut own_src = (!same).then_some(input);
            let mut each = n;
            for (l, &(g, _)) in groups.iter().enumerate() {
                if g.size > 1 || (l == 2 && phases.is_empty()) {
                    // Element offset of this group's region in the output.
                    let region = [server_base as u64 * n, pod_base as u64 * n, 0][l];
                    let a = if g.size > 1 {
                        algo_of(l)
                    } else {
                        Algorithm::Ring
                    };
                    push(
                        phase_ag(
                            env,
                            a,
                            ctx(l, l as u32),
                            Blocks::uniform(each, g.size),
                            own_src,
                            output.shift(region),
                        )?,
                        &mut phases,
                    );
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
            scratch_need = chunk * esz + r1.0.max(r0.0);
            phases.push(r1.1);
            phases.push(r0.1);
        }
        K::ReduceScatter if k2 == 1 => {
            push(
                phase_rs(
                    env,
                    algo_of(0),
                    ctx(0, 0),
                    Blocks::uniform(n, k0),
                    input,
                    output,
                    scratch,
                    same,
                    divide,
                )?,
                &mut phases,
            );
        }
        K::Broadcast => {
            if local == root_local && p > k0 {
                let c = roots_ctx(0);
                push(
                    phase_bcast(env, algo_of(1), c, n, root_server, input, output, same)?,
                    &mut phases,
                );
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
            push(
                phase_bcast(
                    env,
                    algo_of(0),
                    ctx(0, 1),
                    n,
                    root_local,
                    from,
                    output,
                    same0,
                )?,
                &mut phases,
            );
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
            push(r0, &mut phases);
            if local == root_local && !single {
                let c = roots_ctx(1);
                push(
                    phase_reduce(
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
                    )?,
                    &mut phases,
                );
            }
            // The accumulator sits below the phases' own scratch.
            scratch_need += n * esz;
        }
        _ => return Err(unsupported()),
    }
    Ok((scratch_need, gen::seq(phases)))
}

//! Sliced AllReduce: a long AllReduce planned as independent slices of the
//! vector whose steps interleave (NCCL's chunked loop over a large buffer;
//! HCCL's executors likewise loop over an op in pieces of at most the CCL
//! buffer, `HCCL_BUFFSIZE`).
//!
//! AllReduce is elementwise, so slice `s` (elements `[count·s/S,
//! count·(s+1)/S)` of every rank's input and output) is an AllReduce of
//! its own, planned with the same algorithm. The slices' plans are
//! concatenated without a fence: slice `s + 1`'s steps do not wait for
//! slice `s`'s, so a rank can run slice `s`'s all-gather while its peer
//! still reduces slice `s + 1`, and each slice's bytes are read again
//! while they are still in cache (on a host, the reduce-scatter's result
//! is sent on right after it was written instead of after the whole
//! vector's).
//!
//! Each slice keeps its own tags (the slice index in the 8 bits from
//! [`TAG_SHIFT`], below the hierarchical phase bits from bit 24) and its
//! own scratch (after the previous slices'), so messages and scratch of
//! different slices never meet. The plan stays lazy: one slice's generator
//! at a time.

use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::schedule::{BufKind, BufferSizes, Op, Rank, RankPlan, Region, Step, StepId};

use super::{plan, AlgoError, AlgoSpec};
use crate::layout::GroupLayout;

/// The slice index goes in bits `TAG_SHIFT..TAG_SHIFT + 8` of a step's
/// tag: above every tag a phase uses up to [`MAX_SLICED_WORLD`] ranks, below
/// the phase index of a hierarchical plan (`phase << 24`).
pub const TAG_SHIFT: u32 = 16;

/// Bits of a tag that hold the slice index.
const SLICE_BITS: u32 = 0xFF << TAG_SHIFT;

/// Most slices of one op; a longer op gets longer slices.
pub const MAX_SLICES: u64 = 256;

/// Largest communicator that is sliced: a phase uses a few tags per rank
/// (a ring `2(p − 1)`), below `1 << TAG_SHIFT` here.
pub const MAX_SLICED_WORLD: u32 = 4096;

/// Number of slices [`plan_sliced`] cuts `args` into for slices of at most
/// `slice_bytes` bytes: 1 unless `args` is an AllReduce of more than
/// `slice_bytes` bytes on at most [`MAX_SLICED_WORLD`] ranks with at least
/// one element per rank in each slice; at most [`MAX_SLICES`]. The same
/// on every rank.
pub fn slice_count(args: &CollectiveArgs, slice_bytes: u64) -> u64 {
    let bytes = args.count.saturating_mul(args.dtype.size());
    if args.kind != CollectiveKind::AllReduce
        || args.world_size > MAX_SLICED_WORLD
        || slice_bytes == 0
        || bytes <= slice_bytes
    {
        return 1;
    }
    bytes
        .div_ceil(slice_bytes)
        .min(MAX_SLICES)
        .min(args.count / u64::from(args.world_size))
        .max(1)
}

/// [`plan`] with AllReduce cut into [`slice_count`] slices of at most
/// `slice_bytes` bytes each (see the module doc); other collectives, and
/// an AllReduce of one slice, are planned as by [`plan`].
///
/// Buffer sizes: input and output as [`plan`]'s, scratch the sum of the
/// slices' scratch.
///
/// # Errors
/// As [`plan`] (planning any slice).
pub fn plan_sliced(
    args: &CollectiveArgs,
    algo: &AlgoSpec,
    layout: &GroupLayout,
    rank: Rank,
    slice_bytes: u64,
) -> Result<(BufferSizes, RankPlan), AlgoError> {
    let slices = slice_count(args, slice_bytes);
    if slices <= 1 {
        return plan(args, algo, layout, rank);
    }
    // The whole op's checks; the slices' plans check the layout and rank.
    args.validate()?;
    let (input, output) = args.io_bytes(rank);
    let esz = args.dtype.size();
    let mut parts = Vec::with_capacity(slices as usize);
    let mut scratch = 0;
    for s in 0..slices {
        let first = args.count * s / slices;
        let count = args.count * (s + 1) / slices - first;
        let sub = CollectiveArgs {
            count,
            ..args.clone()
        };
        let (sub_sizes, steps) = plan(&sub, algo, layout, rank)?;
        parts.push(Part {
            io_at: first * esz,
            scratch_at: scratch,
            tag_base: (s as u32) << TAG_SHIFT,
            steps,
        });
        scratch += sub_sizes.scratch;
    }
    let sizes = BufferSizes {
        input,
        output,
        scratch,
    };
    Ok((sizes, Box::new(Slices::new(parts))))
}

/// One slice: where its bytes start and its lazy plan.
struct Part {
    /// Byte offset of the slice in the input and the output.
    io_at: u64,
    /// Byte offset of its scratch.
    scratch_at: u64,
    /// Added to every tag of its steps.
    tag_base: u32,
    steps: RankPlan,
}

impl Part {
    fn region(&self, r: Region) -> Region {
        let at = match r.buf {
            BufKind::Input | BufKind::Output => self.io_at,
            BufKind::Scratch => self.scratch_at,
        };
        Region::new(r.buf, r.offset + at, r.len)
    }

    /// `step` of this slice as a step of the whole plan, whose slice starts
    /// at step `base`.
    fn shift(&self, step: Step, base: StepId) -> Step {
        let tag = |t: u32| {
            debug_assert_eq!(t & SLICE_BITS, 0, "tag {t} overflows into the slice bits");
            self.tag_base | t
        };
        let r = |x| self.region(x);
        let op = match step.op {
            Op::Send { peer, tag: t, src } => Op::Send {
                peer,
                tag: tag(t),
                src: r(src),
            },
            Op::Recv { peer, tag: t, dst } => Op::Recv {
                peer,
                tag: tag(t),
                dst: r(dst),
            },
            Op::RecvReduce {
                peer,
                tag: t,
                local,
                dst,
                op,
            } => Op::RecvReduce {
                peer,
                tag: tag(t),
                local: r(local),
                dst: r(dst),
                op,
            },
            Op::Copy { src, dst } => Op::Copy {
                src: r(src),
                dst: r(dst),
            },
            Op::LocalReduce { src, dst, op } => Op::LocalReduce {
                src: r(src),
                dst: r(dst),
                op,
            },
            Op::Divide { dst, divisor } => Op::Divide {
                dst: r(dst),
                divisor,
            },
        };
        Step {
            op,
            deps: step.deps.shifted(base),
        }
    }
}

/// The slices' plans one after another, renumbered.
struct Slices {
    parts: std::collections::VecDeque<Part>,
    /// Index of the current slice's first step in the whole plan.
    base: StepId,
    /// Steps of the current slice given so far.
    given: StepId,
}

impl Slices {
    fn new(parts: Vec<Part>) -> Slices {
        Slices {
            parts: parts.into(),
            base: 0,
            given: 0,
        }
    }
}

impl Iterator for Slices {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        loop {
            let part = self.parts.front_mut()?;
            if let Some(step) = part.steps.next() {
                self.given += 1;
                return Some(part.shift(step, self.base));
            }
            self.parts.pop_front();
            self.base += self.given;
            self.given = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::tests::args_for;
    use crate::algo::{Algorithm, Levels};
    use crate::dtype::{DataType, ReduceOp};
    use crate::schedule::RankSchedule;
    use crate::verify::verify;

    fn sliced(
        args: &CollectiveArgs,
        spec: &AlgoSpec,
        layout: &GroupLayout,
        slice_bytes: u64,
    ) -> Vec<RankSchedule> {
        (0..args.world_size)
            .map(|rank| {
                let (buffers, steps) = plan_sliced(args, spec, layout, rank, slice_bytes)
                    .unwrap_or_else(|e| panic!("{spec}: {e}"));
                RankSchedule {
                    rank,
                    buffers,
                    steps: steps.collect(),
                }
            })
            .collect()
    }

    /// Every AllReduce algorithm, sliced, passes the verifier (matching,
    /// deadlock freedom, races, and the reduced bytes of every output).
    #[test]
    fn every_allreduce_algorithm_sliced_verifies() {
        for a in Algorithm::ALL {
            if !a.supports(CollectiveKind::AllReduce) || a == Algorithm::Pipeline {
                continue;
            }
            for p in 1..=9u32 {
                for count in [1, p as u64, 5 * p as u64 + 3] {
                    for (slice_bytes, in_place, op) in
                        [(4, false, ReduceOp::Sum), (12, true, ReduceOp::Avg)]
                    {
                        let mut args = args_for(CollectiveKind::AllReduce, p, count, 0, 1)
                            .with_in_place(in_place);
                        args.op = op;
                        let spec = AlgoSpec::Flat(a);
                        let s = sliced(&args, &spec, &GroupLayout::flat(p), slice_bytes);
                        verify(&args, &s).unwrap_or_else(|e| {
                            panic!("{a} p={p} count={count} slice {slice_bytes} B: {e}")
                        });
                    }
                }
            }
        }
    }

    #[test]
    fn hierarchical_allreduce_sliced_verifies() {
        let layout = GroupLayout::servers(3, 4);
        let spec = AlgoSpec::Hierarchical(Levels {
            level0: Some(Algorithm::Mesh),
            level1: Some(Algorithm::Ring),
            level2: None,
        });
        let args = args_for(CollectiveKind::AllReduce, 12, 100, 0, 3);
        let s = sliced(&args, &spec, &layout, 64);
        let steps = s[0].steps.len();
        let unsliced = crate::algo::schedule(&args, &spec, &layout).unwrap();
        assert!(steps > unsliced[0].steps.len(), "{steps} steps: not sliced");
        verify(&args, &s).unwrap();
    }

    #[test]
    fn slices_are_cut_by_bytes_and_bounded() {
        let ar =
            |count, p| CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, p);
        assert_eq!(
            slice_count(&ar(1 << 20, 2), 4 << 20),
            1,
            "exactly one slice"
        );
        assert_eq!(slice_count(&ar((1 << 20) + 1, 2), 4 << 20), 2);
        assert_eq!(slice_count(&ar(16 << 20, 2), 2 << 20), 32);
        assert_eq!(slice_count(&ar(1 << 30, 2), 4096), MAX_SLICES);
        // At least one element per rank in a slice.
        assert_eq!(slice_count(&ar(10, 4), 4), 2);
        assert_eq!(slice_count(&ar(1 << 20, MAX_SLICED_WORLD + 1), 64), 1);
        assert_eq!(slice_count(&ar(1 << 20, 2), 0), 1);
        let bc = CollectiveArgs::new(CollectiveKind::Broadcast, 1 << 20, DataType::Fp32, 2);
        assert_eq!(slice_count(&bc, 1024), 1);
    }

    /// Slices' tags and scratch never meet: slice `s` uses tags with `s`
    /// in the top bits, and scratch after the earlier slices'.
    #[test]
    fn slices_own_their_tags_and_scratch() {
        let args = CollectiveArgs::new(CollectiveKind::AllReduce, 4096, DataType::Fp32, 4);
        let spec = AlgoSpec::Flat(Algorithm::Ring);
        let (one, _) = plan(&args, &spec, &GroupLayout::flat(4), 1).unwrap();
        let s = sliced(&args, &spec, &GroupLayout::flat(4), 4096);
        assert_eq!(s[1].buffers.scratch, 0);
        assert_eq!(s[1].buffers.input, one.input);
        let slices: std::collections::BTreeSet<u32> = s[1]
            .steps
            .iter()
            .filter_map(|st| match st.op {
                Op::Send { tag, .. } | Op::Recv { tag, .. } | Op::RecvReduce { tag, .. } => {
                    Some((tag & SLICE_BITS) >> TAG_SHIFT)
                }
                _ => None,
            })
            .collect();
        assert_eq!(slices, (0..4).collect());
        let oneshot = AlgoSpec::Flat(Algorithm::Oneshot);
        let (whole, _) = plan(&args, &oneshot, &GroupLayout::flat(4), 0).unwrap();
        let s = sliced(&args, &oneshot, &GroupLayout::flat(4), 4096);
        assert_eq!(
            s[0].buffers.scratch, whole.scratch,
            "the slices' scratch adds up"
        );
    }

    /// Up to [`MAX_SLICED_WORLD`] ranks no algorithm's tag reaches the
    /// slice bits, flat or in a hierarchical plan's phases.
    #[test]
    fn tags_fit_below_the_slice_bits_at_the_largest_sliced_world() {
        let p = MAX_SLICED_WORLD;
        let args = CollectiveArgs::new(CollectiveKind::AllReduce, p as u64, DataType::Fp32, p);
        let mut specs: Vec<(AlgoSpec, GroupLayout)> = Algorithm::ALL
            .into_iter()
            .filter(|a| a.supports(CollectiveKind::AllReduce) && *a != Algorithm::Pipeline)
            .map(|a| (AlgoSpec::Flat(a), GroupLayout::flat(p)))
            .collect();
        for (l0, l1) in [
            (Algorithm::Mesh, Algorithm::Ring),
            (Algorithm::Ring, Algorithm::HalvingDoubling),
            (Algorithm::Nb, Algorithm::Nhr),
        ] {
            let levels = Levels {
                level0: Some(l0),
                level1: Some(l1),
                level2: None,
            };
            specs.push((AlgoSpec::Hierarchical(levels), GroupLayout::servers(64, 64)));
        }
        for (spec, layout) in &specs {
            for rank in [0, p / 2 + 1, p - 1] {
                let (_, steps) = plan(&args, spec, layout, rank).unwrap();
                for st in steps {
                    if let Op::Send { tag, .. }
                    | Op::Recv { tag, .. }
                    | Op::RecvReduce { tag, .. } = st.op
                    {
                        assert_eq!(tag & SLICE_BITS, 0, "{spec} rank {rank}: tag {tag}");
                    }
                }
            }
        }
    }
}

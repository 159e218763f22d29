//! Races: overlapping accesses of one rank, one of them a write, must be
//! ordered by the rank's dependencies.

use super::memory::Placement;
use super::structure::accesses;
use super::VerifyError;
use crate::collective::CollectiveArgs;
use crate::schedule::{Op, RankSchedule, Region, StepId};

pub(super) fn check_races(args: &CollectiveArgs, s: &RankSchedule) -> Result<(), VerifyError> {
    let place = Placement {
        alias: args.alias(s.rank),
    };
    let rank = s.rank;
    // Within one step: partially overlapping operands are undefined.
    for (i, step) in s.steps.iter().enumerate() {
        let pairs: &[(Region, Region)] = match step.op {
            Op::RecvReduce { local, dst, .. } => &[(local, dst)],
            Op::Copy { src, dst } | Op::LocalReduce { src, dst, .. } => &[(src, dst)],
            _ => &[],
        };
        for &(a, b) in pairs {
            let (ma, oa) = place.locate(a);
            let (mb, ob) = place.locate(b);
            let overlap = ma == mb && oa < ob + b.len && ob < oa + a.len && a.len > 0;
            if overlap && (oa != ob || a.len != b.len) {
                return Err(VerifyError::BadStep {
                    rank,
                    step: i as StepId,
                    what: format!("operands {a} and {b} partly overlap"),
                });
            }
        }
    }
    // Accesses per memory, sorted by start.
    let mut acc: Vec<(usize, u64, u64, StepId, bool, Region)> = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        let (reads, writes) = accesses(&step.op);
        for (r, w) in reads
            .iter()
            .map(|r| (r, false))
            .chain(writes.iter().map(|r| (r, true)))
        {
            if r.len == 0 {
                continue;
            }
            let (m, o) = place.locate(*r);
            acc.push((m, o, o + r.len, i as StepId, w, *r));
        }
    }
    acc.sort_by_key(|a| (a.0, a.1, a.3));
    let n = s.steps.len();
    let words = n.div_ceil(64);
    // anc[j] = bitset of steps j transitively depends on; built lazily only
    // if some pair needs it.
    let mut anc: Option<Vec<u64>> = None;
    let build = |anc: &mut Option<Vec<u64>>| {
        if anc.is_some() {
            return;
        }
        let mut a = vec![0u64; n * words];
        for (j, step) in s.steps.iter().enumerate() {
            if step.deps.all_before {
                for i in 0..j {
                    a[j * words + i / 64] |= 1 << (i % 64);
                }
                continue;
            }
            for &d in step.deps.ids() {
                let d = d as usize;
                let (lo, hi) = a.split_at_mut(j * words);
                let row = &mut hi[..words];
                for w in 0..words {
                    row[w] |= lo[d * words + w];
                }
                row[d / 64] |= 1 << (d % 64);
            }
        }
        *anc = Some(a);
    };
    let mut active: Vec<usize> = Vec::new();
    for (idx, cur) in acc.iter().enumerate() {
        active.retain(|&k| acc[k].0 == cur.0 && acc[k].2 > cur.1);
        for &k in &active {
            let prev = &acc[k];
            if (prev.4 || cur.4) && prev.3 != cur.3 {
                let (i, j) = if prev.3 < cur.3 {
                    (prev, cur)
                } else {
                    (cur, prev)
                };
                build(&mut anc);
                let a = anc.as_ref().expect("built");
                let (ii, jj) = (i.3 as usize, j.3 as usize);
                if a[jj * words + ii / 64] & (1 << (ii % 64)) == 0 {
                    return Err(VerifyError::Race {
                        rank,
                        first: i.3,
                        first_region: i.5,
                        second: j.3,
                        second_region: j.5,
                    });
                }
            }
        }
        active.push(idx);
    }
    Ok(())
}

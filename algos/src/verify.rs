//! The schedule verifier: proves a materialized schedule correct before it
//! runs, or names the rank, step and region where it is wrong.
//!
//! Checks, in order:
//! 1. **Structure**: one schedule per rank, buffer sizes as
//!    [`CollectiveArgs::io_bytes`] requires, dependencies pointing backwards,
//!    regions inside their buffers, peers inside the communicator, the
//!    right reduce op (`Sum` for `Avg`), `Divide` by the world size, element-aligned reductions.
//! 2. **Matching**: every Send has exactly one Recv/RecvReduce with the same
//!    `(sender, receiver, tag)` and length, and vice versa.
//! 3. **Races**: two steps of a rank that touch overlapping memory (input and
//!    output are one memory when the call is in place, see
//!    [`CollectiveArgs::alias`]), one of them writing, must be ordered by the
//!    rank's dependencies, so every execution order gives the same bytes.
//! 4. **Deadlock**: a symbolic run of all ranks with the executor's window
//!    ([`crate::exec::DEFAULT_WINDOW`]) and rendezvous semantics (a send
//!    completes only together with its matching receive) must finish.
//! 5. **Data**: the same run tracks, for every byte range, which ranks'
//!    input contributed and from which input offset (at the granularity of
//!    the regions the schedule uses, not per element). Each output range must
//!    be exactly the right combination, each rank counted once; for data
//!    movement, the right rank's bytes at the right place; `Avg` divided
//!    exactly once. A Barrier must make every rank's completion depend on
//!    every rank's start.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::rc::Rc;

use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::dtype::ReduceOp;
use crate::exec::DEFAULT_WINDOW;
use crate::schedule::{BufKind, Op, Rank, RankSchedule, Region, StepId};

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = match self.buf {
            BufKind::Input => "input",
            BufKind::Output => "output",
            BufKind::Scratch => "scratch",
        };
        write!(f, "{b}[{}..{})", self.offset, self.end())
    }
}

/// Options of [`verify_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Executor window used in the deadlock check.
    pub window: usize,
    /// Run the race check (quadratic in a rank's step count in the worst case).
    pub check_races: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            window: DEFAULT_WINDOW,
            check_races: true,
        }
    }
}

/// What a verified schedule does, in numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VerifyReport {
    /// Steps of all ranks.
    pub steps: u64,
    /// Messages (matched send/receive pairs).
    pub messages: u64,
    /// Bytes sent, all ranks together.
    pub bytes_sent: u64,
    /// Most bytes sent by one rank.
    pub max_rank_bytes_sent: u64,
    /// Longest chain of messages that must happen one after another.
    pub critical_path_messages: u64,
}

/// Why a schedule is wrong. Every variant names where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// Not one schedule per rank, in rank order.
    #[error(
        "expected {world} rank schedules in rank order, got {got} (first wrong: index {index})"
    )]
    RankCount {
        /// Schedules given.
        got: usize,
        /// World size.
        world: u32,
        /// First index whose rank is wrong.
        index: usize,
    },
    /// A buffer size differs from what the collective requires.
    #[error("rank {rank}: {buf:?} buffer is {got} bytes, the collective requires {expected}")]
    BufferSize {
        /// The rank.
        rank: Rank,
        /// The buffer.
        buf: BufKind,
        /// Size in the schedule.
        got: u64,
        /// Required size.
        expected: u64,
    },
    /// A dependency does not point to an earlier step.
    #[error("rank {rank} step {step}: depends on step {dep}, which is not earlier")]
    BadDep {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The bad dependency.
        dep: StepId,
    },
    /// A region exceeds its buffer.
    #[error("rank {rank} step {step}: region {region} is outside the {size}-byte buffer")]
    OutOfBounds {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The region.
        region: Region,
        /// The buffer's size.
        size: u64,
    },
    /// A peer outside the communicator, or the rank itself.
    #[error("rank {rank} step {step}: peer {peer} is not another rank of the communicator (world_size {world})")]
    BadPeer {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The peer.
        peer: Rank,
        /// World size.
        world: u32,
    },
    /// A malformed step (wrong op, divisor, lengths, alignment, overlap).
    #[error("rank {rank} step {step}: {what}")]
    BadStep {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// What is wrong.
        what: String,
    },
    /// Two sends (or two receives) with the same (sender, receiver, tag).
    #[error("rank {rank} steps {first} and {second}: two messages {sender} -> {receiver} with tag {tag}")]
    DuplicateMessage {
        /// The rank holding both steps.
        rank: Rank,
        /// The first step.
        first: StepId,
        /// The second step.
        second: StepId,
        /// Sender.
        sender: Rank,
        /// Receiver.
        receiver: Rank,
        /// Tag.
        tag: u32,
    },
    /// A send or receive without its partner.
    #[error("rank {rank} step {step}: {what} {sender} -> {receiver} tag {tag} has no matching {missing} on rank {peer}")]
    Unmatched {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// "send" or "receive".
        what: &'static str,
        /// "receive" or "send".
        missing: &'static str,
        /// Sender.
        sender: Rank,
        /// Receiver.
        receiver: Rank,
        /// The peer that lacks the partner step.
        peer: Rank,
        /// Tag.
        tag: u32,
    },
    /// A send and its receive differ in length.
    #[error("message {sender} -> {receiver} tag {tag}: send (step {send_step}) is {send_len} bytes, receive (step {recv_step}) is {recv_len}")]
    LengthMismatch {
        /// Sender.
        sender: Rank,
        /// Receiver.
        receiver: Rank,
        /// Tag.
        tag: u32,
        /// Sender's step.
        send_step: StepId,
        /// Receiver's step.
        recv_step: StepId,
        /// Send length.
        send_len: u64,
        /// Receive length.
        recv_len: u64,
    },
    /// Two unordered steps of a rank touch the same memory, one writing.
    #[error("rank {rank}: steps {first} ({first_region}) and {second} ({second_region}) overlap, one writes, and no dependency orders them")]
    Race {
        /// The rank.
        rank: Rank,
        /// Earlier step.
        first: StepId,
        /// Its region.
        first_region: Region,
        /// Later step.
        second: StepId,
        /// Its region.
        second_region: Region,
    },
    /// The symbolic run stops with ranks unfinished.
    #[error("deadlock under window {window}: {}", waits.join("; "))]
    Deadlock {
        /// Window used.
        window: usize,
        /// Per stuck rank (at most 8): what it waits on.
        waits: Vec<String>,
    },
    /// A step combines contents wrongly (undefined bytes, misaligned
    /// contributions, a rank counted twice, reducing or dividing twice).
    #[error("rank {rank} step {step}: region {region}: {what}")]
    BadData {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// Where.
        region: Region,
        /// What is wrong.
        what: String,
    },
    /// An output range ends with the wrong contents.
    #[error("rank {rank}: output {region} should be {expected} but is {got}")]
    WrongOutput {
        /// The rank.
        rank: Rank,
        /// The output range.
        region: Region,
        /// Expected contents.
        expected: String,
        /// Actual contents.
        got: String,
    },
    /// A barrier rank can finish before some rank has started.
    #[error("barrier: rank {rank} can finish without hearing from rank {missing}")]
    BarrierIncomplete {
        /// The rank.
        rank: Rank,
        /// A rank it never (transitively) heard from.
        missing: Rank,
    },
}

/// Verifies `scheds` (one per rank, in rank order) for `args` with the
/// default options.
///
/// # Errors
/// The first [`VerifyError`] found.
pub fn verify(args: &CollectiveArgs, scheds: &[RankSchedule]) -> Result<VerifyReport, VerifyError> {
    verify_with(args, scheds, &VerifyOptions::default())
}

/// [`verify`] with explicit options.
///
/// # Errors
/// The first [`VerifyError`] found.
pub fn verify_with(
    args: &CollectiveArgs,
    scheds: &[RankSchedule],
    opts: &VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    check_structure(args, scheds)?;
    let partner = match_messages(scheds)?;
    if opts.check_races {
        for s in scheds {
            check_races(args, s)?;
        }
    }
    let mut run = Run::new(args, scheds, &partner, opts.window.max(1));
    run.run()?;
    run.check_outputs()?;
    Ok(run.report)
}

// ---------------------------------------------------------------- structure

fn buf_size(s: &RankSchedule, b: BufKind) -> u64 {
    match b {
        BufKind::Input => s.buffers.input,
        BufKind::Output => s.buffers.output,
        BufKind::Scratch => s.buffers.scratch,
    }
}

/// Regions an op reads and writes.
#[cfg(test)]
pub(crate) fn accesses_of(op: &Op) -> (Vec<Region>, Vec<Region>) {
    accesses(op)
}

fn accesses(op: &Op) -> (Vec<Region>, Vec<Region>) {
    match *op {
        Op::Send { src, .. } => (vec![src], vec![]),
        Op::Recv { dst, .. } => (vec![], vec![dst]),
        Op::RecvReduce { local, dst, .. } => (vec![local], vec![dst]),
        Op::Copy { src, dst } => (vec![src], vec![dst]),
        Op::LocalReduce { src, dst, .. } => (vec![src, dst], vec![dst]),
        Op::Divide { dst, .. } => (vec![dst], vec![dst]),
    }
}

fn check_structure(args: &CollectiveArgs, scheds: &[RankSchedule]) -> Result<(), VerifyError> {
    let world = args.world_size;
    if scheds.len() != world as usize || scheds.iter().enumerate().any(|(i, s)| s.rank != i as Rank)
    {
        let index = scheds
            .iter()
            .enumerate()
            .find(|(i, s)| s.rank != *i as Rank)
            .map_or(scheds.len().min(world as usize), |(i, _)| i);
        return Err(VerifyError::RankCount {
            got: scheds.len(),
            world,
            index,
        });
    }
    let esz = args.dtype.size();
    let want_op = if args.op == ReduceOp::Avg {
        ReduceOp::Sum
    } else {
        args.op
    };
    for s in scheds {
        let rank = s.rank;
        let (inb, outb) = args.io_bytes(rank);
        for (buf, got, expected) in [
            (BufKind::Input, s.buffers.input, inb),
            (BufKind::Output, s.buffers.output, outb),
        ] {
            if got != expected {
                return Err(VerifyError::BufferSize {
                    rank,
                    buf,
                    got,
                    expected,
                });
            }
        }
        for (i, step) in s.steps.iter().enumerate() {
            let step_id = i as StepId;
            let bad = |what: String| VerifyError::BadStep {
                rank,
                step: step_id,
                what,
            };
            if let Some(&dep) = step.deps.ids().iter().find(|&&d| d >= step_id) {
                return Err(VerifyError::BadDep {
                    rank,
                    step: step_id,
                    dep,
                });
            }
            if let Some(peer) = step.op.peer() {
                if peer >= world || peer == rank {
                    return Err(VerifyError::BadPeer {
                        rank,
                        step: step_id,
                        peer,
                        world,
                    });
                }
            }
            let (reads, writes) = accesses(&step.op);
            for r in reads.iter().chain(&writes) {
                let size = buf_size(s, r.buf);
                if r.offset.checked_add(r.len).map_or(true, |e| e > size) {
                    return Err(VerifyError::OutOfBounds {
                        rank,
                        step: step_id,
                        region: *r,
                        size,
                    });
                }
            }
            let same_len = |a: Region, b: Region, what: &str| {
                if a.len != b.len {
                    Err(bad(format!("{what}: {a} and {b} differ in length")))
                } else {
                    Ok(())
                }
            };
            let reduce_checks = |op: ReduceOp, regions: &[Region]| -> Result<(), VerifyError> {
                if !args.kind.is_reduction() {
                    return Err(bad(format!(
                        "reduction ({op}) in {}, which moves data only",
                        args.kind
                    )));
                }
                if op != want_op {
                    return Err(bad(format!(
                        "reduce op {op}, the collective needs {want_op}"
                    )));
                }
                if let Some(r) = regions
                    .iter()
                    .find(|r| r.offset % esz != 0 || r.len % esz != 0)
                {
                    return Err(bad(format!(
                        "region {r} is not aligned to {esz}-byte elements"
                    )));
                }
                Ok(())
            };
            match step.op {
                Op::RecvReduce { local, dst, op, .. } => {
                    same_len(local, dst, "recv-reduce")?;
                    reduce_checks(op, &[local, dst])?;
                }
                Op::LocalReduce { src, dst, op } => {
                    same_len(src, dst, "local reduce")?;
                    reduce_checks(op, &[src, dst])?;
                }
                Op::Copy { src, dst } => same_len(src, dst, "copy")?,
                Op::Divide { dst, divisor } => {
                    if args.op != ReduceOp::Avg || !args.kind.is_reduction() {
                        return Err(bad(format!("divide of {dst}, but the op is not avg")));
                    }
                    if divisor != world {
                        return Err(bad(format!(
                            "divide by {divisor}, avg divides by world size {world}"
                        )));
                    }
                    reduce_checks(want_op, &[dst])?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- matching

/// `partner[rank][step]` = the matching step on the peer (u32::MAX for local steps).
type Partners = Vec<Vec<StepId>>;

fn match_messages(scheds: &[RankSchedule]) -> Result<Partners, VerifyError> {
    // (sender, receiver, tag) -> step on the sender / on the receiver.
    let mut sends: HashMap<(Rank, Rank, u32), StepId> = HashMap::new();
    let mut recvs: HashMap<(Rank, Rank, u32), StepId> = HashMap::new();
    for s in scheds {
        for (i, step) in s.steps.iter().enumerate() {
            let i = i as StepId;
            let (map, key) = match step.op {
                Op::Send { peer, tag, .. } => (&mut sends, (s.rank, peer, tag)),
                Op::Recv { peer, tag, .. } | Op::RecvReduce { peer, tag, .. } => {
                    (&mut recvs, (peer, s.rank, tag))
                }
                _ => continue,
            };
            if let Some(first) = map.insert(key, i) {
                return Err(VerifyError::DuplicateMessage {
                    rank: s.rank,
                    first,
                    second: i,
                    sender: key.0,
                    receiver: key.1,
                    tag: key.2,
                });
            }
        }
    }
    let mut partner: Partners = scheds
        .iter()
        .map(|s| vec![StepId::MAX; s.steps.len()])
        .collect();
    // Deterministic error order: walk the schedules, not the maps.
    for s in scheds {
        for (i, step) in s.steps.iter().enumerate() {
            let i = i as StepId;
            match step.op {
                Op::Send { peer, tag, src } => {
                    let Some(&j) = recvs.get(&(s.rank, peer, tag)) else {
                        return Err(VerifyError::Unmatched {
                            rank: s.rank,
                            step: i,
                            what: "send",
                            missing: "receive",
                            sender: s.rank,
                            receiver: peer,
                            peer,
                            tag,
                        });
                    };
                    let recv_len = scheds[peer as usize].steps[j as usize].op.bytes();
                    if recv_len != src.len {
                        return Err(VerifyError::LengthMismatch {
                            sender: s.rank,
                            receiver: peer,
                            tag,
                            send_step: i,
                            recv_step: j,
                            send_len: src.len,
                            recv_len,
                        });
                    }
                    partner[s.rank as usize][i as usize] = j;
                    partner[peer as usize][j as usize] = i;
                }
                Op::Recv { peer, tag, .. } | Op::RecvReduce { peer, tag, .. }
                    if !sends.contains_key(&(peer, s.rank, tag)) =>
                {
                    return Err(VerifyError::Unmatched {
                        rank: s.rank,
                        step: i,
                        what: "receive",
                        missing: "send",
                        sender: peer,
                        receiver: s.rank,
                        peer,
                        tag,
                    });
                }
                _ => {}
            }
        }
    }
    Ok(partner)
}

// ---------------------------------------------------------------- memory model

/// Maps a rank's buffers into its memories: 0 = input (and output when in
/// place), 1 = output, 2 = scratch.
#[derive(Clone, Copy, Debug)]
struct Placement {
    alias: Option<crate::collective::Alias>,
}

impl Placement {
    fn locate(&self, r: Region) -> (usize, u64) {
        match (r.buf, self.alias) {
            (BufKind::Scratch, _) => (2, r.offset),
            (BufKind::Input, Some(a)) => (0, a.input_at + r.offset),
            (BufKind::Output, Some(a)) => (0, a.output_at + r.offset),
            (BufKind::Input, None) => (0, r.offset),
            (BufKind::Output, None) => (1, r.offset),
        }
    }
}

fn check_races(args: &CollectiveArgs, s: &RankSchedule) -> Result<(), VerifyError> {
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

/// A set of ranks as sorted, disjoint, non-adjacent half-open ranges.
type RankSet = Rc<[(u32, u32)]>;

fn set_of(r: Rank) -> RankSet {
    Rc::from(vec![(r, r + 1)])
}

fn set_all(p: u32) -> RankSet {
    Rc::from(vec![(0, p)])
}

/// Union of disjoint sets, or the first rank in both.
fn union(a: &[(u32, u32)], b: &[(u32, u32)]) -> Result<RankSet, Rank> {
    let mut all: Vec<(u32, u32)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s < last.1 => return Err(s),
            Some(last) if s == last.1 => last.1 = e,
            _ => out.push((s, e)),
        }
    }
    Ok(out.into())
}

/// Union allowing overlap (for barrier knowledge).
fn union_any(a: &[(u32, u32)], b: &[(u32, u32)]) -> RankSet {
    let mut all: Vec<(u32, u32)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out.into()
}

fn fmt_set(s: &[(u32, u32)]) -> String {
    let parts: Vec<String> = s
        .iter()
        .map(|&(a, b)| {
            if b == a + 1 {
                a.to_string()
            } else {
                format!("{a}..{b}")
            }
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// Contents of a byte range.
#[derive(Clone, Debug, PartialEq)]
enum Val {
    /// Never written.
    Undef,
    /// The combination of `ranks`' input bytes starting at input byte `off`
    /// (all contributions share the offset), divided once if `div`.
    Data { ranks: RankSet, off: u64, div: bool },
}

impl Val {
    fn shift(&self, d: u64) -> Val {
        match self {
            Val::Undef => Val::Undef,
            Val::Data { ranks, off, div } => Val::Data {
                ranks: ranks.clone(),
                off: off + d,
                div: *div,
            },
        }
    }

    /// True if `next` continues `self` (of length `len`) seamlessly.
    fn continued_by(&self, len: u64, next: &Val) -> bool {
        match (self, next) {
            (Val::Undef, Val::Undef) => true,
            (
                Val::Data { ranks, off, div },
                Val::Data {
                    ranks: r2,
                    off: o2,
                    div: d2,
                },
            ) => ranks == r2 && *o2 == off + len && div == d2,
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            Val::Undef => "never written".into(),
            Val::Data { ranks, off, div } => format!(
                "{}input of ranks {} from input byte {off}",
                if *div { "avg of " } else { "" },
                fmt_set(ranks)
            ),
        }
    }
}

/// A memory as a tiling of byte ranges with contents.
#[derive(Debug, Default)]
struct Mem {
    map: BTreeMap<u64, (u64, Val)>,
}

impl Mem {
    fn new(size: u64) -> Mem {
        let mut map = BTreeMap::new();
        if size > 0 {
            map.insert(0, (size, Val::Undef));
        }
        Mem { map }
    }

    fn split(&mut self, at: u64) {
        let Some((&start, (len, val))) = self.map.range(..=at).next_back() else {
            return;
        };
        if start == at || start + len <= at {
            return;
        }
        let (len, val) = (*len, val.clone());
        self.map.insert(start, (at - start, val.clone()));
        self.map
            .insert(at, (start + len - at, val.shift(at - start)));
    }

    fn read(&self, off: u64, len: u64) -> Vec<(u64, Val)> {
        let end = off + len;
        if len == 0 {
            return vec![];
        }
        let first = self.map.range(..=off).next_back().map_or(0, |(k, _)| *k);
        self.map
            .range(first..end)
            .filter_map(|(&s, (l, v))| {
                let (a, b) = (s.max(off), (s + l).min(end));
                (a < b).then(|| (b - a, v.shift(a - s)))
            })
            .collect()
    }

    fn write(&mut self, off: u64, pieces: Vec<(u64, Val)>) {
        let len: u64 = pieces.iter().map(|p| p.0).sum();
        if len == 0 {
            return;
        }
        self.split(off);
        self.split(off + len);
        let keys: Vec<u64> = self.map.range(off..off + len).map(|(k, _)| *k).collect();
        for k in keys {
            self.map.remove(&k);
        }
        let mut at = off;
        for (l, v) in pieces {
            self.map.insert(at, (l, v));
            at += l;
        }
        // Coalesce the written range with itself and its neighbours.
        let from = self.map.range(..off).next_back().map_or(off, |(k, _)| *k);
        let keys: Vec<u64> = self.map.range(from..=off + len).map(|(k, _)| *k).collect();
        let mut cur = keys[0];
        for &k in &keys[1..] {
            let (clen, cval) = self.map[&cur].clone();
            let (nlen, nval) = self.map[&k].clone();
            if cur + clen == k && cval.continued_by(clen, &nval) {
                self.map.remove(&k);
                self.map.insert(cur, (clen + nlen, cval));
            } else {
                cur = k;
            }
        }
    }
}

// ---------------------------------------------------------------- symbolic run

const WAITING: u8 = 0;
const POSTED: u8 = 1;
const DONE: u8 = 2;

struct Run<'a> {
    args: &'a CollectiveArgs,
    scheds: &'a [RankSchedule],
    partner: &'a Partners,
    window: usize,
    state: Vec<Vec<u8>>,
    base: Vec<usize>,
    mems: Vec<[Mem; 3]>,
    place: Vec<Placement>,
    /// Messages-deep of each step (critical path).
    depth: Vec<Vec<u32>>,
    /// Barrier only: ranks each step has (transitively) heard from.
    know: Option<Vec<Vec<RankSet>>>,
    report: VerifyReport,
    sent_by: Vec<u64>,
}

impl<'a> Run<'a> {
    fn new(
        args: &'a CollectiveArgs,
        scheds: &'a [RankSchedule],
        partner: &'a Partners,
        window: usize,
    ) -> Self {
        let mut mems = Vec::with_capacity(scheds.len());
        let mut place = Vec::with_capacity(scheds.len());
        for s in scheds {
            let alias = args.alias(s.rank);
            let (inb, outb) = (s.buffers.input, s.buffers.output);
            let mut m = match alias {
                Some(a) => [
                    Mem::new((a.input_at + inb).max(a.output_at + outb)),
                    Mem::new(0),
                    Mem::new(s.buffers.scratch),
                ],
                None => [Mem::new(inb), Mem::new(outb), Mem::new(s.buffers.scratch)],
            };
            let at = alias.map_or(0, |a| a.input_at);
            m[0].write(
                at,
                vec![(
                    inb,
                    Val::Data {
                        ranks: set_of(s.rank),
                        off: 0,
                        div: false,
                    },
                )],
            );
            mems.push(m);
            place.push(Placement { alias });
        }
        let steps: u64 = scheds.iter().map(|s| s.steps.len() as u64).sum();
        Run {
            args,
            scheds,
            partner,
            window,
            state: scheds
                .iter()
                .map(|s| vec![WAITING; s.steps.len()])
                .collect(),
            base: vec![0; scheds.len()],
            mems,
            place,
            depth: scheds.iter().map(|s| vec![0; s.steps.len()]).collect(),
            know: (args.kind == CollectiveKind::Barrier).then(|| {
                scheds
                    .iter()
                    .map(|s| vec![set_of(s.rank); s.steps.len()])
                    .collect()
            }),
            report: VerifyReport {
                steps,
                ..VerifyReport::default()
            },
            sent_by: vec![0; scheds.len()],
        }
    }

    fn ready(&self, r: usize, i: usize) -> bool {
        let step = &self.scheds[r].steps[i];
        if step.deps.all_before {
            return self.base[r] >= i;
        }
        step.deps
            .ids()
            .iter()
            .all(|&d| self.state[r][d as usize] == DONE)
    }

    /// Depth before a step runs: max over its dependencies.
    fn pre_depth(&self, r: usize, i: usize) -> u32 {
        let step = &self.scheds[r].steps[i];
        if step.deps.all_before {
            return self.depth[r][..i].iter().copied().max().unwrap_or(0);
        }
        step.deps
            .ids()
            .iter()
            .map(|&d| self.depth[r][d as usize])
            .max()
            .unwrap_or(0)
    }

    fn pre_know(&self, r: usize, i: usize) -> RankSet {
        let know = self.know.as_ref().expect("barrier");
        let step = &self.scheds[r].steps[i];
        let mut k = set_of(r as Rank);
        let deps: Vec<usize> = if step.deps.all_before {
            (0..i).collect()
        } else {
            step.deps.ids().iter().map(|&d| d as usize).collect()
        };
        for d in deps {
            k = union_any(&k, &know[r][d]);
        }
        k
    }

    fn mark_done(&mut self, r: usize, i: usize) {
        self.state[r][i] = DONE;
        while self.base[r] < self.state[r].len() && self.state[r][self.base[r]] == DONE {
            self.base[r] += 1;
        }
    }

    fn data_err(&self, r: usize, i: usize, region: Region, what: String) -> VerifyError {
        VerifyError::BadData {
            rank: r as Rank,
            step: i as StepId,
            region,
            what,
        }
    }

    /// `local (op) received` piecewise.
    fn combine(
        &self,
        r: usize,
        i: usize,
        region: Region,
        a: Vec<(u64, Val)>,
        b: Vec<(u64, Val)>,
    ) -> Result<Vec<(u64, Val)>, VerifyError> {
        let mut out = Vec::new();
        let (mut ia, mut ib) = (a.into_iter(), b.into_iter());
        let (mut ca, mut cb) = (ia.next(), ib.next());
        let mut pos = 0u64;
        while let (Some((la, va)), Some((lb, vb))) = (ca.clone(), cb.clone()) {
            let l = la.min(lb);
            let piece = Region::new(region.buf, region.offset + pos, l);
            let v = match (&va, &vb) {
                (
                    Val::Data {
                        ranks: ra,
                        off: oa,
                        div: da,
                    },
                    Val::Data {
                        ranks: rb,
                        off: ob,
                        div: db,
                    },
                ) => {
                    if *da || *db {
                        return Err(self.data_err(r, i, piece, "reduces a value that was already divided (avg divides once, at the end)".into()));
                    }
                    if oa != ob {
                        return Err(self.data_err(
                            r,
                            i,
                            piece,
                            format!("reduces input bytes from offset {oa} (ranks {}) with input bytes from offset {ob} (ranks {})", fmt_set(ra), fmt_set(rb)),
                        ));
                    }
                    let ranks = union(ra, rb).map_err(|dup| {
                        self.data_err(
                            r,
                            i,
                            piece,
                            format!(
                                "counts rank {dup}'s contribution twice ({} with {})",
                                fmt_set(ra),
                                fmt_set(rb)
                            ),
                        )
                    })?;
                    Val::Data {
                        ranks,
                        off: *oa,
                        div: false,
                    }
                }
                _ => {
                    return Err(self.data_err(
                        r,
                        i,
                        piece,
                        "reduces bytes that were never written".into(),
                    ))
                }
            };
            out.push((l, v));
            pos += l;
            ca = if la > l {
                Some((la - l, va.shift(l)))
            } else {
                ia.next()
            };
            cb = if lb > l {
                Some((lb - l, vb.shift(l)))
            } else {
                ib.next()
            };
        }
        Ok(out)
    }

    fn read(&self, r: usize, reg: Region) -> Vec<(u64, Val)> {
        let (m, o) = self.place[r].locate(reg);
        self.mems[r][m].read(o, reg.len)
    }

    fn write(&mut self, r: usize, reg: Region, v: Vec<(u64, Val)>) {
        let (m, o) = self.place[r].locate(reg);
        self.mems[r][m].write(o, v);
    }

    fn exec_local(&mut self, r: usize, i: usize) -> Result<(), VerifyError> {
        match self.scheds[r].steps[i].op {
            Op::Copy { src, dst } => {
                let v = self.read(r, src);
                self.write(r, dst, v);
            }
            Op::LocalReduce { src, dst, .. } => {
                let (a, b) = (self.read(r, dst), self.read(r, src));
                let v = self.combine(r, i, dst, a, b)?;
                self.write(r, dst, v);
            }
            Op::Divide { dst, .. } => {
                let mut v = self.read(r, dst);
                for (_, piece) in &mut v {
                    match piece {
                        Val::Data { div, .. } if !*div => *div = true,
                        Val::Data { .. } => {
                            return Err(self.data_err(
                                r,
                                i,
                                dst,
                                "divides a value a second time".into(),
                            ))
                        }
                        Val::Undef => {
                            return Err(self.data_err(
                                r,
                                i,
                                dst,
                                "divides bytes that were never written".into(),
                            ))
                        }
                    }
                }
                self.write(r, dst, v);
            }
            _ => unreachable!("communication steps are matched, not executed locally"),
        }
        self.depth[r][i] = self.pre_depth(r, i);
        if self.know.is_some() {
            let k = self.pre_know(r, i);
            if let Some(know) = &mut self.know {
                know[r][i] = k;
            }
        }
        self.mark_done(r, i);
        Ok(())
    }

    /// Runs a matched message: `(s, si)` sends to `(d, di)`.
    fn exec_message(
        &mut self,
        s: usize,
        si: usize,
        d: usize,
        di: usize,
    ) -> Result<(), VerifyError> {
        let Op::Send { src, .. } = self.scheds[s].steps[si].op else {
            unreachable!("sender step is a send")
        };
        let incoming = self.read(s, src);
        match self.scheds[d].steps[di].op {
            Op::Recv { dst, .. } => self.write(d, dst, incoming),
            Op::RecvReduce { local, dst, .. } => {
                let l = self.read(d, local);
                let v = self.combine(d, di, dst, l, incoming)?;
                self.write(d, dst, v);
            }
            _ => unreachable!("receiver step is a receive"),
        }
        let depth = self.pre_depth(s, si).max(self.pre_depth(d, di)) + 1;
        self.depth[s][si] = depth;
        self.depth[d][di] = depth;
        self.report.critical_path_messages = self.report.critical_path_messages.max(depth as u64);
        self.report.messages += 1;
        self.report.bytes_sent += src.len;
        self.sent_by[s] += src.len;
        if self.know.is_some() {
            let ks = self.pre_know(s, si);
            let kd = union_any(&self.pre_know(d, di), &ks);
            if let Some(know) = &mut self.know {
                know[s][si] = ks;
                know[d][di] = kd;
            }
        }
        self.mark_done(s, si);
        self.mark_done(d, di);
        Ok(())
    }

    fn run(&mut self) -> Result<(), VerifyError> {
        let n = self.scheds.len();
        let mut work: Vec<usize> = (0..n).rev().collect();
        let mut queued = vec![true; n];
        while let Some(r) = work.pop() {
            queued[r] = false;
            let mut progress = true;
            while progress {
                progress = false;
                let end = (self.base[r] + self.window).min(self.state[r].len());
                for i in self.base[r]..end {
                    if self.state[r][i] != WAITING || !self.ready(r, i) {
                        continue;
                    }
                    let op = self.scheds[r].steps[i].op;
                    match op {
                        Op::Send { peer, .. }
                        | Op::Recv { peer, .. }
                        | Op::RecvReduce { peer, .. } => {
                            self.state[r][i] = POSTED;
                            let p = peer as usize;
                            let j = self.partner[r][i] as usize;
                            if self.state[p][j] == POSTED {
                                if matches!(op, Op::Send { .. }) {
                                    self.exec_message(r, i, p, j)?;
                                } else {
                                    self.exec_message(p, j, r, i)?;
                                }
                                progress = true;
                                if !queued[p] {
                                    queued[p] = true;
                                    work.push(p);
                                }
                            }
                        }
                        _ => {
                            self.exec_local(r, i)?;
                            progress = true;
                        }
                    }
                }
            }
        }
        let stuck: Vec<usize> = (0..n)
            .filter(|&r| self.base[r] < self.state[r].len())
            .collect();
        if !stuck.is_empty() {
            let waits = stuck
                .iter()
                .take(8)
                .map(|&r| self.describe_wait(r))
                .collect();
            return Err(VerifyError::Deadlock {
                window: self.window,
                waits,
            });
        }
        self.report.max_rank_bytes_sent = self.sent_by.iter().copied().max().unwrap_or(0);
        Ok(())
    }

    fn describe_wait(&self, r: usize) -> String {
        let i = self.base[r];
        let step = &self.scheds[r].steps[i];
        let what = match step.op {
            Op::Send { peer, tag, .. } => format!("send to {peer} tag {tag}"),
            Op::Recv { peer, tag, .. } | Op::RecvReduce { peer, tag, .. } => {
                format!("receive from {peer} tag {tag}")
            }
            _ => "local step".into(),
        };
        let why = if self.state[r][i] == WAITING {
            "waits for its dependencies".to_string()
        } else {
            let p = step.op.peer().expect("posted steps communicate") as usize;
            let j = self.partner[r][i] as usize;
            let pj = if j >= self.base[p] + self.window {
                format!(
                    "outside rank {p}'s window (its oldest unfinished step is {})",
                    self.base[p]
                )
            } else {
                "not posted yet".to_string()
            };
            format!("posted; the peer's matching step {j} is {pj}")
        };
        format!("rank {r} step {i} ({what}) {why}")
    }

    fn check_outputs(&self) -> Result<(), VerifyError> {
        let args = self.args;
        let p = args.world_size;
        if let Some(know) = &self.know {
            for (r, k) in know.iter().enumerate() {
                let all = k
                    .iter()
                    .fold(set_of(r as Rank), |acc, s| union_any(&acc, s));
                if let Some(missing) = (0..p).find(|x| !all.iter().any(|&(a, b)| a <= *x && *x < b))
                {
                    return Err(VerifyError::BarrierIncomplete {
                        rank: r as Rank,
                        missing,
                    });
                }
            }
            return Ok(());
        }
        for s in self.scheds {
            let r = s.rank as usize;
            for (out_off, len, want) in expected(args, s.rank) {
                let reg = Region::new(BufKind::Output, out_off, len);
                let mut pos = 0u64;
                for (l, got) in self.read(r, reg) {
                    let want_here = want.shift(pos);
                    if got != want_here {
                        return Err(VerifyError::WrongOutput {
                            rank: s.rank,
                            region: Region::new(BufKind::Output, out_off + pos, l),
                            expected: want_here.describe(),
                            got: got.describe(),
                        });
                    }
                    pos += l;
                }
            }
        }
        Ok(())
    }
}

/// The correct final output of `rank`: (output byte offset, length, contents).
fn expected(args: &CollectiveArgs, rank: Rank) -> Vec<(u64, u64, Val)> {
    use CollectiveKind as K;
    let p = args.world_size;
    let esz = args.dtype.size();
    let n = args.count * esz;
    let avg = args.op == ReduceOp::Avg;
    let r = rank as u64;
    let data = |ranks: RankSet, off: u64, div: bool| Val::Data { ranks, off, div };
    let one = |src: Rank, off: u64| data(set_of(src), off, false);
    match args.kind {
        K::AllReduce => vec![(0, n, data(set_all(p), 0, avg))],
        K::ReduceScatter => vec![(0, n, data(set_all(p), r * n, avg))],
        K::ReduceScatterV => {
            let v = args.counts.as_ref().expect("validated");
            vec![(
                0,
                v.count(r as usize) * esz,
                data(set_all(p), v.displ(r as usize) * esz, avg),
            )]
        }
        K::Reduce if rank == args.root => vec![(0, n, data(set_all(p), 0, avg))],
        K::Reduce => vec![],
        K::AllGather => (0..p).map(|i| (i as u64 * n, n, one(i, 0))).collect(),
        K::AllGatherV => {
            let v = args.counts.as_ref().expect("validated");
            (0..p as usize)
                .map(|i| (v.displ(i) * esz, v.count(i) * esz, one(i as Rank, 0)))
                .collect()
        }
        K::Broadcast => vec![(0, n, one(args.root, 0))],
        K::Scatter => vec![(0, n, one(args.root, r * n))],
        K::Gather if rank == args.root => (0..p).map(|i| (i as u64 * n, n, one(i, 0))).collect(),
        K::Gather => vec![],
        K::AllToAll => (0..p).map(|i| (i as u64 * n, n, one(i, r * n))).collect(),
        K::AllToAllV => {
            let m = args.send_matrix.as_ref().expect("validated");
            let ru = rank as usize;
            (0..p as usize)
                .map(|i| {
                    (
                        m.recv_displ(ru, i) * esz,
                        m.get(i, ru) * esz,
                        one(i as Rank, m.send_displ(i, ru) * esz),
                    )
                })
                .collect()
        }
        K::SendRecv | K::BatchSendRecv => {
            let pairs = args.pairs.as_ref().expect("validated");
            let mut in_off = vec![0u64; p as usize];
            let mut out = Vec::new();
            let mut out_off = 0u64;
            for t in pairs.iter() {
                let len = t.count * esz;
                if t.dst == rank {
                    out.push((out_off, len, one(t.src, in_off[t.src as usize])));
                    out_off += len;
                }
                in_off[t.src as usize] += len;
            }
            out
        }
        K::Barrier => vec![],
    }
}

#[cfg(test)]
mod tests;

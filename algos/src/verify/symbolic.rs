//! The symbolic run: executes all ranks with the executor's window and
//! rendezvous semantics (deadlock check), tracks every byte range's contents
//! and checks each output against [`expected`] (data check).

use super::matching::Partners;
use super::memory::Placement;
use super::memory::{fmt_set, set_all, set_of, union, union_any, Mem, RankSet, Val};
use super::{VerifyError, VerifyReport};
use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::dtype::ReduceOp;
use crate::schedule::{BufKind, Op, Rank, RankSchedule, Region, StepId};

pub(super) const WAITING: u8 = 0;
pub(super) const POSTED: u8 = 1;
pub(super) const DONE: u8 = 2;

pub(super) struct Run<'a> {
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
    pub(super) report: VerifyReport,
    sent_by: Vec<u64>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
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

    pub(super) fn run(&mut self) -> Result<(), VerifyError> {
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

    pub(super) fn check_outputs(&self) -> Result<(), VerifyError> {
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
pub(super) fn expected(args: &CollectiveArgs, rank: Rank) -> Vec<(u64, u64, Val)> {
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

//! [`Diagnosis`] as text for people and as JSON for tools.

use std::fmt::Write as _;

use super::doctor::{Cause, Diagnosis};
use super::{Dump, OpRecord, OpState};

/// Rows of the side-by-side table per communicator: its last seqs.
const TABLE_ROWS: usize = 6;

impl Diagnosis {
    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a diagnosis serializes")
    }

    /// The report as text: root causes, each communicator's last ops side
    /// by side, each rank's state, the wait-for graph, what to do.
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let _ = self.write_text(&mut t);
        t
    }

    fn rank_name(&self, comm: &str, r: u32) -> String {
        let g = self
            .comms
            .iter()
            .find(|c| c.comm == comm)
            .and_then(|c| c.global_ranks.get(r as usize).copied())
            .unwrap_or(r);
        if g == r {
            format!("rank {r}")
        } else {
            format!("rank {r} (global {g})")
        }
    }

    fn write_text(&self, t: &mut String) -> std::fmt::Result {
        let n: usize = self.comms.iter().map(|c| c.dumped.len()).sum();
        writeln!(
            t,
            "hccl doctor: {n} dump(s) of {} communicator(s)",
            self.comms.len()
        )?;
        writeln!(t, "root causes:")?;
        if self.root_causes.is_empty() {
            writeln!(
                t,
                "  (none found: every recorded op completed, or see the wait-for graph)"
            )?;
        }
        for c in &self.root_causes {
            writeln!(t, "  - {}", self.cause_text(c))?;
        }
        for c in &self.comms {
            write!(
                t,
                "comm '{}' ({} ranks): dumps from {}",
                c.comm,
                c.size,
                list(&c.dumped)
            )?;
            if !c.missing.is_empty() {
                write!(t, ", none from {}", list(&c.missing))?;
            }
            writeln!(t)?;
            self.write_table(t, &c.comm, c.size)?;
        }
        writeln!(t, "rank states:")?;
        for r in &self.ranks {
            write!(
                t,
                "  {} on '{}': {}",
                self.rank_name(&r.comm, r.rank),
                r.comm,
                r.state
            )?;
            if let (Some(kind), Some(seq)) = (&r.kind, r.seq) {
                write!(t, " in {kind} #{seq}")?;
            }
            if let Some(e) = r.error {
                write!(t, " ({})", json_name(&e))?;
            }
            if !r.waits.is_empty() {
                let w: Vec<String> = r
                    .waits
                    .iter()
                    .map(|w| format!("rank {} ({})", w.peer, json_name(&w.why)))
                    .collect();
                write!(t, ", waiting on {}", w.join(", "))?;
            }
            writeln!(t, "; dumped on {}", json_name(&r.reason))?;
        }
        writeln!(
            t,
            "wait-for graph ({} edge(s), world ranks):",
            self.wait_for.len()
        )?;
        for e in &self.wait_for {
            let op = e
                .seq
                .map_or("point-to-point".to_string(), |s| format!("#{s}"));
            writeln!(
                t,
                "  {} -> {}  comm '{}' {op} {}",
                e.from,
                e.to,
                e.comm,
                json_name(&e.why)
            )?;
        }
        writeln!(t, "what to do:")?;
        if self.advice.is_empty() {
            writeln!(
                t,
                "  - nothing failed in the dumps; dump a hung job with SIGUSR1 to every rank"
            )?;
        }
        for a in &self.advice {
            writeln!(t, "  - {a}")?;
        }
        Ok(())
    }

    /// Each rank's collectives of `comm` side by side, the last seqs.
    fn write_table(&self, t: &mut String, comm: &str, size: u32) -> std::fmt::Result {
        let of = |r: u32| -> Option<&Dump> {
            self.dumps
                .iter()
                .find(|d| d.header.comm == comm && d.header.rank == r)
        };
        let Some(top) = (0..size)
            .filter_map(of)
            .flat_map(|d| d.ops.iter().filter_map(|o| o.seq))
            .max()
        else {
            return writeln!(t, "  (no collective recorded)");
        };
        let low = top.saturating_sub(TABLE_ROWS as u64 - 1);
        let mut rows: Vec<Vec<String>> = vec![std::iter::once("seq".to_string())
            .chain((0..size).map(|r| format!("rank {r}")))
            .collect()];
        for seq in low..=top {
            let mut row = vec![format!("#{seq}")];
            for r in 0..size {
                row.push(match of(r) {
                    None => "(no dump)".into(),
                    Some(d) => match d.ops.iter().find(|o| o.seq == Some(seq)) {
                        Some(o) => cell(o),
                        // Older than the ring's first op: dropped, not missing.
                        None if d.ops.iter().filter_map(|o| o.seq).min() > Some(seq) => {
                            "(dropped)".into()
                        }
                        None => "-".into(),
                    },
                });
            }
            rows.push(row);
        }
        let cols = rows[0].len();
        let width: Vec<usize> = (0..cols)
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        for row in rows {
            let line: Vec<String> = row
                .iter()
                .zip(&width)
                .map(|(s, w)| format!("{s:<w$}"))
                .collect();
            writeln!(t, "  {}", line.join("  ").trim_end())?;
        }
        Ok(())
    }

    fn cause_text(&self, c: &Cause) -> String {
        match c {
            Cause::MismatchedArguments {
                comm,
                seq,
                field,
                values,
            } => {
                let v: Vec<String> = values
                    .iter()
                    .map(|(v, rs)| format!("{v} on {}", list(rs)))
                    .collect();
                format!(
                    "mismatched arguments (EI0005): comm '{comm}' op #{seq}: {field} differs: {}",
                    v.join(", ")
                )
            }
            Cause::CrashedRank {
                comm,
                rank,
                seq,
                lost_by,
                ..
            } => format!(
                "crashed rank: {} of comm '{comm}' is gone: {} lost its connection{}, and it left no dump",
                self.rank_name(comm, *rank),
                list(lost_by),
                seq.map_or(String::new(), |s| format!(" in op #{s}")),
            ),
            Cause::NeverCalled {
                comm,
                seq,
                kind,
                rank,
                last_seq,
                waited_on_by,
                ..
            } => format!(
                "never called: {} never called comm '{comm}' {kind} #{seq} ({}); {} wait(s) for it",
                self.rank_name(comm, *rank),
                last_seq.map_or("no op recorded there".to_string(), |l| format!(
                    "its last op there is #{l}"
                )),
                list(waited_on_by)
            ),
            Cause::CommunicatorCycle { ranks, comms, seqs } => {
                let steps: Vec<String> = ranks
                    .iter()
                    .zip(comms)
                    .zip(seqs)
                    .map(|((r, c), s)| format!("world rank {r} waits in comm '{c}' #{s}"))
                    .collect();
                format!(
                    "communicators entered in different orders: {}, each for a rank that has not called it",
                    steps.join(", ")
                )
            }
            Cause::DeadLink {
                comm,
                seq,
                ranks,
                hosts,
            } => format!(
                "dead link between {} (rank {}) and {} (rank {}): in comm '{comm}' op #{seq}, which both called, their messages stopped arriving with no error from either side",
                hosts[0], ranks[0], hosts[1], ranks[1]
            ),
            Cause::MissingDump {
                comm,
                rank,
                waited_on_by,
                ..
            } => {
                let by = if waited_on_by.is_empty() {
                    String::new()
                } else {
                    format!("; {} wait(s) for it", list(waited_on_by))
                };
                format!(
                    "missing dump: {} of comm '{comm}' left none{by}",
                    self.rank_name(comm, *rank)
                )
            }
            Cause::TooSlow { comm, seq, ranks } => format!(
                "too slow: comm '{comm}' op #{seq} timed out on {} although every rank called it",
                list(ranks)
            ),
        }
    }
}

/// `AllReduce 2048 fp32 done`, `... failed (timeout)`.
fn cell(o: &OpRecord) -> String {
    let state = match (o.state, &o.error) {
        (OpState::Failed, Some(e)) => format!("failed ({})", json_name(&e.kind)),
        (s, _) => json_name(&s),
    };
    format!("{} {} {} {state}", o.kind, o.count, o.dtype)
}

/// A unit enum's serde name (`never_called`).
fn json_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// "rank 3" or "ranks [1, 3]".
fn list(ranks: &[u32]) -> String {
    match ranks {
        [r] => format!("rank {r}"),
        _ => format!("ranks {ranks:?}"),
    }
}

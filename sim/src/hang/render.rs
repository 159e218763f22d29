//! Rendering: a [`HangReport`] as text for people and as JSON.

use std::fmt::Write as _;

use super::model::*;

impl HangReport {
    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a hang report serializes")
    }

    /// The report as text: at most `max_ranks` stuck ranks and edges are
    /// listed in full (the JSON has all).
    pub fn to_text_limited(&self, max_ranks: usize) -> String {
        let mut t = String::new();
        let _ = self.write_text(&mut t, max_ranks);
        t
    }

    /// The report as text, listing up to 32 stuck ranks.
    pub fn to_text(&self) -> String {
        self.to_text_limited(32)
    }

    fn write_text(&self, t: &mut String, max: usize) -> std::fmt::Result {
        let mismatch = self.root_causes.iter().find_map(|c| match c {
            RootCause::MismatchedArguments { op, comm, seq, .. } => Some((*op, comm, *seq)),
            _ => None,
        });
        match (&self.reason, mismatch) {
            // The argument check failed the op: an error, not a hang.
            (_, Some((op, comm, seq))) => writeln!(
                t,
                "FAILED: EI0005 argument mismatch in op #{op} on '{comm}' seq {seq} at {}; {} rank(s) unfinished",
                fmt_ns(self.last_activity_ns),
                self.ranks.len()
            )?,
            (HangReason::QueueDrained, None) => writeln!(
                t,
                "HANG: no event left after {}, {} rank(s) unfinished",
                fmt_ns(self.time_ns),
                self.ranks.len()
            )?,
            (
                HangReason::Timeout {
                    rank,
                    op,
                    timeout_ns,
                },
                None,
            ) => writeln!(
                t,
                "HANG at {}: rank {rank} still in op #{op} after HCCL_EXEC_TIMEOUT = {}; {} rank(s) unfinished",
                fmt_ns(self.time_ns),
                fmt_ns(*timeout_ns),
                self.ranks.len()
            )?,
        }
        writeln!(t, "root causes:")?;
        if self.root_causes.is_empty() {
            writeln!(t, "  (none found: see the wait-for graph)")?;
        }
        for c in &self.root_causes {
            writeln!(t, "  - {}", cause_text(c, &self.ranks))?;
        }
        for u in &self.unfired_faults {
            writeln!(t, "note: {u}")?;
        }
        writeln!(t, "stuck ranks:")?;
        for r in self.ranks.iter().take(max) {
            write!(t, "  rank {:<4} {}", r.rank, r.state)?;
            if let (Some(op), Some(comm), Some(label), Some(seq)) = (r.op, &r.comm, &r.label, r.seq)
            {
                write!(
                    t,
                    " in op #{op} '{label}' on '{comm}' seq {seq} (comm rank {})",
                    r.comm_rank.unwrap_or(0)
                )?;
            }
            if r.blocked_steps > 0 {
                write!(t, ", {} step(s) blocked behind", r.blocked_steps)?;
            }
            writeln!(t)?;
            for w in &r.waits {
                let sends = w.action == "send";
                let dir = if sends { "->" } else { "<-" };
                // What the peer must post to match this step.
                let matching = if sends { "receive" } else { "send" };
                let what = match &w.state {
                    WaitState::PeerNotPosted => {
                        format!("rank {} has not posted the matching {matching}", w.peer)
                    }
                    WaitState::Dropped => "the message was dropped".into(),
                    WaitState::DeadLink { links } => format!("stopped on dead link(s) {links:?}"),
                    WaitState::PeerCrashed => format!("rank {} crashed", w.peer),
                    WaitState::PeerCrashedBeforePosting => format!(
                        "rank {} crashed before posting the matching {matching}",
                        w.peer
                    ),
                    WaitState::InFlight => "in flight".into(),
                };
                writeln!(
                    t,
                    "      step {:<4} {:<11} {dir} rank {} (comm rank {}) tag {} {} B: {what}",
                    w.step,
                    w.action,
                    w.peer,
                    w.peer_comm_rank,
                    fmt_tag(w.tag),
                    w.bytes
                )?;
            }
        }
        if self.ranks.len() > max {
            writeln!(t, "  ... and {} more (see --json)", self.ranks.len() - max)?;
        }
        writeln!(t, "wait-for graph ({} edge(s)):", self.wait_for.len())?;
        for e in self.wait_for.iter().take(max) {
            writeln!(
                t,
                "  {} -> {}  op #{} {} tag(s) [{}]",
                e.from,
                e.to,
                e.op,
                e.state,
                e.tags
                    .iter()
                    .map(|&g| fmt_tag(g))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        if self.wait_for.len() > max {
            writeln!(t, "  ... and {} more", self.wait_for.len() - max)?;
        }
        writeln!(t, "seed: {}", self.seed)?;
        write!(t, "replay: {}", self.replay)
    }
}

fn list(v: &[u32]) -> String {
    let s: Vec<String> = v.iter().map(u32::to_string).collect();
    s.join(", ")
}

fn cause_text(c: &RootCause, ranks: &[StuckRank]) -> String {
    match c {
        RootCause::MismatchedArguments {
            op,
            comm,
            seq,
            field,
            values,
            failed,
        } => {
            let vals: Vec<String> = values
                .iter()
                .map(|(v, rs)| format!("{v} on rank(s) {}", list(rs)))
                .collect();
            format!(
                "mismatched arguments (EI0005) in op #{op} on '{comm}' seq {seq}: {field} differs: {}; rank(s) {} failed",
                vals.join(", "),
                list(failed)
            )
        }
        RootCause::CrashedRank {
            rank,
            time_ns,
            op,
            waited_on_by,
        } => format!(
            "rank {rank} crashed at {}{}; {}",
            fmt_ns(*time_ns),
            op.map(|o| format!(" in op #{o}")).unwrap_or_default(),
            if waited_on_by.is_empty() {
                "no rank waits on it directly".to_string()
            } else {
                format!("rank(s) {} wait on it", list(waited_on_by))
            }
        ),
        RootCause::NeverCalled {
            rank,
            op,
            comm,
            seq,
            why,
            waited_on_by,
        } => format!(
            "rank {rank} never called op #{op} on '{comm}' seq {seq} ({why}); rank(s) {} wait on it",
            list(waited_on_by)
        ),
        RootCause::DelayedForever {
            rank,
            op,
            waited_on_by,
        } => format!(
            "rank {rank} never starts op #{op}: its start delays (slow_rank faults) add up past {} ns, the end of simulated time; {}",
            u64::MAX,
            if waited_on_by.is_empty() {
                "no rank waits on it directly".to_string()
            } else {
                format!("rank(s) {} wait on it", list(waited_on_by))
            }
        ),
        RootCause::DeadLink {
            links,
            messages,
            alternative_route,
        } => {
            let names: Vec<String> = links
                .iter()
                .map(|l| format!("{} -> {} (link {})", l.from, l.to, l.id))
                .collect();
            let msgs: Vec<String> = messages.iter().map(|(s, d)| format!("{s}->{d}")).collect();
            format!(
                "dead link {} stops message(s) {}; {}",
                names.join(", "),
                msgs.join(", "),
                if *alternative_route {
                    "another route exists, but a started connection is not rerouted"
                } else {
                    "no alternative route exists"
                }
            )
        }
        RootCause::DroppedMessage {
            src,
            dst,
            op,
            tag,
            bytes,
            time_ns,
        } => format!(
            "message {src} -> {dst} of op #{op} (tag {}, {bytes} B) was dropped at {}; rank {dst} waits for it",
            fmt_tag(*tag),
            fmt_ns(*time_ns)
        ),
        RootCause::CommunicatorCycle { ranks: cyc, ops, comms } => {
            let steps: Vec<String> = cyc
                .iter()
                .zip(ops.iter().zip(comms))
                .enumerate()
                .map(|(i, (r, (o, c)))| {
                    let next = cyc[(i + 1) % cyc.len()];
                    let next_op = ranks
                        .iter()
                        .find(|s| s.rank == next)
                        .and_then(|s| s.op)
                        .map(|o| format!("#{o}"))
                        .unwrap_or_else(|| "?".into());
                    format!("rank {r} in op #{o} on '{c}' waits for rank {next}, which is in op {next_op}")
                })
                .collect();
            format!(
                "wait cycle across communicators (called in different orders on different ranks): {}",
                steps.join("; ")
            )
        }
        RootCause::TooSlow {
            rank,
            op,
            timeout_ns,
        } => format!(
            "op #{op} on rank {rank} was still making progress when HCCL_EXEC_TIMEOUT ({}) expired: it is too slow (degraded links, slow ranks); raise the timeout or remove the slowdown",
            fmt_ns(*timeout_ns)
        ),
    }
}

/// A schedule tag as `phase:tag`: the schedules put the phase of a
/// multi-phase algorithm in the tag's top 8 bits (`phase << 24 | tag`), so
/// `16777216` reads `1:0` (phase 1, tag 0).
pub fn fmt_tag(tag: u32) -> String {
    format!("{}:{}", tag >> 24, tag & 0x00ff_ffff)
}

/// `1836 s`, `12.5 us`, `850 ns`: virtual times for people.
pub fn fmt_ns(ns: u64) -> String {
    let (v, unit) = match ns {
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "s"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "ms"),
        n if n >= 1_000 => (n as f64 / 1e3, "us"),
        n => return format!("{n} ns"),
    };
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} {unit}")
}

#[cfg(test)]
mod tests {
    use super::fmt_ns;

    #[test]
    fn times_read_well() {
        assert_eq!(fmt_ns(850), "850 ns");
        assert_eq!(fmt_ns(12_500), "12.5 us");
        assert_eq!(fmt_ns(1_836_000_000_000), "1836 s");
        assert_eq!(fmt_ns(3_000_000), "3 ms");
    }
}

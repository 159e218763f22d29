//! `--trace FILE`: Chrome trace-event JSON (opens in Perfetto and
//! chrome://tracing).
//!
//! Format: the Trace Event Format's JSON object form, `{"traceEvents":
//! [...]}`, complete events (`"ph": "X"`, `ts`/`dur` in µs) and metadata
//! events naming processes and threads. Process 1 holds one track per
//! rank ("rank r ops": the op on that rank; "rank r": its messages),
//! process 2 one track per busy link. Complete events on one track must
//! not overlap, so concurrent messages of a rank or link go on extra
//! lanes ("rank r (2)", ...), assigned greedily. One op per row is traced
//! (the first timed one), rows placed one after another on the time axis.

use std::collections::BTreeMap;

use hccl_sim::OpResult;
use hccl_topology::{EdgeIndex, Fabric};
use serde_json::{json, Value};

use super::runner::Message;

const RANKS_PID: u32 = 1;
const LINKS_PID: u32 = 2;
const SWEEP_PID: u32 = 0;
/// Lanes per track before tids of the next rank or link.
const LANES: u64 = 1000;

/// Greedy lanes of one track: the end time of each lane's last slice.
#[derive(Default)]
struct Lanes(Vec<u64>);

impl Lanes {
    fn take(&mut self, start: u64, end: u64) -> usize {
        match self.0.iter().position(|&e| e <= start) {
            Some(i) => {
                self.0[i] = end;
                i
            }
            None => {
                self.0.push(end);
                self.0.len() - 1
            }
        }
    }
}

/// Builds the trace of a sweep.
#[derive(Default)]
pub(crate) struct TraceBuilder {
    events: Vec<Value>,
    rank_lanes: BTreeMap<u32, Lanes>,
    link_lanes: BTreeMap<u32, Lanes>,
    named: BTreeMap<(u32, u64), String>,
    offset_ns: u64,
    /// Process names (pid → name) and the document's `otherData.source`;
    /// `None`: a sweep's (`sweep`, `ranks`, `links`; `hccl test`).
    processes: Option<(Vec<(u32, String)>, String)>,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl TraceBuilder {
    /// An empty trace.
    pub(crate) fn new() -> TraceBuilder {
        TraceBuilder::default()
    }

    /// A trace of other processes than a sweep's (`hccl workload`):
    /// `processes` names each pid, `source` says what made it.
    pub(crate) fn with_processes(processes: Vec<(u32, String)>, source: &str) -> TraceBuilder {
        TraceBuilder {
            processes: Some((processes, source.to_string())),
            ..TraceBuilder::default()
        }
    }

    /// A complete event (`"ph": "X"`) on track `tid` of process `pid`,
    /// from `start` to `end` ns.
    pub(crate) fn slice(
        &mut self,
        pid: u32,
        tid: u64,
        name: String,
        start: u64,
        end: u64,
        args: Value,
    ) {
        self.events.push(json!({
            "ph": "X", "pid": pid, "tid": tid, "name": name,
            "ts": us(start), "dur": us(end.saturating_sub(start)), "args": args,
        }));
    }

    /// Names track `tid` of `pid` (the first name given wins).
    pub(crate) fn name_thread(&mut self, pid: u32, tid: u64, name: String) {
        self.named.entry((pid, tid)).or_insert(name);
    }

    /// Adds one row: `op` (its results, scenario index `op_index`) and the
    /// recorded messages of that op, shifted to follow the previous row.
    pub(crate) fn add_row(
        &mut self,
        label: &str,
        fabric: &Fabric,
        op_index: usize,
        op: &OpResult,
        messages: &[Message],
    ) {
        let start = op.start_ns.iter().flatten().copied().min().unwrap_or(0);
        let end = op.end_ns.iter().flatten().copied().max().unwrap_or(start);
        let offset = self.offset_ns;
        let shift = |t: u64| t.saturating_sub(start) + offset;
        let (s0, e0) = (shift(start), shift(end));
        self.slice(
            SWEEP_PID,
            0,
            label.to_string(),
            s0,
            e0,
            json!({ "label": label }),
        );
        self.name_thread(SWEEP_PID, 0, "rows".into());
        for (r, (st, en)) in op.start_ns.iter().zip(&op.end_ns).enumerate() {
            if let (Some(st), Some(en)) = (st, en) {
                let tid = r as u64 * LANES;
                self.name_thread(RANKS_PID, tid, format!("rank {r} ops"));
                self.slice(
                    RANKS_PID,
                    tid,
                    label.to_string(),
                    shift(*st),
                    shift(*en),
                    json!({ "rank": r }),
                );
            }
        }
        for Message { record: m, route } in messages.iter().filter(|m| m.record.op == op_index) {
            let (a, b) = (shift(m.start_ns), shift(m.end_ns));
            let args = |peer: u32| json!({ "peer": peer, "bytes": m.bytes, "tag": m.tag, "src": m.src, "dst": m.dst });
            for (rank, name, peer) in [
                (m.src, format!("send -> {}", m.dst), m.dst),
                (m.dst, format!("recv <- {}", m.src), m.src),
            ] {
                let lane = self.rank_lanes.entry(rank).or_default().take(a, b);
                let tid = u64::from(rank) * LANES + 1 + lane as u64;
                let tname = if lane == 0 {
                    format!("rank {rank}")
                } else {
                    format!("rank {rank} ({})", lane + 1)
                };
                self.name_thread(RANKS_PID, tid, tname);
                self.slice(RANKS_PID, tid, name, a, b, args(peer));
            }
            for &l in route {
                let lane = self.link_lanes.entry(l).or_default().take(a, b);
                let tid = u64::from(l) * LANES + lane as u64;
                let (from, to) = fabric
                    .graph()
                    .edge_endpoints(EdgeIndex::new(l as usize))
                    .map(|(x, y)| {
                        (
                            fabric.graph()[x].name.clone(),
                            fabric.graph()[y].name.clone(),
                        )
                    })
                    .unwrap_or_default();
                let class = fabric.link(EdgeIndex::new(l as usize)).class.to_string();
                let mut tname = format!("link {l} {from} -> {to} ({class})");
                if lane > 0 {
                    tname.push_str(&format!(" ({})", lane + 1));
                }
                self.name_thread(LINKS_PID, tid, tname);
                self.slice(
                    LINKS_PID,
                    tid,
                    format!("{} -> {}", m.src, m.dst),
                    a,
                    b,
                    args(m.dst),
                );
            }
        }
        // A gap of a tenth of the row (at least 1 µs) before the next one.
        self.offset_ns = e0 + ((e0 - s0) / 10).max(1000);
    }

    /// The JSON document.
    pub(crate) fn finish(self) -> Value {
        let (processes, source) = self.processes.unwrap_or_else(|| {
            (
                vec![
                    (SWEEP_PID, "sweep".into()),
                    (RANKS_PID, "ranks".into()),
                    (LINKS_PID, "links".into()),
                ],
                "hccl test (simulated time)".into(),
            )
        });
        let mut events: Vec<Value> = processes
            .into_iter()
            .map(|(pid, name)| json!({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}))
            .collect();
        for ((pid, tid), name) in self.named {
            events.push(json!({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}));
            events.push(json!({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}));
        }
        events.extend(self.events);
        json!({ "traceEvents": events, "displayTimeUnit": "ns", "otherData": { "source": source } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_never_overlap() {
        let mut l = Lanes::default();
        assert_eq!(l.take(0, 10), 0);
        assert_eq!(l.take(5, 8), 1);
        assert_eq!(l.take(9, 12), 1);
        assert_eq!(l.take(10, 11), 0);
        assert_eq!(l.take(10, 11), 2);
    }
}

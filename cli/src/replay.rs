//! `hccl sim --replay DIR` (issue 16): the flight recorder's dumps of a
//! run (`docs/flight_recorder.md`) turned into a scenario file and a fault
//! plan, run on the simulator as `hccl sim --scenario F --faults P` runs
//! them, so its hang report (and the replay line that reproduces it byte
//! for byte from its seed) names the real run's cause.
//!
//! What the dumps give: the communicators (names, sizes, world ranks of
//! splits), each rank's collectives in call order (across communicators by
//! the time it called them), and the faults they imply:
//! - a rank of the world with no dump crashed: the replay crashes it
//!   before the first op any other rank did not finish;
//! - a rank whose record ends early, every op done (it never called op
//!   #k: it went past it or finished), has no op #k in its order, as in
//!   the run; a rank stuck in its last op calls the ops it never reached
//!   after it (so communicators called in different orders wait on each
//!   other in a cycle, as they did);
//! - a rank that called op #k with another count, data type, reduce op or
//!   root than the others (the majority) calls it so (`wrong_args`);
//! - communicators entered in different orders keep their orders.
//!
//! Point-to-point ops and the V collectives are left out (scenario files
//! cannot express them yet); the output says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use hccl::flight::{read_dumps, Dump, OpRecord, OpState};
use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveKind;
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::faults::{Fault, FaultPlan};
use hccl_sim::scenario_file::{OpSpec, ScenarioFile};
use hccl_topology::{build_preset, Preset};

use super::sim::{execute, Outcome, SimArgs};

/// A run's dumps as a scenario: the file, the fault plan and what was
/// found on the way, one line each.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replay {
    /// The ops, communicators and per-rank orders.
    pub(crate) scenario: ScenarioFile,
    /// The faults the dumps imply.
    pub(crate) faults: FaultPlan,
    /// World size.
    pub(crate) ranks: u32,
    /// Findings and what was left out, for people.
    pub(crate) notes: Vec<String>,
}

/// What one rank called at one seq: the fields ranks must agree on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Call {
    kind: String,
    count: u64,
    dtype: String,
    op: Option<String>,
    root: Option<u32>,
}

impl Call {
    fn of(r: &OpRecord) -> Call {
        Call {
            kind: r.kind.clone(),
            count: r.count,
            dtype: r.dtype.clone(),
            op: r.op.clone(),
            root: r.root,
        }
    }
}

/// A collective the scenario can hold (not point-to-point, not V).
fn replayable(kind: &str) -> Option<CollectiveKind> {
    let k: CollectiveKind = kind.parse().ok()?;
    (!matches!(
        k,
        CollectiveKind::AllToAllV
            | CollectiveKind::AllGatherV
            | CollectiveKind::ReduceScatterV
            | CollectiveKind::SendRecv
            | CollectiveKind::BatchSendRecv
    ))
    .then_some(k)
}

/// The world rank of communicator rank `r` of `d`'s communicator.
fn world_rank(d: &Dump, r: u32) -> u32 {
    d.header
        .global_ranks
        .as_ref()
        .and_then(|g| g.get(r as usize).copied())
        .unwrap_or(r)
}

/// One op of the scenario: its communicator, seq and each rank's record.
struct Slot<'a> {
    comm: String,
    seq: u64,
    /// (world rank, record), by world rank.
    calls: Vec<(u32, &'a OpRecord)>,
}

/// Turns `dumps` into a scenario.
///
/// # Errors
/// No dumps, no world communicator's dump, or dumps that disagree on a
/// communicator's size.
pub(crate) fn from_dumps(dumps: &[Dump]) -> anyhow::Result<Replay> {
    let mut notes = Vec::new();
    // The world: not made by a split (a split's name is `parent/splitN/colorC`).
    let worlds: Vec<&Dump> = dumps
        .iter()
        .filter(|d| d.header.global_ranks.is_none() && !d.header.comm.contains('/'))
        .collect();
    let Some(w) = worlds.first() else {
        anyhow::bail!(
            "no dump of a world communicator (one not made by a split) among {} dump(s); give the directory of a run's dumps",
            dumps.len()
        );
    };
    if let Some(other) = worlds.iter().find(|d| d.header.comm != w.header.comm) {
        anyhow::bail!(
            "dumps of two world communicators, '{}' and '{}': give the dumps of one run",
            w.header.comm,
            other.header.comm
        );
    }
    let world_name = w.header.comm.clone();
    let n = w.header.size;
    // Communicators: name -> world ranks.
    let mut comms: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for d in dumps {
        let members: Vec<u32> = (0..d.header.size).map(|r| world_rank(d, r)).collect();
        if let Some(m) = comms.get(&d.header.comm) {
            if *m != members {
                anyhow::bail!(
                    "the dumps of communicator '{}' disagree on its ranks ({m:?} and {members:?})",
                    d.header.comm
                );
            }
        }
        if let Some(&r) = members.iter().find(|&&r| r >= n) {
            anyhow::bail!(
                "communicator '{}' names world rank {r}, but '{world_name}' has {n} ranks",
                d.header.comm
            );
        }
        comms.insert(d.header.comm.clone(), members);
    }
    // Every rank's replayable collectives, from the seq every rank of the
    // communicator still holds (a ring may have dropped older ones).
    let mut slots: BTreeMap<(String, u64), Slot<'_>> = BTreeMap::new();
    let mut left_out = BTreeMap::<String, u64>::new();
    for d in dumps {
        let me = world_rank(d, d.header.rank);
        let first = comm_window(dumps, &d.header.comm);
        for r in &d.ops {
            let Some(seq) = r.seq.filter(|_| replayable(&r.kind).is_some()) else {
                *left_out.entry(r.kind.clone()).or_default() += 1;
                continue;
            };
            if seq < first {
                continue;
            }
            slots
                .entry((d.header.comm.clone(), seq))
                .or_insert_with(|| Slot {
                    comm: d.header.comm.clone(),
                    seq,
                    calls: Vec::new(),
                })
                .calls
                .push((me, r));
        }
    }
    for (kind, k) in &left_out {
        notes.push(format!(
            "{k} {kind} op record(s) left out: the replay holds collectives other than the V forms"
        ));
    }
    // Scenario order: when the op was first called, then communicator, seq.
    let mut order: Vec<Slot<'_>> = slots.into_values().collect();
    order.sort_by_key(|s| {
        let t = s.calls.iter().map(|(_, r)| r.queued_us).min().unwrap_or(0);
        (t, s.comm.clone(), s.seq)
    });
    let index: BTreeMap<(String, u64), usize> = order
        .iter()
        .enumerate()
        .map(|(i, s)| ((s.comm.clone(), s.seq), i))
        .collect();
    let mut faults = FaultPlan::default();
    let mut ops = Vec::with_capacity(order.len());
    for (i, s) in order.iter().enumerate() {
        let (call, algo) = majority(&s.calls);
        for &(rank, r) in &s.calls {
            let mine = Call::of(r);
            if mine == call {
                continue;
            }
            match wrong_args(rank, i, &call, &mine) {
                Some(f) => {
                    notes.push(format!(
                        "rank {rank} called op #{i} ('{}' seq {}) as {} where the others called {}: replayed as {}",
                        s.comm,
                        s.seq,
                        describe(&mine),
                        describe(&call),
                        f.describe()
                    ));
                    faults.faults.push(f);
                }
                None => notes.push(format!(
                    "rank {rank} called {} at '{}' seq {} where the others called {}: the replay cannot change a rank's collective, it calls {} too",
                    mine.kind, s.comm, s.seq, call.kind, call.kind
                )),
            }
        }
        ops.push(OpSpec {
            comm: s.comm.clone(),
            collective: replayable(&call.kind)
                .map_or_else(|| call.kind.clone(), |k| k.name().to_string()),
            count: call.count,
            dtype: Some(call.dtype.clone()),
            op: call.op.clone(),
            root: call.root,
            algo: algo.filter(|a| a.parse::<AlgoSpec>().is_ok()),
            in_place: false,
        });
    }
    // Each dumped rank's own order: its calls by when it made them.
    let mut rank_orders = BTreeMap::new();
    let dumped: std::collections::BTreeSet<u32> =
        dumps.iter().map(|d| world_rank(d, d.header.rank)).collect();
    for &rank in &dumped {
        let mut mine: Vec<(u64, String, u64, usize)> = Vec::new();
        for d in dumps
            .iter()
            .filter(|d| world_rank(d, d.header.rank) == rank)
        {
            for r in &d.ops {
                if let Some(&i) = r.seq.and_then(|s| index.get(&(d.header.comm.clone(), s))) {
                    mine.push((r.queued_us, d.header.comm.clone(), r.turn, i));
                }
            }
        }
        mine.sort();
        let stuck = mine.last().is_some_and(|m| {
            order[m.3]
                .calls
                .iter()
                .any(|&(r, rec)| r == rank && rec.state != OpState::Done)
        });
        let mut list: Vec<usize> = mine.into_iter().map(|m| m.3).collect();
        if stuck {
            // It stopped in its last op, so it never reached its later
            // ones: the ops of its communicators that others called come
            // after, in scenario order (a cycle needs them).
            let later: Vec<usize> = (0..order.len())
                .filter(|i| !list.contains(i))
                .filter(|&i| comms.get(&order[i].comm).is_some_and(|m| m.contains(&rank)))
                .collect();
            list.extend(later);
        }
        rank_orders.insert(rank.to_string(), list);
    }
    // A world rank with no dump crashed: before the first op of its
    // communicators that a rank did not finish.
    for rank in (0..n).filter(|r| !dumped.contains(r)) {
        let stuck = order.iter().enumerate().find(|(_, s)| {
            comms.get(&s.comm).is_some_and(|m| m.contains(&rank))
                && s.calls.iter().any(|(_, r)| r.state != OpState::Done)
        });
        match stuck {
            Some((i, s)) => {
                notes.push(format!(
                    "rank {rank} left no dump: it died; replayed as a crash before op #{i} ('{}' seq {}), where the others stopped",
                    s.comm, s.seq
                ));
                faults.faults.push(Fault::Crash {
                    rank,
                    at_ns: None,
                    at_op: Some(i),
                });
            }
            None => notes.push(format!(
                "rank {rank} left no dump, but every recorded op finished: nothing to replay for it"
            )),
        }
    }
    comms.remove(&world_name);
    let mut communicators = comms;
    communicators.insert("world".into(), (0..n).collect());
    for o in &mut ops {
        if o.comm == world_name {
            o.comm = "world".into();
        }
    }
    Ok(Replay {
        scenario: ScenarioFile {
            preset: None,
            servers: None,
            communicators,
            ops,
            rank_orders,
        },
        faults,
        ranks: n,
        notes,
    })
}

/// The first seq of communicator `comm` that every dump of it still
/// holds (0 unless a ring dropped its oldest records).
fn comm_window(dumps: &[Dump], comm: &str) -> u64 {
    dumps
        .iter()
        .filter(|d| d.header.comm == comm)
        .filter_map(|d| d.ops.iter().filter_map(|r| r.seq).min())
        .max()
        .unwrap_or(0)
}

/// The call most ranks made (ties: the lowest rank's) and its algorithm.
fn majority(calls: &[(u32, &OpRecord)]) -> (Call, Option<String>) {
    let mut votes: BTreeMap<Call, (usize, u32, Option<String>)> = BTreeMap::new();
    for &(rank, r) in calls {
        let v = votes
            .entry(Call::of(r))
            .or_insert((0, rank, r.algorithm.clone()));
        v.0 += 1;
        v.1 = v.1.min(rank);
    }
    let (call, (_, _, algo)) = votes
        .into_iter()
        .max_by_key(|(_, (k, first, _))| (*k, std::cmp::Reverse(*first)))
        .expect("a slot has a call");
    (call, algo)
}

/// `rank`'s call `mine` of op `op` as a `wrong_args` fault against the
/// others' `call`; `None` when the collective itself differs.
fn wrong_args(rank: u32, op: usize, call: &Call, mine: &Call) -> Option<Fault> {
    if mine.kind != call.kind {
        return None;
    }
    let differs = |a: &Option<String>, b: &Option<String>| (a != b).then(|| b.clone()).flatten();
    Some(Fault::WrongArgs {
        rank,
        op,
        count: (mine.count != call.count).then_some(mine.count),
        dtype: (mine.dtype != call.dtype)
            .then(|| mine.dtype.parse::<DataType>().ok())
            .flatten(),
        reduce_op: differs(&call.op, &mine.op).and_then(|o| o.parse::<ReduceOp>().ok()),
        root: (mine.root != call.root).then_some(mine.root).flatten(),
    })
    .filter(|f| {
        !matches!(
            f,
            Fault::WrongArgs {
                count: None,
                dtype: None,
                reduce_op: None,
                root: None,
                ..
            }
        )
    })
}

fn describe(c: &Call) -> String {
    let mut s = format!("{} count {} {}", c.kind, c.count, c.dtype);
    if let Some(o) = &c.op {
        let _ = write!(s, " {o}");
    }
    if let Some(r) = c.root {
        let _ = write!(s, " root {r}");
    }
    s
}

/// Runs `hccl sim --replay DIR` with the rest of `a` (fabric, seed, output
/// form): writes `DIR/replay/scenario.json` and `faults.json` and runs
/// them as `hccl sim --scenario ... --faults ...` would, printing first
/// what the dumps showed.
///
/// # Errors
/// Unreadable dumps or a scenario the simulator refuses.
pub(crate) fn run(dir: &Path, a: &SimArgs) -> anyhow::Result<Outcome> {
    let dumps =
        read_dumps(dir).with_context(|| format!("reading the dumps in {}", dir.display()))?;
    if dumps.is_empty() {
        anyhow::bail!(
            "{}: no flight-recorder dump (hccl_flight_*.jsonl); set HCCL_FLIGHT_RECORDER_DIR for the run",
            dir.display()
        );
    }
    let mut r = from_dumps(&dumps)?;
    if a.rank_table.is_none() && a.fabric.is_none() {
        // The run's ranks on the given preset (default: a full mesh, as one
        // host's TCP ranks are), its servers filled.
        let name = a.preset.clone().unwrap_or_else(|| "full-mesh".into());
        let per = Preset::parse(&name)
            .ok()
            .and_then(|p| build_preset(p, 1).ok())
            .map_or(1, |f| f.world_size().max(1));
        r.scenario.preset = Some(name);
        r.scenario.servers = Some(a.servers.unwrap_or(r.ranks.div_ceil(per)));
    }
    let out = dir.join("replay");
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let (sc, fp) = (out.join("scenario.json"), out.join("faults.json"));
    std::fs::write(&sc, serde_json::to_string_pretty(&r.scenario)? + "\n")
        .with_context(|| format!("cannot write {}", sc.display()))?;
    std::fs::write(&fp, r.faults.to_json() + "\n")
        .with_context(|| format!("cannot write {}", fp.display()))?;
    let timeout = dumps
        .iter()
        .filter_map(|d| d.header.exec_timeout_s)
        .reduce(f64::min);
    let args = SimArgs {
        replay: None,
        scenario: Some(sc.clone()),
        faults: Some(fp),
        exec_timeout: a.exec_timeout.or(timeout),
        ..a.clone()
    };
    let mut res = execute(&args)?;
    if a.json {
        let mut v: serde_json::Value = serde_json::from_str(&res.output)?;
        v["replay"] = serde_json::json!({
            "dumps": dumps.len(),
            "scenario": sc.display().to_string(),
            "notes": r.notes,
        });
        res.output = serde_json::to_string_pretty(&v)?;
    } else {
        let mut head = format!(
            "replay of {} dump(s) in {}: {} ranks, {} op(s) over {} communicator(s); scenario {}\n",
            dumps.len(),
            dir.display(),
            r.ranks,
            r.scenario.ops.len(),
            r.scenario.communicators.len(),
            sc.display()
        );
        for n in &r.notes {
            let _ = writeln!(head, "note: {n}");
        }
        res.output = head + &res.output;
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    use hccl::flight::{
        file_name, DumpReason, ErrorKind, Header, OpError, WaitKind, WaitOn, FORMAT, VERSION,
    };

    use super::*;

    /// An AllReduce record of 1024 fp32 at `seq`, called at `t` µs.
    fn op(seq: u64, turn: u64, t: u64, state: OpState) -> OpRecord {
        OpRecord {
            seq: Some(seq),
            turn,
            kind: "AllReduce".into(),
            count: 1024,
            dtype: "fp32".into(),
            op: Some("sum".into()),
            root: None,
            peers: Vec::new(),
            bytes: 4096,
            algorithm: Some("ring".into()),
            state,
            queued_us: t,
            started_us: Some(t + 1),
            ended_us: (state != OpState::Started).then_some(t + 5),
            waits: Vec::new(),
            error: None,
        }
    }

    fn failed(mut r: OpRecord, waits: &[(u32, WaitKind)]) -> OpRecord {
        r.state = OpState::Failed;
        r.waits = waits
            .iter()
            .map(|&(peer, why)| WaitOn { peer, why })
            .collect();
        r.error = Some(OpError {
            kind: ErrorKind::Timeout,
            text: "timed out".into(),
        });
        r
    }

    fn dump(
        comm: &str,
        rank: u32,
        size: u32,
        global: Option<Vec<u32>>,
        ops: Vec<OpRecord>,
    ) -> Dump {
        Dump {
            header: Header {
                format: FORMAT.into(),
                version: VERSION,
                comm: comm.into(),
                comm_id: "0123456789abcdef".into(),
                rank,
                size,
                global_ranks: global,
                backend: "tcp".into(),
                host: "node-a".into(),
                pid: 100 + rank,
                reason: DumpReason::Timeout,
                detail: None,
                dumped_us: 9_000_000,
                created_us: 1_000,
                entries: 2048,
                recorded: ops.len() as u64,
                exec_timeout_s: Some(2.0),
            },
            ops,
            path: None,
        }
    }

    /// Writes `dumps` as a run would and replays them on the default fabric.
    fn replay(name: &str, dumps: &[Dump]) -> Outcome {
        let dir = std::env::temp_dir().join(format!("hccl-replay-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for d in dumps {
            let f = dir.join(file_name(&d.header.comm, d.header.rank, d.header.pid));
            std::fs::write(f, d.to_jsonl()).unwrap();
        }
        let a = SimArgs {
            replay: Some(dir.clone()),
            seed: 4,
            ..SimArgs::default()
        };
        let out = execute(&a).unwrap();
        // The printed replay line runs the files written next to the dumps
        // and prints the same report.
        let again = execute(&SimArgs {
            replay: None,
            scenario: Some(dir.join("replay/scenario.json")),
            faults: Some(dir.join("replay/faults.json")),
            exec_timeout: Some(2.0),
            seed: 4,
            ..SimArgs::default()
        })
        .unwrap();
        assert!(
            out.output.ends_with(&again.output),
            "{}\n---\n{}",
            out.output,
            again.output
        );
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    /// Four world ranks; each rank's ops from `ops(rank)` (`None`: no dump).
    fn world(ops: impl Fn(u32) -> Option<Vec<OpRecord>>) -> Vec<Dump> {
        (0..4)
            .filter_map(|r| ops(r).map(|o| dump("world", r, 4, None, o)))
            .collect()
    }

    #[test]
    fn a_rank_without_a_dump_is_replayed_as_a_crash() {
        let dumps = world(|r| {
            (r != 2).then(|| {
                let mut v: Vec<OpRecord> =
                    (0..3).map(|s| op(s, s, 10 * s, OpState::Done)).collect();
                v.push(failed(
                    op(3, 3, 30, OpState::Started),
                    &[(2, WaitKind::Lost)],
                ));
                v
            })
        });
        let out = replay("crash", &dumps);
        assert_eq!(out.code, super::super::sim::EXIT_HANG, "{}", out.output);
        assert!(out.output.contains("rank 2 left no dump"), "{}", out.output);
        assert!(out.output.contains("rank 2 crashed"), "{}", out.output);
        assert!(out.output.contains("in op #3"), "{}", out.output);
    }

    #[test]
    fn a_rank_whose_record_ends_early_never_called_the_op() {
        let dumps = world(|r| {
            let mut v: Vec<OpRecord> = (0..3).map(|s| op(s, s, 10 * s, OpState::Done)).collect();
            if r != 1 {
                v.push(failed(
                    op(3, 3, 30, OpState::Started),
                    &[(1, WaitKind::NeverCalled)],
                ));
            }
            Some(v)
        });
        let out = replay("skip", &dumps);
        assert_eq!(out.code, super::super::sim::EXIT_HANG, "{}", out.output);
        assert!(
            out.output.contains("rank 1 never called op #3"),
            "{}",
            out.output
        );
    }

    #[test]
    fn a_rank_with_another_count_is_a_mismatch() {
        let dumps = world(|r| {
            let mut v = vec![op(0, 0, 0, OpState::Done)];
            let mut second = failed(op(1, 1, 10, OpState::Started), &[]);
            if r == 3 {
                second.count = 512;
                second.bytes = 2048;
            }
            v.push(second);
            Some(v)
        });
        let out = replay("mismatch", &dumps);
        assert_eq!(out.code, super::super::sim::EXIT_MISMATCH, "{}", out.output);
        assert!(out.output.contains("rank 3 called op #1"), "{}", out.output);
        assert!(out.output.contains("EI0005"), "{}", out.output);
        assert!(out.output.contains("count differs"), "{}", out.output);
    }

    #[test]
    fn communicators_called_in_different_orders_are_a_cycle() {
        // Split communicators 'a' and 'b' over world ranks 0 and 1; rank 0
        // calls a then b, rank 1 b then a.
        let mut dumps = Vec::new();
        for r in 0..2u32 {
            let (ta, tb) = if r == 0 { (10, 20) } else { (20, 10) };
            let first = if r == 0 { "a" } else { "b" };
            for (c, t) in [("a", ta), ("b", tb)] {
                let st = if c == first {
                    OpState::Started
                } else {
                    OpState::Queued
                };
                dumps.push(dump(c, r, 2, Some(vec![0, 1]), vec![op(0, 0, t, st)]));
            }
            dumps.push(dump("world", r, 2, None, vec![op(0, 0, 0, OpState::Done)]));
        }
        let out = replay("cycle", &dumps);
        assert_eq!(out.code, super::super::sim::EXIT_HANG, "{}", out.output);
        assert!(
            out.output.contains("wait cycle across communicators"),
            "{}",
            out.output
        );
    }

    #[test]
    fn dumps_without_a_world_are_refused() {
        let d = dump(
            "a",
            0,
            2,
            Some(vec![0, 1]),
            vec![op(0, 0, 0, OpState::Done)],
        );
        let e = from_dumps(&[d]).unwrap_err().to_string();
        assert!(e.contains("no dump of a world communicator"), "{e}");
    }
}

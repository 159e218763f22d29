//! `hccl sim --replay DIR` and `hccl doctor DIR --replay` (issue 16): the
//! flight recorder's dumps of a run (`docs/flight_recorder.md`) turned
//! into a scenario file and a fault plan ([`hccl::flight::replay`]),
//! written to `DIR/replay/` and run on the simulator as `hccl sim
//! --scenario F --faults P` runs them, so its hang report (and the replay
//! line that reproduces it byte for byte from its seed) names the real
//! run's cause.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use hccl::flight::read_dumps;
use hccl::flight::replay::from_dumps;
use hccl_topology::{build_preset, Preset};

use super::sim::{execute, Outcome, SimArgs};

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
    if !r.links.is_empty() {
        // The links go down when their op starts: a first run tells when.
        let fabric = match (&a.rank_table, &a.fabric) {
            (Some(t), _) => {
                hccl_topology::Fabric::for_rank_table(&hccl_topology::RankTable::from_file(t)?)?
            }
            (None, Some(f)) => hccl_topology::Fabric::from_fabric_file(f)?,
            (None, None) => {
                let name = r
                    .scenario
                    .preset
                    .clone()
                    .unwrap_or_else(|| "full-mesh".into());
                build_preset(Preset::parse(&name)?, r.scenario.servers.unwrap_or(1))?
            }
        };
        r.time_links(&fabric)?;
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
        file_name, Dump, DumpReason, ErrorKind, Header, OpError, OpRecord, OpState, P2pDir,
        P2pRecord, WaitKind, WaitOn, FORMAT, VERSION,
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
            counts: Vec::new(),
            matrix: Vec::new(),
            items: Vec::new(),
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

    /// Replays `dumps` (see [`replay`]) and checks that the replay hangs
    /// and that its report says each of `says`.
    fn replay_hangs(name: &str, dumps: &[Dump], says: &[&str]) {
        let out = replay(name, dumps);
        assert_eq!(out.code, super::super::sim::EXIT_HANG, "{}", out.output);
        for text in says {
            assert!(out.output.contains(text), "{text:?} not in {}", out.output);
        }
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
        replay_hangs(
            "crash",
            &dumps,
            &["rank 2 left no dump", "rank 2 crashed", "in op #3"],
        );
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
        replay_hangs("skip", &dumps, &["rank 1 never called op #3"]);
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
        replay_hangs("cycle", &dumps, &["wait cycle across communicators"]);
    }

    #[test]
    fn two_ranks_waiting_for_each_others_data_replay_as_a_dead_link() {
        // Ranks 1 and 2 of 4 each wait for the other's data in op #2: the
        // link between them went silent.
        let dumps = world(|r| {
            let mut v: Vec<OpRecord> = (0..2).map(|s| op(s, s, 10 * s, OpState::Done)).collect();
            let waits: Vec<(u32, WaitKind)> = match r {
                1 => vec![(2, WaitKind::Data)],
                2 => vec![(1, WaitKind::Data)],
                _ => Vec::new(),
            };
            v.push(failed(op(2, 2, 20, OpState::Started), &waits));
            Some(v)
        });
        let r = from_dumps(&dumps).unwrap();
        assert_eq!(r.links.len(), 1, "{:?}", r.notes);
        let out = replay("link", &dumps);
        assert_eq!(out.code, super::super::sim::EXIT_HANG, "{}", out.output);
        assert!(
            out.output.contains("ranks 1 and 2 each waited"),
            "{}",
            out.output
        );
        assert!(out.output.contains("dead link"), "{}", out.output);
        // Ops #0 and #1 ran before the link went down; op #2 hangs.
        assert!(
            out.output
                .contains("#2   all_reduce ring 4 KiB            world         2       0/4 done"),
            "{}",
            out.output
        );
        assert!(
            out.output
                .contains("#1   all_reduce ring 4 KiB            world         1      "),
            "{}",
            out.output
        );
        assert!(
            !out.output.contains("world         1       0/4"),
            "{}",
            out.output
        );
    }

    /// A point-to-point record at `turn`, called at `t` µs: `items` as
    /// (send, peer, count) of fp32.
    fn p2p(turn: u64, t: u64, items: &[(bool, u32, u64)], state: OpState) -> OpRecord {
        let mut r = op(0, turn, t, state);
        r.seq = None;
        r.op = None;
        r.algorithm = None;
        r.kind = match items {
            [(true, ..)] => "Send",
            [(false, ..)] => "Recv",
            _ => "BatchSendRecv",
        }
        .into();
        r.count = items.iter().map(|i| i.2).sum();
        r.bytes = 4 * r.count;
        r.peers = items.iter().map(|i| i.1).collect();
        r.items = items
            .iter()
            .map(|&(send, peer, count)| P2pRecord {
                dir: if send { P2pDir::Send } else { P2pDir::Recv },
                peer,
                count,
            })
            .collect();
        r
    }

    #[test]
    fn a_receive_whose_send_never_came_waits_for_the_sender() {
        // Rank 0 waits in a receive from rank 1, which finished its
        // all_reduce and never called send.
        let dumps = vec![
            dump(
                "world",
                0,
                2,
                None,
                vec![
                    op(0, 0, 0, OpState::Done),
                    failed(
                        p2p(1, 10, &[(false, 1, 8)], OpState::Started),
                        &[(1, WaitKind::NeverCalled)],
                    ),
                ],
            ),
            dump("world", 1, 2, None, vec![op(0, 0, 0, OpState::Done)]),
        ];
        let r = from_dumps(&dumps).unwrap();
        let last = &r.scenario.ops[1];
        assert_eq!(last.collective, "send_recv");
        let pairs = last.pairs.clone().unwrap();
        assert_eq!((pairs[0].src, pairs[0].dst, pairs[0].count), (1, 0, 8));
        assert_eq!(r.scenario.rank_orders["1"], [0]);
        replay_hangs("p2p-never", &dumps, &["rank 1 never called op #1"]);
    }

    #[test]
    fn ranks_that_both_send_first_replay_as_one_batch() {
        // Both ranks send, then receive (their sends were queued at once,
        // as TCP's are); then rank 1 never calls the all_reduce rank 0
        // waits in. Replayed with rendezvous messages one call at a time,
        // the exchange itself would be a wait cycle.
        let dumps = vec![
            dump(
                "world",
                0,
                2,
                None,
                vec![
                    p2p(0, 0, &[(true, 1, 4)], OpState::Done),
                    p2p(1, 1, &[(false, 1, 6)], OpState::Done),
                    failed(op(0, 2, 5, OpState::Started), &[(1, WaitKind::NeverCalled)]),
                ],
            ),
            dump(
                "world",
                1,
                2,
                None,
                vec![
                    p2p(0, 0, &[(true, 0, 6)], OpState::Done),
                    p2p(1, 1, &[(false, 0, 4)], OpState::Done),
                ],
            ),
        ];
        let r = from_dumps(&dumps).unwrap();
        assert_eq!(r.scenario.ops.len(), 2, "{:?}", r.scenario.ops);
        let batch = &r.scenario.ops[0];
        assert_eq!(batch.collective, "batch_send_recv");
        let pairs: Vec<(u32, u32, u64)> = (batch.pairs.iter().flatten())
            .map(|p| (p.src, p.dst, p.count))
            .collect();
        assert_eq!(pairs, [(0, 1, 4), (1, 0, 6)]);
        replay_hangs("p2p-batch", &dumps, &["rank 1 never called op #1"]);
    }

    #[test]
    fn v_collectives_replay_with_their_counts() {
        // Every rank did an AllGatherV; rank 2 never called the AllToAllV.
        let matrix: Vec<Vec<u64>> = (0..4).map(|i| (0..4).map(|j| i + j).collect()).collect();
        let dumps = world(|r| {
            let mut agv = op(0, 0, 0, OpState::Done);
            agv.kind = "AllGatherV".into();
            agv.op = None;
            agv.count = 0;
            agv.counts = vec![1, 2, 3, 4];
            let mut v = vec![agv];
            if r != 2 {
                let mut a2a = op(1, 1, 10, OpState::Started);
                a2a.kind = "AllToAllV".into();
                a2a.op = None;
                a2a.count = 0;
                a2a.matrix = matrix.clone();
                a2a.algorithm = Some("pairwise".into());
                v.push(failed(a2a, &[(2, WaitKind::NeverCalled)]));
            }
            Some(v)
        });
        let r = from_dumps(&dumps).unwrap();
        let ops = &r.scenario.ops;
        assert_eq!(ops.len(), 2, "{:?}", r.notes);
        assert_eq!(
            (ops[0].collective.as_str(), ops[0].counts.clone()),
            ("all_gather_v", Some(vec![1, 2, 3, 4]))
        );
        assert_eq!(
            (ops[1].collective.as_str(), ops[1].matrix.clone()),
            ("alltoallv", Some(matrix))
        );
        replay_hangs("v", &dumps, &["rank 2 never called op #1"]);
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

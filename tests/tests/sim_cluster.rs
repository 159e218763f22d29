//! The simulator backend as a simulated cluster (issue 16): a program's
//! ops on a preset's fabric under a fault plan and a seed
//! ([`hccl::SimSettings`], the `HCCL_SIM_*` variables), a crash at an op
//! failing every rank with the hang report, the same seed giving the same
//! report byte for byte, and no faults giving TCP's results.

use std::path::{Path, PathBuf};

use hccl::comm::{BackendKind, ReduceOp};
use hccl::{Comm, CommError, SimSettings};
use hccl_sim::hang::{HangReport, RootCause};

/// What one rank's program saw: the output of each op until the first
/// error, and that error.
type Outcome = (Vec<Vec<f32>>, Option<CommError>);

/// Each rank calls AllReduce, AllGather and Broadcast in turn, `ops`
/// calls in all, on inputs of its rank and the op's index; stops at the
/// first error.
fn program(c: Comm, ops: usize) -> Outcome {
    let (r, n) = (c.rank() as usize, c.size() as usize);
    let mut outs = Vec::new();
    for i in 0..ops {
        let send: Vec<f32> = (0..24)
            .map(|k| ((r * 31 + k * 7 + i) % 97) as f32 * 0.25)
            .collect();
        let res = match i % 3 {
            0 => {
                let mut recv = vec![0.0f32; send.len()];
                c.all_reduce(&send, &mut recv, ReduceOp::Sum).map(|()| recv)
            }
            1 => {
                let mut recv = vec![0.0f32; send.len() * n];
                c.all_gather(&send, &mut recv).map(|()| recv)
            }
            _ => {
                let mut buf = send.clone();
                c.broadcast(&mut buf, (i % n) as u32).map(|()| buf)
            }
        };
        match res {
            Ok(v) => outs.push(v),
            Err(e) => return (outs, Some(e)),
        }
    }
    (outs, None)
}

fn run(comms: Vec<Comm>, ops: usize) -> Vec<Outcome> {
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| std::thread::spawn(move || program(c, ops)))
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hccl-simcluster-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn plan(dir: &Path, json: &str) -> PathBuf {
    let p = dir.join("plan.json");
    std::fs::write(&p, json).unwrap();
    p
}

/// A simulated 2 × 8 Atlas 800T A2 with `faults`, seed `seed`, reports to `dir`.
fn atlas(dir: &Path, faults: &str, seed: u64) -> SimSettings {
    SimSettings {
        preset: Some("atlas800t-a2".into()),
        servers: Some("2".into()),
        faults: Some(plan(dir, faults)),
        seed: Some(seed.to_string()),
        report_dir: Some(dir.to_path_buf()),
        ..SimSettings::default()
    }
}

/// Every rank's error must be the same hang report; returns it.
fn the_report(out: &[Outcome], at: usize) -> HangReport {
    let mut first: Option<HangReport> = None;
    for (r, (outs, e)) in out.iter().enumerate() {
        assert_eq!(outs.len(), at, "rank {r} finished {} ops", outs.len());
        let h = match e {
            Some(CommError::Hang { report: h, .. }) => (**h).clone(),
            other => panic!("rank {r}: {other:?}, not a hang report"),
        };
        if let Some(f) = &first {
            assert_eq!(f, &h, "rank {r}'s report differs from rank 0's");
        }
        first = Some(h);
    }
    first.unwrap()
}

const CRASH_5_AT_17: &str = r#"{"faults": [{"kind": "crash", "rank": 5, "at_op": 17}]}"#;

#[test]
fn a_crash_at_op_17_fails_every_rank_with_the_report_which_is_written_to_the_dump_dir() {
    let dir = scratch("crash");
    let comms = Comm::init_all_sim(16, &atlas(&dir, CRASH_5_AT_17, 3)).unwrap();
    let out = run(comms, 20);
    let h = the_report(&out, 17);
    assert!(
        h.root_causes.iter().any(|c| matches!(
            c,
            // At the program's time: 17 ops ran before.
            RootCause::CrashedRank { rank: 5, op: Some(17), time_ns, .. } if *time_ns > 0
        )),
        "{}",
        h.to_text()
    );
    let text = h.to_text();
    assert!(text.contains("rank 5 crashed"), "{text}");
    assert!(text.contains("seq 17"), "{text}");
    assert!(text.contains("HCCL_SIM_SEED=3"), "{text}");
    let stem = dir.join(format!("hccl_sim_hang_{}", std::process::id()));
    let written = std::fs::read_to_string(stem.with_extension("txt")).unwrap();
    assert_eq!(written, text + "\n");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stem.with_extension("json")).unwrap())
            .unwrap();
    assert_eq!(json["seed"], 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_same_seed_gives_a_byte_identical_report() {
    // Jitter draws from the seed: the times in the report depend on it.
    let faults = r#"{"faults": [{"kind": "jitter", "max_ns": 5000},
                                {"kind": "crash", "rank": 5, "at_op": 7}]}"#;
    let report = |seed: u64| {
        let dir = scratch(&format!("seed{seed}"));
        let comms = Comm::init_all_sim(16, &atlas(&dir, faults, seed)).unwrap();
        let h = the_report(&run(comms, 9), 7);
        let _ = std::fs::remove_dir_all(&dir);
        (h.to_text(), h.to_json(), h.time_ns)
    };
    let a = report(11);
    assert_eq!(a, report(11));
    let b = report(12);
    assert_ne!(a.2, b.2, "another seed, other jitter, other times");
}

#[test]
fn a_skipped_op_fails_every_rank_naming_the_rank_that_never_called_it() {
    let dir = scratch("skip");
    let faults = r#"{"faults": [{"kind": "skip", "rank": 2, "op": 4}]}"#;
    let comms = Comm::init_all_sim(16, &atlas(&dir, faults, 0)).unwrap();
    let out = run(comms, 6);
    // Rank 2 skips op 4 (it returns at once) and fails in op 5.
    for (r, (outs, e)) in out.iter().enumerate() {
        let done = if r == 2 { 5 } else { 4 };
        assert_eq!(outs.len(), done, "rank {r}");
        let Some(CommError::Hang { report: h, .. }) = e else {
            panic!("rank {r}: {e:?}")
        };
        assert!(
            h.root_causes.iter().any(|c| matches!(
                c,
                RootCause::NeverCalled {
                    rank: 2,
                    op: 4,
                    seq: 4,
                    ..
                }
            )),
            "rank {r}: {}",
            h.to_text()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_faults_a_simulated_cluster_gives_tcps_results() {
    let dir = scratch("clean");
    let sim = SimSettings {
        preset: Some("leaf-spine".into()),
        servers: Some("4".into()),
        ..SimSettings::default()
    };
    let on_sim = run(Comm::init_all_sim(4, &sim).unwrap(), 9);
    let on_tcp = run(Comm::init_all_on(BackendKind::Tcp, 4).unwrap(), 9);
    for (r, ((s, se), (t, te))) in on_sim.iter().zip(&on_tcp).enumerate() {
        assert!(se.is_none() && te.is_none(), "rank {r}: {se:?} {te:?}");
        assert_eq!(s.len(), 9);
        let bits = |v: &Vec<Vec<f32>>| -> Vec<Vec<u32>> {
            v.iter()
                .map(|o| o.iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        assert_eq!(bits(s), bits(t), "rank {r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cluster_of_another_size_is_refused_naming_the_variable() {
    let e = Comm::init_all_sim(
        8,
        &SimSettings {
            preset: Some("atlas800t-a2".into()),
            servers: Some("2".into()),
            ..SimSettings::default()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("HCCL_SIM_SERVERS") && e.contains("16 ranks"),
        "{e}"
    );
}

#[test]
fn another_count_on_one_rank_fails_every_rank_with_ei0005() {
    let dir = scratch("wrong");
    let faults = r#"{"faults": [{"kind": "wrong_args", "rank": 3, "op": 2, "count": 12}]}"#;
    let comms = Comm::init_all_sim(16, &atlas(&dir, faults, 0)).unwrap();
    let h = the_report(&run(comms, 4), 2);
    assert!(
        h.root_causes.iter().any(|c| matches!(
            c,
            RootCause::MismatchedArguments { op: 2, seq: 2, field, .. } if field == "count"
        )),
        "{}",
        h.to_text()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dead_link_on_the_rank_tables_cluster_fails_every_rank_naming_it() {
    let dir = scratch("link");
    let table = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/rank_table_2x8.json"
    ));
    // From 1 ns on the route between the servers' first NPUs is down:
    // the first op whose messages cross it hangs.
    let faults = r#"{"faults": [{"kind": "link_down", "link": {"ranks": [0, 8]}, "at_ns": 1}]}"#;
    let sim = SimSettings {
        rank_table: Some(table),
        faults: Some(plan(&dir, faults)),
        ..SimSettings::default()
    };
    let comms = Comm::init_all_sim(16, &sim).unwrap();
    let out = run(comms, 3);
    let Some(CommError::Hang { report: h, .. }) = &out[0].1 else {
        panic!("rank 0: {:?}", out[0].1)
    };
    assert!(
        h.root_causes
            .iter()
            .any(|c| matches!(c, RootCause::DeadLink { .. })),
        "{}",
        h.to_text()
    );
    for (r, (_, e)) in out.iter().enumerate() {
        assert!(matches!(e, Some(CommError::Hang { .. })), "rank {r}: {e:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

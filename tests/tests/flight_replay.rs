//! From a real failure to its replay (issue 16): two `flight_rank`
//! processes over loopback TCP with one fault on rank 1 (killed, skips an
//! op, calls two communicators in the other order, another count, never
//! sends a message after point-to-point and V ops), their
//! flight-recorder dumps, and the scenario `hccl::flight::replay` makes of
//! them, run on the simulator: its hang report names the same cause as
//! the run (`hccl doctor`'s, tests/flight_doctor.rs). Each job takes about
//! `HCCL_EXEC_TIMEOUT` = 1 s.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hccl::flight;
use hccl_conformance::procs::{self, finish};
use hccl_sim::faults::run_with_faults;
use hccl_sim::hang::{HangReport, RootCause};
use hccl_topology::{build_preset, Preset};

const BIN: &str = env!("CARGO_BIN_EXE_flight_rank");

/// Ports apart from the other process tests'.
fn free_port() -> u16 {
    procs::free_port(19_000..19_999)
}

fn spawn(dir: &Path, port: u16, rank: u32, fault: &str) -> Child {
    procs::spawn_flight_rank(BIN, dir, port, rank, fault, false)
}

/// Runs the job with `fault` (with `signal`, hung rank 1 is dumped by
/// SIGUSR1, then killed) and replays its dumps on a full mesh of 2.
fn replay(fault: &str, signal: bool) -> HangReport {
    replay_with_ops(fault, signal).0
}

/// [`replay`], and the replay's ops (the collective of each).
fn replay_with_ops(fault: &str, signal: bool) -> (HangReport, Vec<String>) {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("hccl-replay-{fault}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let r0 = spawn(&dir, port, 0, fault);
    let r1 = spawn(&dir, port, 1, fault);
    let _ = finish(r0, Duration::from_secs(15));
    if signal {
        let st = Command::new("kill")
            .args(["-USR1", &r1.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        // Both of its communicators' dumps: the replay needs its order in
        // each (the world's alone is written first).
        let tail = format!("_rank1_{}.jsonl", r1.id());
        let written = || {
            std::fs::read_dir(&dir).map_or(0, |d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(&tail))
                })
                .count()
            })
        };
        let end = Instant::now() + Duration::from_secs(5);
        while written() < 2 {
            assert!(Instant::now() < end, "rank 1 wrote no dumps on SIGUSR1");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = finish(r1, Duration::from_secs(if signal { 0 } else { 15 }));
    let dumps = flight::read_dumps(&dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let r = flight::replay::from_dumps(&dumps).unwrap();
    assert_eq!(r.ranks, 2);
    let fabric = build_preset(Preset::FullMesh, 2).unwrap();
    let sc = r
        .scenario
        .build(&fabric, None)
        .unwrap()
        .exec_timeout_ns(Some(1_000_000_000));
    let run = run_with_faults(&sc, &r.faults).unwrap();
    let h = run
        .hang(&sc, "replay")
        .unwrap_or_else(|| panic!("{fault}: the replay finished: {:?}", r.notes));
    (
        h,
        r.scenario
            .ops
            .iter()
            .map(|o| o.collective.clone())
            .collect(),
    )
}

#[test]
fn a_killed_rank_replays_as_a_crash() {
    let h = replay("kill", false);
    assert!(
        h.root_causes
            .iter()
            .any(|c| matches!(c, RootCause::CrashedRank { rank: 1, .. })),
        "{}",
        h.to_text()
    );
}

#[test]
fn a_skipped_op_replays_as_never_called() {
    let h = replay("skip", true);
    assert!(
        h.root_causes.iter().any(|c| matches!(
            c,
            RootCause::NeverCalled {
                rank: 1,
                seq: 4,
                ..
            }
        )),
        "{}",
        h.to_text()
    );
}

#[test]
fn swapped_communicators_replay_as_a_cycle() {
    let h = replay("swap", false);
    assert!(
        h.root_causes
            .iter()
            .any(|c| matches!(c, RootCause::CommunicatorCycle { ranks, .. } if ranks.len() == 2)),
        "{}",
        h.to_text()
    );
}

#[test]
fn another_count_replays_as_a_mismatch() {
    let h = replay("count", false);
    assert!(
        h.root_causes.iter().any(|c| matches!(
            c,
            RootCause::MismatchedArguments { seq: 4, field, .. } if field == "count"
        )),
        "{}",
        h.to_text()
    );
}

#[test]
fn a_send_never_made_after_p2p_and_v_ops_replays_as_never_called() {
    // Both ranks send, then receive (a wait cycle if the replay made
    // sends rendezvous one call at a time), then an AllToAllV and an
    // AllGatherV; rank 1 never sends the message rank 0 waits for. Left
    // out of the replay, those ops would let it finish.
    let (h, ops) = replay_with_ops("p2p", true);
    let text = h.to_text();
    assert!(
        h.root_causes
            .iter()
            .any(|c| matches!(c, RootCause::NeverCalled { rank: 1, .. })),
        "{text}"
    );
    assert!(text.contains("waiting in op #"), "{text}");
    assert!(text.contains("'send_recv "), "stuck in the receive: {text}");
    // The exchange as one batch, then the V ops (AllToAllV's exchange of
    // counts first, an AllGather), then the lone receive.
    let tail: Vec<&str> = ops.iter().rev().take(5).rev().map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "batch_send_recv",
            "all_gather",
            "alltoallv",
            "all_gather_v",
            "send_recv"
        ],
        "{ops:?}"
    );
}

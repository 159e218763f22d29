//! From a real failure to its root cause: two `flight_rank` processes over
//! loopback TCP, one fault injected on rank 1 (killed, skips an op, calls
//! two communicators in the other order, another count), their flight
//! recorder dumps, and the diagnosis `hccl doctor` prints (insta
//! snapshots; the host name is redacted, and the text has no pids, ports
//! or times). Each job takes about `HCCL_EXEC_TIMEOUT` = 1 s.
//!
//! Each test then runs the same program on the simulator backend with the
//! fault plan that stands for the fault (`HCCL_SIM_FAULTS`: a crash for
//! the kill, a skip, a `wrong_args` count; two communicators in swapped
//! order need no plan, the program swaps them) and checks that `hccl
//! doctor` names the same root causes from its dumps (issue 16).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hccl::flight::doctor::Cause;
use hccl::flight::{self, Diagnosis, DumpReason, OpState};
use hccl_conformance::procs::{self, finish};

const BIN: &str = env!("CARGO_BIN_EXE_flight_rank");

/// Ports apart from tests/tcp.rs's and tests/bootstrap_procs.rs's.
fn free_port() -> u16 {
    procs::free_port(6_000..11_900)
}

fn spawn(dir: &Path, port: u16, rank: u32, fault: &str) -> Child {
    procs::spawn_flight_rank(BIN, dir, port, rank, fault, true)
}

/// The op index (`at_op`, `op`) of world op #4 on a fault plan: each rank's
/// calls on the tree, the split's two exchanges, world #2 and #3, the
/// sub-communicator's #0, then world #4.
const WORLD_OP_4: u32 = 5;

/// Runs `fault` (the program's own) on the simulator backend with fault
/// plan `plan` (JSON, if any) and diagnoses its dumps.
fn sim_job(fault: &str, plan: Option<&str>) -> Diagnosis {
    let name = format!("{fault}-{}", plan.map_or(0, str::len));
    let dir = std::env::temp_dir().join(format!("hccl-doctor-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let plan_file = plan.map(|p| {
        let f = dir.join("plan.json");
        std::fs::write(&f, p).unwrap();
        f
    });
    let run = procs::spawn_flight_sim(BIN, &dir, fault, plan_file.as_deref());
    let (code, out) = finish(run, Duration::from_secs(30));
    assert_eq!(
        code,
        Some(3),
        "a rank should fail the op on the simulator:\n{out}"
    );
    let dumps = flight::read_dumps(&dir).unwrap();
    assert!(!dumps.is_empty(), "no dumps from the simulator:\n{out}");
    assert!(dumps.iter().all(|d| d.header.backend == "sim"));
    let _ = std::fs::remove_dir_all(&dir);
    flight::diagnose(dumps)
}

/// The simulator's diagnosis names the same root causes as TCP's (the
/// causes hold communicators, ranks and sequence numbers, no times).
fn same_on_sim(tcp: &Diagnosis, fault: &str, plan: Option<&str>) {
    let sim = sim_job(fault, plan);
    assert_eq!(
        sim.root_causes,
        tcp.root_causes,
        "on the simulator:\n{}\nover TCP:\n{}",
        sim.to_text(),
        tcp.to_text()
    );
}

/// Whether the dump file `f` (complete: dumps are renamed into place)
/// was written for `reason`.
fn reason_is(f: &Path, reason: DumpReason) -> bool {
    let Ok(text) = std::fs::read_to_string(f) else {
        return false;
    };
    let want = serde_json::to_string(&reason).unwrap();
    text.lines()
        .next()
        .is_some_and(|h| h.contains(&format!("\"reason\":{want}")))
}

/// Runs the job with `fault` and returns its diagnosis and report text
/// (host redacted). With `signal`, rank 1 hangs: once rank 0 has exited it
/// gets SIGUSR1, then is killed once its dump is there.
fn job(fault: &str, signal: bool) -> (Diagnosis, String) {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("hccl-doctor-{fault}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let r0 = spawn(&dir, port, 0, fault);
    let r1 = spawn(&dir, port, 1, fault);
    let (c0, out0) = finish(r0, Duration::from_secs(15));
    if signal {
        let pid = r1.id().to_string();
        let st = Command::new("kill").args(["-USR1", &pid]).status().unwrap();
        assert!(st.success());
        // Its dumps on SIGUSR1 (it may have dumped before, learning of
        // rank 0's failure): the world's, then the sub-communicator's.
        let want = flight::file_name("world/split1/color0", 1, r1.id());
        let end = Instant::now() + Duration::from_secs(5);
        while !reason_is(&dir.join(&want), DumpReason::Signal) {
            assert!(Instant::now() < end, "rank 1 wrote no dump on SIGUSR1");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let (_, out1) = finish(r1, Duration::from_secs(if signal { 0 } else { 15 }));
    assert_eq!(c0, Some(3), "rank 0 should fail the op:\n{out0}");
    let dumps = flight::read_dumps(&dir).unwrap();
    assert!(!dumps.is_empty(), "no dumps:\n{out0}\n{out1}");
    let host = dumps[0].header.host.clone();
    let d = flight::diagnose(dumps);
    let text = d.to_text().replace(&format!("({host})"), "(<host>)");
    let _ = std::fs::remove_dir_all(&dir);
    (d, text)
}

#[test]
fn a_killed_rank_is_named_as_crashed() {
    let (d, text) = job("kill", false);
    assert!(
        matches!(
            &d.root_causes[..],
            [Cause::CrashedRank {
                rank: 1,
                seq: Some(4),
                ..
            }]
        ),
        "{text}"
    );
    insta::assert_snapshot!("kill", text);
    let plan = format!(r#"{{"faults": [{{"kind": "crash", "rank": 1, "at_op": {WORLD_OP_4}}}]}}"#);
    same_on_sim(&d, "none", Some(&plan));
}

#[test]
fn a_rank_that_skips_an_op_is_named_from_its_sigusr1_dump() {
    let (d, text) = job("skip", true);
    assert!(
        matches!(
            &d.root_causes[..],
            [Cause::NeverCalled {
                rank: 1,
                seq: 4,
                last_seq: Some(3),
                ..
            }]
        ),
        "{text}"
    );
    insta::assert_snapshot!("skip", text);
    let plan = format!(r#"{{"faults": [{{"kind": "skip", "rank": 1, "op": {WORLD_OP_4}}}]}}"#);
    same_on_sim(&d, "none", Some(&plan));
}

#[test]
fn two_communicators_in_different_orders_are_named_as_a_cycle() {
    let (d, text) = job("swap", false);
    assert!(
        matches!(&d.root_causes[..], [Cause::CommunicatorCycle { ranks, .. }] if ranks.len() == 2),
        "{text}"
    );
    insta::assert_snapshot!("swap", text);
    same_on_sim(&d, "swap", None);
}

#[test]
fn another_count_on_one_rank_is_named_as_a_mismatch() {
    let (d, text) = job("count", false);
    assert!(
        matches!(&d.root_causes[..], [Cause::MismatchedArguments { seq: 4, field, .. }] if field == "count"),
        "{text}"
    );
    insta::assert_snapshot!("count", text);
    let plan = format!(
        r#"{{"faults": [{{"kind": "wrong_args", "rank": 1, "op": {WORLD_OP_4}, "count": 2049}}]}}"#
    );
    same_on_sim(&d, "none", Some(&plan));
}

#[test]
fn a_rank_that_loses_a_peer_while_idle_dumps_at_once() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("hccl-doctor-lose-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let r0 = spawn(&dir, port, 0, "lose");
    let r1 = spawn(&dir, port, 1, "lose");
    let (_, out1) = finish(r1, Duration::from_secs(15));
    // Rank 0 runs no op after rank 1 died; its dumps come from the watch
    // of idle communicators (within about 100 ms), while it sleeps.
    let want = [
        flight::file_name("world", 0, r0.id()),
        flight::file_name("world/split1/color0", 0, r0.id()),
    ];
    let end = Instant::now() + Duration::from_secs(10);
    while !want
        .iter()
        .all(|w| reason_is(&dir.join(w), DumpReason::PeerLost))
    {
        assert!(
            Instant::now() < end,
            "rank 0 wrote no peer_lost dumps while idle:\n{out1}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, out0) = finish(r0, Duration::ZERO);
    assert!(
        !out0.contains("OPERR"),
        "rank 0 called no failing op: {out0}"
    );
    let dumps = flight::read_dumps(&dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(dumps.len(), 2, "rank 0's two communicators only");
    for d in &dumps {
        assert_eq!(d.header.rank, 0);
        assert!(d.ops.iter().all(|o| o.state == OpState::Done), "{d:?}");
        let detail = d.header.detail.clone().unwrap_or_default();
        assert!(detail.contains("rank 1"), "{detail}");
    }
}

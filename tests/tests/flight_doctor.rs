//! From a real failure to its root cause: two `flight_rank` processes over
//! loopback TCP, one fault injected on rank 1 (killed, skips an op, calls
//! two communicators in the other order, another count), their flight
//! recorder dumps, and the diagnosis `hccl doctor` prints (insta
//! snapshots; the host name is redacted, and the text has no pids, ports
//! or times). Each job takes about `HCCL_EXEC_TIMEOUT` = 1 s.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hccl::flight::doctor::Cause;
use hccl::flight::{self, Diagnosis};
use hccl_conformance::procs::{self, finish};

const BIN: &str = env!("CARGO_BIN_EXE_flight_rank");

/// Ports apart from tests/tcp.rs's and tests/bootstrap_procs.rs's.
fn free_port() -> u16 {
    procs::free_port(6_000..11_900)
}

fn spawn(dir: &Path, port: u16, rank: u32, fault: &str) -> Child {
    procs::spawn_flight_rank(BIN, dir, port, rank, fault, true)
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
        let want = flight::file_name("world", 1, r1.id());
        let end = Instant::now() + Duration::from_secs(5);
        while !dir.join(&want).exists() {
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
}

#[test]
fn two_communicators_in_different_orders_are_named_as_a_cycle() {
    let (d, text) = job("swap", false);
    assert!(
        matches!(&d.root_causes[..], [Cause::CommunicatorCycle { ranks, .. }] if ranks.len() == 2),
        "{text}"
    );
    insta::assert_snapshot!("swap", text);
}

#[test]
fn another_count_on_one_rank_is_named_as_a_mismatch() {
    let (d, text) = job("count", false);
    assert!(
        matches!(&d.root_causes[..], [Cause::MismatchedArguments { seq: 4, field, .. }] if field == "count"),
        "{text}"
    );
    insta::assert_snapshot!("count", text);
}

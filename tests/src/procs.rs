//! Ranks as child processes: free loopback ports and bounded waits, shared
//! by the suites that spawn `conformance_rank` (`tests/tcp.rs`,
//! `tests/bootstrap_procs.rs`) and `flight_rank` (`tests/flight_doctor.rs`,
//! `tests/flight_replay.rs`).

use std::net::TcpListener;
use std::ops::Range;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port in `ports` (steps of 16 from a start picked by the
/// process id), never repeated by this process until it wraps around.
///
/// Suites running at the same time pass disjoint ranges; ranges below
/// Linux's ephemeral ports (32768..) keep an OS-chosen port (every data
/// listener uses one) from taking it between this check and the root's bind.
pub fn free_port(ports: Range<u16>) -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let slots = u32::from((ports.end - ports.start) / 16).max(1);
    let base = ports.start + (std::process::id() % slots) as u16 * 16;
    let _ = NEXT.compare_exchange(0, base, Ordering::SeqCst, Ordering::SeqCst);
    loop {
        let p = NEXT.fetch_add(16, Ordering::SeqCst);
        if !ports.contains(&p) {
            NEXT.store(ports.start, Ordering::SeqCst);
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

/// Waits for `child` at most `bound`, killing it past that; returns (exit
/// code, stdout).
pub fn finish(mut child: Child, bound: Duration) -> (Option<i32>, String) {
    let end = Instant::now() + bound;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            _ if Instant::now() >= end => {
                let _ = child.kill();
                break;
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let out = child.wait_with_output().expect("child output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Starts rank `rank` of a 2-rank `flight_rank` job (`bin`: its
/// `CARGO_BIN_EXE_flight_rank`) over loopback TCP on root port `port`,
/// with `HCCL_TEST_FAULT=fault`, `HCCL_EXEC_TIMEOUT` = 1 s and its flight
/// recorder dumping into `dir`; the inherited backend, algorithm and ring
/// size settings are cleared. Its stdout is piped (for [`finish`]) or,
/// with `stdout` false, dropped.
pub fn spawn_flight_rank(
    bin: &str,
    dir: &Path,
    port: u16,
    rank: u32,
    fault: &str,
    stdout: bool,
) -> Child {
    Command::new(bin)
        .env("HCCL_IF_IP", "127.0.0.1")
        .env("HCCL_CONNECT_TIMEOUT", "20")
        .env("HCCL_EXEC_TIMEOUT", "1")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("WORLD_SIZE", "2")
        .env("RANK", rank.to_string())
        .env("HCCL_TEST_FAULT", fault)
        .env(hccl::flight::ENV_DIR, dir)
        .env_remove(hccl::flight::ENV_ENTRIES)
        .env_remove("HCCL_BACKEND")
        .env_remove("HCCL_ALGO")
        .stdout(if stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn flight_rank")
}

/// Starts the same 2-rank `flight_rank` job on the simulator backend, in
/// one process (`HCCL_BACKEND=sim`, every rank a thread): `fault` as
/// [`spawn_flight_rank`]'s, `plan` its `HCCL_SIM_FAULTS` (the fault plan
/// standing for what a thread cannot do, such as die), `HCCL_EXEC_TIMEOUT`
/// = 1 s, dumps into `dir`; stdout piped (for [`finish`]).
pub fn spawn_flight_sim(bin: &str, dir: &Path, fault: &str, plan: Option<&Path>) -> Child {
    let mut c = Command::new(bin);
    c.env("HCCL_BACKEND", "sim")
        .env("HCCL_EXEC_TIMEOUT", "1")
        .env("WORLD_SIZE", "2")
        .env("HCCL_TEST_FAULT", fault)
        .env(hccl::flight::ENV_DIR, dir)
        .env_remove(hccl::flight::ENV_ENTRIES)
        .env_remove("HCCL_ALGO")
        .env_remove("HCCL_SIM_FAULTS")
        .env_remove("HCCL_SIM_PRESET")
        .env_remove("HCCL_SIM_SERVERS")
        .env_remove("HCCL_SIM_RANK_TABLE")
        .env_remove("HCCL_SIM_SEED")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(p) = plan {
        c.env("HCCL_SIM_FAULTS", p);
    }
    c.spawn().expect("spawn flight_rank on the simulator")
}

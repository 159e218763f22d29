//! One rank of the multi-process conformance and fault tests.
//!
//! Joins the communicator from the environment (`Comm::from_env`: RANK,
//! WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or from the rank table at
//! `HCCL_TEST_RANK_TABLE` (`Comm::init_cluster_info`, rank `RANK`), then by
//! `HCCL_TEST_MODE`:
//!
//! - `cases` (default): every case of `hccl_conformance::cases`; prints
//!   `CASE ok <name>` or `CASE fail <name>: <why>`; exit 0 iff all pass.
//! - `fault`: one 4 MiB fp32 AllReduce, with the fault `HCCL_TEST_FAULT`
//!   on rank `HCCL_TEST_VICTIM`: `kill` (the process aborts mid-op),
//!   `exit` (exits without destroying: sockets close), `delay` (sleeps
//!   `HCCL_TEST_DELAY_MS` before the op), `count` (calls with another
//!   count), `algo` (sets its own `HCCL_ALGO=mesh`).
//!   Survivors print `OPERR <error>` and exit 3, or `OPOK` and exit 0.
//!
//! Bootstrap failures print `INITERR <error>` and exit 2.

use std::time::Duration;

use hccl::comm::ReduceOp;
use hccl::Comm;

fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

fn main() {
    let joined = match var("HCCL_TEST_RANK_TABLE") {
        Some(path) => {
            let rank = var("RANK").and_then(|r| r.parse().ok()).unwrap_or(0);
            Comm::init_cluster_info(path, rank)
        }
        None => Comm::from_env(),
    };
    let comm = match joined {
        Ok(c) => c,
        Err(e) => {
            println!("INITERR {e}");
            // Keep a root alive for late ranks (tests of "session expired").
            if let Some(ms) = var("HCCL_TEST_LINGER_MS").and_then(|v| v.parse().ok()) {
                std::thread::sleep(Duration::from_millis(ms));
            }
            std::process::exit(2);
        }
    };
    match var("HCCL_TEST_MODE").as_deref().unwrap_or("cases") {
        "fault" => fault(comm),
        _ => cases(comm),
    }
}

fn cases(comm: Comm) {
    let mut failed = 0;
    for (i, case) in hccl_conformance::cases(comm.size()).iter().enumerate() {
        match hccl_conformance::run_case(&comm, case, i as u64) {
            Ok(()) => println!("CASE ok {}", case.name()),
            Err(e) => {
                failed += 1;
                println!("CASE fail {}: {e}", case.name());
                break; // The communicator is broken after an error.
            }
        }
    }
    comm.destroy();
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

fn fault(comm: Comm) {
    let victim: u32 = var("HCCL_TEST_VICTIM")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let fault = var("HCCL_TEST_FAULT").unwrap_or_default();
    let me = comm.rank();
    let mut count = 1 << 20;
    if me == victim {
        match fault.as_str() {
            "kill" => {
                std::thread::spawn(|| {
                    std::thread::sleep(Duration::from_millis(20));
                    std::process::abort();
                });
                count = 64 << 20; // long enough to be killed inside it
            }
            "exit" => std::process::exit(0),
            "delay" => {
                let ms = var("HCCL_TEST_DELAY_MS")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(3000);
                std::thread::sleep(Duration::from_millis(ms));
            }
            "count" => count += 1,
            // This rank alone runs another algorithm (its own HCCL_ALGO).
            "algo" => std::env::set_var("HCCL_ALGO", "mesh"),
            _ => {}
        }
    }
    let send = vec![1.0f32; count];
    let mut recv = vec![0.0f32; count];
    match comm.all_reduce(&send, &mut recv, ReduceOp::Sum) {
        Ok(()) => {
            println!("OPOK");
            // Peers may still be reading this rank's memory (the same-host
            // fast path) or bytes it queued: destroy before exiting.
            comm.destroy();
            std::process::exit(0);
        }
        Err(e) => {
            println!("OPERR {e}");
            // Destroying lets the abort frames reach the peers before the
            // sockets close (exiting with unread bytes resets them).
            comm.destroy();
            std::process::exit(3);
        }
    }
}

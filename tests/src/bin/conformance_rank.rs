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
//!   count, after `HCCL_TEST_DELAY_MS` if set), `algo` (sets its own `HCCL_ALGO=mesh` before joining), `gather0` (every rank
//!   runs a 4 MiB AllGather instead, the victim with count 0).
//!   Survivors print `OPERR <error>` and exit 3, or `OPOK` and exit 0; a
//!   failed op also prints `RECV untouched` or `RECV touched` (whether the
//!   receive buffer still holds what it held before the call).
//!
//! - `send_async`: rank 0 sends 2^20 f32 (`i as f32`) to rank 1 with
//!   `send_async`, drops the handle, destroys and exits at once: `DESTROYOK`
//!   and exit 0, or `DESTROYERR <error>` and exit 4. Rank 1 receives them:
//!   `RECVOK` (every value right) and exit 0, or `RECVERR <why>` and exit 3.
//!
//! Bootstrap failures print `INITERR <error>` and exit 2.

use std::time::Duration;

use hccl::comm::ReduceOp;
use hccl::Comm;

fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

fn main() {
    // Fault `algo`: the victim runs another algorithm, by its own
    // HCCL_ALGO, which a communicator reads when it is built.
    let victim = var("HCCL_TEST_VICTIM").unwrap_or_else(|| "1".into());
    if var("HCCL_TEST_MODE").as_deref() == Some("fault")
        && var("HCCL_TEST_FAULT").as_deref() == Some("algo")
        && var("RANK") == Some(victim)
    {
        std::env::set_var("HCCL_ALGO", "mesh");
    }
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
        "send_async" => send_async(comm),
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
    if let Err(e) = comm.destroy() {
        println!("DESTROYERR {e}");
        failed += 1;
    }
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

fn send_async(comm: Comm) {
    const N: usize = 1 << 20;
    if comm.rank() == 0 {
        drop(comm.send_async((0..N).map(|i| i as f32).collect::<Vec<f32>>(), 1));
        match comm.destroy() {
            Ok(()) => {
                println!("DESTROYOK");
                std::process::exit(0)
            }
            Err(e) => {
                println!("DESTROYERR {e}");
                std::process::exit(4)
            }
        }
    }
    let mut buf = vec![0.0f32; N];
    let r = comm.recv(&mut buf, 0);
    let _ = comm.destroy();
    match r {
        Err(e) => println!("RECVERR {e}"),
        Ok(()) => match (0..N).find(|&i| buf[i] != i as f32) {
            Some(i) => println!("RECVERR element {i} is {}", buf[i]),
            None => {
                println!("RECVOK");
                std::process::exit(0)
            }
        },
    }
    std::process::exit(3);
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
            "count" => {
                count += 1;
                // Late, so that the others' data is on its way first.
                if let Some(ms) = var("HCCL_TEST_DELAY_MS").and_then(|v| v.parse().ok()) {
                    std::thread::sleep(Duration::from_millis(ms));
                }
            }
            "gather0" => count = 0,
            // `algo` set HCCL_ALGO before the communicator was built (main).
            _ => {}
        }
    }
    let send = vec![1.0f32; count];
    // A value no op here computes: a failed op must leave it.
    const BEFORE: f32 = -7.0;
    let gather = fault == "gather0";
    let mut recv = vec![
        BEFORE;
        if gather {
            count * comm.size() as usize
        } else {
            count
        }
    ];
    let r = if gather {
        comm.all_gather(&send, &mut recv)
    } else {
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum)
    };
    match r {
        Ok(()) => {
            println!("OPOK");
            // Peers may still be reading this rank's memory (the same-host
            // fast path) or bytes it queued: destroy before exiting.
            if let Err(e) = comm.destroy() {
                println!("DESTROYERR {e}");
            }
            std::process::exit(0);
        }
        Err(e) => {
            println!("OPERR {e}");
            let untouched = recv.iter().all(|&x| x == BEFORE);
            println!("RECV {}", if untouched { "untouched" } else { "touched" });
            // Destroying lets the abort frames reach the peers before the
            // sockets close (exiting with unread bytes resets them).
            let _ = comm.destroy();
            std::process::exit(3);
        }
    }
}

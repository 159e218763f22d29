//! One rank of the flight-recorder tests (`tests/flight_doctor.rs`): a
//! small training-like program over TCP with one injected fault, so that
//! its flight-recorder dumps are those of a real failure.
//!
//! Joins the world from the environment (`Comm::from_env`), splits it into
//! one sub-communicator of every rank (`world/split0/color0`), then runs
//! two 8 KiB fp32 AllReduces on the world, one on the sub-communicator,
//! then op #3 on the world (the op the fault hits), by `HCCL_TEST_FAULT`
//! on rank `HCCL_TEST_VICTIM` (default 1):
//!
//! - `none`: no fault;
//! - `kill`: the victim aborts its process (no destroy, no dump) just
//!   before op #3;
//! - `skip`: the victim skips op #3 and sleeps (up to 20 s) with its
//!   communicators alive: a hung rank, to be dumped by `SIGUSR1`;
//! - `swap`: the victim calls the sub-communicator's second op before the
//!   world's op #3, the others after it;
//! - `count`: the victim calls op #3 with 2049 elements, the others 2048;
//! - `lose`: the victim aborts its process after the sub-communicator's
//!   op; the others then sleep (up to 20 s) with their communicators
//!   alive and call nothing more: ranks that lose a peer while idle;
//! - `p2p`: after op #3, every rank (two) sends 64 fp32 to the other,
//!   then receives the other's (both send first: sends are queued), then
//!   an AllToAllV (rank i sends i + j + 1 elements to rank j) and an
//!   AllGatherV (rank r's block is r + 2 elements); then the others
//!   receive a second message from the victim, which never sends it and
//!   sleeps (up to 20 s): a hung rank, to be dumped by `SIGUSR1`;
//! - `loop`: every rank runs 8 KiB AllReduces on the world for up to 20 s
//!   (a link cut from outside stops them); after the first it creates the
//!   file `HCCL_TEST_MARK` if set, to say it is running.
//!
//! Prints `OPOK` and exits 0, or `OPERR <error>` and exits 3 a second
//! later. Bootstrap
//! failures print `INITERR <error>` and exit 2.
//!
//! With `HCCL_BACKEND=sim` the same program runs every rank of
//! `WORLD_SIZE` as a thread of this process on the simulator
//! (`Comm::init_all`, with the `HCCL_SIM_*` settings: a fault plan in
//! `HCCL_SIM_FAULTS` stands for the faults a process cannot have there,
//! such as `kill`). It prints each rank's `OPOK` or `OPERR` and exits 0,
//! or 3 if a rank failed, with every communicator still alive (as a
//! process that exits on an error leaves its own).

use std::time::Duration;

use hccl::comm::{BackendKind, ReduceOp};
use hccl::Comm;

fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

fn all_reduce(c: &Comm, count: usize) -> Result<(), hccl::CommError> {
    let send = vec![1f32; count];
    let mut recv = vec![0f32; count];
    c.all_reduce(&send, &mut recv, ReduceOp::Sum)
}

fn run(world: &Comm, sub: &Comm, fault: &str, victim: bool) -> Result<(), hccl::CommError> {
    all_reduce(world, 2048)?;
    all_reduce(world, 2048)?;
    all_reduce(sub, 2048)?;
    match (fault, victim) {
        ("kill", true) => std::process::abort(),
        ("skip", true) => {
            std::thread::sleep(Duration::from_secs(20));
            Ok(())
        }
        ("swap", true) => {
            all_reduce(sub, 2048)?;
            all_reduce(world, 2048)
        }
        ("swap", false) => {
            all_reduce(world, 2048)?;
            all_reduce(sub, 2048)
        }
        ("count", true) => all_reduce(world, 2049),
        ("lose", true) => std::process::abort(),
        ("lose", false) => {
            std::thread::sleep(Duration::from_secs(20));
            Ok(())
        }
        ("p2p", _) => {
            all_reduce(world, 2048)?;
            p2p_and_v(world, victim)
        }
        ("loop", _) => {
            let end = std::time::Instant::now() + Duration::from_secs(20);
            all_reduce(world, 2048)?;
            if let Some(mark) = var("HCCL_TEST_MARK") {
                let _ = std::fs::write(mark, b"");
            }
            while std::time::Instant::now() < end {
                all_reduce(world, 2048)?;
            }
            Ok(())
        }
        _ => all_reduce(world, 2048),
    }
}

/// The `p2p` fault's ops after op #3 (module docs), on two ranks.
fn p2p_and_v(world: &Comm, victim: bool) -> Result<(), hccl::CommError> {
    let (me, peer) = (u64::from(world.rank()), 1 - world.rank());
    let mut got = vec![0f32; 64];
    world.send(&[me as f32; 64], peer)?;
    world.recv(&mut got, peer)?;
    let sc: Vec<u64> = (0..2).map(|j| me + j + 1).collect();
    let rc: Vec<u64> = (0..2).map(|i| i + me + 1).collect();
    let displs = |c: &[u64]| vec![0, c[0]];
    let send = vec![1f32; sc.iter().sum::<u64>() as usize];
    let mut recv = vec![0f32; rc.iter().sum::<u64>() as usize];
    world.all_to_all_v(&send, &sc, &displs(&sc), &mut recv, &rc, &displs(&rc))?;
    let mut all = vec![0f32; 5];
    world.all_gather_v(&vec![1f32; me as usize + 2], &mut all, &[2, 3], &[0, 2])?;
    if victim {
        std::thread::sleep(Duration::from_secs(20));
        return Ok(());
    }
    world.recv(&mut got, peer)
}

/// Every rank as a thread on the simulator (see the module docs).
fn on_sim(fault: &str, victim: &str) -> ! {
    let n: u32 = var("WORLD_SIZE").and_then(|v| v.parse().ok()).unwrap_or(2);
    let comms = match Comm::init_all(n) {
        Ok(c) => c,
        Err(e) => {
            println!("INITERR {e}");
            std::process::exit(2);
        }
    };
    let threads: Vec<_> = comms
        .into_iter()
        .map(|world| {
            let (fault, victim) = (fault.to_string(), victim == world.rank().to_string());
            std::thread::spawn(move || {
                let sub = match world.split(Some(0), world.rank()) {
                    Ok(Some(c)) => c,
                    Ok(None) => unreachable!("every rank has color 0"),
                    Err(e) => return (format!("INITERR split: {e}"), world, None),
                };
                let r = run(&world, &sub, &fault, victim);
                let line = r.map_or_else(|e| format!("OPERR {e}"), |()| "OPOK".into());
                (line, world, Some(sub))
            })
        })
        .collect();
    // Kept until exit: a rank that drops its communicators is a lost peer.
    let done: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut failed = false;
    for (r, (line, _, _)) in done.iter().enumerate() {
        println!("rank {r}: {line}");
        failed |= !line.starts_with("OPOK");
    }
    std::process::exit(if failed { 3 } else { 0 });
}

fn main() {
    let fault = var("HCCL_TEST_FAULT").unwrap_or_else(|| "none".into());
    let victim = var("HCCL_TEST_VICTIM").unwrap_or_else(|| "1".into());
    if matches!(BackendKind::from_env(), Ok(BackendKind::Sim)) {
        on_sim(&fault, &victim);
    }
    let world = match Comm::from_env() {
        Ok(c) => c,
        Err(e) => {
            println!("INITERR {e}");
            std::process::exit(2);
        }
    };
    let sub = match world.split(Some(0), world.rank()) {
        Ok(Some(c)) => c,
        Ok(None) => unreachable!("every rank has color 0"),
        Err(e) => {
            println!("INITERR split: {e}");
            std::process::exit(2);
        }
    };
    let victim = victim == world.rank().to_string();
    match run(&world, &sub, &fault, victim) {
        Ok(()) => {
            println!("OPOK");
            std::process::exit(0);
        }
        Err(e) => {
            println!("OPERR {e}");
            // Stay a moment (the test's HCCL_EXEC_TIMEOUT): a peer that
            // times out in another communicator does so itself, instead of
            // losing this process first (the test's snapshot is then the
            // same every run).
            std::thread::sleep(Duration::from_secs(1));
            std::process::exit(3);
        }
    }
}

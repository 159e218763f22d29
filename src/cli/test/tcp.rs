//! `hccl test --transport tcp`: the same size sweep with real processes
//! over the TCP transport, timed by the wall clock.
//!
//! Ranks are processes that join one [`hccl::Comm`] through
//! [`hccl::Comm::from_env`]: started by `mpirun` (Open MPI's
//! `OMPI_COMM_WORLD_RANK/SIZE`), by a torchrun-style launcher, or by
//! `--spawn N` ([`spawn`]). The method is the one of
//! `hw/examples/tcp_allreduce_bench.rs` (and nccl-tests): per size, `-w`
//! warmups, a barrier, `-n` back-to-back ops timed with [`Instant`]; each
//! rank's average per op, then the maximum over ranks (an fp64 Max
//! AllReduce) is the row's time. The check compares each rank's output of
//! the last timed op with `hccl_algos::reference` on the verifiable inputs
//! and sums the wrong elements over ranks (a u64 Sum AllReduce).

use std::io::Write;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::Context;
use hccl::Comm;
use hccl_algos::reference;
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::busbw_factor;

use super::check::{self, Check};
use super::output::{self, Row};
use super::workload::{self, TestCollective};

/// Set in the children of `--spawn`, so they run as ranks instead of
/// spawning again.
pub const SPAWNED_VAR: &str = "HCCL_TEST_SPAWNED";

/// The collectives `--transport tcp` runs.
pub const SUPPORTED: [TestCollective; 6] = [
    TestCollective::AllReduce,
    TestCollective::AllGather,
    TestCollective::ReduceScatter,
    TestCollective::Broadcast,
    TestCollective::Alltoall,
    TestCollective::Barrier,
];

/// `Err(message)` naming the supported collectives when `coll` is not one.
pub fn check_supported(coll: TestCollective) -> Result<(), String> {
    if SUPPORTED.contains(&coll) {
        return Ok(());
    }
    let names: Vec<&str> = SUPPORTED.iter().map(|c| c.name()).collect();
    Err(format!(
        "{coll} is not supported with --transport tcp; supported: {} (or use --transport sim)",
        names.join(", ")
    ))
}

/// What every rank runs (identical on every rank: same flags).
pub struct Sweep<'a> {
    /// The collective.
    pub coll: TestCollective,
    /// Sizes in bytes (hccl_test's `-b..-e`), one row each.
    pub sizes: &'a [u64],
    /// Element type.
    pub dtype: DataType,
    /// Reduction.
    pub op: ReduceOp,
    /// Root of broadcast.
    pub root: u32,
    /// Warmup ops per row.
    pub warmup: u32,
    /// Timed ops per row (≥ 1).
    pub iters: u32,
    /// Check the results.
    pub check: bool,
    /// Seed of the verifiable inputs.
    pub seed: u64,
    /// The settings line of the header.
    pub settings: &'a str,
    /// The check line of the header.
    pub check_note: &'a str,
}

/// How the processes were started, for the header.
fn launcher() -> &'static str {
    if std::env::var_os(SPAWNED_VAR).is_some() {
        "hccl test --spawn"
    } else if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        "mpirun"
    } else {
        "RANK/WORLD_SIZE environment"
    }
}

/// Runs this process's rank of the sweep; rank 0 prints the header and
/// the table (the same columns as the simulator's). Returns this rank, the
/// world size and the rows (every rank gets the same times and checks).
///
/// # Errors
/// Bootstrap and transport errors, arguments that do not fit the world.
pub fn run_rank(s: &Sweep<'_>) -> anyhow::Result<(u32, u32, Vec<Row>)> {
    let comm = Comm::from_env().context(
        "--transport tcp: cannot join the communicator; run under mpirun, set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or add --spawn N",
    )?;
    let n = comm.size();
    let rank = comm.rank();
    if s.coll.uses_root() && s.root >= n {
        anyhow::bail!(
            "-r/--root {} is outside the world of {n} ranks; use 0..{}",
            s.root,
            n - 1
        );
    }
    let kind = s.coll.kind();
    let mut out = std::io::stdout().lock();
    if rank == 0 {
        writeln!(
            out,
            "# hccl test {} (hccl-rs {}, TCP transport)",
            s.coll,
            env!("CARGO_PKG_VERSION")
        )?;
        writeln!(
            out,
            "# ranks: {n} processes on the TCP transport, launched by {}",
            launcher()
        )?;
        writeln!(out, "# settings: {}", s.settings)?;
        writeln!(
            out,
            "# times are MEASURED over TCP with {n} processes (wall clock): per rank the average of {} back-to-back ops after {} warmups and a barrier; time = max over ranks",
            s.iters, s.warmup
        )?;
        writeln!(out, "# check: {}", s.check_note)?;
        writeln!(out, "#")?;
        writeln!(out, "{}", output::table_header())?;
        out.flush()?;
    }
    let mut rows = Vec::with_capacity(s.sizes.len());
    for &bytes in s.sizes {
        let args = workload::args_for(s.coll, bytes, s.dtype, s.op, s.root, n)?;
        let spec = hccl_hw::tcp::choose_algo(&args)?;
        let (in_bytes, out_bytes) = args.io_bytes(rank);
        // Every rank derives all inputs from the seed: its own to send,
        // the others' to compute its expected output.
        let (input, expected) = if s.check {
            let mut inputs = reference::verifiable_inputs(&args, s.seed);
            let mut expected = reference::reference(&args, &inputs)?;
            (
                inputs.swap_remove(rank as usize),
                Some(expected.swap_remove(rank as usize)),
            )
        } else {
            (vec![0u8; in_bytes as usize], None)
        };
        let mut output_buf = vec![0u8; out_bytes as usize];
        let op_ctx = || format!("{} {bytes} bytes, algorithm {spec}", s.coll);
        for _ in 0..s.warmup {
            comm.collective(&args, &input, &mut output_buf)
                .with_context(op_ctx)?;
        }
        comm.barrier().with_context(op_ctx)?;
        let start = Instant::now();
        for _ in 0..s.iters {
            comm.collective(&args, &input, &mut output_buf)
                .with_context(op_ctx)?;
        }
        let mine = start.elapsed().as_secs_f64() / f64::from(s.iters);
        let mut slowest = [0f64];
        comm.all_reduce(&[mine], &mut slowest, ReduceOp::Max)
            .with_context(op_ctx)?;
        let check = match &expected {
            Some(want) => {
                let wrong = match check::compare(
                    s.dtype,
                    std::slice::from_ref(want),
                    std::slice::from_ref(&output_buf),
                ) {
                    Check::Failed(w) => w,
                    _ => 0,
                };
                let mut total = [0u64];
                comm.all_reduce(&[wrong], &mut total, ReduceOp::Sum)
                    .with_context(op_ctx)?;
                if total[0] == 0 {
                    Check::Success
                } else {
                    Check::Failed(total[0])
                }
            }
            None => Check::Null,
        };
        let size = args.message_bytes();
        let time_ns = slowest[0] * 1e9;
        let algbw = if time_ns > 0.0 {
            size as f64 / time_ns
        } else {
            0.0
        };
        let row = Row {
            size_bytes: size,
            count: size / args.dtype.size(),
            dtype: args.dtype.to_string(),
            redop: s.coll.uses_op().then(|| args.op.to_string()),
            root: s.coll.uses_root().then_some(args.root),
            time_us: time_ns / 1000.0,
            algbw_gbps: algbw,
            busbw_gbps: algbw * busbw_factor(kind, n),
            algorithm: super::display_algo(kind, &spec),
            chosen_by: if std::env::var("HCCL_ALGO").is_ok_and(|v| !v.trim().is_empty()) {
                "HCCL_ALGO".into()
            } else {
                "selector (TCP costs)".into()
            },
            predicted_us: None,
            check,
        };
        if rank == 0 {
            writeln!(out, "{}", output::format_row(&row))?;
            out.flush()?;
        }
        rows.push(row);
    }
    comm.destroy();
    Ok((rank, n, rows))
}

/// A port on 127.0.0.1 that was free a moment ago (the OS's choice).
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .context("--spawn: cannot find a free port on 127.0.0.1")?;
    Ok(l.local_addr()?.port())
}

/// Kills (and reaps) every child still running.
fn kill_all(kids: &mut [(u32, Child)]) {
    for (_, k) in kids.iter_mut() {
        if let Ok(None) = k.try_wait() {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

/// `--spawn N`: runs this program again as `n` ranks on 127.0.0.1
/// (torchrun-style `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`,
/// same arguments) and waits for them. Rank 0 prints the table.
///
/// Exit status: 0 when every rank exits with 0; 1 when a rank fails (the
/// others are then killed) or they are not all done within `timeout`.
///
/// # Errors
/// The program cannot be found or started.
pub fn spawn(n: u32, timeout: Duration) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("--spawn: cannot find this program")?;
    let port = free_port()?;
    let mut kids: Vec<(u32, Child)> = Vec::with_capacity(n as usize);
    for r in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(std::env::args_os().skip(1))
            .env(SPAWNED_VAR, "1")
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string());
        if std::env::var_os("HCCL_IF_IP").is_none() {
            cmd.env("HCCL_IF_IP", "127.0.0.1");
        }
        match cmd.spawn() {
            Ok(c) => kids.push((r, c)),
            Err(e) => {
                kill_all(&mut kids);
                return Err(e).with_context(|| format!("--spawn: cannot start rank {r}"));
            }
        }
    }
    let deadline = Instant::now() + timeout;
    let mut running = n as usize;
    while running > 0 {
        running = 0;
        for i in 0..kids.len() {
            let r = kids[i].0;
            match kids[i].1.try_wait() {
                Ok(Some(st)) if st.success() => {}
                Ok(Some(st)) => {
                    kill_all(&mut kids);
                    eprintln!("error: --spawn: rank {r} of {n} failed ({st}); the other ranks were stopped");
                    return Ok(ExitCode::from(1));
                }
                Ok(None) => running += 1,
                Err(e) => {
                    kill_all(&mut kids);
                    return Err(e).with_context(|| format!("--spawn: cannot wait for rank {r}"));
                }
            }
        }
        if running > 0 && Instant::now() >= deadline {
            kill_all(&mut kids);
            eprintln!(
                "error: --spawn: {running} of {n} ranks still running after {} s (--spawn-timeout); stopped them",
                timeout.as_secs()
            );
            return Ok(ExitCode::from(1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(ExitCode::SUCCESS)
}

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
//! AllReduce) is the row's time. With `-c 1` one more op, untimed, runs
//! into a zeroed output buffer; the check compares each rank's output of
//! it with `hccl_algos::reference` on the verifiable inputs and sums the
//! wrong elements over ranks (a u64 Sum AllReduce).

use std::io::Write;
use std::process::{Child, Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hccl::Comm;
use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveKind;
use hccl_algos::layout::GroupLayout;
use hccl_algos::reference;
use hccl_algos::select::HcclAlgo;
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::busbw_factor;

use super::check::{self, Check};
use super::output::{self, Row};
use super::workload::{self, TestCollective};

/// Set in the children of `--spawn`, so they run as ranks instead of
/// spawning again.
pub(crate) const SPAWNED_VAR: &str = "HCCL_TEST_SPAWNED";

/// What every rank runs (identical on every rank: same flags).
pub(crate) struct Sweep<'a> {
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
    /// Header lines on how this run came to be on TCP and what `-p` did.
    pub launch_notes: &'a [String],
    /// The table's format.
    pub format: output::Format,
    /// `Tcp`, or `Ascend` (`--transport ascend`: the ranks on CANN's HCCL).
    pub backend: hccl::BackendKind,
}

impl Sweep<'_> {
    /// How the header names where the ranks run.
    fn transport(&self) -> &'static str {
        match self.backend {
            hccl::BackendKind::Ascend => "Ascend backend (CANN's HCCL)",
            _ => "TCP transport",
        }
    }

    /// What the times were measured over, for the header.
    fn measured_over(&self) -> String {
        match self.backend {
            hccl::BackendKind::Ascend => format!(
                "on CANN's HCCL ({} mode; TCP carries only the start-up)",
                if self.hccl_chooses() {
                    "native"
                } else {
                    "schedule"
                }
            ),
            _ => "over TCP".into(),
        }
    }

    /// True when CANN's HCCL, not hccl-rs, picks each op's algorithm:
    /// the Ascend backend's native mode (`HCCL_ASCEND_MODE` unset or
    /// `native`; a bad value has failed the communicator's start already).
    fn hccl_chooses(&self) -> bool {
        self.backend == hccl::BackendKind::Ascend
            && !std::env::var("HCCL_ASCEND_MODE")
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case("schedule")
    }

    /// The algorithm column's text for `spec`: HCCL's own in native mode.
    fn algorithm_name(&self, kind: CollectiveKind, spec: &AlgoSpec, n: u32) -> String {
        if self.hccl_chooses() {
            HCCL_CHOOSES.into()
        } else {
            super::display_algo(kind, spec, &GroupLayout::flat(n))
        }
    }
}

/// The algorithm column in the Ascend backend's native mode, where CANN's
/// HCCL picks the algorithm inside its own call.
const HCCL_CHOOSES: &str = "HCCL's own";

/// The header line saying what `HCCL_ALGO` (if set) does to this sweep:
/// like the simulator's, a setting that does not fit the collective is
/// named as ignored (the selector chooses); one that fits is named with
/// what it runs as.
fn algo_note(s: &Sweep<'_>, n: u32) -> Option<String> {
    let value = std::env::var("HCCL_ALGO").ok()?;
    let first = *s.sizes.first()?;
    let args = workload::args_for(s.coll, first, s.dtype, s.op, s.root, n).ok()?;
    let fitted = HcclAlgo::from_setting(std::env::var("HCCL_ALGO").ok().as_deref())
        .ok()
        .flatten()
        .and_then(|h| h.spec_fitting(&args, &GroupLayout::flat(n)));
    Some(match fitted {
        Some(spec) => format!("# HCCL_ALGO={value}: runs as {spec} for {}", s.coll),
        None => format!(
            "# note: HCCL_ALGO={value} ignored for {} (it does not plan it); the selector (TCP costs) chooses",
            s.coll
        ),
    })
}

/// What started this process as a rank, read off the variables it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Launch {
    /// `hccl test --spawn`, `mpirun (Open MPI)`, `PMI (MPICH/Slurm)` or
    /// `torchrun-style RANK/WORLD_SIZE`.
    pub by: &'static str,
    /// The world size it gave, if it parses.
    pub world_size: Option<u32>,
    /// The ranks it started on this node and the variable saying so
    /// ([`hccl::comm::launch::local_world_size`]).
    pub local: Option<(&'static str, u32)>,
}

/// The launcher of this process (`--spawn`, Open MPI's
/// `OMPI_COMM_WORLD_*`, PMI's `PMI_RANK`/`PMI_SIZE`, torchrun-style
/// `RANK`/`WORLD_SIZE`), if any.
pub(crate) fn launcher() -> Option<Launch> {
    launcher_from(&|k| std::env::var(k).ok())
}

/// [`launcher`] over the variables `get` returns.
fn launcher_from(get: &dyn Fn(&str) -> Option<String>) -> Option<Launch> {
    let set = |k: &str| get(k).is_some();
    let (by, size_var) = if set(SPAWNED_VAR) {
        ("hccl test --spawn", "WORLD_SIZE")
    } else if set("OMPI_COMM_WORLD_SIZE") || set("OMPI_COMM_WORLD_RANK") {
        ("mpirun (Open MPI)", "OMPI_COMM_WORLD_SIZE")
    } else if set("PMI_SIZE") || set("PMI_RANK") {
        ("PMI (MPICH/Slurm)", "PMI_SIZE")
    } else if set("RANK") || set("WORLD_SIZE") {
        ("torchrun-style RANK/WORLD_SIZE", "WORLD_SIZE")
    } else {
        return None;
    };
    let world_size = get(size_var).and_then(|n| n.trim().parse().ok());
    let local = hccl::comm::launch::local_world_size(get);
    Some(Launch {
        by,
        world_size,
        local,
    })
}

/// `-p N` under a launcher, as hccl_test's `-p`: the NPUs (here: ranks) per
/// node. Checked against the ranks the launcher started on this node when
/// it says (else against nothing but the world size, which `-p` must
/// divide). Returns the header line saying what it did.
///
/// # Errors
/// The message of a `-p` that does not fit.
pub(crate) fn check_npus(p: u32, launch: &Launch) -> Result<String, String> {
    if p == 0 {
        return Err("-p/--npus 0: use at least one NPU per node".into());
    }
    let by = launch.by;
    if let Some((var, k)) = launch.local {
        if k != p {
            return Err(format!(
                "-p/--npus {p} does not match the {k} rank{} {by} started on this node ({var}={k}); pass -p {k}, or start {p} ranks per node",
                if k == 1 { "" } else { "s" }
            ));
        }
    }
    if let Some(n) = launch.world_size {
        if n % p != 0 {
            return Err(format!(
                "-p/--npus {p} does not divide the world of {n} ranks {by} started: -p is the NPUs per node, and every node runs -p ranks"
            ));
        }
    }
    let checked = match launch.local {
        Some((var, k)) => format!("matches the {k} ranks {by} started on this node ({var})"),
        None => format!("not checked on this node ({by} gives no local rank count)"),
    };
    let nodes = launch.world_size.map_or_else(String::new, |n| {
        let k = n / p;
        format!("; {k} node{} of {p}", if k == 1 { "" } else { "s" })
    });
    Ok(format!(
        "# -p {p}: NPUs per node, {checked}{nodes}; rank r is device r % {p} of node r / {p}"
    ))
}

/// Bytes of one rank's settings line in the start-up comparison (the line
/// is about 150 bytes; a longer one is compared on its first 1024).
const SETTINGS_BYTES: usize = 1024;

/// `settings` as a block of [`SETTINGS_BYTES`], zero-padded.
fn settings_block(settings: &str) -> Vec<u8> {
    let mut b = settings.as_bytes().to_vec();
    b.resize(SETTINGS_BYTES, 0);
    b
}

/// The flags of a settings line (`all_reduce -b 8192 -e 8192 ... -n 2`):
/// the collective as `COLL`, then each `-flag value` pair.
fn flags(line: &str) -> Vec<(String, String)> {
    let mut t = line.split_whitespace().peekable();
    let mut out: Vec<(String, String)> = t
        .next()
        .map(|c| ("collective".to_string(), c.to_string()))
        .into_iter()
        .collect();
    while let Some(k) = t.next() {
        if k.starts_with('-') {
            let v = match t.peek() {
                Some(v) if !v.starts_with('-') => t.next().unwrap_or_default(),
                _ => "",
            };
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

/// When `lines` (rank r's settings line at r) are not all rank 0's: the
/// error naming each flag that differs (`-n 2 on rank 0, -n 3 on rank 1`).
fn settings_mismatch(lines: &[String]) -> Option<String> {
    let first = lines.first()?;
    let (r, other) = lines.iter().enumerate().find(|(_, l)| *l != first)?;
    let (a, b) = (flags(first), flags(other));
    let value =
        |f: &[(String, String)], k: &str| f.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
    let mut keys: Vec<&str> = a.iter().chain(&b).map(|(k, _)| k.as_str()).collect();
    keys.dedup();
    let mut seen = Vec::new();
    let mut diffs = Vec::new();
    for k in keys {
        if seen.contains(&k) {
            continue;
        }
        seen.push(k);
        let (x, y) = (value(&a, k), value(&b, k));
        if x != y {
            let say = |v: Option<String>, rank: usize| match (k, v) {
                ("collective", Some(v)) => format!("{v} on rank {rank}"),
                (_, Some(v)) => format!("{k} {v} on rank {rank}"),
                (_, None) => format!("no {k} on rank {rank}"),
            };
            diffs.push(format!("{}, {}", say(x, 0), say(y, r)));
        }
    }
    if diffs.is_empty() {
        diffs.push(format!("rank 0: {first}; rank {r}: {other}"));
    }
    Some(format!(
        "the ranks were started with different settings: {}; start every rank with the same hccl test flags",
        diffs.join("; ")
    ))
}

/// `--transport`'s value for `s`.
fn flag(s: &Sweep<'_>) -> &'static str {
    match s.backend {
        hccl::BackendKind::Ascend => "ascend",
        _ => "tcp",
    }
}

/// Runs this process's rank of the sweep; rank 0 prints the header and
/// the table (the same columns as the simulator's). Returns this rank, the
/// world size and the rows (every rank gets the same times and checks).
///
/// # Errors
/// Bootstrap and transport errors, arguments that do not fit the world.
pub(crate) fn run_rank(s: &Sweep<'_>) -> anyhow::Result<(u32, u32, Vec<Row>)> {
    // The launch advice only helps when no launcher set the rank's
    // variables; otherwise the cause (a port in use, a bad HCCL_* value)
    // speaks for itself.
    let comm = Comm::from_env_on(s.backend).with_context(|| match launcher() {
        Some(l) => format!("--transport {} ({}): cannot join the communicator", flag(s), l.by),
        None => "--transport tcp: cannot join the communicator; run under mpirun, set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or add --spawn N".to_string(),
    })?;
    let n = comm.size();
    let rank = comm.rank();
    // First op of every rank, of one shape whatever the flags: ranks
    // started with different flags would otherwise meet in mismatched ops.
    let mut all = vec![0u8; SETTINGS_BYTES * n as usize];
    comm.all_gather(&settings_block(s.settings), &mut all)
        .context("--transport tcp: comparing the ranks' settings")?;
    let lines: Vec<String> = all
        .chunks(SETTINGS_BYTES)
        .map(|b| {
            String::from_utf8_lossy(b)
                .trim_end_matches('\0')
                .to_string()
        })
        .collect();
    if let Some(m) = settings_mismatch(&lines) {
        anyhow::bail!("{m}");
    }
    if let Some(m) = super::root_outside(s.coll, s.root, n) {
        anyhow::bail!("{m}");
    }
    let kind = s.coll.kind();
    // The rows (one per distinct size: as on the simulator, sizes round
    // down to whole elements, and a requested size that rounds to nothing
    // is skipped; an explicit -b 0 keeps its 0-byte row) and their
    // algorithms, known before the header sizes the table.
    let mut todo = Vec::with_capacity(s.sizes.len());
    let mut asked = Vec::with_capacity(s.sizes.len());
    let mut last_size = None;
    for &bytes in s.sizes {
        let args = workload::args_for(s.coll, bytes, s.dtype, s.op, s.root, n)?;
        let moved = args.message_bytes();
        if last_size.replace(moved) == Some(moved) || (moved == 0 && bytes > 0) {
            asked.push((bytes, None));
            continue;
        }
        asked.push((bytes, Some(moved)));
        let spec = comm.algorithm(&args)?;
        todo.push((bytes, args, spec));
    }
    // Every requested size rounded to nothing: refuse, as the simulator's
    // path does, instead of printing a table without rows and exiting 0.
    if todo.is_empty() && kind != CollectiveKind::Barrier {
        let largest = s.sizes.last().copied().unwrap_or(0);
        anyhow::bail!(super::rounds_to_nothing(s.coll, s.dtype, n, largest));
    }
    let names: Vec<String> = todo
        .iter()
        .map(|(_, _, spec)| s.algorithm_name(kind, spec, n))
        .collect();
    let table = output::Printer {
        table: output::Table::new(names.iter().map(String::as_str)),
        format: s.format,
    };
    let mut out = std::io::stdout().lock();
    if rank == 0 {
        writeln!(
            out,
            "# hccl test {} (hccl-rs {}, {})",
            s.coll,
            env!("CARGO_PKG_VERSION"),
            s.transport()
        )?;
        writeln!(
            out,
            "# ranks: {n} process{} on the {}, launched by {}",
            if n == 1 { "" } else { "es" },
            s.transport(),
            launcher().map_or("torchrun-style RANK/WORLD_SIZE", |l| l.by)
        )?;
        for note in s.launch_notes {
            writeln!(out, "{note}")?;
        }
        writeln!(out, "# settings: {}", s.settings)?;
        if let Some(note) = algo_note(s, n) {
            writeln!(out, "{note}")?;
        }
        if let Some(note) = workload::size_note(&asked, s.dtype, kind) {
            writeln!(out, "{note}")?;
        }
        writeln!(
            out,
            "# times are MEASURED {} with {n} processes (wall clock): per rank the average of {} back-to-back ops after {} warmup{} and a barrier; time = max over ranks",
            s.measured_over(),
            s.iters,
            s.warmup,
            if s.warmup == 1 { "" } else { "s" }
        )?;
        writeln!(out, "{}", super::output::UNITS_NOTE)?;
        writeln!(out, "# check: {}", s.check_note)?;
        if s.format == output::Format::HcclTest {
            writeln!(out, "{}", output::HCCL_TEST_NOTE)?;
        }
        writeln!(out, "#")?;
        writeln!(out, "{}", table.header()).map_err(stdout_error)?;
        out.flush().map_err(stdout_error)?;
    }
    let mut rows = Vec::with_capacity(todo.len());
    for (bytes, args, spec) in todo {
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
                // Checked on an op of its own into a zeroed buffer, as the
                // first op of a size sees it: the timed ops wrote the same
                // bytes over and over, so the last one's output alone
                // would not show a region it left unwritten.
                output_buf.fill(0);
                comm.collective(&args, &input, &mut output_buf)
                    .with_context(op_ctx)?;
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
            algorithm: s.algorithm_name(kind, &spec, n),
            // HCCL_ALGO chose it only if its setting fits this op.
            chosen_by: if HcclAlgo::from_setting(std::env::var("HCCL_ALGO").ok().as_deref())
                .ok()
                .flatten()
                .and_then(|h| h.spec_fitting(&args, &GroupLayout::flat(n)))
                == Some(spec)
            {
                "HCCL_ALGO".into()
            } else {
                "selector (TCP costs)".into()
            },
            predicted_us: None,
            check,
        };
        if rank == 0 {
            writeln!(out, "{}", table.row(&row)).map_err(stdout_error)?;
            out.flush().map_err(stdout_error)?;
        }
        rows.push(row);
    }
    // Written now, not at drop, so that a lost profile fails the run.
    if let Some(path) = comm
        .write_profile()
        .context("--transport tcp: the profile is lost")?
    {
        if rank == 0 {
            writeln!(
                out,
                "# profiling: {} (rank 0; every rank writes its own file there)",
                path.display()
            )?;
        }
    }
    comm.destroy()?;
    Ok((rank, n, rows))
}

/// In a rank started by `--spawn`: a thread that waits for the end of
/// stdin, the pipe `--spawn` holds open, and ends this process when it
/// closes. So a `--spawn` that is interrupted or killed (its children
/// would otherwise run on) takes its ranks with it at once.
pub(crate) fn watch_parent() {
    std::thread::spawn(|| {
        use std::io::Read;
        let mut buf = [0u8; 64];
        loop {
            match std::io::stdin().read(&mut buf) {
                Ok(0) | Err(_) => {
                    // Not eprintln!: with --spawn gone, stderr's reader is
                    // gone too, and a failed print would panic this thread.
                    let _ = writeln!(
                        std::io::stderr(),
                        "error: hccl test --spawn ended; stopping this rank"
                    );
                    std::process::exit(1);
                }
                Ok(_) => {}
            }
        }
    });
}

/// Ports `--spawn` tries for its root, below Linux's default ephemeral
/// range (32768-60999, `net.ipv4.ip_local_port_range`): a port the OS
/// picks for `:0` can be handed again, between this check and rank 0's
/// bind, to any process's listener or outgoing connection (two `--spawn`
/// runs at once collided so); a port outside the range only to another
/// program that names it.
const SPAWN_PORTS: std::ops::Range<u16> = 20000..32000;

/// A port on 127.0.0.1 that was free a moment ago: the first bindable one
/// of [`SPAWN_PORTS`] from a start that differs per process and call,
/// else the OS's choice.
fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let span = u32::from(SPAWN_PORTS.end - SPAWN_PORTS.start);
    let start = std::process::id()
        .wrapping_mul(7919)
        .wrapping_add(CALLS.fetch_add(1, Ordering::Relaxed).wrapping_mul(131));
    for i in 0..64 {
        let p = SPAWN_PORTS.start + (start.wrapping_add(i * 97) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return Ok(p);
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .context("--spawn: cannot find a free port on 127.0.0.1")?;
    Ok(l.local_addr()?.port())
}

/// How long the other ranks get, once one rank has failed, to fail on
/// their own (a lost peer is noticed at once) and print why, before they are
/// stopped.
const GRACE: Duration = Duration::from_secs(3);

/// How one rank of `--spawn` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RankExit {
    rank: u32,
    /// The poll round in which its exit was seen (earlier = died first).
    round: u64,
    /// Exit code, when it exited.
    code: Option<i32>,
    /// Signal that ended it, when one did.
    signal: Option<i32>,
    /// `--spawn` stopped it after another rank had failed.
    stopped: bool,
}

impl RankExit {
    fn from_status(rank: u32, round: u64, st: std::process::ExitStatus, stopped: bool) -> Self {
        #[cfg(unix)]
        let signal = std::os::unix::process::ExitStatusExt::signal(&st);
        #[cfg(not(unix))]
        let signal = None;
        RankExit {
            rank,
            round,
            code: st.code(),
            signal,
            stopped,
        }
    }

    fn failed(&self) -> bool {
        self.code != Some(0)
    }

    /// `was killed by signal 9 (SIGKILL)` / `failed (exit status 1)`.
    fn how(&self) -> String {
        match (self.signal, self.code) {
            (Some(s), _) => {
                let name = match s {
                    2 => " (SIGINT)",
                    6 => " (SIGABRT)",
                    7 => " (SIGBUS)",
                    9 => " (SIGKILL)",
                    11 => " (SIGSEGV)",
                    15 => " (SIGTERM)",
                    _ => "",
                };
                format!("was killed by signal {s}{name}")
            }
            (None, Some(c)) => format!("failed (exit status {c})"),
            (None, None) => "failed".into(),
        }
    }
}

fn ranks_list(v: &[u32]) -> String {
    let s: Vec<String> = v.iter().map(u32::to_string).collect();
    format!(
        "{} {}",
        if v.len() == 1 { "rank" } else { "ranks" },
        s.join(", ")
    )
}

/// The line that says which rank brought a `--spawn` run down: the first
/// to die (earliest poll round; within a round one killed by a signal it
/// was not sent by `--spawn`, then the lowest rank), then the ranks that
/// failed after it and those `--spawn` stopped. `None` if none failed.
fn blame(n: u32, exits: &[RankExit]) -> Option<String> {
    let mut failed: Vec<&RankExit> = exits.iter().filter(|e| e.failed() && !e.stopped).collect();
    failed.sort_by_key(|e| (e.round, e.signal.is_none(), e.rank));
    let first = failed.first()?;
    let mut line = format!("rank {} of {n} {}", first.rank, first.how());
    let after: Vec<u32> = {
        let mut v: Vec<u32> = failed[1..].iter().map(|e| e.rank).collect();
        v.sort_unstable();
        v
    };
    if !after.is_empty() {
        line.push_str(&format!("; {} failed after it", ranks_list(&after)));
    }
    let mut stopped: Vec<u32> = exits.iter().filter(|e| e.stopped).map(|e| e.rank).collect();
    stopped.sort_unstable();
    if !stopped.is_empty() {
        let verb = if stopped.len() == 1 { "was" } else { "were" };
        line.push_str(&format!(
            "; {} {verb} still running and stopped (hung? the errors above name what each rank waited for)",
            ranks_list(&stopped)
        ));
    }
    Some(line)
}

/// Copies a rank's stderr to `sink` line by line, each line prefixed with
/// `[rank r] ` and written whole under the sink's lock, so the ranks' lines
/// never interleave mid-line. From its first `error: ` line on (the rank's
/// last words, often the same on every rank: no CANN, a bad variable) the
/// lines are held back and returned, for [`merge_errors`] to print once
/// for every rank that said them.
fn relay_stderr<W: Write + Send + 'static>(
    rank: u32,
    from: impl std::io::Read + Send + 'static,
    sink: std::sync::Arc<std::sync::Mutex<W>>,
    quiet: std::sync::Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    std::thread::spawn(move || {
        use std::io::BufRead;
        let reader = std::io::BufReader::new(from);
        let mut held = Vec::new();
        for line in reader.split(b'\n') {
            let Ok(line) = line else { break };
            // The reader of stdout left: the ranks' complaints about rank 0
            // leaving with it are noise.
            if line == STDOUT_CLOSED_MARKER.as_bytes() {
                quiet.store(true, Ordering::Relaxed);
            }
            if quiet.load(Ordering::Relaxed) {
                continue;
            }
            if !held.is_empty() || line.starts_with(b"error: ") {
                held.push(line);
                continue;
            }
            let mut text = format!("[rank {rank}] ").into_bytes();
            text.extend_from_slice(&line);
            text.push(b'\n');
            if let Ok(mut w) = sink.lock() {
                let _ = w.write_all(&text);
                let _ = w.flush();
            }
        }
        if quiet.load(Ordering::Relaxed) {
            held.clear();
        }
        held
    })
}

/// `0-3, 5, 7-8`: sorted ranks as ranges.
fn rank_ranges(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// The ranks' held error lines ([`relay_stderr`]), each distinct block
/// once, prefixed with the ranks that wrote it (`[ranks 0-7] error: ...`),
/// in the order of the lowest rank of each.
fn merge_errors(held: Vec<(u32, Vec<Vec<u8>>)>) -> Vec<u8> {
    let mut blocks: Vec<(Vec<Vec<u8>>, Vec<u32>)> = Vec::new();
    for (rank, lines) in held {
        if lines.is_empty() {
            continue;
        }
        match blocks.iter_mut().find(|(b, _)| *b == lines) {
            Some((_, ranks)) => ranks.push(rank),
            None => blocks.push((lines, vec![rank])),
        }
    }
    let mut out = Vec::new();
    for (lines, mut ranks) in blocks {
        ranks.sort_unstable();
        let prefix = match ranks.as_slice() {
            [r] => format!("[rank {r}] "),
            _ => format!("[ranks {}] ", rank_ranges(&ranks)),
        };
        for l in lines {
            out.extend_from_slice(prefix.as_bytes());
            out.extend_from_slice(&l);
            out.push(b'\n');
        }
    }
    out
}

/// What [`supervise`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Every rank exited with 0.
    Ok,
    /// A rank failed: the [`blame`] line.
    Failed(String),
    /// Ranks still ran at the deadline: how many.
    TimedOut(usize),
    /// Rank 0's stdout was closed (`| head`): the reader wants no more, so
    /// the others were stopped at once; nobody is to blame.
    StdoutClosed,
}

/// The line a `--spawn` rank writes on stderr when its stdout was closed,
/// before it leaves the communicator: `--spawn` then drops the other
/// ranks' lines about losing it (not relayed).
const STDOUT_CLOSED_MARKER: &str = "hccl test --spawn: stdout closed";

/// Rank 0's stdout error, said to `--spawn` first when the reader closed it.
fn stdout_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe && std::env::var_os(SPAWNED_VAR).is_some() {
        eprintln!("{STDOUT_CLOSED_MARKER}");
    }
    e.into()
}

/// Exit status of a `--spawn` rank whose stdout was closed under it (as a
/// shell reports a process ended by SIGPIPE: 128 + 13), so that `--spawn`
/// stops the run quietly instead of blaming the ranks that lost it.
pub(crate) const EXIT_STDOUT_CLOSED: u8 = 141;

/// Waits for `kids` (rank, process). When one fails, the others get
/// [`GRACE`] to end on their own, then are stopped; at `deadline` (`None`:
/// never) all are stopped. A rank that exits with [`EXIT_STDOUT_CLOSED`]
/// stops the others at once (and sets `quiet`).
fn supervise(
    n: u32,
    kids: &mut [(u32, Child)],
    deadline: Option<Instant>,
    quiet: &AtomicBool,
) -> std::io::Result<Verdict> {
    let mut exits: Vec<Option<RankExit>> = vec![None; kids.len()];
    let mut stop_at: Option<Instant> = None;
    let mut round = 0u64;
    loop {
        round += 1;
        for (i, (r, k)) in kids.iter_mut().enumerate() {
            if exits[i].is_none() {
                if let Some(st) = k.try_wait()? {
                    exits[i] = Some(RankExit::from_status(*r, round, st, false));
                }
            }
        }
        let running = exits.iter().filter(|e| e.is_none()).count();
        let closed = exits
            .iter()
            .flatten()
            .any(|e| e.code == Some(i32::from(EXIT_STDOUT_CLOSED)));
        if closed {
            quiet.store(true, Ordering::Relaxed);
            stop_at = Some(Instant::now());
        }
        if stop_at.is_none() && exits.iter().flatten().any(RankExit::failed) {
            stop_at = Some(Instant::now() + GRACE);
        }
        let now = Instant::now();
        let timed_out = running > 0 && deadline.is_some_and(|d| now >= d) && stop_at.is_none();
        if running == 0 || timed_out || stop_at.is_some_and(|t| now >= t) {
            for (i, (r, k)) in kids.iter_mut().enumerate() {
                if exits[i].is_none() {
                    let _ = k.kill();
                    let st = k.wait()?;
                    exits[i] = Some(RankExit::from_status(*r, round, st, true));
                }
            }
            if timed_out {
                return Ok(Verdict::TimedOut(running));
            }
            if closed {
                return Ok(Verdict::StdoutClosed);
            }
            let all: Vec<RankExit> = exits.into_iter().flatten().collect();
            return Ok(match blame(n, &all) {
                Some(line) => Verdict::Failed(line),
                None => Verdict::Ok,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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

/// Most rank processes `--spawn` starts: every rank holds a connection to
/// every other, so past about 1,000 ranks a default `ulimit -n` (1024) runs
/// out, and on a laptop the processes alone swamp the host long before
/// (a trial's `--spawn 100000` had 1,335 processes running within 5 s).
pub(crate) const SPAWN_MAX: u32 = 1024;

/// `--spawn N`: runs this program again as `n` ranks on 127.0.0.1
/// (torchrun-style `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`,
/// same arguments) and waits for them. Rank 0 prints the table; every
/// rank's stderr is relayed whole line by whole line, prefixed `[rank r] `,
/// except its closing `error: ` lines, printed once at the end for all the
/// ranks that wrote the same (`[ranks 0-7] error: ...`).
///
/// Exit status: 0 when every rank exits with 0; 1 when a rank fails (the
/// others get a few seconds to fail on their own and print why, then are
/// stopped; the report names the rank that died first, and how, e.g.
/// `rank 2 of 4 was killed by signal 9 (SIGKILL); ranks 0, 1, 3 failed
/// after it`) or they are not all done within `timeout` (`None`: no
/// limit). 0 too when rank 0's stdout was closed (`| head`): the others
/// are stopped at once, and nobody is blamed. Each rank watches its stdin,
/// a pipe from this process, and stops when it closes: interrupting or
/// killing `--spawn` ends its ranks at once.
///
/// # Errors
/// The program cannot be found or started.
pub(crate) fn spawn(n: u32, timeout: Option<Duration>) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("--spawn: cannot find this program")?;
    let port = free_port()?;
    let sink = std::sync::Arc::new(std::sync::Mutex::new(std::io::stderr()));
    let quiet = std::sync::Arc::new(AtomicBool::new(false));
    let mut relays = Vec::with_capacity(n as usize);
    let mut kids: Vec<(u32, Child)> = Vec::with_capacity(n as usize);
    for r in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(std::env::args_os().skip(1))
            .env(SPAWNED_VAR, "1")
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("LOCAL_WORLD_SIZE", n.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            // The rank watches this pipe: when --spawn ends, however it was
            // ended (Ctrl-C, kill), the pipe closes and the rank stops.
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // --spawn numbers the ranks: another launcher's numbers (this
        // program run under mpirun) would disagree with RANK/WORLD_SIZE.
        for var in [
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "PMI_RANK",
            "PMI_SIZE",
            "MPI_LOCALNRANKS",
        ] {
            cmd.env_remove(var);
        }
        // Loopback unless the user chose an address or interfaces (HCCL_IF_IP
        // would override HCCL_SOCKET_IFNAME, silently).
        if std::env::var_os("HCCL_IF_IP").is_none()
            && std::env::var_os("HCCL_SOCKET_IFNAME").is_none()
        {
            cmd.env("HCCL_IF_IP", "127.0.0.1");
        }
        match cmd.spawn() {
            Ok(mut c) => {
                if let Some(err) = c.stderr.take() {
                    relays.push((r, relay_stderr(r, err, sink.clone(), quiet.clone())));
                }
                kids.push((r, c));
            }
            Err(e) => {
                kill_all(&mut kids);
                return Err(e).with_context(|| format!("--spawn: cannot start rank {r}"));
            }
        }
    }
    let verdict = supervise(n, &mut kids, timeout.map(|t| Instant::now() + t), &quiet);
    if verdict.is_err() {
        kill_all(&mut kids);
    }
    // Every child has ended: its pipe is closed; print its last lines
    // first, each error once for the ranks that gave it.
    let held = relays
        .into_iter()
        .map(|(r, h)| (r, h.join().unwrap_or_default()))
        .collect();
    if let Ok(mut w) = sink.lock() {
        let _ = w.write_all(&merge_errors(held));
        let _ = w.flush();
    }
    match verdict.context("--spawn: cannot wait for the ranks")? {
        Verdict::Ok => Ok(ExitCode::SUCCESS),
        Verdict::Failed(line) => {
            eprintln!("error: --spawn: {line}");
            Ok(ExitCode::from(1))
        }
        Verdict::TimedOut(running) => {
            eprintln!(
                "error: --spawn: {running} of {n} ranks still running after {} s (--spawn-timeout); stopped them",
                timeout.unwrap_or_default().as_secs()
            );
            Ok(ExitCode::from(1))
        }
        // As `hccl test | head` without --spawn: the reader wants no more.
        Verdict::StdoutClosed => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(rank: u32, round: u64, code: Option<i32>, signal: Option<i32>) -> RankExit {
        RankExit {
            rank,
            round,
            code,
            signal,
            stopped: false,
        }
    }

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(a, _)| *a == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn ranks_with_different_flags_are_named_flag_by_flag() {
        let line = |n: &str| {
            format!("all_reduce -b 8192 -e 8192 -i default -d fp32 -o sum -r 0 -n {n} -w 1 -c 1 --seed 1 --transport tcp")
        };
        assert_eq!(settings_mismatch(&[line("2"), line("2")]), None);
        let m = settings_mismatch(&[line("2"), line("2"), line("3")]).unwrap();
        assert!(m.contains(": -n 2 on rank 0, -n 3 on rank 2; start"), "{m}");
        let m = settings_mismatch(&[line("2"), format!("{} -p 8", line("2"))]).unwrap();
        assert!(m.contains("no -p on rank 0, -p 8 on rank 1"), "{m}");
        let m =
            settings_mismatch(&[line("2"), line("2").replace("all_reduce", "broadcast")]).unwrap();
        assert!(
            m.contains("all_reduce on rank 0, broadcast on rank 1"),
            "{m}"
        );
        let block = settings_block(&line("2"));
        assert_eq!(block.len(), SETTINGS_BYTES);
        assert!(block.starts_with(line("2").as_bytes()));
    }

    #[test]
    fn launchers_are_told_apart_and_give_their_local_rank_count() {
        let l = launcher_from(&env(&[
            ("OMPI_COMM_WORLD_SIZE", "16"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "8"),
        ]))
        .unwrap();
        assert_eq!(
            (l.by, l.world_size, l.local),
            (
                "mpirun (Open MPI)",
                Some(16),
                Some(("OMPI_COMM_WORLD_LOCAL_SIZE", 8))
            )
        );
        let l = launcher_from(&env(&[("PMI_RANK", "0"), ("PMI_SIZE", "4")])).unwrap();
        assert_eq!(
            (l.by, l.world_size, l.local),
            ("PMI (MPICH/Slurm)", Some(4), None)
        );
        let l = launcher_from(&env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "4"),
        ]))
        .unwrap();
        assert_eq!(l.by, "torchrun-style RANK/WORLD_SIZE");
        assert_eq!(l.local, Some(("LOCAL_WORLD_SIZE", 4)));
        assert_eq!(launcher_from(&env(&[])), None);
    }

    #[test]
    fn npus_are_checked_against_the_local_ranks_and_the_world() {
        let l = |world, local| Launch {
            by: "mpirun (Open MPI)",
            world_size: world,
            local,
        };
        let note = check_npus(8, &l(Some(16), Some(("OMPI_COMM_WORLD_LOCAL_SIZE", 8)))).unwrap();
        assert!(note.contains("matches the 8 ranks"), "{note}");
        assert!(note.contains("2 nodes of 8"), "{note}");
        let e = check_npus(8, &l(Some(8), Some(("OMPI_COMM_WORLD_LOCAL_SIZE", 4)))).unwrap_err();
        assert!(e.contains("pass -p 4"), "{e}");
        let e = check_npus(3, &l(Some(8), None)).unwrap_err();
        assert!(e.contains("does not divide the world of 8 ranks"), "{e}");
        let note = check_npus(4, &l(Some(8), None)).unwrap();
        assert!(note.contains("not checked on this node"), "{note}");
        assert!(check_npus(0, &l(None, None)).is_err());
    }

    #[test]
    fn an_error_every_rank_gives_is_printed_once_with_its_ranks() {
        let err = |t: &str| vec![t.as_bytes().to_vec()];
        let same = "error: libhccl.so not found in $ASCEND_HOME_PATH/lib64";
        let held = vec![
            (0, err(same)),
            (1, err(same)),
            (2, vec![]),
            (3, err("error: rank 3 timed out")),
            (4, err(same)),
            (5, err(same)),
        ];
        assert_eq!(
            String::from_utf8(merge_errors(held)).unwrap(),
            format!("[ranks 0-1, 4-5] {same}\n[rank 3] error: rank 3 timed out\n")
        );
        assert_eq!(rank_ranges(&[0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
    }

    #[test]
    fn relayed_lines_are_prefixed_and_errors_held_back() {
        let sink = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let quiet = std::sync::Arc::new(AtomicBool::new(false));
        let text = b"warning: slow\nerror: no CANN\n  more words\n".to_vec();
        let held = relay_stderr(2, std::io::Cursor::new(text), sink.clone(), quiet)
            .join()
            .unwrap();
        assert_eq!(sink.lock().unwrap().as_slice(), b"[rank 2] warning: slow\n");
        assert_eq!(
            held,
            vec![b"error: no CANN".to_vec(), b"  more words".to_vec()]
        );
    }

    #[test]
    fn blame_names_the_rank_killed_first_not_rank_0() {
        // Rank 2 SIGKILLed; 0, 1 and 3 lose it and exit 1, seen in the same
        // poll round (0, 1) or later (3).
        let exits = [
            exit(0, 5, Some(1), None),
            exit(1, 5, Some(1), None),
            exit(2, 5, None, Some(9)),
            exit(3, 6, Some(1), None),
        ];
        assert_eq!(
            blame(4, &exits).unwrap(),
            "rank 2 of 4 was killed by signal 9 (SIGKILL); ranks 0, 1, 3 failed after it"
        );
        // An earlier round wins over a signal seen later; stopped ranks are
        // listed apart.
        let mut exits = [
            exit(0, 7, None, Some(15)),
            exit(1, 3, Some(2), None),
            exit(2, 9, Some(1), None),
            exit(3, 9, None, Some(9)),
        ];
        exits[3].stopped = true;
        assert_eq!(
            blame(4, &exits).unwrap(),
            "rank 1 of 4 failed (exit status 2); ranks 0, 2 failed after it; rank 3 was still running and stopped (hung? the errors above name what each rank waited for)"
        );
        assert_eq!(
            blame(2, &[exit(0, 1, Some(0), None), exit(1, 1, Some(0), None)]),
            None
        );
    }

    #[cfg(unix)]
    #[test]
    fn supervise_blames_the_killed_rank_and_relays_whole_lines() {
        let sink = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let scripts = [
            "sleep 0.5; printf 'lost rank 2\\n' >&2; exit 1",
            "sleep 0.5; printf 'part one, ' >&2; sleep 0.1; printf 'part two\\n' >&2; exit 1",
            "kill -9 $$",
            "sleep 0.5; exit 1",
        ];
        let mut kids = Vec::new();
        let mut relays = Vec::new();
        for (r, script) in scripts.iter().enumerate() {
            let mut c = Command::new("sh")
                .args(["-c", script])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            relays.push(relay_stderr(
                r as u32,
                c.stderr.take().unwrap(),
                sink.clone(),
                std::sync::Arc::new(AtomicBool::new(false)),
            ));
            kids.push((r as u32, c));
        }
        let v = supervise(
            4,
            &mut kids,
            Some(Instant::now() + Duration::from_secs(60)),
            &AtomicBool::new(false),
        )
        .unwrap();
        for h in relays {
            h.join().unwrap();
        }
        assert_eq!(
            v,
            Verdict::Failed(
                "rank 2 of 4 was killed by signal 9 (SIGKILL); ranks 0, 1, 3 failed after it"
                    .into()
            )
        );
        let text = String::from_utf8(sink.lock().unwrap().clone()).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            vec!["[rank 0] lost rank 2", "[rank 1] part one, part two"]
        );
    }
}

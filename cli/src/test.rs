//! `hccl test` (also the `hccl-test` binary): CANN's `hccl_test` and
//! nccl-tests on the simulator.
//!
//! Flags keep hccl_test's names, meanings and defaults (CANN
//! `tools/hccl_test` README and `hccl_test_common.cc`): `-b/-e` 64M,
//! `-i` (max-min)/10, `-f` off, `-o sum`, `-r 0`, `-d fp32`, `-n 20`,
//! `-w 5`, `-c 1`, `-p` = the NPUs of a server. The cluster defaults to one
//! simulated Atlas 800T A2 server.
//!
//! Iterations: each row runs `-w` warmup and `-n` timed ops back to back
//! in virtual time, and reports, for the slowest rank, `(its end of the
//! last timed op - its start of the first) / n`: the window each rank's
//! stream events measure in hccl_test. The simulator is deterministic, but
//! back-to-back ops are not independent (a rank that finishes early starts
//! the next op early and waits in it), so `-w`/`-n` can move the figure
//! slightly, as on hardware. The check runs once per row, on a separate
//! data-mode run of one op.

// Explicit paths: this file is also the `hccl-test` binary's module
// (`#[path]` from src/bin), where implicit child paths would differ.
#[path = "test/check.rs"]
mod check;
#[path = "test/cluster.rs"]
pub(crate) mod cluster;
#[path = "test/output.rs"]
mod output;
#[path = "test/plot.rs"]
mod plot;
#[path = "test/runner.rs"]
mod runner;
#[path = "test/sizes.rs"]
pub(crate) mod sizes;
#[path = "test/tcp.rs"]
mod tcp;
#[path = "test/trace.rs"]
pub(crate) mod trace;
#[path = "test/workload.rs"]
pub(crate) mod workload;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};
use hccl_algos::algo::{self, AlgoSpec};
use hccl_algos::collective::CollectiveKind;
use hccl_algos::select::{self, HcclAlgo};
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::busbw_factor;
use indicatif::{ProgressBar, ProgressStyle};

use hccl::profiling::{self, LinkInfo, OpRecord, ProfileWriter, ProfilingConfig};

use check::Check;
use output::{ClusterInfo, Row};
use runner::{Recorder, RowRun};
use workload::TestCollective;

use crate::memory_size::{available_memory, memory_limit};
use crate::sim_size::{self, SimSize};

/// The data-mode check's memory limit and what set it: `--check-memory`,
/// else half of `available` (the rest for the simulator and the machine's
/// other work), else [`crate::memory_size::DATA_LIMIT_BYTES`]
/// ([`memory_limit`]).
fn check_limit(flag: Option<u64>, available: Option<u64>) -> (u64, String) {
    let (limit, why) = memory_limit("--check-memory", flag, available);
    match flag {
        Some(_) => (limit, why),
        None => (limit, format!("{why}; --check-memory to change")),
    }
}

/// The cluster when neither --preset, --rank-table nor --fabric is given.
const DEFAULT_PRESET: &str = "atlas800t-a2";

/// Timing-only or data mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeArg {
    /// Real bytes: every row's result is checked against the reference.
    Data,
    /// Lengths only (for large clusters): the check is skipped.
    Timing,
}

/// Where the ranks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TransportArg {
    /// The simulator (hccl-sim), every rank in this process; simulated times.
    Sim,
    /// Real processes over the TCP transport (mpirun, torchrun-style env,
    /// or `--spawn N`); measured times.
    Tcp,
    /// Real processes on Ascend NPUs through CANN's HCCL (hccl-rs built
    /// with `--features ascend`; `HCCL_ASCEND_MODE` picks native or
    /// schedule): launched as with tcp, which carries CANN's root info.
    Ascend,
}

impl TransportArg {
    /// The flag's value.
    fn name(self) -> &'static str {
        match self {
            TransportArg::Sim => "sim",
            TransportArg::Tcp => "tcp",
            TransportArg::Ascend => "ascend",
        }
    }
}

/// What `hccl test` / `hccl-test` does, for `--help`.
pub(crate) const ABOUT: &str = "Benchmark a collective over a size sweep, as CANN's hccl_test / nccl-tests: on a simulated cluster, or over TCP between processes (--transport tcp)";

/// Arguments of `hccl test` (hccl_test's flags, plus the simulator's).
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Sizes take K, M, G suffixes (powers of 1024). Times are simulated (hccl-sim), or measured with --transport tcp.\n\
                  Example: hccl test all_reduce -b 8K -e 64M -f 2 -d fp32 -o sum -p 8"
)]
pub(crate) struct TestArgs {
    /// The collective (hccl_test's binary name without `_test`).
    #[arg(value_enum)]
    pub collective: TestCollective,
    /// Smallest size in bytes (K/M/G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "64M", value_parser = parse_size_arg, allow_hyphen_values = true)]
    pub minbytes: u64,
    /// Largest size in bytes (K/M/G suffixes).
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size_arg, allow_hyphen_values = true)]
    pub maxbytes: u64,
    /// Size increment in bytes; default (max - min) / 10.
    #[arg(short = 'i', long = "stepbytes", value_parser = parse_size_arg, allow_hyphen_values = true)]
    pub stepbytes: Option<u64>,
    /// Size multiplication factor (> 1); wins over -i.
    #[arg(short = 'f', long = "stepfactor", allow_negative_numbers = true)]
    pub stepfactor: Option<f64>,
    /// Reduction: sum, prod, max, min, avg.
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = parse_op)]
    pub op: ReduceOp,
    /// Root rank of broadcast, reduce, scatter and gather.
    #[arg(short = 'r', long = "root", default_value_t = 0, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub root: u32,
    /// Data type: int8 int16 int32 int64 uint8 uint16 uint32 uint64 fp16 fp32 fp64 bf16 (HCCL's names such as bfp16 also accepted).
    #[arg(short = 'd', long = "datatype", default_value = "fp32", value_parser = parse_dtype)]
    pub datatype: DataType,
    /// Timed iterations per size (at least 1).
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub iters: u32,
    /// Warmup iterations per size (not timed).
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub warmup_iters: u32,
    /// Check results: 1 on, 0 off.
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1), allow_negative_numbers = true)]
    pub check: u8,
    /// NPUs per server (default: all NPUs of the preset's server).
    #[arg(short = 'p', long = "npus", value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub npus: Option<u32>,
    /// Servers of the preset.
    #[arg(long, default_value_t = 1, conflicts_with_all = ["rank_table", "fabric"], value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub servers: u32,
    /// Cluster preset: atlas800t-a2 (default), atlas800-910a, atlas900-a3-superpod, ring, full-mesh, leaf-spine, torus2d.
    #[arg(long, conflicts_with_all = ["rank_table", "fabric"])]
    pub preset: Option<String>,
    /// An HCCL rank table (JSON 1.0 or 1.2) instead of a preset.
    #[arg(long, value_name = "FILE", conflicts_with = "fabric")]
    pub rank_table: Option<PathBuf>,
    /// A fabric file instead of a preset.
    #[arg(long, value_name = "FILE")]
    pub fabric: Option<PathBuf>,
    /// Fixed cost of every op in microseconds, before its first step: the host launch and stream synchronisation a wall-clock hccl_test includes. Default: the fabric's (0 for presets).
    #[arg(long = "op-overhead", value_name = "US", value_parser = parse_overhead, allow_negative_numbers = true)]
    pub op_overhead_us: Option<f64>,
    /// Algorithm: a name (ring, mesh, H-D_R, NHR, NB, pairwise, tree, pipeline, oneshot, doubling), HCCL_ALGO syntax, or `all` for every algorithm valid for the collective. Default: $HCCL_ALGO, else the selector.
    #[arg(long)]
    pub algo: Option<String>,
    /// A fault plan for the simulator (JSON).
    #[arg(long, value_name = "FILE")]
    pub faults: Option<PathBuf>,
    /// Seed of the simulator and of the check's inputs.
    #[arg(long, default_value_t = 0, value_parser = crate::flag_number::whole::<u64>, allow_negative_numbers = true)]
    pub seed: u64,
    /// data: check results; timing: lengths only, for large clusters.
    #[arg(long, value_enum, default_value = "data")]
    pub mode: ModeArg,
    /// `--check-memory SIZE`, bytes: the simulator's data-mode check's
    /// memory limit ([`check_limit`]); refused with `--transport tcp`.
    #[arg(long, value_name = "SIZE", value_parser = crate::memory_size::parse_memory, allow_hyphen_values = true,
        help = concat!("Largest host memory the simulator's data-mode check may use (not with --transport tcp): ", crate::memory_size::size_help!(),
            ". Default: half of the memory available (MemAvailable), 8G where that is unknown"))]
    pub check_memory: Option<u64>,
    /// The simulator's size guard: `--max-ranks`, `--sim-memory`.
    #[command(flatten)]
    pub limits: crate::sim_size::Limits,
    /// Write the rows as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a Chrome trace (Perfetto) of one op per row.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write an SVG of busbw against size, one line per algorithm.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// sim: simulated cluster, simulated times; tcp: ranks are processes
    /// (under mpirun, torchrun-style env, or --spawn N), measured times.
    /// Default: tcp when a launcher (Open MPI, PMI, torchrun-style
    /// RANK/WORLD_SIZE) started more than one rank, else sim.
    #[arg(long, value_enum)]
    pub transport: Option<TransportArg>,
    /// table: hccl-rs's columns (size, count, dtype, redop, root, time,
    /// algbw, busbw, algorithm, check); hccl_test: hccl_test's own
    /// `data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:`.
    #[arg(long, value_enum, default_value = "table")]
    pub format: output::Format,
    /// With --transport tcp: start N rank processes on 127.0.0.1 and wait for them.
    #[arg(long, value_name = "N", value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub spawn: Option<u32>,
    /// Seconds --spawn waits for its ranks before stopping them; 0: never
    /// (as HCCL_EXEC_TIMEOUT=0).
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = crate::flag_number::whole::<u64>, allow_negative_numbers = true)]
    pub spawn_timeout: u64,
}

pub(crate) fn parse_size_arg(s: &str) -> Result<u64, String> {
    sizes::parse_size(s).map_err(|e| e.to_string())
}

/// Microseconds, finite and in 0 ..= 10^9 (1000 s).
fn parse_overhead(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e9).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a number of microseconds between 0 and 1e9"
        )),
    }
}

fn parse_op(s: &str) -> Result<ReduceOp, String> {
    s.parse::<ReduceOp>().map_err(|e| e.to_string())
}

fn parse_dtype(s: &str) -> Result<DataType, String> {
    s.parse::<DataType>().map_err(|e| e.to_string())
}

/// An error in the environment or in a file (not in the arguments): one
/// line, no usage, exit status 1.
fn input_error(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(1)
}

/// A usage error in clap's style (one line, usage, hint), exit status 2.
fn usage_error(bin: &'static str, msg: impl std::fmt::Display) -> ExitCode {
    let mut cmd = TestArgs::augment_args(clap::Command::new(bin));
    let e = cmd.error(clap::error::ErrorKind::ValueValidation, msg);
    let _ = e.print();
    ExitCode::from(2)
}

/// How the algorithm of each row is chosen.
enum AlgoChoice {
    /// The selector (α–β–γ model over the fabric's costs).
    Selector,
    /// One spec for every row, from `--algo` or `HCCL_ALGO`.
    Forced(AlgoSpec, &'static str),
    /// `--algo all`.
    All,
}

fn parse_algo(
    value: &str,
    kind: CollectiveKind,
    source: &'static str,
) -> Result<AlgoChoice, String> {
    let v = value.trim();
    if v.eq_ignore_ascii_case("all") {
        return Ok(AlgoChoice::All);
    }
    if !v.contains('=') {
        return v
            .parse::<AlgoSpec>()
            .map(|s| AlgoChoice::Forced(s, source))
            .map_err(|e| format!("{source} {v:?}: {e}"));
    }
    let h = HcclAlgo::parse(v).map_err(|e| {
        let e = e.to_string();
        format!("{source}: {}", e.trim_start_matches("HCCL_ALGO: "))
    })?;
    Ok(match h.spec_for(kind) {
        Some(s) => AlgoChoice::Forced(s, source),
        None => AlgoChoice::Selector,
    })
}

/// The algorithm column: what ran on `layout` (`algo::resolved`: an
/// `HCCL_ALGO` of `level0:NA;level1:ring` on one server ran mesh), not the
/// setting.
fn display_algo(
    kind: CollectiveKind,
    spec: &AlgoSpec,
    layout: &hccl_algos::layout::GroupLayout,
) -> String {
    match kind {
        CollectiveKind::BatchSendRecv | CollectiveKind::SendRecv => "p2p".into(),
        CollectiveKind::Barrier => "barrier".into(),
        _ => algo::resolved(spec, layout).to_string(),
    }
}

/// Runs `hccl test`; `bin` is the program name for usage errors
/// (`hccl test` or `hccl-test`).
///
/// Exit status: 0 when every row passed or was not checked, 1 when a
/// check failed, the run could not finish, or an environment variable or
/// file is bad, 2 for bad flags (a simulated cluster above the size
/// guard's limits, [`crate::sim_size::check`], included).
///
/// # Errors
/// Files that cannot be read or written, a simulation that fails.
pub(crate) fn run(a: TestArgs, bin: &'static str) -> anyhow::Result<ExitCode> {
    let coll = a.collective;
    let kind = coll.kind();
    let profiling = match ProfilingConfig::from_env() {
        Ok(p) => p,
        Err(e) => return Ok(input_error(e)),
    };
    // Before the sweep (or any rank), not after it: a file must be
    // writable there.
    if let Some(p) = &profiling {
        if let Err(e) = p.check_writable() {
            return Ok(input_error(e));
        }
    }
    if a.iters == 0 {
        return Ok(usage_error(
            bin,
            "-n/--iters 0: run at least one timed iteration",
        ));
    }
    if a.format == output::Format::HcclTest
        && a.algo
            .as_deref()
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("all"))
    {
        return Ok(usage_error(
            bin,
            "--format hccl_test has no algorithm column: --algo all would print rows that cannot be told apart; use the default --format table",
        ));
    }
    // Under a launcher that started several ranks, the ranks are the job
    // (hccl_test under mpirun); --transport sim keeps one simulation each.
    // A malformed launcher variable fails here as Comm::from_env would,
    // rather than passing for "no launcher" and running the simulator.
    if tcp::launcher().is_some() {
        if let Err(e) = hccl::comm::launch::rank_and_world_size(&|k| std::env::var(k).ok()) {
            return Ok(input_error(e));
        }
    }
    let launched = launched_as_ranks();
    let transport = a.transport.unwrap_or(if launched.is_some() {
        TransportArg::Tcp
    } else {
        TransportArg::Sim
    });
    if transport != TransportArg::Sim {
        let auto = if a.transport.is_none() {
            launched
        } else {
            None
        };
        return run_tcp(&a, bin, auto, transport);
    }
    if a.spawn.is_some() {
        return Ok(usage_error(
            bin,
            "--spawn starts real processes: it needs --transport tcp (or ascend)",
        ));
    }
    if let Some(launcher) = launched {
        eprintln!(
            "{bin}: note: started as one of several ranks ({launcher}) with --transport sim: every process runs its own simulation; drop --transport sim (or pass --transport tcp) to run one job over TCP across the processes"
        );
    }
    // The variables a Comm would refuse (HCCL_EXEC_TIMEOUT=abc,
    // HCCL_DETERMINISTIC=maybe, HCCL_BACKEND=foo) are refused here too.
    if let Err(e) = hccl::comm::check_env() {
        return Ok(input_error(e));
    }
    let faults = match &a.faults {
        Some(path) => match hccl_sim::faults::FaultPlan::from_file(path) {
            Ok(p) => Some(p),
            Err(e) => return Ok(input_error(format!("--faults: {e}"))),
        },
        None => None,
    };
    // The replay line must rebuild the run: HCCL_ALGO picks its algorithms.
    let replay = {
        let cmd = std::env::args().collect::<Vec<_>>().join(" ");
        match std::env::var("HCCL_ALGO") {
            Ok(v) if !v.trim().is_empty() && a.algo.is_none() => format!("HCCL_ALGO='{v}' {cmd}"),
            _ => cmd,
        }
    };
    let sizes = match sweep_sizes(&a) {
        Ok(s) => s,
        Err(e) => return Ok(usage_error(bin, e)),
    };
    // A sweep can run for minutes: find an unwritable output path first.
    if let Err(m) = check_output_paths(&a) {
        return Ok(input_error(m));
    }
    let source = match (&a.rank_table, &a.fabric) {
        (Some(p), _) => cluster::Source::RankTable(p),
        (None, Some(p)) => cluster::Source::FabricFile(p),
        (None, None) => cluster::Source::Preset {
            name: a.preset.as_deref().unwrap_or(DEFAULT_PRESET),
            servers: a.servers,
            npus: a.npus,
        },
    };
    // The simulator's size guard, as hccl sim's: a preset's ranks before
    // its fabric is built, a rank table's or fabric file's once it is read.
    let available = available_memory();
    let guard = |ranks: u64, asked_by: &str| {
        let size = SimSize {
            ranks,
            ops: u64::from(a.warmup_iters) + u64::from(a.iters),
        };
        sim_size::check(size, asked_by, a.limits, available)
    };
    if let Some(ranks) = cluster::preset_ranks(&source) {
        if let Err(e) = guard(ranks, &preset_asked_by(&a)) {
            return Ok(usage_error(bin, e));
        }
    }
    let built = match cluster::build(&source) {
        Ok(c) => c,
        Err(cluster::ClusterError::Usage(m)) => return Ok(usage_error(bin, m)),
        Err(e) => return Err(e).context("cannot build the cluster"),
    };
    let file_flag = match (&a.rank_table, &a.fabric) {
        (Some(p), _) => Some(format!("--rank-table {}", p.display())),
        (None, Some(p)) => Some(format!("--fabric {}", p.display())),
        (None, None) => None,
    };
    if let Some(flag) = file_flag {
        if let Err(e) = guard(u64::from(built.fabric.world_size()), &flag) {
            return Ok(usage_error(bin, e));
        }
    }
    let mut built = built;
    if let Some(us) = a.op_overhead_us {
        built
            .fabric
            .set_op_overhead_ns((us * 1000.0).round() as u64);
    }
    let fabric = &built.fabric;
    let n = fabric.world_size();
    if let (Some(p), false) = (a.npus, matches!(source, cluster::Source::Preset { .. })) {
        if cluster::shape(fabric).1 != Some(p) {
            return Ok(usage_error(
                bin,
                format!(
                    "-p/--npus {p} does not match the {} ({}); drop -p",
                    built.origin,
                    cluster::shape(fabric).1.map_or_else(
                        || "servers of different sizes".to_string(),
                        |k| format!("{k} NPUs per server")
                    )
                ),
            ));
        }
    }
    if let Some(m) = root_outside(a.collective, a.root, n) {
        return Ok(usage_error(bin, m));
    }
    let layout = cluster::layout(fabric);
    let costs = cluster::cost_model(fabric);
    let env_algo = std::env::var("HCCL_ALGO")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let choice = match (&a.algo, &env_algo) {
        (Some(v), _) => parse_algo(v, kind, "--algo"),
        (None, Some(v)) => parse_algo(v, kind, "HCCL_ALGO"),
        (None, None) => Ok(AlgoChoice::Selector),
    };
    let choice = match choice {
        Ok(c) => c,
        Err(m) if a.algo.is_none() => return Ok(input_error(m)),
        Err(m) => return Ok(usage_error(bin, m)),
    };
    // HCCL_REDUCE_PRECISION=fp32 (as `Comm` runs it): fp16/bf16 sums in f32.
    let precision = match std::env::var("HCCL_REDUCE_PRECISION") {
        Err(_) => hccl_algos::ReducePrecision::Native,
        Ok(v) => match hccl_algos::ReducePrecision::parse(&v) {
            Ok(p) => p,
            Err(m) => return Ok(usage_error(bin, format!("HCCL_REDUCE_PRECISION: {m}"))),
        },
    };
    let args_of = |bytes| {
        workload::args_for(coll, bytes, a.datatype, a.op, a.root, n)
            .map(|x| precision.widened(&x).unwrap_or(x))
    };
    let first_args = match args_of(sizes[0]) {
        Ok(x) => x,
        Err(e) => return Ok(usage_error(bin, e)),
    };
    if first_args.dtype != a.datatype {
        println!(
            "# note: HCCL_REDUCE_PRECISION=fp32: {} {} runs in fp32 (partial sums in f32, twice the bytes; sizes and times are the fp32 op's)",
            a.datatype, a.op
        );
    }
    // A global HCCL_ALGO names the algorithm for the ops it fits; like HCCL,
    // an op it does not fit keeps the default. --algo is explicit: an error.
    let mut algo_note = None;
    let mut choice = choice;
    if let AlgoChoice::Forced(spec, src) = &choice {
        if let Err(e) = algo::plan(&first_args, spec, &layout, 0) {
            if *src != "HCCL_ALGO" {
                return Ok(usage_error(bin, format!("{src}: {e}")));
            }
            let fitted = env_algo
                .as_deref()
                .and_then(|v| HcclAlgo::parse(v).ok())
                .and_then(|h| h.spec_fitting(&first_args, &layout));
            algo_note = Some(match fitted {
                Some(f) => format!(
                    "# note: HCCL_ALGO {spec} runs as {f}, flat over all ranks, for {coll}: {e}"
                ),
                None => format!(
                    "# note: HCCL_ALGO {spec} ignored for {coll} ({e}); the selector chooses"
                ),
            });
            choice = fitted.map_or(AlgoChoice::Selector, |f| AlgoChoice::Forced(f, "HCCL_ALGO"));
        }
    }
    // Sizes round down to whole elements per rank: a sweep asked for bytes
    // but rounding every size to nothing would print only empty rows.
    let largest = *sizes.last().unwrap_or(&0);
    if a.maxbytes > 0 && kind != CollectiveKind::Barrier {
        if let Ok(x) = args_of(largest) {
            if x.message_bytes() == 0 {
                return Ok(usage_error(
                    bin,
                    rounds_to_nothing(coll, a.datatype, n, largest),
                ));
            }
        }
    }
    let check = a.check == 1 && a.mode == ModeArg::Data;
    if check {
        let largest = *sizes.last().unwrap_or(&0);
        let need = args_of(largest)
            .map(|x| runner::data_check_bytes(&x))
            .unwrap_or(0);
        let (limit, why) = check_limit(a.check_memory, available_memory());
        if need > limit {
            let human = |b: u64| hccl_topology::limits::human_bytes(u128::from(b));
            return Ok(usage_error(
                bin,
                format!(
                    "checking {} bytes on {n} ranks needs about {} of host memory (limit {}: {why}); use --mode timing, -c 0, or a smaller -e",
                    largest,
                    human(need),
                    human(limit),
                ),
            ));
        }
    }

    let info = ClusterInfo::of(&built.origin, fabric);
    let algo_setting = match &choice {
        AlgoChoice::Selector => "selector".to_string(),
        AlgoChoice::Forced(s, src) => format!("{s} ({src})"),
        AlgoChoice::All => "all".to_string(),
    };
    let mut settings = format!(
        "{} -p {} --servers {} --mode {} --seed {} --algo {}",
        sweep_settings(&a),
        cluster::shape(fabric)
            .1
            .map_or_else(|| "-".to_string(), |p| p.to_string()),
        cluster::shape(fabric).0,
        match a.mode {
            ModeArg::Data => "data",
            ModeArg::Timing => "timing",
        },
        a.seed,
        algo_setting,
    );
    if kind == CollectiveKind::Barrier {
        settings.push_str(" (barrier: one row of size 0)");
    }
    if let Some(p) = &a.faults {
        settings.push_str(&format!(
            " --faults {} (applied to each row's timing run, ops 0..{} = warmups then timed; the check runs without faults)",
            p.display(),
            a.warmup_iters + a.iters
        ));
    }
    let check_note = match (a.mode, a.check) {
        (ModeArg::Timing, _) => "skipped in timing mode (no data); check column NULL".to_string(),
        (_, 0) => "off (-c 0); check column NULL".to_string(),
        _ => "every element of every rank against the sequential reference, verifiable inputs (exact in every dtype)".to_string(),
    };
    // Rows to run: sizes × algorithms.
    let mut plan: Vec<(u64, AlgoSpec, String)> = Vec::new();
    let mut asked = Vec::with_capacity(sizes.len());
    let mut last_size = None;
    for &bytes in &sizes {
        let args = match args_of(bytes) {
            Ok(x) => x,
            Err(e) => return Ok(usage_error(bin, e)),
        };
        // Counts round down to whole elements (per rank), so near-equal
        // sizes can move the same bytes: one row each, as a table of
        // distinct sizes.
        if last_size.replace(args.message_bytes()) == Some(args.message_bytes())
            || (args.message_bytes() == 0 && bytes > 0 && kind != CollectiveKind::Barrier)
        {
            asked.push((bytes, None));
            continue;
        }
        // In the user's dtype: a widened op (HCCL_REDUCE_PRECISION) moves twice.
        let moved = args.message_bytes() / args.dtype.size() * a.datatype.size();
        asked.push((bytes, Some(moved)));
        match &choice {
            AlgoChoice::Selector => {
                let s = select::select(&args, &layout, &costs, None);
                plan.push((bytes, s.spec, "selector".into()));
            }
            AlgoChoice::Forced(spec, src) => plan.push((bytes, *spec, (*src).into())),
            AlgoChoice::All => {
                for spec in workload::all_specs(&args, &layout) {
                    plan.push((bytes, spec, "--algo all".into()));
                }
            }
        }
    }
    let names: Vec<String> = plan
        .iter()
        .map(|(_, spec, _)| display_algo(kind, spec, &layout))
        .collect();
    let table = output::Printer {
        table: output::Table::new(names.iter().map(String::as_str)),
        format: a.format,
    };
    let mut out = std::io::stdout().lock();
    for line in output::header_lines(
        &format!(
            "hccl test {coll} (hccl-rs {}, simulator)",
            env!("CARGO_PKG_VERSION")
        ),
        &info,
        &settings,
        &check_note,
    ) {
        writeln!(out, "{line}")?;
    }
    if let Some(note) = &algo_note {
        writeln!(out, "{note}")?;
    }
    for note in ignored_flag_notes(&a) {
        writeln!(out, "{note}")?;
    }
    if let Some(note) = workload::size_note(&asked, a.datatype, kind) {
        writeln!(out, "{note}")?;
    }
    writeln!(
        out,
        "# iterations: {} warmup + {} timed ops back to back in virtual time; time = slowest rank's timed window / {}",
        a.warmup_iters, a.iters, a.iters
    )?;
    if a.format == output::Format::HcclTest {
        writeln!(out, "{}", output::HCCL_TEST_NOTE)?;
    }
    writeln!(out, "#")?;
    writeln!(out, "{}", table.header())?;
    out.flush()?;

    let bar = if std::io::stderr().is_terminal() && plan.len() > 1 {
        let b = ProgressBar::new(plan.len() as u64);
        b.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} rows {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };

    let mut profile = profiling
        .clone()
        .map(|c| ProfileWriter::new(c, format!("{coll}_{}ranks", n)));
    let mut tracer = a.trace.as_ref().map(|_| trace::TraceBuilder::new());
    let w = a.warmup_iters as usize;
    let last_timed = w + a.iters as usize - 1;
    let mut rows = Vec::with_capacity(plan.len());
    let mut failed = false;
    for (bytes, spec, chosen_by) in plan {
        let args = args_of(bytes).map_err(anyhow::Error::from)?;
        bar.set_message(format!(
            "{} B {}",
            bytes,
            display_algo(kind, &spec, &layout)
        ));
        let row_run = RowRun {
            fabric,
            layout: &layout,
            args: &args,
            spec,
            warmup: a.warmup_iters,
            iters: a.iters,
            seed: a.seed,
            check,
            faults: faults.as_ref(),
            replay: &replay,
        };
        let observe = profile.is_some() || tracer.is_some();
        let mut recorder = Recorder::new(w..=if profile.is_some() { last_timed } else { w });
        let measured = runner::run_row(
            &row_run,
            observe.then_some(&mut recorder as &mut dyn hccl_sim::Hooks),
        )
        .with_context(|| format!("{coll} {bytes} bytes, algorithm {spec}"))?;
        let size = args.message_bytes();
        let esz = args.dtype.size();
        let algbw = if measured.time_ns > 0.0 {
            size as f64 / measured.time_ns
        } else {
            0.0
        };
        let busbw = algbw * busbw_factor(kind, n);
        let row = Row {
            size_bytes: size,
            count: size / esz,
            dtype: args.dtype.to_string(),
            redop: coll.uses_op().then(|| args.op.to_string()),
            root: coll.uses_root().then_some(args.root),
            time_us: measured.time_ns / 1000.0,
            algbw_gbps: algbw,
            busbw_gbps: busbw,
            algorithm: display_algo(kind, &spec, &layout),
            chosen_by,
            predicted_us: select::predict(&args, &spec, &layout, &costs)
                .map(|t| (t + fabric.params().op_overhead_ns as f64) / 1000.0),
            check: measured.check,
        };
        failed |= matches!(row.check, Check::Failed(_));
        let line = table.row(&row);
        // A closed stdout (`| head`) ends the sweep here, not after it.
        bar.suspend(|| {
            let mut o = std::io::stdout().lock();
            writeln!(o, "{line}").and_then(|()| o.flush())
        })?;
        let label = format!("{} {} B {}", coll, size, row.algorithm);
        if let Some(t) = tracer.as_mut() {
            if let Some(op) = measured.report.ops.get(w) {
                t.add_row(&label, fabric, w, op, &recorder.messages);
            }
        }
        if let Some(p) = profile.as_mut() {
            for i in w..=last_timed {
                if let Some(op) = measured.report.ops.get(i) {
                    p.push(op_record(
                        fabric,
                        &args,
                        &row,
                        coll,
                        op,
                        i,
                        &recorder.messages,
                    ));
                }
            }
        }
        rows.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();

    if let Some(path) = &a.json {
        output::JsonReport::new(coll.name(), n, Some(&info), &settings, &rows).write(path)?;
        writeln!(out, "# json: {}", path.display())?;
    }
    if let Some(path) = &a.plot {
        let title = format!(
            "{coll}, {} ({n} ranks), {}: busbw vs size (simulated)",
            built.origin, a.datatype
        );
        plot::write_svg(path, &title, &rows).map_err(anyhow::Error::msg)?;
        writeln!(out, "# plot: {}", path.display())?;
    }
    if let (Some(path), Some(t)) = (&a.trace, tracer) {
        std::fs::write(path, serde_json::to_vec(&t.finish())?)
            .with_context(|| format!("cannot write --trace {}", path.display()))?;
        writeln!(
            out,
            "# trace: {} (open in https://ui.perfetto.dev)",
            path.display()
        )?;
    }
    if let Some(p) = profile {
        let path = p.finish()?;
        writeln!(out, "# profiling: {}", path.display())?;
    }
    if failed {
        writeln!(out, "# some rows FAILED their check")?;
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// True if `e` (or its cause) is an I/O error of kind `BrokenPipe`: the
/// reader of stdout closed it (`hccl test | head`).
pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The exit status after a closed stdout: success, as the reader wants no
/// more; in a `--spawn` rank [`tcp::EXIT_STDOUT_CLOSED`], so that `--spawn`
/// stops the others instead of blaming them for losing this rank.
pub(crate) fn broken_pipe_exit() -> ExitCode {
    if std::env::var_os(tcp::SPAWNED_VAR).is_some() {
        ExitCode::from(tcp::EXIT_STDOUT_CLOSED)
    } else {
        ExitCode::SUCCESS
    }
}

/// The flags that set a preset's ranks, for the size guard's message:
/// `--servers 100000`, `--servers 4 -p 2`, else `--preset NAME`.
fn preset_asked_by(a: &TestArgs) -> String {
    let mut flags = Vec::new();
    if a.servers != 1 {
        flags.push(format!("--servers {}", a.servers));
    }
    if let Some(p) = a.npus {
        flags.push(format!("-p {p}"));
    }
    if flags.is_empty() {
        flags.push(format!(
            "--preset {}",
            a.preset.as_deref().unwrap_or(DEFAULT_PRESET)
        ));
    }
    flags.join(" ")
}

/// `-r/--root` outside a world of `n` ranks, for a collective with a root.
fn root_outside(coll: TestCollective, root: u32, n: u32) -> Option<String> {
    (coll.uses_root() && root >= n).then(|| {
        format!(
            "-r/--root {root} is outside the world of {n} ranks; use a root in 0..={}",
            n - 1
        )
    })
}

/// A header note for each of `-r` and `-o` that `a`'s collective does not
/// use, when it is not the default (`-r 9` for all_reduce, `-o max` for
/// all_gather): CANN's hccl_test takes both flags for every collective,
/// so they are accepted, but a run should not look as if they applied.
fn ignored_flag_notes(a: &TestArgs) -> Vec<String> {
    let coll = a.collective;
    let mut notes = Vec::new();
    if !coll.uses_root() && a.root != 0 {
        notes.push(format!(
            "# note: -r {} is ignored: {coll} has no root",
            a.root
        ));
    }
    if !coll.uses_op() && a.op != ReduceOp::Sum {
        notes.push(format!(
            "# note: -o {} is ignored: {coll} does not reduce",
            a.op
        ));
    }
    notes
}

/// The message sizes of the sweep the flags ask for (one row of 0 bytes
/// for a barrier); both transports run the same sweep.
fn sweep_sizes(a: &TestArgs) -> Result<Vec<u64>, sizes::SizeError> {
    if a.collective.kind() == CollectiveKind::Barrier {
        return Ok(vec![0]);
    }
    let step = sizes::Step::from_flags(a.stepfactor, a.stepbytes, a.minbytes, a.maxbytes);
    sizes::sweep(a.minbytes, a.maxbytes, step)
}

/// The settings line's start, the same on both transports: the collective
/// and its sweep flags as given (`-i default` when neither -f nor -i is).
fn sweep_settings(a: &TestArgs) -> String {
    format!(
        "{} -b {} -e {} {} -d {} -o {} -r {} -n {} -w {} -c {}",
        a.collective,
        a.minbytes,
        a.maxbytes,
        match (a.stepfactor, a.stepbytes) {
            (Some(f), _) => format!("-f {f}"),
            (None, Some(i)) => format!("-i {i}"),
            (None, None) => "-i default".into(),
        },
        a.datatype,
        a.op,
        a.root,
        a.iters,
        a.warmup_iters,
        a.check,
    )
}

/// The first flag of `a` that has no meaning with `--transport tcp`.
fn tcp_conflict(a: &TestArgs) -> Option<&'static str> {
    [
        (a.preset.is_some(), "--preset"),
        (a.fabric.is_some(), "--fabric"),
        (a.rank_table.is_some(), "--rank-table"),
        (a.servers != 1, "--servers"),
        (a.faults.is_some(), "--faults"),
        (a.mode == ModeArg::Timing, "--mode timing"),
        (a.trace.is_some(), "--trace"),
        (a.op_overhead_us.is_some(), "--op-overhead"),
        (a.limits.ranks.is_some(), "--max-ranks"),
        (a.limits.memory.is_some(), "--sim-memory"),
        // The simulator's check holds every rank's buffers in one process;
        // a TCP rank checks only its own.
        (a.check_memory.is_some(), "--check-memory"),
        (a.algo.is_some(), "--algo (set HCCL_ALGO instead)"),
    ]
    .into_iter()
    .find_map(|(set, name)| set.then_some(name))
}

/// The output paths of `a`, checked before the sweep ([`crate::outputs`]).
fn check_output_paths(a: &TestArgs) -> Result<(), String> {
    crate::outputs::check_writable(&[
        ("--json", a.json.as_ref()),
        ("--plot", a.plot.as_ref()),
        ("--trace", a.trace.as_ref()),
    ])
}

/// The launcher, when it started this process as one of several ranks
/// (`mpirun -n N`, torchrun-style `WORLD_SIZE`).
fn launched_as_ranks() -> Option<&'static str> {
    tcp::launcher()
        .filter(|l| l.world_size.is_some_and(|n| n > 1))
        .map(|l| l.by)
}

/// The error for a sweep whose largest size, `largest` bytes, rounds to 0
/// elements per rank of `coll` in `dtype` on `n` ranks (the simulator's
/// and TCP's paths say the same).
pub(crate) fn rounds_to_nothing(
    coll: TestCollective,
    dtype: DataType,
    n: u32,
    largest: u64,
) -> String {
    let whole_vector = matches!(
        coll.kind(),
        CollectiveKind::AllReduce | CollectiveKind::Broadcast | CollectiveKind::Reduce
    );
    format!(
        "-e/--maxbytes {largest}: {coll} of {dtype} on {n} ranks rounds to 0 elements per rank; use at least {} bytes",
        dtype.size() * if whole_vector { 1 } else { u64::from(n) },
    )
}

/// `--transport tcp` (or `ascend`, the same launch with the ranks on
/// CANN's HCCL): validates the flags, then spawns the ranks
/// (`--spawn N`) or runs this process's rank. `auto` names the launcher
/// when it, not `--transport tcp`, chose TCP.
fn run_tcp(
    a: &TestArgs,
    bin: &'static str,
    auto: Option<&'static str>,
    transport: TransportArg,
) -> anyhow::Result<ExitCode> {
    let coll = a.collective;
    if let Some(flag) = tcp_conflict(a) {
        return Ok(usage_error(
            bin,
            format!(
                "{flag} is for the simulator and cannot be used with --transport {}",
                transport.name()
            ),
        ));
    }
    // Before any rank starts: every rank would report the same bad value.
    // --transport, not HCCL_BACKEND, picks the backend here, but a value
    // no Comm accepts is refused as on the simulator path (exit 1).
    if let Err(e) = hccl::BackendKind::from_env() {
        return Ok(input_error(e));
    }
    if let Err(e) = HcclAlgo::from_setting(std::env::var("HCCL_ALGO").ok().as_deref()) {
        return Ok(input_error(e));
    }
    if std::env::var_os(tcp::SPAWNED_VAR).is_none() {
        if let Err(m) = check_output_paths(a) {
            return Ok(input_error(m));
        }
    }
    let sizes = match sweep_sizes(a) {
        Ok(s) => s,
        Err(e) => return Ok(usage_error(bin, e)),
    };
    let spawned = std::env::var_os(tcp::SPAWNED_VAR).is_some();
    match a.spawn {
        Some(0) => return Ok(usage_error(bin, "--spawn 0: start at least one rank")),
        Some(n) if n > tcp::SPAWN_MAX && !spawned => {
            return Ok(usage_error(
                bin,
                format!(
                    "--spawn {n}: at most {} rank processes on one host (each holds a socket to every other rank, and a default `ulimit -n` is 1024); simulate larger worlds with --transport sim",
                    tcp::SPAWN_MAX
                ),
            ))
        }
        Some(n) if !spawned => {
            // All of --spawn's ranks are on this node.
            if let Some(p) = a.npus {
                let me = tcp::Launch {
                    by: "--spawn",
                    world_size: Some(n),
                    local: Some(("--spawn", n)),
                };
                if let Err(m) = tcp::check_npus(p, &me) {
                    return Ok(usage_error(bin, m));
                }
            }
            if let Some(m) = root_outside(a.collective, a.root, n) {
                return Ok(usage_error(bin, m));
            }
            let timeout =
                (a.spawn_timeout > 0).then(|| std::time::Duration::from_secs(a.spawn_timeout));
            return tcp::spawn(n, timeout);
        }
        _ => {}
    }
    let mut launch_notes = ignored_flag_notes(a);
    if let Some(by) = auto {
        launch_notes.push(format!(
            "# transport: tcp, because {by} started several ranks: one job across the processes (--transport sim runs one simulation in every process)"
        ));
    }
    if let Some(p) = a.npus {
        let Some(l) = tcp::launcher() else {
            return Ok(usage_error(
                bin,
                format!("-p/--npus {p} with --transport tcp needs a launcher (mpirun, torchrun-style RANK/WORLD_SIZE) or --spawn N"),
            ));
        };
        match tcp::check_npus(p, &l) {
            Ok(note) => launch_notes.push(note),
            Err(m) => return Ok(usage_error(bin, m)),
        }
    }
    let mut settings = format!(
        "{} --seed {} --transport {}",
        sweep_settings(a),
        a.seed,
        transport.name()
    );
    if let Some(p) = a.npus {
        settings.push_str(&format!(" -p {p}"));
    }
    if coll.kind() == CollectiveKind::Barrier {
        settings.push_str(" (barrier: one row of size 0)");
    }
    let check_note = if a.check == 1 {
        "every element of every rank's output of one more, untimed op into a zeroed buffer against the sequential reference, verifiable inputs (exact in every dtype)"
    } else {
        "off (-c 0); check column NULL"
    };
    if spawned {
        tcp::watch_parent();
    }
    let sweep = tcp::Sweep {
        coll,
        sizes: &sizes,
        dtype: a.datatype,
        op: a.op,
        root: a.root,
        warmup: a.warmup_iters,
        iters: a.iters,
        check: a.check == 1,
        seed: a.seed,
        settings: &settings,
        check_note,
        launch_notes: &launch_notes,
        format: a.format,
        backend: if transport == TransportArg::Ascend {
            hccl::BackendKind::Ascend
        } else {
            hccl::BackendKind::Tcp
        },
    };
    let (rank, world, rows) = tcp::run_rank(&sweep)?;
    if let (Some(path), 0) = (&a.json, rank) {
        output::JsonReport::new(coll.name(), world, None, &settings, &rows).write(path)?;
    }
    if let Some(path) = &a.plot {
        if rank == 0 {
            let title = format!(
                "{coll}, {}, {}: busbw vs size (measured)",
                transport.name(),
                a.datatype
            );
            plot::write_svg(path, &title, &rows).map_err(anyhow::Error::msg)?;
        }
    }
    if rows.iter().any(|r| matches!(r.check, Check::Failed(_))) {
        // Every rank knows (the check is summed over ranks); rank 0 says it.
        if rank == 0 {
            writeln!(std::io::stdout().lock(), "# some rows FAILED their check")?;
        }
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The profiling record of scenario op `i` of a row.
fn op_record(
    fabric: &hccl_topology::Fabric,
    args: &hccl_algos::collective::CollectiveArgs,
    row: &Row,
    coll: TestCollective,
    op: &hccl_sim::OpResult,
    i: usize,
    messages: &[runner::Message],
) -> OpRecord {
    let start = op.start_ns.iter().flatten().copied().min().unwrap_or(0);
    let end = op.end_ns.iter().flatten().copied().max().unwrap_or(start);
    let mine: Vec<&runner::Message> = messages.iter().filter(|m| m.record.op == i).collect();
    let routed = mine.iter().map(|m| (&m.record, m.route.as_slice()));
    let links = profiling::link_records(routed, |l| {
        let e = hccl_topology::EdgeIndex::new(l as usize);
        let (from, to) = fabric
            .graph()
            .edge_endpoints(e)
            .map(|(x, y)| {
                (
                    fabric.graph()[x].name.clone(),
                    fabric.graph()[y].name.clone(),
                )
            })
            .unwrap_or_default();
        let link = fabric.link(e);
        LinkInfo {
            from,
            to,
            class: link.class.to_string(),
            bandwidth_gbps: link.bandwidth_gbps,
        }
    });
    let time = end.saturating_sub(start) as f64;
    let algbw = if time > 0.0 {
        row.size_bytes as f64 / time
    } else {
        0.0
    };
    OpRecord {
        op: coll.name().into(),
        comm: op.comm.clone(),
        seq: op.seq,
        algorithm: row.algorithm.clone(),
        count: args.count,
        dtype: args.dtype.to_string(),
        bytes: row.size_bytes,
        start_ns: start,
        end_ns: end,
        algbw_gbps: algbw,
        busbw_gbps: algbw * busbw_factor(args.kind, args.world_size),
        simulated: true,
        steps: mine.iter().map(|m| m.record).collect(),
        links,
    }
}

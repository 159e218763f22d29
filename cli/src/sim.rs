//! `hccl sim`: run collectives on the simulated fabric, optionally under a
//! fault plan, and print per-op results or the hang report.
//!
//! Exit codes: 0 every op finished on every rank; 1 bad input (files, the
//! environment) or a simulator error; 2 bad flags or flag values (a usage
//! error, in clap's style, as `hccl test`'s); 3 ranks called an
//! op with different arguments (EI0005; the failures and the hang report
//! are printed); 4 a hang (the hang report is printed).

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use hccl_algos::select::HcclAlgo;
use hccl_sim::faults::{run_with_faults, FaultPlan, FaultRun, DEFAULT_EXEC_TIMEOUT_S};
use hccl_sim::hang::{fmt_ns, HangReport};
use hccl_sim::scenario_file::{OpSpec, ScenarioFile, ScenarioFileError};
use hccl_sim::Scenario;
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions, RankTable};

/// Exit code of a hang: not 2, which is clap's for a usage error.
pub(crate) const EXIT_HANG: u8 = 4;
/// Exit code of an argument mismatch between ranks (EI0005).
pub(crate) const EXIT_MISMATCH: u8 = 3;

/// Arguments of `hccl sim`.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct SimArgs {
    /// Collective to run on every rank (all_reduce, all_gather, broadcast,
    /// ...); or give --scenario or --replay.
    #[arg(long, required_unless_present_any = ["scenario", "replay"])]
    pub collective: Option<String>,
    /// Count in elements, with HCCL's meaning for the collective (K/M/G
    /// suffixes are powers of 1024).
    #[arg(long, required_unless_present_any = ["scenario", "replay"], value_parser = super::test::parse_size_arg, allow_hyphen_values = true)]
    pub count: Option<u64>,
    /// Element type.
    #[arg(long)]
    pub dtype: Option<String>,
    /// Reduce op (sum, prod, max, min, avg).
    #[arg(long)]
    pub op: Option<String>,
    /// Root rank of broadcast / reduce / scatter / gather.
    #[arg(long, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub root: Option<u32>,
    /// Algorithm (ring, mesh, H-D_R, ... or "level0:mesh;level1:ring");
    /// default HCCL_ALGO, else the selector.
    #[arg(long)]
    pub algo: Option<String>,
    /// Fabric preset (atlas800t-a2, the default; leaf-spine, ring, ...).
    #[arg(long, conflicts_with_all = ["rank_table", "fabric"])]
    pub preset: Option<String>,
    /// Servers of the preset (default 1, or the scenario file's). Machine
    /// presets (atlas800t-a2, ...) have their own NPUs per server; the
    /// generic ones (ring, full-mesh, leaf-spine, torus2d) have one NPU per
    /// server here, so `--servers 4` is 4 ranks (`hccl test` gives each
    /// server 8, its `-p`: 32 ranks).
    #[arg(long, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub servers: Option<u32>,
    /// An HCCL rank table file (the fabric of its machines).
    #[arg(long, conflicts_with = "fabric")]
    pub rank_table: Option<PathBuf>,
    /// A fabric file.
    #[arg(long)]
    pub fabric: Option<PathBuf>,
    /// Fault plan (JSON; see examples/faults/).
    #[arg(long)]
    pub faults: Option<PathBuf>,
    /// Seed of the run (random faults, data).
    #[arg(long, default_value_t = 0, value_parser = crate::flag_number::whole::<u64>, allow_negative_numbers = true)]
    pub seed: u64,
    /// Scenario file: several ops and communicators (see examples/scenarios/).
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// A directory of flight-recorder dumps (HCCL_FLIGHT_RECORDER_DIR of a
    /// run): replay the run (its ranks' ops, communicators and the faults
    /// the dumps imply) on the simulator; writes DIR/replay/scenario.json
    /// and faults.json, which the printed replay line runs.
    #[arg(long, conflicts_with_all = ["scenario", "collective", "faults"])]
    pub replay: Option<PathBuf>,
    /// HCCL_EXEC_TIMEOUT in seconds of virtual time, fractions allowed as
    /// on TCP (0: never). Default: $HCCL_EXEC_TIMEOUT, else HCCL's 1836 s.
    #[arg(long, value_parser = parse_exec_timeout, allow_hyphen_values = true)]
    pub exec_timeout: Option<f64>,
    /// The simulator's size guard: `--max-ranks`, `--sim-memory`.
    #[command(flatten)]
    pub limits: crate::sim_size::Limits,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The longest `HCCL_EXEC_TIMEOUT`, s (HCCL's range `[0, 2147483647]`).
const MAX_EXEC_TIMEOUT_S: f64 = (hccl_topology::limits::MAX_TIME_NS / 1_000_000_000) as f64;

/// Seconds for `--exec-timeout`, in HCCL's range `[0, 2147483647]`
/// (CANN 8.0 environment variable reference, `HCCL_EXEC_TIMEOUT`); the
/// error names `HCCL_EXEC_TIMEOUT` too, the variable the flag stands for.
fn parse_exec_timeout(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=MAX_EXEC_TIMEOUT_S).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds in 0..=2147483647 (HCCL's range); set HCCL_EXEC_TIMEOUT (or --exec-timeout, which wins) to seconds of virtual time, 0 for never")),
    }
}

/// The timeout in seconds: `--exec-timeout`, else `HCCL_EXEC_TIMEOUT`,
/// else HCCL's default. Read here rather than by clap, so that a bad value
/// of the variable is an environment error, not a usage error.
///
/// # Errors
/// `HCCL_EXEC_TIMEOUT` is not a number of seconds in HCCL's range.
fn exec_timeout_s(a: &SimArgs) -> anyhow::Result<f64> {
    if let Some(v) = a.exec_timeout {
        return Ok(v);
    }
    match std::env::var("HCCL_EXEC_TIMEOUT") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<f64>() {
            Ok(x) if (0.0..=MAX_EXEC_TIMEOUT_S).contains(&x) => Ok(x),
            _ => anyhow::bail!(
                "HCCL_EXEC_TIMEOUT={v:?} is not a number of seconds in 0..=2147483647 (HCCL's range); set it to seconds of virtual time, 0 for never (--exec-timeout wins over it)"
            ),
        },
        _ => Ok(DEFAULT_EXEC_TIMEOUT_S as f64),
    }
}

/// The timeout in ns of virtual time, `None` for 0 (never).
fn exec_timeout_ns(seconds: f64) -> Option<u64> {
    (seconds > 0.0).then(|| (seconds * 1e9).round().max(1.0) as u64)
}

/// What a run printed and the exit code it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The text or JSON to print.
    pub output: String,
    /// 0, [`EXIT_HANG`] or [`EXIT_MISMATCH`].
    pub code: u8,
}

/// Runs `hccl sim`.
pub(crate) fn run(a: SimArgs) -> anyhow::Result<ExitCode> {
    let out = match execute(&a) {
        Ok(out) => out,
        Err(e) if e.downcast_ref::<FlagError>().is_some() => return Ok(usage_error(&e)),
        Err(e) => return Err(e),
    };
    writeln!(std::io::stdout().lock(), "{}", out.output)?;
    Ok(ExitCode::from(out.code))
}

/// A flag's value that cannot run (not a file's or the environment's):
/// `hccl sim` prints it as a usage error and exits 2, as `hccl test` does.
#[derive(Debug)]
pub(crate) struct FlagError(String);

impl std::fmt::Display for FlagError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FlagError {}

/// `msg` as a [`FlagError`].
pub(crate) fn bad_flag(msg: impl std::fmt::Display) -> anyhow::Error {
    FlagError(msg.to_string()).into()
}

/// A usage error in clap's style (the message, usage, hint), exit status 2.
fn usage_error(e: &anyhow::Error) -> ExitCode {
    crate::usage_error(&["sim"], format!("{e:#}"))
}

/// The kinds a scenario cannot hold yet (V and point-to-point).
fn sim_refuses(kind: hccl_algos::collective::CollectiveKind) -> bool {
    use hccl_algos::collective::CollectiveKind as K;
    matches!(
        kind,
        K::AllToAllV | K::AllGatherV | K::ReduceScatterV | K::SendRecv | K::BatchSendRecv
    )
}

/// A scenario error of the op `hccl sim` built from its flags, named by
/// the flag (`--dtype "fp99": ...`) instead of the `scenario: ops[0]` path
/// of a file the user did not write.
fn flag_error(e: ScenarioFileError) -> anyhow::Error {
    match e {
        ScenarioFileError::Invalid {
            path,
            value,
            reason,
        } => match path.strip_prefix("ops[0].") {
            Some(field) => bad_flag(format!("--{} {value}: {reason}", field.replace('_', "-"))),
            None => bad_flag(reason),
        },
        ScenarioFileError::Sim(s) => bad_flag(s),
        other => other.into(),
    }
}

/// Refuses the V and point-to-point kinds a scenario cannot hold yet,
/// naming `--collective` and the `hccl test` command that simulates them.
fn check_supported(collective: &str, a: &SimArgs) -> anyhow::Result<()> {
    use hccl_algos::collective::CollectiveKind as K;
    // Unknown names: list only what hccl sim runs.
    let Ok(kind) = collective.parse::<K>() else {
        let runs: Vec<&str> = K::ALL
            .into_iter()
            .filter(|k| !sim_refuses(*k))
            .map(K::name)
            .collect();
        return Err(bad_flag(format!(
            "--collective {collective:?}: unknown collective; hccl sim runs {}",
            runs.join(", ")
        )));
    };
    // hccl test's spelling, where it runs the kind.
    let in_test = match kind {
        K::AllToAllV => Some("alltoallv"),
        K::AllGatherV => Some("all_gatherv"),
        K::ReduceScatterV => Some("reduce_scatterv"),
        K::SendRecv => Some("send_recv"),
        K::BatchSendRecv => None,
        _ => return Ok(()),
    };
    let Some(name) = in_test else {
        return Err(bad_flag(format!(
            "--collective {collective} is not supported by hccl sim or hccl test yet"
        )));
    };
    let esz = match &a.dtype {
        Some(d) => d.parse::<hccl_algos::DataType>().map_err(bad_flag)?.size(),
        None => 4,
    };
    let bytes = a.count.unwrap_or(0).saturating_mul(esz);
    let dtype = a
        .dtype
        .as_ref()
        .map(|d| format!(" -d {d}"))
        .unwrap_or_default();
    Err(bad_flag(format!(
        "--collective {collective} is not supported by hccl sim yet; use hccl test {name} -b {bytes} -e {bytes}{dtype} (sizes in bytes), which simulates it"
    )))
}

fn scenario_file(a: &SimArgs) -> anyhow::Result<ScenarioFile> {
    if let Some(path) = &a.scenario {
        return ScenarioFile::from_file(path)
            .with_context(|| format!("reading {}", path.display()));
    }
    check_supported(a.collective.as_deref().unwrap_or_default(), a)?;
    Ok(ScenarioFile {
        ops: vec![OpSpec {
            comm: "world".into(),
            collective: a.collective.clone().unwrap_or_default(),
            count: Some(a.count.unwrap_or(0)),
            counts: None,
            matrix: None,
            pairs: None,
            dtype: a.dtype.clone(),
            op: a.op.clone(),
            root: a.root,
            algo: a.algo.clone(),
            in_place: false,
        }],
        ..ScenarioFile::default()
    })
}

/// The fabric of `a`'s --rank-table, --fabric or --preset/--servers (else
/// `file`'s preset, else one Atlas 800T A2 server); a bad preset or server
/// count named by a flag is a [`FlagError`].
pub(crate) fn fabric(a: &SimArgs, file: &ScenarioFile) -> anyhow::Result<Fabric> {
    if let Some(path) = &a.rank_table {
        let table =
            RankTable::from_file(path).with_context(|| format!("reading {}", path.display()))?;
        return Ok(Fabric::for_rank_table(&table)?);
    }
    if let Some(path) = &a.fabric {
        return Fabric::from_fabric_file(path)
            .with_context(|| format!("reading {}", path.display()));
    }
    // As `hccl test`: one simulated Atlas 800T A2 server unless told otherwise.
    let name = a
        .preset
        .as_deref()
        .or(file.preset.as_deref())
        .unwrap_or("atlas800t-a2");
    let servers = a.servers.or(file.servers).unwrap_or(1);
    let built =
        Preset::parse(name).and_then(|p| build_preset_with(p, servers, &PresetOptions::default()));
    match built {
        // --preset or --servers named it: a flag's value.
        Err(e) if a.preset.is_some() || a.servers.is_some() => Err(bad_flag(e)),
        r => Ok(r?),
    }
}

/// The command line that reproduces this run.
pub(crate) fn replay_command(a: &SimArgs) -> String {
    let mut c = String::from("hccl sim");
    let path = |p: &PathBuf| p.display().to_string();
    let mut add = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            let quoted = if v.contains([' ', ';', '"', '\'']) {
                format!("'{v}'")
            } else {
                v
            };
            let _ = write!(c, " --{flag} {quoted}");
        }
    };
    add("scenario", a.scenario.as_ref().map(path));
    add("collective", a.collective.clone());
    add("count", a.count.map(|v| v.to_string()));
    add("dtype", a.dtype.clone());
    add("op", a.op.clone());
    add("root", a.root.map(|v| v.to_string()));
    add("algo", a.algo.clone());
    add("preset", a.preset.clone());
    add("servers", a.servers.map(|v| v.to_string()));
    add("rank-table", a.rank_table.as_ref().map(path));
    add("fabric", a.fabric.as_ref().map(path));
    add("faults", a.faults.as_ref().map(path));
    let timeout = exec_timeout_s(a).unwrap_or(DEFAULT_EXEC_TIMEOUT_S as f64);
    if timeout != DEFAULT_EXEC_TIMEOUT_S as f64 {
        add("exec-timeout", Some(timeout.to_string()));
    }
    add("seed", Some(a.seed.to_string()));
    c
}

/// Runs the simulation `a` describes and renders its output.
///
/// # Errors
/// Bad arguments or files, or a simulator error.
pub(crate) fn execute(a: &SimArgs) -> anyhow::Result<Outcome> {
    if let Some(dir) = &a.replay {
        return super::replay::run(dir, a);
    }
    let timeout = exec_timeout_s(a)?;
    // HCCL_ALGO (a bare name or HCCL's syntax) is the scenario's default,
    // applied where it fits; --algo wins.
    let env_raw = std::env::var("HCCL_ALGO")
        .ok()
        .filter(|v| !v.trim().is_empty() && a.algo.is_none());
    let file = scenario_file(a)?;
    let ops = file.ops.len() as u64;
    let fabric = crate::sim_size::guarded_fabric(a, &file, |_| Ok(ops))?;
    let env = if a.algo.is_some() {
        None
    } else {
        HcclAlgo::from_setting(std::env::var("HCCL_ALGO").ok().as_deref())?
    };
    let built = file.build(&fabric, env.as_ref());
    let built = match (built, &a.scenario) {
        (Ok(sc), _) => sc,
        (Err(e), Some(_)) => return Err(e.into()),
        (Err(e), None) => return Err(flag_error(e)),
    };
    let sc = built.seed(a.seed).exec_timeout_ns(exec_timeout_ns(timeout));
    let plan = match &a.faults {
        Some(p) => FaultPlan::from_file(p)?,
        None => FaultPlan::new(),
    };
    let bar = crate::sim_size::progress(0, format!("simulating {} ranks", fabric.world_size()));
    let run = run_with_faults(&sc, &plan);
    bar.finish_and_clear();
    let run = run?;
    // The replay must pick the same algorithms.
    let replay = match &env_raw {
        Some(v) => format!("HCCL_ALGO='{v}' {}", replay_command(a)),
        None => replay_command(a),
    };
    let hang = run.hang(&sc, &replay);
    let code = if !run.log.failures.is_empty() {
        EXIT_MISMATCH
    } else if hang.is_some() {
        EXIT_HANG
    } else {
        0
    };
    let output = if a.json {
        serde_json::to_string_pretty(&serde_json::json!({
            "fabric": fabric.name(),
            "seed": a.seed,
            "ops": run.report.ops,
            "trace_hash": format!("{:016x}", run.report.trace_hash),
            "faults": run.log,
            "hang": hang,
            "exit_code": code,
        }))?
    } else {
        text(&sc, &fabric, &run, hang.as_ref(), a.seed)
    };
    Ok(Outcome { output, code })
}

fn text(
    sc: &Scenario<'_>,
    fabric: &Fabric,
    run: &FaultRun,
    hang: Option<&HangReport>,
    seed: u64,
) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "fabric: {} ({} ranks), seed {seed}",
        fabric.name(),
        fabric.world_size()
    );
    let _ = writeln!(
        t,
        "{:<4} {:<32} {:<10} {:>4} {:>14} {:>12} {:>12}",
        "op", "label", "comm", "seq", "time", "algbw GB/s", "busbw GB/s"
    );
    for (i, o) in run.report.ops.iter().enumerate() {
        let time = match o.time_ns {
            Some(ns) => fmt_ns(ns),
            None => format!(
                "{}/{} done",
                o.end_ns.iter().flatten().count(),
                o.end_ns.len()
            ),
        };
        let bw = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        let _ = writeln!(
            t,
            "#{i:<3} {:<32} {:<10} {:>4} {:>14} {:>12} {:>12}",
            o.label,
            o.comm,
            o.seq,
            time,
            bw(o.algbw_gbps),
            bw(o.busbw_gbps)
        );
    }
    let _ = sc;
    let l = &run.log;
    if !l.plan.faults.is_empty() {
        let _ = writeln!(
            t,
            "faults: {} in plan; {} crash(es), {} drop(s), {} skip(s), {} altered call(s), {} link change(s), {} jittered message(s)",
            l.plan.faults.len(),
            l.crashes.len(),
            l.drops.len(),
            l.skips.len(),
            l.altered.len(),
            l.link_changes.len(),
            l.jittered.0
        );
        for u in l.unfired_lines() {
            let _ = writeln!(t, "note: {u}");
        }
    }
    for f in &l.failures {
        let _ = writeln!(
            t,
            "error: rank {} (comm rank {}) op #{} failed at {}: {}",
            f.rank,
            f.comm_rank,
            f.op,
            fmt_ns(f.time_ns),
            f.message
        );
    }
    let _ = writeln!(t, "trace hash: {:016x}", run.report.trace_hash);
    if let Some(h) = hang {
        let _ = writeln!(t);
        t.push_str(&h.to_text());
    }
    t.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn parse(line: &str) -> SimArgs {
        let words = line
            .split_whitespace()
            .skip(2)
            .map(|w| w.trim_matches('\''));
        Cli::try_parse_from(std::iter::once("hccl-sim").chain(words))
            .unwrap()
            .sim
    }

    /// The repository's root, where examples/ lives.
    fn root() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
    }

    fn with_root(mut a: SimArgs) -> SimArgs {
        a.scenario = a.scenario.map(|p| root().join(p));
        a.faults = a.faults.map(|p| root().join(p));
        a
    }

    #[test]
    fn replay_command_reproduces_the_report() {
        let a = with_root(parse(
            "hccl sim --collective all_reduce --count 4096 --preset leaf-spine --servers 4 --faults examples/faults/crash_rank2.json --seed 9",
        ));
        let first = execute(&a).unwrap();
        assert_eq!(first.code, EXIT_HANG);
        assert!(first.output.contains("rank 2 crashed"), "{}", first.output);
        let replay = first
            .output
            .lines()
            .find_map(|l| l.strip_prefix("replay: "))
            .unwrap()
            .to_string();
        let again = execute(&parse(&replay)).unwrap();
        assert_eq!(again, first, "the replay command gives the same report");
    }

    #[test]
    fn every_fault_plan_runs_on_its_documented_cluster() {
        // The table of examples/faults/README.md: (file, exit code).
        let documented = [
            ("crash_rank2.json", EXIT_HANG),
            ("skip_rank3.json", EXIT_HANG),
            ("dead_uplink.json", EXIT_HANG),
            ("wrong_count.json", EXIT_MISMATCH),
            ("flaky_network.json", 0),
            ("drop_message.json", EXIT_HANG),
        ];
        let dir = root().join("examples/faults");
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        files.sort();
        assert!(!files.is_empty());
        for f in &files {
            let Some(&(_, code)) = documented.iter().find(|(n, _)| n == f) else {
                panic!(
                    "examples/faults/{f} is not documented: add it to the README's table and here"
                );
            };
            let row = readme
                .lines()
                .find(|l| l.starts_with(&format!("| `{f}` |")))
                .unwrap_or_else(|| panic!("README table misses {f}"));
            assert!(
                row.trim_end()
                    .trim_end_matches('|')
                    .trim_end()
                    .rsplit('|')
                    .next()
                    .unwrap()
                    .trim()
                    .starts_with(&code.to_string()),
                "README row of {f} does not give exit code {code}: {row}"
            );
            // The README's two `hccl sim` commands.
            let scenario = SimArgs {
                scenario: Some(root().join("examples/scenarios/two_comms_ok.json")),
                faults: Some(dir.join(f)),
                exec_timeout: None,
                seed: 1,
                ..SimArgs::default()
            };
            let preset = SimArgs {
                scenario: None,
                collective: Some("all_reduce".into()),
                count: Some(256 << 10),
                preset: Some("leaf-spine".into()),
                servers: Some(4),
                ..scenario.clone()
            };
            for a in [scenario, preset] {
                let out = execute(&a).unwrap_or_else(|e| panic!("{f} {:?}: {e:#}", a.preset));
                assert_eq!(out.code, code, "{f} {:?}:\n{}", a.preset, out.output);
            }
        }
    }

    #[test]
    fn every_example_runs_with_its_documented_exit_code() {
        // (scenario, faults, exit code)
        let cases = [
            ("examples/scenarios/two_comms_ok.json", None, 0),
            ("examples/scenarios/two_comm_deadlock.json", None, EXIT_HANG),
            (
                "examples/scenarios/two_comms_ok.json",
                Some("examples/faults/crash_rank2.json"),
                EXIT_HANG,
            ),
            (
                "examples/scenarios/two_comms_ok.json",
                Some("examples/faults/skip_rank3.json"),
                EXIT_HANG,
            ),
            (
                "examples/scenarios/two_comms_ok.json",
                Some("examples/faults/dead_uplink.json"),
                EXIT_HANG,
            ),
            (
                "examples/scenarios/two_comms_ok.json",
                Some("examples/faults/wrong_count.json"),
                EXIT_MISMATCH,
            ),
            (
                "examples/scenarios/two_comms_ok.json",
                Some("examples/faults/flaky_network.json"),
                0,
            ),
            (
                "examples/scenarios/two_comms_ok.json",
                Some("examples/faults/drop_message.json"),
                EXIT_HANG,
            ),
        ];
        for (sc, faults, code) in cases {
            let a = SimArgs {
                scenario: Some(root().join(sc)),
                faults: faults.map(|f| root().join(f)),
                exec_timeout: None,
                seed: 1,
                ..SimArgs::default()
            };
            let out = execute(&a).unwrap_or_else(|e| panic!("{sc} {faults:?}: {e:#}"));
            assert_eq!(out.code, code, "{sc} {faults:?}:\n{}", out.output);
            let json = execute(&SimArgs { json: true, ..a }).unwrap();
            let v: serde_json::Value = serde_json::from_str(&json.output).unwrap();
            assert_eq!(v["exit_code"], code);
        }
    }

    #[test]
    fn count_takes_size_suffixes() {
        let a = parse("hccl sim --collective all_reduce --count 4K --preset ring --servers 2");
        assert_eq!(a.count, Some(4096));
        let a = parse("hccl sim --collective all_reduce --count 2M --preset ring --servers 2");
        assert_eq!(a.count, Some(2 << 20));
        let words = ["hccl-sim", "--collective", "all_reduce", "--count", "4Q"];
        assert!(Cli::try_parse_from(words).is_err(), "4Q is not a count");
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        // No fabric flags: one Atlas 800T A2 server, as in `hccl test`.
        let out = execute(&parse("hccl sim --collective all_reduce --count 8")).unwrap();
        assert!(
            out.output
                .starts_with("fabric: atlas800t-a2 x 1 server (8 ranks)"),
            "{}",
            out.output
        );
        let e = execute(&parse(
            "hccl sim --collective all_reduce --count 8 --preset dgx",
        ))
        .unwrap_err();
        assert!(format!("{e:#}").contains("dgx"), "{e:#}");
        let e = execute(&parse(
            "hccl sim --collective all_reduc --count 8 --preset ring --servers 2",
        ))
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("--collective \"all_reduc\""),
            "{e:#}"
        );
    }

    #[test]
    fn a_bad_exec_timeout_names_the_variable() {
        let words = ["hccl-sim", "--collective", "all_reduce", "--count", "1K"];
        let bad = words.iter().copied().chain(["--exec-timeout", "abc"]);
        let e = Cli::try_parse_from(bad).err().unwrap().to_string();
        assert!(
            e.contains("'abc' is not a number of seconds in 0..=2147483647 (HCCL's range); set HCCL_EXEC_TIMEOUT"),
            "{e}"
        );
        let good = words.iter().copied().chain(["--exec-timeout", " 7"]);
        assert_eq!(
            Cli::try_parse_from(good).unwrap().sim.exec_timeout,
            Some(7.0)
        );
        // Fractions, as HCCL_EXEC_TIMEOUT=0.5 works on TCP.
        let half = words.iter().copied().chain(["--exec-timeout", "0.5"]);
        let half = Cli::try_parse_from(half).unwrap().sim.exec_timeout.unwrap();
        assert_eq!(exec_timeout_ns(half), Some(500_000_000));
        assert_eq!(exec_timeout_ns(0.0), None);
        // The top of HCCL's range is accepted; past it is refused (it
        // saturated to "never" without saying so).
        let top = words
            .iter()
            .copied()
            .chain(["--exec-timeout", "2147483647"]);
        let top = Cli::try_parse_from(top).unwrap().sim.exec_timeout.unwrap();
        assert_eq!(exec_timeout_ns(top), Some(2_147_483_647_000_000_000));
        for bad in ["-1", "nan", "inf", "2147483648", "1e300"] {
            let args = words.iter().copied().chain(["--exec-timeout", bad]);
            assert!(Cli::try_parse_from(args).is_err(), "{bad}");
        }
    }

    #[test]
    fn flag_errors_name_the_flag_and_list_only_what_runs() {
        let e = execute(&parse("hccl sim --collective foo --count 4")).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.starts_with("--collective \"foo\": unknown collective; hccl sim runs all_reduce,"),
            "{e}"
        );
        // The V and point-to-point kinds are refused below: not listed.
        for refused in [
            "alltoallv",
            "all_gather_v",
            "reduce_scatter_v",
            "send_recv",
            "batch_send_recv",
        ] {
            assert!(!e.contains(refused), "{refused}: {e}");
        }
        assert!(e.contains("barrier") && e.contains("alltoall"), "{e}");
        for (line, want) in [
            (
                "hccl sim --collective all_reduce --count 4 --dtype fp99",
                "--dtype \"fp99\": unknown data type",
            ),
            (
                "hccl sim --collective all_reduce --count 4 --algo bogus",
                "--algo \"bogus\": unknown algorithm",
            ),
            (
                "hccl sim --collective broadcast --count 4 --root 99",
                "broadcast: root = 99 is outside",
            ),
        ] {
            let e = format!("{:#}", execute(&parse(line)).unwrap_err());
            assert!(e.starts_with(want), "{line}: {e}");
            assert!(!e.contains("scenario"), "{line}: {e}");
        }
    }

    #[test]
    fn a_cluster_too_large_to_simulate_is_refused_naming_the_flag() {
        // The same guard as hccl workload's. 800,000 ranks of one op fit
        // in ~12 GiB, but would simulate for hours: the rank limit.
        let line = "hccl sim --collective all_reduce --count 1K --servers 100000";
        let e = execute(&parse(line)).unwrap_err();
        assert!(e.downcast_ref::<FlagError>().is_some(), "{e:#}");
        let e = format!("{e:#}");
        assert!(
            e.starts_with("--servers 100000: 800000 ranks is more than the limit of 16384"),
            "{e}"
        );
        let e = execute(&parse(&format!(
            "{line} --max-ranks 800000 --sim-memory 1G"
        )))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("--servers 100000: the simulation would need about 12.2 GiB of memory (800000 ranks, 1 op(s)"),
            "{e}"
        );
        assert!(e.contains("--sim-memory 13G"), "{e}");
        // A generic preset has one NPU per server.
        assert!(execute(&parse(
            "hccl sim --collective all_reduce --count 1K --preset ring --servers 4 --sim-memory 1M",
        ))
        .is_ok());
    }

    #[test]
    fn sim_memory_takes_decimals_and_t_and_names_itself_when_bad() {
        let line = "hccl sim --collective all_reduce --count 1K --sim-memory";
        assert_eq!(
            parse(&format!("{line} 1.5G")).limits.memory,
            Some(1_610_612_736)
        );
        assert_eq!(parse(&format!("{line} 2T")).limits.memory, Some(2 << 40));
        let words = ["hccl-sim", "--collective", "all_reduce", "--count", "1K"];
        let e = Cli::try_parse_from(words.iter().copied().chain(["--sim-memory", "1.5X"]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("'--sim-memory <SIZE>'") && e.contains("\"1.5X\" is not a memory size"),
            "{e}"
        );
    }

    #[test]
    fn a_hang_has_its_own_exit_code() {
        // clap exits 2 for bad flags; a hang must be told apart.
        assert_ne!(EXIT_HANG, 2);
        assert_ne!(EXIT_HANG, EXIT_MISMATCH);
        let a = with_root(parse(
            "hccl sim --scenario examples/scenarios/two_comm_deadlock.json",
        ));
        assert_eq!(execute(&a).unwrap().code, 4);
    }

    #[test]
    fn unsupported_collectives_name_the_flag_and_the_way_out() {
        let e = execute(&parse("hccl sim --collective send_recv --count 1K")).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "--collective send_recv is not supported by hccl sim yet; use hccl test send_recv -b 4096 -e 4096 (sizes in bytes), which simulates it"
        );
        let e = execute(&parse(
            "hccl sim --collective alltoallv --count 1K --dtype fp16",
        ))
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("use hccl test alltoallv -b 2048 -e 2048 -d fp16"),
            "{e:#}"
        );
        let e = execute(&parse("hccl sim --collective batch_send_recv --count 1")).unwrap_err();
        assert!(
            format!("{e:#}").contains("not supported by hccl sim or hccl test yet"),
            "{e:#}"
        );
    }
}

//! `hccl workload`: one data-parallel training step of a model on the
//! simulated fabric, in four configurations (issue 20's efficiency table,
//! simulated at scale):
//!
//! - `baseline`: one AllReduce per gradient, after the whole backward;
//! - `overlap`: DDP's buckets (`hccl_compress::ReducerConfig::bucket_plan`:
//!   first 1 MiB, then 25 MiB, reverse parameter order), each AllReduced
//!   as soon as its last gradient is ready;
//! - `topk`: the same buckets through `hccl_compress`'s Top-K exchange
//!   (the bucket check, then a sparse AllGather of (u32 index, f32 value)
//!   pairs, or a dense AllReduce where `sparse_wins` says so);
//! - `int8`: the same buckets through its INT8 exchange (the bucket
//!   check, then an AllGather of int8 payloads and f32 scales).
//!
//! The collectives of each bucket are `Compression::wire_ops`, the ones
//! the library's exchange makes; `hccl_sim::workload::simulate_step` runs
//! them in timing mode with the selector's algorithms (`HCCL_ALGO`'s where it
//! fits, as `hccl test`). Exit codes: 0; 1
//! bad input (a workload file, the environment) or a simulator error; 2
//! bad flags.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::ValueEnum;
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::select::HcclAlgo;
use hccl_compress::{Compression, Int8, ReducerConfig, TopK, WireKind};
use hccl_sim::hang::fmt_ns;
use hccl_sim::scenario_file::ScenarioFile;
use hccl_sim::workload::profiles::{Profile, DEFAULT_MFU, PEAK_FP16_TFLOPS_910B};
use hccl_sim::workload::{simulate_step, BucketOps, Launch, StepReport, StepSpec, Workload};
use hccl_topology::Fabric;
use serde_json::{json, Value};

use crate::sim::{bad_flag, FlagError, SimArgs};
use crate::test::trace::TraceBuilder;

/// The four configurations of the efficiency table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Config {
    /// One AllReduce per gradient after backward.
    Baseline,
    /// DDP buckets, each AllReduced when its last gradient is ready.
    Overlap,
    /// Overlap with Top-K (sparse AllGather of index/value pairs).
    Topk,
    /// Overlap with INT8 (AllGather of int8 payloads and scales).
    Int8,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Baseline => "baseline",
            Config::Overlap => "overlap",
            Config::Topk => "overlap+topk",
            Config::Int8 => "overlap+int8",
        }
    }
}

/// Arguments of `hccl workload`: one of `--profile` and `--file` (a clap
/// group, so the usage line says `<--profile <PROFILE>|--file <FILE>>`).
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("workload").required(true).args(["profile", "file"])))]
pub(crate) struct WorkloadArgs {
    /// Built-in model: resnet50 (25.6 M parameters), gpt2 (124 M), gpt3-xl (1.3 B).
    #[arg(long)]
    pub profile: Option<String>,
    /// A workload file (JSON, version 1; format in sim/README.md).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Samples (images, tokens) per rank per step of a profile (default:
    /// the profile's).
    #[arg(long, conflicts_with = "file", value_parser = crate::flag_number::whole::<u64>, allow_negative_numbers = true)]
    pub batch: Option<u64>,
    /// Effective compute rate of one NPU for a profile, TFLOP/s (default:
    /// 320 peak FP16 of a 910B × 0.4 utilisation = 128; both assumptions,
    /// see sim/README.md).
    #[arg(long, conflicts_with = "file", allow_negative_numbers = true)]
    pub tflops: Option<f64>,
    /// Fabric preset (atlas800t-a2, the default; leaf-spine, ring, ...).
    #[arg(long, conflicts_with_all = ["rank_table", "fabric"])]
    pub preset: Option<String>,
    /// Servers of the preset (default 1); 16 Atlas 800T A2 servers are 128 NPUs.
    #[arg(long, conflicts_with_all = ["rank_table", "fabric"], value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    pub servers: Option<u32>,
    /// An HCCL rank table file (the fabric of its machines).
    #[arg(long, conflicts_with = "fabric")]
    pub rank_table: Option<PathBuf>,
    /// A fabric file.
    #[arg(long)]
    pub fabric: Option<PathBuf>,
    /// Configurations to run, comma-separated (default all four).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub configs: Vec<Config>,
    /// Fraction of each bucket Top-K keeps.
    #[arg(long, default_value_t = 0.01, allow_negative_numbers = true)]
    pub topk_ratio: f64,
    /// Elements per INT8 scale.
    #[arg(long, default_value_t = 256, value_parser = crate::flag_number::whole::<usize>, allow_negative_numbers = true)]
    pub int8_block: usize,
    /// The first bucket closes at this many MiB (DDP: 1).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub first_bucket_mb: f64,
    /// The other buckets close at this many MiB (DDP's bucket_cap_mb: 25).
    #[arg(long, default_value_t = 25.0, allow_negative_numbers = true)]
    pub bucket_cap_mb: f64,
    /// Write a Chrome trace (Perfetto) of each configuration's step: the
    /// compute, rank 0's collectives and every collective's span.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Write the workload (a profile's layers, times and gradients) as a
    /// workload file, to edit and run with --file.
    #[arg(long)]
    pub write_workload: Option<PathBuf>,
    /// The simulator's size guard: `--max-ranks`, `--sim-memory`.
    #[command(flatten)]
    pub limits: crate::sim_size::Limits,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One configuration's result.
struct Row {
    config: Config,
    buckets: usize,
    /// Buckets whose exchange went sparse (Top-K) or int8.
    compressed: usize,
    step: StepReport,
}

/// Runs `hccl workload`.
pub(crate) fn run(a: WorkloadArgs) -> anyhow::Result<ExitCode> {
    match execute(&a) {
        Ok(out) => {
            writeln!(std::io::stdout().lock(), "{out}")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if e.downcast_ref::<FlagError>().is_some() => {
            Ok(crate::usage_error(&["workload"], format!("{e:#}")))
        }
        Err(e) => Err(e),
    }
}

/// The workload of the flags, and the line saying where it comes from.
fn workload(a: &WorkloadArgs) -> anyhow::Result<Workload> {
    if let Some(path) = &a.file {
        return Workload::from_file(path).with_context(|| format!("reading {}", path.display()));
    }
    let name = a.profile.as_deref().unwrap_or_default();
    let p = Profile::builtin(name).ok_or_else(|| {
        bad_flag(format!(
            "--profile {name:?}: unknown profile; built in: {}; or give --file",
            Profile::NAMES.join(", ")
        ))
    })?;
    let batch = a.batch.unwrap_or(p.default_batch.0);
    if batch == 0 {
        return Err(bad_flag("--batch 0: give at least one sample per rank"));
    }
    let tflops = a.tflops.unwrap_or(PEAK_FP16_TFLOPS_910B * DEFAULT_MFU);
    if !(tflops.is_finite() && tflops > 0.0) {
        return Err(bad_flag(format!(
            "--tflops {tflops}: give a positive rate in TFLOP/s (default {})",
            PEAK_FP16_TFLOPS_910B * DEFAULT_MFU
        )));
    }
    let w = p.workload(batch, tflops);
    w.validate()
        .map_err(|e| bad_flag(format!("--batch {batch} --tflops {tflops}: {e}")))?;
    Ok(w)
}

/// The collectives of one bucket of `len` fp32 elements.
fn ops_of(c: &Compression, len: usize, world: u32) -> Vec<CollectiveArgs> {
    c.wire_ops(len, world)
        .into_iter()
        .map(|o| {
            let kind = match o.kind {
                WireKind::AllReduce => CollectiveKind::AllReduce,
                WireKind::AllGather => CollectiveKind::AllGather,
            };
            CollectiveArgs::new(kind, o.count, o.dtype, world)
        })
        .collect()
}

/// The step a configuration runs, and how many buckets it compresses.
fn spec_of(
    config: Config,
    a: &WorkloadArgs,
    w: &Workload,
    world: u32,
) -> anyhow::Result<(StepSpec, usize)> {
    let grads = w.gradients();
    let sizes: Vec<usize> = grads.iter().map(|g| (g.bytes / 4) as usize).collect();
    let order: Vec<usize> = (0..sizes.len()).rev().collect();
    let dense = |g: usize| BucketOps {
        label: format!("grad {g} ({})", w.layers[grads[g].layer].name),
        grads: vec![g],
        ops: ops_of(&Compression::None, sizes[g], world),
    };
    if config == Config::Baseline {
        let buckets = order.iter().map(|&g| dense(g)).collect();
        return Ok((
            StepSpec {
                launch: Launch::AfterBackward,
                buckets,
            },
            0,
        ));
    }
    let mib = |flag: &str, v: f64| -> anyhow::Result<usize> {
        let b = v * f64::from(1u32 << 20);
        if !(1.0..=1e15).contains(&b) {
            return Err(bad_flag(format!(
                "--{flag} {v}: give a size in MiB, at least 1 byte"
            )));
        }
        Ok(b.round() as usize)
    };
    let compression = match config {
        Config::Topk => Compression::TopK(
            TopK::new(a.topk_ratio).map_err(|e| bad_flag(format!("--topk-ratio: {e}")))?,
        ),
        Config::Int8 => Compression::Int8(
            Int8::new(a.int8_block).map_err(|e| bad_flag(format!("--int8-block: {e}")))?,
        ),
        _ => Compression::None,
    };
    let rc = ReducerConfig {
        first_bucket_bytes: mib("first-bucket-mb", a.first_bucket_mb)?,
        bucket_cap_bytes: mib("bucket-cap-mb", a.bucket_cap_mb)?,
        compression: compression.clone(),
        ..ReducerConfig::default()
    };
    let plan = rc.bucket_plan(&sizes, &order)?;
    let mut compressed = 0;
    let buckets = plan
        .into_iter()
        .enumerate()
        .map(|(b, ps)| {
            let len: usize = ps.iter().map(|&p| sizes[p]).sum();
            let ops = ops_of(&compression, len, world);
            // The data collective is the last; dense is an AllReduce.
            if ops
                .last()
                .is_some_and(|o| o.kind == CollectiveKind::AllGather)
            {
                compressed += 1;
            }
            BucketOps {
                label: format!("bucket {b} ({} grads, {len} elements)", ps.len()),
                grads: ps,
                ops,
            }
        })
        .collect();
    Ok((
        StepSpec {
            launch: Launch::WhenReady,
            buckets,
        },
        compressed,
    ))
}

/// The fabric of the flags, built once the step's simulation fits
/// ([`crate::sim_size`]: every configuration's collectives on every rank).
fn build_fabric(a: &WorkloadArgs, w: &Workload) -> anyhow::Result<Fabric> {
    let s = SimArgs {
        preset: a.preset.clone(),
        servers: a.servers,
        rank_table: a.rank_table.clone(),
        fabric: a.fabric.clone(),
        limits: a.limits,
        ..SimArgs::default()
    };
    crate::sim_size::guarded_fabric(&s, &ScenarioFile::default(), |world| {
        configs(a).into_iter().try_fold(0u64, |n, config| {
            let (spec, _) = spec_of(config, a, w, world)?;
            Ok(n + spec.buckets.iter().map(|b| b.ops.len() as u64).sum::<u64>())
        })
    })
}

/// Runs the configurations and returns what to print.
pub(crate) fn execute(a: &WorkloadArgs) -> anyhow::Result<String> {
    // The simulation can take minutes: an unwritable output fails first.
    crate::outputs::check_writable(&[
        ("--trace", a.trace.as_ref()),
        ("--write-workload", a.write_workload.as_ref()),
    ])
    .map_err(anyhow::Error::msg)?;
    let w = workload(a)?;
    if let Some(path) = &a.write_workload {
        std::fs::write(path, w.to_json() + "\n")
            .with_context(|| format!("cannot write --write-workload {}", path.display()))?;
    }
    let fabric = build_fabric(a, &w)?;
    let rows = run_configs(a, &w, &fabric)?;
    if let Some(path) = &a.trace {
        let doc = trace(&w, &rows);
        std::fs::write(path, serde_json::to_string(&doc)?)
            .with_context(|| format!("cannot write --trace {}", path.display()))?;
    }
    Ok(if a.json {
        serde_json::to_string_pretty(&to_json(a, &w, &fabric, &rows))?
    } else {
        text(a, &w, &fabric, &rows)
    })
}

/// The configurations of `a`: default all four, in table order.
fn configs(a: &WorkloadArgs) -> Vec<Config> {
    let mut configs = if a.configs.is_empty() {
        vec![
            Config::Baseline,
            Config::Overlap,
            Config::Topk,
            Config::Int8,
        ]
    } else {
        a.configs.clone()
    };
    configs.dedup();
    configs
}

/// Every configuration of `a`, simulated (a progress bar on stderr when
/// it is a terminal).
fn run_configs(a: &WorkloadArgs, w: &Workload, fabric: &Fabric) -> anyhow::Result<Vec<Row>> {
    let configs = configs(a);
    let bar = crate::sim_size::progress(
        configs.len() as u64,
        format!("configurations on {} ranks", fabric.world_size()),
    );
    // HCCL_ALGO, as `hccl test` reads it: for the collectives it fits.
    let env = match std::env::var("HCCL_ALGO") {
        Ok(v) if !v.trim().is_empty() => Some(HcclAlgo::parse(&v)?),
        _ => None,
    };
    let rows = configs
        .into_iter()
        .map(|config| {
            let (spec, compressed) = spec_of(config, a, w, fabric.world_size())?;
            let step = simulate_step(fabric, w, &spec, env.as_ref())?;
            bar.inc(1);
            Ok(Row {
                config,
                buckets: spec.buckets.len(),
                compressed,
                step,
            })
        })
        .collect();
    bar.finish_and_clear();
    rows
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn text(a: &WorkloadArgs, w: &Workload, fabric: &Fabric, rows: &[Row]) -> String {
    let world = fabric.world_size();
    let mut t = String::new();
    let _ = writeln!(
        t,
        "workload {}: {} parameters in {} gradients ({:.1} MB fp32), compute {} per step (forward {})",
        w.name,
        w.param_count(),
        w.gradients().len(),
        w.grad_bytes() as f64 / 1e6,
        fmt_ns(w.compute_ns()),
        fmt_ns(w.forward_ns()),
    );
    if !w.source.is_empty() {
        let _ = writeln!(t, "# {}", w.source);
    }
    let _ = writeln!(
        t,
        "fabric: {} ({world} ranks); collectives timed by hccl-sim with {}",
        fabric.name(),
        match std::env::var("HCCL_ALGO") {
            Ok(v) if !v.trim().is_empty() =>
                format!("HCCL_ALGO={v} where it fits, else the selector's algorithms"),
            _ => "the selector's algorithms".into(),
        }
    );
    let _ = writeln!(
        t,
        "{:<14} {:>8} {:>6} {:>10} {:>11} {:>12} {:>10} {:>12}",
        "config", "buckets", "coll", "step ms", "compute ms", "exposed ms", "comm ms", "MB/rank"
    );
    for r in rows {
        let s = &r.step;
        let _ = writeln!(
            t,
            "{:<14} {:>8} {:>6} {:>10} {:>11} {:>12} {:>10} {:>12.1}",
            r.config.name(),
            r.buckets,
            s.ops.len(),
            ms(s.step_ns),
            ms(s.compute_ns),
            ms(s.exposed_comm_ns),
            ms(s.comm_ns),
            s.injected_bytes as f64 / f64::from(world) / 1e6,
        );
    }
    let _ = writeln!(
        t,
        "# step = later of compute end and last collective end; exposed = step - compute; comm = the busiest rank's time in collectives; MB/rank = bytes the NPUs put on links / ranks"
    );
    for r in rows {
        match r.config {
            Config::Topk => {
                let _ = writeln!(
                    t,
                    "# overlap+topk (ratio {}): {} of {} buckets sparse; the byte-cost rule (hccl_compress::sparse_wins) sends pairs only below density 1/P = {:.2}% at {world} ranks",
                    a.topk_ratio,
                    r.compressed,
                    r.buckets,
                    100.0 / f64::from(world)
                );
            }
            Config::Int8 => {
                let _ = writeln!(
                    t,
                    "# overlap+int8 (block {}): every rank receives P-1 payloads of ~1 byte per element (an AllGather), against ~8(P-1)/P for a dense fp32 AllReduce",
                    a.int8_block
                );
            }
            _ => {}
        }
    }
    if let Some(first) = rows.first() {
        let _ = writeln!(t, "link utilisation, busy % / load % of capacity:");
        let _ = write!(t, "{:<14}", "config");
        for g in &first.step.links {
            let _ = write!(t, " {:>24}", format!("{} ({})", g.group, g.links));
        }
        let _ = writeln!(t);
        for r in rows {
            let _ = write!(t, "{:<14}", r.config.name());
            for g in &r.step.links {
                let _ = write!(
                    t,
                    " {:>24}",
                    format!(
                        "{:.1} / {:.1}",
                        100.0 * g.busy_fraction,
                        100.0 * g.load_fraction
                    )
                );
            }
            let _ = writeln!(t);
        }
    }
    if let Some(p) = &a.write_workload {
        let _ = writeln!(t, "# workload: {} (hccl workload --file)", p.display());
    }
    if let Some(p) = &a.trace {
        let _ = writeln!(
            t,
            "# trace: {} (open in https://ui.perfetto.dev)",
            p.display()
        );
    }
    t.trim_end().to_string()
}

fn to_json(a: &WorkloadArgs, w: &Workload, fabric: &Fabric, rows: &[Row]) -> Value {
    json!({
        "workload": {
            "name": w.name,
            "source": w.source,
            "parameters": w.param_count(),
            "gradients": w.gradients().len(),
            "compute_ns": w.compute_ns(),
            "forward_ns": w.forward_ns(),
        },
        "fabric": fabric.name(),
        "ranks": fabric.world_size(),
        "topk_ratio": a.topk_ratio,
        "int8_block": a.int8_block,
        "configs": rows.iter().map(|r| {
            let s = &r.step;
            json!({
                "config": r.config.name(),
                "buckets": r.buckets,
                "compressed_buckets": r.compressed,
                "collectives": s.ops.len(),
                "step_ns": s.step_ns,
                "compute_ns": s.compute_ns,
                "exposed_comm_ns": s.exposed_comm_ns,
                "comm_ns": s.comm_ns,
                "injected_bytes": s.injected_bytes,
                "links": s.links.iter().map(|g| json!({
                    "group": g.group,
                    "links": g.links,
                    "used": g.used,
                    "bytes": g.bytes,
                    "busy_fraction": g.busy_fraction,
                    "load_fraction": g.load_fraction,
                })).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
    })
}

/// The Chrome trace: one process per configuration, with tracks
/// `compute` (forward, each layer's backward), `comm rank 0` (rank 0's
/// collectives) and `comm all ranks` (each collective from its earliest
/// start to its latest end), and `step` (compute, then the exposed tail).
fn trace(w: &Workload, rows: &[Row]) -> Value {
    let processes = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (i as u32 + 1, r.config.name().to_string()))
        .collect();
    let mut t = TraceBuilder::with_processes(processes, "hccl workload (simulated time)");
    for (i, r) in rows.iter().enumerate() {
        let pid = i as u32 + 1;
        let s = &r.step;
        for (tid, name) in [
            (0, "step"),
            (1, "compute"),
            (2, "comm rank 0"),
            (3, "comm all ranks"),
        ] {
            t.name_thread(pid, tid, name.into());
        }
        t.slice(
            pid,
            0,
            "compute".into(),
            0,
            s.compute_ns,
            json!({ "ns": s.compute_ns }),
        );
        if s.exposed_comm_ns > 0 {
            t.slice(
                pid,
                0,
                "exposed communication".into(),
                s.compute_ns,
                s.step_ns,
                json!({ "ns": s.exposed_comm_ns }),
            );
        }
        t.slice(
            pid,
            1,
            "forward".into(),
            0,
            s.forward_ns,
            json!({ "ns": s.forward_ns }),
        );
        let mut at = s.forward_ns;
        for l in w.layers.iter().rev() {
            if l.backward_ns > 0 {
                t.slice(
                    pid,
                    1,
                    format!("backward {}", l.name),
                    at,
                    at + l.backward_ns,
                    json!({ "gradients": l.grad_bytes.len(), "bytes": l.grad_bytes.iter().sum::<u64>() }),
                );
            }
            at += l.backward_ns;
        }
        for (o, op) in s.ops.iter().zip(&s.report.ops) {
            let args = json!({
                "bucket": o.bucket, "algorithm": o.algo, "payload_bytes": o.payload_bytes,
                "ready_ns": o.ready_ns,
            });
            if let (Some(Some(a)), Some(Some(b))) = (op.start_ns.first(), op.end_ns.first()) {
                t.slice(pid, 2, o.label.clone(), *a, *b, args.clone());
            }
            t.slice(pid, 3, o.label.clone(), o.start_ns, o.end_ns, args);
        }
    }
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        w: WorkloadArgs,
    }

    fn parse(line: &str) -> WorkloadArgs {
        let words = line.split_whitespace().skip(2);
        Cli::try_parse_from(std::iter::once("hccl-workload").chain(words))
            .unwrap()
            .w
    }

    #[test]
    fn servers_with_a_rank_table_or_fabric_file_is_refused() {
        // The file fixes the ranks: --servers would be ignored silently.
        for extra in ["--rank-table t.json", "--fabric f.json"] {
            let line = format!("--profile resnet50 --servers 4 {extra}");
            let words = std::iter::once("hccl-workload").chain(line.split_whitespace());
            let e = Cli::try_parse_from(words).err().expect("refused");
            assert!(e.to_string().contains("--servers"), "{e}");
        }
    }

    fn rows(a: &WorkloadArgs) -> Vec<Row> {
        let w = workload(a).unwrap();
        run_configs(a, &w, &build_fabric(a, &w).unwrap()).unwrap()
    }

    #[test]
    fn overlap_hides_communication_and_bounds_hold() {
        // ResNet-50 on 2 Atlas 800T A2 servers (16 ranks).
        let a = parse("hccl workload --profile resnet50 --servers 2 --configs baseline,overlap");
        let r = rows(&a);
        let (base, over) = (&r[0].step, &r[1].step);
        assert_eq!(r[0].buckets, 161, "one AllReduce per gradient");
        assert!(r[1].buckets < 20, "{} buckets", r[1].buckets);
        for s in [base, over] {
            assert_eq!(s.exposed_comm_ns, s.step_ns - s.compute_ns);
            assert!(s.step_ns >= s.compute_ns.max(s.comm_ns));
        }
        assert!(
            over.step_ns <= base.step_ns,
            "{} > {}",
            over.step_ns,
            base.step_ns
        );
        assert!(over.exposed_comm_ns < base.exposed_comm_ns);
        // Nothing overlaps in the baseline: every collective runs after
        // compute, back to back on every rank.
        assert_eq!(base.exposed_comm_ns, base.comm_ns);
        assert!(base.ops.iter().all(|o| o.start_ns >= base.compute_ns));
        // In the overlap, the first bucket starts before backward ends.
        assert!(over.ops[0].start_ns < over.compute_ns);
        assert_eq!(over.ops[0].start_ns, over.ops[0].ready_ns);
        // Both move the same gradient bytes: the same fp32 payloads.
        let sent = |s: &StepReport| s.ops.iter().map(|o| o.payload_bytes).sum::<u64>();
        assert_eq!(sent(base), sent(over));
        assert_eq!(sent(base), 25_557_032 * 4);
    }

    #[test]
    fn topk_at_one_percent_moves_fewer_bytes_than_dense_where_the_rule_says_sparse() {
        // 16 ranks: sparse below density 1/16, so 1% goes sparse.
        let a = parse("hccl workload --profile resnet50 --servers 2 --configs overlap,topk");
        let r = rows(&a);
        assert_eq!(
            r[1].compressed, r[1].buckets,
            "every bucket sparse at 1% on 16 ranks"
        );
        let (dense, sparse) = (&r[0].step, &r[1].step);
        // Measured on the simulated links, not computed from the counts.
        assert!(
            sparse.injected_bytes * 2 < dense.injected_bytes,
            "{} vs {}",
            sparse.injected_bytes,
            dense.injected_bytes
        );
        // 20% on 16 ranks is above the rule's density: dense, the same bytes
        // as overlap plus the bucket checks.
        let mut a = a;
        a.topk_ratio = 0.2;
        let r = rows(&a);
        assert_eq!(r[1].compressed, 0);
        assert!(r[1].step.injected_bytes >= r[0].step.injected_bytes);
    }

    #[test]
    fn int8_by_all_gather_beats_dense_bytes_only_on_few_ranks() {
        // Each rank receives P-1 int8 payloads (~len bytes each) against
        // ~8(P-1)/P·len for a dense fp32 AllReduce: fewer bytes below 8 ranks.
        for (line, fewer) in [
            (
                "hccl workload --profile resnet50 --preset ring --servers 4",
                true,
            ),
            ("hccl workload --profile resnet50 --servers 2", false),
        ] {
            let r = rows(&parse(&format!("{line} --configs overlap,int8")));
            let (dense, int8) = (r[0].step.injected_bytes, r[1].step.injected_bytes);
            assert_eq!(int8 < dense, fewer, "{line}: int8 {int8} vs dense {dense}");
            assert_eq!(r[1].compressed, r[1].buckets);
        }
    }

    #[test]
    fn a_workload_file_with_a_bad_field_is_named() {
        let dir = std::env::temp_dir().join(format!("hccl-workload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.json");
        std::fs::write(
            &path,
            r#"{"version": 1, "name": "m", "layers": [{"name": "fc", "backward_ns": 10, "grad_bytes": [4, 10]}]}"#,
        )
        .unwrap();
        let mut a = parse("hccl workload --profile resnet50");
        a.profile = None;
        a.file = Some(path.clone());
        let e = format!("{:#}", execute(&a).unwrap_err());
        assert!(e.contains("layers[0].grad_bytes[1] = 10"), "{e}");
        std::fs::write(
            &path,
            r#"{"version": 1, "name": "m", "layers": [{"name": "fc", "backward_ns": 10, "grad_bytes": [4]}], "extra": 1}"#,
        )
        .unwrap();
        let e = format!("{:#}", execute(&a).unwrap_err());
        assert!(e.contains("unknown field `extra`"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        let e = execute(&parse("hccl workload --profile vgg")).unwrap_err();
        assert!(e.downcast_ref::<FlagError>().is_some());
        assert!(format!("{e}").contains("resnet50, gpt2, gpt3-xl"), "{e}");
        let e = execute(&parse("hccl workload --profile gpt2 --tflops 0")).unwrap_err();
        assert!(format!("{e}").starts_with("--tflops 0"), "{e}");
    }

    #[test]
    fn a_cluster_too_large_to_simulate_is_refused_before_its_fabric_is_built() {
        // The trial's 100,000 servers (800,000 ranks): refused at once,
        // naming the flag and the limit (the fabric alone would take
        // minutes to build, the step hours to simulate).
        let e = execute(&parse("hccl workload --profile resnet50 --servers 100000")).unwrap_err();
        assert!(e.downcast_ref::<FlagError>().is_some(), "{e:#}");
        let e = format!("{e:#}");
        assert!(
            e.starts_with("--servers 100000: 800000 ranks is more than the limit of 16384"),
            "{e}"
        );
        assert!(e.contains("--max-ranks 800000"), "{e}");
        // Allowed that many ranks, the memory estimate is checked.
        let big = "hccl workload --profile resnet50 --servers 100000 --max-ranks 800000";
        let e = format!(
            "{:#}",
            execute(&parse(&format!("{big} --sim-memory 4G"))).unwrap_err()
        );
        assert!(
            e.starts_with("--servers 100000: the simulation would need about"),
            "{e}"
        );
        assert!(e.contains("(800000 ranks, "), "{e}");
        assert!(e.contains("the limit of 4.0 GiB (--sim-memory)"), "{e}");
        // Every configuration's ops count: baseline alone has one per gradient.
        let ops = |extra: &str| {
            let line = format!("{big} --sim-memory 1K {extra}");
            let e = format!("{:#}", execute(&parse(&line)).unwrap_err());
            let at = e.find(" ranks, ").unwrap() + " ranks, ".len();
            e[at..].split(' ').next().unwrap().parse::<u64>().unwrap()
        };
        let base = ops("--configs baseline");
        assert_eq!(base, 161);
        assert!(ops("") > base);
        // A raised limit lets a small run through.
        let ok = parse("hccl workload --profile resnet50 --configs baseline --sim-memory 1G");
        assert!(execute(&ok).is_ok());
    }

    #[test]
    fn output_paths_are_checked_before_anything_is_simulated_or_written() {
        let dir = std::env::temp_dir().join(format!("hccl-workload-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let written = dir.join("w.json");
        let trace = dir.join("t.json");
        let missing = "/nonexistent-dir/x.json";
        // A bad --trace: refused before the workload file is written (it
        // was written, and the step simulated, before the trace failed).
        let mut a = parse("hccl workload --profile resnet50 --configs baseline");
        a.write_workload = Some(written.clone());
        a.trace = Some(missing.into());
        let e = format!("{:#}", execute(&a).unwrap_err());
        assert_eq!(
            e.split(": cannot create the file").next(),
            Some("--trace /nonexistent-dir/x.json"),
            "{e}"
        );
        assert!(
            !written.exists(),
            "--write-workload written before the check"
        );
        // A bad --write-workload names its flag; the good --trace path is
        // left as it was (not created).
        a.write_workload = Some(missing.into());
        a.trace = Some(trace.clone());
        let e = format!("{:#}", execute(&a).unwrap_err());
        assert!(
            e.starts_with("--write-workload /nonexistent-dir/x.json: cannot create the file"),
            "{e}"
        );
        assert!(!trace.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_trace_shows_compute_and_communication_overlapping() {
        let a = parse("hccl workload --profile resnet50 --servers 2 --configs overlap");
        let r = rows(&a);
        let doc = trace(&workload(&a).unwrap(), &r);
        let ev = doc["traceEvents"].as_array().unwrap();
        let slices = |tid: u64| -> Vec<(f64, f64)> {
            ev.iter()
                .filter(|e| e["ph"] == "X" && e["tid"] == tid)
                .map(|e| {
                    let ts = e["ts"].as_f64().unwrap();
                    (ts, ts + e["dur"].as_f64().unwrap())
                })
                .collect()
        };
        let compute = slices(1);
        let comm = slices(2);
        assert!(compute.len() > 50 && !comm.is_empty());
        let overlapping = comm
            .iter()
            .filter(|c| compute.iter().any(|k| c.0 < k.1 && k.0 < c.1))
            .count();
        assert!(overlapping > 0, "no collective overlaps compute");
        assert!(ev
            .iter()
            .any(|e| e["ph"] == "M" && e["args"]["name"] == "overlap"));
    }
}

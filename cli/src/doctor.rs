//! `hccl doctor DIR`: reads the flight-recorder dumps of every rank in
//! `DIR` (`HCCL_FLIGHT_RECORDER_DIR` of the failed job) and names the
//! root cause ([`hccl::flight::diagnose`]); with `--replay`, then replays
//! the run on the simulator (`replay.rs`, as `hccl sim --replay DIR`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;

/// `hccl doctor` flags.
#[derive(Args, Debug)]
pub(crate) struct DoctorArgs {
    /// The directory of the dumps (the job's HCCL_FLIGHT_RECORDER_DIR; copy every host's files into one).
    pub(crate) dir: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Then replay the run on the simulator: its ranks' ops, communicators
    /// and the faults the dumps imply (writes DIR/replay/scenario.json and
    /// faults.json); prints the hang report and the line that reproduces it.
    #[arg(long)]
    pub(crate) replay: bool,
    /// The replay's fabric preset (default full-mesh, the run's ranks).
    #[arg(long, requires = "replay", conflicts_with = "rank_table")]
    pub(crate) preset: Option<String>,
    /// Servers of the replay's preset (default: as many as the ranks fill).
    #[arg(long, requires = "replay")]
    pub(crate) servers: Option<u32>,
    /// The replay's cluster as an HCCL rank table (the run's own).
    #[arg(long, requires = "replay")]
    pub(crate) rank_table: Option<PathBuf>,
    /// Seed of the replay.
    #[arg(long, requires = "replay", default_value_t = 0)]
    pub(crate) seed: u64,
}

/// Prints the diagnosis: exit 0 when no failure is found, 4 when a root
/// cause is named; with `--replay`, then the replay's output, and its
/// exit code (`hccl sim`'s: 4 a hang, 3 mismatched arguments, 0 none).
pub(crate) fn run(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let read = hccl::flight::read_dumps_noting(&a.dir).context("hccl doctor")?;
    // A file cut short after it was written: its complete records are read.
    for w in &read.warnings {
        eprintln!("warning: {w}");
    }
    let dumps = read.dumps;
    if dumps.is_empty() {
        bail!(
            "hccl doctor: no flight-recorder dumps (*.jsonl) in {}; run the job with {}={} (ranks dump when an op fails, on abort and on SIGUSR1)",
            a.dir.display(),
            hccl::flight::ENV_DIR,
            a.dir.display()
        );
    }
    let d = hccl::flight::diagnose(dumps);
    if a.replay {
        let sim = super::sim::SimArgs {
            replay: Some(a.dir.clone()),
            preset: a.preset.clone(),
            servers: a.servers,
            rank_table: a.rank_table.clone(),
            seed: a.seed,
            json: a.json,
            ..super::sim::SimArgs::default()
        };
        let r = super::replay::run(&a.dir, &sim)?;
        if a.json {
            let both = serde_json::json!({
                "doctor": serde_json::from_str::<serde_json::Value>(&d.to_json())?,
                "replay": serde_json::from_str::<serde_json::Value>(&r.output)?,
            });
            println!("{}", serde_json::to_string_pretty(&both)?);
        } else {
            print!("{}", d.to_text());
            println!("\n== replay on the simulator ==");
            println!("{}", r.output);
        }
        return Ok(ExitCode::from(r.code));
    }
    if a.json {
        println!("{}", d.to_json());
    } else {
        print!("{}", d.to_text());
    }
    Ok(ExitCode::from(if d.root_causes.is_empty() { 0 } else { 4 }))
}

//! `hccl doctor DIR`: reads the flight-recorder dumps of every rank in
//! `DIR` (`HCCL_FLIGHT_RECORDER_DIR` of the failed job) and names the
//! root cause ([`hccl::flight::diagnose`]).

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
}

/// Prints the diagnosis: exit 0 when no failure is found, 4 when a root
/// cause is named.
pub(crate) fn run(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let dumps = hccl::flight::read_dumps(&a.dir).context("hccl doctor")?;
    if dumps.is_empty() {
        bail!(
            "hccl doctor: no flight-recorder dumps (*.jsonl) in {}; run the job with {}={} (ranks dump when an op fails, on abort and on SIGUSR1)",
            a.dir.display(),
            hccl::flight::ENV_DIR,
            a.dir.display()
        );
    }
    let d = hccl::flight::diagnose(dumps);
    if a.json {
        println!("{}", d.to_json());
    } else {
        print!("{}", d.to_text());
    }
    Ok(ExitCode::from(if d.root_causes.is_empty() { 0 } else { 4 }))
}

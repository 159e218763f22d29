//! The size guard of the simulator's commands (`hccl sim`, `hccl
//! workload`): a run's memory, estimated from its ranks and ops before the
//! fabric is built, is refused above a limit with the flag that asked for
//! it, instead of the run growing for minutes until the machine runs out
//! (`hccl workload --servers 100000`, 800,000 ranks, had reached 6 GB after
//! a minute without a line of output). Runs that pass show a progress line
//! on stderr when it is a terminal ([`progress`]).

use std::io::IsTerminal as _;

use hccl_sim::scenario_file::ScenarioFile;
use hccl_topology::limits::human_bytes;
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions};
use indicatif::{ProgressBar, ProgressStyle};

use crate::sim::{bad_flag, SimArgs};

/// Bytes a full (unfolded) timing run of these commands holds per rank
/// besides its per-op records, the fabric's share included: 16 KiB,
/// measured on Atlas 800T A2 clusters (sim/README.md, "How large a run may
/// be": peak RSS grew by 12.7–14.4 KiB per added rank from 256 to 1,024
/// ranks, `hccl sim` and `hccl workload --configs overlap`). The scale
/// tables' 2–4 KB per rank are `scale_bench`'s runs with an executor
/// window of 4; these commands run with the default 64.
pub(crate) const BYTES_PER_RANK: u64 = 16 << 10;

/// Bytes per rank and op of a run's records: the engine's start and end
/// time (at most 2 × `u64`) and the report's (`OpResult::start_ns` /
/// `end_ns`, 2 × `Option<u64>`), kept for every op until the run ends
/// (measured: ~32 B per rank for each of resnet50's 156 more ops of
/// `--configs baseline` than `overlap`, at 512 ranks).
pub(crate) const BYTES_PER_RANK_OP: u64 = 48;

/// The most ranks a run takes unless `--max-ranks` allows more: the
/// largest world sim/README.md's scale tables simulate in full (every CLI
/// run is a full one), hier-16384, where one 1 GiB AllReduce took 50–153
/// CPU-s; a run of many ops there takes hours, and memory alone does not
/// say so (800,000 ranks of one op fit in 5 GiB).
pub(crate) const MAX_RANKS: u64 = 16_384;

/// What a run holds: its ranks and its ops (collectives of every
/// configuration a command simulates before it prints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SimSize {
    /// Simulated ranks (the fabric's world).
    pub(crate) ranks: u64,
    /// Ops whose records are kept.
    pub(crate) ops: u64,
}

impl SimSize {
    /// The estimate, bytes: `ranks × (BYTES_PER_RANK + ops ×
    /// BYTES_PER_RANK_OP)`.
    pub(crate) fn bytes(self) -> u128 {
        u128::from(self.ranks)
            * (u128::from(BYTES_PER_RANK) + u128::from(self.ops) * u128::from(BYTES_PER_RANK_OP))
    }
}

/// The limit in bytes and what set it: `--sim-memory`, else half of the
/// memory available, else 8 GiB (as `hccl test`'s data check:
/// [`crate::memory_size::memory_limit`]).
pub(crate) fn limit(flag: Option<u64>, available: Option<u64>) -> (u64, String) {
    crate::memory_size::memory_limit("--sim-memory", flag, available)
}

/// The limits a run is checked against: `--max-ranks` and `--sim-memory`
/// (`None`: [`MAX_RANKS`], and half the memory available); the same two
/// flags on every simulating command (`#[command(flatten)]` into
/// `hccl sim`'s, `hccl workload`'s and `hccl test`'s arguments).
#[derive(clap::Args, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The most ranks to simulate (default 16384, the largest full run in
    /// sim/README.md's scale tables): a larger cluster is refused before
    /// it starts, as its run would take hours.
    #[arg(long = "max-ranks", value_name = "N", value_parser = crate::flag_number::whole::<u64>, allow_negative_numbers = true)]
    pub(crate) ranks: Option<u64>,
    /// `--sim-memory SIZE`, bytes.
    #[arg(long = "sim-memory", value_name = "SIZE", value_parser = crate::memory_size::parse_memory, allow_hyphen_values = true,
        help = concat!("The simulation's memory limit: ", crate::memory_size::size_help!(),
            "; default half the memory available. A run whose estimate (ranks × the simulator's bytes per rank and op, sim/README.md) is above it is refused before it starts"))]
    pub(crate) memory: Option<u64>,
}

/// Refuses a run of `size` above the limits, naming `asked_by` (the flag
/// and value that set the ranks: `--servers 100000`), the ranks, ops,
/// estimate and limit, and the flag that raises it (`--max-ranks`,
/// `--sim-memory`).
///
/// # Errors
/// A flag error (usage, exit 2) when the ranks or the memory estimate are
/// above their limit.
pub(crate) fn check(
    size: SimSize,
    asked_by: &str,
    limits: Limits,
    available: Option<u64>,
) -> anyhow::Result<()> {
    let max_ranks = limits.ranks.unwrap_or(MAX_RANKS);
    if size.ranks > max_ranks {
        let why = match limits.ranks {
            Some(_) => "--max-ranks".to_string(),
            None => format!("the largest world sim/README.md's scale tables simulate in full; one 1 GiB AllReduce on {MAX_RANKS} ranks took 50-153 CPU-s there"),
        };
        return Err(bad_flag(format!(
            "{asked_by}: {} ranks is more than the limit of {max_ranks} ({why}), for a run of {} op(s); simulate fewer ranks, or allow them with --max-ranks {}",
            size.ranks, size.ops, size.ranks
        )));
    }
    let flag = limits.memory;
    let need = size.bytes();
    let (limit, why) = limit(flag, available);
    if need <= u128::from(limit) {
        return Ok(());
    }
    let gib = need.div_ceil(1 << 30);
    Err(bad_flag(format!(
        "{asked_by}: the simulation would need about {} of memory ({} ranks, {} op(s): {} per rank and {BYTES_PER_RANK_OP} B per rank and op, the simulator's figures in sim/README.md), more than the limit of {} ({why}); simulate fewer ranks, or raise the limit with --sim-memory {gib}G",
        human_bytes(need),
        size.ranks,
        size.ops,
        human_bytes(u128::from(BYTES_PER_RANK)),
        human_bytes(u128::from(limit)),
    )))
}

/// The ranks of a preset run, known before its fabric is built: the
/// servers (`--servers`, else the scenario file's, else 1) times the
/// preset's NPUs per server (1 for the generic shapes), and the flag that
/// set them. `None` for a rank table or fabric file (their fabric is
/// built first) and for an unknown preset (the fabric's error names it).
pub(crate) fn preset_ranks(a: &SimArgs, file: &ScenarioFile) -> Option<(u64, String)> {
    if a.rank_table.is_some() || a.fabric.is_some() {
        return None;
    }
    let name = a
        .preset
        .as_deref()
        .or(file.preset.as_deref())
        .unwrap_or("atlas800t-a2");
    // One server of the preset says how many NPUs a server has.
    let one = Preset::parse(name)
        .and_then(|p| build_preset_with(p, 1, &PresetOptions::default()))
        .ok()?;
    let servers = a.servers.or(file.servers).unwrap_or(1);
    let asked_by = match (a.servers, file.servers) {
        (Some(s), _) => format!("--servers {s}"),
        (None, Some(s)) => format!("the scenario's servers = {s}"),
        (None, None) => format!("--preset {name}"),
    };
    let ranks = u64::from(servers) * u64::from(one.world_size());
    Some((ranks, asked_by))
}

/// The fabric of `a` ([`crate::sim::fabric`]), built only when the run
/// fits: a preset's ranks are checked before the fabric is built, a rank
/// table's or fabric file's after. `ops` gives the run's op count for a
/// world of that many ranks.
///
/// # Errors
/// [`check`]'s, the fabric's, and `ops`'s.
pub(crate) fn guarded_fabric(
    a: &SimArgs,
    file: &ScenarioFile,
    ops: impl Fn(u32) -> anyhow::Result<u64>,
) -> anyhow::Result<Fabric> {
    let available = crate::memory_size::available_memory();
    if let Some((ranks, asked_by)) = preset_ranks(a, file) {
        // Past u32 the fabric refuses the count itself.
        if let Ok(world) = u32::try_from(ranks) {
            let size = SimSize {
                ranks,
                ops: ops(world)?,
            };
            check(size, &asked_by, a.limits, available)?;
        }
        return crate::sim::fabric(a, file);
    }
    let fabric = crate::sim::fabric(a, file)?;
    let asked_by = match (&a.rank_table, &a.fabric) {
        (Some(p), _) => format!("--rank-table {}", p.display()),
        (None, Some(p)) => format!("--fabric {}", p.display()),
        (None, None) => "--preset".to_string(),
    };
    let world = fabric.world_size();
    let size = SimSize {
        ranks: u64::from(world),
        ops: ops(world)?,
    };
    check(size, &asked_by, a.limits, available)?;
    Ok(fabric)
}

/// A progress line on stderr for a run of `len` steps (`0`: a spinner),
/// or a hidden bar when stderr is not a terminal; `finish_and_clear` it
/// when done.
pub(crate) fn progress(len: u64, what: String) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (bar, template) = if len == 0 {
        (ProgressBar::new_spinner(), "{spinner} {msg} [{elapsed}]")
    } else {
        (
            ProgressBar::new(len),
            "{bar:30} {pos}/{len} {msg} [{elapsed}]",
        )
    };
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what);
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_ranks_times_per_rank_and_per_op_bytes() {
        let s = SimSize { ranks: 8, ops: 10 };
        assert_eq!(s.bytes(), 8 * (16384 + 10 * 48));
    }

    #[test]
    fn a_run_above_the_limit_names_the_flag_estimate_limit_and_override() {
        // 16,000 ranks (under the rank limit) and 250 ops: ~433 MiB.
        let size = SimSize {
            ranks: 16_000,
            ops: 250,
        };
        let mem = |m| Limits {
            ranks: None,
            memory: Some(m),
        };
        let e = check(size, "--servers 2000", mem(100 << 20), None).unwrap_err();
        assert!(e.downcast_ref::<crate::sim::FlagError>().is_some());
        let e = e.to_string();
        assert!(
            e.starts_with("--servers 2000: the simulation would need about 433.1 MiB"),
            "{e}"
        );
        assert!(
            e.contains("(16000 ranks, 250 op(s): 16.0 KiB per rank and 48 B per rank and op"),
            "{e}"
        );
        assert!(
            e.contains("more than the limit of 100.0 MiB (--sim-memory)"),
            "{e}"
        );
        assert!(e.ends_with("raise the limit with --sim-memory 1G"), "{e}");
        // Half the memory available is the default; 8 GiB where unknown.
        let e = check(size, "x", Limits::default(), Some(256 << 20))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("limit of 128.0 MiB (half of the 256.0 MiB available)"),
            "{e}"
        );
        assert!(check(size, "x", Limits::default(), None).is_ok());
        assert!(check(size, "x", mem(1 << 30), Some(1 << 20)).is_ok());
    }

    #[test]
    fn a_world_above_the_rank_limit_is_refused_whatever_its_memory() {
        // The trial's 800,000 ranks: one op fits in a large memory, but is far
        // beyond what runs in reasonable time.
        let size = SimSize {
            ranks: 800_000,
            ops: 1,
        };
        let e = check(size, "--servers 100000", Limits::default(), Some(1 << 40))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "--servers 100000: 800000 ranks is more than the limit of 16384 (the largest world"
            ),
            "{e}"
        );
        assert!(e.ends_with("allow them with --max-ranks 800000"), "{e}");
        let allow = Limits {
            ranks: Some(800_000),
            memory: None,
        };
        assert!(check(size, "x", allow, Some(1 << 40)).is_ok());
        let at = SimSize {
            ranks: MAX_RANKS,
            ops: 1,
        };
        assert!(check(at, "x", Limits::default(), Some(1 << 40)).is_ok());
    }
}

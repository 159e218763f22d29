//! `hccl topo`: show a cluster topology from a preset, a rank table or a fabric file.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions, RankTable};

/// Subcommands of `hccl topo`.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum TopoCommand {
    /// Print ranks, servers, link classes and bisection bandwidth; optionally write Graphviz DOT.
    Show(ShowArgs),
}

/// Arguments of `hccl topo show`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["preset", "rank_table", "fabric"])))]
pub(crate) struct ShowArgs {
    /// Preset name: atlas800t-a2, atlas800-910a, atlas900-a3-superpod, ring, full-mesh, leaf-spine, torus2d.
    #[arg(long)]
    preset: Option<String>,
    /// Number of servers of the preset (default 1, as in `hccl test`).
    #[arg(long, requires = "preset", value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    servers: Option<u32>,
    /// Generic shapes: NPUs per server (default 1).
    #[arg(long, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    devices: Option<u32>,
    /// Leaf downlink:uplink oversubscription ratio (1 to 1000000).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    oversubscription: f64,
    /// torus2d: dimensions as ROWSxCOLS, e.g. 4x8.
    #[arg(long, value_parser = parse_dims)]
    torus: Option<(u32, u32)>,
    /// A rank table file (v1.0 shown as Atlas 800T A2 servers, v1.2 as A3 super pods).
    #[arg(long)]
    rank_table: Option<PathBuf>,
    /// A fabric JSON file.
    #[arg(long)]
    fabric: Option<PathBuf>,
    /// Also write the fabric as Graphviz DOT to this file.
    #[arg(long)]
    dot: Option<PathBuf>,
}

fn parse_dims(s: &str) -> Result<(u32, u32), String> {
    let (r, c) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("{s:?} is not ROWSxCOLS, e.g. 4x8"))?;
    let num = |t: &str| {
        t.trim()
            .parse::<u32>()
            .map_err(|_| format!("{t:?} in {s:?} is not a number"))
    };
    Ok((num(r)?, num(c)?))
}

/// Runs one `hccl topo` subcommand.
pub(crate) fn run(command: TopoCommand) -> anyhow::Result<ExitCode> {
    match command {
        TopoCommand::Show(args) => show(args),
    }
}

/// `hccl topo show`: exit status 2 with the usage line for a preset
/// the flags cannot build (`--preset nosuch`, `--servers 0`), 1 for a
/// file that cannot be read or written.
fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let usage = |e: &dyn std::fmt::Display| Ok(crate::usage_error(&["topo", "show"], e));
    let fabric = if let Some(name) = &args.preset {
        let preset = match Preset::parse(name) {
            Ok(p) => p,
            Err(e) => return usage(&e),
        };
        let opts = PresetOptions {
            devices_per_server: args.devices,
            oversubscription: args.oversubscription,
            torus_dims: args.torus,
            ..PresetOptions::default()
        };
        match build_preset_with(preset, args.servers.unwrap_or(1), &opts) {
            Ok(f) => f,
            Err(e) => return usage(&e),
        }
    } else if let Some(path) = &args.rank_table {
        let table =
            RankTable::from_file(path).with_context(|| format!("reading {}", path.display()))?;
        Fabric::for_rank_table(&table)?
    } else if let Some(path) = &args.fabric {
        Fabric::from_fabric_file(path).with_context(|| format!("reading {}", path.display()))?
    } else {
        anyhow::bail!(
            "give one of --preset NAME [--servers N], --rank-table FILE or --fabric FILE"
        );
    };
    write!(std::io::stdout().lock(), "{}", summary(&fabric))?;
    if let Some(path) = &args.dot {
        std::fs::write(path, fabric.to_dot())
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(std::io::stdout().lock(), "dot: wrote {}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The text `hccl topo show` prints.
pub(crate) fn summary(fabric: &Fabric) -> String {
    use std::fmt::Write as _;
    let c = fabric.cluster();
    let mut s = String::new();
    let _ = writeln!(s, "fabric: {}", fabric.name());
    let per_server = match c.ranks_per_server() {
        Some(n) => format!("{n} rank{} per server", if n == 1 { "" } else { "s" }),
        None => "servers of different sizes".to_string(),
    };
    let _ = writeln!(
        s,
        "ranks: {}   servers: {} ({per_server})   super pods: {}   homogeneous: {}",
        fabric.world_size(),
        c.server_count(),
        c.super_pods().len(),
        if c.is_homogeneous() { "yes" } else { "no" }
    );
    let g = fabric.graph();
    let npus = fabric.world_size() as usize;
    let _ = writeln!(
        s,
        "graph: {} nodes ({} NPUs, {} other node{}), {} directed links",
        g.node_count(),
        npus,
        g.node_count() - npus,
        if g.node_count() - npus == 1 { "" } else { "s" },
        g.edge_count()
    );
    let _ = writeln!(s, "link classes (bandwidth per direction):");
    for row in fabric.link_classes() {
        let _ = writeln!(
            s,
            "  {:<8} {:>8.1} GB/s {:>6} ns {:>8} directed links",
            row.class.to_string(),
            row.bandwidth_gbps,
            row.latency_ns,
            row.count
        );
    }
    let n = fabric.world_size();
    let _ = writeln!(
        s,
        "bisection bandwidth: {:.1} GB/s (ranks 0..{} to {}..{}, one direction)",
        fabric.bisection_bandwidth_gbps(),
        n / 2,
        n / 2,
        n
    );
    let p = fabric.params();
    let _ = writeln!(
        s,
        "device: per-message overhead {} ns, reduce {:.1} GB/s, copy {:.1} GB/s",
        p.msg_overhead_ns, p.reduce_gbps, p.copy_gbps
    );
    s
}

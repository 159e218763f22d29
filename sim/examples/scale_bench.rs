//! Scale benchmark of the simulator (timing-only mode). Prints, per case:
//! ranks, simulated time, wall time, events, events per second, peak
//! resident memory (VmHWM), bytes per rank and the trace hash (a
//! fingerprint of every event processed, to compare runs of two builds).
//!
//! Run: `cargo run --release -p hccl-sim --example scale_bench [-- case...]`
//! (no arguments: every case; each case runs in a child process so its peak
//! memory is its own). Bytes per rank = (peak RSS − RSS at the start of the
//! case) / ranks; "sim only" subtracts the peak after building the fabric
//! graph instead (the topology's share); of it, the file-backed pages
//! faulted in meanwhile (the simulator's code) are printed in KiB: a
//! fixed cost, most of "sim only" at 64 ranks.
//!
//! With `--features heap-count` a counting global allocator (the
//! `peak_alloc` crate) also gives "heap": the peak of the heap bytes asked
//! for while the case runs, above those held after the fabric build, per
//! rank. It excludes code pages and allocator slack, and counts a `realloc`
//! as a new block plus the old one (that crate moves every reallocation),
//! so it is an upper bound of the simulator's own data per rank; the
//! allocator's moves and zeroing make that build slower, so its other
//! columns are not the benchmark's.
//!
//! Cases:
//! - `ring-N` / `hier-N`: AllReduce of 1 GiB (fp32) on an Atlas 800T A2
//!   cluster of N ranks (8 NPUs per server on HCCS, RoCE leaf-spine between
//!   servers), flat ring or hierarchical (level0 ring inside servers,
//!   level1 ring between them).
//! - a `-sym` suffix (`hier-131072-sym`): the same case with symmetry
//!   folding on (`Scenario::symmetry`): one leaf's servers are simulated,
//!   the others are their images; the report is the full run's.
//! - `astra-N`: the ASTRA-sim reference case: a 1-D ring of N ranks, 50 GiB/s
//!   links (GB = 2^30 B, so 53.687 GB/s here), 500 ns per hop, no α and no
//!   reduce cost, ring AllReduce of 64 MiB in one chunk.
// The benchmark measures wall time; the simulator itself never does.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::process::Command;
use std::time::Instant;

#[cfg(feature = "heap-count")]
#[global_allocator]
static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

/// Resets the heap peak to the heap held now; returns that (bytes).
fn heap_mark() -> Option<u64> {
    #[cfg(feature = "heap-count")]
    {
        HEAP.reset_peak_usage();
        Some(HEAP.current_usage() as u64)
    }
    #[cfg(not(feature = "heap-count"))]
    None
}

/// The heap peak since [`heap_mark`] (bytes).
fn heap_peak() -> Option<u64> {
    #[cfg(feature = "heap-count")]
    {
        Some(HEAP.peak_usage() as u64)
    }
    #[cfg(not(feature = "heap-count"))]
    None
}

use hccl_algos::algo::{AlgoSpec, Algorithm, Levels};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::DataType;
use hccl_sim::{CostParams, Scenario};
use hccl_topology::{build_preset, build_preset_with, Fabric, Preset, PresetOptions};

const ALL: [&str; 13] = [
    "ring-64",
    "hier-64",
    "ring-512",
    "hier-512",
    "ring-4096",
    "hier-4096",
    "hier-16384",
    "ring-16384",
    "astra-1024",
    "astra-2048",
    "hier-16384-sym",
    "ring-16384-sym",
    "hier-131072-sym",
];

/// Executor window of the benchmark (env `SIM_WINDOW` overrides). Measured:
/// windows 4 and 8 give the same simulated times on every case here (3
/// too on the cases up to 1,024 ranks; 2 does not), and each slot costs
/// ~100 B per rank plus the receives it posts early.
const WINDOW: usize = 4;

fn vm_hwm_bytes() -> u64 {
    proc_status_bytes("VmHWM:")
}

/// A `/proc/self/status` field given in kB, in bytes (0 if unreadable).
fn proc_status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// User + system CPU seconds of this process (/proc/self/stat fields 14
/// and 15, in clock ticks of 1/100 s on Linux): on a shared machine this is
/// fairer than wall time.
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some(ticks as f64 / 100.0)
        })
        .unwrap_or(0.0)
}

fn run_case(name: &str) -> Result<(), String> {
    let (base, symmetry) = match name.strip_suffix("-sym") {
        Some(b) => (b, true),
        None => (name, false),
    };
    let (kind, n) = base
        .split_once('-')
        .and_then(|(k, n)| Some((k, n.parse::<u32>().ok()?)))
        .ok_or_else(|| format!("unknown case {name:?}; cases: {}", ALL.join(", ")))?;
    // Resident memory before anything of the case exists (binary, libc,
    // allocator): subtracted from the peak to get bytes per rank.
    let baseline = proc_status_bytes("VmRSS:");
    let t_build = Instant::now();
    let (fabric, costs, bytes, algo): (Fabric, Option<CostParams>, u64, AlgoSpec) = match kind {
        "ring" | "hier" => {
            let f = build_preset(Preset::Atlas800tA2, n / 8).map_err(|e| e.to_string())?;
            let algo = if kind == "ring" {
                AlgoSpec::Flat(Algorithm::Ring)
            } else {
                AlgoSpec::Hierarchical(Levels {
                    level0: Some(Algorithm::Ring),
                    level1: Some(Algorithm::Ring),
                    level2: None,
                })
            };
            (f, None, 1 << 30, algo)
        }
        "astra" => {
            let opts = PresetOptions {
                link_gbps: 50.0 * 1.073_741_824,
                link_latency_ns: 500,
                ..PresetOptions::default()
            };
            let f = build_preset_with(Preset::Ring, n, &opts).map_err(|e| e.to_string())?;
            let costs = CostParams {
                msg_overhead_ns: 0,
                reduce_gbps: f64::INFINITY,
                copy_gbps: f64::INFINITY,
                op_overhead_ns: 0,
            };
            (f, Some(costs), 64 << 20, AlgoSpec::Flat(Algorithm::Ring))
        }
        _ => return Err(format!("unknown case {name:?}")),
    };
    let build_s = t_build.elapsed().as_secs_f64();
    // Peak after building the fabric: the simulator's own share is above it.
    let fabric_hwm = vm_hwm_bytes();
    // File-backed pages (the simulator's code, first run after the fabric
    // build) only grow: their growth is a fixed cost inside "sim only".
    let fabric_file = proc_status_bytes("RssFile:");
    let heap_start = heap_mark();
    let window: usize = std::env::var("SIM_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WINDOW);
    let mut sc = Scenario::new(&fabric).window(window).symmetry(symmetry);
    if let Some(c) = costs {
        sc = sc.costs(c);
    }
    let w = sc.world();
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, bytes / 4, DataType::Fp32, n);
    sc.collective(w, args, algo).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let cpu0 = cpu_seconds();
    let rep = sc.run().map_err(|e| e.to_string())?;
    let wall = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let hwm = vm_hwm_bytes();
    let code_kib = proc_status_bytes("RssFile:").saturating_sub(fabric_file) / 1024;
    let heap = match (heap_start, heap_peak()) {
        (Some(a), Some(b)) => format!("  heap {} B/rank", b.saturating_sub(a) / u64::from(n)),
        _ => String::new(),
    };
    let op = &rep.ops[0];
    println!(
        "{name:<11} ranks {n:>6}  sim {:>14} ns  busbw {:>7.2} GB/s  wall {wall:>8.3} s  cpu {cpu:>8.2} s (+{build_s:.2} s fabric)  events {:>11}  {:>6.2} M ev/cpu-s  VmHWM {:>8.1} MiB  {:>6} B/rank (sim only {:>6}, of it code pages {code_kib} KiB)  engine est {:>6} B/rank  largest component {}  folded period {}  trace {:016x}{heap}{}",
        op.time_ns.map_or("stalled".into(), |t| t.to_string()),
        op.busbw_gbps.unwrap_or(0.0),
        rep.stats.events,
        rep.stats.events as f64 / cpu.max(0.01) / 1e6,
        hwm as f64 / (1 << 20) as f64,
        hwm.saturating_sub(baseline) / u64::from(n),
        hwm.saturating_sub(fabric_hwm) / u64::from(n),
        rep.stats.memory_bytes / u64::from(n),
        rep.stats.largest_component,
        rep.stats.folded_period,
        rep.trace_hash,
        if rep.stall.is_some() { "  STALLED" } else { "" },
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(case) = args.iter().find_map(|a| a.strip_prefix("--child=")) {
        if let Err(e) = run_case(case) {
            println!("{case:<11} error: {e}");
        }
        return;
    }
    let cases: Vec<String> = if args.is_empty() {
        ALL.iter().map(|s| s.to_string()).collect()
    } else {
        args
    };
    let exe = std::env::current_exe().expect("own path");
    for case in cases {
        let out = Command::new(&exe).arg(format!("--child={case}")).output();
        match out {
            Ok(o) => {
                print!("{}", String::from_utf8_lossy(&o.stdout));
                if !o.status.success() {
                    println!(
                        "{case:<11} failed: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    );
                }
            }
            Err(e) => println!("{case:<11} could not start: {e}"),
        }
    }
}

//! fp32 sum AllReduce over the TCP transport, ranks as processes on this host.
//!
//! ```text
//! cargo run --release -p hccl-hw --example tcp_allreduce_bench -- [NRANKS] [MIN_BYTES] [MAX_BYTES] [ALGO]
//! ```
//!
//! Defaults: 2 ranks, 8 KiB .. 64 MiB (doubling), `auto` (the selector,
//! as `Comm` uses it; or an algorithm name such as `ring`, `mesh`). Plans
//! are sliced as `Comm` slices them (`hccl_algos::select::plan_spec`);
//! `BENCH_SLICE_BYTES=b` slices every AllReduce longer than `b` bytes
//! instead (0: none). The parent starts
//! the bootstrap root and spawns NRANKS copies of itself; every rank times
//! `iters` back-to-back AllReduces per size (256 MiB / size, 5..2000) after
//! a tenth as many warm-up ones (at least 3), and rank 0
//! prints one line per size: bytes, time per op (µs, mean over iterations,
//! max over ranks), algbw = bytes / time and busbw = algbw · 2(n−1)/n
//! (nccl-tests' definitions, G = 10^9).
//!
//! Buffers are allocated as numpy allocates the Open MPI script's arrays
//! (`bench/mpi_allreduce.py`): from 4 MiB, on transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`, numpy's default on Linux: numpy 1.24 here).
//! Page size changes the cost of every same-host copy (the kernel pins the
//! lender's pages one page table entry at a time, and a 16 MiB buffer
//! outgrows the TLB in 4 KiB pages), so both sides must use the same.
//! `BENCH_HUGEPAGES=0` keeps 4 KiB pages here and in the Python scripts.
//!
//! `BENCH_IN_PLACE=1` runs every AllReduce in place (one buffer, as
//! `torch.distributed.all_reduce` and `MPI_IN_PLACE` do), refilling the
//! buffer before each op so that the result stays checkable.

use std::process::Command;
use std::time::{Duration, Instant};

use hccl_algos::algo::slice::plan_sliced;
use hccl_algos::algo::{plan, AlgoSpec, Algorithm};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::select::{choose, plan_spec, HcclAlgo, HostFit, PlannedOp};
use hccl_algos::transport::OpContext;
use hccl_algos::{DataType, ReduceOp};
use hccl_hw::tcp::{OpBuffers, OpInfo, RootInfo, TcpConfig, TcpRank};
use memmap2::{Advice, MmapMut, MmapOptions};

const COMM: u64 = 0xBE7C;

fn arg(i: usize, default: &str) -> String {
    std::env::args()
        .nth(i)
        .unwrap_or_else(|| default.to_string())
}

fn cfg() -> TcpConfig {
    let mut c = TcpConfig::from_env().expect("HCCL_* variables");
    c.if_ip.get_or_insert("127.0.0.1".parse().expect("ip"));
    c
}

fn main() {
    if let Ok(rank) = std::env::var("BENCH_RANK") {
        child(rank.parse().expect("BENCH_RANK"));
        return;
    }
    let n: u32 = arg(1, "2").parse().expect("NRANKS");
    let root = RootInfo::create_at(
        &cfg(),
        "127.0.0.1:0".parse().expect("addr"),
        "HCCL_IF_BASE_PORT",
    )
    .expect("root");
    let exe = std::env::current_exe().expect("exe");
    let kids: Vec<_> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .args(std::env::args().skip(1))
                .env("BENCH_RANK", r.to_string())
                .env("BENCH_NRANKS", n.to_string())
                .env("BENCH_ROOT", root.to_string())
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    let mut ok = true;
    for mut k in kids {
        ok &= k.wait().map(|s| s.success()).unwrap_or(false);
    }
    if !ok {
        eprintln!("a rank failed");
        std::process::exit(1);
    }
}

fn child(rank: u32) {
    let n: u32 = std::env::var("BENCH_NRANKS")
        .expect("n")
        .parse()
        .expect("n");
    let root: RootInfo = std::env::var("BENCH_ROOT")
        .expect("root")
        .parse()
        .expect("root info");
    let min: u64 = arg(2, "8192").parse().expect("MIN_BYTES");
    let max: u64 = arg(3, "67108864").parse().expect("MAX_BYTES");
    // "auto" (default): the selector, as `Comm` does, per size.
    let algo_arg = arg(4, "auto");
    let fixed: Option<AlgoSpec> = (algo_arg != "auto").then(|| algo_arg.parse().expect("ALGO"));
    let mut t = TcpRank::connect(cfg(), &root, n, rank, COMM).expect("bootstrap");
    // What `Comm` passes to the host policy.
    let forced =
        HcclAlgo::from_setting(std::env::var("HCCL_ALGO").ok().as_deref()).expect("HCCL_ALGO");
    let fit = HostFit {
        hosts: t.hosts(),
        ranks_fit_cpus: t.ranks_fit_cpus(),
    };
    let describe = |_: &[u8; 32], p: u32| format!("mismatch with rank {p}");
    let mut seq = 0u64;
    if rank == 0 {
        println!("# hccl-rs TCP AllReduce, fp32 sum, {n} processes, algorithm {algo_arg}");
        println!(
            "{:>12} {:>12} {:>12} {:>12} {:>12}",
            "bytes", "count", "time_us", "algbw_GB/s", "busbw_GB/s"
        );
    }
    // BENCH_SLICE_BYTES=b: slices of b bytes (0: none) instead of what
    // `plan_spec` does, for measuring `SLICE_BYTES`.
    let slice_bytes: Option<u64> = std::env::var("BENCH_SLICE_BYTES")
        .ok()
        .map(|v| v.parse().expect("BENCH_SLICE_BYTES"));
    let in_place = std::env::var("BENCH_IN_PLACE").is_ok_and(|v| v == "1");
    let mut bytes = min;
    while bytes <= max {
        let count = bytes / 4;
        let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, n)
            .with_op(ReduceOp::Sum)
            .with_in_place(in_place);
        let algo = fixed.unwrap_or_else(|| choose(&args, fit, forced.as_ref()));
        let mut input = buffer(bytes);
        for (i, b) in input.chunks_exact_mut(4).enumerate() {
            b.copy_from_slice(&((i % 7) as f32).to_le_bytes());
        }
        let mut output = buffer(bytes);
        // Short ops get more iterations, and a tenth as many warm-ups: 200
        // ops of 8 KiB (3 ms) after 3 warm-ups measured a CPU still waking
        // up (50 µs where the steady state is 13 µs). The Gloo and Open MPI
        // scripts in bench/ use the same rule.
        let iters = ((256u64 << 20) / bytes).clamp(5, 2000);
        let warmups = (iters / 10).max(3);
        let run = |t: &mut TcpRank, seq: u64, output: &mut [u8], scratch: &mut Vec<u8>| {
            let layout = GroupLayout::flat(n);
            let (sizes, p) = match slice_bytes {
                Some(b) => plan_sliced(&args, &algo, &layout, rank, b),
                None => plan_spec(&args, &algo, &layout, rank, fit)
                    .map(|PlannedOp { sizes, plan, .. }| (sizes, plan)),
            }
            .expect("plan");
            scratch.resize(sizes.scratch as usize, 0);
            let ctx = OpContext {
                comm: COMM,
                seq,
                rank,
                dtype: DataType::Fp32,
            };
            let info = OpInfo {
                name: "AllReduce",
                sig: [1; 32],
                describe: &describe,
            };
            let bufs = if in_place {
                // The refill is timed too: a memcpy of `bytes`, as a
                // training step's gradient buffer is rewritten each step.
                output.copy_from_slice(&input);
                let whole = (0, output.len() as u64);
                OpBuffers::in_place(output, whole, whole, scratch).expect("in-place buffers")
            } else {
                OpBuffers::separate(&input, output, scratch)
            };
            t.run(&ctx, &info, bufs, p).expect("allreduce");
        };
        let mut scratch = Vec::new();
        for _ in 0..warmups {
            run(&mut t, seq, &mut output, &mut scratch);
            seq += 1;
        }
        let start = Instant::now();
        for _ in 0..iters {
            run(&mut t, seq, &mut output, &mut scratch);
            seq += 1;
        }
        let mine = start.elapsed() / iters as u32;
        // Max over ranks: a tiny all-reduce of the times (µs as f64, max).
        let slowest = max_over_ranks(&mut t, &mut seq, n, rank, mine);
        let want = (0..count).map(|i| (i % 7) as f32 * n as f32);
        let good = output
            .chunks_exact(4)
            .zip(want)
            .all(|(b, w)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) == w);
        assert!(good, "wrong AllReduce result at {bytes} bytes");
        if rank == 0 {
            let secs = slowest.as_secs_f64();
            let algbw = bytes as f64 / secs / 1e9;
            let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
            println!(
                "{bytes:>12} {count:>12} {:>12.1} {algbw:>12.3} {busbw:>12.3}  {algo}",
                secs * 1e6
            );
        }
        bytes *= 2;
    }
}

/// Numpy's threshold for huge pages (`numpy/core/src/multiarray/alloc.c`).
const HUGEPAGE_FROM: u64 = 4 << 20;

/// A zeroed buffer of `bytes`, on transparent huge pages from
/// [`HUGEPAGE_FROM`] unless `BENCH_HUGEPAGES=0` (see the crate doc).
fn buffer(bytes: u64) -> MmapMut {
    let len = usize::try_from(bytes).expect("size fits in memory");
    let map = MmapOptions::new().len(len).map_anon().expect("mmap");
    let huge = std::env::var("BENCH_HUGEPAGES").map_or(true, |v| v != "0");
    if huge && bytes >= HUGEPAGE_FROM {
        // Best effort, as numpy: a kernel without THP leaves 4 KiB pages.
        let _ = map.advise(Advice::HugePage);
    }
    map
}

fn max_over_ranks(t: &mut TcpRank, seq: &mut u64, n: u32, rank: u32, mine: Duration) -> Duration {
    let args =
        CollectiveArgs::new(CollectiveKind::AllReduce, 1, DataType::Fp64, n).with_op(ReduceOp::Max);
    let (sizes, p) = plan(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(n),
        rank,
    )
    .expect("plan");
    let input = mine.as_secs_f64().to_le_bytes();
    let mut out = [0u8; 8];
    let mut scratch = vec![0u8; sizes.scratch as usize];
    let describe = |_: &[u8; 32], p: u32| format!("mismatch with rank {p}");
    let info = OpInfo {
        name: "AllReduce",
        sig: [2; 32],
        describe: &describe,
    };
    let ctx = OpContext {
        comm: COMM,
        seq: *seq,
        rank,
        dtype: DataType::Fp64,
    };
    t.run(
        &ctx,
        &info,
        OpBuffers::separate(&input, &mut out, &mut scratch),
        p,
    )
    .expect("max");
    *seq += 1;
    Duration::from_secs_f64(f64::from_le_bytes(out))
}

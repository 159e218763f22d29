//! Reduce-kernel throughput against `memcpy` on this machine.
//!
//! Run: `cargo run --release -p hccl-algos --example kernel_bench`
//! Optional arguments: milliseconds per measurement (default 200), then a
//! filter: only kernels whose label (`fp32 sum`, `bf16 max`, ...) contains
//! it (`""` for all), then the sizes as a comma-separated list (`64K,64M`,
//! the default), then the instruction set of the kernels (`portable`,
//! `avx2`, `avx512`, `avx512bf16`, `avx512fp16`; default: the widest this
//! CPU has, as the library picks; the kept-partials table always uses that
//! one).
//!
//! For each buffer size it times memcpy as the library calls it
//! ([`hccl_algos::kernels::copy::copy`]: `copy_from_slice`, split where
//! the buffers' page offsets make `rep movsb` slow on AMD Zen) and
//! the in-place kernel `reduce(dtype, op, dst, src)` on the same sizes and
//! prints GB/s (G = 10^9) of *buffer bytes*, i.e. `len(dst) / time`, so
//! memcpy moves 1x read + 1x write per byte and a reduce 2x read + 1x
//! write. `ratio` = kernel GB/s / memcpy GB/s at the same size. Each figure
//! is the best of batches of 200 µs (at least one call each) run for the
//! measurement time (at least 5).
//!
//! A second table times the fp16/bf16 kernels that also keep the f32
//! result ([`Partials`], issue 13): `reduce_kept` (what a `RecvReduce`
//! runs) and `fold_kept` (a `LocalReduce` fold step, its source already in
//! f32), against the plain `reduce` of the first table. Filter `kept`.

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use hccl_algos::kernels::{fold_kept, reduce, reduce_kept, reduce_with, values, Isa, Partials};
use hccl_algos::{DataType, ReduceOp};

/// Default buffer sizes: one in L2 (64 KiB per buffer, the three
/// operands of a reduce fit) and one from DRAM (64 MiB per buffer).
const SIZES: [usize; 2] = [64 << 10, 64 << 20];

/// A size as `4K`, `64K`, `8M` (bytes with a K/M suffix), or a plain number of bytes.
fn parse_size(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn size_label(len: usize) -> String {
    if len >= 1 << 20 {
        format!("{} MiB", len >> 20)
    } else if len >= 1 << 10 {
        format!("{} KiB", len >> 10)
    } else {
        format!("{len} B")
    }
}

/// Every data type with every reduce op (`Avg` reduces as `Sum`).
fn cases() -> Vec<(DataType, ReduceOp)> {
    let ops = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];
    DataType::ALL
        .into_iter()
        .flat_map(|d| ops.map(|o| (d, o)))
        .collect()
}

/// One element of value 1.0 (or 1) in `dtype`, little-endian: keeps sums
/// and products finite and away from subnormals, whose slow paths would
/// measure the FPU rather than the kernel.
fn one(dtype: DataType) -> Vec<u8> {
    match dtype {
        DataType::Fp32 => 1.0f32.to_le_bytes().to_vec(),
        DataType::Fp64 => 1.0f64.to_le_bytes().to_vec(),
        DataType::Fp16 => 0x3C00u16.to_le_bytes().to_vec(),
        DataType::Bf16 => 0x3F80u16.to_le_bytes().to_vec(),
        d => {
            let mut v = vec![0u8; d.size() as usize];
            v[0] = 1;
            v
        }
    }
}

/// Best GB/s of `len` bytes per call over short batches (each at least
/// [`BATCH`] and one call) run for at least `total`, and at least 5. On a
/// loaded machine a batch that a context switch cuts into is slow; with
/// batches much shorter than a scheduler time slice, the best of many is
/// one that ran alone.
// A benchmark times by the wall clock; the library itself has none
// (algos/clippy.toml).
#[allow(clippy::disallowed_methods)]
fn measure(len: usize, total: Duration, mut f: impl FnMut()) -> f64 {
    f(); // warm up: page in the buffers
    let mut best = f64::MAX;
    let begin = Instant::now();
    let mut batches = 0;
    while batches < 5 || begin.elapsed() < total {
        let start = Instant::now();
        let mut calls = 0u64;
        while calls == 0 || start.elapsed() < BATCH {
            f();
            calls += 1;
        }
        best = best.min(start.elapsed().as_secs_f64() / calls as f64);
        batches += 1;
    }
    len as f64 / best / 1e9
}

/// Length of one timed batch: well under a scheduler time slice (a few ms).
const BATCH: Duration = Duration::from_micros(200);

/// `print!` that ends the program quietly when stdout is closed (`| head`)
/// instead of panicking on the broken pipe.
macro_rules! out {
    ($($t:tt)*) => {
        if write!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(0);
        }
    };
}

/// `println!`, ending the program quietly as [`out!`] does.
macro_rules! outln {
    ($($t:tt)*) => {
        if writeln!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(0);
        }
    };
}

fn main() {
    let ms: u64 = match std::env::args().nth(1) {
        None => 200,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("kernel_bench: milliseconds {a:?}: a whole number, e.g. 200 (then filter, sizes, isa)");
            std::process::exit(2)
        }),
    };
    let batch = Duration::from_millis(ms.max(1));
    let filter = std::env::args().nth(2).unwrap_or_default();
    let sizes: Vec<usize> = match std::env::args().nth(3) {
        Some(list) => list
            .split(',')
            .map(|s| match parse_size(s) {
                // Every kernel's element (at most 8 bytes) divides it.
                Some(n) if n > 0 && n % 8 == 0 => n,
                _ => {
                    eprintln!(
                        "kernel_bench: size {s:?}: a positive multiple of 8 bytes, e.g. 64K or 64M"
                    );
                    std::process::exit(2)
                }
            })
            .collect(),
        None => SIZES.to_vec(),
    };
    let isa = match std::env::args().nth(4) {
        Some(name) => *Isa::ALL
            .iter()
            .find(|i| i.name() == name)
            .unwrap_or_else(|| {
                let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
                eprintln!(
                    "kernel_bench: instruction set {name:?}: use one of {}",
                    names.join(", ")
                );
                std::process::exit(2)
            }),
        None => Isa::best(),
    };
    let isa = if isa.is_available() {
        isa
    } else {
        outln!("{isa} is not available on this CPU: the kernels run portable");
        Isa::Portable
    };
    let cases: Vec<(DataType, ReduceOp)> = cases()
        .into_iter()
        .filter(|(d, o)| format!("{d} {o}").contains(&filter))
        .collect();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    outln!(
        "kernel_bench: {cpu}; kernels on {isa}; GB/s = buffer bytes / time, G = 1e9; ratio = kernel / memcpy"
    );
    outln!("{:<10}{:<14}{:>10}{:>9}", "size", "kernel", "GB/s", "ratio");
    for &len in &sizes {
        let label = size_label(len);
        let src = vec![1u8; len];
        let mut dst = vec![0u8; len];
        let memcpy = measure(len, batch, || {
            hccl_algos::kernels::copy::copy(&mut dst, black_box(&src));
            black_box(&mut dst);
        });
        outln!("{label:<10}{:<14}{memcpy:>10.2}{:>9.2}", "memcpy", 1.0);
        for &(dtype, op) in &cases {
            let unit = one(dtype);
            let src: Vec<u8> = unit.iter().copied().cycle().take(len).collect();
            let mut dst = src.clone();
            let gbs = measure(len, batch, || {
                reduce_with(isa, dtype, op, black_box(&mut dst), black_box(&src))
                    .expect("lengths are whole elements");
            });
            outln!(
                "{label:<10}{:<14}{gbs:>10.2}{:>9.2}",
                format!("{dtype} {op}"),
                gbs / memcpy
            );
        }
    }
    let kept: Vec<DataType> = [DataType::Bf16, DataType::Fp16]
        .into_iter()
        .filter(|d| format!("{d} sum kept").contains(&filter))
        .collect();
    if kept.is_empty() {
        return;
    }
    outln!();
    out!("{:<12}", "size");
    for d in &kept {
        out!(
            "{:>22}{:>22}",
            format!("{d} reduce_kept"),
            format!("{d} fold_kept")
        );
    }
    outln!();
    for &len in &sizes {
        out!("{:<12}", size_label(len));
        for &dtype in &kept {
            let src: Vec<u8> = one(dtype).into_iter().cycle().take(len).collect();
            let mut dst = src.clone();
            let mut parts = Partials::new();
            let plain = measure(len, batch, || {
                reduce(dtype, ReduceOp::Sum, black_box(&mut dst), black_box(&src))
                    .expect("whole elements");
            });
            let kept = measure(len, batch, || {
                reduce_kept(
                    dtype,
                    ReduceOp::Sum,
                    black_box(&mut dst),
                    0,
                    &mut parts,
                    &src,
                )
                .expect("whole elements");
            });
            let vals = values(dtype, &src, 0, None).expect("whole elements");
            let fold = measure(len, batch, || {
                fold_kept(
                    dtype,
                    ReduceOp::Sum,
                    black_box(&mut dst),
                    0,
                    &mut parts,
                    &vals,
                )
                .expect("whole elements");
            });
            out!(
                "{:>22}{:>22}",
                format!("{kept:.2} ({:.2}x)", kept / plain),
                format!("{fold:.2} ({:.2}x)", fold / plain)
            );
        }
        outln!();
    }
    outln!("(x = GB/s relative to the plain reduce of the same type and size)");
}

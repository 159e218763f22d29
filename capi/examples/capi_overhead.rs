//! The C layer's cost per op: an AllReduce through `HcclAllReduce` +
//! `aclrtSynchronizeStream` (the C API: checks, a stream hop, the
//! registry) beside the same communicator's `Comm::all_reduce` called
//! directly, at 8 KiB and 16 MiB, 2 ranks as threads of this process over
//! loopback TCP (`HcclCommInitAll`). Rounds alternate between the two
//! paths; each prints the median of the rounds' per-op means.
//!
//! `cargo run --release -p hccl-capi --example capi_overhead [ROUNDS [PATH [SIZE]]]`
//!
//! PATH `c` or `comm` runs that path only, every round (for `perf stat`
//! of one path); the table then shows it in both columns (`both`: the
//! default). SIZE `small` or `large` keeps the 8 KiB or the 16 MiB row.

use std::ffi::c_void;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use hccl::comm::ReduceOp;
use hccl_capi::ffi::*;

const RANKS: usize = 2;

fn ok(what: &str, code: i64) {
    assert_eq!(code, 0, "{what} returned {code}");
}

/// Per-op mean (µs) of `iters` ops on rank `r`, one path.
fn round(h: *mut c_void, stream: *mut c_void, c_path: bool, bytes: usize, iters: u32) -> f64 {
    let count = (bytes / 4) as u64;
    let mut send: *mut c_void = std::ptr::null_mut();
    let mut recv: *mut c_void = std::ptr::null_mut();
    ok("aclrtMalloc", aclrtMalloc(&mut send, bytes, 0).into());
    ok("aclrtMalloc", aclrtMalloc(&mut recv, bytes, 0).into());
    // Touch the pages first, as the direct path's vectors are.
    ok("aclrtMemset", aclrtMemset(send, bytes, 0, bytes).into());
    ok("aclrtMemset", aclrtMemset(recv, bytes, 0, bytes).into());
    let comm = hccl_capi::comm_ref(h).expect("a communicator");
    let (hs, mut hr) = (vec![1f32; bytes / 4], vec![0f32; bytes / 4]);
    let t = Instant::now();
    for _ in 0..iters {
        if c_path {
            ok(
                "HcclAllReduce",
                HcclAllReduce(send, recv, count, 4, 0, h, stream).into(),
            );
            ok(
                "aclrtSynchronizeStream",
                aclrtSynchronizeStream(stream).into(),
            );
        } else {
            comm.all_reduce(&hs, &mut hr, ReduceOp::Sum)
                .expect("all_reduce");
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(iters);
    ok("aclrtFree", aclrtFree(send).into());
    ok("aclrtFree", aclrtFree(recv).into());
    us
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(7);
    // None: alternate; Some(true): the C path only; Some(false): Comm only.
    let only: Option<bool> = match std::env::args().nth(2).as_deref() {
        Some("c") => Some(true),
        Some("comm") => Some(false),
        _ => None,
    };
    let mut devices = [0i32, 1];
    let mut comms = [std::ptr::null_mut::<c_void>(); RANKS];
    ok(
        "HcclCommInitAll",
        HcclCommInitAll(RANKS as u32, devices.as_mut_ptr(), comms.as_mut_ptr()).into(),
    );
    let handles: Vec<usize> = comms.iter().map(|&c| c as usize).collect();
    let barrier = Arc::new(Barrier::new(RANKS));
    println!("C layer cost per AllReduce (fp32 sum, {RANKS} ranks as threads over loopback TCP; medians of {rounds} alternating rounds)");
    println!(
        "{:>10} | {:>12} | {:>12} | {:>10}",
        "bytes", "Comm (us)", "C API (us)", "C - Comm"
    );
    // A third argument keeps one size: `small` (8 KiB) or `large` (16 MiB).
    let sizes: Vec<(usize, u32)> = [(8usize << 10, 2000u32), (16 << 20, 20)]
        .into_iter()
        .filter(|&(b, _)| match std::env::args().nth(3).as_deref() {
            Some("small") => b < 1 << 20,
            Some("large") => b >= 1 << 20,
            _ => true,
        })
        .collect();
    for (bytes, iters) in sizes {
        let per_rank: Vec<_> = (0..RANKS)
            .map(|r| {
                let b = Arc::clone(&barrier);
                let h = handles[r];
                std::thread::spawn(move || {
                    let mut stream: *mut c_void = std::ptr::null_mut();
                    ok("aclrtCreateStream", aclrtCreateStream(&mut stream).into());
                    let h = h as *mut c_void;
                    let _ = round(h, stream, true, bytes, iters / 10 + 1); // warm-up
                    let (mut direct, mut capi) = (Vec::new(), Vec::new());
                    for i in 0..2 * rounds {
                        b.wait();
                        let c_path = only.unwrap_or(i % 2 == 1);
                        let us = round(h, stream, c_path, bytes, iters);
                        if i % 2 == 1 {
                            capi.push(us)
                        } else {
                            direct.push(us)
                        }
                    }
                    ok("aclrtDestroyStream", aclrtDestroyStream(stream).into());
                    (median(direct), median(capi))
                })
            })
            .collect();
        let res: Vec<(f64, f64)> = per_rank.into_iter().map(|t| t.join().unwrap()).collect();
        let (d, c) = res[0];
        println!("{bytes:>10} | {d:>12.2} | {c:>12.2} | {:>10.2}", c - d);
    }
    for c in comms {
        ok("HcclCommDestroy", HcclCommDestroy(c).into());
    }
}

//! Bytes on the wire per step, measured: `wire_bytes RANKS ELEMENTS STEPS`
//! runs dense AllReduce, Top-K 1% and INT8 on `RANKS` TCP ranks (threads
//! of this process over loopback, `HCCL_INTRA_CMA_ENABLE=0` and
//! `HCCL_SHM_DISABLE=1` so every byte goes through a socket) and reads the kernel's per-socket `bytes_sent`
//! (`ss -tinp`, TCP_INFO) of this process's sockets before and after each
//! configuration. Prints one JSON line per configuration: bytes sent by
//! all ranks per step, and per rank. The counts include TCP payload only
//! (no headers) and the bucket check's 24-byte AllGather.

use std::process::Command;

use hccl::comm::ReduceOp;
use hccl::{BackendKind, Comm};
use hccl_compress::{Compression, ErrorFeedback, Int8, TopK};

/// Sum of `bytes_sent` over the TCP sockets of this process.
fn bytes_sent() -> u64 {
    let out = Command::new("ss")
        .args(["-tinpH"])
        .output()
        .expect("ss (iproute2) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let me = format!("pid={},", std::process::id());
    let mut total = 0;
    let mut ours = false;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            ours = line.contains(&me);
        }
        if ours {
            if let Some(v) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("bytes_sent:"))
            {
                total += v.parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ranks: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(4);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1 << 22);
    let steps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    // Before any communicator reads it.
    std::env::set_var("HCCL_INTRA_CMA_ENABLE", "0");
    // Same-host frames would otherwise travel in shared memory.
    std::env::set_var("HCCL_SHM_DISABLE", "1");
    let comms = Comm::init_all_on(BackendKind::Tcp, ranks).expect("TCP ranks");
    let configs = [
        ("dense", None),
        (
            "topk_1pct",
            Some(Compression::TopK(TopK::new(0.01).unwrap())),
        ),
        (
            "topk_0.1pct",
            Some(Compression::TopK(TopK::new(0.001).unwrap())),
        ),
        ("int8", Some(Compression::Int8(Int8::default()))),
    ];
    for (name, comp) in &configs {
        let before = bytes_sent();
        std::thread::scope(|s| {
            for c in &comms {
                s.spawn(move || {
                    let mut fb = ErrorFeedback::new();
                    for step in 0..steps {
                        let mut g: Vec<f32> = (0..n)
                            .map(|i| {
                                ((i * 31 + step * 7 + c.rank() as usize) % 1000) as f32 * 1e-3 - 0.5
                            })
                            .collect();
                        match comp {
                            None => c.all_reduce_in_place(&mut g, ReduceOp::Sum).unwrap(),
                            Some(comp) => {
                                comp.all_reduce(c, &mut g, &mut fb).unwrap();
                            }
                        }
                    }
                });
            }
        });
        let sent = bytes_sent() - before;
        let per_step = sent / steps as u64;
        println!(
            "{{\"config\": \"{name}\", \"ranks\": {ranks}, \"elements\": {n}, \"steps\": {steps}, \"bytes_per_step\": {per_step}, \"bytes_per_step_per_rank\": {}}}",
            per_step / u64::from(ranks)
        );
    }
    for c in comms {
        c.destroy().unwrap();
    }
}

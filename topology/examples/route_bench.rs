//! Route throughput: builds an Atlas 800T A2 cluster of 2048 servers
//! (16,384 ranks on a leaf-spine) and times the 16,384 ring-neighbour routes
//! `r -> r+1 mod n`, then all routes from rank 0. Prints routes per second.
//!
//! `cargo run --release -p hccl-topology --example route_bench [servers]`

use std::time::Instant;

use hccl_topology::{build_preset, Preset};

fn main() {
    let servers: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2048);
    let t = Instant::now();
    let fabric = match build_preset(Preset::Atlas800tA2, servers) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let n = fabric.world_size();
    println!(
        "{}: {} ranks, {} nodes, {} directed links, built in {:.1} ms",
        fabric.name(),
        n,
        fabric.graph().node_count(),
        fabric.graph().edge_count(),
        t.elapsed().as_secs_f64() * 1e3
    );
    for (label, pairs) in [
        (
            "ring neighbours r -> r+1",
            (0..n).map(|r| (r, (r + 1) % n)).collect::<Vec<_>>(),
        ),
        ("rank 0 -> every rank", (0..n).map(|r| (0, r)).collect()),
    ] {
        let t = Instant::now();
        let mut hops = 0usize;
        for &(s, d) in &pairs {
            hops += fabric.route(s, d).map(|r| r.hops()).unwrap_or(0);
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{label}: {} routes in {:.1} ms = {:.0} routes/s (mean {:.2} hops)",
            pairs.len(),
            secs * 1e3,
            pairs.len() as f64 / secs,
            hops as f64 / pairs.len() as f64
        );
    }
}

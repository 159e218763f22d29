//! Times Top-K selection (exact quickselect, DGC's sampled threshold) on
//! Gaussian data: `select_bench N[,N...] RATIO[,RATIO...] REPS`, one JSON
//! line per (size, ratio, method) with the median time of `REPS` runs in
//! ns. `bench/topk_select.py` runs it next to `torch.topk`.

use std::time::Instant;

use hccl_compress::select::{top_k, Selection};

fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (next().max(1e-300), next());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

fn list<T: std::str::FromStr>(s: &str) -> Vec<T> {
    s.split(',').filter_map(|x| x.parse().ok()).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = list(args.get(1).map_or("1048576", String::as_str));
    let ratios: Vec<f64> = list(args.get(2).map_or("0.01", String::as_str));
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    for &n in &sizes {
        let data = gaussian(n, n as u64);
        for &ratio in &ratios {
            let k = ((ratio * n as f64).ceil() as usize).min(n);
            for (name, sel) in [
                ("exact", Selection::Exact),
                ("sampled", Selection::Sampled { sample_ratio: 0.01 }),
            ] {
                let mut times: Vec<u128> = (0..reps + 1)
                    .map(|_| {
                        let t = Instant::now();
                        let idx = top_k(&data, k, sel);
                        let ns = t.elapsed().as_nanos();
                        assert_eq!(idx.len(), k);
                        ns
                    })
                    .skip(1)
                    .collect();
                times.sort_unstable();
                println!(
                    "{{\"method\": \"{name}\", \"n\": {n}, \"ratio\": {ratio}, \"k\": {k}, \"median_ns\": {}}}",
                    times[times.len() / 2]
                );
            }
        }
    }
}

//! `HCCL_PROFILING_ENABLE=1` makes a program using `Comm` write one record
//! per op and rank, on the simulator and on TCP. One test per file: the
//! profiling variables are read once per process.

use std::path::PathBuf;

use hccl::comm::{BackendKind, ReduceOp};

fn run_ops(backend: BackendKind, n: u32, counts: &[usize]) {
    let counts = counts.to_vec();
    hccl_conformance::on_threads(backend, n, move |c| {
        for &count in &counts {
            let send = vec![1.0f32; count];
            let mut recv = vec![0.0f32; count];
            c.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap();
            assert!(recv.iter().all(|&x| x == c.size() as f32));
        }
        c.destroy().unwrap();
    });
}

fn records(dir: &PathBuf) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap())
        .collect()
}

#[test]
fn every_rank_writes_one_record_per_op() {
    let base = std::env::temp_dir().join(format!("hccl-profiling-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::env::set_var("HCCL_PROFILING_ENABLE", "1");
    std::env::set_var("HCCL_PROFILING_OUTPUT_PATH", &base);
    std::env::remove_var("HCCL_ALGO");
    let counts = [1024usize, 65536, 3];

    // The simulator: 4 ranks, records in virtual time, the same on all
    // ranks; the clock runs across ops: each starts where the last ended.
    run_ops(BackendKind::Sim, 4, &counts);
    let docs = records(&base);
    assert_eq!(docs.len(), 4, "one file per rank");
    let mut times = Vec::new();
    for d in &docs {
        assert_eq!(d["format"], "hccl-rs-profile-v1");
        let recs = d["records"].as_array().unwrap();
        assert_eq!(recs.len(), counts.len(), "{d}");
        let mut last_end = 0;
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r["op"], "all_reduce");
            assert_eq!(r["seq"], i as u64);
            assert_eq!(r["count"], counts[i] as u64);
            assert_eq!(r["bytes"], 4 * counts[i] as u64);
            assert_eq!(r["simulated"], true);
            let (start, end) = (
                r["start_ns"].as_u64().unwrap(),
                r["end_ns"].as_u64().unwrap(),
            );
            assert_eq!(start, last_end, "{r}");
            assert!(end > start, "{r}");
            last_end = end;
            let algbw = r["algbw_gbps"].as_f64().unwrap();
            let want = 4.0 * counts[i] as f64 / (end - start) as f64;
            assert!((algbw - want).abs() < 1e-9 * want, "{r}");
            assert!((r["busbw_gbps"].as_f64().unwrap() - algbw * 1.5).abs() < 1e-9);
        }
        let span =
            |r: &serde_json::Value| r["end_ns"].as_u64().unwrap() - r["start_ns"].as_u64().unwrap();
        times.push(recs.iter().map(span).collect::<Vec<_>>());
    }
    assert!(times.windows(2).all(|w| w[0] == w[1]), "{times:?}");
    // More bytes take longer on the same fabric.
    assert!(times[0][1] > times[0][0], "{times:?}");

    // TCP threads: measured wall-clock times, ordered per rank.
    std::fs::remove_dir_all(&base).unwrap();
    run_ops(BackendKind::Tcp, 2, &counts);
    let docs = records(&base);
    assert_eq!(docs.len(), 2);
    for d in &docs {
        let recs = d["records"].as_array().unwrap();
        assert_eq!(recs.len(), counts.len(), "{d}");
        let mut last_end = 0;
        for r in recs {
            assert_eq!(r["simulated"], false);
            let (s, e) = (
                r["start_ns"].as_u64().unwrap(),
                r["end_ns"].as_u64().unwrap(),
            );
            assert!(s >= last_end && e > s, "{r}");
            last_end = e;
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}

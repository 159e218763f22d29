//! The same-host shared-memory rings (`hccl_hw::shm`): every frame of a
//! same-host pair travels in them, byte-exact, with the cross-memory path
//! on (small messages as bytes, large ones as descriptors in the rings) and
//! off (every byte through the rings); `HCCL_SHM_DISABLE=1` on one rank
//! keeps exactly its pairs on the socket; ring pressure (a 6 MiB message
//! through 256 KiB rings) and an early message that waits for budget.
#![cfg(target_os = "linux")]

use std::sync::Arc;

use hccl_hw::tcp::{TcpConfig, TcpRank};

mod common;
use common::{f32s, root, run_allreduce, COMM};

/// The tests' config with the rings on.
fn cfg() -> TcpConfig {
    TcpConfig {
        shm: true,
        ..common::cfg()
    }
}

const SIG: [u8; 32] = [5; 32];

fn input_of(r: u32, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i % 1000) as f32) * (r + 1) as f32 + r as f32)
        .collect()
}

fn expected(n: u32, count: usize) -> Vec<u8> {
    let tri = (n * (n + 1) / 2) as f32;
    let ranks = (n * (n - 1) / 2) as f32;
    f32s(
        &(0..count)
            .map(|i| (i % 1000) as f32 * tri + ranks)
            .collect::<Vec<_>>(),
    )
}

/// Runs a small and a large all-reduce on `n` thread ranks, each with its
/// config; returns (small ok, large ok, ring peers) per rank.
fn threads(n: u32, cfgs: Vec<TcpConfig>) -> Vec<(bool, bool, Vec<u32>)> {
    let info = root(&cfgs[0]);
    let cfgs = Arc::new(cfgs);
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let cfgs = Arc::clone(&cfgs);
            std::thread::spawn(move || {
                let mut t = TcpRank::connect(cfgs[r as usize].clone(), &info, n, r, COMM).unwrap();
                let peers = t.shm_peers();
                let small = run_allreduce(&mut t, 0, &f32s(&input_of(r, 5)), SIG).unwrap();
                let count = (3 << 19) + 3;
                let big = run_allreduce(&mut t, 1, &f32s(&input_of(r, count)), SIG).unwrap();
                (small == expected(n, 5), big == expected(n, count), peers)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn same_host_pairs_talk_through_the_rings_with_and_without_cma() {
    let n = 3;
    for intra_cma in [true, false] {
        // A 1 MB budget: early large messages wait for it while the rings
        // keep carrying the frames behind them.
        let c = TcpConfig {
            intra_cma,
            unexpected_bound: 1 << 20,
            ..cfg()
        };
        for (r, (small, big, peers)) in threads(n, vec![c.clone(); 3]).into_iter().enumerate() {
            assert!(small && big, "cma {intra_cma}, rank {r}: result differs");
            let others: Vec<u32> = (0..n).filter(|&p| p != r as u32).collect();
            assert_eq!(peers, others, "cma {intra_cma}, rank {r}: ring peers");
        }
    }
}

#[test]
fn shm_disable_on_one_rank_keeps_its_pairs_on_the_socket() {
    let off = TcpConfig::from_lookup(|k| (k == "HCCL_SHM_DISABLE").then(|| "1".into())).unwrap();
    let off = TcpConfig {
        shm: off.shm,
        ..cfg()
    };
    let on = TcpConfig::from_lookup(|k| (k == "HCCL_SHM_DISABLE").then(|| "0".into())).unwrap();
    assert!(on.shm);
    assert!(!off.shm);
    let n = 3;
    let out = threads(n, vec![cfg(), off, cfg()]);
    let want = [vec![2], vec![], vec![0]];
    for (r, (small, big, peers)) in out.into_iter().enumerate() {
        assert!(small && big, "rank {r}: result differs");
        assert_eq!(peers, want[r], "rank {r}: ring peers");
    }
}

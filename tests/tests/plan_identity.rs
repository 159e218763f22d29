//! One plan for every backend (issue 15): the same call plans the same
//! schedule on the simulator backend and on TCP (ranks as threads of this
//! process, every rank on this host), compared through `Comm::planned`,
//! which the run path plans with too. And `HCCL_ALGO` is read when a
//! communicator is built, not per op.
//!
//! Every test builds communicators, which read `HCCL_ALGO`, and one sets
//! it: they take [`ENV`] so that they do not race.

use std::sync::Mutex;

use hccl::comm::BackendKind;
use hccl::Comm;
use hccl_algos::algo::{AlgoSpec, Algorithm};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::RankSchedule;
use hccl_algos::{DataType, ReduceOp};

static ENV: Mutex<()> = Mutex::new(());

const KINDS: [CollectiveKind; 6] = [
    CollectiveKind::AllReduce,
    CollectiveKind::AllGather,
    CollectiveKind::ReduceScatter,
    CollectiveKind::Broadcast,
    CollectiveKind::Reduce,
    CollectiveKind::AllToAll,
];

const SIZES: [u64; 4] = [8, 8 << 10, 200 << 10, 2 << 20];

/// `kind` over `n` ranks with a `bytes`-byte fp32 message, rooted ops at
/// the last rank.
fn call(kind: CollectiveKind, bytes: u64, n: u32) -> CollectiveArgs {
    let mut a = CollectiveArgs::new(kind, bytes / 4, DataType::Fp32, n).with_op(ReduceOp::Sum);
    if matches!(kind, CollectiveKind::Broadcast | CollectiveKind::Reduce) {
        a = a.with_root(n - 1);
    }
    a
}

/// Every rank's plan of every call of the sweep on `comms`.
fn plans(comms: &[Comm]) -> Vec<(String, AlgoSpec, RankSchedule)> {
    let n = comms.len() as u32;
    let mut out = Vec::new();
    for kind in KINDS {
        for bytes in SIZES {
            let args = call(kind, bytes, n);
            for c in comms {
                let (algo, schedule) = c
                    .planned(&args)
                    .unwrap_or_else(|e| panic!("{kind:?} {bytes} B on {:?}: {e}", c.backend()))
                    .collect(c.rank());
                out.push((
                    format!("{kind:?} {bytes} B rank {}", c.rank()),
                    algo,
                    schedule,
                ));
            }
        }
    }
    out
}

#[test]
fn the_simulator_and_tcp_plan_the_same_schedule_for_the_same_call() {
    let _env = ENV.lock().unwrap_or_else(|p| p.into_inner());
    for n in [2, 3] {
        let sim = plans(&Comm::init_all_on(BackendKind::Sim, n).unwrap());
        let tcp = plans(&Comm::init_all_on(BackendKind::Tcp, n).unwrap());
        assert_eq!(sim.len(), tcp.len());
        for (s, t) in sim.iter().zip(&tcp) {
            assert_eq!(s.0, t.0);
            assert_eq!(s.1, t.1, "{n} ranks, {}: algorithm", s.0);
            assert_eq!(s.2.buffers, t.2.buffers, "{n} ranks, {}: buffer sizes", s.0);
            assert!(s.2.steps == t.2.steps, "{n} ranks, {}: steps differ", s.0);
        }
        // The sweep covers slicing where TCP slices (2 ranks fit 2 CPUs):
        // a simulator that planned unsliced would have failed above.
        let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
        if n as usize <= cpus {
            let big = call(CollectiveKind::AllReduce, 2 << 20, n);
            let (algo, schedule) = tcp
                .iter()
                .find(|p| p.0 == format!("AllReduce {} B rank 0", 2 << 20))
                .map(|p| (p.1, &p.2))
                .unwrap();
            let whole = hccl_algos::algo::plan(&big, &algo, &GroupLayout::flat(n), 0)
                .unwrap()
                .1
                .count();
            assert!(
                schedule.steps.len() > whole,
                "{n} ranks: 2 MiB AllReduce is not sliced ({} steps)",
                whole
            );
        }
    }
}

#[test]
fn hccl_algo_is_read_when_the_communicator_is_built_not_per_op() {
    let _env = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let args = call(CollectiveKind::AllReduce, 8 << 10, 2);
    std::env::remove_var("HCCL_ALGO");
    let before = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    let default = before[0].planned(&args).unwrap().algo;
    let ring = AlgoSpec::Flat(Algorithm::Ring);
    assert_ne!(default, ring, "the test needs a default other than ring");
    std::env::set_var("HCCL_ALGO", "ring");
    let after = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    // Set after `before` was built: it keeps its choice, for the query and
    // for the op it runs; `after` read it.
    assert_eq!(before[0].planned(&args).unwrap().algo, default);
    assert_eq!(before[0].algorithm(&args).unwrap(), default);
    assert_eq!(after[0].planned(&args).unwrap().algo, ring);
    // A bad value set after construction changes nothing either: the
    // query, and the op, which plans with the stored setting.
    std::env::set_var("HCCL_ALGO", "rign");
    assert_eq!(before[0].planned(&args).unwrap().algo, default);
    assert!(Comm::init_all_on(BackendKind::Sim, 2).is_err());
    let hs: Vec<_> = before
        .into_iter()
        .map(|c| {
            let args = args.clone();
            std::thread::spawn(move || {
                let mut out = vec![0u8; 8 << 10];
                c.collective(&args, &[0u8; 8 << 10], &mut out)
            })
        })
        .collect();
    let results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    std::env::remove_var("HCCL_ALGO");
    for r in results {
        r.unwrap();
    }
}

#[test]
fn planned_refuses_a_world_size_other_than_the_communicators() {
    let _env = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let comms = Comm::init_all_on(BackendKind::Sim, 2).unwrap();
    let e = comms[0]
        .planned(&call(CollectiveKind::AllReduce, 64, 3))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("args.world_size = 3") && e.contains("2 ranks"),
        "{e}"
    );
}

//! Data mode: every collective, with every algorithm that implements it,
//! produces exactly the sequential reference's output on the simulator.

use hccl_algos::algo::{AlgoSpec, Algorithm, Levels};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind, P2p};
use hccl_algos::reference::{reference, verifiable_inputs};
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::{Mode, Scenario};
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions};
use proptest::prelude::*;

/// `servers` servers of `per_server` NPUs on a leaf-spine (so hierarchical
/// algorithms have two levels).
fn fabric(servers: u32, per_server: u32) -> Fabric {
    let opts = PresetOptions {
        devices_per_server: Some(per_server),
        ..PresetOptions::default()
    };
    build_preset_with(Preset::LeafSpine, servers, &opts).unwrap()
}

/// Arguments of `kind` on `p` ranks, shaped by `seed` (counts, root, pairs).
fn args_for(
    kind: CollectiveKind,
    p: u32,
    count: u64,
    dtype: DataType,
    op: ReduceOp,
    seed: u64,
) -> CollectiveArgs {
    let root = (seed % u64::from(p)) as u32;
    let vary = |i: u64| (count + i * 3 + seed) % (count + 4);
    match kind {
        CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => CollectiveArgs::v_counts(
            kind == CollectiveKind::ReduceScatterV,
            (0..u64::from(p)).map(vary).collect(),
            dtype,
        )
        .unwrap()
        .with_op(op),
        CollectiveKind::AllToAllV => CollectiveArgs::all_to_all_v(
            (0..u64::from(p))
                .map(|i| (0..u64::from(p)).map(|j| vary(i * 7 + j)).collect())
                .collect(),
            dtype,
        )
        .unwrap(),
        CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => {
            let n = if kind == CollectiveKind::SendRecv {
                1
            } else {
                p as usize
            };
            let pairs = (0..n)
                .map(|i| {
                    let src = ((seed as usize + i) % p as usize) as u32;
                    let dst = ((seed as usize + i * 2 + 1) % p as usize) as u32;
                    P2p {
                        src,
                        dst,
                        count: vary(i as u64),
                    }
                })
                .collect();
            CollectiveArgs::p2p(kind == CollectiveKind::BatchSendRecv, pairs, dtype, p)
        }
        _ => CollectiveArgs::new(kind, count, dtype, p)
            .with_op(op)
            .with_root(root),
    }
}

fn check(f: &Fabric, args: CollectiveArgs, algo: AlgoSpec, seed: u64) -> Result<(), TestCaseError> {
    if args.validate().is_err() {
        return Ok(()); // e.g. in-place where the kind has no alias
    }
    let inputs = verifiable_inputs(&args, seed);
    let want = reference(&args, &inputs).unwrap();
    let mut sc = Scenario::new(f).mode(Mode::Data).seed(seed);
    let w = sc.world();
    let op = sc.collective(w, args.clone(), algo).unwrap();
    sc.set_inputs(op, inputs).unwrap();
    let rep = match sc.run() {
        Ok(rep) => rep,
        // A level algorithm that does not implement this collective.
        Err(e) if e.to_string().contains("does not implement") => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(format!("{args:?} {algo}: {e}"))),
    };
    prop_assert!(
        rep.stall.is_none(),
        "{:?} {} stalled: {:?}",
        args.kind,
        algo,
        rep.stall
    );
    let got = rep.ops[0].outputs.clone().unwrap();
    prop_assert_eq!(
        got,
        want,
        "{:?} with {} on {} ranks",
        args.kind,
        algo,
        args.world_size
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_flat_algorithm_matches_the_reference(
        kind_i in 0..CollectiveKind::ALL.len(),
        p in 1u32..=9,
        count in 0u64..40,
        dtype in prop::sample::select(vec![DataType::Fp32, DataType::Int32, DataType::Bf16, DataType::Fp16, DataType::Int8, DataType::Fp64]),
        op in prop::sample::select(vec![ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg]),
        in_place in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let kind = CollectiveKind::ALL[kind_i];
        let f = fabric(p, 1);
        let args = args_for(kind, p, count, dtype, op, seed).with_in_place(in_place);
        for algo in Algorithm::supported_for(kind) {
            check(&f, args.clone(), AlgoSpec::Flat(algo), seed)?;
        }
    }

    #[test]
    fn hierarchical_matches_the_reference(
        kind in prop::sample::select(vec![CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::Broadcast, CollectiveKind::Reduce]),
        servers in 1u32..=3,
        per_server in 1u32..=4,
        count in 0u64..40,
        l0 in prop::sample::select(vec![Algorithm::Ring, Algorithm::Mesh]),
        l1 in prop::sample::select(vec![Algorithm::Ring, Algorithm::HalvingDoubling, Algorithm::Mesh]),
        seed in any::<u64>(),
    ) {
        let p = servers * per_server;
        let f = fabric(servers, per_server);
        let args = args_for(kind, p, count, DataType::Fp32, ReduceOp::Sum, seed);
        let algo = AlgoSpec::Hierarchical(Levels { level0: Some(l0), level1: Some(l1), level2: None });
        check(&f, args, algo, seed)?;
    }
}

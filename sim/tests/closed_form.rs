//! Simulated time equals the α–β–γ closed forms on contention-free fabrics.
//!
//! Model (see `hccl_sim` core docs): a message heading an idle channel,
//! matched at `t`, completes its send at `t + α + ⌈B/β⌉` and its receive
//! `L` (the route's latency) later, plus `⌈B/γ⌉` for a receive-and-reduce.
//! `⌈x⌉` is [`transfer_ns`]. On the `ring` preset a rank's right neighbour
//! is one hop away and each directed link carries one message at a time in
//! these algorithms, so nothing is shared and the formulas below are exact.
//!
//! Derivations (p ranks, per-round block `B` bytes):
//!
//! - **Ring ReduceScatter** (Patarasuk & Yuan; Thakur et al. 2005 §4.2):
//!   round t's send waits for round t−1's receive-reduce; receives are
//!   posted up front. Every rank is symmetric, so each of the p−1 rounds
//!   costs `α + ⌈B/β⌉ + L + ⌈B/γ⌉`:
//!   `T = (p−1)(α + ⌈B/β⌉ + L + ⌈B/γ⌉)`.
//! - **Ring AllGather**: the same chain without reductions:
//!   `T = (p−1)(α + ⌈B/β⌉ + L)` (the initial local copy overlaps).
//! - **Ring AllReduce** = ReduceScatter then AllGather on blocks of
//!   `B = M/p`: `T = (p−1)(2α + 2⌈B/β⌉ + 2L + ⌈B/γ⌉)`; with α = γ⁻¹ = 0
//!   this is Thakur's `2(p−1)(L + (M/p)/β)`, the ASTRA-sim reference form.
//! - **Chain (ring) Broadcast**, M bytes cut into c chunks of C bytes: the
//!   root's c messages to rank 1 queue on one channel, so chunk i leaves
//!   the root at `(i+1)(α + ⌈C/β⌉)`; rank v forwards chunk i as soon as it
//!   arrives — exactly when its forward of chunk i−1 ends — so rank v gets
//!   chunk i at `(i+v)(α + ⌈C/β⌉) + vL`. The last rank gets the last chunk at
//!   `T = (p+c−2)(α + ⌈C/β⌉) + (p−1)L` (Thakur et al.'s pipelined form with
//!   latency kept apart from α).
//!
//! On the `full-mesh` preset every pair of ranks has its own link, so:
//!
//! - **Mesh AllGather**: all p−1 messages go at once on distinct links:
//!   `T = α + ⌈B/β⌉ + L` (B = the block).
//! - **Mesh ReduceScatter** (HCCL guide `Mesh.md`: `α + nβ/p + (p−1)/p·nγ`
//!   with n = pB): every rank posts its p−1 sends and its p−1 receives (each
//!   into its own scratch slot) at once, with no dependencies; each pair of
//!   ranks has its own link, so every message runs alone and all receives
//!   complete at `α + ⌈B/β⌉ + L`. Then p−1 local reductions of B bytes in
//!   rank order, each waiting for the previous one:
//!   `T = α + ⌈B/β⌉ + L + (p−1)⌈B/γ⌉`.
//! - **Mesh AllReduce** = that ReduceScatter on blocks `B = M/p`, then one
//!   AllGather round whose sends wait for the last reduction (the receives
//!   are posted earlier; the channels are idle again):
//!   `T = 2(α + ⌈B/β⌉ + L) + (p−1)⌈B/γ⌉` (guide: `2α + 2nβ/p + (p−1)/p·nγ`).
//! - **Mesh Reduce** = ReduceScatter + Gather: every non-root sends its
//!   reduced block to the root once its last reduction is done, the root's
//!   receives are already posted: `T = 2(α + ⌈B/β⌉ + L) + (p−1)⌈B/γ⌉`.
//! - **Mesh Broadcast** = Scatter + AllGather (guide: `2α + 2nβ/p`), blocks
//!   `B = M/p`: member j gets block j from the root at `α + ⌈B/β⌉ + L` and
//!   forwards it to every other non-root (arriving `α + ⌈B/β⌉ + L` later);
//!   the root's second message to j (the root's own block) queues on the
//!   same root→j channel behind the first, so it leaves at `2(α + ⌈B/β⌉)`
//!   and lands L later. For p ≥ 3: `T = 2(α + ⌈B/β⌉ + L)`; for p = 2 only
//!   the root's two messages exist: `T = 2(α + ⌈B/β⌉) + L`. (The root's
//!   local copy of M bytes runs alongside; at ≥ 800 GB/s it is shorter for
//!   the p ≤ 12 and ≤ 56 GB/s links tested.)
//! - **Mesh Scatter**: the root sends block j to member j, all at once:
//!   `T = α + ⌈B/β⌉ + L`.
//! - **H-D_R AllReduce**, p = 2^m (Thakur et al. 2005 §4.2, recursive
//!   halving then doubling): step k exchanges `M/2^k` with the partner at
//!   distance `2^(m−k)`, both directions at once:
//!   `T = Σ_{k=1..m} (2α + 2⌈(M/2^k)/β⌉ + 2L + ⌈(M/2^k)/γ⌉)`.
//! - **H-D_R AllGather**, p = 2^m: the own block is first copied into the
//!   output (the first send reads it there), then step k sends `2^(k−1)B`:
//!   `T = ⌈B/copy⌉ + Σ_{k=1..m} (α + ⌈2^(k−1)B/β⌉ + L)`.

use hccl_algos::algo::{AlgoSpec, Algorithm};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::DataType;
use hccl_sim::cost::transfer_ns;
use hccl_sim::{CostParams, Scenario};
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions};
use proptest::prelude::*;

fn ring_fabric(p: u32, gbps: f64, latency_ns: u64) -> Fabric {
    let opts = PresetOptions {
        link_gbps: gbps,
        link_latency_ns: latency_ns,
        ..PresetOptions::default()
    };
    build_preset_with(Preset::Ring, p, &opts).unwrap()
}

fn ceil(bytes: u64, gbps: f64) -> u64 {
    transfer_ns(bytes, gbps).unwrap()
}

/// Simulated time of one collective on the world communicator.
fn simulate(
    f: &Fabric,
    costs: CostParams,
    kind: CollectiveKind,
    count: u64,
    algo: Algorithm,
) -> u64 {
    let p = f.world_size();
    let mut sc = Scenario::new(f).costs(costs);
    let w = sc.world();
    sc.collective(
        w,
        CollectiveArgs::new(kind, count, DataType::Fp32, p),
        AlgoSpec::Flat(algo),
    )
    .unwrap();
    let rep = sc.run().unwrap();
    assert!(rep.stall.is_none(), "{kind:?} on {p} ranks stalled");
    rep.ops[0].time_ns.unwrap()
}

/// The issue asks for agreement within 0.1%; the model is exact, so the
/// tests demand equality to the nanosecond.
fn assert_close(sim: u64, formula: u64, what: &str) {
    assert_eq!(sim, formula, "{what}: simulated vs closed form (ns)");
}

#[derive(Debug)]
struct Case {
    p: u32,
    gbps: f64,
    lat: u64,
    costs: CostParams,
}

fn case() -> impl Strategy<Value = Case> {
    (
        2u32..=12,
        prop::sample::select(vec![25.0, 56.0, 53.687_091_2]),
        prop::sample::select(vec![0u64, 500, 1000]),
        prop::sample::select(vec![0u64, 2000]),
    )
        .prop_map(|(p, gbps, lat, alpha)| Case {
            p,
            gbps,
            lat,
            costs: CostParams {
                msg_overhead_ns: alpha,
                reduce_gbps: 1600.0 / 3.0,
                copy_gbps: 800.0,
                op_overhead_ns: 0,
            },
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn ring_allreduce_matches(c in case(), block_elems in 1u64..50_000) {
        let f = ring_fabric(c.p, c.gbps, c.lat);
        let count = block_elems * u64::from(c.p); // divisible: equal blocks
        let b = block_elems * 4;
        let a = c.costs.msg_overhead_ns;
        let formula = u64::from(c.p - 1)
            * (2 * a + 2 * ceil(b, c.gbps) + 2 * c.lat + ceil(b, c.costs.reduce_gbps));
        let sim = simulate(&f, c.costs, CollectiveKind::AllReduce, count, Algorithm::Ring);
        assert_close(sim, formula, "ring AllReduce");
    }

    #[test]
    fn ring_reduce_scatter_matches(c in case(), count in 1u64..50_000) {
        let f = ring_fabric(c.p, c.gbps, c.lat);
        let b = count * 4;
        let formula = u64::from(c.p - 1)
            * (c.costs.msg_overhead_ns + ceil(b, c.gbps) + c.lat + ceil(b, c.costs.reduce_gbps));
        let sim = simulate(&f, c.costs, CollectiveKind::ReduceScatter, count, Algorithm::Ring);
        assert_close(sim, formula, "ring ReduceScatter");
    }

    #[test]
    fn ring_allgather_matches(c in case(), count in 1u64..50_000) {
        let f = ring_fabric(c.p, c.gbps, c.lat);
        let b = count * 4;
        let formula = u64::from(c.p - 1) * (c.costs.msg_overhead_ns + ceil(b, c.gbps) + c.lat);
        let sim = simulate(&f, c.costs, CollectiveKind::AllGather, count, Algorithm::Ring);
        assert_close(sim, formula, "ring AllGather");
    }

    #[test]
    fn chain_broadcast_matches(c in case(), chunks in 1u64..=6) {
        let f = ring_fabric(c.p, c.gbps, c.lat);
        // hccl_algos cuts a chain op into one chunk per 512 KiB (1..=64):
        // 512 KiB of fp32 per chunk gives exactly `chunks` equal chunks.
        let count = 131_072 * chunks;
        let cbytes = 512 * 1024;
        let formula = (u64::from(c.p) + chunks - 2) * (c.costs.msg_overhead_ns + ceil(cbytes, c.gbps))
            + u64::from(c.p - 1) * c.lat;
        let sim = simulate(&f, c.costs, CollectiveKind::Broadcast, count, Algorithm::Ring);
        assert_close(sim, formula, "chain Broadcast");
    }
}

fn mesh_fabric(p: u32, gbps: f64, latency_ns: u64) -> Fabric {
    let opts = PresetOptions {
        link_gbps: gbps,
        link_latency_ns: latency_ns,
        ..PresetOptions::default()
    };
    build_preset_with(Preset::FullMesh, p, &opts).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn mesh_collectives_match(c in case(), block_elems in 1u64..50_000) {
        let f = mesh_fabric(c.p, c.gbps, c.lat);
        let (a, l, g) = (c.costs.msg_overhead_ns, c.lat, c.costs.reduce_gbps);
        let p = u64::from(c.p);
        let b = block_elems * 4;
        let hop = a + ceil(b, c.gbps) + l;
        let red = (p - 1) * ceil(b, g);
        let ag = simulate(&f, c.costs, CollectiveKind::AllGather, block_elems, Algorithm::Mesh);
        assert_close(ag, hop, "mesh AllGather");
        let sc = simulate(&f, c.costs, CollectiveKind::Scatter, block_elems, Algorithm::Mesh);
        assert_close(sc, hop, "mesh Scatter");
        let bc = simulate(&f, c.costs, CollectiveKind::Broadcast, block_elems * p, Algorithm::Mesh);
        let bc_formula = if p == 2 { 2 * (a + ceil(b, c.gbps)) + l } else { 2 * hop };
        assert_close(bc, bc_formula, "mesh Broadcast");
        let rs = simulate(&f, c.costs, CollectiveKind::ReduceScatter, block_elems, Algorithm::Mesh);
        assert_close(rs, hop + red, "mesh ReduceScatter");
        let ar = simulate(&f, c.costs, CollectiveKind::AllReduce, block_elems * p, Algorithm::Mesh);
        assert_close(ar, 2 * hop + red, "mesh AllReduce");
        let rd = simulate(&f, c.costs, CollectiveKind::Reduce, block_elems * p, Algorithm::Mesh);
        assert_close(rd, 2 * hop + red, "mesh Reduce");
    }

    #[test]
    fn halving_doubling_matches(c in case(), m in 1u32..=3, block_elems in 1u64..50_000) {
        let p = 1u32 << m;
        let f = mesh_fabric(p, c.gbps, c.lat);
        let (a, l, g) = (c.costs.msg_overhead_ns, c.lat, c.costs.reduce_gbps);
        let total = block_elems * u64::from(p) * 4; // M bytes, divisible by p
        let ar_formula: u64 = (1..=m)
            .map(|k| {
                let part = total >> k;
                2 * a + 2 * ceil(part, c.gbps) + 2 * l + ceil(part, g)
            })
            .sum();
        let ar = simulate(&f, c.costs, CollectiveKind::AllReduce, total / 4, Algorithm::HalvingDoubling);
        assert_close(ar, ar_formula, "H-D_R AllReduce");
        let b = block_elems * 4;
        let ag_formula = ceil(b, c.costs.copy_gbps)
            + (1..=m).map(|k| a + ceil(b << (k - 1), c.gbps) + l).sum::<u64>();
        let ag = simulate(&f, c.costs, CollectiveKind::AllGather, block_elems, Algorithm::HalvingDoubling);
        assert_close(ag, ag_formula, "H-D_R AllGather");
    }
}

/// The ASTRA-sim reference case, scaled down to 8 ranks so it runs in a
/// test: 50 GiB/s links (53.687 GB/s), 500 ns, no α, no γ, 64 MiB.
#[test]
fn astra_style_ring_allreduce_matches_thakur() {
    let p = 8u32;
    let f = ring_fabric(p, 50.0 * 1.073_741_824, 500);
    let costs = CostParams {
        msg_overhead_ns: 0,
        reduce_gbps: f64::INFINITY,
        copy_gbps: f64::INFINITY,
        op_overhead_ns: 0,
    };
    let count = (64u64 << 20) / 4;
    let sim = simulate(&f, costs, CollectiveKind::AllReduce, count, Algorithm::Ring);
    let b = (64u64 << 20) / u64::from(p);
    let formula = 2 * u64::from(p - 1) * (500 + ceil(b, 50.0 * 1.073_741_824));
    assert_eq!(sim, formula);
}

/// The fixed per-op cost is charged once per op, counted in the op's time,
/// and back-to-back ops each pay it: k ops take k × (overhead + ring).
#[test]
fn op_overhead_adds_once_per_op() {
    let p = 4u32;
    let f = ring_fabric(p, 10.0, 100);
    let base = CostParams {
        msg_overhead_ns: 700,
        reduce_gbps: f64::INFINITY,
        copy_gbps: f64::INFINITY,
        op_overhead_ns: 0,
    };
    let with = CostParams {
        op_overhead_ns: 50_000,
        ..base
    };
    let count = 1 << 16;
    let plain = simulate(&f, base, CollectiveKind::AllReduce, count, Algorithm::Ring);
    let loaded = simulate(&f, with, CollectiveKind::AllReduce, count, Algorithm::Ring);
    assert_eq!(loaded, plain + 50_000, "one op pays the overhead once");

    // Three ops back to back: the window from the first call to the last
    // end is three (overhead + op).
    let mut sc = Scenario::new(&f).costs(with);
    let w = sc.world();
    for _ in 0..3 {
        sc.collective(
            w,
            CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, p),
            AlgoSpec::Flat(Algorithm::Ring),
        )
        .unwrap();
    }
    let rep = sc.run().unwrap();
    let first = rep.ops[0].start_ns.iter().flatten().min().copied().unwrap();
    let last = rep.ops[2].end_ns.iter().flatten().max().copied().unwrap();
    assert_eq!(first, 0, "the first op is called at time 0");
    assert_eq!(last - first, 3 * (plain + 50_000));
}

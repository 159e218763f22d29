//! Presets: rank and link counts, routes (hops, bottleneck, class),
//! bisection bandwidth against values computed by hand.

use hccl_topology::{
    build_preset, build_preset_with, Fabric, LinkClass, NodeKind, Preset, PresetOptions,
    TopologyError,
};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.abs().max(1.0)
}

/// (hops, bottleneck GB/s, classes used) of the route src -> dst, after
/// checking the edges form a path from src's NPU to dst's NPU.
fn route(f: &Fabric, src: u32, dst: u32) -> (usize, f64, Vec<LinkClass>) {
    let r = f.route(src, dst).unwrap();
    let g = f.graph();
    let mut at = f.npu(src);
    for &e in r.edges() {
        let (a, b) = g.edge_endpoints(e).unwrap();
        assert_eq!(a, at, "route {src}->{dst} is not a path");
        at = b;
    }
    assert_eq!(at, f.npu(dst), "route {src}->{dst} does not end at dst");
    let mut classes: Vec<LinkClass> = r.edges().iter().map(|&e| f.link(e).class.clone()).collect();
    classes.dedup();
    (r.hops(), f.bottleneck_gbps(&r), classes)
}

fn count(f: &Fabric, class: &LinkClass) -> usize {
    f.graph()
        .edge_weights()
        .filter(|l| &l.class == class)
        .count()
}

#[test]
fn preset_names_parse_and_unknown_lists_known() {
    for p in Preset::ALL {
        assert_eq!(Preset::parse(p.name()).unwrap(), p);
    }
    assert_eq!(Preset::parse("Atlas800T-A2").unwrap(), Preset::Atlas800tA2);
    let e = Preset::parse("dgx").unwrap_err().to_string();
    assert!(
        e.contains("unknown preset \"dgx\"") && e.contains("atlas800t-a2, atlas800-910a"),
        "{e}"
    );
}

#[test]
fn a2_one_server() {
    let f = build_preset(Preset::Atlas800tA2, 1).unwrap();
    assert_eq!(f.world_size(), 8);
    assert_eq!(f.graph().node_count(), 9); // 8 NPUs + 1 leaf
    assert_eq!(count(&f, &LinkClass::Hccs), 56); // 8 * 7 directed
    assert_eq!(count(&f, &LinkClass::Roce), 16); // 8 ports, both directions
    let (hops, bw, classes) = route(&f, 0, 7);
    assert_eq!((hops, classes), (1, vec![LinkClass::Hccs]));
    assert!(close(bw, 28.0));
    assert_eq!(f.latency_ns(&f.route(0, 7).unwrap()), 300);
    // ranks 0..4 -> 4..8: 16 HCCS links x 28 + 4 RoCE ports x 25 through the leaf
    assert!(close(
        f.bisection_bandwidth_gbps(),
        16.0 * 28.0 + 4.0 * 25.0
    ));
    let p = f.params();
    assert!(close(p.reduce_gbps, 1600.0 / 3.0) && close(p.copy_gbps, 800.0));
}

#[test]
fn a2_two_servers_share_one_leaf() {
    let f = build_preset(Preset::Atlas800tA2, 2).unwrap();
    assert_eq!(f.world_size(), 16);
    assert_eq!(f.cluster().servers()[1], (8..16).collect::<Vec<u32>>());
    let (hops, bw, classes) = route(&f, 3, 12);
    assert_eq!((hops, classes), (2, vec![LinkClass::Roce]));
    assert!(close(bw, 25.0));
    assert!(close(f.bisection_bandwidth_gbps(), 8.0 * 25.0));
    let rows = f.link_classes();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].class.clone(), rows[0].count),
        (LinkClass::Hccs, 112)
    );
    assert_eq!(
        (rows[1].class.clone(), rows[1].count),
        (LinkClass::Roce, 32)
    );
}

#[test]
fn a2_leaf_spine_and_oversubscription() {
    // 32 servers: 2 leaves of 16 servers (128 ports), 8 spines,
    // leaf-spine link = 128 x 25 / 8 = 400 GB/s.
    let f = build_preset(Preset::Atlas800tA2, 32).unwrap();
    assert_eq!(f.world_size(), 256);
    let spines = f
        .graph()
        .node_indices()
        .filter(|&n| f.graph()[n].name.starts_with("spine"))
        .count();
    assert_eq!(spines, 8);
    let (hops, bw, classes) = route(&f, 0, 128);
    assert_eq!((hops, classes), (4, vec![LinkClass::Roce]));
    assert!(close(bw, 25.0));
    assert!(f
        .link_classes()
        .iter()
        .any(|r| close(r.bandwidth_gbps, 400.0) && r.count == 2 * 8 * 2));
    // leaf 0 holds ranks 0..128: its 8 uplinks carry 8 x 400 = 3200 GB/s
    assert!(close(f.bisection_bandwidth_gbps(), 3200.0));
    let opts = PresetOptions {
        oversubscription: 4.0,
        ..PresetOptions::default()
    };
    let f4 = build_preset_with(Preset::Atlas800tA2, 32, &opts).unwrap();
    assert!(close(f4.bisection_bandwidth_gbps(), 800.0));
}

#[test]
fn routes_are_deterministic_and_spread_over_spines() {
    let f = build_preset(Preset::Atlas800tA2, 32).unwrap();
    let g = f.graph();
    let spine_of = |src: u32, dst: u32| {
        let r = f.route(src, dst).unwrap();
        let e = r.edges()[1];
        g[g.edge_endpoints(e).unwrap().1].name.clone()
    };
    let mut spines: Vec<String> = (0..64).map(|i| spine_of(i, 128 + i)).collect();
    assert_eq!(spine_of(5, 133), spine_of(5, 133));
    assert_eq!(f.route(5, 133).unwrap(), f.clone().route(5, 133).unwrap());
    spines.sort();
    spines.dedup();
    assert!(spines.len() >= 6, "64 pairs used only {spines:?}");
}

#[test]
fn atlas800_910a_groups_over_pcie() {
    let f = build_preset(Preset::Atlas800With910a, 1).unwrap();
    assert_eq!(f.world_size(), 8);
    assert_eq!(count(&f, &LinkClass::Hccs), 24); // 2 groups x 4 x 3
    assert_eq!(count(&f, &LinkClass::Pcie), 20); // 8 NPU + 2 switch-CPU, duplex
    let kinds = |k: NodeKind| f.graph().node_weights().filter(|n| n.kind == k).count();
    assert_eq!((kinds(NodeKind::PcieSwitch), kinds(NodeKind::Cpu)), (2, 1));
    let (hops, bw, classes) = route(&f, 0, 3);
    assert_eq!((hops, classes), (1, vec![LinkClass::Hccs]));
    assert!(close(bw, 18.0));
    // across groups: PCIe (4 hops) is preferred to the 2-hop RoCE path
    let (hops, bw, classes) = route(&f, 1, 6);
    assert_eq!((hops, classes), (4, vec![LinkClass::Pcie]));
    assert!(close(bw, 20.0));
    // 0..4 -> 4..8: one PCIe switch uplink (20) + 4 RoCE ports x 12.5
    assert!(close(f.bisection_bandwidth_gbps(), 20.0 + 50.0));
}

#[test]
fn a3_super_pod() {
    let f = build_preset(Preset::AtlasA3SuperPod, 4).unwrap();
    assert_eq!(f.world_size(), 64);
    assert_eq!(f.cluster().ranks_per_server(), Some(16));
    assert_eq!(f.cluster().super_pods().len(), 1);
    let (hops, bw, classes) = route(&f, 0, 15);
    assert_eq!((hops, classes), (2, vec![LinkClass::Ub]));
    assert!(close(bw, 196.0));
    let (hops, _, classes) = route(&f, 0, 16);
    assert_eq!((hops, classes), (4, vec![LinkClass::Ub]));
    // 2 servers x 7 planes x 448 GB/s over UB + 32 dies x 25 GB/s over RoCE
    assert!(close(
        f.bisection_bandwidth_gbps(),
        2.0 * 7.0 * 448.0 + 32.0 * 25.0
    ));

    let opts = PresetOptions {
        servers_per_super_pod: Some(2),
        ..PresetOptions::default()
    };
    let f = build_preset_with(Preset::AtlasA3SuperPod, 4, &opts).unwrap();
    assert_eq!(f.cluster().super_pods(), &[vec![0, 1], vec![2, 3]]);
    assert_eq!(f.cluster().super_pod_of(40), Some(1));
    let (hops, bw, classes) = route(&f, 0, 40);
    assert_eq!((hops, classes), (2, vec![LinkClass::Roce]));
    assert!(close(bw, 25.0));
    assert!(close(f.bisection_bandwidth_gbps(), 32.0 * 25.0));
}

#[test]
fn generic_shapes() {
    let direct = LinkClass::Custom("direct".into());
    let ring = build_preset(Preset::Ring, 8).unwrap();
    assert_eq!(count(&ring, &direct), 16);
    assert_eq!(route(&ring, 0, 4).0, 4);
    assert_eq!(route(&ring, 0, 7).0, 1);
    assert!(close(ring.bisection_bandwidth_gbps(), 2.0 * 25.0));

    let mesh = build_preset(Preset::FullMesh, 8).unwrap();
    assert_eq!(count(&mesh, &direct), 56);
    assert_eq!(route(&mesh, 2, 6).0, 1);
    assert!(close(mesh.bisection_bandwidth_gbps(), 16.0 * 25.0));

    let opts = PresetOptions {
        torus_dims: Some((4, 4)),
        ..PresetOptions::default()
    };
    let torus = build_preset_with(Preset::Torus2d, 16, &opts).unwrap();
    assert_eq!(count(&torus, &direct), 64); // 32 links, 2 directions
    assert_eq!(route(&torus, 0, 10).0, 4); // (0,0) -> (2,2)
    assert_eq!(route(&torus, 0, 15).0, 2); // wrap both ways
    assert!(close(torus.bisection_bandwidth_gbps(), 8.0 * 25.0));

    let opts = PresetOptions {
        oversubscription: 2.0,
        ..PresetOptions::default()
    };
    let ls = build_preset_with(Preset::LeafSpine, 32, &opts).unwrap();
    assert_eq!(route(&ls, 0, 1).0, 2);
    assert_eq!(route(&ls, 0, 16).0, 4);
    // leaf 0: 16 ports x 25 / 2 = 200 GB/s of uplink
    assert!(close(ls.bisection_bandwidth_gbps(), 200.0));
    let dps = PresetOptions {
        devices_per_server: Some(4),
        ..PresetOptions::default()
    };
    assert_eq!(
        build_preset_with(Preset::Ring, 3, &dps)
            .unwrap()
            .world_size(),
        12
    );
}

#[test]
fn route_hops_equal_bfs_distance_on_generic_shapes() {
    for f in [
        build_preset(Preset::Ring, 7).unwrap(),
        build_preset_with(Preset::Torus2d, 15, &PresetOptions::default()).unwrap(),
        build_preset(Preset::LeafSpine, 40).unwrap(),
    ] {
        let g = f.graph();
        for s in 0..f.world_size() {
            let dist = petgraph::algo::dijkstra(g, f.npu(s), None, |_| 1usize);
            for d in 0..f.world_size() {
                assert_eq!(route(&f, s, d).0, dist[&f.npu(d)], "{} {s}->{d}", f.name());
            }
        }
    }
}

#[test]
fn route_edge_cases() {
    let f = build_preset(Preset::Atlas800tA2, 1).unwrap();
    assert!(f.route(3, 3).unwrap().edges().is_empty());
    assert!(matches!(
        f.route(0, 8),
        Err(TopologyError::RankOutOfRange {
            rank: 8,
            world_size: 8
        })
    ));
    assert!(matches!(
        f.route(99, 0),
        Err(TopologyError::RankOutOfRange { rank: 99, .. })
    ));
    assert!(close(
        build_preset(Preset::Ring, 1)
            .unwrap()
            .bisection_bandwidth_gbps(),
        0.0
    ));
}

#[test]
fn bad_preset_parameters() {
    let msg = |r: Result<Fabric, TopologyError>| r.unwrap_err().to_string();
    assert!(msg(build_preset(Preset::Ring, 0)).contains("servers = 0"));
    let d = PresetOptions {
        devices_per_server: Some(4),
        ..PresetOptions::default()
    };
    assert!(msg(build_preset_with(Preset::Atlas800tA2, 1, &d)).contains("fixed at 8"));
    let t = PresetOptions {
        torus_dims: Some((3, 3)),
        ..PresetOptions::default()
    };
    assert!(msg(build_preset_with(Preset::Torus2d, 8, &t))
        .contains("must multiply to the rank count 8"));
    let o = PresetOptions {
        oversubscription: 0.5,
        ..PresetOptions::default()
    };
    assert!(msg(build_preset_with(Preset::LeafSpine, 8, &o))
        .contains("oversubscription = 0.5 must be a number in 1..=1000000"));
}

#[test]
fn rank_table_fabrics() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/");
    let t = hccl_topology::RankTable::from_file(format!("{dir}rank_table_2x8.json")).unwrap();
    let f = Fabric::for_rank_table(&t).unwrap();
    assert_eq!(f.world_size(), 16);
    assert_eq!(count(&f, &LinkClass::Hccs), 112);
    assert_eq!(
        f.cluster().rank(9).unwrap().device_ip,
        Some("198.51.100.10".parse().unwrap())
    );
    let t = hccl_topology::RankTable::from_file(format!("{dir}rank_table_superpod.json")).unwrap();
    let f = Fabric::for_rank_table(&t).unwrap();
    assert_eq!(f.cluster().super_pods().len(), 2);
    assert_eq!(route(&f, 0, 16).2, vec![LinkClass::Ub]); // same super pod
    assert_eq!(route(&f, 0, 32).2, vec![LinkClass::Roce]); // other super pod
}

#[test]
fn dot_output_lists_every_node_and_duplex_pair_once() {
    let f = build_preset(Preset::Atlas800tA2, 1).unwrap();
    let dot = f.to_dot();
    assert!(dot.starts_with("digraph fabric {"));
    assert_eq!(dot.matches("shape=box").count(), 8);
    // 28 HCCS pairs + 8 RoCE pairs, each drawn once, undirected
    assert_eq!(dot.matches("dir=none").count(), 36);
    assert_eq!(f.graph().edge_references().count(), 72);
}

#[test]
fn sizes_the_machine_cannot_hold_are_refused_before_allocating() {
    // Issue 22: 4,000,000,000 servers of a one-NPU preset tried to allocate
    // 128 GB and aborted. The estimate is a lower bound (hundreds of GiB
    // here), far above any test machine.
    for preset in [Preset::Ring, Preset::LeafSpine, Preset::Torus2d] {
        let e = build_preset(preset, 4_000_000_000).unwrap_err().to_string();
        assert!(
            e.contains("servers = 4000000000 is too large for this machine")
                && e.contains("GiB")
                && e.contains("4000000000 ranks"),
            "{e}"
        );
    }
    // A full mesh grows with the square of the ranks.
    let e = build_preset(Preset::FullMesh, 1_000_000)
        .unwrap_err()
        .to_string();
    assert!(e.contains("servers = 1000000 is too large"), "{e}");
    // Switch counts are sized too.
    let opts = PresetOptions {
        spines: Some(u32::MAX),
        ..PresetOptions::default()
    };
    let e = build_preset_with(Preset::Atlas800tA2, 100_000, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("spines = 4294967295 is too large"), "{e}");
    // Sizes that fit still build.
    assert_eq!(build_preset(Preset::Ring, 4096).unwrap().world_size(), 4096);
}

#[test]
fn generic_link_numbers_are_range_checked() {
    let opts = PresetOptions {
        link_latency_ns: u64::MAX,
        ..PresetOptions::default()
    };
    let e = build_preset_with(Preset::Ring, 4, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("link latency = 18446744073709551615 is out of range"),
        "{e}"
    );
    let opts = PresetOptions {
        link_gbps: 1e12,
        ..PresetOptions::default()
    };
    let e = build_preset_with(Preset::Ring, 4, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("link bandwidth = 1000000000000.0 is out of range"),
        "{e}"
    );
    let opts = PresetOptions {
        oversubscription: 1e300,
        ..PresetOptions::default()
    };
    let e = build_preset_with(Preset::LeafSpine, 4, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("oversubscription = 1e300 must be a number in 1..=1000000"),
        "{e}"
    );
}

//! Training steps on the simulator (`hccl_sim::workload`): ready times gate
//! the collectives, the step's figures add up, bad buckets are named.

use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::DataType;
use hccl_sim::workload::{simulate_step, BucketOps, Launch, StepSpec, Workload, WorkloadError};
use hccl_topology::{build_preset, Fabric, Preset};

/// Three layers in forward order; backward runs c, b, a.
const THREE: &str = r#"{"version": 1, "name": "three", "layers": [
    {"name": "a", "forward_ns": 1000, "backward_ns": 300000, "grad_bytes": [4194304]},
    {"name": "b", "forward_ns": 1000, "backward_ns": 200000, "grad_bytes": [4194304]},
    {"name": "c", "forward_ns": 1000, "backward_ns": 100000, "grad_bytes": [1048576, 64]}
]}"#;

fn fabric() -> Fabric {
    build_preset(Preset::Atlas800tA2, 1).unwrap()
}

fn all_reduce(bytes: u64, world: u32) -> CollectiveArgs {
    CollectiveArgs::new(CollectiveKind::AllReduce, bytes / 4, DataType::Fp32, world)
}

/// One bucket per gradient, in ready order (c's two, then b's, then a's).
fn per_grad(w: &Workload, world: u32, launch: Launch) -> StepSpec {
    let g = w.gradients();
    StepSpec {
        launch,
        buckets: (0..g.len())
            .rev()
            .map(|i| BucketOps {
                label: format!("grad {i}"),
                grads: vec![i],
                ops: vec![all_reduce(g[i].bytes, world)],
            })
            .collect(),
    }
}

#[test]
fn after_backward_nothing_overlaps_and_exposed_is_all_the_communication() {
    let f = fabric();
    let w = Workload::from_json(THREE).unwrap();
    let s = simulate_step(&f, &w, &per_grad(&w, 8, Launch::AfterBackward), None).unwrap();
    assert_eq!(s.compute_ns, 603_000);
    assert_eq!(s.ops[0].start_ns, s.compute_ns);
    // Back to back on one stream: on each rank, each starts where the
    // previous ended.
    for p in s.report.ops.windows(2) {
        assert_eq!(p[1].start_ns, p[0].end_ns);
    }
    assert_eq!(s.exposed_comm_ns, s.step_ns - s.compute_ns);
    assert_eq!(s.exposed_comm_ns, s.comm_ns);
    assert!(s.comm_ns > 0);
}

#[test]
fn when_ready_each_gradient_starts_at_its_ready_time_or_after_the_previous() {
    let f = fabric();
    let w = Workload::from_json(THREE).unwrap();
    let g = w.gradients();
    let s = simulate_step(&f, &w, &per_grad(&w, 8, Launch::WhenReady), None).unwrap();
    // c's gradients are ready after forward (3 us) and c's backward (100 us).
    assert_eq!(g[3].ready_ns, 103_000);
    assert_eq!(s.ops[0].ready_ns, 103_000);
    assert_eq!(s.ops[0].start_ns, 103_000);
    for (i, p) in s.report.ops.windows(2).enumerate() {
        let ready = s.ops[i + 1].ready_ns;
        for r in 0..8 {
            let prev_end = p[0].end_ns[r].unwrap();
            assert_eq!(
                p[1].start_ns[r],
                Some(ready.max(prev_end)),
                "op {} rank {r}",
                i + 1
            );
        }
    }
    let after = simulate_step(&f, &w, &per_grad(&w, 8, Launch::AfterBackward), None).unwrap();
    assert!(s.step_ns <= after.step_ns);
    assert!(s.step_ns >= s.compute_ns.max(s.comm_ns));
    assert!(s.exposed_comm_ns < after.exposed_comm_ns);
    // The same collectives: the same bytes on the same links.
    assert_eq!(s.injected_bytes, after.injected_bytes);
    assert!(s.injected_bytes > 0);
}

#[test]
fn link_groups_account_for_every_link_and_byte() {
    let f = build_preset(Preset::Atlas800tA2, 2).unwrap();
    let w = Workload::from_json(THREE).unwrap();
    let s = simulate_step(&f, &w, &per_grad(&w, 16, Launch::WhenReady), None).unwrap();
    let links: usize = s.links.iter().map(|g| g.links).sum();
    assert_eq!(links, f.graph().edge_count());
    let bytes: u64 = s.links.iter().map(|g| g.bytes).sum();
    assert_eq!(bytes, s.report.links.iter().map(|l| l.bytes).sum::<u64>());
    for g in &s.links {
        assert!((0.0..=1.0).contains(&g.busy_fraction), "{g:?}");
        assert!((0.0..=1.0 + 1e-9).contains(&g.load_fraction), "{g:?}");
        assert!(g.used <= g.links);
    }
    // Two servers: gradients cross RoCE.
    assert!(s
        .links
        .iter()
        .any(|g| g.group.starts_with("roce") && g.bytes > 0));
}

#[test]
fn bad_buckets_are_named() {
    let f = fabric();
    let w = Workload::from_json(THREE).unwrap();
    let mut spec = per_grad(&w, 8, Launch::WhenReady);
    spec.buckets[1].grads = vec![9];
    match simulate_step(&f, &w, &spec, None) {
        Err(WorkloadError::Invalid { field, value, .. }) => {
            assert_eq!((field.as_str(), value.as_str()), ("buckets[1].grads", "9"));
        }
        other => panic!("{other:?}"),
    }
    spec.buckets[1].grads = vec![1];
    spec.buckets[2].ops.clear();
    let e = simulate_step(&f, &w, &spec, None).unwrap_err().to_string();
    assert!(e.contains("buckets[2].ops"), "{e}");
    // A world size other than the fabric's does not plan: an error, no panic.
    let spec = per_grad(&w, 4, Launch::WhenReady);
    assert!(matches!(
        simulate_step(&f, &w, &spec, None),
        Err(WorkloadError::Sim(_))
    ));
}

#[test]
fn the_example_workload_file_runs() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/workloads/mlp.json"
    );
    let w = Workload::from_file(path).unwrap();
    assert_eq!(w.param_count(), 4 * (4096 * 4096 + 4096));
    let s = simulate_step(&fabric(), &w, &per_grad(&w, 8, Launch::WhenReady), None).unwrap();
    assert_eq!(s.ops.len(), 8);
    let e = Workload::from_file("/nonexistent/w.json")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("workload /nonexistent/w.json:"), "{e}");
}

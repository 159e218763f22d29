//! Fabric file parsing and validation.

use hccl_topology::{Fabric, LinkClass, TopologyError};
use serde_json::{json, Value};

fn problems(v: &Value) -> Vec<String> {
    match Fabric::from_fabric_json(&v.to_string()) {
        Err(TopologyError::FabricFileInvalid { problems }) => {
            problems.iter().map(ToString::to_string).collect()
        }
        other => panic!("expected FabricFileInvalid, got {other:?}"),
    }
}

fn two_npus() -> Value {
    json!({
        "nodes": [
            {"name": "a", "kind": "npu", "rank": 0},
            {"name": "b", "kind": "npu", "rank": 1},
            {"name": "sw", "kind": "switch"}
        ],
        "links": [
            {"a": "a", "b": "sw", "class": "roce", "bandwidth_gbps": 25.0, "latency_ns": 1000},
            {"a": "b", "b": "sw", "class": "roce", "bandwidth_gbps": 12.5, "latency_ns": 1000}
        ]
    })
}

#[test]
fn example_file() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/fabric_2x4_ring.json"
    );
    let f = Fabric::from_fabric_file(path).unwrap();
    assert_eq!(f.world_size(), 8);
    assert_eq!(f.cluster().server_count(), 2);
    assert_eq!(f.cluster().servers()[1], vec![4, 5, 6, 7]);
    // inside a server the HCCS ring is used (2 hops) rather than the switch
    let r = f.route(0, 2).unwrap();
    assert_eq!(r.hops(), 2);
    assert!(r
        .edges()
        .iter()
        .all(|&e| f.link(e).class == LinkClass::Hccs));
    // servers are joined only through the switch: 4 ports x 25 GB/s
    assert!((f.bisection_bandwidth_gbps() - 100.0).abs() < 1e-9);
    assert!((f.params().reduce_gbps - 533.3).abs() < 1e-9);
}

#[test]
fn minimal_file_defaults() {
    let f = Fabric::from_fabric_json(&two_npus().to_string()).unwrap();
    assert_eq!(
        f.cluster().server_count(),
        2,
        "without server, each NPU is its own server"
    );
    let r = f.route(0, 1).unwrap();
    assert!((f.bottleneck_gbps(&r) - 12.5).abs() < 1e-9);
    assert_eq!(f.latency_ns(&r), 2000);
    assert_eq!(f.name(), "fabric file");
}

#[test]
fn simplex_links_and_unreachable_ranks() {
    let mut v = two_npus();
    v["links"][1]["duplex"] = json!(false); // b -> sw only: b is unreachable from a
    let p = problems(&v);
    assert_eq!(p, vec!["links leave ranks [1] unreachable from rank 0; add links so every rank can reach every other"]);
    let mut v = two_npus();
    v["links"].as_array_mut().unwrap().pop();
    let p = problems(&v);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(p[1].contains("unreachable to rank 0"));
}

#[test]
fn servers_all_or_none_and_contiguous() {
    let mut v = two_npus();
    v["nodes"][0]["server"] = json!(0);
    let p = problems(&v);
    assert_eq!(
        p,
        vec!["nodes[1].server is missing; give every npu a server or none of them (rank 1)"]
    );
    let mut v = two_npus();
    v["nodes"][0]["server"] = json!(1);
    v["nodes"][1]["server"] = json!(1);
    assert!(problems(&v)[0].contains("no npu on server 0"));
    let mut v = two_npus();
    v["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "c", "kind": "npu", "rank": 2, "server": 0}));
    v["links"].as_array_mut().unwrap().push(
        json!({"a": "c", "b": "sw", "class": "roce", "bandwidth_gbps": 1.0, "latency_ns": 1}),
    );
    v["nodes"][0]["server"] = json!(0);
    v["nodes"][1]["server"] = json!(1);
    assert!(problems(&v)[0].contains("server 0 has ranks [0, 2], which are not contiguous"));
}

#[test]
fn params_and_ranks() {
    let mut v = two_npus();
    v["params"] = json!({"msg_overhead_ns": 10, "reduce_gbps": 0.0, "copy_gbps": 1.0});
    assert_eq!(
        problems(&v),
        vec!["params.reduce_gbps = \"0\" is not a positive number of GB/s"]
    );
    let mut v = two_npus();
    v["nodes"][1]["rank"] = json!(7);
    let p = problems(&v);
    assert!(
        p[0].starts_with("nodes[1].rank = \"7\" is out of range"),
        "{p:#?}"
    );
    assert!(p[1].contains("has no npu with rank [1]"));
    let mut v = two_npus();
    v["nodes"][1].as_object_mut().unwrap().remove("rank");
    assert!(problems(&v)[0].starts_with("nodes[1].rank is missing"));
}

#[test]
fn syntax_errors() {
    for (text, needle) in [
        ("", "EOF"),
        (
            r#"{"nodes": [], "links": [], "extra": 1}"#,
            "unknown field `extra`",
        ),
        (
            r#"{"nodes": [{"name": "a", "kind": "gpu"}], "links": []}"#,
            "unknown variant `gpu`",
        ),
        (
            r#"{"nodes": [], "links": [{"a": "x", "b": "y", "class": "roce", "bandwidth_gbps": "fast", "latency_ns": 1}]}"#,
            "invalid type",
        ),
    ] {
        match Fabric::from_fabric_json(text) {
            Err(TopologyError::FabricFileSyntax { message, line, .. }) => {
                assert!(message.contains(needle), "{message}");
                assert_eq!(line, 1);
            }
            other => panic!("{text}: expected FabricFileSyntax, got {other:?}"),
        }
    }
}

#[test]
fn op_overhead_is_optional_and_read() {
    let f = Fabric::from_fabric_json(&two_npus().to_string()).unwrap();
    assert_eq!(f.params().op_overhead_ns, 0, "default: no per-op cost");
    let mut v = two_npus();
    v["params"] = json!({"msg_overhead_ns": 10, "reduce_gbps": 5.0, "copy_gbps": 6.0,
                         "op_overhead_ns": 1750000});
    let mut f = Fabric::from_fabric_json(&v.to_string()).unwrap();
    assert_eq!(f.params().op_overhead_ns, 1_750_000);
    assert_eq!(f.params().msg_overhead_ns, 10);
    f.set_op_overhead_ns(3);
    assert_eq!(f.params().op_overhead_ns, 3);
    assert_eq!(f.params().reduce_gbps, 5.0, "only the overhead changes");
}

#[test]
fn numbers_out_of_range_name_field_value_and_range() {
    // Issue 22: a hop latency of u64::MAX overflowed once a route's
    // latency was summed; it is refused where it is read.
    let mut v = two_npus();
    v["links"][1]["latency_ns"] = json!(u64::MAX);
    assert_eq!(
        problems(&v),
        vec![
            "links[1].latency_ns = \"18446744073709551615\" is out of range: accepted 0..=2147483647000000000 ns (2147483647 s, HCCL_EXEC_TIMEOUT's longest)"
        ]
    );
    let mut v = two_npus();
    v["links"][0]["bandwidth_gbps"] = json!(1e-9);
    v["params"] = json!({"msg_overhead_ns": u64::MAX, "reduce_gbps": 1e300, "copy_gbps": 1.0,
                         "op_overhead_ns": u64::MAX});
    let p = problems(&v);
    assert_eq!(p.len(), 4, "{p:#?}");
    assert!(
        p[0].starts_with(
            "links[0].bandwidth_gbps = \"1e-9\" is out of range: accepted 0.001..=1000000 GB/s"
        ),
        "{p:#?}"
    );
    assert!(
        p[1].starts_with("params.reduce_gbps = \"1e300\" is out of range"),
        "{p:#?}"
    );
    assert!(
        p[2].starts_with("params.msg_overhead_ns = \"18446744073709551615\" is out of range"),
        "{p:#?}"
    );
    assert!(
        p[3].starts_with("params.op_overhead_ns = \"18446744073709551615\" is out of range"),
        "{p:#?}"
    );
    // A server index past the NPU count is refused at once (the gap check
    // looped over every index up to it, listing each missing server).
    let mut v = two_npus();
    v["nodes"][0]["server"] = json!(0);
    v["nodes"][1]["server"] = json!(1_000_000);
    assert_eq!(
        problems(&v),
        vec!["nodes[1].server = \"1000000\" is out of range: servers are numbered 0..=1 without gaps (2 npu nodes)"]
    );
    // The largest accepted latency on both hops adds up without overflow.
    let mut v = two_npus();
    v["links"][0]["latency_ns"] = json!(hccl_topology::limits::MAX_TIME_NS);
    v["links"][1]["latency_ns"] = json!(hccl_topology::limits::MAX_TIME_NS);
    let f = Fabric::from_fabric_json(&v.to_string()).unwrap();
    let r = f.route(0, 1).unwrap();
    assert_eq!(f.latency_ns(&r), 2 * hccl_topology::limits::MAX_TIME_NS);
}

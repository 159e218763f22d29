//! One test per rank table rule, each with its bad case(s).

use hccl_topology::{Problem, RankTable, TopologyError, Version};
use serde_json::{json, Value};

/// A valid 2 × 2 version 1.0 table.
fn base() -> Value {
    json!({
        "status": "completed",
        "version": "1.0",
        "server_count": "2",
        "server_list": [
            {"server_id": "node_0", "device": [
                {"device_id": "0", "device_ip": "198.51.100.1", "rank_id": "0"},
                {"device_id": "1", "device_ip": "198.51.100.2", "rank_id": "1"}]},
            {"server_id": "node_1", "device": [
                {"device_id": "0", "device_ip": "198.51.100.3", "rank_id": "2"},
                {"device_id": "1", "device_ip": "198.51.100.4", "rank_id": "3"}]}
        ]
    })
}

/// A valid 2-server, 2-super-pod version 1.2 table.
fn base12() -> Value {
    let mut v = base();
    v["version"] = json!("1.2");
    for s in 0..2 {
        for d in 0..2 {
            v["server_list"][s]["device"][d]["super_device_id"] = json!(d.to_string());
        }
    }
    v["super_pod_list"] = json!([
        {"super_pod_id": "0", "server_list": [{"server_id": "node_0"}]},
        {"super_pod_id": "1", "server_list": [{"server_id": "node_1"}]}
    ]);
    v
}

fn problems(v: &Value) -> Vec<Problem> {
    match RankTable::parse(&v.to_string()) {
        Err(TopologyError::RankTableInvalid { problems }) => problems,
        other => panic!("expected RankTableInvalid, got {other:?}"),
    }
}

/// Asserts exactly one problem, at `path`, whose message contains `needle`.
fn one(v: &Value, path: &str, needle: &str, rank: Option<u32>) -> Problem {
    let p = problems(v);
    assert_eq!(p.len(), 1, "expected one problem, got {p:#?}");
    assert_eq!(p[0].path, path);
    assert!(
        p[0].message.contains(needle),
        "{:?} lacks {needle:?}",
        p[0].message
    );
    assert_eq!(p[0].rank, rank);
    p[0].clone()
}

#[test]
fn valid_tables_parse() {
    let t = RankTable::parse(&base().to_string()).unwrap();
    assert_eq!(t.world_size(), 4);
    assert_eq!(t.version(), Version::V1_0);
    assert_eq!(t.servers()[1].devices()[0].rank(), 2);
    let t = RankTable::parse(&base12().to_string()).unwrap();
    assert_eq!(t.version(), Version::V1_2);
    assert_eq!(t.super_pods().len(), 2);
    assert_eq!(t.super_pods()[1].servers(), &[1]);
}

#[test]
fn status_must_be_completed() {
    let mut v = base();
    v["status"] = json!("initializing");
    let p = one(&v, "status", "completed", None);
    assert_eq!(p.value.as_deref(), Some("initializing"));
}

#[test]
fn unknown_version_lists_supported() {
    let mut v = base();
    v["version"] = json!("1.1");
    let p = one(&v, "version", "supported: 1.0, 1.2", None);
    assert_eq!(p.value.as_deref(), Some("1.1"));
}

#[test]
fn unknown_version_with_other_fields_still_names_version() {
    // A future format with fields we do not know: the version is the problem.
    let v = json!({"status": "completed", "version": "2.0", "nodes": []});
    let p = one(&v, "version", "supported: 1.0, 1.2", None);
    assert_eq!(p.value.as_deref(), Some("2.0"));
}

#[test]
fn server_count_must_match_and_be_a_number() {
    let mut v = base();
    v["server_count"] = json!("3");
    one(&v, "server_count", "has 2 servers; set it to 2", None);
    v["server_count"] = json!("two");
    one(&v, "server_count", "not a non-negative integer", None);
}

#[test]
fn empty_server_list() {
    let v =
        json!({"status": "completed", "version": "1.0", "server_count": "0", "server_list": []});
    one(&v, "server_list", "is empty", None);
}

#[test]
fn empty_device_list() {
    let mut v = base();
    v["server_list"][1]["device"] = json!([]);
    let p = problems(&v);
    assert!(
        p.iter()
            .any(|p| p.path == "server_list[1].device" && p.message.contains("is empty")),
        "{p:#?}"
    );
}

#[test]
fn server_id_unique_nonempty_and_short() {
    let mut v = base();
    v["server_list"][1]["server_id"] = json!("node_0");
    one(
        &v,
        "server_list[1].server_id",
        "duplicates server_list[0].server_id",
        None,
    );
    v["server_list"][1]["server_id"] = json!("");
    one(&v, "server_list[1].server_id", "is empty", None);
    v["server_list"][1]["server_id"] = json!("x".repeat(65));
    one(&v, "server_list[1].server_id", "65 characters", None);
    v["server_list"][1]["server_id"] = json!("x".repeat(64));
    assert!(
        RankTable::parse(&v.to_string()).is_ok(),
        "64 characters are allowed"
    );
}

#[test]
fn rank_id_must_be_integer() {
    let mut v = base();
    v["server_list"][0]["device"][1]["rank_id"] = json!("-1");
    let p = problems(&v);
    assert_eq!(p[0].path, "server_list[0].device[1].rank_id");
    assert!(p[0].message.contains("not a non-negative integer"));
    // the rank is then missing from 0..N-1, reported once more
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(p[1].message.contains("no device with rank id 1"));
}

#[test]
fn rank_id_duplicate_and_missing() {
    let mut v = base();
    v["server_list"][1]["device"][1]["rank_id"] = json!("2");
    let p = problems(&v);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert_eq!(p[0].path, "server_list[1].device[1].rank_id");
    assert!(p[0]
        .message
        .contains("duplicates server_list[1].device[0].rank_id"));
    assert_eq!(p[0].rank, Some(2));
    assert_eq!(p[1].path, "server_list");
    assert!(p[1].message.contains("no device with rank id 3"));
}

#[test]
fn rank_id_out_of_range() {
    let mut v = base();
    v["server_list"][1]["device"][1]["rank_id"] = json!("4");
    let p = problems(&v);
    assert_eq!(p[0].path, "server_list[1].device[1].rank_id");
    assert!(p[0].message.contains("out of range"), "{p:#?}");
    assert!(p[1].message.contains("no device with rank id 3"));
}

#[test]
fn ranks_of_a_server_must_not_interleave() {
    let mut v = base();
    v["server_list"][0]["device"][1]["rank_id"] = json!("2");
    v["server_list"][1]["device"][0]["rank_id"] = json!("1");
    let p = problems(&v);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert_eq!(p[0].path, "server_list[0].device");
    assert!(p[0].message.contains("[0, 2], which are not contiguous"));
    assert_eq!(p[1].path, "server_list[1].device");
}

#[test]
fn servers_in_any_order_with_contiguous_ranks_are_fine() {
    let mut v = base();
    for (s, ranks) in [(0, ["2", "3"]), (1, ["0", "1"])] {
        for d in 0..2 {
            v["server_list"][s]["device"][d]["rank_id"] = json!(ranks[d]);
        }
    }
    let t = RankTable::parse(&v.to_string()).unwrap();
    assert_eq!(t.servers()[0].devices()[0].rank(), 2);
}

#[test]
fn device_id_integer_and_unique_per_server() {
    let mut v = base();
    v["server_list"][0]["device"][1]["device_id"] = json!("0");
    one(
        &v,
        "server_list[0].device[1].device_id",
        "unique within a server",
        Some(1),
    );
    v["server_list"][0]["device"][1]["device_id"] = json!("one");
    one(
        &v,
        "server_list[0].device[1].device_id",
        "not a non-negative integer",
        Some(1),
    );
}

#[test]
fn same_device_id_on_two_servers_is_fine() {
    // base() already has device 0 and 1 on both servers
    assert!(RankTable::parse(&base().to_string()).is_ok());
}

#[test]
fn device_ip_must_be_an_ip() {
    let mut v = base();
    v["server_list"][1]["device"][0]["device_ip"] = json!("-.-.-.-");
    let p = one(
        &v,
        "server_list[1].device[0].device_ip",
        "is not an IP address",
        Some(2),
    );
    assert!(p
        .to_string()
        .starts_with(r#"server_list[1].device[0].device_ip = "-.-.-.-" is not an IP address"#));
    assert!(p.to_string().ends_with("(rank 2)"));
    v["server_list"][1]["device"][0]["device_ip"] = json!("198.51.100.256");
    one(
        &v,
        "server_list[1].device[0].device_ip",
        "is not an IP address",
        Some(2),
    );
}

#[test]
fn device_ip_required_on_multi_server_only() {
    let mut v = base();
    v["server_list"][1]["device"][1]
        .as_object_mut()
        .unwrap()
        .remove("device_ip");
    one(
        &v,
        "server_list[1].device[1].device_ip",
        "required when the job spans more than one server",
        Some(3),
    );
    let mut single = base();
    single["server_count"] = json!("1");
    single["server_list"].as_array_mut().unwrap().pop();
    for d in 0..2 {
        single["server_list"][0]["device"][d]
            .as_object_mut()
            .unwrap()
            .remove("device_ip");
    }
    let t = RankTable::parse(&single.to_string()).unwrap();
    assert_eq!(t.servers()[0].devices()[0].device_ip(), None);
}

#[test]
fn no_mixing_ipv4_and_ipv6() {
    let mut v = base();
    v["server_list"][1]["device"][0]["device_ip"] = json!("2001:db8::3");
    one(
        &v,
        "server_list[1].device[0].device_ip",
        "is IPv6 but server_list[0].device[0].device_ip is IPv4",
        Some(2),
    );
    // all IPv6 is fine
    for (s, d) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        v["server_list"][s]["device"][d]["device_ip"] =
            json!(format!("2001:db8::{}", s * 2 + d + 1));
    }
    assert!(RankTable::parse(&v.to_string()).is_ok());
}

#[test]
fn device_ip_unique() {
    let mut v = base();
    v["server_list"][1]["device"][1]["device_ip"] = json!("198.51.100.1");
    one(
        &v,
        "server_list[1].device[1].device_ip",
        "duplicates server_list[0].device[0].device_ip",
        Some(3),
    );
}

#[test]
fn optional_fields_are_checked_when_present() {
    let mut v = base();
    v["server_list"][0]["host_ip"] = json!("192.0.2.1");
    v["server_list"][0]["container_ip"] = json!("192.0.2.2");
    v["server_list"][0]["hardware_type"] = json!("800T-A2");
    v["server_list"][0]["device"][0]["device_port"] = json!("16666");
    assert!(RankTable::parse(&v.to_string()).is_ok());
    v["server_list"][0]["host_ip"] = json!("host-a");
    one(&v, "server_list[0].host_ip", "not an IP address", None);
    v["server_list"][0]["host_ip"] = json!("192.0.2.1");
    v["server_list"][0]["device"][0]["device_port"] = json!("70000");
    one(
        &v,
        "server_list[0].device[0].device_port",
        "0..=65535",
        Some(0),
    );
}

#[test]
fn device_id_is_below_the_npus_of_a_server() {
    // No Ascend server holds more than 16 NPUs: device_id 0..=15.
    let mut v = base();
    v["server_list"][0]["device"][1]["device_id"] = json!("15");
    assert!(RankTable::parse(&v.to_string()).is_ok());
    v["server_list"][0]["device"][1]["device_id"] = json!("17");
    let p = one(
        &v,
        "server_list[0].device[1].device_id",
        "no Ascend server holds more than 16 NPUs; use 0..=15",
        Some(1),
    );
    assert_eq!(p.value.as_deref(), Some("17"));
    // A server that says it is an Atlas 800T A2 holds 8: device_id 0..=7.
    let mut v = base();
    v["server_list"][1]["hardware_type"] = json!("800T-A2");
    v["server_list"][1]["device"][0]["device_id"] = json!("7");
    assert!(RankTable::parse(&v.to_string()).is_ok());
    v["server_list"][1]["device"][0]["device_id"] = json!("8");
    let p = one(
        &v,
        "server_list[1].device[0].device_id",
        "hardware_type \"800T-A2\" is an Atlas 800T A2 server with 8 NPUs; use 0..=7",
        Some(2),
    );
    assert_eq!(p.value.as_deref(), Some("8"));
    // An unknown hardware type keeps the general bound.
    v["server_list"][1]["hardware_type"] = json!("some-future-box");
    assert!(RankTable::parse(&v.to_string()).is_ok());
}

#[test]
fn a_server_lists_no_more_devices_than_it_holds() {
    let mut v = base();
    v["server_count"] = json!("1");
    let devices: Vec<Value> = (0..9)
        .map(|d| json!({"device_id": d.to_string(), "rank_id": d.to_string()}))
        .collect();
    v["server_list"] =
        json!([{"server_id": "a", "hardware_type": "800I-A2-32G", "device": devices}]);
    let p = problems(&v);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert_eq!(p[0].path, "server_list[0].device");
    assert!(
        p[0].message.contains("lists 9 devices") && p[0].message.contains("at most 8"),
        "{}",
        p[0].message
    );
    assert_eq!(p[1].path, "server_list[0].device[8].device_id");
}

#[test]
fn v1_0_rejects_super_pod_fields() {
    let mut v = base12();
    v["version"] = json!("1.0");
    let p = problems(&v);
    // four super_device_id fields and the super_pod_list
    assert_eq!(p.len(), 5, "{p:#?}");
    assert!(p[..4].iter().all(|p| p.path.ends_with("super_device_id")
        && p.message.contains("only allowed in version 1.2")));
    assert_eq!(p[4].path, "super_pod_list");
}

#[test]
fn v1_2_requires_super_pod_fields() {
    let mut v = base12();
    v["server_list"][0]["device"][0]
        .as_object_mut()
        .unwrap()
        .remove("super_device_id");
    one(
        &v,
        "server_list[0].device[0].super_device_id",
        "is missing",
        Some(0),
    );
    let mut v = base12();
    v.as_object_mut().unwrap().remove("super_pod_list");
    one(&v, "super_pod_list", "is missing", None);
}

#[test]
fn v1_2_super_pod_membership() {
    let mut v = base12();
    v["super_pod_list"][1]["server_list"][0]["server_id"] = json!("node_9");
    let p = problems(&v);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert_eq!(p[0].path, "super_pod_list[1].server_list[0].server_id");
    assert!(p[0].message.contains("names no server"));
    assert_eq!(p[1].path, "server_list[1].server_id");
    assert!(p[1].message.contains("in no super pod"));

    let mut v = base12();
    v["super_pod_list"][1]["server_list"][0]["server_id"] = json!("node_0");
    let p = problems(&v);
    assert!(
        p[0].message.contains("already listed in super_pod_list[0]"),
        "{p:#?}"
    );

    let mut v = base12();
    v["super_pod_list"][1]["super_pod_id"] = json!("0");
    one(
        &v,
        "super_pod_list[1].super_pod_id",
        "super pod ids must be unique",
        None,
    );
}

#[test]
fn v1_2_super_device_id_unique_within_pod_only() {
    // both servers in one pod: their super_device_ids 0,1 collide
    let mut v = base12();
    v["super_pod_list"] = json!([{"super_pod_id": "0", "server_list": [{"server_id": "node_0"}, {"server_id": "node_1"}]}]);
    let p = problems(&v);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert_eq!(p[0].path, "server_list[1].device[0].super_device_id");
    assert!(p[0].message.contains("unique within a super pod"));
    assert_eq!(p[0].rank, Some(2));
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let mut v = base();
    v["status"] = json!("initializing");
    v["server_count"] = json!("5");
    v["server_list"][1]["server_id"] = json!("node_0");
    v["server_list"][1]["device"][0]["device_ip"] = json!("-.-.-.-");
    v["server_list"][1]["device"][1]["device_id"] = json!("0");
    assert_eq!(problems(&v).len(), 5);
}

fn syntax(input: &[u8]) -> (usize, usize, String) {
    match RankTable::from_slice(input) {
        Err(TopologyError::RankTableSyntax {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected RankTableSyntax, got {other:?}"),
    }
}

/// A value of the wrong type is named by its JSON path, as the semantic
/// checks name theirs.
#[test]
fn type_errors_name_the_json_path() {
    let mut v = base();
    v["server_list"][1]["device"][1]["rank_id"] = json!(15);
    let text = serde_json::to_vec(&v).unwrap();
    let e = RankTable::from_slice(&text).unwrap_err();
    match &e {
        TopologyError::RankTableSyntax { path, .. } => {
            assert_eq!(path, "server_list[1].device[1].rank_id")
        }
        other => panic!("expected RankTableSyntax, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "rank table: server_list[1].device[1].rank_id: invalid type: integer `15`, expected a string at line 1"
        ),
        "{msg}"
    );
    // An unknown field: its parent's path and the field's name.
    let mut v = base();
    v["server_list"][0]["device"][0]["rank_Id"] = json!("0");
    let text = serde_json::to_vec(&v).unwrap();
    let t = RankTable::from_slice(&text).unwrap();
    assert_eq!(t.ignored_keys(), ["server_list[0].device[0].rank_Id"]);
    let e = RankTable::from_slice_strict(&text).unwrap_err();
    assert!(
        e.to_string().contains("server_list[0].device[0].rank_Id"),
        "{e}"
    );
}

#[test]
fn structural_errors_have_line_and_column() {
    let (line, col, msg) = syntax(b"");
    assert_eq!((line, col), (1, 0));
    assert_eq!(msg, "the file is empty");
    // A truncated file: where it ends, not a `?` path and serde's "EOF".
    let text = br#"{"status":"completed","version":"1.0","server_count":"1","server_list":[{"server_id":"a","device":[{"device_id":"0","#;
    let e = RankTable::from_slice(text).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "rank table: server_list[0].device[0]: end of file inside the table (a truncated file?) at line 1, column"
        ),
        "{e}"
    );
    let (line, _, msg) = syntax(b"{\n  \"status\": \"completed\",\n  \"version\": 1.0\n}");
    assert_eq!(line, 3);
    assert!(msg.contains("invalid type"), "{msg}");
    let (_, _, msg) = syntax(br#"{"status":"completed","version":"1.0","server_list":[]}"#);
    assert!(msg.contains("missing field `server_count`"), "{msg}");
    let (_, _, msg) = syntax(br#"{"status":"completed","version":"1.0","server_count":"1","server_list":[{"server_id":"a","device":[{"device_id":0,"rank_id":"0"}]}]}"#);
    assert!(
        msg.contains("invalid type: integer `0`, expected a string"),
        "{msg}"
    );
    // A misspelt key: the missing field, and the key that was there instead.
    let (_, _, msg) = syntax(br#"{"status":"completed","version":"1.0","server_count":"1","server_list":[{"server_id":"a","device":[{"device_id":"0","rank_Id":"0"}]}]}"#);
    assert!(
        msg.contains("missing field `rank_id`")
            && msg.contains("keys outside HCCL's format: server_list[0].device[0].rank_Id"),
        "{msg}"
    );
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    // 1 MB of pseudo-random bytes (a small stand-in for "100 MB of garbage")
    let mut x: u64 = 1;
    let bytes: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    assert!(matches!(
        RankTable::from_slice(&bytes),
        Err(TopologyError::RankTableSyntax { .. })
    ));
    // deeply nested arrays hit serde_json's recursion limit, not the stack
    let deep = "[".repeat(100_000);
    assert!(RankTable::from_slice(deep.as_bytes()).is_err());
}

#[test]
fn example_files_validate() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/");
    for (file, ranks, servers, pods) in [
        ("rank_table_1x8.json", 8, 1, 0),
        ("rank_table_2x8.json", 16, 2, 0),
        ("rank_table_16x8.json", 128, 16, 0),
        ("rank_table_superpod.json", 64, 4, 2),
    ] {
        let t =
            RankTable::from_file(format!("{dir}{file}")).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(
            (t.world_size(), t.servers().len(), t.super_pods().len()),
            (ranks, servers, pods),
            "{file}"
        );
    }
}

#[test]
fn missing_file_is_io_error() {
    assert!(matches!(
        RankTable::from_file("/nonexistent/rank_table.json"),
        Err(TopologyError::Io { .. })
    ));
}

/// A device IP that is a server's host address (its host_ip, or a
/// server_id written as an IP) is a problem at the device's path, once.
#[test]
fn a_device_ip_equal_to_a_host_address_is_a_problem() {
    let mut v = base();
    v["server_list"][1]["host_ip"] = json!("198.51.100.1");
    one(
        &v,
        "server_list[0].device[0].device_ip",
        "equals server_list[1].host_ip; a device IP is the NPU's own network address",
        None,
    );
    let mut v = base();
    v["server_list"][0]["server_id"] = json!("198.51.100.4");
    v["server_list"][0]["host_ip"] = json!("198.51.100.4");
    one(
        &v,
        "server_list[1].device[1].device_ip",
        "equals server_list[0].host_ip",
        None,
    );
    let mut v = base();
    v["server_list"][1]["server_id"] = json!("198.51.100.2");
    one(
        &v,
        "server_list[0].device[1].device_ip",
        "equals server_list[1].server_id",
        None,
    );
}

/// A table as MindSpore's `hccl_tools.py` writes it: keys in its order,
/// 4-space indent, and `"host_nic_ip": "reserve"` in the server entry.
const HCCL_TOOLS_2P: &str = r#"{
    "version": "1.0",
    "server_count": "1",
    "server_list": [
        {
            "server_id": "10.0.0.5",
            "device": [
                {
                    "device_id": "0",
                    "device_ip": "192.98.10.1",
                    "rank_id": "0"
                },
                {
                    "device_id": "1",
                    "device_ip": "192.98.11.1",
                    "rank_id": "1"
                }
            ],
            "host_nic_ip": "reserve"
        }
    ],
    "status": "completed"
}"#;

#[test]
fn host_nic_ip_reserve_as_hccl_tools_writes_it_is_accepted() {
    let t = RankTable::parse(HCCL_TOOLS_2P).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((t.world_size(), t.servers().len()), (2, 1));
    assert!(t.ignored_keys().is_empty());
    assert!(RankTable::from_slice_strict(HCCL_TOOLS_2P.as_bytes()).is_ok());
    // Other words are still not addresses.
    for bad in ["reserved", "RESERVE", "none", ""] {
        let mut v = base();
        v["server_list"][0]["host_nic_ip"] = json!(bad);
        one(
            &v,
            "server_list[0].host_nic_ip",
            "is not an IP address",
            None,
        );
    }
}

/// MindCluster Ascend Operator's hccl.json (mxdlug_appendices_009: keys in
/// its order, host_ip, container_ip, hardware_type), plus pod and container
/// fields of the kind Kubernetes tooling adds.
fn mindx_table() -> Value {
    json!({
        "status": "completed",
        "server_list": [{
            "device": [
                {"device_id": "0", "device_ip": "192.0.2.21", "rank_id": "0"},
                {"device_id": "1", "device_ip": "192.0.2.22", "rank_id": "1"}],
            "server_id": "node-a",
            "host_ip": "198.51.100.7",
            "container_ip": "203.0.113.9",
            "hardware_type": "800I-A2-32G",
            "pod_name": "job-worker-0",
            "container": {"name": "ascend", "id": "abc"}
        }],
        "server_count": "1",
        "version": "1.0",
        "job_id": "job-7"
    })
}

#[test]
fn unknown_keys_are_ignored_and_named_strict_mode_rejects_them() {
    let text = mindx_table().to_string();
    let t = RankTable::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.world_size(), 2);
    assert_eq!(
        t.ignored_keys(),
        [
            "job_id",
            "server_list[0].container",
            "server_list[0].pod_name"
        ]
    );
    let p = match RankTable::from_slice_strict(text.as_bytes()) {
        Err(TopologyError::RankTableInvalid { problems }) => problems,
        other => panic!("expected RankTableInvalid, got {other:?}"),
    };
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "job_id",
            "server_list[0].container",
            "server_list[0].pod_name"
        ]
    );
    assert!(p[0]
        .message
        .contains("not a key of HCCL's rank table format"));
    // Without the extra keys the layout is valid in strict mode too.
    let mut v = mindx_table();
    v.as_object_mut().unwrap().remove("job_id");
    let s = v["server_list"][0].as_object_mut().unwrap();
    s.remove("pod_name");
    s.remove("container");
    assert!(RankTable::from_slice_strict(v.to_string().as_bytes()).is_ok());
}

#[test]
fn a_leading_utf8_bom_is_skipped() {
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(HCCL_TOOLS_2P.as_bytes());
    let t = RankTable::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.world_size(), 2);
    // Only at the start: elsewhere it is still not JSON.
    let mut bytes = HCCL_TOOLS_2P.as_bytes().to_vec();
    bytes.splice(1..1, *b"\xEF\xBB\xBF");
    assert!(RankTable::from_slice(&bytes).is_err());
}

#[test]
fn other_layouts_are_named_with_how_to_write_format_1_0() {
    let guide = json!({"cluster": [{
        "server": "10.0.0.5",
        "rank_list": [{"rank_id": "0"}],
        "host_nic_info": {"ip": "10.0.0.5"},
        "npu_info": [{"device_id": "0", "device_ip": "192.0.2.1"}]
    }]});
    let p = one(&guide, "cluster", "HCCL never reads as a rank table", None);
    assert!(p.message.contains("\"version\": \"1.0\""), "{}", p.message);
    assert!(p.message.contains("server_list"), "{}", p.message);
    let template2 = json!({"status": "completed", "group_count": "1", "group_list": [
        {"group_name": "g", "instance_list": [{"pod_name": "0", "server_id": "10.0.0.5",
          "devices": [{"device_id": "0", "device_ip": "192.0.2.1"}]}]}]});
    one(&template2, "group_list", "template 2", None);
    let global = json!({"version": "1.0", "status": "completed", "server_group_list": []});
    one(&global, "server_group_list", "global-ranktable", None);
}

/// MindCluster Ascend Operator's hccl.json for Atlas A3 (version 1.2, keys
/// in its order: super_device_id after device_ip, hardware_type, and
/// super_pod_list last) is valid as written.
#[test]
fn mindx_a3_hccl_json_layout_is_valid() {
    let v = json!({
        "status": "completed",
        "server_list": [{
            "device": [
                {"device_id": "0", "device_ip": "192.0.2.31", "super_device_id": "37748736", "rank_id": "0"},
                {"device_id": "1", "device_ip": "192.0.2.32", "super_device_id": "37748737", "rank_id": "1"}],
            "server_id": "node-a3",
            "host_ip": "198.51.100.8",
            "container_ip": "203.0.113.10",
            "hardware_type": "800I-A3-64G"
        }],
        "server_count": "1",
        "version": "1.2",
        "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "node-a3"}]}]
    });
    let t =
        RankTable::from_slice_strict(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((t.world_size(), t.super_pods().len()), (2, 1));
}

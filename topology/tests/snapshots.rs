//! Snapshots of full error listings, as users see them. Each snapshot was
//! read and checked by hand when accepted.

use hccl_topology::{Fabric, RankTable};

const BAD_TABLE: &str = r#"{
  "status": "initializing",
  "version": "1.0",
  "server_count": "3",
  "server_list": [
    {"server_id": "node_0", "device": [
      {"device_id": "0", "device_ip": "198.51.100.1", "rank_id": "0"},
      {"device_id": "0", "device_ip": "198.51.100.2", "rank_id": "1"}]},
    {"server_id": "node_0", "device": [
      {"device_id": "0", "device_ip": "-.-.-.-", "rank_id": "2"},
      {"device_id": "1", "device_ip": "2001:db8::4", "rank_id": "2"}]}
  ]
}"#;

#[test]
fn bad_rank_table_listing() {
    let e = RankTable::parse(BAD_TABLE).unwrap_err();
    insta::assert_snapshot!(e.to_string());
}

#[test]
fn bad_v12_listing() {
    let json = r#"{"status":"completed","version":"1.2","server_count":"2","server_list":[
      {"server_id":"a","device":[{"device_id":"0","super_device_id":"0","device_ip":"203.0.113.1","rank_id":"0"}]},
      {"server_id":"b","device":[{"device_id":"0","device_ip":"203.0.113.2","rank_id":"1"}]}],
      "super_pod_list":[{"super_pod_id":"0","server_list":[{"server_id":"a"},{"server_id":"c"}]}]}"#;
    insta::assert_snapshot!(RankTable::parse(json).unwrap_err().to_string());
}

#[test]
fn syntax_error_message() {
    let json = "{\n  \"status\": \"completed\",\n  \"version\": \"1.0\",\n  \"server_count\": 2\n}";
    insta::assert_snapshot!(RankTable::parse(json).unwrap_err().to_string());
}

#[test]
fn bad_fabric_listing() {
    let json = r#"{"nodes":[
        {"name":"a","kind":"npu","rank":0},
        {"name":"a","kind":"npu","rank":0},
        {"name":"sw","kind":"switch","rank":5}],
      "links":[
        {"a":"a","b":"nowhere","class":"roce","bandwidth_gbps":25.0,"latency_ns":1000},
        {"a":"sw","b":"sw","class":"","bandwidth_gbps":-1.0,"latency_ns":1}]}"#;
    insta::assert_snapshot!(Fabric::from_fabric_json(json).unwrap_err().to_string());
}

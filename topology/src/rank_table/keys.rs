//! Keys outside HCCL's rank table format, and files of another shape.
//!
//! Both work on the parsed JSON value, before the typed parse, so they can
//! name what the typed parse would ignore or fail on.

use serde_json::{Map, Value};

use super::problem;
use super::raw::{DEVICE_KEYS, SERVER_KEYS, SUPER_POD_KEYS, SUPER_POD_SERVER_KEYS, TABLE_KEYS};
use crate::error::Problem;

/// The JSON paths (`server_list[0].device[1].pod_name`) of every key that is
/// not a field of HCCL's rank table format, parents first and each object's
/// keys sorted. Values of the wrong shape are left to the typed parse.
pub(crate) fn unknown_keys(table: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(top) = table.as_object() else {
        return out;
    };
    extra(&mut out, "", top, TABLE_KEYS);
    for (i, server) in list(top, "server_list") {
        let sp = format!("server_list[{i}]");
        extra(&mut out, &sp, server, SERVER_KEYS);
        for (j, device) in list(server, "device") {
            extra(&mut out, &format!("{sp}.device[{j}]"), device, DEVICE_KEYS);
        }
    }
    for (i, pod) in list(top, "super_pod_list") {
        let pp = format!("super_pod_list[{i}]");
        extra(&mut out, &pp, pod, SUPER_POD_KEYS);
        for (j, server) in list(pod, "server_list") {
            extra(
                &mut out,
                &format!("{pp}.server_list[{j}]"),
                server,
                SUPER_POD_SERVER_KEYS,
            );
        }
    }
    out
}

/// The objects of the array `key` of `obj`, with their indices.
fn list<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = (usize, &'a Map<String, Value>)> {
    obj.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, v)| v.as_object().map(|o| (i, o)))
}

fn extra(out: &mut Vec<String>, path: &str, obj: &Map<String, Value>, known: &[&str]) {
    for key in obj.keys().filter(|k| !known.contains(&k.as_str())) {
        out.push(if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        });
    }
}

/// A problem when `table` is a JSON object of a layout HCCL does not read as
/// a rank table (it has no `server_list` but the top-level key of a known
/// other layout), saying what it is and how to write it in format 1.0.
pub(crate) fn foreign_layout(table: &Value) -> Option<Problem> {
    let top = table.as_object()?;
    if top.contains_key("server_list") {
        return None;
    }
    let (key, what) = if top.contains_key("cluster") {
        (
            "cluster",
            "is a cluster description (a \"cluster\" list of servers with \"server\", \
             \"rank_list\", \"host_nic_info\" and \"npu_info\"), a shape some guides show \
             but HCCL never reads as a rank table",
        )
    } else if top.contains_key("group_list") {
        (
            "group_list",
            "is the older \"template 2\" layout (group_list / instance_list / pod_name), \
             which hccl-rs does not read",
        )
    } else if top.contains_key("server_group_list") {
        (
            "server_group_list",
            "is a MindCluster ClusterD global-ranktable (server_group_list), which \
             describes several jobs; give each job its own rank table",
        )
    } else {
        return None;
    };
    Some(problem(
        key,
        format!(
            "{what}; write it in rank table format 1.0: {{\"status\": \"completed\", \
             \"version\": \"1.0\", \"server_count\": \"<servers>\", \"server_list\": \
             [{{\"server_id\": \"<host IP>\", \"device\": [{{\"device_id\": \"<NPU id>\", \
             \"device_ip\": \"<NPU NIC IP>\", \"rank_id\": \"<rank>\"}}, ...]}}, ...]}} \
             (`hccl ranktable gen` writes one)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::raw::{RawDevice, RawRankTable, RawServer, RawSuperPod, RawSuperPodServer};
    use super::*;

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    fn sorted<'a>(k: &[&'a str]) -> Vec<&'a str> {
        let mut k = k.to_vec();
        k.sort_unstable();
        k
    }

    /// The key lists are the raw structs' fields: a fully populated table
    /// serialises to exactly them.
    #[test]
    fn key_lists_match_the_raw_structs() {
        let s = || Some("x".to_string());
        let raw = RawRankTable {
            status: "completed".into(),
            version: "1.2".into(),
            server_count: "1".into(),
            server_list: vec![RawServer {
                server_id: "a".into(),
                host_ip: s(),
                host_nic_ip: s(),
                container_ip: s(),
                server_container_ip: s(),
                hardware_type: s(),
                device: vec![RawDevice {
                    device_id: "0".into(),
                    super_device_id: s(),
                    device_ip: s(),
                    device_port: s(),
                    backup_device_ip: s(),
                    backup_device_port: s(),
                    host_port: s(),
                    device_logical_id: s(),
                    rank_id: "0".into(),
                }],
            }],
            super_pod_list: Some(vec![RawSuperPod {
                super_pod_id: "0".into(),
                server_list: vec![RawSuperPodServer {
                    server_id: "a".into(),
                }],
            }]),
        };
        let v = serde_json::to_value(&raw).unwrap();
        let mut top = keys(&v);
        top.sort_unstable();
        assert_eq!(top, sorted(TABLE_KEYS));
        let server = &v["server_list"][0];
        assert_eq!(sorted(&keys(server)), sorted(SERVER_KEYS));
        assert_eq!(sorted(&keys(&server["device"][0])), sorted(DEVICE_KEYS));
        let pod = &v["super_pod_list"][0];
        assert_eq!(sorted(&keys(pod)), sorted(SUPER_POD_KEYS));
        assert_eq!(
            sorted(&keys(&pod["server_list"][0])),
            sorted(SUPER_POD_SERVER_KEYS)
        );
        assert!(unknown_keys(&v).is_empty());
    }
}

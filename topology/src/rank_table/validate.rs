//! Validation of a raw rank table: every rule of HCCL's format, every problem
//! collected (not only the first), each with its JSON path, value and rank.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::raw::RawRankTable;
use super::{problem, Device, RankTable, Server, SuperPod, Version};
use crate::error::Problem;

/// Longest `server_id` accepted (issue 2; HCCL documents "a string of fewer
/// than 64 characters", we accept up to and including 64).
pub(crate) const MAX_SERVER_ID_LEN: usize = 64;

/// Most NPUs any Ascend server holds, so `device_id` is at most 15. HCCL's
/// rank table docs (hcclug "rank table configuration"): `device_id` is the
/// NPU's physical id on its server, range `[0, NPUs in the server - 1]`;
/// the largest servers (Atlas 900 A3 SuperPoD compute node, Atlas 200T A2
/// Box16) hold 16 NPUs.
pub(crate) const MAX_NPUS_PER_SERVER: u32 = 16;

/// NPUs of the server a MindCluster `hardware_type` names, when known
/// (MindCluster "hccl.json file description": e.g. `"800I-A2-32G"`; the
/// Atlas 800T A2 and 800I A2 servers hold 8 NPUs). `None`: unknown type,
/// only [`MAX_NPUS_PER_SERVER`] applies.
pub(crate) fn npus_of_hardware_type(t: &str) -> Option<(u32, &'static str)> {
    let t = t.to_ascii_uppercase();
    if t.starts_with("800T-A2") || t.starts_with("ATLAS 800T A2") {
        Some((8, "Atlas 800T A2"))
    } else if t.starts_with("800I-A2") || t.starts_with("ATLAS 800I A2") {
        Some((8, "Atlas 800I A2"))
    } else {
        None
    }
}

/// The `host_nic_ip` placeholder MindSpore's rank table generator
/// (`hccl_tools.py`) writes in every server entry; HCCL accepts it.
pub(crate) const HOST_NIC_IP_RESERVED: &str = "reserve";

pub(crate) fn unsupported_version(v: &str) -> Problem {
    problem(
        "version",
        format!(
            "is not a supported rank table version; supported: {}",
            Version::SUPPORTED.join(", ")
        ),
    )
    .value(v)
}

/// Parses a non-negative decimal integer written as a JSON string.
fn parse_uint(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// Checks an optional IP-valued field; returns the address when valid.
fn check_ip(
    problems: &mut Vec<Problem>,
    path: &str,
    value: Option<&str>,
    rank: Option<u32>,
) -> Option<IpAddr> {
    let v = value?;
    match v.parse::<IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) => {
            problems.push(
                problem(
                    path,
                    "is not an IP address; write an IPv4 (192.0.2.1) or IPv6 (2001:db8::1) address",
                )
                .value(v)
                .rank(rank),
            );
            None
        }
    }
}

fn check_port(problems: &mut Vec<Problem>, path: &str, value: Option<&str>, rank: Option<u32>) {
    if let Some(v) = value {
        if !matches!(parse_uint(v), Some(p) if p <= u32::from(u16::MAX)) {
            problems.push(
                problem(path, "is not a port number; write an integer in 0..=65535")
                    .value(v)
                    .rank(rank),
            );
        }
    }
}

struct SeenIp {
    ip: IpAddr,
    path: String,
}

/// Validates `raw`; `Ok` only when no problem was found.
pub(crate) fn validate(raw: RawRankTable) -> Result<RankTable, Vec<Problem>> {
    let mut p: Vec<Problem> = Vec::new();

    if raw.status != "completed" {
        p.push(
            problem(
                "status",
                "is not \"completed\"; HCCL only uses a rank table once its writer has set status to \"completed\"",
            )
            .value(&raw.status),
        );
    }
    let version = Version::parse(&raw.version);
    if version.is_none() {
        p.push(unsupported_version(&raw.version));
    }

    match parse_uint(&raw.server_count) {
        None => p.push(
            problem("server_count", "is not a non-negative integer").value(&raw.server_count),
        ),
        Some(n) if n as usize != raw.server_list.len() => p.push(
            problem(
                "server_count",
                format!(
                    "does not match server_list, which has {} server{}; set it to {}",
                    raw.server_list.len(),
                    if raw.server_list.len() == 1 { "" } else { "s" },
                    raw.server_list.len()
                ),
            )
            .value(&raw.server_count),
        ),
        Some(_) => {}
    }
    if raw.server_list.is_empty() {
        p.push(problem("server_list", "is empty; list at least one server"));
    }

    let multi_server = raw.server_list.len() > 1;
    let world: usize = raw.server_list.iter().map(|s| s.device.len()).sum();
    let mut server_ids: BTreeMap<&str, usize> = BTreeMap::new();
    // rank -> path of its first occurrence
    let mut rank_seen: BTreeMap<u32, String> = BTreeMap::new();
    let mut rank_ok = true;
    let mut first_ip: Option<SeenIp> = None;
    let mut ip_seen: BTreeMap<IpAddr, String> = BTreeMap::new();
    let mut servers: Vec<Server> = Vec::with_capacity(raw.server_list.len());
    let mut server_ranks: Vec<Vec<u32>> = Vec::with_capacity(raw.server_list.len());

    for (i, s) in raw.server_list.iter().enumerate() {
        let sp = format!("server_list[{i}]");
        if s.server_id.is_empty() {
            p.push(problem(
                format!("{sp}.server_id"),
                "is empty; give each server a unique id, e.g. its host IP",
            ));
        } else if s.server_id.chars().count() > MAX_SERVER_ID_LEN {
            p.push(
                problem(
                    format!("{sp}.server_id"),
                    format!(
                        "is {} characters long; at most {MAX_SERVER_ID_LEN} are allowed",
                        s.server_id.chars().count()
                    ),
                )
                .value(&s.server_id),
            );
        }
        if let Some(&j) = server_ids.get(s.server_id.as_str()) {
            p.push(
                problem(
                    format!("{sp}.server_id"),
                    format!("duplicates server_list[{j}].server_id; server ids must be unique"),
                )
                .value(&s.server_id),
            );
        } else {
            server_ids.insert(&s.server_id, i);
        }
        let host_ip = check_ip(&mut p, &format!("{sp}.host_ip"), s.host_ip.as_deref(), None);
        check_ip(
            &mut p,
            &format!("{sp}.host_nic_ip"),
            s.host_nic_ip
                .as_deref()
                .filter(|v| *v != HOST_NIC_IP_RESERVED),
            None,
        );
        check_ip(
            &mut p,
            &format!("{sp}.container_ip"),
            s.container_ip.as_deref(),
            None,
        );
        check_ip(
            &mut p,
            &format!("{sp}.server_container_ip"),
            s.server_container_ip.as_deref(),
            None,
        );
        if s.device.is_empty() {
            p.push(problem(
                format!("{sp}.device"),
                "is empty; list the server's NPUs",
            ));
        }

        // How many NPUs this server holds, when the table says what it is.
        let known = s.hardware_type.as_deref().and_then(npus_of_hardware_type);
        let (npus, npus_why) = match (known, s.hardware_type.as_deref()) {
            (Some((n, product)), Some(t)) => (
                n,
                format!("hardware_type {t:?} is an {product} server with {n} NPUs"),
            ),
            _ => (
                MAX_NPUS_PER_SERVER,
                format!("no Ascend server holds more than {MAX_NPUS_PER_SERVER} NPUs"),
            ),
        };
        if s.device.len() > npus as usize {
            p.push(problem(
                format!("{sp}.device"),
                format!(
                    "lists {} devices, but {npus_why}; list at most {npus} (one entry per NPU)",
                    s.device.len()
                ),
            ));
        }
        let mut device_ids: BTreeMap<u32, usize> = BTreeMap::new();
        let mut devices = Vec::with_capacity(s.device.len());
        let mut ranks = Vec::with_capacity(s.device.len());
        for (j, d) in s.device.iter().enumerate() {
            let dp = format!("{sp}.device[{j}]");
            let rank = parse_uint(&d.rank_id);
            match rank {
                None => {
                    rank_ok = false;
                    p.push(
                        problem(format!("{dp}.rank_id"), "is not a non-negative integer")
                            .value(&d.rank_id),
                    );
                }
                Some(r) if r as usize >= world => {
                    rank_ok = false;
                    p.push(
                        problem(
                            format!("{dp}.rank_id"),
                            format!("is out of range: the table has {world} devices, so rank ids must be 0..={}", world.saturating_sub(1)),
                        )
                        .value(&d.rank_id),
                    );
                }
                Some(r) => {
                    if let Some(first) = rank_seen.get(&r) {
                        rank_ok = false;
                        p.push(
                            problem(
                                format!("{dp}.rank_id"),
                                format!("duplicates {first}; rank ids must be unique"),
                            )
                            .value(&d.rank_id)
                            .rank(Some(r)),
                        );
                    } else {
                        rank_seen.insert(r, format!("{dp}.rank_id"));
                        ranks.push(r);
                    }
                }
            }
            let device_id = parse_uint(&d.device_id);
            match device_id {
                None => p.push(
                    problem(format!("{dp}.device_id"), "is not a non-negative integer")
                        .value(&d.device_id)
                        .rank(rank),
                ),
                Some(id) if id >= npus => p.push(
                    problem(
                        format!("{dp}.device_id"),
                        format!(
                            "is out of range: device_id is the NPU's physical id on its server (0..=NPUs - 1, as in /dev/davinciN) and {npus_why}; use 0..={}",
                            npus - 1
                        ),
                    )
                    .value(&d.device_id)
                    .rank(rank),
                ),
                Some(id) => {
                    if let Some(&k) = device_ids.get(&id) {
                        p.push(
                            problem(
                                format!("{dp}.device_id"),
                                format!("duplicates {sp}.device[{k}].device_id; device ids must be unique within a server"),
                            )
                            .value(&d.device_id)
                            .rank(rank),
                        );
                    } else {
                        device_ids.insert(id, j);
                    }
                }
            }
            let ip_path = format!("{dp}.device_ip");
            let device_ip = check_ip(&mut p, &ip_path, d.device_ip.as_deref(), rank);
            if d.device_ip.is_none() && multi_server {
                p.push(
                    problem(
                        &ip_path,
                        "is missing; device_ip is required when the job spans more than one server",
                    )
                    .rank(rank),
                );
            }
            if let Some(ip) = device_ip {
                match &first_ip {
                    None => {
                        first_ip = Some(SeenIp {
                            ip,
                            path: ip_path.clone(),
                        })
                    }
                    Some(f) if f.ip.is_ipv4() != ip.is_ipv4() => p.push(
                        problem(
                            &ip_path,
                            format!(
                                "is {} but {} is {}; do not mix IPv4 and IPv6 device addresses",
                                family(&ip),
                                f.path,
                                family(&f.ip)
                            ),
                        )
                        .value(d.device_ip.as_deref().unwrap_or_default())
                        .rank(rank),
                    ),
                    Some(_) => {}
                }
                if let Some(first) = ip_seen.get(&ip) {
                    p.push(
                        problem(
                            &ip_path,
                            format!("duplicates {first}; device IPs must be unique"),
                        )
                        .value(d.device_ip.as_deref().unwrap_or_default())
                        .rank(rank),
                    );
                } else {
                    ip_seen.insert(ip, ip_path.clone());
                }
            }
            check_ip(
                &mut p,
                &format!("{dp}.backup_device_ip"),
                d.backup_device_ip.as_deref(),
                rank,
            );
            check_port(
                &mut p,
                &format!("{dp}.device_port"),
                d.device_port.as_deref(),
                rank,
            );
            check_port(
                &mut p,
                &format!("{dp}.backup_device_port"),
                d.backup_device_port.as_deref(),
                rank,
            );
            check_port(
                &mut p,
                &format!("{dp}.host_port"),
                d.host_port.as_deref(),
                rank,
            );
            if let Some(v) = &d.device_logical_id {
                if parse_uint(v).is_none() {
                    p.push(
                        problem(
                            format!("{dp}.device_logical_id"),
                            "is not a non-negative integer",
                        )
                        .value(v)
                        .rank(rank),
                    );
                }
            }
            let super_device_id = match (version, &d.super_device_id) {
                (Some(Version::V1_0), Some(v)) => {
                    p.push(
                        problem(
                            format!("{dp}.super_device_id"),
                            "is only allowed in version 1.2 rank tables; remove it or set version to \"1.2\"",
                        )
                        .value(v)
                        .rank(rank),
                    );
                    None
                }
                (Some(Version::V1_2), None) => {
                    p.push(
                        problem(
                            format!("{dp}.super_device_id"),
                            "is missing; version 1.2 rank tables give every device its super_device_id",
                        )
                        .rank(rank),
                    );
                    None
                }
                (_, Some(v)) => {
                    let id = parse_uint(v);
                    if id.is_none() {
                        p.push(
                            problem(
                                format!("{dp}.super_device_id"),
                                "is not a non-negative integer",
                            )
                            .value(v)
                            .rank(rank),
                        );
                    }
                    id
                }
                (_, None) => None,
            };
            devices.push(Device {
                device_id: device_id.unwrap_or(0),
                rank: rank.unwrap_or(0),
                device_ip,
                super_device_id,
            });
        }
        devices.sort_by_key(|d| d.rank);
        servers.push(Server {
            server_id: s.server_id.clone(),
            host_ip,
            devices,
        });
        server_ranks.push(ranks);
    }
    // A device IP is the NPU's own (RoCE) address: one that is a server's
    // host address (its host_ip, or a server_id written as an IP) is a
    // copy-paste slip, and the NPUs' traffic would go to the host.
    for (i, s) in raw.server_list.iter().enumerate() {
        let ip_of = |v: Option<&str>| v.and_then(|v| v.parse::<IpAddr>().ok());
        let host_ip = ip_of(s.host_ip.as_deref());
        let server_ip = ip_of(Some(&s.server_id)).filter(|ip| Some(*ip) != host_ip);
        for (field, ip) in [("host_ip", host_ip), ("server_id", server_ip)] {
            let Some(ip) = ip else { continue };
            if let Some(dev) = ip_seen.get(&ip) {
                p.push(
                    problem(
                        dev,
                        format!(
                            "equals server_list[{i}].{field}; a device IP is the NPU's own network address, not a host's"
                        ),
                    )
                    .value(ip.to_string()),
                );
            }
        }
    }

    if !rank_ok {
        let missing: Vec<String> = (0..world as u32)
            .filter(|r| !rank_seen.contains_key(r))
            .map(|r| r.to_string())
            .collect();
        if !missing.is_empty() {
            let shown = if missing.len() > 16 {
                format!(
                    "{}, ... ({} in all)",
                    missing[..16].join(", "),
                    missing.len()
                )
            } else {
                missing.join(", ")
            };
            p.push(problem(
                "server_list",
                format!(
                    "has no device with rank id {shown}; rank ids must be exactly 0..={}",
                    world.saturating_sub(1)
                ),
            ));
        }
    } else {
        for (i, ranks) in server_ranks.iter().enumerate() {
            let (Some(&lo), Some(&hi)) = (ranks.iter().min(), ranks.iter().max()) else {
                continue;
            };
            if (hi - lo) as usize + 1 != ranks.len() {
                let mut sorted = ranks.clone();
                sorted.sort_unstable();
                let list: Vec<String> = sorted.iter().map(u32::to_string).collect();
                p.push(problem(
                    format!("server_list[{i}].device"),
                    format!(
                        "has ranks [{}], which are not contiguous; one server's ranks must form one block, not interleave with another server's",
                        list.join(", ")
                    ),
                ));
            }
        }
    }

    let mut super_pods = Vec::new();
    match (version, &raw.super_pod_list) {
        (Some(Version::V1_0), Some(_)) => p.push(problem(
            "super_pod_list",
            "is only allowed in version 1.2 rank tables; remove it or set version to \"1.2\"",
        )),
        (Some(Version::V1_2), None) => p.push(problem(
            "super_pod_list",
            "is missing; version 1.2 rank tables list the servers of each super pod",
        )),
        (Some(Version::V1_2), Some(list)) => {
            if list.is_empty() {
                p.push(problem(
                    "super_pod_list",
                    "is empty; list at least one super pod",
                ));
            }
            let mut pod_ids: BTreeMap<&str, usize> = BTreeMap::new();
            let mut pod_of_server: Vec<Option<usize>> = vec![None; raw.server_list.len()];
            for (k, pod) in list.iter().enumerate() {
                let pp = format!("super_pod_list[{k}]");
                if pod.super_pod_id.is_empty() {
                    p.push(problem(
                        format!("{pp}.super_pod_id"),
                        "is empty; give each super pod a unique id",
                    ));
                } else if let Some(&first) = pod_ids.get(pod.super_pod_id.as_str()) {
                    p.push(
                        problem(
                            format!("{pp}.super_pod_id"),
                            format!("duplicates super_pod_list[{first}].super_pod_id; super pod ids must be unique"),
                        )
                        .value(&pod.super_pod_id),
                    );
                } else {
                    pod_ids.insert(&pod.super_pod_id, k);
                }
                if pod.server_list.is_empty() {
                    p.push(problem(
                        format!("{pp}.server_list"),
                        "is empty; list the super pod's servers",
                    ));
                }
                let mut members = Vec::new();
                let mut super_ids: BTreeMap<u32, String> = BTreeMap::new();
                for (m, sref) in pod.server_list.iter().enumerate() {
                    let rp = format!("{pp}.server_list[{m}].server_id");
                    let Some(&si) = server_ids.get(sref.server_id.as_str()) else {
                        p.push(
                            problem(
                                &rp,
                                "names no server of server_list; use a server_id from server_list",
                            )
                            .value(&sref.server_id),
                        );
                        continue;
                    };
                    if let Some(other) = pod_of_server[si] {
                        p.push(
                            problem(
                                &rp,
                                format!("is already listed in super_pod_list[{other}]; a server belongs to exactly one super pod"),
                            )
                            .value(&sref.server_id),
                        );
                        continue;
                    }
                    pod_of_server[si] = Some(k);
                    members.push(si);
                    for (j, d) in raw.server_list[si].device.iter().enumerate() {
                        let Some(id) = d.super_device_id.as_deref().and_then(parse_uint) else {
                            continue;
                        };
                        let dp = format!("server_list[{si}].device[{j}].super_device_id");
                        if let Some(first) = super_ids.get(&id) {
                            p.push(
                                problem(
                                    &dp,
                                    format!("duplicates {first} in super pod {:?}; super_device_id must be unique within a super pod", pod.super_pod_id),
                                )
                                .value(id.to_string())
                                .rank(parse_uint(&d.rank_id)),
                            );
                        } else {
                            super_ids.insert(id, dp);
                        }
                    }
                }
                super_pods.push(SuperPod {
                    super_pod_id: pod.super_pod_id.clone(),
                    servers: members,
                });
            }
            for (i, pod) in pod_of_server.iter().enumerate() {
                if pod.is_none() {
                    p.push(
                        problem(
                            format!("server_list[{i}].server_id"),
                            "is in no super pod; add it to one server_list of super_pod_list",
                        )
                        .value(&raw.server_list[i].server_id),
                    );
                }
            }
        }
        _ => {}
    }

    if !p.is_empty() {
        return Err(p);
    }
    Ok(RankTable {
        // `p` is empty, so the version parsed.
        version: version.unwrap_or(Version::V1_0),
        servers,
        super_pods,
        raw,
        ignored_keys: Vec::new(),
    })
}

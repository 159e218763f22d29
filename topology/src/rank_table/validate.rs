//! Validation of a raw rank table: every rule of HCCL's format, every problem
//! collected (not only the first), each with its JSON path, value and rank.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::raw::{RawDevice, RawRankTable, RawServer, RawSuperPod};
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

/// What the rules for later servers and devices need to know of earlier
/// ones (duplicates name the first occurrence).
struct Seen<'a> {
    /// More than one server: `device_ip` is required.
    multi_server: bool,
    /// Devices in the whole table: rank ids are `0..world`.
    world: usize,
    /// `server_id` -> index of its first server.
    server_ids: BTreeMap<&'a str, usize>,
    /// rank -> path of its first occurrence.
    ranks: BTreeMap<u32, String>,
    /// Every `rank_id` parsed, in range and unique.
    ranks_ok: bool,
    /// The first device IP: the others must be of its family.
    first_ip: Option<SeenIp>,
    /// device IP -> path of its first occurrence.
    ips: BTreeMap<IpAddr, String>,
}

/// The server whose devices are being checked.
struct InServer {
    /// `server_list[i]`.
    path: String,
    /// NPUs the server can hold, and why (for the messages).
    npus: u32,
    npus_why: String,
    /// `device_id` -> index of its first device.
    device_ids: BTreeMap<u32, usize>,
}

/// Validates `raw`; `Ok` only when no problem was found. The rules run, and
/// report, in this order: the table's header fields, each server and its
/// devices in file order, the rules across servers, the super pods.
pub(crate) fn validate(raw: RawRankTable) -> Result<RankTable, Vec<Problem>> {
    let mut p: Vec<Problem> = Vec::new();
    check_status(&mut p, &raw.status);
    let version = Version::parse(&raw.version);
    if version.is_none() {
        p.push(unsupported_version(&raw.version));
    }
    check_server_count(&mut p, &raw);
    let mut seen = Seen {
        multi_server: raw.server_list.len() > 1,
        world: raw.server_list.iter().map(|s| s.device.len()).sum(),
        server_ids: BTreeMap::new(),
        ranks: BTreeMap::new(),
        ranks_ok: true,
        first_ip: None,
        ips: BTreeMap::new(),
    };
    let mut servers: Vec<Server> = Vec::with_capacity(raw.server_list.len());
    let mut server_ranks: Vec<Vec<u32>> = Vec::with_capacity(raw.server_list.len());
    for (i, s) in raw.server_list.iter().enumerate() {
        let (server, ranks) = check_server(&mut p, &mut seen, version, i, s);
        servers.push(server);
        server_ranks.push(ranks);
    }
    check_device_ips_are_not_hosts(&mut p, &raw.server_list, &seen.ips);
    if seen.ranks_ok {
        check_ranks_contiguous(&mut p, &server_ranks);
    } else {
        check_no_rank_missing(&mut p, &seen);
    }
    let super_pods = check_super_pods(&mut p, &raw, version, &seen.server_ids);

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

/// `status` is `"completed"`.
fn check_status(p: &mut Vec<Problem>, status: &str) {
    if status != "completed" {
        p.push(
            problem(
                "status",
                "is not \"completed\"; HCCL only uses a rank table once its writer has set status to \"completed\"",
            )
            .value(status),
        );
    }
}

/// `server_count` is an integer equal to the length of a non-empty `server_list`.
fn check_server_count(p: &mut Vec<Problem>, raw: &RawRankTable) {
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
}

/// One server of `server_list` and its devices: the server and the ranks
/// it holds (the valid, unique ones).
fn check_server<'a>(
    p: &mut Vec<Problem>,
    seen: &mut Seen<'a>,
    version: Option<Version>,
    i: usize,
    s: &'a RawServer,
) -> (Server, Vec<u32>) {
    let path = format!("server_list[{i}]");
    check_server_id(p, seen, &path, i, &s.server_id);
    let host_ip = check_ip(p, &format!("{path}.host_ip"), s.host_ip.as_deref(), None);
    let host_nic_ip = s
        .host_nic_ip
        .as_deref()
        .filter(|v| *v != HOST_NIC_IP_RESERVED);
    for (field, value) in [
        ("host_nic_ip", host_nic_ip),
        ("container_ip", s.container_ip.as_deref()),
        ("server_container_ip", s.server_container_ip.as_deref()),
    ] {
        check_ip(p, &format!("{path}.{field}"), value, None);
    }
    let (npus, npus_why) = npus_of_server(s);
    check_device_count(p, &path, s.device.len(), npus, &npus_why);
    let mut server = InServer {
        path,
        npus,
        npus_why,
        device_ids: BTreeMap::new(),
    };
    let mut devices = Vec::with_capacity(s.device.len());
    let mut ranks = Vec::with_capacity(s.device.len());
    for (j, d) in s.device.iter().enumerate() {
        devices.push(check_device(
            p,
            seen,
            &mut server,
            version,
            j,
            d,
            &mut ranks,
        ));
    }
    devices.sort_by_key(|d| d.rank);
    let server = Server {
        server_id: s.server_id.clone(),
        host_ip,
        devices,
    };
    (server, ranks)
}

/// `server_id` is non-empty, not too long, and unique.
fn check_server_id<'a>(p: &mut Vec<Problem>, seen: &mut Seen<'a>, sp: &str, i: usize, id: &'a str) {
    if id.is_empty() {
        p.push(problem(
            format!("{sp}.server_id"),
            "is empty; give each server a unique id, e.g. its host IP",
        ));
    } else if id.chars().count() > MAX_SERVER_ID_LEN {
        p.push(
            problem(
                format!("{sp}.server_id"),
                format!(
                    "is {} characters long; at most {MAX_SERVER_ID_LEN} are allowed",
                    id.chars().count()
                ),
            )
            .value(id),
        );
    }
    if let Some(&j) = seen.server_ids.get(id) {
        p.push(
            problem(
                format!("{sp}.server_id"),
                format!("duplicates server_list[{j}].server_id; server ids must be unique"),
            )
            .value(id),
        );
    } else {
        seen.server_ids.insert(id, i);
    }
}

/// How many NPUs `s` holds, when the table says what it is, and why.
fn npus_of_server(s: &RawServer) -> (u32, String) {
    let known = s.hardware_type.as_deref().and_then(npus_of_hardware_type);
    match (known, s.hardware_type.as_deref()) {
        (Some((n, product)), Some(t)) => (
            n,
            format!("hardware_type {t:?} is an {product} server with {n} NPUs"),
        ),
        _ => (
            MAX_NPUS_PER_SERVER,
            format!("no Ascend server holds more than {MAX_NPUS_PER_SERVER} NPUs"),
        ),
    }
}

/// A server lists at least one device and at most its NPUs.
fn check_device_count(p: &mut Vec<Problem>, sp: &str, devices: usize, npus: u32, npus_why: &str) {
    if devices == 0 {
        p.push(problem(
            format!("{sp}.device"),
            "is empty; list the server's NPUs",
        ));
    }
    if devices > npus as usize {
        p.push(problem(
            format!("{sp}.device"),
            format!(
                "lists {devices} devices, but {npus_why}; list at most {npus} (one entry per NPU)"
            ),
        ));
    }
}

/// One device of a server; its valid, unique rank is added to `ranks`.
fn check_device(
    p: &mut Vec<Problem>,
    seen: &mut Seen<'_>,
    server: &mut InServer,
    version: Option<Version>,
    j: usize,
    d: &RawDevice,
    ranks: &mut Vec<u32>,
) -> Device {
    let dp = format!("{}.device[{j}]", server.path);
    let rank = check_rank_id(p, seen, &dp, &d.rank_id, ranks);
    let device_id = check_device_id(p, server, &dp, j, &d.device_id, rank);
    let device_ip = check_device_ip(p, seen, &dp, d.device_ip.as_deref(), rank);
    check_ip(
        p,
        &format!("{dp}.backup_device_ip"),
        d.backup_device_ip.as_deref(),
        rank,
    );
    for (field, value) in [
        ("device_port", &d.device_port),
        ("backup_device_port", &d.backup_device_port),
        ("host_port", &d.host_port),
    ] {
        check_port(p, &format!("{dp}.{field}"), value.as_deref(), rank);
    }
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
    let super_device_id =
        check_super_device_id(p, version, &dp, d.super_device_id.as_deref(), rank);
    Device {
        device_id: device_id.unwrap_or(0),
        rank: rank.unwrap_or(0),
        device_ip,
        super_device_id,
    }
}

/// `rank_id` is an integer in `0..world`, unique in the table. Returns it
/// parsed (also when out of range or a duplicate, to name the rank).
fn check_rank_id(
    p: &mut Vec<Problem>,
    seen: &mut Seen<'_>,
    dp: &str,
    rank_id: &str,
    ranks: &mut Vec<u32>,
) -> Option<u32> {
    let world = seen.world;
    let rank = parse_uint(rank_id);
    match rank {
        None => {
            seen.ranks_ok = false;
            p.push(
                problem(format!("{dp}.rank_id"), "is not a non-negative integer").value(rank_id),
            );
        }
        Some(r) if r as usize >= world => {
            seen.ranks_ok = false;
            p.push(
                problem(
                    format!("{dp}.rank_id"),
                    format!("is out of range: the table has {world} devices, so rank ids must be 0..={}", world.saturating_sub(1)),
                )
                .value(rank_id),
            );
        }
        Some(r) => {
            if let Some(first) = seen.ranks.get(&r) {
                seen.ranks_ok = false;
                p.push(
                    problem(
                        format!("{dp}.rank_id"),
                        format!("duplicates {first}; rank ids must be unique"),
                    )
                    .value(rank_id)
                    .rank(Some(r)),
                );
            } else {
                seen.ranks.insert(r, format!("{dp}.rank_id"));
                ranks.push(r);
            }
        }
    }
    rank
}

/// `device_id` is an integer below the server's NPUs, unique in the server.
fn check_device_id(
    p: &mut Vec<Problem>,
    server: &mut InServer,
    dp: &str,
    j: usize,
    value: &str,
    rank: Option<u32>,
) -> Option<u32> {
    let device_id = parse_uint(value);
    let npus = server.npus;
    match device_id {
        None => p.push(
            problem(format!("{dp}.device_id"), "is not a non-negative integer")
                .value(value)
                .rank(rank),
        ),
        Some(id) if id >= npus => p.push(
            problem(
                format!("{dp}.device_id"),
                format!(
                    "is out of range: device_id is the NPU's physical id on its server (0..=NPUs - 1, as in /dev/davinciN) and {}; use 0..={}",
                    server.npus_why,
                    npus - 1
                ),
            )
            .value(value)
            .rank(rank),
        ),
        Some(id) => {
            if let Some(&k) = server.device_ids.get(&id) {
                p.push(
                    problem(
                        format!("{dp}.device_id"),
                        format!("duplicates {}.device[{k}].device_id; device ids must be unique within a server", server.path),
                    )
                    .value(value)
                    .rank(rank),
                );
            } else {
                server.device_ids.insert(id, j);
            }
        }
    }
    device_id
}

/// `device_ip` is an IP address, present when the job spans servers, of one
/// family across the table, and unique.
fn check_device_ip(
    p: &mut Vec<Problem>,
    seen: &mut Seen<'_>,
    dp: &str,
    value: Option<&str>,
    rank: Option<u32>,
) -> Option<IpAddr> {
    let ip_path = format!("{dp}.device_ip");
    let device_ip = check_ip(p, &ip_path, value, rank);
    if value.is_none() && seen.multi_server {
        p.push(
            problem(
                &ip_path,
                "is missing; device_ip is required when the job spans more than one server",
            )
            .rank(rank),
        );
    }
    let ip = device_ip?;
    match &seen.first_ip {
        None => {
            seen.first_ip = Some(SeenIp {
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
            .value(value.unwrap_or_default())
            .rank(rank),
        ),
        Some(_) => {}
    }
    if let Some(first) = seen.ips.get(&ip) {
        p.push(
            problem(
                &ip_path,
                format!("duplicates {first}; device IPs must be unique"),
            )
            .value(value.unwrap_or_default())
            .rank(rank),
        );
    } else {
        seen.ips.insert(ip, ip_path);
    }
    device_ip
}

/// `super_device_id`: absent in version 1.0, present in 1.2, an integer.
fn check_super_device_id(
    p: &mut Vec<Problem>,
    version: Option<Version>,
    dp: &str,
    value: Option<&str>,
    rank: Option<u32>,
) -> Option<u32> {
    match (version, value) {
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
    }
}

/// A device IP is the NPU's own (RoCE) address: one that is a server's
/// host address (its host_ip, or a server_id written as an IP) is a
/// copy-paste slip, and the NPUs' traffic would go to the host.
fn check_device_ips_are_not_hosts(
    p: &mut Vec<Problem>,
    server_list: &[RawServer],
    ips: &BTreeMap<IpAddr, String>,
) {
    for (i, s) in server_list.iter().enumerate() {
        let ip_of = |v: Option<&str>| v.and_then(|v| v.parse::<IpAddr>().ok());
        let host_ip = ip_of(s.host_ip.as_deref());
        let server_ip = ip_of(Some(&s.server_id)).filter(|ip| Some(*ip) != host_ip);
        for (field, ip) in [("host_ip", host_ip), ("server_id", server_ip)] {
            let Some(ip) = ip else { continue };
            if let Some(dev) = ips.get(&ip) {
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
}

/// When some rank id was bad: the ranks of `0..world` no device has.
fn check_no_rank_missing(p: &mut Vec<Problem>, seen: &Seen<'_>) {
    let world = seen.world;
    let missing: Vec<String> = (0..world as u32)
        .filter(|r| !seen.ranks.contains_key(r))
        .map(|r| r.to_string())
        .collect();
    if missing.is_empty() {
        return;
    }
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

/// When every rank id is good: each server's ranks form one block.
fn check_ranks_contiguous(p: &mut Vec<Problem>, server_ranks: &[Vec<u32>]) {
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

/// `super_pod_list`: absent in version 1.0; in 1.2 present, non-empty, and
/// every server in exactly one super pod.
fn check_super_pods(
    p: &mut Vec<Problem>,
    raw: &RawRankTable,
    version: Option<Version>,
    server_ids: &BTreeMap<&str, usize>,
) -> Vec<SuperPod> {
    let list = match (version, &raw.super_pod_list) {
        (Some(Version::V1_0), Some(_)) => {
            p.push(problem(
                "super_pod_list",
                "is only allowed in version 1.2 rank tables; remove it or set version to \"1.2\"",
            ));
            return Vec::new();
        }
        (Some(Version::V1_2), None) => {
            p.push(problem(
                "super_pod_list",
                "is missing; version 1.2 rank tables list the servers of each super pod",
            ));
            return Vec::new();
        }
        (Some(Version::V1_2), Some(list)) => list,
        _ => return Vec::new(),
    };
    if list.is_empty() {
        p.push(problem(
            "super_pod_list",
            "is empty; list at least one super pod",
        ));
    }
    let mut pod_ids: BTreeMap<&str, usize> = BTreeMap::new();
    let mut pod_of_server: Vec<Option<usize>> = vec![None; raw.server_list.len()];
    let mut super_pods = Vec::with_capacity(list.len());
    for (k, pod) in list.iter().enumerate() {
        check_super_pod_id(p, &mut pod_ids, k, &pod.super_pod_id);
        let members = check_pod_members(p, raw, server_ids, &mut pod_of_server, k, pod);
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
    super_pods
}

/// `super_pod_id` is non-empty and unique.
fn check_super_pod_id<'a>(
    p: &mut Vec<Problem>,
    pod_ids: &mut BTreeMap<&'a str, usize>,
    k: usize,
    id: &'a str,
) {
    let path = format!("super_pod_list[{k}].super_pod_id");
    if id.is_empty() {
        p.push(problem(path, "is empty; give each super pod a unique id"));
    } else if let Some(&first) = pod_ids.get(id) {
        p.push(
            problem(
                path,
                format!(
                    "duplicates super_pod_list[{first}].super_pod_id; super pod ids must be unique"
                ),
            )
            .value(id),
        );
    } else {
        pod_ids.insert(id, k);
    }
}

/// A super pod's `server_list`: non-empty, each entry a server of
/// `server_list` in no other pod, its devices' `super_device_id`s unique
/// within the pod. Returns the member servers' indices.
fn check_pod_members(
    p: &mut Vec<Problem>,
    raw: &RawRankTable,
    server_ids: &BTreeMap<&str, usize>,
    pod_of_server: &mut [Option<usize>],
    k: usize,
    pod: &RawSuperPod,
) -> Vec<usize> {
    let pp = format!("super_pod_list[{k}]");
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
    members
}

//! The rank table generator: a valid table from a list of server addresses.

use std::net::{IpAddr, Ipv4Addr};

use super::raw::{RawDevice, RawRankTable, RawServer, RawSuperPod, RawSuperPodServer};
use super::validate::MAX_NPUS_PER_SERVER;
use super::{validate, RankTable, Version};
use crate::error::TopologyError;

/// What [`RankTable::generate_with`] builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateSpec {
    /// Server addresses, one per server, in rank order; each becomes the
    /// server's `server_id` and `host_ip`. Must be unique and non-empty.
    pub servers: Vec<IpAddr>,
    /// NPUs per server (`device_id` 0..devices_per_server), 1..=16 (no
    /// Ascend server holds more than 16 NPUs; an Atlas 800T A2 holds 8).
    pub devices_per_server: u32,
    /// First device IP; device `d` of server `s` gets
    /// `base + s * devices_per_server + d`. Required when there is more than
    /// one server (HCCL needs `device_ip` then); when `None` on one server
    /// the table has no `device_ip` fields. IPv4: every address must stay
    /// inside the base's /24 and be a host address (last octet 1..=254, not
    /// the network `.0` or broadcast `.255`), else generation fails rather
    /// than roll into the next subnet.
    pub device_ip_base: Option<IpAddr>,
    /// Output format version.
    pub version: Version,
    /// Version 1.2: servers per super pod (consecutive servers are grouped,
    /// the last pod may be smaller); `None` puts all servers in one super pod.
    /// Ignored for version 1.0.
    pub servers_per_super_pod: Option<u32>,
}

fn bad(reason: impl Into<String>) -> TopologyError {
    TopologyError::InvalidGenerateArgs {
        reason: reason.into(),
    }
}

/// Checks that `count` IPv4 addresses counted up from `base` are host
/// addresses of `base`'s /24: last octet in 1..=254, no carry into the
/// third octet.
fn check_v4_range(base: Ipv4Addr, count: u64) -> Result<(), TopologyError> {
    let [a, b, c, first] = base.octets();
    let net = Ipv4Addr::new(a, b, c, 0);
    if first == 0 || first == 255 {
        return Err(bad(format!(
            "--device-ip-base {base} is the {} address of {net}/24, not a device address; start at {a}.{b}.{c}.1",
            if first == 0 { "network" } else { "broadcast" }
        )));
    }
    let last = u64::from(first) + count - 1;
    if last > 254 {
        let fix = if count > 254 {
            format!("{count} addresses do not fit in one /24 (254 host addresses): write the device IPs of each server's subnet yourself")
        } else {
            format!("start at most at {a}.{b}.{c}.{}", 255 - count)
        };
        return Err(bad(format!(
            "--device-ip-base {base}: {count} device IPs counted up from it would run past {a}.{b}.{c}.254, the last host address of {net}/24 (.255 is its broadcast address), into the next subnet; {fix}"
        )));
    }
    Ok(())
}

fn add_offset(base: IpAddr, offset: u64) -> Option<IpAddr> {
    match base {
        IpAddr::V4(v4) => u32::from(v4)
            .checked_add(u32::try_from(offset).ok()?)
            .map(|x| IpAddr::V4(x.into())),
        IpAddr::V6(v6) => u128::from(v6)
            .checked_add(u128::from(offset))
            .map(|x| IpAddr::V6(x.into())),
    }
}

/// `ip − base` when `ip` is `base` or above it in the same family.
fn offset_of(base: IpAddr, ip: IpAddr) -> Option<u64> {
    match (base, ip) {
        (IpAddr::V4(b), IpAddr::V4(i)) => u32::from(i).checked_sub(u32::from(b)).map(u64::from),
        (IpAddr::V6(b), IpAddr::V6(i)) => {
            u64::try_from(u128::from(i).checked_sub(u128::from(b))?).ok()
        }
        _ => None,
    }
}

impl RankTable {
    /// Generates a valid rank table: `servers.len()` servers of
    /// `devices_per_server` NPUs, ranks assigned server by server, device IPs
    /// counted up from `device_ip_base`. Version 1.2 puts all servers in one
    /// super pod (see [`RankTable::generate_with`] for more).
    ///
    /// # Errors
    /// [`TopologyError::InvalidGenerateArgs`] when there are no servers, a
    /// duplicated server address, zero devices, no `device_ip_base` for more
    /// than one server, or device IPs that would overflow the address space.
    pub fn generate(
        servers: &[IpAddr],
        devices_per_server: u32,
        device_ip_base: Option<IpAddr>,
        version: Version,
    ) -> Result<RankTable, TopologyError> {
        Self::generate_with(&GenerateSpec {
            servers: servers.to_vec(),
            devices_per_server,
            device_ip_base,
            version,
            servers_per_super_pod: None,
        })
    }

    /// Generates a valid rank table from a full [`GenerateSpec`].
    ///
    /// # Errors
    /// As [`RankTable::generate`], and when `servers_per_super_pod` is 0.
    pub fn generate_with(spec: &GenerateSpec) -> Result<RankTable, TopologyError> {
        if spec.servers.is_empty() {
            return Err(bad("no servers given; pass at least one server address"));
        }
        if spec.devices_per_server == 0 {
            return Err(bad(
                "devices per server is 0; pass at least 1 (8 on an Atlas 800T A2)",
            ));
        }
        if spec.devices_per_server > MAX_NPUS_PER_SERVER {
            return Err(bad(format!(
                "--devices {}: no Ascend server holds more than {MAX_NPUS_PER_SERVER} NPUs (device_id is 0..={}; an Atlas 800T A2 holds 8, an Atlas 900 A3 SuperPoD server 16); pass the NPUs of one server",
                spec.devices_per_server,
                MAX_NPUS_PER_SERVER - 1
            )));
        }
        for (i, s) in spec.servers.iter().enumerate() {
            if let Some(j) = spec.servers[..i].iter().position(|t| t == s) {
                return Err(bad(format!(
                    "server address {s} is given twice (servers {j} and {i}); server ids must be unique"
                )));
            }
        }
        if spec.servers.len() > 1 && spec.device_ip_base.is_none() {
            return Err(bad(
                "a table with more than one server needs device IPs; pass a device IP base (e.g. --device-ip-base 198.51.100.1)",
            ));
        }
        if spec.servers_per_super_pod == Some(0) {
            return Err(bad("servers per super pod is 0; pass at least 1"));
        }
        let dps = u64::from(spec.devices_per_server);
        let world = spec.servers.len() as u64 * dps;
        if world > u64::from(u32::MAX) {
            return Err(bad(format!("{world} ranks do not fit in a 32-bit rank id")));
        }
        if let Some(IpAddr::V4(base)) = spec.device_ip_base {
            check_v4_range(base, world)?;
        }
        // Device IPs are the NPUs' own: the range must miss every server.
        if let Some(base) = spec.device_ip_base {
            for s in &spec.servers {
                if let Some(k) = offset_of(base, *s).filter(|&k| k < world) {
                    return Err(bad(format!(
                        "device IP base {base}: the {world} device IPs from it include server {s} (rank {k}'s); a device IP is the NPU's own network address, so pick a base whose range misses the servers' addresses"
                    )));
                }
            }
        }
        let v12 = spec.version == Version::V1_2;
        let per_pod = u64::from(spec.servers_per_super_pod.unwrap_or(u32::MAX));
        let mut server_list = Vec::with_capacity(spec.servers.len());
        for (s, addr) in spec.servers.iter().enumerate() {
            let mut device = Vec::with_capacity(spec.devices_per_server as usize);
            for d in 0..dps {
                let rank = s as u64 * dps + d;
                let device_ip = match spec.device_ip_base {
                    None => None,
                    Some(base) => Some(add_offset(base, rank).ok_or_else(|| {
                        bad(format!(
                            "device IP base {base} + {rank} overflows the address space; pick a lower base"
                        ))
                    })?),
                };
                // super_device_id: position of the device inside its super pod.
                let in_pod = (s as u64 % per_pod) * dps + d;
                device.push(RawDevice {
                    device_id: d.to_string(),
                    super_device_id: v12.then(|| in_pod.to_string()),
                    device_ip: device_ip.map(|ip| ip.to_string()),
                    device_port: None,
                    backup_device_ip: None,
                    backup_device_port: None,
                    host_port: None,
                    device_logical_id: None,
                    rank_id: rank.to_string(),
                });
            }
            server_list.push(RawServer {
                server_id: addr.to_string(),
                host_ip: Some(addr.to_string()),
                host_nic_ip: None,
                container_ip: None,
                server_container_ip: None,
                hardware_type: None,
                device,
            });
        }
        let super_pod_list = v12.then(|| {
            server_list
                .chunks(per_pod.min(server_list.len() as u64) as usize)
                .enumerate()
                .map(|(k, chunk)| RawSuperPod {
                    super_pod_id: k.to_string(),
                    server_list: chunk
                        .iter()
                        .map(|s| RawSuperPodServer {
                            server_id: s.server_id.clone(),
                        })
                        .collect(),
                })
                .collect()
        });
        let raw = RawRankTable {
            status: "completed".into(),
            version: spec.version.as_str().into(),
            server_count: spec.servers.len().to_string(),
            server_list,
            super_pod_list,
        };
        validate::validate(raw).map_err(|problems| {
            // The construction above satisfies every rule; report rather than
            // panic if that ever stops being true.
            bad(format!(
                "internal error, generated table is invalid: {}",
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        })
    }
}

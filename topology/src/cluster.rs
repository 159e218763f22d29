//! The cluster model: which server, device and super pod each rank is on.

use std::net::IpAddr;

use crate::error::TopologyError;
use crate::rank_table::RankTable;

/// Where one rank lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    /// Index of the server, `0..ClusterSpec::server_count()`.
    pub server: u32,
    /// Physical device id on that server.
    pub device_id: u32,
    /// Index of the super pod, `0..ClusterSpec::super_pods().len()` (0 when
    /// the cluster has no super pods: it is then one super pod).
    pub super_pod: u32,
    /// The NPU's NIC address, if known.
    pub device_ip: Option<IpAddr>,
}

/// Ranks → (server, device, super pod, device IP), built from a validated
/// rank table or a preset.
///
/// Invariants: ranks are `0..world_size()`; each server's ranks are contiguous
/// and listed in rank order; every server is in exactly one super pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    ranks: Vec<RankInfo>,
    servers: Vec<Vec<u32>>,
    super_pods: Vec<Vec<u32>>,
}

impl ClusterSpec {
    /// The cluster described by a validated rank table. Servers keep their
    /// `server_list` order; a version 1.0 table is one super pod.
    pub fn from_rank_table(table: &RankTable) -> ClusterSpec {
        let world = table.world_size() as usize;
        let mut ranks = vec![
            RankInfo {
                server: 0,
                device_id: 0,
                super_pod: 0,
                device_ip: None
            };
            world
        ];
        let mut pod_of_server = vec![0u32; table.servers().len()];
        for (k, pod) in table.super_pods().iter().enumerate() {
            for &s in pod.servers() {
                pod_of_server[s] = k as u32;
            }
        }
        let mut servers = Vec::with_capacity(table.servers().len());
        for (s, server) in table.servers().iter().enumerate() {
            let mut list = Vec::with_capacity(server.devices().len());
            for d in server.devices() {
                ranks[d.rank() as usize] = RankInfo {
                    server: s as u32,
                    device_id: d.device_id(),
                    super_pod: pod_of_server[s],
                    device_ip: d.device_ip(),
                };
                list.push(d.rank());
            }
            servers.push(list);
        }
        let super_pods = if table.super_pods().is_empty() {
            vec![(0..servers.len() as u32).collect()]
        } else {
            table
                .super_pods()
                .iter()
                .map(|p| p.servers().iter().map(|&s| s as u32).collect())
                .collect()
        };
        ClusterSpec {
            ranks,
            servers,
            super_pods,
        }
    }

    /// A regular cluster: `servers` servers of `devices_per_server` NPUs
    /// (device ids `0..devices_per_server`), ranks numbered server by server,
    /// consecutive servers grouped into super pods of `servers_per_super_pod`
    /// (`None`: one super pod). No device IPs.
    ///
    /// # Errors
    /// [`TopologyError::InvalidPresetParameter`] when a count is 0 or the
    /// world size exceeds `u32::MAX`.
    pub fn uniform(
        servers: u32,
        devices_per_server: u32,
        servers_per_super_pod: Option<u32>,
    ) -> Result<ClusterSpec, TopologyError> {
        let bad = |parameter: &'static str, value: String, reason: &str| {
            TopologyError::InvalidPresetParameter {
                preset: "cluster",
                parameter,
                value,
                reason: reason.to_string(),
            }
        };
        if servers == 0 {
            return Err(bad("servers", "0".into(), "must be at least 1"));
        }
        if devices_per_server == 0 {
            return Err(bad("devices per server", "0".into(), "must be at least 1"));
        }
        if servers_per_super_pod == Some(0) {
            return Err(bad(
                "servers per super pod",
                "0".into(),
                "must be at least 1",
            ));
        }
        let world = u64::from(servers) * u64::from(devices_per_server);
        if world > u64::from(u32::MAX) {
            return Err(bad(
                "servers",
                servers.to_string(),
                "gives more than 2^32 ranks",
            ));
        }
        let per_pod = servers_per_super_pod.unwrap_or(servers);
        let mut ranks = Vec::with_capacity(world as usize);
        let mut server_lists = Vec::with_capacity(servers as usize);
        for s in 0..servers {
            let base = s * devices_per_server;
            for d in 0..devices_per_server {
                ranks.push(RankInfo {
                    server: s,
                    device_id: d,
                    super_pod: s / per_pod,
                    device_ip: None,
                });
            }
            server_lists.push((base..base + devices_per_server).collect());
        }
        let super_pods = (0..servers)
            .collect::<Vec<_>>()
            .chunks(per_pod as usize)
            .map(<[u32]>::to_vec)
            .collect();
        Ok(ClusterSpec {
            ranks,
            servers: server_lists,
            super_pods,
        })
    }

    /// Number of ranks.
    pub fn world_size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// Where `rank` lives, or `None` if `rank >= world_size()`.
    pub fn rank(&self, rank: u32) -> Option<&RankInfo> {
        self.ranks.get(rank as usize)
    }

    /// Server index of `rank`, or `None` if out of range.
    pub fn server_of(&self, rank: u32) -> Option<u32> {
        self.rank(rank).map(|r| r.server)
    }

    /// Super pod index of `rank`, or `None` if out of range.
    pub fn super_pod_of(&self, rank: u32) -> Option<u32> {
        self.rank(rank).map(|r| r.super_pod)
    }

    /// Position of `rank` inside its server (0 for the server's lowest rank),
    /// or `None` if out of range.
    pub fn local_rank(&self, rank: u32) -> Option<u32> {
        let s = self.server_of(rank)?;
        Some(rank - self.servers[s as usize][0])
    }

    /// Number of servers.
    pub fn server_count(&self) -> u32 {
        self.servers.len() as u32
    }

    /// The ranks of each server, in rank order; `servers()[s]` is server `s`.
    pub fn servers(&self) -> &[Vec<u32>] {
        &self.servers
    }

    /// The server indices of each super pod, in order.
    pub fn super_pods(&self) -> &[Vec<u32>] {
        &self.super_pods
    }

    /// Ranks per server when every server has the same number, else `None`.
    pub fn ranks_per_server(&self) -> Option<u32> {
        let first = self.servers.first()?.len();
        self.servers
            .iter()
            .all(|s| s.len() == first)
            .then_some(first as u32)
    }

    /// True when every server has the same number of ranks and every super
    /// pod the same number of servers (the shape hierarchical algorithms need).
    pub fn is_homogeneous(&self) -> bool {
        let pods_even = match self.super_pods.first() {
            None => true,
            Some(first) => self.super_pods.iter().all(|p| p.len() == first.len()),
        };
        self.ranks_per_server().is_some() && pods_even
    }
}

impl ClusterSpec {
    /// A cluster from the server index of each rank (already validated: the
    /// indices are `0..S`, each used, each server's ranks contiguous). Device
    /// ids are positions inside the server; one super pod.
    pub(crate) fn from_server_of(server_of: &[u32]) -> ClusterSpec {
        let count = server_of.iter().max().map_or(0, |m| *m as usize + 1);
        let mut servers: Vec<Vec<u32>> = vec![Vec::new(); count];
        let mut ranks = Vec::with_capacity(server_of.len());
        for (r, &s) in server_of.iter().enumerate() {
            let list = &mut servers[s as usize];
            ranks.push(RankInfo {
                server: s,
                device_id: list.len() as u32,
                super_pod: 0,
                device_ip: None,
            });
            list.push(r as u32);
        }
        ClusterSpec {
            ranks,
            servers,
            super_pods: vec![(0..count as u32).collect()],
        }
    }
}

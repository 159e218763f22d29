//! The simulated cluster a run uses: a preset (with `--servers` and `-p`),
//! a rank table, or a fabric file; its group layout and selector costs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use hccl_topology::{
    build_preset, build_preset_with, Fabric, Preset, PresetOptions, RankTable, Version,
};

/// Where the cluster comes from.
#[derive(Debug, Clone)]
pub(crate) enum Source<'a> {
    /// A named preset, `servers` servers of `npus` NPUs (`None`: the
    /// machine's NPUs per server, 8 for generic shapes).
    Preset {
        /// Preset name.
        name: &'a str,
        /// Servers.
        servers: u32,
        /// `-p`.
        npus: Option<u32>,
    },
    /// An HCCL rank table file.
    RankTable(&'a Path),
    /// A fabric file.
    FabricFile(&'a Path),
}

/// Why the cluster could not be built. Each is a usage error (exit 2)
/// except [`ClusterError::Topology`] on files, which is a bad input file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ClusterError {
    /// `-p` or `--servers` out of range for the preset.
    #[error("{0}")]
    Usage(String),
    /// The topology crate rejected the preset or file.
    #[error(transparent)]
    Topology(#[from] hccl_topology::TopologyError),
}

/// NPUs per server of the machine presets (None for generic shapes).
fn machine_npus(p: Preset) -> Option<u32> {
    match p {
        Preset::Atlas800tA2 | Preset::Atlas800With910a => {
            Some(hccl_topology::presets::sources::A2_NPUS_PER_SERVER)
        }
        Preset::AtlasA3SuperPod => Some(hccl_topology::presets::sources::A3_NPUS_PER_SERVER),
        _ => None,
    }
}

/// A built cluster: the fabric and where it came from, for the header.
pub(crate) struct Cluster {
    /// The fabric.
    pub fabric: Fabric,
    /// `atlas800t-a2`, `rank table FILE`, `fabric file FILE`.
    pub origin: String,
}

/// Builds the cluster.
///
/// With a machine preset, `-p` below the machine's NPUs per server uses the
/// first `p` NPUs of each server (a generated rank table, as hccl_test
/// does with `-p` on a real server); above it is an error, as in hccl_test.
///
/// # Errors
/// [`ClusterError`].
pub(crate) fn build(src: &Source<'_>) -> Result<Cluster, ClusterError> {
    match *src {
        Source::Preset {
            name,
            servers,
            npus,
        } => {
            let preset = Preset::parse(name).map_err(|e| ClusterError::Usage(e.to_string()))?;
            if servers == 0 {
                return Err(ClusterError::Usage(
                    "--servers 0: a cluster has at least one server".into(),
                ));
            }
            if npus == Some(0) {
                return Err(ClusterError::Usage(
                    "-p/--npus 0: use at least one NPU per server".into(),
                ));
            }
            let fabric = match machine_npus(preset) {
                Some(full) => {
                    let p = npus.unwrap_or(full);
                    if p > full {
                        return Err(ClusterError::Usage(format!(
                            "-p/--npus {p} is larger than one {preset} server ({full} NPUs); use 1..={full}"
                        )));
                    }
                    if p == full {
                        build_preset(preset, servers)?
                    } else {
                        partial_server(preset, servers, p)?
                    }
                }
                None => build_preset_with(
                    preset,
                    servers,
                    &PresetOptions {
                        devices_per_server: Some(npus.unwrap_or(8)),
                        ..PresetOptions::default()
                    },
                )?,
            };
            Ok(Cluster {
                fabric,
                origin: format!("preset {preset}"),
            })
        }
        Source::RankTable(path) => {
            let table = RankTable::from_file(path)?;
            Ok(Cluster {
                fabric: Fabric::for_rank_table(&table)?,
                origin: format!("rank table {}", path.display()),
            })
        }
        Source::FabricFile(path) => Ok(Cluster {
            fabric: Fabric::from_fabric_file(path)?,
            origin: format!("fabric file {}", path.display()),
        }),
    }
}

/// The ranks of a preset source, known before its fabric is built:
/// servers × NPUs per server (`-p`, else the machine's, else 8 for the
/// generic shapes). `None` for a rank table or fabric file (their fabric
/// says, once built) and for flags [`build`] refuses (an unknown preset,
/// 0 servers or NPUs, `-p` above a machine's server), so that its error
/// names them.
pub(crate) fn preset_ranks(src: &Source<'_>) -> Option<u64> {
    let Source::Preset {
        name,
        servers,
        npus,
    } = *src
    else {
        return None;
    };
    let full = machine_npus(Preset::parse(name).ok()?);
    let per_server = npus.or(full).unwrap_or(8);
    let fits = full.is_none_or(|f| per_server <= f);
    (servers > 0 && per_server > 0 && fits).then(|| u64::from(servers) * u64::from(per_server))
}

/// The first `p` NPUs of each server of a machine preset, through a
/// generated rank table (v1.0 → Atlas 800T A2 servers, v1.2 → A3).
fn partial_server(preset: Preset, servers: u32, p: u32) -> Result<Fabric, ClusterError> {
    let version = match preset {
        Preset::Atlas800tA2 => Version::V1_0,
        Preset::AtlasA3SuperPod => Version::V1_2,
        _ => {
            return Err(ClusterError::Usage(format!(
                "-p/--npus below a full server is supported for atlas800t-a2 and atlas900-a3-superpod, not {preset}"
            )))
        }
    };
    let hosts: Vec<IpAddr> = (0..servers)
        .map(|s| IpAddr::V4(Ipv4Addr::from(0x0A00_0001u32 + s)))
        .collect();
    // Device IPs only name the NPUs here; IPv6 has room for any count (an
    // IPv4 /24 holds 253 hosts).
    let base = (servers > 1).then_some(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)));
    let table = RankTable::generate(&hosts, p, base, version)?;
    Ok(Fabric::for_rank_table(&table)?)
}

/// Server and super pod of every rank, for hierarchical algorithms
/// ([`hccl_sim::selector::layout`], shared with the C API's simulated timing).
pub(crate) use hccl_sim::selector::layout;

/// The selector's α–β–γ costs read off the fabric
/// ([`hccl_sim::selector::cost_model`], shared with the C API's simulated
/// timing).
pub(crate) use hccl_sim::selector::cost_model;

/// Servers and NPUs per server, for the header (`None` per server when
/// servers differ in size).
pub(crate) fn shape(fabric: &Fabric) -> (u32, Option<u32>) {
    let c = fabric.cluster();
    (c.server_count(), c.ranks_per_server())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_algos::algo::{AlgoSpec, Algorithm};
    use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
    use hccl_algos::select::select;
    use hccl_algos::DataType;

    #[test]
    fn a_presets_ranks_are_known_before_its_fabric() {
        let p = |name, servers, npus| {
            preset_ranks(&Source::Preset {
                name,
                servers,
                npus,
            })
        };
        assert_eq!(p("atlas800t-a2", 100_000, None), Some(800_000));
        assert_eq!(p("atlas800t-a2", 3, Some(4)), Some(12));
        assert_eq!(p("ring", 5, None), Some(40));
        assert_eq!(p("ring", 5, Some(2)), Some(10));
        // What build refuses is left to its error.
        assert_eq!(p("atlas800t-a2", 2, Some(9)), None);
        assert_eq!(p("atlas800t-a2", 0, None), None);
        assert_eq!(p("ring", 2, Some(0)), None);
        assert_eq!(p("bogus", 2, None), None);
        assert_eq!(preset_ranks(&Source::FabricFile(Path::new("f.json"))), None);
        // The count is the fabric's.
        let c = build(&Source::Preset {
            name: "atlas800t-a2",
            servers: 3,
            npus: Some(4),
        })
        .unwrap();
        assert_eq!(u64::from(c.fabric.world_size()), 12);
    }

    #[test]
    fn partial_servers_keep_the_a2_links() {
        let c = build(&Source::Preset {
            name: "atlas800t-a2",
            servers: 2,
            npus: Some(4),
        })
        .unwrap();
        assert_eq!(c.fabric.world_size(), 8);
        assert_eq!(shape(&c.fabric), (2, Some(4)));
        let costs = cost_model(&c.fabric);
        assert_eq!(costs.level0.bandwidth_gbps, 28.0);
        assert_eq!(costs.level1.bandwidth_gbps, 25.0);
        let l = layout(&c.fabric);
        assert_eq!((l.server_of(3), l.server_of(4)), (0, 1));
    }

    #[test]
    fn traffic_patterns_see_shared_links_only_where_there_are_some() {
        let preset = |name| {
            build(&Source::Preset {
                name,
                servers: 1,
                npus: None,
            })
            .unwrap()
            .fabric
        };
        // A2: a full HCCS mesh, one link per pair: nothing shared.
        assert_eq!(cost_model(&preset("atlas800t-a2")).level0_patterns, None);
        // 910A: the two groups of four meet over PCIe, which the 16
        // cross-group flows of a mesh share, a ring's 2 flows less so.
        let c = cost_model(&preset("atlas800-910a"));
        let p = c.level0_patterns.expect("910A is not a full mesh");
        assert!(p.mesh < p.ring, "{p:?}");
        assert!(p.ring <= c.level0.bandwidth_gbps, "{p:?}");
        // So the selector no longer prefers the mesh there at 64 MiB.
        let args = CollectiveArgs::new(CollectiveKind::AllReduce, 16 << 20, DataType::Fp32, 8);
        let f = preset("atlas800-910a");
        let pick = select(&args, &layout(&f), &c, None).spec;
        assert_ne!(pick, AlgoSpec::Flat(Algorithm::Mesh));
    }

    #[test]
    fn partial_servers_have_room_for_any_number_of_npus() {
        // 32 x 8 = 256 NPUs: more device IPs than an IPv4 /24 holds.
        let c = build(&Source::Preset {
            name: "atlas900-a3-superpod",
            servers: 32,
            npus: Some(8),
        })
        .unwrap();
        assert_eq!(c.fabric.world_size(), 256);
        assert_eq!(shape(&c.fabric), (32, Some(8)));
    }

    #[test]
    fn too_many_npus_is_a_usage_error() {
        let e = build(&Source::Preset {
            name: "atlas800t-a2",
            servers: 1,
            npus: Some(9),
        })
        .err()
        .unwrap();
        assert!(matches!(e, ClusterError::Usage(_)));
        assert!(e.to_string().contains("-p/--npus 9"), "{e}");
    }
}

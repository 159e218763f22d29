//! The generator always gives a table that validates and round-trips.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hccl_topology::{ClusterSpec, GenerateSpec, RankTable, TopologyError, Version};
use proptest::prelude::*;

fn spec() -> impl Strategy<Value = GenerateSpec> {
    (
        1usize..12,
        1u32..17,
        any::<bool>(),
        any::<bool>(),
        any::<u32>(),
        prop::option::of(1u32..5),
    )
        .prop_map(|(n, devices, v6, v12, base, per_pod)| {
            let servers = (0..n)
                .map(|i| IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10 + i as u8)))
                .collect();
            let device_ip_base = Some(if v6 {
                IpAddr::V6(Ipv6Addr::new(
                    0x2001,
                    0xdb8,
                    0,
                    0,
                    0,
                    0,
                    (base >> 16) as u16,
                    base as u16,
                ))
            } else {
                // leave room for n * devices addresses
                IpAddr::V4(Ipv4Addr::from(base.min(u32::MAX - 1000)))
            });
            GenerateSpec {
                servers,
                devices_per_server: devices,
                device_ip_base,
                version: if v12 { Version::V1_2 } else { Version::V1_0 },
                servers_per_super_pod: per_pod,
            }
        })
}

proptest! {
    #[test]
    fn generated_tables_validate_and_round_trip(spec in spec()) {
        let t = RankTable::generate_with(&spec).unwrap();
        let n = spec.servers.len() as u32;
        prop_assert_eq!(t.world_size(), n * spec.devices_per_server);
        prop_assert_eq!(t.version(), spec.version);
        let json = t.to_json();
        let back = RankTable::parse(&json).unwrap();
        prop_assert_eq!(&back, &t);
        prop_assert_eq!(back.to_json(), json);
        // the cluster model agrees with the request
        let c = ClusterSpec::from_rank_table(&t);
        prop_assert_eq!(c.ranks_per_server(), Some(spec.devices_per_server));
        prop_assert_eq!(c.server_count(), n);
        let pods = match spec.version {
            Version::V1_0 => 1,
            _ => n.div_ceil(spec.servers_per_super_pod.unwrap_or(n)),
        };
        prop_assert_eq!(c.super_pods().len() as u32, pods);
        for r in 0..t.world_size() {
            prop_assert_eq!(c.server_of(r), Some(r / spec.devices_per_server));
        }
    }
}

#[test]
fn single_server_without_device_ips() {
    let t = RankTable::generate(&["192.0.2.1".parse().unwrap()], 8, None, Version::V1_0).unwrap();
    assert!(t.servers()[0]
        .devices()
        .iter()
        .all(|d| d.device_ip().is_none()));
    assert!(!t.to_json().contains("device_ip"));
}

#[test]
fn device_ips_count_up_from_base() {
    let servers: Vec<IpAddr> = vec!["192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap()];
    let t = RankTable::generate(
        &servers,
        8,
        Some("198.51.100.250".parse().unwrap()),
        Version::V1_0,
    )
    .unwrap();
    let last = t.servers()[1].devices()[7].device_ip().unwrap();
    // 250 + 15 = 265 = 198.51.101.9
    assert_eq!(last, "198.51.101.9".parse::<IpAddr>().unwrap());
}

#[test]
fn generator_rejects_bad_arguments() {
    let two: Vec<IpAddr> = vec!["192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap()];
    let bad = |r: Result<RankTable, TopologyError>, needle: &str| match r {
        Err(TopologyError::InvalidGenerateArgs { reason }) => {
            assert!(reason.contains(needle), "{reason}")
        }
        other => panic!("expected InvalidGenerateArgs, got {other:?}"),
    };
    bad(
        RankTable::generate(&two, 8, None, Version::V1_0),
        "--device-ip-base",
    );
    bad(
        RankTable::generate(&[], 8, None, Version::V1_0),
        "no servers",
    );
    bad(
        RankTable::generate(&two[..1], 0, None, Version::V1_0),
        "devices per server is 0",
    );
    bad(
        RankTable::generate(&[two[0], two[0]], 8, Some(two[1]), Version::V1_0),
        "given twice",
    );
    bad(
        RankTable::generate(
            &two,
            8,
            Some("255.255.255.250".parse().unwrap()),
            Version::V1_0,
        ),
        "overflows",
    );
}

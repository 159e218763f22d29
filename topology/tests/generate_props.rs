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
                // .1 of any /24 but the servers' (192.0.2.0/24): room
                // for 254 >= 11 * 16 addresses, none a server's.
                let net = base & !0xff;
                let net = if net == u32::from(Ipv4Addr::new(192, 0, 2, 0)) {
                    net ^ 0x100
                } else {
                    net
                };
                IpAddr::V4(Ipv4Addr::from(net | 1))
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
        Some("198.51.100.239".parse().unwrap()),
        Version::V1_0,
    )
    .unwrap();
    let last = t.servers()[1].devices()[7].device_ip().unwrap();
    // 239 + 15 = 254, the last host address of 198.51.100.0/24
    assert_eq!(last, "198.51.100.254".parse::<IpAddr>().unwrap());
}

#[test]
fn device_ips_stay_host_addresses_of_the_base_subnet() {
    let one: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap()];
    let two: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
    let reason = |servers: &[IpAddr], base: &str| match RankTable::generate(
        servers,
        8,
        Some(base.parse().unwrap()),
        Version::V1_0,
    ) {
        Err(TopologyError::InvalidGenerateArgs { reason }) => reason,
        other => panic!("expected InvalidGenerateArgs for {base}, got {other:?}"),
    };
    // .250 + 7 = .257: would give .255 (broadcast) and roll into 192.168.2.0.
    let r = reason(&one, "192.168.1.250");
    assert!(r.contains("--device-ip-base 192.168.1.250"), "{r}");
    assert!(r.contains("past 192.168.1.254"), "{r}");
    assert!(r.contains("start at most at 192.168.1.247"), "{r}");
    // .247 is the highest base that fits 8.
    assert!(RankTable::generate(
        &one,
        8,
        Some("192.168.1.247".parse().unwrap()),
        Version::V1_0
    )
    .is_ok());
    let r = reason(&two, "192.168.1.0");
    assert!(r.contains("network address of 192.168.1.0/24"), "{r}");
    let r = reason(&two, "192.168.1.255");
    assert!(r.contains("broadcast address"), "{r}");
    // 32 servers of 8 are 256 addresses: no base of one /24 holds them.
    let many: Vec<IpAddr> = (0..32u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(10, 0, 1, i + 1)))
        .collect();
    let r = reason(&many, "192.168.1.1");
    assert!(r.contains("256 addresses do not fit in one /24"), "{r}");
    // IPv6 has no broadcast address: counting up is fine.
    assert!(RankTable::generate(
        &two,
        8,
        Some("2001:db8::ff".parse().unwrap()),
        Version::V1_0
    )
    .is_ok());
}

#[test]
fn generator_refuses_more_devices_than_a_server_holds() {
    let one: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap()];
    assert!(RankTable::generate(&one, 16, None, Version::V1_0).is_ok());
    match RankTable::generate(&one, 17, None, Version::V1_0) {
        Err(TopologyError::InvalidGenerateArgs { reason }) => {
            assert!(reason.contains("--devices 17"), "{reason}");
            assert!(reason.contains("more than 16 NPUs"), "{reason}");
        }
        other => panic!("expected InvalidGenerateArgs, got {other:?}"),
    }
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
        "past 255.255.255.254",
    );
    // Device IPs are the NPUs' own: a range that covers a server is refused.
    bad(
        RankTable::generate(&two, 8, Some(two[0]), Version::V1_0),
        "the 16 device IPs from it include server 192.0.2.1 (rank 0's)",
    );
}

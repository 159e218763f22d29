//! Which host IP a rank listens on, by HCCL's rules.
//!
//! Order (CANN env var reference, `HCCL_IF_IP` / `HCCL_SOCKET_IFNAME`):
//! `HCCL_IF_IP` > `HCCL_SOCKET_IFNAME` (first matching interface) >
//! interfaces other than docker and loopback, by name ascending > docker
//! interfaces > loopback.

use std::net::IpAddr;

use super::config::TcpConfig;
use super::error::TcpError;

/// One interface address: (interface name, IP).
pub(crate) type IfAddr = (String, IpAddr);

/// The host's interface addresses, from `getifaddrs`.
///
/// # Errors
/// [`TcpError::Interface`] if the OS call fails.
pub(crate) fn host_interfaces() -> Result<Vec<IfAddr>, TcpError> {
    let list = if_addrs::get_if_addrs().map_err(|e| TcpError::Interface {
        detail: format!("cannot list network interfaces: {e}"),
    })?;
    Ok(list.into_iter().map(|i| (i.name.clone(), i.ip())).collect())
}

fn class(name: &str, ip: &IpAddr) -> u8 {
    if ip.is_loopback() || name == "lo" {
        2
    } else if name.starts_with("docker") {
        1
    } else {
        0
    }
}

/// Picks the IP to listen on from `cfg` and the host's `interfaces`.
///
/// `fallback` is used when neither `HCCL_IF_IP` nor `HCCL_SOCKET_IFNAME` is
/// set and it is `Some` (the bootstrap passes loopback when the root is on
/// loopback, so single-host runs never leave the host).
///
/// # Errors
/// [`TcpError::Interface`] when `HCCL_SOCKET_IFNAME` matches nothing or the
/// host has no usable address; the message lists the interfaces seen.
pub(crate) fn select_ip(
    cfg: &TcpConfig,
    interfaces: &[IfAddr],
    fallback: Option<IpAddr>,
) -> Result<IpAddr, TcpError> {
    if let Some(ip) = cfg.if_ip {
        return Ok(ip);
    }
    let seen = || {
        interfaces
            .iter()
            .map(|(n, ip)| format!("{n}={ip}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(filter) = &cfg.socket_ifname {
        // IPv4 first, as HCCL's default socket family is IPv4.
        let mut hits: Vec<&IfAddr> = interfaces
            .iter()
            .filter(|(n, _)| filter.accepts(n))
            .collect();
        hits.sort_by_key(|(_, ip)| ip.is_ipv6());
        if !filter.exclude && !filter.exact {
            // Prefixes: keep the order the user gave them in.
            hits.sort_by_key(|(n, ip)| {
                let pos = filter.names.iter().position(|p| n.starts_with(p.as_str()));
                (pos, ip.is_ipv6())
            });
        } else if filter.exact && !filter.exclude {
            hits.sort_by_key(|(n, ip)| (filter.names.iter().position(|p| p == n), ip.is_ipv6()));
        }
        return hits
            .first()
            .map(|(_, ip)| *ip)
            .ok_or_else(|| TcpError::Interface {
                detail: format!(
                    "HCCL_SOCKET_IFNAME=\"{}{}{}\" matches no interface (seen: {}); fix HCCL_SOCKET_IFNAME or set HCCL_IF_IP",
                    if filter.exclude { "^" } else { "" },
                    if filter.exact { "=" } else { "" },
                    filter.names.join(","),
                    seen()
                ),
            });
    }
    if let Some(ip) = fallback {
        return Ok(ip);
    }
    let mut all: Vec<&IfAddr> = interfaces.iter().collect();
    all.sort_by(|a, b| {
        (class(&a.0, &a.1), a.1.is_ipv6(), &a.0).cmp(&(class(&b.0, &b.1), b.1.is_ipv6(), &b.0))
    });
    all.first()
        .map(|(_, ip)| *ip)
        .ok_or_else(|| TcpError::Interface {
            detail: "the host has no network interface with an address; set HCCL_IF_IP".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::config::IfnameFilter;

    fn ifs() -> Vec<IfAddr> {
        vec![
            ("lo".into(), "127.0.0.1".parse().unwrap()),
            ("docker0".into(), "172.17.0.1".parse().unwrap()),
            ("eth1".into(), "10.0.0.2".parse().unwrap()),
            ("eth0".into(), "10.0.0.1".parse().unwrap()),
            ("eth0".into(), "fe80::1".parse().unwrap()),
        ]
    }

    #[test]
    fn default_order_is_physical_then_docker_then_loopback() {
        let cfg = TcpConfig::default();
        let ip = select_ip(&cfg, &ifs(), None).unwrap();
        assert_eq!(
            ip,
            "10.0.0.1".parse::<IpAddr>().unwrap(),
            "eth0 sorts first, IPv4 first"
        );
        let only = vec![ifs()[0].clone(), ifs()[1].clone()];
        assert_eq!(
            select_ip(&cfg, &only, None).unwrap(),
            "172.17.0.1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn if_ip_beats_ifname_beats_fallback() {
        let mut cfg = TcpConfig {
            socket_ifname: IfnameFilter::parse("=eth1"),
            ..TcpConfig::default()
        };
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(
            select_ip(&cfg, &ifs(), Some(lo)).unwrap(),
            "10.0.0.2".parse::<IpAddr>().unwrap()
        );
        cfg.if_ip = Some("192.0.2.7".parse().unwrap());
        assert_eq!(
            select_ip(&cfg, &ifs(), Some(lo)).unwrap(),
            cfg.if_ip.unwrap()
        );
        let cfg = TcpConfig::default();
        assert_eq!(select_ip(&cfg, &ifs(), Some(lo)).unwrap(), lo);
    }

    #[test]
    fn unmatched_ifname_lists_what_was_seen() {
        let cfg = TcpConfig {
            socket_ifname: IfnameFilter::parse("ib"),
            ..TcpConfig::default()
        };
        let e = select_ip(&cfg, &ifs(), None).unwrap_err().to_string();
        assert!(
            e.contains("HCCL_SOCKET_IFNAME=\"ib\"") && e.contains("eth1=10.0.0.2"),
            "{e}"
        );
        let cfg = TcpConfig {
            socket_ifname: IfnameFilter::parse("^=eth0,eth1,lo,docker0"),
            ..TcpConfig::default()
        };
        let e = select_ip(&cfg, &ifs(), None).unwrap_err().to_string();
        assert!(
            e.contains("\"^=eth0,eth1,lo,docker0\""),
            "the value as given: {e}"
        );
    }
}

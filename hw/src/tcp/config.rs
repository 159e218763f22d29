//! TCP transport settings, read from HCCL's environment variables.
//!
//! | variable | meaning here | HCCL's meaning and default |
//! | --- | --- | --- |
//! | `HCCL_CONNECT_TIMEOUT` | seconds the bootstrap (root gather, peer mesh) may take | socket link-setup timeout, default 120 s (CANN env var reference) |
//! | `HCCL_EXEC_TIMEOUT` | seconds one collective may wait for a peer; `0` = never | device sync wait during execution, default 1836 s on current CANN (Atlas A2/A3: 0 = no timeout) |
//! | `HCCL_IF_IP` | host IP to listen on and to announce to peers | host NIC IP used to reach the root node |
//! | `HCCL_SOCKET_IFNAME` | interface filter when `HCCL_IF_IP` is unset | same syntax: `eth,enp` prefixes, `^eth` excluded prefixes, `=eth0` exact names, `^=eth0` excluded names |
//! | `HCCL_IF_BASE_PORT` | first of 16 host ports, an integer in `0..=65520`: the root listens on it, ranks take the next free of the other 15; `0` or unset = the OS chooses | host NIC base port, an integer in `1024..=65520` (older CANN: `0..=65520`), 16 ports used, default 60000 |
//! | `HCCL_BUFFSIZE` | MB of early-arriving (unmatched) message bytes buffered per peer | size of the CCL staging buffer, default 200 MB |
//! | `HCCL_INTRA_CMA_ENABLE` | `1` (default): peers in processes on this host read sent regions straight out of this process's op buffers (`process_vm_readv`, see [`super::cma`]); `0`: every byte goes through the socket | ours, named by analogy with HCCL's `HCCL_INTRA_PCIE_ENABLE` / `HCCL_INTRA_ROCE_ENABLE` (which pick the intra-server link) |
//!
//! Deviations from HCCL, on purpose: timeouts accept decimal seconds and any
//! positive value (HCCL clamps `HCCL_CONNECT_TIMEOUT` to [120, 7200]) so
//! tests can use short ones; `HCCL_IF_BASE_PORT` unset means "OS chooses"
//! rather than 60000, so several communicators and test processes can share
//! a host without configuration.

use std::net::IpAddr;
use std::time::Duration;

use super::error::TcpError;

/// HCCL's default bootstrap timeout (`HCCL_CONNECT_TIMEOUT`), seconds.
pub const DEFAULT_CONNECT_TIMEOUT_S: f64 = 120.0;
/// HCCL's default execution timeout (`HCCL_EXEC_TIMEOUT`) on current CANN
/// releases (Atlas A2/A3 and training series: 1836 s), seconds.
pub const DEFAULT_EXEC_TIMEOUT_S: f64 = 1836.0;
/// HCCL's default `HCCL_BUFFSIZE`, MB (2^20 bytes).
pub const DEFAULT_BUFFSIZE_MB: u64 = 200;
/// Number of ports HCCL reserves from `HCCL_IF_BASE_PORT`.
pub const PORT_RANGE: u16 = 16;
/// Largest `HCCL_IF_BASE_PORT`: its [`PORT_RANGE`] ports end at 65535
/// (HCCL's documented upper bound, 65520).
pub const MAX_BASE_PORT: u16 = u16::MAX - (PORT_RANGE - 1);
/// What `HCCL_IF_BASE_PORT` accepts, for its error message.
const BASE_PORT_ACCEPTED: &str =
    "not accepted; write a port number in 0..=65520: the first of the \
     16 ports used (HCCL accepts 1024..=65520 and no words such as \"auto\"); 0 or unset lets \
     the OS choose";

/// An `HCCL_SOCKET_IFNAME` filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfnameFilter {
    /// True for `^...`: the names are excluded instead of selected.
    pub exclude: bool,
    /// True for `=...`: names match exactly instead of by prefix.
    pub exact: bool,
    /// The comma-separated names or prefixes, in the order given.
    pub names: Vec<String>,
}

impl IfnameFilter {
    /// Parses HCCL's syntax: `eth,enp`, `^eth`, `=eth0,enp0`, `^=eth0`.
    pub fn parse(s: &str) -> Option<IfnameFilter> {
        let (exclude, rest) = match s.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let names: Vec<String> = rest
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        (!names.is_empty()).then_some(IfnameFilter {
            exclude,
            exact,
            names,
        })
    }

    /// Whether interface `name` passes the filter.
    pub fn accepts(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

/// Settings of the TCP transport. See the module docs for the variables.
#[derive(Clone, Debug, PartialEq)]
pub struct TcpConfig {
    /// Bootstrap timeout (`HCCL_CONNECT_TIMEOUT`).
    pub connect_timeout: Duration,
    /// Per-op timeout (`HCCL_EXEC_TIMEOUT`); `None` = wait forever.
    pub exec_timeout: Option<Duration>,
    /// `HCCL_IF_IP`.
    pub if_ip: Option<IpAddr>,
    /// `HCCL_SOCKET_IFNAME`.
    pub socket_ifname: Option<IfnameFilter>,
    /// `HCCL_IF_BASE_PORT`; 0 = the OS chooses.
    pub base_port: u16,
    /// Bytes of not-yet-matched incoming data buffered per peer (`HCCL_BUFFSIZE`).
    pub unexpected_bound: u64,
    /// Offer and accept the same-host cross-memory path
    /// (`HCCL_INTRA_CMA_ENABLE`, default on; Linux only).
    pub intra_cma: bool,
    /// Carry every frame between processes on the same host through
    /// shared-memory rings (default on; `HCCL_SHM_DISABLE=1` turns it
    /// off, after NCCL's `NCCL_SHM_DISABLE`; Linux only).
    pub shm: bool,
}

impl TcpConfig {
    /// The variable that chooses this host's listen IP, for errors about
    /// it: `HCCL_IF_IP` when set, else `HCCL_SOCKET_IFNAME` when set, else
    /// `HCCL_IF_IP` (the one to set).
    pub fn ip_var(&self) -> &'static str {
        if self.if_ip.is_none() && self.socket_ifname.is_some() {
            "HCCL_SOCKET_IFNAME"
        } else {
            "HCCL_IF_IP"
        }
    }
}

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig {
            connect_timeout: Duration::from_secs_f64(DEFAULT_CONNECT_TIMEOUT_S),
            exec_timeout: Some(Duration::from_secs_f64(DEFAULT_EXEC_TIMEOUT_S)),
            if_ip: None,
            socket_ifname: None,
            base_port: 0,
            unexpected_bound: DEFAULT_BUFFSIZE_MB << 20,
            intra_cma: true,
            shm: true,
        }
    }
}

fn bad(var: &'static str, value: &str, reason: &str) -> TcpError {
    TcpError::Config {
        var,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Seconds in `[0, 1e9]`, or in `(0, 1e9]` when `zero_ok` is false.
fn seconds(var: &'static str, v: &str, zero_ok: bool) -> Result<f64, TcpError> {
    let s: f64 = v
        .trim()
        .parse()
        .map_err(|_| bad(var, v, "not a number of seconds"))?;
    if !s.is_finite() || !(0.0..=1e9).contains(&s) || (s == 0.0 && !zero_ok) {
        let range = if zero_ok { "[0, 1e9]" } else { "(0, 1e9]" };
        return Err(bad(var, v, &format!("seconds must be in {range}")));
    }
    Ok(s)
}

impl TcpConfig {
    /// Reads the process environment.
    ///
    /// # Errors
    /// [`TcpError::Config`] naming the variable and value that do not parse.
    pub fn from_env() -> Result<TcpConfig, TcpError> {
        TcpConfig::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads settings through `get` (a variable name to its value), for tests.
    ///
    /// # Errors
    /// [`TcpError::Config`] naming the variable and value that do not parse.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<TcpConfig, TcpError> {
        let mut c = TcpConfig::default();
        if let Some(v) = get("HCCL_CONNECT_TIMEOUT") {
            let s = seconds("HCCL_CONNECT_TIMEOUT", &v, false)?;
            c.connect_timeout = Duration::from_secs_f64(s);
        }
        if let Some(v) = get("HCCL_EXEC_TIMEOUT") {
            let s = seconds("HCCL_EXEC_TIMEOUT", &v, true)?;
            c.exec_timeout = (s > 0.0).then(|| Duration::from_secs_f64(s));
        }
        if let Some(v) = get("HCCL_IF_IP").filter(|v| !v.trim().is_empty()) {
            c.if_ip = Some(
                v.trim()
                    .parse()
                    .map_err(|_| bad("HCCL_IF_IP", &v, "not an IPv4 or IPv6 address"))?,
            );
        }
        if let Some(v) = get("HCCL_SOCKET_IFNAME").filter(|v| !v.trim().is_empty()) {
            c.socket_ifname = Some(
                IfnameFilter::parse(&v)
                    .ok_or_else(|| bad("HCCL_SOCKET_IFNAME", &v, "no interface name given"))?,
            );
        }
        if let Some(v) = get("HCCL_IF_BASE_PORT").filter(|v| !v.trim().is_empty()) {
            // HCCL takes an integer only (no "auto"): 1024..=65520 on
            // current CANN (env var reference, HCCL_IF_BASE_PORT; older
            // releases 0..=65520). 0 is ours: the OS chooses.
            let p = v
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p <= MAX_BASE_PORT)
                .ok_or_else(|| bad("HCCL_IF_BASE_PORT", &v, BASE_PORT_ACCEPTED))?;
            c.base_port = p;
        }
        if let Some(v) = get("HCCL_BUFFSIZE").filter(|v| !v.trim().is_empty()) {
            let mb: u64 = v
                .trim()
                .parse()
                .map_err(|_| bad("HCCL_BUFFSIZE", &v, "not a whole number of MB"))?;
            if mb == 0 || mb > (1 << 20) {
                return Err(bad("HCCL_BUFFSIZE", &v, "must be in 1..=1048576 MB"));
            }
            c.unexpected_bound = mb << 20;
        }
        if let Some(v) = get("HCCL_INTRA_CMA_ENABLE").filter(|v| !v.trim().is_empty()) {
            c.intra_cma = match v.trim() {
                "1" => true,
                "0" => false,
                _ => {
                    return Err(bad(
                        "HCCL_INTRA_CMA_ENABLE",
                        &v,
                        "must be 0 (every byte through the socket) or 1 (same-host peers read send pieces directly)",
                    ))
                }
            };
        }
        if let Some(v) = get("HCCL_SHM_DISABLE").filter(|v| !v.trim().is_empty()) {
            c.shm = match v.trim() {
                "0" => true,
                "1" => false,
                _ => {
                    return Err(bad(
                        "HCCL_SHM_DISABLE",
                        &v,
                        "must be 0 (same-host peers talk through shared-memory rings) or 1 (through the socket)",
                    ))
                }
            };
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        move |k| v.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone())
    }

    #[test]
    fn defaults_are_hccls() {
        let c = TcpConfig::from_lookup(env(&[])).unwrap();
        assert_eq!(c.connect_timeout, Duration::from_secs(120));
        assert_eq!(c.exec_timeout, Some(Duration::from_secs(1836)));
        assert_eq!(c.unexpected_bound, 200 << 20);
        assert_eq!(c.base_port, 0);
        assert!(c.intra_cma);
    }

    #[test]
    fn shm_disable_takes_0_or_1_only() {
        assert!(TcpConfig::from_lookup(env(&[])).unwrap().shm);
        let off = TcpConfig::from_lookup(env(&[("HCCL_SHM_DISABLE", "1")])).unwrap();
        assert!(!off.shm);
        let on = TcpConfig::from_lookup(env(&[("HCCL_SHM_DISABLE", " 0 ")])).unwrap();
        assert!(on.shm);
        let e = TcpConfig::from_lookup(env(&[("HCCL_SHM_DISABLE", "yes")])).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("HCCL_SHM_DISABLE") && e.contains("yes"), "{e}");
    }

    #[test]
    fn intra_cma_switch_takes_0_or_1_only() {
        let off = TcpConfig::from_lookup(env(&[("HCCL_INTRA_CMA_ENABLE", "0")])).unwrap();
        assert!(!off.intra_cma);
        let on = TcpConfig::from_lookup(env(&[("HCCL_INTRA_CMA_ENABLE", " 1 ")])).unwrap();
        assert!(on.intra_cma);
        for bad in ["yes", "2", "true", "-1"] {
            let e = TcpConfig::from_lookup(env(&[("HCCL_INTRA_CMA_ENABLE", bad)])).unwrap_err();
            let s = e.to_string();
            assert!(
                s.contains("HCCL_INTRA_CMA_ENABLE") && s.contains(bad),
                "{s}"
            );
            assert!(s.contains("must be 0"), "{s}");
        }
    }

    #[test]
    fn parses_values_and_names_bad_ones() {
        let c = TcpConfig::from_lookup(env(&[
            ("HCCL_CONNECT_TIMEOUT", "2.5"),
            ("HCCL_EXEC_TIMEOUT", "0"),
            ("HCCL_IF_IP", "127.0.0.1"),
            ("HCCL_IF_BASE_PORT", "50000"),
        ]))
        .unwrap();
        assert_eq!(c.connect_timeout, Duration::from_millis(2500));
        assert_eq!(c.exec_timeout, None, "0 = never time out");
        assert_eq!(c.if_ip, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(c.base_port, 50000);
        let e = TcpConfig::from_lookup(env(&[("HCCL_IF_IP", "10.0.0")])).unwrap_err();
        assert!(e.to_string().contains("HCCL_IF_IP"), "{e}");
        assert!(e.to_string().contains("10.0.0"), "{e}");
        for v in ["65521", "65530", "auto", "-1", "60000-60015"] {
            let e = TcpConfig::from_lookup(env(&[("HCCL_IF_BASE_PORT", v)])).unwrap_err();
            let s = e.to_string();
            assert!(
                s.contains("HCCL_IF_BASE_PORT") && s.contains(v) && s.contains("0..=65520"),
                "{v}: {s}"
            );
            assert!(s.contains("OS choose"), "{v}: {s}");
        }
        // HCCL's upper bound: 65520 + 15 = 65535.
        let c = TcpConfig::from_lookup(env(&[("HCCL_IF_BASE_PORT", "65520")])).unwrap();
        assert_eq!(c.base_port, 65520);
        assert!(TcpConfig::from_lookup(env(&[("HCCL_CONNECT_TIMEOUT", "-1")])).is_err());
        for v in ["0", "-3", "nan"] {
            let e = TcpConfig::from_lookup(env(&[("HCCL_CONNECT_TIMEOUT", v)])).unwrap_err();
            assert!(
                e.to_string().contains("seconds must be in (0, 1e9]"),
                "{v}: {e}"
            );
        }
    }

    #[test]
    fn ifname_filter_follows_hccl_syntax() {
        let f = IfnameFilter::parse("eth,enp").unwrap();
        assert!(f.accepts("eth1") && f.accepts("enp0s3") && !f.accepts("lo"));
        let f = IfnameFilter::parse("^eth").unwrap();
        assert!(!f.accepts("eth0") && f.accepts("lo"));
        let f = IfnameFilter::parse("=eth0,enp0").unwrap();
        assert!(f.accepts("eth0") && !f.accepts("eth01"));
        let f = IfnameFilter::parse("^=eth0").unwrap();
        assert!(!f.accepts("eth0") && f.accepts("eth01"));
        assert_eq!(IfnameFilter::parse("^="), None);
    }
}

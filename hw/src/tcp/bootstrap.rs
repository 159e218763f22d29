//! A rank's side of the bootstrap: join the root, learn the table, then
//! build one TCP connection per peer pair (the lower rank connects to the
//! higher one and says hello; the higher one checks session, magic, version
//! and ranks before accepting it as that peer).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout_at, Instant};

use super::config::{TcpConfig, PORT_RANGE};
use super::error::TcpError;
use super::root::{bind, fallback_ip, RootInfo};
use super::wire::{self, CpuSet, CtrlKind, Join, RejectCode, SessionId, TableEntry, WireError};

/// Extra time a rank waits past its own `HCCL_CONNECT_TIMEOUT` for the
/// root's verdict, so that the root (whose clock started first) decides.
const VERDICT_MARGIN: Duration = Duration::from_secs(2);
/// Pause between attempts to reach a root that is not listening yet.
const RETRY: Duration = Duration::from_millis(50);

/// A bootstrapped rank: its connection to every peer.
#[derive(Debug)]
pub(crate) struct Mesh {
    /// Session id (checked in every frame).
    pub(crate) session: SessionId,
    /// `streams[p]` is the connection to rank `p` (`None` for this rank).
    pub(crate) streams: Vec<Option<TcpStream>>,
    /// Where this rank listened for its peers.
    pub(crate) local_addr: SocketAddr,
    /// Distinct IP addresses among all ranks' listeners (the root's
    /// address table, the same on every rank): the number of hosts, as
    /// far as addresses tell.
    pub(crate) hosts: u32,
    /// Whether on every host the ranks are no more than its CPUs (the
    /// union of the CPU sets its ranks reported); the same on every rank.
    pub(crate) ranks_fit_cpus: bool,
    /// The CPUs of this rank's host, as [`Mesh::ranks_fit_cpus`] counts
    /// them (the table's entry of this rank).
    pub(crate) host_cpus: u32,
}

/// The CPUs this process may run on, as it reports them to the root: its
/// affinity mask on Linux, else (or if that cannot be read) CPUs 0 to
/// `available_parallelism - 1`.
pub(crate) fn cpus() -> CpuSet {
    #[cfg(target_os = "linux")]
    if let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        let ids = (0..nix::sched::CpuSet::count()).filter(|&i| set.is_set(i).unwrap_or(false));
        let set = CpuSet::from_cpus(ids.filter_map(|i| u32::try_from(i).ok()));
        if set.count() > 0 {
            return set;
        }
    }
    let n = std::thread::available_parallelism().map_or(1, |c| c.get());
    CpuSet::first(n.try_into().unwrap_or(u32::MAX).max(1))
}

/// [`Mesh::ranks_fit_cpus`] of a table: hosts are listener IPs (the root
/// gives every entry of a host the same count; the least is taken).
pub(crate) fn ranks_fit_cpus(table: &[TableEntry]) -> bool {
    let mut hosts: std::collections::BTreeMap<std::net::IpAddr, (u32, u32)> = Default::default();
    for e in table {
        let (ranks, cpus) = hosts.entry(e.data_addr.ip()).or_insert((0, u32::MAX));
        *ranks += 1;
        *cpus = (*cpus).min(e.cpus);
    }
    hosts.values().all(|(ranks, cpus)| ranks <= cpus)
}

/// Binds the data listener: on `ip`, port chosen by the OS when
/// `HCCL_IF_BASE_PORT` is 0, else the first free of base+1 ..= base+15.
pub(crate) fn bind_data_listener(
    cfg: &TcpConfig,
    ip: std::net::IpAddr,
) -> Result<std::net::TcpListener, TcpError> {
    let ip_var = cfg.ip_var();
    if cfg.base_port == 0 {
        return bind(SocketAddr::new(ip, 0), "HCCL_IF_BASE_PORT", ip_var);
    }
    let mut last = None;
    // Inclusive, in this order: base + 16 overflows at HCCL's largest base.
    for p in cfg.base_port + 1..=cfg.base_port + (PORT_RANGE - 1) {
        match bind(SocketAddr::new(ip, p), "HCCL_IF_BASE_PORT", ip_var) {
            Ok(l) => return Ok(l),
            Err(e @ TcpError::Bind { .. }) => last = Some(e),
            // Another port will not help.
            Err(e) => return Err(e),
        }
    }
    Err(match last {
        Some(TcpError::Bind { reason, .. }) => TcpError::Bind {
            addr: SocketAddr::new(ip, cfg.base_port + 1),
            var: "HCCL_IF_BASE_PORT",
            reason: format!(
                "ports {}..={} are all taken (last error: {reason})",
                cfg.base_port + 1,
                cfg.base_port + (PORT_RANGE - 1)
            ),
        },
        Some(e) => e,
        None => TcpError::InvalidArgument("empty port range".into()),
    })
}

async fn connect_root(
    root: &RootInfo,
    rank: u32,
    deadline: Instant,
    secs: f64,
) -> Result<TcpStream, TcpError> {
    let mut last = String::from("no attempt");
    loop {
        match timeout_at(deadline, TcpStream::connect(root.addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => {}
        }
        if Instant::now() + RETRY >= deadline {
            return Err(TcpError::RootUnreachable {
                root: root.addr,
                rank,
                secs,
                reason: last,
            });
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Joins the root and returns the table of data addresses.
async fn join_root(
    cfg: &TcpConfig,
    root: &RootInfo,
    nranks: u32,
    rank: u32,
    data_addr: SocketAddr,
) -> Result<Vec<TableEntry>, TcpError> {
    let secs = cfg.connect_timeout.as_secs_f64();
    let deadline = Instant::now() + cfg.connect_timeout;
    let mut s = connect_root(root, rank, deadline, secs).await?;
    let _ = s.set_nodelay(true);
    let join = Join {
        nranks,
        rank,
        data_addr,
        cpus: cpus(),
    };
    let not_a_root = |what: String| TcpError::NotARoot {
        root: root.addr,
        rank,
        what,
    };
    // The listener accepted, so a failed write means it closed at once.
    wire::write_ctrl(&mut s, CtrlKind::Join, root.session, &join.encode())
        .await
        .map_err(|e| {
            not_a_root(format!(
                "accepted the connection and closed it before this rank's join was sent ({e})"
            ))
        })?;
    let from = format!("the root at {}", root.addr);
    let reply = timeout_at(
        deadline + VERDICT_MARGIN,
        wire::read_ctrl(&mut s, Some(root.session)),
    )
    .await;
    let (h, body) = match reply {
        // A root always answers by its deadline (the table or a verdict).
        Err(_) => {
            return Err(not_a_root(format!(
                "accepted the connection but sent no answer within {secs} s (HCCL_CONNECT_TIMEOUT) \
                 plus the {} s a rank gives the root's verdict",
                VERDICT_MARGIN.as_secs_f64()
            )))
        }
        Ok(Err(Err(e))) => {
            return Err(not_a_root(format!(
                "closed the connection without answering this rank's join ({e})"
            )))
        }
        Ok(Err(Ok(error @ (WireError::BadMagic(_) | WireError::BadKind(_))))) => {
            return Err(not_a_root(format!(
                "answered in another protocol ({error})"
            )))
        }
        Ok(Err(Ok(error))) => return Err(TcpError::Protocol { from, error }),
        Ok(Ok(x)) => x,
    };
    match h.kind {
        CtrlKind::Table => {
            let table = wire::decode_table(&body).map_err(|error| TcpError::Protocol {
                from: from.clone(),
                error,
            })?;
            if table.len() != nranks as usize {
                return Err(TcpError::Protocol {
                    from,
                    error: wire::WireError::Malformed("table of the wrong size"),
                });
            }
            Ok(table)
        }
        CtrlKind::Reject => {
            let (code, reason) =
                wire::decode_reject(&body).map_err(|error| TcpError::Protocol { from, error })?;
            Err(match code {
                RejectCode::Timeout => parse_timeout(&reason, secs, nranks),
                RejectCode::Expired => TcpError::SessionExpired {
                    root: root.addr,
                    rank,
                    reason,
                },
                RejectCode::Refused => TcpError::Rejected {
                    root: root.addr,
                    rank,
                    reason,
                },
                RejectCode::RankLeft => TcpError::BootstrapRankLeft {
                    root: root.addr,
                    rank,
                    reason,
                },
            })
        }
        _ => Err(TcpError::Protocol {
            from,
            error: wire::WireError::Malformed("unexpected reply to a join"),
        }),
    }
}

/// Rebuilds the root's timeout verdict ("... k of n ranks connected, missing [a, b]").
fn parse_timeout(reason: &str, secs: f64, nranks: u32) -> TcpError {
    let joined = reason
        .split(": ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|k| k.parse().ok())
        .unwrap_or(0);
    let missing = reason
        .rsplit_once('[')
        .and_then(|(_, m)| m.strip_suffix(']'))
        .map(|m| m.split(", ").filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    TcpError::BootstrapTimeout {
        secs,
        joined,
        nranks,
        missing,
    }
}

/// Accepts hellos from every lower rank, ignoring strangers.
async fn accept_lower(
    listener: &TcpListener,
    rank: u32,
    session: SessionId,
    deadline: Instant,
    streams: &mut [Option<TcpStream>],
) -> Result<(), TcpError> {
    let mut pending = rank as usize;
    while pending > 0 {
        let (mut s, addr) = match timeout_at(deadline, listener.accept()).await {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => return Err(TcpError::io("accepting a peer", e)),
            Err(_) => {
                let missing: Vec<usize> = (0..rank as usize)
                    .filter(|&p| streams[p].is_none())
                    .collect();
                return Err(TcpError::Io {
                    what: format!("rank {rank}: peer connections"),
                    reason: format!(
                        "ranks {missing:?} did not connect within HCCL_CONNECT_TIMEOUT"
                    ),
                });
            }
        };
        let hello = tokio::time::timeout_at(deadline, wire::read_ctrl(&mut s, Some(session))).await;
        let from = match hello {
            Ok(Ok((h, body))) if h.kind == CtrlKind::Hello => match wire::decode_hello(&body) {
                Ok((from, to)) if to == rank && from < rank && streams[from as usize].is_none() => {
                    from
                }
                Ok((from, to)) => {
                    tracing::warn!("hccl rank {rank}: closing connection from {addr}: hello from rank {from} to rank {to} is not expected here");
                    continue;
                }
                Err(e) => {
                    tracing::warn!("hccl rank {rank}: closing connection from {addr}: {e}");
                    continue;
                }
            },
            Ok(Ok((h, _))) => {
                tracing::warn!(
                    "hccl rank {rank}: closing connection from {addr}: {:?} instead of a hello",
                    h.kind
                );
                continue;
            }
            Ok(Err(Ok(e))) => {
                tracing::warn!("hccl rank {rank}: closing connection from {addr}: {e}");
                continue;
            }
            Ok(Err(Err(e))) => {
                tracing::warn!("hccl rank {rank}: closing connection from {addr}: {e}");
                continue;
            }
            Err(_) => continue,
        };
        if wire::write_ctrl(&mut s, CtrlKind::HelloAck, session, &[])
            .await
            .is_err()
        {
            continue;
        }
        let _ = s.set_nodelay(true);
        streams[from as usize] = Some(s);
        pending -= 1;
    }
    Ok(())
}

async fn connect_higher(
    table: &[SocketAddr],
    rank: u32,
    peer: u32,
    session: SessionId,
    deadline: Instant,
) -> Result<TcpStream, TcpError> {
    let addr = table[peer as usize];
    let err = |reason: String| TcpError::PeerConnect {
        rank,
        peer,
        addr,
        reason,
    };
    let mut s = match timeout_at(deadline, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(err(e.to_string())),
        Err(_) => return Err(err("timed out (HCCL_CONNECT_TIMEOUT)".into())),
    };
    let _ = s.set_nodelay(true);
    wire::write_ctrl(
        &mut s,
        CtrlKind::Hello,
        session,
        &wire::encode_hello(rank, peer),
    )
    .await
    .map_err(|e| err(e.to_string()))?;
    match timeout_at(deadline, wire::read_ctrl(&mut s, Some(session))).await {
        Ok(Ok((h, _))) if h.kind == CtrlKind::HelloAck => Ok(s),
        Ok(Ok((h, _))) => Err(err(format!("{:?} instead of a hello ack", h.kind))),
        Ok(Err(Ok(e))) => Err(err(e.to_string())),
        Ok(Err(Err(e))) => Err(err(e.to_string())),
        Err(_) => Err(err("no hello ack within HCCL_CONNECT_TIMEOUT".into())),
    }
}

/// Runs the whole bootstrap of one rank. Must run inside a tokio runtime.
///
/// # Errors
/// Bind, root, timeout and peer connection errors (see [`TcpError`]).
pub(crate) async fn bootstrap(
    cfg: &TcpConfig,
    root: &RootInfo,
    nranks: u32,
    rank: u32,
) -> Result<Mesh, TcpError> {
    if nranks == 0 || rank >= nranks {
        return Err(TcpError::InvalidArgument(format!(
            "rank {rank} is out of range for {nranks} ranks"
        )));
    }
    // A root that serves has its real port in its RootInfo; port 0 here
    // means a launcher passed MASTER_PORT=0 on, which nobody can connect to.
    if root.addr.port() == 0 {
        return Err(TcpError::RootPortZero {
            root: root.addr,
            rank,
        });
    }
    let ip = super::iface::select_ip(cfg, &super::iface::host_interfaces()?, fallback_ip(root))?;
    let std_listener = bind_data_listener(cfg, ip)?;
    let data_addr = std_listener
        .local_addr()
        .map_err(|e| TcpError::io("data listener address", e))?;
    let listener =
        TcpListener::from_std(std_listener).map_err(|e| TcpError::io("data listener", e))?;
    let joined = join_root(cfg, root, nranks, rank, data_addr).await;
    // A rank of the root's own process may end that process as soon as it
    // returns (a failed bootstrap), and the root with it: first let the
    // root deliver its answer to every other rank.
    super::root::wait_answered(root).await;
    let entries = joined?;
    let table: Vec<SocketAddr> = entries.iter().map(|e| e.data_addr).collect();
    let deadline = Instant::now() + cfg.connect_timeout;
    let mut streams: Vec<Option<TcpStream>> = (0..nranks).map(|_| None).collect();
    let session = root.session;
    let higher = async {
        let mut out = Vec::new();
        for p in rank + 1..nranks {
            out.push((p, connect_higher(&table, rank, p, session, deadline).await?));
        }
        Ok::<_, TcpError>(out)
    };
    let (lower, higher) = tokio::join!(
        accept_lower(&listener, rank, session, deadline, &mut streams),
        higher
    );
    lower?;
    for (p, s) in higher? {
        streams[p as usize] = Some(s);
    }
    let hosts = table
        .iter()
        .map(|a| a.ip())
        .collect::<std::collections::BTreeSet<_>>()
        .len() as u32;
    Ok(Mesh {
        session,
        streams,
        local_addr: data_addr,
        hosts,
        ranks_fit_cpus: ranks_fit_cpus(&entries),
        host_cpus: entries.get(rank as usize).map_or(1, |e| e.cpus),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_fit_cpus_per_host_with_the_least_cpus_reported() {
        let e = |ip: &str, cpus| TableEntry {
            data_addr: SocketAddr::new(ip.parse().unwrap(), 1),
            cpus,
        };
        assert!(ranks_fit_cpus(&[e("10.0.0.1", 2), e("10.0.0.1", 2)]));
        assert!(!ranks_fit_cpus(&[e("10.0.0.1", 2), e("10.0.0.1", 1)]));
        assert!(!ranks_fit_cpus(&[
            e("10.0.0.1", 2),
            e("10.0.0.1", 2),
            e("10.0.0.1", 2)
        ]));
        // Two hosts of two ranks each on 2 CPUs fit; a third rank on one
        // of them does not.
        let two = [
            e("10.0.0.1", 2),
            e("10.0.0.2", 2),
            e("10.0.0.1", 2),
            e("10.0.0.2", 2),
        ];
        assert!(ranks_fit_cpus(&two));
        let mut three = two.to_vec();
        three.push(e("10.0.0.2", 64));
        assert!(!ranks_fit_cpus(&three));
    }

    #[test]
    fn a_rank_told_the_root_is_on_port_0_fails_at_once() {
        // Were the port tried, this would retry for HCCL_CONNECT_TIMEOUT
        // and end in RootUnreachable, not RootPortZero.
        let cfg = TcpConfig {
            if_ip: Some("127.0.0.1".parse().unwrap()),
            connect_timeout: std::time::Duration::from_secs(2),
            ..TcpConfig::default()
        };
        let root = RootInfo {
            addr: "127.0.0.1:0".parse().unwrap(),
            session: 7,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let e = match rt.block_on(bootstrap(&cfg, &root, 2, 1)) {
            Err(e) => e,
            Ok(_) => panic!("a root on port 0 cannot be joined"),
        };
        assert!(matches!(e, TcpError::RootPortZero { rank: 1, .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("the root's port is 0 (127.0.0.1:0)"),
            "{text}"
        );
        assert!(
            text.contains("set MASTER_PORT to the port rank 0 listens on"),
            "{text}"
        );
    }

    /// HCCL's largest base port: its 15 data ports end at 65535, and the
    /// range arithmetic must not overflow.
    #[test]
    fn the_largest_base_port_binds_its_last_ports() {
        let cfg = TcpConfig {
            base_port: super::super::config::MAX_BASE_PORT,
            ..TcpConfig::default()
        };
        match bind_data_listener(&cfg, "127.0.0.1".parse().unwrap()) {
            Ok(l) => assert!(l.local_addr().unwrap().port() > cfg.base_port),
            Err(e) => assert!(e.to_string().contains("65521..=65535"), "{e}"),
        }
    }

    #[test]
    fn timeout_verdict_is_parsed_back() {
        let e = parse_timeout(
            "bootstrap timed out after 3 s: 2 of 4 ranks connected, missing [1, 3]",
            3.0,
            4,
        );
        assert_eq!(
            e.to_string(),
            "bootstrap timed out after 3 s: 2 of 4 ranks connected, missing [1, 3]; start the missing ranks or raise HCCL_CONNECT_TIMEOUT"
        );
    }
}

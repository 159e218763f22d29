//! The bootstrap root: HCCL's `HcclGetRootInfo`.
//!
//! [`RootInfo::create`] opens a listener and starts a small server thread
//! that gathers every rank's data address and broadcasts the table:
//!
//! 1. a rank connects and sends a join (magic, version, session id, world
//!    size, rank, data address). A connection with another magic or version
//!    is closed with a log line; another session id gets a refusal and is
//!    closed; neither ever counts as a rank.
//! 2. when all `nranks` ranks have joined, every rank gets the table;
//! 3. if `HCCL_CONNECT_TIMEOUT` passes first, every waiting rank gets
//!    "bootstrap timed out after N s: k of n ranks connected, missing [...]"
//!    at the same moment (the root's clock decides), and for another
//!    `HCCL_CONNECT_TIMEOUT` a late rank gets "session expired".

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr, TcpListener as StdListener};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::{timeout_at, Instant};

use super::config::TcpConfig;
use super::error::TcpError;
use super::wire::{self, CpuSet, CtrlKind, Join, RejectCode, SessionId, TableEntry, WireError};

/// Grace period after a successful bootstrap during which late or extra
/// ranks still get a clear "session expired" answer.
const GRACE_AFTER_SUCCESS: Duration = Duration::from_secs(5);
/// How long one connection may take to send its join.
const JOIN_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Length of [`RootInfo::to_bytes`].
pub const ROOT_INFO_LEN: usize = 4 + 2 + 16 + 19;

/// Where the root listens and the session id: the opaque, serializable blob
/// every rank needs (HCCL's `HcclRootInfo`). Send it to the other ranks any
/// way you like: [`RootInfo::to_bytes`], its `Display` string, or serde.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RootInfo {
    /// The root's listening address.
    pub addr: SocketAddr,
    /// A random 128-bit session id shared by the ranks of this bootstrap.
    pub session: SessionId,
}

/// Error of parsing a [`RootInfo`] blob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an hccl-rs root info: {0}")]
pub struct RootInfoParseError(String);

impl RootInfo {
    /// HCCL's `HcclGetRootInfo`: [`RootInfo::create`] with the settings of
    /// the environment ([`TcpConfig::from_env`]).
    ///
    /// # Errors
    /// Bad variables; [`TcpError::Bind`] at once if the port is in use.
    pub fn new() -> Result<RootInfo, TcpError> {
        RootInfo::create(&TcpConfig::from_env()?)
    }

    /// Starts a root for the next bootstrap: listens on the IP chosen by
    /// `HCCL_IF_IP` / `HCCL_SOCKET_IFNAME` (see `tcp::iface`) and on
    /// `HCCL_IF_BASE_PORT` (0 = the OS chooses), then serves in a background
    /// thread until the bootstrap completes or times out.
    ///
    /// # Errors
    /// [`TcpError::Bind`] at once if the port is in use; interface errors.
    pub fn create(cfg: &TcpConfig) -> Result<RootInfo, TcpError> {
        let ip = super::iface::select_ip(cfg, &super::iface::host_interfaces()?, None)?;
        RootInfo::create_at(cfg, SocketAddr::new(ip, cfg.base_port), "HCCL_IF_BASE_PORT")
    }

    /// Like [`RootInfo::create`] on an explicit address; `var` names the
    /// variable that chose its port, for the port-in-use error
    /// (`MASTER_PORT` under torchrun-style launchers).
    ///
    /// # Errors
    /// [`TcpError::Bind`] if the address cannot be bound.
    pub fn create_at(
        cfg: &TcpConfig,
        addr: SocketAddr,
        var: &'static str,
    ) -> Result<RootInfo, TcpError> {
        RootInfo::serve(cfg, addr, rand::random::<u128>(), var)
    }

    /// Like [`RootInfo::create_at`] with a session id every rank already
    /// knows (rank-table bootstraps derive it from the table's bytes).
    ///
    /// # Errors
    /// [`TcpError::Bind`] if the address cannot be bound.
    pub fn serve(
        cfg: &TcpConfig,
        addr: SocketAddr,
        session: SessionId,
        var: &'static str,
    ) -> Result<RootInfo, TcpError> {
        // Under a launcher MASTER_ADDR chose the IP with MASTER_PORT.
        let ip_var = if var == "MASTER_PORT" {
            "MASTER_ADDR"
        } else {
            cfg.ip_var()
        };
        let listener = bind(addr, var, ip_var).map_err(|e| match e {
            TcpError::Bind { addr, var, .. } if holds_a_root(addr) => {
                TcpError::RootTaken { addr, var }
            }
            e => e,
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| TcpError::io("root listener address", e))?;
        let info = RootInfo {
            addr: local,
            session,
        };
        let timeout = cfg.connect_timeout;
        let (answered, rx) = watch::channel(false);
        answering().insert((local, session), rx);
        std::thread::Builder::new()
            .name(format!("hccl-root-{}", local.port()))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match rt {
                    Ok(rt) => rt.block_on(serve(listener, info, timeout, answered)),
                    Err(e) => tracing::error!("hccl root {local}: cannot start runtime: {e}"),
                }
                answering().remove(&(local, session));
            })
            .map_err(|e| {
                answering().remove(&(local, session));
                TcpError::io("starting the root thread", e)
            })?;
        Ok(info)
    }

    /// The blob as bytes: magic, version, session id, address.
    pub fn to_bytes(&self) -> [u8; ROOT_INFO_LEN] {
        let mut v = Vec::with_capacity(ROOT_INFO_LEN);
        v.extend_from_slice(&wire::MAGIC);
        v.extend_from_slice(&wire::VERSION.to_le_bytes());
        v.extend_from_slice(&self.session.to_le_bytes());
        wire::encode_addr(&self.addr, &mut v);
        let mut out = [0u8; ROOT_INFO_LEN];
        out.copy_from_slice(&v);
        out
    }

    /// Parses [`RootInfo::to_bytes`].
    ///
    /// # Errors
    /// [`RootInfoParseError`] for a wrong length, magic or version.
    pub fn from_bytes(b: &[u8]) -> Result<RootInfo, RootInfoParseError> {
        if b.len() != ROOT_INFO_LEN {
            return Err(RootInfoParseError(format!(
                "{} bytes, expected {ROOT_INFO_LEN}",
                b.len()
            )));
        }
        if b[0..4] != wire::MAGIC || u16::from_le_bytes([b[4], b[5]]) != wire::VERSION {
            return Err(RootInfoParseError("bad magic or version".into()));
        }
        let mut s = [0u8; 16];
        s.copy_from_slice(&b[6..22]);
        let addr = wire::decode_addr(&b[22..]).map_err(|e| RootInfoParseError(e.to_string()))?;
        Ok(RootInfo {
            addr,
            session: u128::from_le_bytes(s),
        })
    }
}

/// Lowercase hex of [`RootInfo::to_bytes`].
impl fmt::Display for RootInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.to_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl FromStr for RootInfo {
    type Err = RootInfoParseError;

    fn from_str(s: &str) -> Result<RootInfo, RootInfoParseError> {
        let s = s.trim();
        if s.len() != 2 * ROOT_INFO_LEN || !s.is_ascii() {
            return Err(RootInfoParseError(format!(
                "expected {} hex digits",
                2 * ROOT_INFO_LEN
            )));
        }
        let bytes: Result<Vec<u8>, _> = (0..ROOT_INFO_LEN)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16))
            .collect();
        RootInfo::from_bytes(&bytes.map_err(|_| RootInfoParseError("not hex".into()))?)
    }
}

/// How long [`holds_a_root`] waits to connect and for the answer. Only the
/// port-in-use error path waits; 500 ms was too short on a loaded host (a
/// busy root answered late and the user got the generic "address in use").
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether the listener at `addr` answers as an hccl-rs root. It is asked
/// with a join in a random session: a root refuses that at once (in the
/// caller's session) without counting it as a rank, so the probe cannot
/// disturb the bootstrap it runs.
fn holds_a_root(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
        return false;
    };
    let probe: SessionId = rand::random();
    let join = Join {
        nranks: 1,
        rank: 0,
        data_addr: addr,
        cpus: CpuSet::first(1),
    };
    let mut head = [0u8; wire::CTRL_HEADER_LEN];
    s.set_read_timeout(Some(PROBE_TIMEOUT)).is_ok()
        && s.write_all(&wire::encode_ctrl(CtrlKind::Join, probe, &join.encode()))
            .is_ok()
        && s.read_exact(&mut head).is_ok()
        && matches!(wire::decode_ctrl_header(&head),
            Ok(h) if h.kind == CtrlKind::Reject && h.session == probe)
}

/// Binds a std listener (so errors are immediate and synchronous); `var`
/// names the variable that chose the port, `ip_var` the one that chose
/// the IP, for the advice of the error.
pub(crate) fn bind(
    addr: SocketAddr,
    var: &'static str,
    ip_var: &'static str,
) -> Result<StdListener, TcpError> {
    let l = StdListener::bind(addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrNotAvailable {
            TcpError::AddrNotLocal {
                addr,
                var: ip_var,
                reason: e.to_string(),
            }
        } else {
            TcpError::Bind {
                addr,
                var,
                reason: e.to_string(),
            }
        }
    })?;
    l.set_nonblocking(true)
        .map_err(|e| TcpError::io("listener non-blocking mode", e))?;
    Ok(l)
}

/// The roots this process serves, by address and session: each flag turns
/// true once the root has written its answer (the table or the verdict) to
/// every rank that joined.
type Answering = BTreeMap<(SocketAddr, SessionId), watch::Receiver<bool>>;

fn answering() -> std::sync::MutexGuard<'static, Answering> {
    static ROOTS: std::sync::Mutex<Answering> = std::sync::Mutex::new(BTreeMap::new());
    ROOTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until `root`, if this process serves it, has answered every rank
/// that joined, at most [`ANSWER_FLUSH`] and a little. A rank in the root's
/// process calls this before it returns from its bootstrap: its process may
/// exit on a failed bootstrap at once, and the root's thread with it, so
/// the root must have delivered the verdict to the other ranks by then.
pub(crate) async fn wait_answered(root: &RootInfo) {
    let rx = answering().get(&(root.addr, root.session)).cloned();
    if let Some(mut rx) = rx {
        // An error (the root's thread ended) means there is nothing to wait for.
        let _ = tokio::time::timeout(
            ANSWER_FLUSH + Duration::from_millis(200),
            rx.wait_for(|a| *a),
        )
        .await;
    }
}

/// A joined rank's connection, kept open until the table or the verdict is sent.
struct Joined {
    /// Where its data listener is.
    data_addr: SocketAddr,
    /// The CPUs it may run on, as it joined.
    cpus: CpuSet,
    /// Where its join came from.
    from: SocketAddr,
    /// Where the table (or a reject) goes.
    stream: OwnedWriteHalf,
    /// Reports the rank on the root's `left` channel if it closes its
    /// connection before the table is sent.
    watch: tokio::task::JoinHandle<()>,
}

impl Joined {
    /// Keeps `s` of a rank that joined as `j` from `from`, watching it.
    fn new(j: &Join, s: TcpStream, from: SocketAddr, left: &mpsc::Sender<u32>) -> Joined {
        let (mut rd, stream) = s.into_split();
        let (left, rank) = (left.clone(), j.rank);
        let watch = tokio::spawn(async move {
            // A joined rank sends nothing before the table: whatever a read
            // returns (end of stream, an error, stray bytes) means it is gone.
            let _ = rd.read(&mut [0u8; 1]).await;
            let _ = left.send(rank).await;
        });
        Joined {
            data_addr: j.data_addr,
            cpus: j.cpus.clone(),
            from,
            stream,
            watch,
        }
    }
}

/// The table of `joined` (by rank): each rank's listener, with the number
/// of CPUs that the ranks of its host (listeners of one IP address) may run
/// on together, the union of their sets. Ranks pinned to distinct CPUs
/// thus fit their host, ranks sharing one CPU do not.
fn table<'a>(joined: impl Iterator<Item = (SocketAddr, &'a CpuSet)> + Clone) -> Vec<TableEntry> {
    let mut hosts: std::collections::HashMap<std::net::IpAddr, CpuSet> = Default::default();
    for (addr, cpus) in joined.clone() {
        hosts.entry(addr.ip()).or_default().union_with(cpus);
    }
    joined
        .map(|(data_addr, _)| TableEntry {
            data_addr,
            cpus: hosts.get(&data_addr.ip()).map_or(0, CpuSet::count),
        })
        .collect()
}

/// Longest the root spends writing its answers (the table, or a verdict)
/// to the ranks that joined.
const ANSWER_FLUSH: Duration = Duration::from_secs(1);

/// Sends `kind` with `body` to every rank in `joined` (emptying it) and
/// stops watching them. The writes are awaited, one after another, before
/// the root goes on: a rank in the root's own process may exit as soon as
/// it has its answer (a failed bootstrap), and the others must have theirs
/// by then. Each is a small message into an empty socket buffer, so it
/// takes microseconds; [`ANSWER_FLUSH`] bounds a stuck one.
async fn answer_all(
    joined: &mut BTreeMap<u32, Joined>,
    kind: CtrlKind,
    session: SessionId,
    body: &[u8],
) {
    let all = std::mem::take(joined);
    for j in all.values() {
        j.watch.abort();
    }
    let _ = tokio::time::timeout(ANSWER_FLUSH, async {
        for (_, mut j) in all {
            let _ = wire::write_ctrl(&mut j.stream, kind, session, body).await;
        }
    })
    .await;
}

async fn handshake(
    mut s: TcpStream,
    peer: SocketAddr,
    session: SessionId,
) -> Option<(Join, TcpStream)> {
    let read =
        tokio::time::timeout(JOIN_READ_TIMEOUT, wire::read_ctrl(&mut s, Some(session))).await;
    match read {
        Err(_) => tracing::warn!(
            "hccl root: closing connection from {peer}: no join within {JOIN_READ_TIMEOUT:?}"
        ),
        Ok(Err(Err(e))) => tracing::warn!("hccl root: closing connection from {peer}: {e}"),
        Ok(Err(Ok(e @ WireError::BadSession { got }))) => {
            tracing::warn!("hccl root: refusing connection from {peer}: {e}");
            // Answer in the caller's session: never reveal ours.
            let body = wire::encode_reject(RejectCode::Refused, &e.to_string());
            let _ = wire::write_ctrl(&mut s, CtrlKind::Reject, got, &body).await;
        }
        Ok(Err(Ok(e))) => tracing::warn!("hccl root: closing connection from {peer}: {e}"),
        Ok(Ok((h, body))) if h.kind == CtrlKind::Join => match Join::decode(&body) {
            Ok(j) => return Some((j, s)),
            Err(e) => tracing::warn!("hccl root: closing connection from {peer}: {e}"),
        },
        Ok(Ok((h, _))) => tracing::warn!(
            "hccl root: closing connection from {peer}: {:?} instead of a join",
            h.kind
        ),
    }
    None
}

async fn reject(mut s: TcpStream, session: SessionId, code: RejectCode, reason: String) {
    let body = wire::encode_reject(code, &reason);
    let _ = wire::write_ctrl(&mut s, CtrlKind::Reject, session, &body).await;
}

/// Ends the session for every rank that joined: sends `msg` to them as a
/// reject with `code` (and logs it as an error only when none joined).
async fn reject_all(
    info: &RootInfo,
    joined: &mut BTreeMap<u32, Joined>,
    code: RejectCode,
    msg: &str,
) {
    // The ranks that joined return `msg` as their error: logging it too
    // would print it twice. With nobody to tell, the log is its only trace.
    if joined.is_empty() {
        tracing::error!("hccl root {}: {msg}", info.addr);
    } else {
        tracing::debug!("hccl root {}: {msg}", info.addr);
    }
    let body = wire::encode_reject(code, msg);
    answer_all(joined, CtrlKind::Reject, info.session, &body).await;
}

async fn serve(
    listener: StdListener,
    info: RootInfo,
    timeout: Duration,
    answered: watch::Sender<bool>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("hccl root {}: {e}", info.addr);
            return;
        }
    };
    let session = info.session;
    let deadline = Instant::now() + timeout;
    let (tx, mut rx) = mpsc::channel::<(Join, TcpStream, SocketAddr)>(64);
    let (left_tx, mut left_rx) = mpsc::channel::<u32>(64);
    let mut nranks: Option<u32> = None;
    let mut joined: BTreeMap<u32, Joined> = BTreeMap::new();
    let verdict: String;
    let failed: bool;
    loop {
        tokio::select! {
            acc = listener.accept() => {
                if let Ok((s, peer)) = acc {
                    let _ = s.set_nodelay(true);
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        if let Some((j, s)) = handshake(s, peer, session).await {
                            let _ = tx.send((j, s, peer)).await;
                        }
                    });
                }
            }
            Some((j, s, peer)) = rx.recv() => {
                let n = *nranks.get_or_insert(j.nranks);
                let refuse = if j.nranks != n {
                    Some(format!("rank {} says the world has {} ranks, earlier ranks said {n}", j.rank, j.nranks))
                } else if j.rank >= n {
                    Some(format!("rank {} is out of range for {n} ranks", j.rank))
                } else if joined.contains_key(&j.rank) {
                    Some(format!("rank {} already joined (from {})", j.rank, joined[&j.rank].from))
                } else { None };
                if let Some(r) = refuse {
                    tracing::warn!("hccl root {}: refusing {peer}: {r}", info.addr);
                    tokio::spawn(reject(s, session, RejectCode::Refused, r));
                    continue;
                }
                joined.insert(j.rank, Joined::new(&j, s, peer, &left_tx));
                if joined.len() as u32 == n {
                    let body = wire::encode_table(&table(joined.values().map(|j| (j.data_addr, &j.cpus))));
                    answer_all(&mut joined, CtrlKind::Table, session, &body).await;
                    tracing::debug!("hccl root {}: all {n} ranks joined", info.addr);
                    verdict = format!("all {n} ranks had already joined");
                    failed = false;
                    break;
                }
            }
            Some(rank) = left_rx.recv() => {
                let Some(gone) = joined.remove(&rank) else { continue };
                gone.watch.abort();
                let msg = format!(
                    "rank {rank} (from {}) left before every rank joined: its process exited or closed its connection to the root ({} of {} ranks had joined)",
                    gone.from, joined.len() + 1, nranks.unwrap_or(0)
                );
                reject_all(&info, &mut joined, RejectCode::RankLeft, &msg).await;
                verdict = msg;
                failed = true;
                break;
            }
            _ = tokio::time::sleep_until(deadline) => {
                let n = nranks.unwrap_or(0);
                let missing: Vec<u32> = (0..n).filter(|r| !joined.contains_key(r)).collect();
                let msg = format!(
                    "bootstrap timed out after {} s: {} of {} ranks connected, missing {:?}",
                    timeout.as_secs_f64(), joined.len(), n, missing
                );
                reject_all(&info, &mut joined, RejectCode::Timeout, &msg).await;
                verdict = msg;
                failed = true;
                break;
            }
        }
    }
    let _ = answered.send(true);
    // Late or extra ranks get a clear answer for a while.
    let grace = if failed { timeout } else { GRACE_AFTER_SUCCESS };
    let end = Instant::now() + grace;
    let expired = format!("session {session:032x} is over: {verdict}");
    while let Ok(Ok((s, peer))) = timeout_at(end, listener.accept()).await {
        let expired = expired.clone();
        tokio::spawn(async move {
            if let Some((_, s)) = handshake(s, peer, session).await {
                reject(s, session, RejectCode::Expired, expired).await;
            }
        });
    }
    // Let the last answers flush.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// The root address a rank should listen near: loopback roots keep the
/// whole run on loopback when no interface is configured.
pub(crate) fn fallback_ip(root: &RootInfo) -> Option<IpAddr> {
    root.addr.ip().is_loopback().then(|| root.addr.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_cpus_are_the_union_of_its_ranks_sets() {
        let a = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let (pin0, pin1, both) = (
            CpuSet::from_cpus([0]),
            CpuSet::from_cpus([1]),
            CpuSet::from_cpus([0, 1]),
        );
        let cpus = |joined: &[(SocketAddr, &CpuSet)]| -> Vec<u32> {
            table(joined.iter().copied())
                .iter()
                .map(|e| e.cpus)
                .collect()
        };
        // mpirun's binding: one CPU each, two together.
        assert_eq!(
            cpus(&[(a("10.0.0.1:1"), &pin0), (a("10.0.0.1:2"), &pin1)]),
            [2, 2]
        );
        // Both pinned to CPU 0: one CPU for two ranks.
        assert_eq!(
            cpus(&[(a("10.0.0.1:1"), &pin0), (a("10.0.0.1:2"), &pin0)]),
            [1, 1]
        );
        // Another host's CPUs are not this one's.
        assert_eq!(
            cpus(&[
                (a("10.0.0.1:1"), &pin0),
                (a("10.0.0.2:1"), &pin1),
                (a("10.0.0.1:2"), &both)
            ]),
            [2, 1, 2]
        );
    }

    #[test]
    fn port_in_use_advice_depends_on_the_variable() {
        let cfg = TcpConfig {
            if_ip: Some("127.0.0.1".parse().unwrap()),
            ..TcpConfig::default()
        };
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        // Under a launcher every rank must know the port: never advise 0.
        let e = RootInfo::create_at(&cfg, addr, "MASTER_PORT").unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, TcpError::Bind { .. }), "{e}");
        assert!(
            text.contains("set MASTER_PORT to another free port, the same for every rank"),
            "{text}"
        );
        assert!(!text.contains("to let the OS choose"), "{text}");
        // The root's own HCCL_IF_BASE_PORT may be 0.
        let e = RootInfo::create_at(&cfg, addr, "HCCL_IF_BASE_PORT").unwrap_err();
        assert!(
            e.to_string().contains(
                "set HCCL_IF_BASE_PORT to another free port (or to 0 to let the OS choose)"
            ),
            "{e}"
        );
        // ... and port 0 works for the root itself.
        let info =
            RootInfo::create_at(&cfg, "127.0.0.1:0".parse().unwrap(), "MASTER_PORT").unwrap();
        assert_ne!(info.addr.port(), 0);
    }

    #[test]
    fn an_address_not_on_this_host_names_the_ip_variable() {
        // 192.0.2.1 is TEST-NET-1 (RFC 5737): never a host's address.
        let ip: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let cfg = TcpConfig {
            if_ip: Some(ip),
            ..TcpConfig::default()
        };
        let e = RootInfo::create_at(&cfg, SocketAddr::new(ip, 0), "HCCL_IF_BASE_PORT").unwrap_err();
        assert!(matches!(e, TcpError::AddrNotLocal { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("192.0.2.1 is not an address of this host: set HCCL_IF_IP to one of this host's addresses"),
            "{text}"
        );
        assert!(!text.contains("HCCL_IF_BASE_PORT"), "wrong advice: {text}");
        // An interface filter chose it.
        let by_name = TcpConfig {
            socket_ifname: crate::tcp::config::IfnameFilter::parse("=eth9"),
            ..TcpConfig::default()
        };
        let e = RootInfo::create_at(&by_name, SocketAddr::new(ip, 0), "HCCL_IF_BASE_PORT")
            .unwrap_err()
            .to_string();
        assert!(e.contains("set HCCL_SOCKET_IFNAME to one of"), "{e}");
        // Under a launcher MASTER_ADDR chose it.
        let e = RootInfo::create_at(&cfg, SocketAddr::new(ip, 29500), "MASTER_PORT")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("run rank 0 on the host MASTER_ADDR names"),
            "{e}"
        );
        assert!(!e.contains("set MASTER_PORT"), "{e}");
        // The data listener of a rank too.
        let e = crate::tcp::bootstrap::bind_data_listener(&cfg, ip)
            .unwrap_err()
            .to_string();
        assert!(e.contains("set HCCL_IF_IP to one of"), "{e}");
    }

    #[test]
    fn root_info_round_trips_as_bytes_and_hex() {
        let r = RootInfo {
            addr: "127.0.0.1:4242".parse().unwrap(),
            session: 0xdead_beef_0123_4567_89ab_cdef_5555_aaaa,
        };
        assert_eq!(RootInfo::from_bytes(&r.to_bytes()), Ok(r));
        assert_eq!(r.to_string().parse::<RootInfo>(), Ok(r));
        assert!("zz".parse::<RootInfo>().is_err());
        let mut b = r.to_bytes();
        b[0] = 0;
        assert!(RootInfo::from_bytes(&b).is_err());
    }

    #[test]
    fn port_in_use_names_address_and_variable() {
        let cfg = TcpConfig::default();
        let r =
            RootInfo::create_at(&cfg, "127.0.0.1:0".parse().unwrap(), "HCCL_IF_BASE_PORT").unwrap();
        let e = RootInfo::create_at(&cfg, r.addr, "HCCL_IF_BASE_PORT")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&r.addr.to_string()) && e.contains("HCCL_IF_BASE_PORT"),
            "{e}"
        );
    }

    /// A second rank 0 finds the port held by a root: it says rank 0 is
    /// taken, not only that the port is in use; a port held by another
    /// program keeps the port advice.
    #[test]
    fn a_port_held_by_another_root_says_rank_0_is_taken() {
        let cfg = TcpConfig {
            if_ip: Some("127.0.0.1".parse().unwrap()),
            ..TcpConfig::default()
        };
        let first =
            RootInfo::create_at(&cfg, "127.0.0.1:0".parse().unwrap(), "MASTER_PORT").unwrap();
        let e = RootInfo::create_at(&cfg, first.addr, "MASTER_PORT").unwrap_err();
        assert!(matches!(e, TcpError::RootTaken { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("rank 0 is already taken"), "{text}");
        assert!(text.contains(&first.addr.to_string()), "{text}");
        assert!(
            text.contains("set MASTER_PORT to another free port"),
            "{text}"
        );
        // Another program on the port.
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = RootInfo::create_at(&cfg, other.local_addr().unwrap(), "MASTER_PORT").unwrap_err();
        assert!(matches!(e, TcpError::Bind { .. }), "{e}");
    }
}

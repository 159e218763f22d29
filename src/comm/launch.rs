//! Where a communicator's bootstrap information comes from: torchrun-style
//! and Open MPI environment variables, or an HCCL rank table.

use std::net::{SocketAddr, ToSocketAddrs};

use hccl_topology::RankTable;

use super::CommError;

/// torch.distributed's default `MASTER_PORT`, used when it is unset.
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// HCCL's default `HCCL_IF_BASE_PORT` (CANN env var reference), used as
/// the root port of rank-table bootstraps when the variable is unset.
pub const DEFAULT_RANK_TABLE_PORT: u16 = 60000;

/// Rank, world size and root address of this process, from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvLaunch {
    /// `RANK`, else `OMPI_COMM_WORLD_RANK`, else `PMI_RANK`, else Ascend's
    /// `RANK_ID`.
    pub rank: u32,
    /// `WORLD_SIZE`, else `OMPI_COMM_WORLD_SIZE`, else `PMI_SIZE`, else
    /// Ascend's `RANK_SIZE`.
    pub world_size: u32,
    /// `LOCAL_RANK`, else `OMPI_COMM_WORLD_LOCAL_RANK` (informational).
    pub local_rank: Option<u32>,
    /// Ranks the launcher started on this node: see [`local_world_size`].
    pub local_world_size: Option<u32>,
    /// `MASTER_ADDR:MASTER_PORT` (defaults 127.0.0.1 and 29500, torch's;
    /// `MASTER_PORT=0` is refused).
    pub root: SocketAddr,
    /// Session id shared by every rank without an exchange: `HCCL_SESSION_ID`
    /// if set (use a shared secret to keep strangers out), else a hash of the
    /// root address, world size and the launcher's job id (`TORCHELASTIC_RUN_ID`,
    /// `PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`, `SLURM_JOB_ID`) — enough to
    /// keep two jobs apart, not to authenticate.
    pub session: u128,
}

/// The first of `names` that is set, parsed, with its name (for errors
/// about its value); every other one that is set must agree with it (a
/// stale `RANK=0` exported into an `mpirun` job made every process rank 0,
/// and the second failed on a busy port).
fn num(
    get: &dyn Fn(&str) -> Option<String>,
    names: &[&'static str],
) -> Result<Option<(&'static str, u32)>, CommError> {
    let mut first: Option<(&'static str, u32)> = None;
    for &n in names {
        let Some(v) = get(n).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        let x: u32 = v.trim().parse().map_err(|_| CommError::Env {
            var: n,
            value: v.clone(),
            reason: "not a whole number".into(),
        })?;
        match first {
            None => first = Some((n, x)),
            Some((f, y)) if y != x => {
                return Err(CommError::Env {
                    var: f,
                    value: y.to_string(),
                    reason: format!(
                        "{n}={x} disagrees: two launchers' variables are set; unset {f} (or {n}) so that one launcher numbers the ranks"
                    ),
                })
            }
            Some(_) => {}
        }
    }
    Ok(first)
}

/// The number of ranks the launcher started on this node, and the variable
/// that says so: torchrun's `LOCAL_WORLD_SIZE`, Open MPI's
/// `OMPI_COMM_WORLD_LOCAL_SIZE`, or MPICH Hydra's `MPI_LOCALNRANKS` (the
/// PMI launcher's). `None` when none is set to a whole number above 0.
pub fn local_world_size(get: &dyn Fn(&str) -> Option<String>) -> Option<(&'static str, u32)> {
    [
        "LOCAL_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
    ]
    .into_iter()
    .find_map(|k| {
        get(k)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|&n| n > 0)
            .map(|n| (k, n))
    })
}

/// FNV-1a over `parts`, twice with different seeds, as a 128-bit id.
pub(crate) fn hash128(parts: &[&[u8]]) -> u128 {
    let fnv = |seed: u64| {
        let mut h = seed;
        for p in parts {
            for &b in *p {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            h ^= 0xff;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    (u128::from(fnv(0xcbf2_9ce4_8422_2325)) << 64) | u128::from(fnv(0x6c62_272e_07bb_0142))
}

/// The launcher's rank and world size (`RANK`/`WORLD_SIZE`, Open MPI's,
/// PMI's, Ascend's `RANK_ID`/`RANK_SIZE`), each `None` when unset: what
/// [`EnvLaunch::from_env`] reads, with its checks, so that a tool deciding
/// whether it runs under a launcher fails on a malformed value as the
/// communicator would.
///
/// # Errors
/// [`CommError::Env`] naming a value that is not a whole number, two
/// launchers' values that disagree, a world size of 0, or a rank not below
/// the world size (each by the variable it was read from).
pub fn rank_and_world_size(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<u32>, Option<u32>), CommError> {
    let rank = num(
        get,
        &["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK_ID"],
    )?;
    let world_size = num(
        get,
        &[
            "WORLD_SIZE",
            "OMPI_COMM_WORLD_SIZE",
            "PMI_SIZE",
            "RANK_SIZE",
        ],
    )?;
    if let Some((var, 0)) = world_size {
        return Err(CommError::Env {
            var,
            value: "0".into(),
            reason: "must be at least 1: the number of ranks the launcher starts".into(),
        });
    }
    if let (Some((var, rank)), Some((size_var, world_size))) = (rank, world_size) {
        if rank >= world_size {
            return Err(CommError::Env {
                var,
                value: rank.to_string(),
                reason: format!("must be below {size_var} = {world_size}"),
            });
        }
    }
    Ok((rank.map(|r| r.1), world_size.map(|w| w.1)))
}

impl EnvLaunch {
    /// Reads the process environment.
    ///
    /// # Errors
    /// [`CommError::Env`] naming a missing or malformed variable.
    pub fn from_env() -> Result<EnvLaunch, CommError> {
        EnvLaunch::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Reads variables through `get`, for tests.
    ///
    /// # Errors
    /// [`CommError::Env`] naming a missing or malformed variable
    /// (`MASTER_PORT=0` too, on every rank: the other ranks could not
    /// know the port rank 0's OS would pick).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<EnvLaunch, CommError> {
        let (rank, world_size) = rank_and_world_size(get)?;
        let unset = |var| CommError::Env {
            var,
            value: String::new(),
            reason: "launch with torchrun-style RANK/WORLD_SIZE or under mpirun".into(),
        };
        let rank = rank.ok_or_else(|| unset("RANK"))?;
        let world_size = world_size.ok_or_else(|| unset("WORLD_SIZE"))?;
        // Informational only: a stale value is not worth failing a launch.
        let local_rank = match num(get, &["LOCAL_RANK"])? {
            Some((_, l)) => Some(l),
            None => num(get, &["OMPI_COMM_WORLD_LOCAL_RANK"])?.map(|(_, l)| l),
        };
        let local_world_size = local_world_size(get).map(|(_, n)| n);
        let host = get("MASTER_ADDR")
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| "127.0.0.1".into());
        let port = match get("MASTER_PORT").filter(|v| !v.trim().is_empty()) {
            None => DEFAULT_MASTER_PORT,
            Some(v) => match v.trim().parse() {
                // Every rank refuses it at once, rank 0 too: no other rank
                // could learn the port its OS would pick.
                Ok(0) => {
                    return Err(CommError::Env {
                        var: "MASTER_PORT",
                        value: v.clone(),
                        reason: "port 0 would let rank 0's OS pick a port that no other rank knows; set MASTER_PORT to a free port, the same for every rank".into(),
                    })
                }
                Ok(p) => p,
                Err(_) => {
                    return Err(CommError::Env {
                        var: "MASTER_PORT",
                        value: v.clone(),
                        reason: "not a port number".into(),
                    })
                }
            },
        };
        let root = (host.trim(), port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| CommError::Env {
                var: "MASTER_ADDR",
                value: host.clone(),
                reason: "does not resolve to an address".into(),
            })?;
        let session = match get("HCCL_SESSION_ID").filter(|v| !v.is_empty()) {
            Some(s) => hash128(&[b"secret", s.as_bytes()]),
            None => {
                let job: Vec<String> = [
                    "TORCHELASTIC_RUN_ID",
                    "PMIX_NAMESPACE",
                    "OMPI_MCA_ess_base_jobid",
                    "SLURM_JOB_ID",
                ]
                .iter()
                .map(|k| get(k).unwrap_or_default())
                .collect();
                hash128(&[
                    root.to_string().as_bytes(),
                    &world_size.to_le_bytes(),
                    job.join("|").as_bytes(),
                ])
            }
        };
        Ok(EnvLaunch {
            rank,
            world_size,
            local_rank,
            local_world_size,
            root,
            session,
        })
    }
}

/// What a rank-table bootstrap needs: world size and root address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableLaunch {
    pub world_size: u32,
    pub root: SocketAddr,
    pub session: u128,
}

/// The root of a rank-table bootstrap is the host of rank 0 (its
/// `host_ip`, else its `server_id` as an IP) at `HCCL_IF_BASE_PORT`
/// (default 60000); the session id is a hash of the table's bytes, so every
/// rank must read the same file.
pub(crate) fn from_rank_table(bytes: &[u8], base_port: u16) -> Result<TableLaunch, CommError> {
    let table = RankTable::from_slice(bytes)?;
    let server = table
        .servers()
        .iter()
        .find(|s| s.devices().iter().any(|d| d.rank() == 0))
        .ok_or_else(|| CommError::Unsupported("rank table has no rank 0".into()))?;
    let ip = server.host_ip().or_else(|| server.server_id().parse().ok()).ok_or_else(|| {
        CommError::Unsupported(format!(
            "server {:?} (rank 0) has neither host_ip nor an IP as server_id; the TCP root needs one",
            server.server_id()
        ))
    })?;
    let port = if base_port == 0 {
        DEFAULT_RANK_TABLE_PORT
    } else {
        base_port
    };
    Ok(TableLaunch {
        world_size: table.world_size(),
        root: SocketAddr::new(ip, port),
        session: hash128(&[b"rank-table", bytes]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(a, _)| *a == k)
                .map(|(_, b)| b.to_string())
        }
    }

    #[test]
    fn torchrun_and_mpirun_variables() {
        let t = EnvLaunch::from_lookup(&env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "1234"),
        ]))
        .unwrap();
        assert_eq!((t.rank, t.world_size, t.root.port()), (1, 4, 1234));
        let m = EnvLaunch::from_lookup(&env(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ]))
        .unwrap();
        assert_eq!((m.rank, m.world_size), (3, 4));
        assert_eq!(m.local_world_size, None);
        let l = EnvLaunch::from_lookup(&env(&[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "16"),
            ("MPI_LOCALNRANKS", "8"),
        ]))
        .unwrap();
        assert_eq!((l.rank, l.world_size, l.local_world_size), (1, 16, Some(8)));
        assert_eq!(
            local_world_size(&env(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "2")])),
            Some(("OMPI_COMM_WORLD_LOCAL_SIZE", 2))
        );
        assert_eq!(
            m.root,
            "127.0.0.1:29500".parse().unwrap(),
            "documented defaults"
        );
        let other_job = EnvLaunch::from_lookup(&env(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_NAMESPACE", "job2"),
        ]))
        .unwrap();
        assert_ne!(m.session, other_job.session);
        let e = EnvLaunch::from_lookup(&env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("RANK=\"0\": OMPI_COMM_WORLD_RANK=1 disagrees"),
            "{e}"
        );
        let e = EnvLaunch::from_lookup(&env(&[("RANK", "4"), ("WORLD_SIZE", "4")])).unwrap_err();
        assert!(e.to_string().contains("WORLD_SIZE = 4"), "{e}");
        let e = EnvLaunch::from_lookup(&env(&[("WORLD_SIZE", "4")])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("RANK is unset: launch with torchrun-style"),
            "{e}"
        );
        let e = EnvLaunch::from_lookup(&env(&[("RANK", "0"), ("WORLD_SIZE", "0")])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("WORLD_SIZE=\"0\": must be at least 1"),
            "{e}"
        );
    }

    #[test]
    fn master_port_0_is_refused_at_once_on_every_rank() {
        for rank in ["0", "1"] {
            let e = EnvLaunch::from_lookup(&env(&[
                ("RANK", rank),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "0"),
            ]))
            .unwrap_err();
            assert_eq!(e.hccl_result(), 1, "rank {rank}: HCCL_E_PARA: {e}");
            assert!(
                e.to_string()
                    .starts_with("MASTER_PORT=\"0\": port 0 would let rank 0's OS pick a port"),
                "rank {rank}: {e}"
            );
        }
        // A root info naming port 0 (not from MASTER_PORT) is HCCL_E_PARA too.
        let e = CommError::from(hccl_hw::tcp::TcpError::RootPortZero {
            root: "127.0.0.1:0".parse().unwrap(),
            rank: 1,
        });
        assert_eq!(e.hccl_result(), 1, "{e}");
    }

    #[test]
    fn ascends_rank_id_and_rank_size_are_named_by_their_own_names() {
        let a = EnvLaunch::from_lookup(&env(&[("RANK_ID", "2"), ("RANK_SIZE", "4")])).unwrap();
        assert_eq!((a.rank, a.world_size), (2, 4));
        let e =
            |pairs: &[(&str, &str)]| EnvLaunch::from_lookup(&env(pairs)).unwrap_err().to_string();
        let bad = e(&[("RANK_ID", "x"), ("RANK_SIZE", "1")]);
        assert!(
            bad.starts_with("RANK_ID=\"x\": not a whole number"),
            "{bad}"
        );
        let beyond = e(&[("RANK_ID", "4"), ("RANK_SIZE", "4")]);
        assert!(
            beyond.starts_with("RANK_ID=\"4\": must be below RANK_SIZE = 4"),
            "{beyond}"
        );
        let zero = e(&[("RANK_ID", "0"), ("RANK_SIZE", "0")]);
        assert!(
            zero.starts_with("RANK_SIZE=\"0\": must be at least 1"),
            "{zero}"
        );
        // torchrun's variables come first; a RANK_ID that disagrees is named.
        let both = e(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("RANK_ID", "1")]);
        assert!(
            both.starts_with("RANK=\"0\": RANK_ID=1 disagrees"),
            "{both}"
        );
    }

    #[test]
    fn ranks_disagreeing_on_world_size_are_told_to_check_it() {
        use crate::comm::{Comm, CommError};
        use hccl_hw::tcp::{RootInfo, TcpConfig, TcpError};
        let launch = |rank: &str, world: &str| {
            EnvLaunch::from_lookup(&env(&[
                ("RANK", rank),
                ("WORLD_SIZE", world),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29500"),
            ]))
            .unwrap()
        };
        let (r0, r1) = (launch("0", "2"), launch("1", "3"));
        let cfg = TcpConfig {
            if_ip: Some("127.0.0.1".parse().unwrap()),
            connect_timeout: std::time::Duration::from_secs(5),
            ..TcpConfig::default()
        };
        // On a free port: the sessions hash MASTER_PORT's value, not this one.
        let at = std::net::SocketAddr::new(r0.root.ip(), 0);
        let root = RootInfo::serve(&cfg, at, r0.session, "MASTER_PORT").unwrap();
        let mine = RootInfo {
            addr: root.addr,
            session: r1.session,
        };
        let e = match Comm::tcp("world", cfg, &mine, r1.world_size, r1.rank) {
            Err(e) => e,
            Ok(_) => panic!("rank 1 joined a root of another world size"),
        };
        assert!(
            matches!(e, CommError::Tcp(TcpError::Rejected { rank: 1, .. })),
            "{e}"
        );
        assert!(
            e.to_string().contains(
                "or the ranks disagree on WORLD_SIZE / MASTER_ADDR / MASTER_PORT / HCCL_SESSION_ID"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_bad_rank_table_keeps_its_topology_error() {
        use crate::comm::CommError;
        use hccl_topology::TopologyError;
        // Cut inside a key: a syntax error with its line and column.
        let e = match from_rank_table(br#"{"status": "completed", "vers"#, 60000) {
            Err(e) => e,
            Ok(_) => panic!("a truncated table was accepted"),
        };
        let CommError::RankTable(t) = &e else {
            panic!("not a rank table error: {e:?}");
        };
        assert!(
            matches!(**t, TopologyError::RankTableSyntax { line: 1, .. }),
            "{t:?}"
        );
        // Printed as the topology error; bad content is HCCL_E_PARA.
        assert_eq!(e.to_string(), t.to_string());
        assert_eq!(e.hccl_result(), 1);
        // Well-formed but against HCCL's rules: HCCL_E_PARA too.
        let bad =
            br#"{"status": "completed", "version": "1.0", "server_count": "2", "server_list": []}"#;
        let e = match from_rank_table(bad, 60000) {
            Err(e) => e,
            Ok(_) => panic!("an invalid table was accepted"),
        };
        assert!(
            matches!(&e, CommError::RankTable(t) if matches!(**t, TopologyError::RankTableInvalid { .. })),
            "{e:?}"
        );
        assert_eq!(e.hccl_result(), 1);
    }
}

//! Building communicators on the Ascend backend (`--features ascend`):
//! threads of one process on NPUs `0..n` ([`Comm::init_all_ascend`]),
//! processes joined through CANN's root info
//! ([`Comm::ascend_root_info`], [`Comm::init_ascend_root_info`]), a rank
//! table (`HcclCommInitClusterInfo`, under `HCCL_BACKEND=ascend`), or a
//! launcher's variables (the root info broadcast over a TCP bootstrap).

use std::path::Path;
use std::sync::Arc;

use hccl_hw::tcp::TcpConfig;

use super::backend::ascend::{self, AscendSettings};
use super::local::LocalWorld;
use super::{Comm, CommError};

impl Comm {
    /// [`Comm::init_all`] on the Ascend backend with explicit settings
    /// (where CANN's libraries are, the mode): rank `r` on NPU `r`, one
    /// thread each during setup.
    ///
    /// # Errors
    /// CANN's errors ([`CommError::Ascend`]: a missing library names where
    /// it looked); [`CommError::Unsupported`] for more ranks than NPUs.
    pub fn init_all_ascend(ndev: u32, settings: &AscendSettings) -> Result<Vec<Comm>, CommError> {
        if ndev == 0 {
            return Err(CommError::Unsupported(
                "init_all(0): a communicator has at least one rank".into(),
            ));
        }
        let cfg = super::init::settings()?;
        let local = LocalWorld::new(ndev, super::local::grace(cfg.exec_timeout));
        Comm::init_all_ascend_with(ndev, settings, &cfg, local)
    }

    pub(crate) fn init_all_ascend_with(
        ndev: u32,
        settings: &AscendSettings,
        cfg: &TcpConfig,
        local: Arc<LocalWorld>,
    ) -> Result<Vec<Comm>, CommError> {
        let bs = ascend::init_all(ndev, settings, cfg.exec_timeout)?;
        let comms: Vec<Comm> = bs
            .into_iter()
            .enumerate()
            .map(|(r, b)| Comm::new("world".into(), r as u32, ndev, Box::new(b)))
            .collect();
        for c in &comms {
            let _ = c.shared.local.set(Arc::clone(&local));
        }
        Ok(comms)
    }

    /// CANN's root info (`HcclGetRootInfo`, run on NPU `device`): the 4108
    /// bytes one rank makes and sends to every rank of a new communicator
    /// for [`Comm::init_ascend_root_info`].
    ///
    /// # Errors
    /// CANN's errors ([`CommError::Ascend`]).
    pub fn ascend_root_info(settings: &AscendSettings, device: i32) -> Result<Vec<u8>, CommError> {
        ascend::root_info(settings, device)
    }

    /// Joins a communicator of `nranks` ranks as `rank` through CANN's
    /// root info `root` (from [`Comm::ascend_root_info`]), on NPU `device`
    /// (`None`: `ASCEND_DEVICE_ID`, else the launcher's local rank, else
    /// `rank` modulo the NPUs seen). Blocks until every rank joined
    /// (`HcclCommInitRootInfo`).
    ///
    /// # Errors
    /// [`CommError::Shape`] for a root info that is not 4108 bytes; CANN's
    /// errors.
    pub fn init_ascend_root_info(
        nranks: u32,
        root: &[u8],
        rank: u32,
        device: Option<i32>,
        settings: &AscendSettings,
    ) -> Result<Comm, CommError> {
        let cfg = super::init::settings()?;
        let b = ascend::join_bytes(root, (nranks, rank, device), settings, cfg.exec_timeout)?;
        Ok(Comm::new("world".into(), rank, nranks, Box::new(b)))
    }

    /// `HcclCommInitClusterInfo` (under `HCCL_BACKEND=ascend`).
    pub(crate) fn ascend_cluster_info(path: &Path, rank: u32) -> Result<Comm, CommError> {
        let cfg = super::init::settings()?;
        let s = AscendSettings::from_env()?;
        let b = ascend::init_cluster_info(path, rank, &s, cfg.exec_timeout)?;
        let size = b.size()?;
        Ok(Comm::new("world".into(), rank, size, Box::new(b)))
    }

    /// [`Comm::from_env_on`] for `Ascend`: a TCP bootstrap from the
    /// launcher's variables carries rank 0's root info to every rank.
    pub(crate) fn ascend_from_env() -> Result<Comm, CommError> {
        let s = AscendSettings::from_env()?;
        let cfg = super::init::settings()?;
        // The library first: a missing CANN fails at once, on every rank.
        let lib = ascend::library(s.library_dir.as_deref())?;
        let tcp = Comm::tcp_from_env()?;
        let (rank, n) = (tcp.rank(), tcp.size());
        let device = ascend::device_for(&lib, rank)?;
        let mut root = vec![0u8; hccl_ascend_sys::types::HCCL_ROOT_INFO_BYTES];
        if rank == 0 {
            root = ascend::root_info(&s, device)?;
        }
        tcp.broadcast(&mut root[..], 0)?;
        let b = ascend::join_bytes(&root, (n, rank, Some(device)), &s, cfg.exec_timeout)?;
        drop(tcp);
        Ok(Comm::new("world".into(), rank, n, Box::new(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_where_it_looked_and_set_env_sh() {
        let dir = std::env::temp_dir().join(format!("hccl-no-cann-{}", std::process::id()));
        let s = AscendSettings {
            library_dir: Some(dir.clone()),
            ..AscendSettings::default()
        };
        let e = Comm::init_all_ascend(2, &s).unwrap_err();
        let t = e.to_string();
        assert!(
            t.starts_with(&format!("libhccl.so not found in {}", dir.display())),
            "{t}"
        );
        assert!(t.contains("set_env.sh"), "{t}");
        assert_eq!(e.hccl_result(), 6, "HCCL_E_NOT_FOUND");
    }
}

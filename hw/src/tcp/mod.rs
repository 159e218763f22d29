//! TCP transport between processes and hosts, on tokio.
//!
//! - [`RootInfo`]: HCCL's root info — the root's address and a random
//!   128-bit session id; [`RootInfo::create`] starts the root.
//! - [`TcpRank::connect`]: the bootstrap (join the root, get the table,
//!   one connection per peer pair), then [`TcpRank::run`] runs any
//!   `hccl_algos` plan over host buffers with host reduce kernels.
//! - [`TcpConfig`]: HCCL's environment variables (`HCCL_CONNECT_TIMEOUT`,
//!   `HCCL_EXEC_TIMEOUT`, `HCCL_IF_IP`, `HCCL_SOCKET_IFNAME`,
//!   `HCCL_IF_BASE_PORT`, `HCCL_BUFFSIZE`, and our
//!   `HCCL_INTRA_CMA_ENABLE` and `HCCL_SHM_DISABLE`).
//! - [`cma`]: the same-host fast path (Linux cross-memory attach).
//! - [`shm_link`]: same-host pairs move every frame through shared-memory
//!   rings ([`crate::shm`]); the socket stays for doorbells and liveness.
//!
//! Threads: each [`TcpRank`] owns a current-thread tokio runtime with a
//! reader and a writer task per peer. The runtime runs on the caller's
//! thread whenever the executor waits (no hand-off between threads on the
//! data path, which keeps latency low on a loaded host); the executor side
//! talks to the tasks only through channels and a per-peer byte budget
//! ([`crate::sync`]). Between ops nothing reads the sockets: peers' early
//! messages wait in the kernel's buffers. See [`rank`] for matching, bounds
//! and failure semantics and [`wire`] for the byte layout. Do not call it
//! from inside another tokio runtime (use `spawn_blocking`).

pub(crate) mod bootstrap;
pub mod buffers;
pub(crate) mod chunk;
pub mod cma;
pub(crate) mod cma_reader;
pub mod config;
pub(crate) mod core;
pub mod error;
pub(crate) mod iface;
pub(crate) mod io;
pub mod rank;
pub mod root;
pub mod shm_link;
pub mod wire;

pub use buffers::OpBuffers;
pub use config::TcpConfig;
pub use error::{own_reason, told_reason, AbortKind, TcpError};
pub use rank::{is_p2p_seq, AbortHandle, CmaStats, OpInfo, TcpOp, TcpRank, P2P_SEQ_BIT};
pub use root::RootInfo;

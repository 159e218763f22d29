//! hccl-rs: collective communication in the style of Huawei HCCL.

pub mod comm;
pub mod logging;
pub mod profiling;

pub use comm::{
    group, BackendKind, Comm, CommError, Element, Group, OpHandle, P2pItem, P2pKind, RootInfo,
};
pub use logging::init_logging;

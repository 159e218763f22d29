//! One module per subcommand of the `hccl` binary.

pub mod plan;
pub mod ranktable;
pub mod sim;
pub mod test;
pub mod topo;

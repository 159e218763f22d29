//! The `hccl` command line.
fn main() {}

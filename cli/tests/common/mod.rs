//! What the cli test binaries share.

/// Variables of a launcher: set in the caller's shell, they would make
/// `hccl test` one rank of a job; the tests remove them from the
/// commands they start.
pub const LAUNCHER_VARS: [&str; 8] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
];

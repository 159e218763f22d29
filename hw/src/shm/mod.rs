//! Same-host shared memory: per-pair single-producer single-consumer byte
//! rings in a segment both processes map (after Open MPI's vader and
//! NCCL's SHM transport). `ring` is the protocol (positions, sleep
//! flags), checked by loom models and property tests; `segment` is the
//! mapped memory (the crate's one module with `unsafe` code).

#[cfg(not(loom))]
pub(crate) mod pipe;
pub(crate) mod ring;
#[cfg(not(loom))]
#[allow(unsafe_code)]
pub(crate) mod segment;

#[cfg(not(loom))]
pub use segment::MEMFD_NAME;

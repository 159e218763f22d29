//! Deterministic discrete-event simulator of multi-NPU fabrics.
#![forbid(unsafe_code)]

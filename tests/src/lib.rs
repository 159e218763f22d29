//! Shared helpers of the conformance suite in `tests/tests/`.

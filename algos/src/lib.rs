//! Sans-IO collective algorithms: dtypes, schedules, verifier, executor.
#![forbid(unsafe_code)]

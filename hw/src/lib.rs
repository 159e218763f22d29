//! Real transports: TCP between processes and hosts (Ascend behind `--features ascend`).

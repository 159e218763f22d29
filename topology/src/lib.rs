//! Rank tables, cluster model and fabric graph.
#![forbid(unsafe_code)]

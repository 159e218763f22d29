//! Rank tables, cluster model and fabric graph for hccl-rs.
//!
//! - [`RankTable`]: HCCL rank table files (versions 1.0 and 1.2), parsed
//!   strictly and validated (every problem listed with its JSON path, value
//!   and rank), and generated.
//! - [`ClusterSpec`]: ranks → server, device, super pod.
//! - [`Fabric`]: a `petgraph` graph of NPUs, switches and directed links
//!   (bandwidth GB/s per direction, G = 10^9; latency ns), with routes,
//!   link-class summary, bisection bandwidth, device parameters and DOT output.
//! - [`presets`]: Atlas 800T A2, Atlas 800 (910A), Atlas A3 super pod, and
//!   ring / full mesh / leaf-spine / 2D torus at any size; every parameter
//!   with its source in [`presets::sources`].
//! - Fabric files: [`Fabric::from_fabric_json`], format in [`fabric_file`].
//!
//! Route performance (see `examples/route_bench.rs`): on an Atlas 800T A2
//! leaf-spine of 2048 servers (16,384 ranks, 128 leaves, 8 spines), the
//! 16,384 ring-neighbour routes run at the rate recorded in
//! `topology/README.md`.
#![forbid(unsafe_code)]
// Items of private modules say `pub(crate)`: what is `pub` is the API.
#![warn(unreachable_pub)]

mod bisection;
pub mod cluster;
pub mod error;
pub mod fabric;
pub mod fabric_file;
pub mod limits;
pub mod presets;
pub mod rank_table;
pub mod route;

pub use cluster::{ClusterSpec, RankInfo};
pub use error::{Problem, TopologyError};
pub use fabric::{DeviceParams, Fabric, Link, LinkClass, LinkClassSummary, Node, NodeKind};
pub use presets::{build_preset, build_preset_with, Preset, PresetOptions};
pub use rank_table::{Device, GenerateSpec, RankTable, Server, SuperPod, Version};
pub use route::Route;

/// Re-exported so users name graph indices without depending on petgraph.
pub use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};

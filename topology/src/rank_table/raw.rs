//! The raw serde layer: HCCL rank table JSON exactly as written, every value a
//! string. Nothing here is validated beyond the JSON shape; see
//! [`super::validate`].
//!
//! Field names follow HCCL's documentation of the rank table ("rank table
//! configuration", CANN HCCL user guide, versions 1.0 and 1.2 — hiascend.com
//! hcclug_000013 / hcclug_000014 / hcclug_000067) and the `hccl.json` written by
//! MindCluster Ascend Operator (mxdlug_appendices_009), which adds `host_ip`,
//! `container_ip` and `hardware_type`. Tools add keys of their own (MindX and
//! Kubernetes layouts carry pod and container fields), so serde ignores keys
//! outside these lists; [`super::keys`] names them, as a warning or, in strict
//! mode, as problems, so a typo (`rank_Id`) is never silently ignored.

use serde::{Deserialize, Serialize};

/// A whole rank table file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RawRankTable {
    pub status: String,
    pub version: String,
    pub server_count: String,
    pub server_list: Vec<RawServer>,
    /// Version 1.2 only: which servers form each super pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub super_pod_list: Option<Vec<RawSuperPod>>,
}

/// One entry of `server_list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RawServer {
    pub server_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_nic_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_container_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_type: Option<String>,
    pub device: Vec<RawDevice>,
}

/// One entry of a server's `device` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RawDevice {
    pub device_id: String,
    /// Version 1.2 only: the NPU's id inside its super pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub super_device_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_device_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_device_port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_logical_id: Option<String>,
    pub rank_id: String,
}

/// One entry of `super_pod_list` (version 1.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RawSuperPod {
    pub super_pod_id: String,
    pub server_list: Vec<RawSuperPodServer>,
}

/// A server reference inside a super pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RawSuperPodServer {
    pub server_id: String,
}

/// The keys of [`RawRankTable`], as written in the file.
pub(crate) const TABLE_KEYS: &[&str] = &[
    "status",
    "version",
    "server_count",
    "server_list",
    "super_pod_list",
];
/// The keys of [`RawServer`].
pub(crate) const SERVER_KEYS: &[&str] = &[
    "server_id",
    "host_ip",
    "host_nic_ip",
    "container_ip",
    "server_container_ip",
    "hardware_type",
    "device",
];
/// The keys of [`RawDevice`].
pub(crate) const DEVICE_KEYS: &[&str] = &[
    "device_id",
    "super_device_id",
    "device_ip",
    "device_port",
    "backup_device_ip",
    "backup_device_port",
    "host_port",
    "device_logical_id",
    "rank_id",
];
/// The keys of [`RawSuperPod`].
pub(crate) const SUPER_POD_KEYS: &[&str] = &["super_pod_id", "server_list"];
/// The keys of [`RawSuperPodServer`].
pub(crate) const SUPER_POD_SERVER_KEYS: &[&str] = &["server_id"];

/// Only the version, for a better message when the full parse fails.
#[derive(Deserialize)]
pub(crate) struct VersionProbe {
    #[serde(default)]
    pub version: Option<serde_json::Value>,
}

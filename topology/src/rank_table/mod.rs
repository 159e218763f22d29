//! HCCL rank tables (versions 1.0 and 1.2): strict parsing, validation that
//! lists every problem, and a generator.
//!
//! A [`RankTable`] can only be obtained through validation ([`RankTable::parse`],
//! [`RankTable::from_slice`], [`RankTable::from_file`], [`RankTable::generate`]),
//! so code that holds one never sees an unvalidated table.
//!
//! ```
//! use hccl_topology::RankTable;
//! let json = r#"{"status":"completed","version":"1.0","server_count":"1",
//!   "server_list":[{"server_id":"node_0","device":[
//!     {"device_id":"0","device_ip":"192.0.2.10","rank_id":"0"},
//!     {"device_id":"1","device_ip":"192.0.2.11","rank_id":"1"}]}]}"#;
//! let table = RankTable::parse(json).unwrap();
//! assert_eq!(table.world_size(), 2);
//! ```

mod generate;
mod keys;
pub(crate) mod raw;
mod validate;

use std::fmt;
use std::net::IpAddr;
use std::path::Path;

pub use generate::GenerateSpec;
use raw::{RawRankTable, VersionProbe};

use crate::error::{Problem, TopologyError};

/// A rank table format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Version {
    /// `"1.0"`: servers and devices (Atlas training products, Atlas A2).
    V1_0,
    /// `"1.2"`: adds super pods (`super_pod_list`) and `super_device_id`
    /// (Atlas A3 super-pod networking).
    V1_2,
}

impl Version {
    /// Every supported version, as written in the `version` field.
    pub const SUPPORTED: [&'static str; 2] = ["1.0", "1.2"];

    /// The `version` string, `"1.0"` or `"1.2"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V1_2 => "1.2",
        }
    }

    /// Parses `"1.0"` or `"1.2"`; anything else is `None`.
    pub fn parse(s: &str) -> Option<Version> {
        match s {
            "1.0" => Some(Version::V1_0),
            "1.2" => Some(Version::V1_2),
            _ => None,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One NPU of a validated rank table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    device_id: u32,
    rank: u32,
    device_ip: Option<IpAddr>,
    super_device_id: Option<u32>,
}

impl Device {
    /// Physical device id on its server (`device_id`).
    pub fn device_id(&self) -> u32 {
        self.device_id
    }
    /// Global rank (`rank_id`), in `0..world_size`.
    pub fn rank(&self) -> u32 {
        self.rank
    }
    /// The NPU's NIC address (`device_ip`); `None` only on single-server tables.
    pub fn device_ip(&self) -> Option<IpAddr> {
        self.device_ip
    }
    /// Id inside the super pod (`super_device_id`, version 1.2 only).
    pub fn super_device_id(&self) -> Option<u32> {
        self.super_device_id
    }
}

/// One server (`server_list[i]`) of a validated rank table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    server_id: String,
    host_ip: Option<IpAddr>,
    devices: Vec<Device>,
}

impl Server {
    /// The server's id (`server_id`), unique in the table, at most 64 characters.
    pub fn server_id(&self) -> &str {
        &self.server_id
    }
    /// The host address (`host_ip`), if the table gives one.
    pub fn host_ip(&self) -> Option<IpAddr> {
        self.host_ip
    }
    /// The server's devices, in rank order (their ranks are contiguous).
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }
}

/// One super pod (`super_pod_list[i]`, version 1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuperPod {
    super_pod_id: String,
    servers: Vec<usize>,
}

impl SuperPod {
    /// The super pod's id (`super_pod_id`).
    pub fn super_pod_id(&self) -> &str {
        &self.super_pod_id
    }
    /// Indices into [`RankTable::servers`] of the servers in this super pod.
    pub fn servers(&self) -> &[usize] {
        &self.servers
    }
}

/// A validated HCCL rank table.
///
/// Invariants (checked by validation, relied on downstream): status is
/// `completed`; ranks are exactly `0..world_size`, each server's ranks form
/// one contiguous block; server ids are unique; device ids are unique per
/// server; device IPs are valid, unique, of one address family, and present
/// whenever there is more than one server; in version 1.2 every server is in
/// exactly one super pod and `super_device_id` is unique within a super pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankTable {
    version: Version,
    servers: Vec<Server>,
    super_pods: Vec<SuperPod>,
    raw: RawRankTable,
    ignored_keys: Vec<String>,
}

fn read(path: &Path) -> Result<Vec<u8>, TopologyError> {
    std::fs::read(path).map_err(|error| TopologyError::Io {
        path: path.to_path_buf(),
        error,
    })
}

/// `path`: where `inner` occurred, in serde_path_to_error's notation (`.`
/// for the top level). `unknown`: keys outside the format, named in the
/// message since a misspelt key is the usual cause of a missing field.
fn syntax_error(
    inner: &serde_json::Error,
    path: String,
    bytes: &[u8],
    unknown: &[String],
) -> TopologyError {
    // A failed full parse of a table with an unsupported version is reported
    // as that, since the fields of an unknown version may legitimately differ.
    if let Ok(probe) = serde_json::from_slice::<VersionProbe>(bytes) {
        if let Some(v) = probe.version {
            let s = match &v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if Version::parse(&s).is_none() {
                return TopologyError::RankTableInvalid {
                    problems: vec![validate::unsupported_version(&s)],
                };
            }
        }
    }
    TopologyError::RankTableSyntax {
        line: inner.line(),
        column: inner.column(),
        // `.` is serde_path_to_error's top level; `?` a key it never read
        // (the text ended first), which names nothing.
        path: match path.trim_end_matches(".?").trim_end_matches('?') {
            "." => String::new(),
            p => p.to_string(),
        },
        message: {
            let mut m = if inner.is_eof() && bytes.trim_ascii().is_empty() {
                "the file is empty".to_string()
            } else if inner.is_eof() {
                "end of file inside the table (a truncated file?)".to_string()
            } else {
                inner
                    .to_string()
                    .split(" at line ")
                    .next()
                    .unwrap_or("")
                    .to_string()
            };
            if !unknown.is_empty() {
                m.push_str(&format!(
                    " (keys outside HCCL's format: {})",
                    unknown.join(", ")
                ));
            }
            m
        },
    }
}

/// The UTF-8 byte-order mark some editors write at the start of a file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Parses and validates `bytes`. `strict`: keys outside HCCL's format are
/// problems; otherwise they are ignored with a warning that names them.
fn load(bytes: &[u8], strict: bool) -> Result<RankTable, TopologyError> {
    let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
    // The untyped value names keys the typed parse ignores and files of
    // another layout; text that is not JSON is left to the typed parse,
    // which reports where it breaks.
    let unknown = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(value) => {
            if let Some(p) = keys::foreign_layout(&value) {
                return Err(TopologyError::RankTableInvalid { problems: vec![p] });
            }
            keys::unknown_keys(&value)
        }
        Err(_) => Vec::new(),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let raw: RawRankTable = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| syntax_error(e.inner(), e.path().to_string(), bytes, &unknown))?;
    // Text after the table is an error, as in `serde_json::from_slice`.
    de.end()
        .map_err(|e| syntax_error(&e, String::new(), bytes, &unknown))?;
    if strict && !unknown.is_empty() {
        let mut problems: Vec<Problem> = unknown.iter().map(|k| unknown_key(k)).collect();
        if let Err(more) = validate::validate(raw) {
            problems.extend(more);
        }
        return Err(TopologyError::RankTableInvalid { problems });
    }
    let mut table =
        validate::validate(raw).map_err(|problems| TopologyError::RankTableInvalid { problems })?;
    if !unknown.is_empty() {
        tracing::warn!(
            keys = %unknown.join(", "),
            "rank table: ignoring {} key{} outside HCCL's rank table format: {}",
            unknown.len(),
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", ")
        );
    }
    table.ignored_keys = unknown;
    Ok(table)
}

/// The strict-mode problem for a key outside HCCL's format.
fn unknown_key(path: &str) -> Problem {
    problem(
        path,
        "is not a key of HCCL's rank table format (misspelt, or added by another tool); \
         without --strict it is ignored with a warning",
    )
}

impl RankTable {
    /// Parses and validates a rank table from JSON text.
    ///
    /// Keys outside HCCL's format (tools such as MindX add pod and container
    /// fields) are ignored with a `tracing` warning that names them; see
    /// [`RankTable::ignored_keys`] and [`RankTable::from_slice_strict`]. A
    /// leading UTF-8 byte-order mark is skipped.
    ///
    /// # Errors
    /// [`TopologyError::RankTableSyntax`] when the text is not JSON of the
    /// rank table shape (with line and column), [`TopologyError::RankTableInvalid`]
    /// listing every rule broken otherwise, or naming the layout when the
    /// file is another known shape (a `cluster` list, `group_list`,
    /// `server_group_list`).
    pub fn parse(json: &str) -> Result<RankTable, TopologyError> {
        Self::from_slice(json.as_bytes())
    }

    /// Parses and validates a rank table from bytes (UTF-8 JSON). Any input,
    /// including empty or binary garbage, gives a value or an error, never a panic.
    ///
    /// # Errors
    /// As [`RankTable::parse`].
    pub fn from_slice(bytes: &[u8]) -> Result<RankTable, TopologyError> {
        load(bytes, false)
    }

    /// As [`RankTable::from_slice`], but every key outside HCCL's format is a
    /// problem (`hccl ranktable check --strict`).
    ///
    /// # Errors
    /// As [`RankTable::parse`]; unknown keys are listed first in
    /// [`TopologyError::RankTableInvalid`].
    pub fn from_slice_strict(bytes: &[u8]) -> Result<RankTable, TopologyError> {
        load(bytes, true)
    }

    /// Reads, parses and validates a rank table file.
    ///
    /// # Errors
    /// [`TopologyError::Io`] if the file cannot be read, else as [`RankTable::parse`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<RankTable, TopologyError> {
        Self::from_slice(&read(path.as_ref())?)
    }

    /// As [`RankTable::from_file`], with keys outside HCCL's format as
    /// problems (see [`RankTable::from_slice_strict`]).
    ///
    /// # Errors
    /// As [`RankTable::from_file`].
    pub fn from_file_strict(path: impl AsRef<Path>) -> Result<RankTable, TopologyError> {
        Self::from_slice_strict(&read(path.as_ref())?)
    }

    /// The JSON paths of the keys that were ignored because they are not in
    /// HCCL's format (`server_list[0].pod_name`): parents first, each
    /// object's keys sorted.
    pub fn ignored_keys(&self) -> &[String] {
        &self.ignored_keys
    }

    /// Serialises the table back to HCCL JSON (pretty-printed, all values
    /// strings, optional fields kept as they were read).
    pub fn to_json(&self) -> String {
        // Serialising plain strings, vectors and options cannot fail.
        serde_json::to_string_pretty(&self.raw).unwrap_or_default()
    }

    /// The format version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The servers, in file order.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// The super pods (version 1.2); empty for version 1.0.
    pub fn super_pods(&self) -> &[SuperPod] {
        &self.super_pods
    }

    /// Number of ranks (devices) in the table.
    pub fn world_size(&self) -> u32 {
        self.servers.iter().map(|s| s.devices.len() as u32).sum()
    }
}

/// Builds a problem (helper for the validation and generation modules).
pub(crate) fn problem(path: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem::new(path, message)
}

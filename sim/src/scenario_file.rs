//! Scenario files: several ops in sequence over several named
//! communicators, as JSON, for `hccl sim --scenario FILE`.
//!
//! ```json
//! {
//!   "preset": "leaf-spine", "servers": 2,
//!   "communicators": {"a": [0, 1], "b": [0, 1]},
//!   "ops": [
//!     {"comm": "a", "collective": "all_reduce", "count": 1024},
//!     {"comm": "b", "collective": "broadcast", "count": 64, "root": 1, "algo": "ring"}
//!   ],
//!   "rank_orders": {"1": [1, 0]}
//! }
//! ```
//!
//! - `preset`/`servers`: the fabric (optional; the command line can give one).
//! - `communicators`: name → fabric ranks (communicator rank `i` is the
//!   `i`-th); `world` (every rank) exists unless given.
//! - `ops`: run in this order on every member; `comm` defaults to `world`;
//!   `dtype` (default `fp32`), `op` (default `sum`), `root` (default 0),
//!   `algo` (as `HCCL_ALGO` levels or a flat name; default the selector),
//!   `in_place` (default false).
//! - `rank_orders`: fabric rank → the op indices it runs, in its order
//!   (how two communicators called in different orders are written).

use std::collections::BTreeMap;
use std::path::Path;

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::select::{select, CostModel, HcclAlgo};
use hccl_algos::{DataType, ReduceOp};
use hccl_topology::Fabric;
use serde::{Deserialize, Serialize};

use crate::error::SimError;
use crate::scenario::{CommId, OpId, Scenario};

/// One op of a scenario file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpec {
    /// Communicator name (default `world`).
    #[serde(default = "world")]
    pub comm: String,
    /// Collective, as hccl_test names it (`all_reduce`, `broadcast`, ...).
    pub collective: String,
    /// Count in elements, with HCCL's meaning for the collective.
    pub count: u64,
    /// Element type (default `fp32`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// Reduce op (default `sum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Root, a communicator rank (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
    /// Algorithm (default: the selector, or `HCCL_ALGO` when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algo: Option<String>,
    /// Send and receive buffers alias.
    #[serde(default)]
    pub in_place: bool,
}

fn world() -> String {
    "world".into()
}

/// A parsed scenario file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Fabric preset name, if the file names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Servers of the preset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<u32>,
    /// Communicators: name → fabric ranks.
    #[serde(default)]
    pub communicators: BTreeMap<String, Vec<u32>>,
    /// The ops, in order.
    pub ops: Vec<OpSpec>,
    /// Fabric rank (as a string key) → op indices it runs, in its order.
    #[serde(default)]
    pub rank_orders: BTreeMap<String, Vec<usize>>,
}

/// What is wrong with a scenario file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioFileError {
    /// The file could not be read.
    #[error("scenario {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// Not JSON of the scenario shape (unknown fields included).
    #[error("scenario: line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser says.
        message: String,
    },
    /// A field has a bad value.
    #[error("scenario: {path} = {value}: {reason}")]
    Invalid {
        /// JSON path, e.g. `ops[1].dtype`.
        path: String,
        /// The value found.
        value: String,
        /// The rule it breaks and what to do.
        reason: String,
    },
    /// Building the scenario failed.
    #[error("scenario: {0}")]
    Sim(#[from] SimError),
}

fn invalid(
    path: String,
    value: impl std::fmt::Display,
    reason: impl Into<String>,
) -> ScenarioFileError {
    ScenarioFileError::Invalid {
        path,
        value: value.to_string(),
        reason: reason.into(),
    }
}

impl ScenarioFile {
    /// Parses JSON text (unknown fields are rejected).
    ///
    /// # Errors
    /// [`ScenarioFileError::Syntax`] with line and column.
    pub fn from_json(text: &str) -> Result<ScenarioFile, ScenarioFileError> {
        serde_json::from_str(text).map_err(|e| ScenarioFileError::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string().split(" at line ").next().unwrap_or("").into(),
        })
    }

    /// Reads and parses a file.
    ///
    /// # Errors
    /// [`ScenarioFileError::Io`], else as [`ScenarioFile::from_json`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<ScenarioFile, ScenarioFileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioFileError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        ScenarioFile::from_json(&text)
    }

    /// Builds the scenario on `fabric`; ops without `algo` use `env`
    /// (`HCCL_ALGO`) for their kind, else the selector.
    ///
    /// # Errors
    /// [`ScenarioFileError::Invalid`] naming the path and value of an
    /// unknown communicator, collective, dtype, op or algorithm, a rank
    /// order of an unknown rank or op; [`ScenarioFileError::Sim`] for
    /// communicators the fabric cannot hold.
    pub fn build<'f>(
        &self,
        fabric: &'f Fabric,
        env: Option<&HcclAlgo>,
    ) -> Result<Scenario<'f>, ScenarioFileError> {
        let mut sc = Scenario::new(fabric);
        let mut comms: BTreeMap<&str, CommId> = BTreeMap::new();
        for (name, ranks) in &self.communicators {
            comms.insert(name, sc.communicator(name, ranks)?);
        }
        if !comms.contains_key("world") {
            comms.insert("world", sc.world());
        }
        let cluster = fabric.cluster();
        for (i, o) in self.ops.iter().enumerate() {
            let path = |f: &str| format!("ops[{i}].{f}");
            let comm = *comms.get(o.comm.as_str()).ok_or_else(|| {
                invalid(
                    path("comm"),
                    format!("\"{}\"", o.comm),
                    format!(
                        "no such communicator; define it in `communicators` (known: {})",
                        comms.keys().copied().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            let members = self
                .communicators
                .get(&o.comm)
                .cloned()
                .unwrap_or_else(|| (0..fabric.world_size()).collect());
            let n = members.len() as u32;
            let parse_err = |f: &str, v: &str, e: &dyn std::fmt::Display| {
                invalid(path(f), format!("\"{v}\""), e.to_string())
            };
            let kind: CollectiveKind = o
                .collective
                .parse()
                .map_err(|e| parse_err("collective", &o.collective, &e))?;
            let dtype: DataType = match &o.dtype {
                Some(d) => d.parse().map_err(|e| parse_err("dtype", d, &e))?,
                None => DataType::Fp32,
            };
            let op: ReduceOp = match &o.op {
                Some(d) => d.parse().map_err(|e| parse_err("op", d, &e))?,
                None => ReduceOp::Sum,
            };
            let args =
                match kind {
                    CollectiveKind::AllToAllV
                    | CollectiveKind::AllGatherV
                    | CollectiveKind::ReduceScatterV
                    | CollectiveKind::SendRecv
                    | CollectiveKind::BatchSendRecv => return Err(invalid(
                        path("collective"),
                        format!("\"{}\"", o.collective),
                        "V and point-to-point collectives are not supported in scenario files yet",
                    )),
                    _ => CollectiveArgs::new(kind, o.count, dtype, n)
                        .with_op(op)
                        .with_root(o.root.unwrap_or(0))
                        .with_in_place(o.in_place),
                };
            args.validate()
                .map_err(|e| invalid(format!("ops[{i}]"), &o.collective, e.to_string()))?;
            let spec: AlgoSpec = match &o.algo {
                Some(a) => a.parse().map_err(|e| parse_err("algo", a, &e))?,
                None => {
                    let layout = GroupLayout::from_parts(
                        members
                            .iter()
                            .map(|&r| cluster.server_of(r).unwrap_or(0))
                            .collect(),
                        members
                            .iter()
                            .map(|&r| cluster.super_pod_of(r).unwrap_or(0))
                            .collect(),
                    )
                    .unwrap_or_else(|_| GroupLayout::flat(n));
                    select(&args, &layout, &CostModel::default(), env).spec
                }
            };
            sc.collective(comm, args, spec)?;
        }
        for (key, ops) in &self.rank_orders {
            let path = format!("rank_orders.{key}");
            let rank: u32 = key.parse().map_err(|_| {
                invalid(path.clone(), format!("\"{key}\""), "keys are fabric ranks")
            })?;
            if let Some(&bad) = ops.iter().find(|&&o| o >= self.ops.len()) {
                return Err(invalid(
                    path,
                    bad,
                    format!("the file has ops 0..{}", self.ops.len()),
                ));
            }
            let ids: Vec<OpId> = ops.iter().map(|&o| OpId(o)).collect();
            sc.rank_order(rank, &ids)
                .map_err(|e| invalid(path, format!("{ops:?}"), e.to_string()))?;
        }
        Ok(sc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_topology::{build_preset_with, Preset, PresetOptions};

    fn fabric() -> Fabric {
        build_preset_with(Preset::LeafSpine, 4, &PresetOptions::default()).unwrap()
    }

    fn build_err(json: &str) -> String {
        let f = fabric();
        match ScenarioFile::from_json(json).and_then(|s| s.build(&f, None).map(|_| ())) {
            Ok(()) => panic!("accepted: {json}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn builds_communicators_ops_and_orders() {
        let f = fabric();
        let s = ScenarioFile::from_json(
            r#"{"communicators": {"a": [0, 1], "b": [1, 0]},
                "ops": [{"comm": "a", "collective": "all_reduce", "count": 8},
                        {"comm": "b", "collective": "broadcast", "count": 8, "root": 1, "algo": "ring"},
                        {"collective": "all_gather", "count": 2, "dtype": "fp16"}],
                "rank_orders": {"0": [1, 0, 2], "1": [1, 0, 2]}}"#,
        )
        .unwrap();
        let rep = s.build(&f, None).unwrap().run().unwrap();
        assert!(rep.stall.is_none());
        let comms: Vec<&str> = rep.ops.iter().map(|o| o.comm.as_str()).collect();
        assert_eq!(comms, ["a", "b", "world"]);
        // Both members call 'b' first, as their rank orders say.
        assert_eq!(rep.ops[1].start_ns, vec![Some(0), Some(0)]);
        assert!(rep.ops[0].start_ns.iter().all(|t| t.unwrap() > 0));
    }

    #[test]
    fn errors_name_path_and_value() {
        let e = build_err(r#"{"ops": [{"collective": "all_reduce", "count": 8, "colour": 1}]}"#);
        assert!(e.contains("colour") && e.contains("line 1"), "{e}");
        let e = build_err(r#"{"ops": [{"comm": "tp", "collective": "all_reduce", "count": 8}]}"#);
        assert!(
            e.contains("ops[0].comm = \"tp\"") && e.contains("world"),
            "{e}"
        );
        let e =
            build_err(r#"{"ops": [{"collective": "all_reduce", "count": 8, "dtype": "fp33"}]}"#);
        assert!(e.contains("ops[0].dtype = \"fp33\""), "{e}");
        let e = build_err(
            r#"{"ops": [{"collective": "all_reduce", "count": 8}], "rank_orders": {"1": [3]}}"#,
        );
        assert!(
            e.contains("rank_orders.1 = 3") && e.contains("ops 0..1"),
            "{e}"
        );
        let e = build_err(r#"{"communicators": {"a": [0, 9]}, "ops": []}"#);
        assert!(e.contains("rank 9"), "{e}");
    }
}

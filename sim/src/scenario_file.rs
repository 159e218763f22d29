//! Scenario files: several ops in sequence over several named
//! communicators, as JSON, for `hccl sim --scenario FILE`.
//!
//! ```json
//! {
//!   "preset": "leaf-spine", "servers": 2,
//!   "communicators": {"a": [0, 1], "b": [0, 1]},
//!   "ops": [
//!     {"comm": "a", "collective": "all_reduce", "count": 1024},
//!     {"comm": "b", "collective": "broadcast", "count": 64, "root": 1, "algo": "ring"},
//!     {"comm": "a", "collective": "all_gather_v", "counts": [3, 5]},
//!     {"collective": "alltoallv", "matrix": [[0, 2], [7, 1]], "dtype": "int8"},
//!     {"comm": "a", "collective": "send_recv", "pairs": [{"src": 0, "dst": 1, "count": 16}]}
//!   ],
//!   "rank_orders": {"1": [1, 0]}
//! }
//! ```
//!
//! - `preset`/`servers`: the fabric (optional; the command line can give one).
//! - `communicators`: name → fabric ranks (communicator rank `i` is the
//!   `i`-th); `world` (every rank) exists unless given.
//! - `ops`: run in this order on every member; `comm` defaults to `world`;
//!   `count` (elements); `dtype` (default `fp32`), `op` (default `sum`),
//!   `root` (default 0), `algo` (as `HCCL_ALGO` levels or a flat name;
//!   default the selector), `in_place` (default false). The V forms and
//!   point-to-point take their counts instead of `count`:
//!   `all_gather_v` / `reduce_scatter_v` `counts` (one per communicator
//!   rank), `alltoallv` `matrix` (`matrix[i][j]`: rank i to rank j),
//!   `send_recv` (one) / `batch_send_recv` (any number) `pairs` of
//!   communicator ranks. A point-to-point op is one rendezvous of all its
//!   transfers: every transfer starts once its two ranks have started the
//!   op (the simulator has no eager sends); a member with no transfer in
//!   it finishes it at once, and a rank order may leave it out.
//! - `rank_orders`: fabric rank → the op indices it runs, in its order
//!   (how two communicators called in different orders are written).

use std::collections::BTreeMap;
use std::path::Path;

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::{CollectiveArgs, CollectiveKind, P2p};
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
    /// Collective, as hccl_test names it (`all_reduce`, `broadcast`, ...,
    /// `all_gather_v`, `reduce_scatter_v`, `alltoallv`, `send_recv`,
    /// `batch_send_recv`).
    pub collective: String,
    /// Count in elements, with HCCL's meaning for the collective; required
    /// except for the V forms and point-to-point, which take theirs from
    /// `counts`, `matrix` or `pairs` (and refuse a `count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// `all_gather_v` / `reduce_scatter_v`: elements of each communicator
    /// rank's block, one entry per rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<Vec<u64>>,
    /// `alltoallv`: `matrix[i][j]` elements communicator rank `i` sends to
    /// rank `j`, one row and column per rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<Vec<Vec<u64>>>,
    /// `send_recv` (one) / `batch_send_recv` (any number): the transfers,
    /// between communicator ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs: Option<Vec<PairSpec>>,
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

/// One transfer of a `send_recv` / `batch_send_recv` op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairSpec {
    /// Sending communicator rank.
    pub src: u32,
    /// Receiving communicator rank.
    pub dst: u32,
    /// Elements moved.
    pub count: u64,
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

/// The field of `kind`'s own counts (`None`: it takes `count`).
fn counts_field(kind: CollectiveKind) -> Option<&'static str> {
    match kind {
        CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => Some("counts"),
        CollectiveKind::AllToAllV => Some("matrix"),
        CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => Some("pairs"),
        _ => None,
    }
}

impl OpSpec {
    /// The call of op `i` (of `kind`, on a communicator of `n` ranks),
    /// from `count` or the kind's own counts field.
    fn args(
        &self,
        i: usize,
        kind: CollectiveKind,
        dtype: DataType,
        op: ReduceOp,
        n: u32,
    ) -> Result<CollectiveArgs, ScenarioFileError> {
        let path = |f: &str| format!("ops[{i}].{f}");
        let own = counts_field(kind);
        let given: [(&str, bool); 4] = [
            ("count", self.count.is_some()),
            ("counts", self.counts.is_some()),
            ("matrix", self.matrix.is_some()),
            ("pairs", self.pairs.is_some()),
        ];
        let wanted = own.unwrap_or("count");
        if let Some((f, _)) = given.iter().find(|(f, g)| *g && *f != wanted) {
            return Err(invalid(
                path(f),
                format!("(given for \"{}\")", self.collective),
                format!(
                    "{} takes `{wanted}`, not `{f}`; leave `{f}` out",
                    kind.name()
                ),
            ));
        }
        if !given.iter().any(|(f, g)| *g && *f == wanted) {
            let what = match wanted {
                "counts" => "the elements of each communicator rank's block, one per rank",
                "matrix" => "matrix[i][j], the elements rank i sends to rank j",
                "pairs" => "the transfers, [{\"src\": 0, \"dst\": 1, \"count\": 8}, ...]",
                _ => "the count in elements",
            };
            return Err(invalid(
                path(wanted),
                "(missing)",
                format!("{} needs `{wanted}`: {what}", kind.name()),
            ));
        }
        let rows = |field: &str, len: usize, index: Option<usize>| {
            let at = index.map_or_else(|| path(field), |r| format!("{}[{r}]", path(field)));
            invalid(
                at,
                format!("{len} entries"),
                format!(
                    "the communicator '{}' has {n} ranks; give one entry per rank",
                    self.comm
                ),
            )
        };
        let bad = |field: &str, e: &dyn std::fmt::Display| {
            invalid(path(field), "(values)", e.to_string())
        };
        Ok(match kind {
            CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => {
                let c = self.counts.clone().unwrap_or_default();
                if c.len() != n as usize {
                    return Err(rows("counts", c.len(), None));
                }
                CollectiveArgs::v_counts(kind == CollectiveKind::ReduceScatterV, c, dtype)
                    .map_err(|e| bad("counts", &e))?
                    .with_op(op)
                    .with_in_place(self.in_place)
            }
            CollectiveKind::AllToAllV => {
                let m = self.matrix.clone().unwrap_or_default();
                if m.len() != n as usize {
                    return Err(rows("matrix", m.len(), None));
                }
                if let Some((r, row)) = m
                    .iter()
                    .enumerate()
                    .find(|(_, row)| row.len() != n as usize)
                {
                    return Err(rows("matrix", row.len(), Some(r)));
                }
                CollectiveArgs::all_to_all_v(m, dtype).map_err(|e| bad("matrix", &e))?
            }
            CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => {
                let pairs = (self.pairs.iter().flatten())
                    .map(|p| P2p {
                        src: p.src,
                        dst: p.dst,
                        count: p.count,
                    })
                    .collect();
                CollectiveArgs::p2p(kind == CollectiveKind::BatchSendRecv, pairs, dtype, n)
                    .with_in_place(self.in_place)
            }
            _ => CollectiveArgs::new(kind, self.count.unwrap_or(0), dtype, n)
                .with_op(op)
                .with_root(self.root.unwrap_or(0))
                .with_in_place(self.in_place),
        })
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
            let args = o.args(i, kind, dtype, op, n)?;
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
    fn v_and_point_to_point_ops_move_what_their_counts_say() {
        use crate::scenario::{Mode, OpId};
        let f = fabric();
        let s = ScenarioFile::from_json(
            r#"{"communicators": {"a": [2, 0]},
                "ops": [{"comm": "a", "collective": "alltoallv", "matrix": [[1, 2], [0, 3]], "dtype": "int8"},
                        {"comm": "a", "collective": "all_gather_v", "counts": [2, 1], "dtype": "int8"},
                        {"collective": "batch_send_recv", "dtype": "int8",
                         "pairs": [{"src": 0, "dst": 3, "count": 2}, {"src": 3, "dst": 0, "count": 1}]}],
                "rank_orders": {"1": []}}"#,
        )
        .unwrap();
        let mut sc = s.build(&f, None).unwrap().mode(Mode::Data);
        // Communicator 'a': rank 0 is fabric rank 2, rank 1 fabric rank 0.
        sc.set_inputs(OpId(0), vec![vec![10, 11, 12], vec![20, 21, 22]])
            .unwrap();
        sc.set_inputs(OpId(1), vec![vec![1, 2], vec![3]]).unwrap();
        sc.set_inputs(OpId(2), vec![vec![5, 6], vec![], vec![], vec![9]])
            .unwrap();
        let rep = sc.run().unwrap();
        assert!(rep.stall.is_none(), "{:?}", rep.stall);
        let out = |op: usize| rep.ops[op].outputs.clone().unwrap();
        // matrix[i][j] from rank i to rank j, in rank order.
        assert_eq!(out(0), [vec![10], vec![11, 12, 20, 21, 22]]);
        assert_eq!(out(1), [vec![1, 2, 3], vec![1, 2, 3]]);
        // Fabric rank 1 has no transfer and no op; 2 neither, but runs it.
        let o = out(2);
        assert_eq!((&o[0], &o[3]), (&vec![9], &vec![5, 6]));
        assert_eq!(rep.ops[2].end_ns[1], None);
        assert!(rep.ops[2].end_ns[2].is_some());
    }

    #[test]
    fn v_and_point_to_point_counts_are_checked() {
        let e = build_err(r#"{"ops": [{"collective": "all_gather_v", "count": 8}]}"#);
        assert!(
            e.contains("ops[0].count") && e.contains("takes `counts`"),
            "{e}"
        );
        let e = build_err(r#"{"ops": [{"collective": "reduce_scatter_v"}]}"#);
        assert!(
            e.contains("ops[0].counts = (missing)") && e.contains("one per rank"),
            "{e}"
        );
        let e = build_err(r#"{"ops": [{"collective": "all_gather_v", "counts": [1, 2]}]}"#);
        assert!(
            e.contains("ops[0].counts = 2 entries") && e.contains("has 4 ranks"),
            "{e}"
        );
        let e = build_err(
            r#"{"ops": [{"collective": "alltoallv", "matrix": [[1, 2, 3, 4], [1], [0, 0, 0, 0], [0, 0, 0, 0]]}]}"#,
        );
        assert!(e.contains("ops[0].matrix[1] = 1 entries"), "{e}");
        let e = build_err(
            r#"{"ops": [{"collective": "send_recv", "pairs": [{"src": 0, "dst": 7, "count": 1}]}]}"#,
        );
        assert!(e.contains("ops[0]") && e.contains('7'), "{e}");
        let e = build_err(r#"{"ops": [{"collective": "all_reduce"}]}"#);
        assert!(e.contains("ops[0].count = (missing)"), "{e}");
        let e = build_err(r#"{"ops": [{"collective": "all_reduce", "count": 4, "pairs": []}]}"#);
        assert!(
            e.contains("ops[0].pairs") && e.contains("takes `count`"),
            "{e}"
        );
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

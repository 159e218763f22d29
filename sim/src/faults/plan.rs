//! The fault plan: what goes wrong, when. A JSON file or the builder API.
//!
//! ```json
//! {"faults": [
//!   {"kind": "link_down", "link": ["npu3", "leaf0"], "at_ns": 50000},
//!   {"kind": "link_degraded", "link": {"ranks": [0, 8]}, "bandwidth_factor": 0.25,
//!    "at_ns": 0, "until_ns": 2000000},
//!   {"kind": "jitter", "max_ns": 500},
//!   {"kind": "drop", "from": 2, "to": 3, "nth": 1},
//!   {"kind": "drop", "probability": 0.001},
//!   {"kind": "crash", "rank": 5, "at_ns": 120000},
//!   {"kind": "crash", "rank": 6, "at_op": 2},
//!   {"kind": "slow_rank", "rank": 1, "delay_ns": 20000},
//!   {"kind": "skip", "rank": 7, "op": 1},
//!   {"kind": "wrong_args", "rank": 4, "op": 0, "count": 512}
//! ]}
//! ```
//!
//! Ranks are fabric ranks; `op` / `at_op` are scenario op indices (the `#i`
//! printed by `hccl sim`, from 0); times are virtual ns from the start of the
//! run, each at most [`hccl_topology::limits::MAX_TIME_NS`] (2147483647 s,
//! `HCCL_EXEC_TIMEOUT`'s longest). Faults combine: link factors multiply,
//! jitters and slow-rank delays add (saturating: a sum past `u64::MAX` ns is
//! "never"), any matching drop
//! drops. A drop's `nth` counts the messages from `from` to `to` over the
//! whole run, or, when `op` is given, within that op only (`"nth": 2,
//! "op": 1`: the second message from 0 to 1 of op #1). A fault that never
//! fires (a crash after its rank finished, an n-th message that never came)
//! is listed in the run's [`super::FaultLog::unfired`]. Random faults (`jitter`, `drop` with `probability`) draw from the
//! engine's seeded RNG, so the same seed gives the same run.

use std::path::Path;

use hccl_algos::{DataType, ReduceOp};
use hccl_topology::limits;
use serde::{Deserialize, Serialize};

use super::FaultError;

/// Which link(s) a link fault hits.
///
/// JSON: `["npu3", "leaf0"]` (two node names, as `hccl topo show` prints
/// them: the link between them), `17` (a directed link id, a fabric edge
/// index), or `{"ranks": [0, 8]}` (every link of the route from rank 0 to
/// rank 8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LinkRef {
    /// The link between two named nodes.
    Nodes([String; 2]),
    /// A directed link by id (fabric edge index).
    Id(u32),
    /// Every link of the fabric's route between two ranks.
    Route {
        /// The two fabric ranks.
        ranks: [u32; 2],
    },
}

impl LinkRef {
    /// The link between nodes `a` and `b` (names as in the fabric).
    pub fn nodes(a: &str, b: &str) -> LinkRef {
        LinkRef::Nodes([a.to_string(), b.to_string()])
    }

    /// Every link of the route between fabric ranks `a` and `b`.
    pub fn route(a: u32, b: u32) -> LinkRef {
        LinkRef::Route { ranks: [a, b] }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One fault. JSON: an object with `"kind"` and the variant's fields
/// (snake_case); unknown fields are rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Fault {
    /// The link carries nothing from `at_ns` until `until_ns` (forever if
    /// absent): flows on it stop and wait. Both directions unless `directed`.
    LinkDown {
        /// Which link.
        link: LinkRef,
        /// Only the direction from the first node (or rank) to the second.
        #[serde(default, skip_serializing_if = "is_false")]
        directed: bool,
        /// Start, ns.
        #[serde(default)]
        at_ns: u64,
        /// End, ns (exclusive); absent: never comes back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until_ns: Option<u64>,
    },
    /// The link runs at `bandwidth_factor` × its bandwidth (0 < f ≤ 1) from
    /// `at_ns` until `until_ns`.
    LinkDegraded {
        /// Which link.
        link: LinkRef,
        /// Only the direction from the first node (or rank) to the second.
        #[serde(default, skip_serializing_if = "is_false")]
        directed: bool,
        /// Remaining fraction of the bandwidth, in (0, 1].
        bandwidth_factor: f64,
        /// Start, ns.
        #[serde(default)]
        at_ns: u64,
        /// End, ns (exclusive); absent: for the rest of the run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until_ns: Option<u64>,
    },
    /// Every matching message enters the fabric after an extra delay drawn
    /// uniformly from `0..=max_ns` with the seeded RNG.
    Jitter {
        /// Largest extra delay, ns.
        max_ns: u64,
        /// Only messages sent by this fabric rank.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<u32>,
        /// Only messages received by this fabric rank.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<u32>,
    },
    /// Matching messages are lost: the sender completes, the receiver waits
    /// forever. Either `probability` (seeded) or `nth` (the n-th message
    /// from `from` to `to`, counting from 1; needs both; counted within op
    /// `op` when `op` is given, else over the whole run).
    Drop {
        /// Chance that a matching message is lost, in [0, 1].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probability: Option<f64>,
        /// Drop exactly the n-th message from `from` to `to` (1 = the first),
        /// counted within `op` when it is given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nth: Option<u64>,
        /// Only messages sent by this fabric rank.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<u32>,
        /// Only messages received by this fabric rank.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<u32>,
        /// Only messages of this op (scenario index).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        op: Option<usize>,
    },
    /// The rank stops for good: at virtual time `at_ns`, or when it reaches
    /// op `at_op` (before calling it). Exactly one of the two.
    Crash {
        /// Fabric rank.
        rank: u32,
        /// When, ns.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ns: Option<u64>,
        /// Before which op (scenario index).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_op: Option<usize>,
    },
    /// The rank starts each of its ops `delay_ns` late (host-side slowness).
    SlowRank {
        /// Fabric rank.
        rank: u32,
        /// Extra delay before each op, ns.
        delay_ns: u64,
    },
    /// The rank never calls op `op`: it goes on to its next op.
    Skip {
        /// Fabric rank.
        rank: u32,
        /// The op it skips (scenario index).
        op: usize,
    },
    /// The rank calls op `op` with other arguments (at least one field).
    WrongArgs {
        /// Fabric rank.
        rank: u32,
        /// The op (scenario index; must be a collective).
        op: usize,
        /// Count it passes instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u64>,
        /// Element type it passes instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dtype: Option<DataType>,
        /// Reduce op it passes instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reduce_op: Option<ReduceOp>,
        /// Root it passes instead (communicator rank).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        root: Option<u32>,
    },
}

impl Fault {
    /// The JSON `kind` of the fault.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::LinkDown { .. } => "link_down",
            Fault::LinkDegraded { .. } => "link_degraded",
            Fault::Jitter { .. } => "jitter",
            Fault::Drop { .. } => "drop",
            Fault::Crash { .. } => "crash",
            Fault::SlowRank { .. } => "slow_rank",
            Fault::Skip { .. } => "skip",
            Fault::WrongArgs { .. } => "wrong_args",
        }
    }

    /// The fault for people: its kind and fields, e.g. `drop of message 1
    /// from rank 0 to rank 1 in op #2` or `crash of rank 5 at 120000 ns`.
    pub fn describe(&self) -> String {
        let opt =
            |name: &str, v: Option<String>| v.map(|v| format!(" {name} {v}")).unwrap_or_default();
        let window = |at: u64, until: Option<u64>| match until {
            Some(u) => format!(" from {at} ns until {u} ns"),
            None => format!(" from {at} ns"),
        };
        let link = |l: &LinkRef, directed: bool| {
            let arrow = if directed { "->" } else { "<->" };
            match l {
                LinkRef::Nodes([a, b]) => format!("{a} {arrow} {b}"),
                LinkRef::Id(id) => format!("link {id}"),
                LinkRef::Route { ranks: [a, b] } => format!("route rank {a} {arrow} rank {b}"),
            }
        };
        let ranks = |from: Option<u32>, to: Option<u32>| {
            format!(
                "{}{}",
                opt("from rank", from.map(|r| r.to_string())),
                opt("to rank", to.map(|r| r.to_string()))
            )
        };
        match self {
            Fault::LinkDown {
                link: l,
                directed,
                at_ns,
                until_ns,
            } => format!(
                "link_down of {}{}",
                link(l, *directed),
                window(*at_ns, *until_ns)
            ),
            Fault::LinkDegraded {
                link: l,
                directed,
                bandwidth_factor,
                at_ns,
                until_ns,
            } => format!(
                "link_degraded of {} to {bandwidth_factor} x bandwidth{}",
                link(l, *directed),
                window(*at_ns, *until_ns)
            ),
            Fault::Jitter { max_ns, from, to } => {
                format!("jitter of up to {max_ns} ns{}", ranks(*from, *to))
            }
            Fault::Drop {
                probability,
                nth,
                from,
                to,
                op,
            } => format!(
                "drop of {}{}{}",
                match (nth, probability) {
                    (Some(n), _) => format!("message {n}"),
                    (None, Some(p)) => format!("messages with probability {p}"),
                    (None, None) => "messages".into(),
                },
                ranks(*from, *to),
                opt("in op", op.map(|o| format!("#{o}")))
            ),
            Fault::Crash { rank, at_ns, at_op } => format!(
                "crash of rank {rank}{}{}",
                opt("at", at_ns.map(|t| format!("{t} ns"))),
                opt("before op", at_op.map(|o| format!("#{o}")))
            ),
            Fault::SlowRank { rank, delay_ns } => {
                format!("slow_rank: rank {rank} starts each op {delay_ns} ns late")
            }
            Fault::Skip { rank, op } => format!("skip: rank {rank} never calls op #{op}"),
            Fault::WrongArgs {
                rank,
                op,
                count,
                dtype,
                reduce_op,
                root,
            } => format!(
                "wrong_args: rank {rank} calls op #{op} with{}{}{}{}",
                opt("count", count.map(|v| v.to_string())),
                opt("dtype", dtype.map(|v| v.to_string())),
                opt("reduce_op", reduce_op.map(|v| v.to_string())),
                opt("root", root.map(|v| v.to_string()))
            ),
        }
    }
}

/// A list of faults (JSON: `{"faults": [...]}`), built from a file or with
/// the builder methods. The empty plan is the plain simulation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    /// The faults, in any order.
    pub faults: Vec<Fault>,
}

fn plan_error(path: String, value: &serde_json::Value, reason: String) -> FaultError {
    let mut v = value.to_string();
    if v.len() > 120 {
        v.truncate(117);
        v.push_str("...");
    }
    FaultError::Invalid {
        path,
        value: v,
        reason,
    }
}

impl FaultPlan {
    /// An empty plan.
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    /// Parses a plan from JSON text and checks each fault's own fields
    /// (ranges of probabilities, factors and windows; one of two
    /// alternatives given). Ranks, ops and links are checked against a
    /// fabric and scenario when the plan is resolved.
    ///
    /// # Errors
    /// [`FaultError::Syntax`] for text that is not JSON;
    /// [`FaultError::Invalid`] naming the JSON path (`faults[2].nth`), the
    /// value and the rule, for unknown fields, bad types or values.
    pub fn from_json(text: &str) -> Result<FaultPlan, FaultError> {
        let root: serde_json::Value =
            serde_json::from_str(text).map_err(|e| FaultError::Syntax {
                line: e.line(),
                column: e.column(),
                message: e.to_string().split(" at line ").next().unwrap_or("").into(),
            })?;
        let obj = root.as_object().ok_or_else(|| {
            plan_error(
                "$".into(),
                &root,
                "must be an object {\"faults\": [...]}".into(),
            )
        })?;
        if let Some(k) = obj.keys().find(|k| k.as_str() != "faults") {
            return Err(plan_error(
                format!("$.{k}"),
                &obj[k],
                "is not a field of a fault plan; the only field is `faults`".into(),
            ));
        }
        let list = match obj.get("faults") {
            None => return Ok(FaultPlan::default()),
            Some(serde_json::Value::Array(a)) => a,
            Some(other) => {
                return Err(plan_error(
                    "faults".into(),
                    other,
                    "must be a list of faults".into(),
                ))
            }
        };
        let mut faults = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let f: Fault = serde_json::from_value(v.clone())
                .map_err(|e| plan_error(format!("faults[{i}]"), v, e.to_string()))?;
            faults.push(f);
        }
        let plan = FaultPlan { faults };
        plan.check()?;
        Ok(plan)
    }

    /// Reads and parses a plan file.
    ///
    /// # Errors
    /// [`FaultError::Io`], else as [`FaultPlan::from_json`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<FaultPlan, FaultError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| FaultError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        FaultPlan::from_json(&text)
    }

    /// The plan as pretty JSON (what [`FaultPlan::from_json`] reads).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a fault plan serializes")
    }

    /// Checks each fault's own fields (not against a fabric).
    ///
    /// # Errors
    /// [`FaultError::Invalid`] for the first bad field.
    pub fn check(&self) -> Result<(), FaultError> {
        for (i, f) in self.faults.iter().enumerate() {
            check_fault(i, f)?;
        }
        Ok(())
    }

    /// Adds any fault.
    pub fn with(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }

    /// Link down from `at_ns` for good (both directions).
    pub fn link_down(self, link: LinkRef, at_ns: u64) -> Self {
        self.with(Fault::LinkDown {
            link,
            directed: false,
            at_ns,
            until_ns: None,
        })
    }

    /// Link down over `[at_ns, until_ns)` (both directions).
    pub fn link_down_window(self, link: LinkRef, at_ns: u64, until_ns: u64) -> Self {
        self.with(Fault::LinkDown {
            link,
            directed: false,
            at_ns,
            until_ns: Some(until_ns),
        })
    }

    /// Link at `factor` × bandwidth over `[at_ns, until_ns)` (`None`: to
    /// the end), both directions.
    pub fn link_degraded(
        self,
        link: LinkRef,
        factor: f64,
        at_ns: u64,
        until_ns: Option<u64>,
    ) -> Self {
        self.with(Fault::LinkDegraded {
            link,
            directed: false,
            bandwidth_factor: factor,
            at_ns,
            until_ns,
        })
    }

    /// Seeded jitter of up to `max_ns` on every message.
    pub fn jitter(self, max_ns: u64) -> Self {
        self.with(Fault::Jitter {
            max_ns,
            from: None,
            to: None,
        })
    }

    /// Drops each message with probability `p` (seeded).
    pub fn drop_probability(self, p: f64) -> Self {
        self.with(Fault::Drop {
            probability: Some(p),
            nth: None,
            from: None,
            to: None,
            op: None,
        })
    }

    /// Drops the `nth` message (from 1) from fabric rank `from` to `to`.
    pub fn drop_nth(self, from: u32, to: u32, nth: u64) -> Self {
        self.with(Fault::Drop {
            probability: None,
            nth: Some(nth),
            from: Some(from),
            to: Some(to),
            op: None,
        })
    }

    /// Crashes `rank` at virtual time `at_ns`.
    pub fn crash_at(self, rank: u32, at_ns: u64) -> Self {
        self.with(Fault::Crash {
            rank,
            at_ns: Some(at_ns),
            at_op: None,
        })
    }

    /// Crashes `rank` when it reaches op `op`.
    pub fn crash_at_op(self, rank: u32, op: usize) -> Self {
        self.with(Fault::Crash {
            rank,
            at_ns: None,
            at_op: Some(op),
        })
    }

    /// `rank` starts each op `delay_ns` late.
    pub fn slow_rank(self, rank: u32, delay_ns: u64) -> Self {
        self.with(Fault::SlowRank { rank, delay_ns })
    }

    /// `rank` never calls op `op`.
    pub fn skip(self, rank: u32, op: usize) -> Self {
        self.with(Fault::Skip { rank, op })
    }

    /// `rank` calls op `op` with other arguments (`None`: unchanged).
    pub fn wrong_args(
        self,
        rank: u32,
        op: usize,
        count: Option<u64>,
        dtype: Option<DataType>,
        reduce_op: Option<ReduceOp>,
        root: Option<u32>,
    ) -> Self {
        self.with(Fault::WrongArgs {
            rank,
            op,
            count,
            dtype,
            reduce_op,
            root,
        })
    }
}

fn check_fault(i: usize, f: &Fault) -> Result<(), FaultError> {
    let bad = |field: &str, value: String, reason: &str| FaultError::Invalid {
        path: format!("faults[{i}].{field}"),
        value,
        reason: reason.into(),
    };
    // Every time in range (the engine adds them saturating; past this
    // bound they would mean "never" without saying so).
    let time = |field: &str, ns: Option<u64>| match ns.map(limits::check_ns) {
        Some(Err(why)) => Err(bad(field, ns.unwrap_or(0).to_string(), &why)),
        _ => Ok(()),
    };
    let window = |at: u64, until: Option<u64>| {
        time("at_ns", Some(at))?;
        time("until_ns", until)?;
        match until {
            Some(u) if u <= at => Err(bad(
                "until_ns",
                u.to_string(),
                &format!("must be after at_ns = {at}"),
            )),
            _ => Ok(()),
        }
    };
    match *f {
        Fault::LinkDown {
            at_ns, until_ns, ..
        } => window(at_ns, until_ns),
        Fault::LinkDegraded {
            bandwidth_factor,
            at_ns,
            until_ns,
            ..
        } => {
            if !(bandwidth_factor > 0.0 && bandwidth_factor <= 1.0) {
                return Err(bad(
                    "bandwidth_factor",
                    bandwidth_factor.to_string(),
                    "must be in (0, 1]: the fraction of the bandwidth left (use link_down for 0)",
                ));
            }
            window(at_ns, until_ns)
        }
        Fault::Jitter { max_ns, .. } => time("max_ns", Some(max_ns)),
        Fault::Drop {
            probability,
            nth,
            from,
            to,
            ..
        } => match (probability, nth) {
            (Some(p), None) if (0.0..=1.0).contains(&p) => Ok(()),
            (Some(p), None) => Err(bad("probability", p.to_string(), "must be in [0, 1]")),
            (None, Some(0)) => Err(bad(
                "nth",
                "0".into(),
                "counts from 1 (1 = the first message)",
            )),
            (None, Some(n)) if from.is_none() || to.is_none() => Err(bad(
                if from.is_none() { "from" } else { "to" },
                "null".into(),
                &format!("is needed with nth = {n}: the n-th message from `from` to `to`"),
            )),
            (None, Some(_)) => Ok(()),
            (Some(_), Some(_)) => Err(bad(
                "nth",
                nth.unwrap_or(0).to_string(),
                "give either probability or nth, not both",
            )),
            (None, None) => Err(bad("probability", "null".into(), "give probability or nth")),
        },
        Fault::Crash { at_ns, at_op, .. } => match (at_ns, at_op) {
            (Some(t), _) if limits::check_ns(t).is_err() => time("at_ns", at_ns),
            (Some(_), None) | (None, Some(_)) => Ok(()),
            (Some(t), Some(_)) => Err(bad(
                "at_ns",
                t.to_string(),
                "give either at_ns or at_op, not both",
            )),
            (None, None) => Err(bad("at_ns", "null".into(), "give at_ns or at_op")),
        },
        Fault::SlowRank { delay_ns, .. } => time("delay_ns", Some(delay_ns)),
        Fault::Skip { .. } => Ok(()),
        Fault::WrongArgs {
            count,
            dtype,
            reduce_op,
            root,
            ..
        } => {
            if count.is_none() && dtype.is_none() && reduce_op.is_none() && root.is_none() {
                Err(bad(
                    "count",
                    "null".into(),
                    "give at least one of count, dtype, reduce_op, root",
                ))
            } else {
                Ok(())
            }
        }
    }
}

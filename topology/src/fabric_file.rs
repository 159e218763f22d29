//! User-described fabrics: a JSON file of nodes, links and optional device
//! parameters, validated like a rank table (every problem, with JSON paths).
//!
//! ```json
//! {
//!   "name": "two servers on one switch",
//!   "params": { "msg_overhead_ns": 2000, "reduce_gbps": 533.0, "copy_gbps": 800.0 },
//!   "nodes": [
//!     { "name": "a0", "kind": "npu", "rank": 0, "server": 0 },
//!     { "name": "b0", "kind": "npu", "rank": 1, "server": 1 },
//!     { "name": "sw", "kind": "switch" }
//!   ],
//!   "links": [
//!     { "a": "a0", "b": "sw", "class": "roce", "bandwidth_gbps": 25.0, "latency_ns": 1000 },
//!     { "a": "b0", "b": "sw", "class": "roce", "bandwidth_gbps": 25.0, "latency_ns": 1000 }
//!   ]
//! }
//! ```
//!
//! `kind` is `npu`, `switch`, `pcie_switch` or `cpu`; NPUs carry `rank`
//! (ranks `0..N`, each once) and optionally `server` (all NPUs or none; without
//! it every NPU is its own server; each server's ranks must be contiguous).
//! A link is duplex unless `"duplex": false` (then it goes from `a` to `b`
//! only); `class` is `hccs`, `pcie`, `roce`, `ub` or any other name;
//! bandwidth is GB/s per direction (1e-3..=1e6), latency ns (at most
//! [`crate::limits::MAX_TIME_NS`], as every time). `params` defaults to the
//! 910B values ([`crate::presets::params_910b`]); its optional
//! `op_overhead_ns` (default 0) is a fixed cost per collective op
//! ([`crate::DeviceParams::op_overhead_ns`]). Every rank must reach every
//! other rank.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use petgraph::graph::NodeIndex;
use petgraph::Direction;
use serde::Deserialize;

use crate::cluster::ClusterSpec;
use crate::error::{Problem, TopologyError};
use crate::fabric::{DeviceParams, Fabric, GraphBuilder, Link, LinkClass, NodeKind};
use crate::limits;
use crate::presets::params_910b;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFabric {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    params: Option<RawParams>,
    nodes: Vec<RawNode>,
    links: Vec<RawLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParams {
    msg_overhead_ns: u64,
    reduce_gbps: f64,
    copy_gbps: f64,
    #[serde(default)]
    op_overhead_ns: u64,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum RawKind {
    Npu,
    Switch,
    PcieSwitch,
    Cpu,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    kind: RawKind,
    #[serde(default)]
    rank: Option<u32>,
    #[serde(default)]
    server: Option<u32>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    a: String,
    b: String,
    class: String,
    bandwidth_gbps: f64,
    latency_ns: u64,
    #[serde(default = "yes")]
    duplex: bool,
}

fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// A problem for a bandwidth that is not positive or out of range.
fn gbps_problem(path: String, v: f64) -> Option<Problem> {
    if !positive(v) {
        return Some(Problem::new(path, "is not a positive number of GB/s").value(v.to_string()));
    }
    // `{:?}` keeps 1e300 short.
    let why = limits::check_gbps(v).err()?;
    Some(Problem::new(path, why).value(format!("{v:?}")))
}

/// A problem for a time out of range.
fn ns_problem(path: String, ns: u64) -> Option<Problem> {
    let why = limits::check_ns(ns).err()?;
    Some(Problem::new(path, why).value(ns.to_string()))
}

impl Fabric {
    /// Parses and validates a fabric file's JSON text.
    ///
    /// # Errors
    /// [`TopologyError::FabricFileSyntax`] (with line and column) when the
    /// text is not JSON of the fabric shape; [`TopologyError::FabricFileInvalid`]
    /// listing every problem otherwise.
    pub fn from_fabric_json(json: &str) -> Result<Fabric, TopologyError> {
        let raw: RawFabric =
            serde_json::from_str(json).map_err(|e| TopologyError::FabricFileSyntax {
                line: e.line(),
                column: e.column(),
                message: e
                    .to_string()
                    .split(" at line ")
                    .next()
                    .unwrap_or("")
                    .to_string(),
            })?;
        build(raw).map_err(|problems| TopologyError::FabricFileInvalid { problems })
    }

    /// Reads, parses and validates a fabric file.
    ///
    /// # Errors
    /// [`TopologyError::Io`], else as [`Fabric::from_fabric_json`].
    pub fn from_fabric_file(path: impl AsRef<Path>) -> Result<Fabric, TopologyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| TopologyError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        Self::from_fabric_json(&text)
    }
}

fn build(raw: RawFabric) -> Result<Fabric, Vec<Problem>> {
    let mut p = Vec::new();
    let mut b = GraphBuilder::default();
    let mut by_name: BTreeMap<&str, (usize, NodeIndex)> = BTreeMap::new();
    let npu_count = raw.nodes.iter().filter(|n| n.kind == RawKind::Npu).count();
    let mut rank_node: Vec<Option<usize>> = vec![None; npu_count];
    let with_server = raw.nodes.iter().filter(|n| n.server.is_some()).count();

    if raw.nodes.is_empty() {
        p.push(Problem::new(
            "nodes",
            "is empty; list the NPUs and switches",
        ));
    }
    for (i, n) in raw.nodes.iter().enumerate() {
        let path = format!("nodes[{i}]");
        if n.name.is_empty() {
            p.push(Problem::new(
                format!("{path}.name"),
                "is empty; give every node a unique name",
            ));
        } else if let Some((j, _)) = by_name.get(n.name.as_str()) {
            p.push(
                Problem::new(
                    format!("{path}.name"),
                    format!("duplicates nodes[{j}].name; node names must be unique"),
                )
                .value(&n.name),
            );
        }
        let kind = match (n.kind, n.rank) {
            (RawKind::Npu, None) => {
                p.push(Problem::new(
                    format!("{path}.rank"),
                    "is missing; every npu node needs its rank",
                ));
                NodeKind::Npu { rank: u32::MAX }
            }
            (RawKind::Npu, Some(r)) => {
                match rank_node.get_mut(r as usize) {
                    None => p.push(
                        Problem::new(
                            format!("{path}.rank"),
                            format!("is out of range: there are {npu_count} npu nodes, so ranks must be 0..={}", npu_count.saturating_sub(1)),
                        )
                        .value(r.to_string()),
                    ),
                    Some(Some(j)) => p.push(
                        Problem::new(format!("{path}.rank"), format!("duplicates nodes[{j}].rank; ranks must be unique"))
                            .value(r.to_string())
                            .rank(Some(r)),
                    ),
                    Some(slot) => *slot = Some(i),
                }
                NodeKind::Npu { rank: r }
            }
            (other, rank) => {
                if rank.is_some() || n.server.is_some() {
                    p.push(Problem::new(
                        path.clone(),
                        "has rank or server but is not an npu; only npu nodes carry them",
                    ));
                }
                match other {
                    RawKind::Switch => NodeKind::Switch,
                    RawKind::PcieSwitch => NodeKind::PcieSwitch,
                    _ => NodeKind::Cpu,
                }
            }
        };
        if n.kind == RawKind::Npu && n.server.is_none() && with_server > 0 {
            p.push(
                Problem::new(
                    format!("{path}.server"),
                    "is missing; give every npu a server or none of them",
                )
                .rank(n.rank),
            );
        }
        let idx = b.node(n.name.clone(), kind);
        by_name.entry(n.name.as_str()).or_insert((i, idx));
    }

    let missing: Vec<usize> = (0..npu_count).filter(|&r| rank_node[r].is_none()).collect();
    if !missing.is_empty() {
        p.push(Problem::new(
            "nodes",
            format!(
                "has no npu with rank {missing:?}; the {npu_count} npu nodes must have ranks 0..={}",
                npu_count.saturating_sub(1)
            ),
        ));
    }

    for (i, l) in raw.links.iter().enumerate() {
        let path = format!("links[{i}]");
        let mut ends = Vec::new();
        for (field, name) in [("a", &l.a), ("b", &l.b)] {
            match by_name.get(name.as_str()) {
                Some(&(_, idx)) => ends.push(idx),
                None => p.push(
                    Problem::new(
                        format!("{path}.{field}"),
                        "names no node; use a name from nodes",
                    )
                    .value(name.as_str()),
                ),
            }
        }
        if l.a == l.b {
            p.push(
                Problem::new(
                    format!("{path}.b"),
                    "is the same node as a; a link joins two different nodes",
                )
                .value(l.b.as_str()),
            );
        }
        p.extend(gbps_problem(
            format!("{path}.bandwidth_gbps"),
            l.bandwidth_gbps,
        ));
        p.extend(ns_problem(format!("{path}.latency_ns"), l.latency_ns));
        if l.class.is_empty() {
            p.push(Problem::new(
                format!("{path}.class"),
                "is empty; use hccs, pcie, roce, ub or a name of your own",
            ));
        }
        if let [a, c] = ends[..] {
            if a != c {
                let class = LinkClass::parse(&l.class);
                if l.duplex {
                    b.duplex(a, c, l.bandwidth_gbps, l.latency_ns, &class);
                } else {
                    b.graph.add_edge(
                        a,
                        c,
                        Link {
                            bandwidth_gbps: l.bandwidth_gbps,
                            latency_ns: l.latency_ns,
                            class,
                        },
                    );
                }
            }
        }
    }

    let params = match &raw.params {
        None => params_910b(),
        Some(rp) => {
            for (field, v) in [("reduce_gbps", rp.reduce_gbps), ("copy_gbps", rp.copy_gbps)] {
                p.extend(gbps_problem(format!("params.{field}"), v));
            }
            for (field, ns) in [
                ("msg_overhead_ns", rp.msg_overhead_ns),
                ("op_overhead_ns", rp.op_overhead_ns),
            ] {
                p.extend(ns_problem(format!("params.{field}"), ns));
            }
            DeviceParams {
                msg_overhead_ns: rp.msg_overhead_ns,
                reduce_gbps: rp.reduce_gbps,
                copy_gbps: rp.copy_gbps,
                op_overhead_ns: rp.op_overhead_ns,
            }
        }
    };

    // Servers: indices 0..S, each used, each server's ranks contiguous.
    let mut server_of: Vec<u32> = Vec::with_capacity(npu_count);
    let ranks_ok = rank_node.iter().all(Option::is_some) && with_server == npu_count;
    if ranks_ok && npu_count > 0 {
        for slot in &rank_node {
            let i = slot.unwrap_or(0);
            server_of.push(raw.nodes[i].server.unwrap_or(0));
        }
        let max = server_of.iter().copied().max().unwrap_or(0);
        // Servers are numbered without gaps, so there are at most as many
        // as NPUs; checked first, as the gap check loops over the indices.
        let too_big = rank_node
            .iter()
            .flatten()
            .find(|&&i| raw.nodes[i].server.unwrap_or(0) as usize >= npu_count);
        if let Some(&i) = too_big {
            p.push(
                Problem::new(
                    format!("nodes[{i}].server"),
                    format!(
                        "is out of range: servers are numbered 0..={} without gaps ({npu_count} npu nodes)",
                        npu_count - 1
                    ),
                )
                .value(raw.nodes[i].server.unwrap_or(0).to_string()),
            );
        }
        for s in (0..=max).take_while(|_| too_big.is_none()) {
            let ranks: Vec<u32> = (0..npu_count as u32)
                .filter(|&r| server_of[r as usize] == s)
                .collect();
            if ranks.is_empty() {
                p.push(Problem::new(
                    "nodes",
                    format!(
                        "has no npu on server {s}; server indices must be 0..={max} without gaps"
                    ),
                ));
            } else if (ranks[ranks.len() - 1] - ranks[0]) as usize + 1 != ranks.len() {
                p.push(Problem::new(
                    "nodes",
                    format!("server {s} has ranks {ranks:?}, which are not contiguous; number each server's ranks as one block"),
                ));
            }
        }
    } else if with_server == 0 {
        server_of = (0..npu_count as u32).collect();
    }

    // Every rank reaches every other: all NPUs reachable from rank 0's NPU,
    // forwards and backwards (strong connectivity among NPUs).
    if p.is_empty() && npu_count > 1 {
        let g = &b.graph;
        let start = by_name[raw.nodes[rank_node[0].unwrap_or(0)].name.as_str()].1;
        for (dir, word) in [(Direction::Outgoing, "from"), (Direction::Incoming, "to")] {
            let mut seen = vec![false; g.node_count()];
            seen[start.index()] = true;
            let mut q = VecDeque::from([start]);
            while let Some(u) = q.pop_front() {
                for v in g.neighbors_directed(u, dir) {
                    if !seen[v.index()] {
                        seen[v.index()] = true;
                        q.push_back(v);
                    }
                }
            }
            let missing: Vec<u32> = (0..npu_count as u32)
                .filter(|&r| {
                    !seen[by_name[raw.nodes[rank_node[r as usize].unwrap_or(0)].name.as_str()]
                        .1
                        .index()]
                })
                .collect();
            if !missing.is_empty() {
                p.push(Problem::new(
                    "links",
                    format!("leave ranks {missing:?} unreachable {word} rank 0; add links so every rank can reach every other"),
                ));
            }
        }
    }

    if !p.is_empty() {
        return Err(p);
    }
    let cluster = ClusterSpec::from_server_of(&server_of);
    let name = raw.name.unwrap_or_else(|| "fabric file".to_string());
    Fabric::from_graph(name, b.graph, cluster, params).map_err(|e| e.problems().to_vec())
}

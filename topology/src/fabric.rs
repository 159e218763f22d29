//! The fabric graph: NPUs, switches and directed links, with the device
//! parameters the simulator needs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};

use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;

use crate::bisection;
use crate::cluster::ClusterSpec;
use crate::error::{Problem, TopologyError};
use crate::route::{self, Route, Scratch};

/// What a link is made of. Ordered so summaries list classes stably.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LinkClass {
    /// HCCS (Huawei Cache Coherence System): NPU-to-NPU links inside a server.
    Hccs,
    /// PCIe: NPU to PCIe switch, PCIe switch to CPU.
    Pcie,
    /// RoCE (RDMA over Converged Ethernet): NPU NIC to switch, switch to switch.
    /// The only scale-out class: see [`LinkClass::is_scale_out`].
    Roce,
    /// UB (Unified Bus): the Atlas A3 super-pod fabric (HCCS-L1/L2 switches).
    Ub,
    /// Any other link, named (fabric files; generic presets use `direct`).
    Custom(String),
}

impl LinkClass {
    /// Parses a class name as written in fabric files and printed by
    /// [`fmt::Display`]: `hccs`, `pcie`, `roce`, `ub`, anything else is custom.
    pub fn parse(name: &str) -> LinkClass {
        match name {
            "hccs" => LinkClass::Hccs,
            "pcie" => LinkClass::Pcie,
            "roce" => LinkClass::Roce,
            "ub" => LinkClass::Ub,
            other => LinkClass::Custom(other.to_string()),
        }
    }

    /// True for the scale-out network (RoCE). Routing prefers paths that avoid
    /// scale-out links, as HCCL does (it uses HCCS/PCIe/UB inside a server or
    /// super pod and RoCE only between them); see [`Fabric::route`].
    pub fn is_scale_out(&self) -> bool {
        matches!(self, LinkClass::Roce)
    }
}

impl fmt::Display for LinkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkClass::Hccs => f.write_str("hccs"),
            LinkClass::Pcie => f.write_str("pcie"),
            LinkClass::Roce => f.write_str("roce"),
            LinkClass::Ub => f.write_str("ub"),
            LinkClass::Custom(n) => f.write_str(n),
        }
    }
}

/// One direction of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Bandwidth in GB/s (G = 10^9 bytes), in this direction.
    pub bandwidth_gbps: f64,
    /// One-way latency of the hop, in nanoseconds.
    pub latency_ns: u64,
    /// What the link is made of.
    pub class: LinkClass,
}

/// What a graph node is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeKind {
    /// An NPU, the endpoint of exactly one rank.
    Npu {
        /// The rank on this NPU.
        rank: u32,
    },
    /// A network switch (RoCE leaf/spine, UB switch).
    Switch,
    /// A PCIe switch.
    PcieSwitch,
    /// A host CPU (root complex).
    Cpu,
}

/// A node of the fabric graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Unique name, e.g. `npu3`, `s1.npu3`, `leaf0`, `spine2`.
    pub name: String,
    /// What the node is.
    pub kind: NodeKind,
}

/// Per-device cost parameters for the simulator's α–β–γ model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceParams {
    /// α: fixed overhead per message, in nanoseconds (issue, completion).
    pub msg_overhead_ns: u64,
    /// γ: local reduce bandwidth in GB/s, bytes of output per second.
    pub reduce_gbps: f64,
    /// Local copy bandwidth in GB/s (device memory to device memory).
    pub copy_gbps: f64,
    /// Fixed cost of every collective op before its first step, in
    /// nanoseconds: the host's launch and stream-synchronisation time that
    /// a wall-clock benchmark such as `hccl_test` includes. Not a property
    /// of the fabric, so 0 in every preset; set it (fabric file
    /// `params.op_overhead_ns`, or `hccl test --op-overhead`) to compare
    /// simulated times with measured ones.
    pub op_overhead_ns: u64,
}

/// One row of [`Fabric::link_classes`]: all directed links of one class with
/// the same bandwidth and latency.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkClassSummary {
    /// The class.
    pub class: LinkClass,
    /// Bandwidth per direction, GB/s.
    pub bandwidth_gbps: f64,
    /// Latency per hop, ns.
    pub latency_ns: u64,
    /// Number of directed links (a duplex cable counts twice).
    pub count: usize,
}

/// A fabric: the graph of NPUs, switches and directed links, the cluster it
/// serves, and the device parameters.
///
/// Built by [`crate::build_preset`], [`Fabric::from_fabric_json`], [`Fabric::for_rank_table`]
/// or [`Fabric::from_graph`]. `route()` is deterministic and cheap (a
/// bidirectional BFS with reused, generation-stamped scratch), so it can be
/// called for every pair a simulation uses.
pub struct Fabric {
    name: String,
    graph: DiGraph<Node, Link>,
    cluster: ClusterSpec,
    npus: Vec<NodeIndex>,
    params: DeviceParams,
    has_scale_out: bool,
    scratch: Mutex<Scratch>,
    bisection: OnceLock<f64>,
}

impl Clone for Fabric {
    fn clone(&self) -> Self {
        Fabric {
            name: self.name.clone(),
            graph: self.graph.clone(),
            cluster: self.cluster.clone(),
            npus: self.npus.clone(),
            params: self.params,
            has_scale_out: self.has_scale_out,
            scratch: Mutex::new(Scratch::default()),
            bisection: self.bisection.clone(),
        }
    }
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fabric")
            .field("name", &self.name)
            .field("ranks", &self.npus.len())
            .field("nodes", &self.graph.node_count())
            .field("edges", &self.graph.edge_count())
            .finish()
    }
}

impl Fabric {
    /// A fabric from a graph the caller built. Every rank `0..cluster.world_size()`
    /// must have exactly one [`NodeKind::Npu`] node, and every link a finite
    /// positive bandwidth.
    ///
    /// # Errors
    /// [`TopologyError::FabricFileInvalid`] listing every inconsistency.
    pub fn from_graph(
        name: impl Into<String>,
        graph: DiGraph<Node, Link>,
        cluster: ClusterSpec,
        params: DeviceParams,
    ) -> Result<Fabric, TopologyError> {
        let n = cluster.world_size() as usize;
        let mut npus: Vec<Option<NodeIndex>> = vec![None; n];
        let mut problems = Vec::new();
        for idx in graph.node_indices() {
            if let NodeKind::Npu { rank } = graph[idx].kind {
                let path = format!("nodes[{}]", idx.index());
                match npus.get_mut(rank as usize) {
                    None => problems.push(
                        Problem::new(path, format!("has rank {rank}, outside 0..{n}"))
                            .value(graph[idx].name.clone()),
                    ),
                    Some(Some(_)) => problems.push(
                        Problem::new(path, format!("is a second NPU for rank {rank}"))
                            .value(graph[idx].name.clone())
                            .rank(Some(rank)),
                    ),
                    Some(slot) => *slot = Some(idx),
                }
            }
        }
        for (r, slot) in npus.iter().enumerate() {
            if slot.is_none() {
                problems.push(
                    Problem::new("nodes", format!("has no NPU for rank {r}")).rank(Some(r as u32)),
                );
            }
        }
        for e in graph.edge_references() {
            let bw = e.weight().bandwidth_gbps;
            if !(bw.is_finite() && bw > 0.0) {
                problems.push(
                    Problem::new(
                        format!("links[{}]", e.id().index()),
                        "has a bandwidth that is not a positive number",
                    )
                    .value(bw.to_string()),
                );
            }
        }
        let bad = |p: &DeviceParams| {
            !(p.reduce_gbps.is_finite()
                && p.reduce_gbps > 0.0
                && p.copy_gbps.is_finite()
                && p.copy_gbps > 0.0)
        };
        if bad(&params) {
            problems.push(Problem::new(
                "params",
                "reduce_gbps and copy_gbps must be positive numbers",
            ));
        }
        if !problems.is_empty() {
            return Err(TopologyError::FabricFileInvalid { problems });
        }
        let has_scale_out = graph.edge_weights().any(|l| l.class.is_scale_out());
        Ok(Fabric {
            name: name.into(),
            graph,
            cluster,
            npus: npus.into_iter().flatten().collect(),
            params,
            has_scale_out,
            scratch: Mutex::new(Scratch::default()),
            bisection: OnceLock::new(),
        })
    }

    /// A short description, e.g. `atlas800t-a2 x 2 servers`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cluster (ranks → server, device, super pod).
    pub fn cluster(&self) -> &ClusterSpec {
        &self.cluster
    }

    /// Number of ranks.
    pub fn world_size(&self) -> u32 {
        self.npus.len() as u32
    }

    /// The NPU node of `rank`.
    ///
    /// # Panics
    /// If `rank >= world_size()`: ranks are validated at the API boundary;
    /// use [`Fabric::try_npu`] for unchecked input.
    pub fn npu(&self, rank: u32) -> NodeIndex {
        self.npus[rank as usize]
    }

    /// The NPU node of `rank`, or an error if it is out of range.
    ///
    /// # Errors
    /// [`TopologyError::RankOutOfRange`].
    pub fn try_npu(&self, rank: u32) -> Result<NodeIndex, TopologyError> {
        self.npus
            .get(rank as usize)
            .copied()
            .ok_or(TopologyError::RankOutOfRange {
                rank,
                world_size: self.world_size(),
            })
    }

    /// The graph: one node per NPU/switch/CPU, one edge per link direction.
    pub fn graph(&self) -> &DiGraph<Node, Link> {
        &self.graph
    }

    /// One direction of a link.
    ///
    /// # Panics
    /// If `edge` is not an edge of this fabric's graph (edges come from
    /// [`Fabric::route`] or [`Fabric::graph`]).
    pub fn link(&self, edge: EdgeIndex) -> &Link {
        &self.graph[edge]
    }

    /// The device parameters (α, γ, copy bandwidth, per-op overhead).
    pub fn params(&self) -> DeviceParams {
        self.params
    }

    /// Sets the fixed cost per collective op, ns
    /// ([`DeviceParams::op_overhead_ns`]); the links are unchanged.
    pub fn set_op_overhead_ns(&mut self, ns: u64) {
        self.params.op_overhead_ns = ns;
    }

    /// The route from `src`'s NPU to `dst`'s NPU: directed edges in order
    /// (empty when `src == dst`).
    ///
    /// Routing: the fewest hops, first over non-scale-out links only
    /// (HCCS, PCIe, UB, custom), and only if no such path exists over all
    /// links including RoCE — HCCL likewise keeps traffic on HCCS/PCIe/UB
    /// inside a server or super pod. Among equal-hop paths one is chosen by a
    /// deterministic hash of `(src, dst)`, so different pairs spread over
    /// parallel spines while the same pair always gets the same path. The
    /// search is a bidirectional BFS that stops at the meeting layer, with
    /// reused generation-stamped scratch: its cost grows with the
    /// neighbourhoods of the two endpoints, not with the graph.
    ///
    /// # Errors
    /// [`TopologyError::RankOutOfRange`], or [`TopologyError::NoRoute`] when
    /// the graph does not connect the two NPUs.
    pub fn route(&self, src: u32, dst: u32) -> Result<Route, TopologyError> {
        let s = self.try_npu(src)?;
        let d = self.try_npu(dst)?;
        let key = (u64::from(src) << 32) | u64::from(dst);
        let mut fresh;
        let mut guard = self.scratch.try_lock();
        let scratch: &mut Scratch = match guard.as_deref_mut() {
            Ok(s) => s,
            Err(_) => {
                fresh = Scratch::default();
                &mut fresh
            }
        };
        let found = if self.has_scale_out {
            route::search(&self.graph, scratch, s, d, key, true)
                .or_else(|| route::search(&self.graph, scratch, s, d, key, false))
        } else {
            route::search(&self.graph, scratch, s, d, key, false)
        };
        found
            .map(Route::new)
            .ok_or(TopologyError::NoRoute { src, dst })
    }

    /// The smallest bandwidth along `route`, GB/s (`f64::INFINITY` when empty).
    pub fn bottleneck_gbps(&self, route: &Route) -> f64 {
        route
            .edges()
            .iter()
            .map(|&e| self.graph[e].bandwidth_gbps)
            .fold(f64::INFINITY, f64::min)
    }

    /// The sum of hop latencies along `route`, ns; saturates at `u64::MAX`
    /// (never) instead of wrapping.
    pub fn latency_ns(&self, route: &Route) -> u64 {
        route
            .edges()
            .iter()
            .map(|&e| self.graph[e].latency_ns)
            .fold(0, u64::saturating_add)
    }

    /// Directed links grouped by (class, bandwidth, latency), sorted by class
    /// then bandwidth.
    pub fn link_classes(&self) -> Vec<LinkClassSummary> {
        let mut rows: BTreeMap<(LinkClass, u64, u64), usize> = BTreeMap::new();
        for l in self.graph.edge_weights() {
            *rows
                .entry((l.class.clone(), l.bandwidth_gbps.to_bits(), l.latency_ns))
                .or_default() += 1;
        }
        let mut out: Vec<LinkClassSummary> = rows
            .into_iter()
            .map(|((class, bw, latency_ns), count)| LinkClassSummary {
                class,
                bandwidth_gbps: f64::from_bits(bw),
                latency_ns,
                count,
            })
            .collect();
        out.sort_by(|a, b| {
            a.class
                .cmp(&b.class)
                .then(a.bandwidth_gbps.total_cmp(&b.bandwidth_gbps))
                .then(a.latency_ns.cmp(&b.latency_ns))
        });
        out
    }

    /// Bisection bandwidth in GB/s, one direction.
    ///
    /// Computed as the maximum flow from the NPUs of ranks `0..n/2` to the
    /// NPUs of ranks `n/2..n` (every link a capacity of its bandwidth in that
    /// direction; switches and CPUs forward freely). This is the capacity of
    /// the minimum cut separating the two rank halves. For the presets the
    /// rank order follows the machine's structure (servers, torus rows), and
    /// by symmetry that halving is a minimum bisection, so the value is the
    /// textbook bisection bandwidth (the tests check hand-computed values).
    /// For fabric files it is the bandwidth across the rank-order halving.
    /// 0 for a single rank. Computed once (Dinic's algorithm) and cached.
    pub fn bisection_bandwidth_gbps(&self) -> f64 {
        *self
            .bisection
            .get_or_init(|| bisection::rank_halves_max_flow(&self.graph, &self.npus))
    }

    /// Graphviz DOT of the fabric: one undirected edge per duplex pair
    /// (labelled `class bandwidth GB/s`), directed edges where a link has no
    /// reverse twin. NPUs are boxes labelled with their rank.
    pub fn to_dot(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "digraph fabric {{");
        let _ = writeln!(s, "  label={:?};", self.name);
        for idx in self.graph.node_indices() {
            let n = &self.graph[idx];
            let (shape, label) = match n.kind {
                NodeKind::Npu { rank } => ("box", format!("{}\\nrank {rank}", n.name)),
                NodeKind::Switch => ("ellipse", n.name.clone()),
                NodeKind::PcieSwitch => ("hexagon", n.name.clone()),
                NodeKind::Cpu => ("octagon", n.name.clone()),
            };
            let _ = writeln!(s, "  n{} [shape={shape}, label=\"{label}\"];", idx.index());
        }
        for e in self.graph.edge_references() {
            let (a, b) = (e.source(), e.target());
            let l = e.weight();
            let twin = self.graph.edges_connecting(b, a).any(|r| r.weight() == l);
            if twin && a > b {
                continue;
            }
            let dir = if twin { ", dir=none" } else { "" };
            let _ = writeln!(
                s,
                "  n{} -> n{} [label=\"{} {} GB/s\"{dir}];",
                a.index(),
                b.index(),
                l.class,
                l.bandwidth_gbps
            );
        }
        s.push_str("}\n");
        s
    }
}

/// Helper for building fabric graphs: duplex links as two directed edges.
#[derive(Debug, Default)]
pub(crate) struct GraphBuilder {
    pub graph: DiGraph<Node, Link>,
}

impl GraphBuilder {
    pub(crate) fn node(&mut self, name: impl Into<String>, kind: NodeKind) -> NodeIndex {
        self.graph.add_node(Node {
            name: name.into(),
            kind,
        })
    }

    /// Adds both directions of a link with the same parameters.
    pub(crate) fn duplex(
        &mut self,
        a: NodeIndex,
        b: NodeIndex,
        bandwidth_gbps: f64,
        latency_ns: u64,
        class: &LinkClass,
    ) {
        let link = Link {
            bandwidth_gbps,
            latency_ns,
            class: class.clone(),
        };
        self.graph.add_edge(a, b, link.clone());
        self.graph.add_edge(b, a, link);
    }
}

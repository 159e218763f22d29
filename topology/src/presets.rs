//! Machine presets (Atlas 800T A2, Atlas 800 with 910A, Atlas A3 super pod)
//! and generic shapes (ring, full mesh, leaf-spine, 2D torus).
//!
//! Every number comes from [`sources`], where each constant names its source
//! or says plainly that it is an assumption.

use std::fmt;

use petgraph::graph::NodeIndex;

use crate::cluster::ClusterSpec;
use crate::error::TopologyError;
use crate::fabric::{DeviceParams, Fabric, GraphBuilder, Link, LinkClass, Node, NodeKind};
use crate::limits;
use crate::rank_table::{RankTable, Version};

pub mod sources {
    //! Preset parameters and where they come from.
    //!
    //! "Verified" means the figure was read in the cited document or source
    //! file; "derived" means computed from verified figures; "unverified"
    //! means a commonly quoted figure whose primary source was not available;
    //! "assumption" means a modelling choice with no published figure.
    //! Replace assumptions with measurements when they exist.
    //!
    //! The sources, as read (commits are the snapshots read):
    //! - **msprof**: Huawei's profiler, `github.com/Ascend/msprof` (commit
    //!   9ba1ac7b), `analysis/common_func/ms_constant/number_constant.py`: the
    //!   "standard bandwidth" per link that its communication analysis divides
    //!   measured link bandwidth by (`msparser/cluster/meta_parser.py`,
    //!   `HcclAnalysisTool.StandardBandWidth`). Chip v2.1.0 (chip id 1) is
    //!   Ascend910A and chip v4.1.0 (id 5) Ascend910B
    //!   (`analysis/csrc/application/database/db_constant.h`).
    //! - **msmodeling**: Huawei's performance model, `github.com/Ascend/msmodeling`
    //!   (commit 84fec853), `tensor_cast/device.py`: `ATLAS_800.A2_INTERCONNECT`,
    //!   `A3_INTERCONNECT`, `STATIC_COST`; how it uses them:
    //!   `tensor_cast/performance_model/comm_analytic.py` (a full-mesh tier's
    //!   bandwidth is the NPU's aggregate, scaled by (group − 1)/(tier − 1),
    //!   i.e. one peer link gets 1/7 of it on 8 NPUs; every bandwidth is
    //!   multiplied by `comm_efficiency` = 0.7, and latency and efficiency
    //!   carry a "TODO: double-confirm" there).
    //! - **HCCL cost model**: `github.com/hicann/hccl` (commit 09300b70),
    //!   `src/ops/op_common/selector/cost_model.cc`: the cost model of the
    //!   open-source HCCL's V2 (`ins_*`) executors, whose README news is about
    //!   Ascend 950 operators; it does not say that it models the 910B, so it
    //!   is cited for orders of magnitude only.
    //!
    //! Where they disagree: HCCS per 910B link is 28 GB/s in msprof and in
    //! msmodeling (196 / 7), 56 GB/s in the HCCL cost model (`crossChipBw_`)
    //! and in unsourced community write-ups; the presets take 28: the two
    //! Huawei tools that name the 910B agree on it. Per-step latency is
    //! 0.5 µs (HCCS) and 1.5 µs (RoCE) in msmodeling, 2 µs per task in the HCCL
    //! cost model; the presets keep α = 2 µs per message plus the hop
    //! latencies below. None of these figures was fitted to a measurement;
    //! bench/README.md compares the presets with the published ones (a
    //! torch.distributed run on one 910B server is over-predicted by about
    //! half at 28 GB/s, and matched within a few percent with msmodeling's
    //! 0.7 efficiency, which the presets do not apply).

    /// NPUs per Atlas 800T A2 server: 8 × Ascend 910B (DESIGN.md / issue 2;
    /// HCCL docs: the A2 intra-server HCCS domain is 8 ranks, also MindSpeed
    /// `auto_settings` `HccsDev.hccs_dev_num_910b = 8`; msmodeling
    /// `A2_INTERCONNECT` grid 128 × 8 with an 8-NPU full-mesh tier; msprof
    /// `RANK_NUM_PER_SERVER = 8`). Verified.
    pub const A2_NPUS_PER_SERVER: u32 = 8;
    /// HCCS bandwidth per link and direction between two 910B NPUs, GB/s; one
    /// link per pair, a full mesh of 8 (a published `npu-smi info -t topo` of
    /// an 8 × 910B server shows HCCS between every pair:
    /// <https://www.meemx.com/p/hccl-contest-log-overall>).
    /// Verified: msprof `HCCS_BANDWIDTH_V4_1_0 = 28` (Ascend910B); msmodeling
    /// `A2_INTERCONNECT` full mesh `bandwidth_bytes_ps = 196e9` per NPU
    /// (unidirectional), 196 / 7 peers = 28 per link. The HCCL cost model's
    /// `crossChipBw_ = 56 GB/s` does not say it is for the 910B (see the
    /// module docs). 56 was this preset's value before, without a source; it
    /// is twice the figure above, as a both-directions total would be.
    pub const A2_HCCS_GBPS: f64 = 28.0;
    /// One 200 GbE RoCE port per NPU: 25 GB/s per direction. Verified: msprof
    /// `RDMA_BANDWIDTH_V4_1_0 = 25` (Ascend910B); msmodeling `A2_INTERCONNECT`
    /// CLOS tier `25e9` B/s; 200 Gbit/s / 8 (Atlas 800T A2 "8 × 200GE",
    /// DESIGN.md / issue 2).
    pub const A2_ROCE_GBPS: f64 = 25.0;
    /// Atlas 800 (model 9000) with 910A: two HCCS full-mesh groups of four
    /// (DESIGN.md / issue 2; HCCL's 910 "4P mesh" server topology). Verified
    /// by the HCCL environment docs (HCCL_INTRA_PCIE_ENABLE: intra-server
    /// traffic that is not HCCS goes over PCIe by default) and Huawei Cloud
    /// CCE's scheduling docs ("eight NPU1980 chips ... two groups, the four
    /// chips in one group are interconnected through HCCS",
    /// support.huaweicloud.com/intl/en-us/drawer-cce/Cluster_cce-gpu-topology-predicate.html).
    pub const A910_GROUP: u32 = 4;
    /// HCCS per link and direction between two 910A NPUs of one group, GB/s.
    /// Verified: msprof `HCCS_BANDWIDTH_V2_1_0 = 18` (Ascend910A). Was 30, the
    /// commonly quoted HCCS figure of Ascend 910, which has no primary source
    /// here.
    pub const A910_HCCS_GBPS: f64 = 18.0;
    /// PCIe per direction between a 910A and its PCIe switch, and from the
    /// switch to the CPU, GB/s. Verified: msprof `PCIE_BANDWIDTH_V2_1_0 = 20`
    /// (Ascend910A). The PCIe 4.0 x16 line rate, 16 GT/s × 16 lanes ×
    /// 128/130 / 8 = 31.5 GB/s (PCI-SIG), was the value before; msprof's
    /// figure is the rate a transfer is expected to reach.
    pub const A910_PCIE_GBPS: f64 = 20.0;
    /// One 100 GbE RoCE port per 910A NPU (Atlas 800 model 9000: 8 × 100GE):
    /// 12.5 GB/s per direction. Verified: msprof `RDMA_BANDWIDTH_V2_1_0 = 12.5`
    /// (Ascend910A).
    pub const A910_ROCE_GBPS: f64 = 12.5;
    /// Atlas A3 server: 16 Ascend processors (dies) = 8 HiAM modules of two
    /// dies joined by SIO; modules joined by HCCS-L1 inside the node, nodes by
    /// HCCS-L2 (UB switches) inside a super pod, super pods by RoCE.
    /// Verified: MindCluster scheduling guide, "Atlas 900 A3 SuperPoD"
    /// affinity pages (hiascend.com dl_affinity_0007 / dl_affinity_0040);
    /// msmodeling `A3_INTERCONNECT` grid 48 × 8 × 2 (dies).
    pub const A3_NPUS_PER_SERVER: u32 = 16;
    /// UB bandwidth per die and direction to the node's L1 UB switch, GB/s.
    /// Verified: msmodeling `A3_INTERCONNECT` gives 196e9 B/s per die for both
    /// the in-node ("1-level CLOS") and the in-pod ("2-level CLOS") tier; also
    /// 392 GB/s per 910C package (CloudMatrix384 paper, Zuo et al. 2025,
    /// arXiv:2506.12708, as summarised publicly) / 2 dies. Not modelled: the
    /// SIO link between a package's two dies (msmodeling: 224 GB/s).
    pub const A3_UB_GBPS: f64 = 196.0;
    /// Number of L2 UB switch planes a node's L1 connects to. Unverified:
    /// CloudMatrix384 has seven L1 UB switches per node, one per L2 plane;
    /// 16 dies × 196 GB/s / 7 = 448 GB/s per plane, which matches the 448 GB/s
    /// per-node UB switch figure quoted in public analyses (non-blocking).
    pub const A3_UB_PLANES: u32 = 7;
    /// Servers per A3 super pod: 48 nodes × 8 × 910C = 384 NPUs
    /// (CloudMatrix384 / Atlas 900 A3 SuperPoD). Verified: msmodeling
    /// `A3_INTERCONNECT` grid 48 × 8 × 2 ("up to 768 devices (dies)").
    pub const A3_SERVERS_PER_SUPER_POD: u32 = 48;
    /// RoCE per die between super pods, GB/s: 400 Gbit/s RDMA per 910C
    /// package (CloudMatrix384 RDMA plane) / 2 dies = 25 GB/s. msmodeling's
    /// `A3_INTERCONNECT_ROCE` uses 196 / 8 = 24.5 GB/s per die (2% lower);
    /// kept at 25, the line rate.
    pub const A3_ROCE_GBPS: f64 = 25.0;

    /// Servers under one RoCE leaf (16 × 8 = 128 NPU ports). Assumption.
    pub const SERVERS_PER_LEAF: u32 = 16;
    /// Spine switches in a two-level scale-out network. Assumption.
    pub const SPINES: u32 = 8;

    /// Hop latencies, ns. Assumptions: no per-hop figure is published. HCCS
    /// and UB hops of a few hundred ns (the CloudMatrix384 write-ups give
    /// "sub-microsecond" NPU-to-NPU latency across the UB fabric: 4 hops ×
    /// 200 ns), a PCIe hop 600 ns, NIC + leaf port 1 µs, leaf–spine 600 ns.
    /// msmodeling uses per-step latencies instead (A2: 0.5 µs full mesh,
    /// 1.5 µs RoCE; A3: 0.5 µs in a node, 5.5 µs across nodes), which stand
    /// for everything a step costs besides bandwidth; here that is α
    /// ([`MSG_OVERHEAD_NS`]) plus these hop latencies.
    pub const HCCS_LATENCY_NS: u64 = 300;
    /// See [`HCCS_LATENCY_NS`].
    pub const UB_LATENCY_NS: u64 = 200;
    /// See [`HCCS_LATENCY_NS`].
    pub const PCIE_LATENCY_NS: u64 = 600;
    /// See [`HCCS_LATENCY_NS`].
    pub const ROCE_PORT_LATENCY_NS: u64 = 1000;
    /// See [`HCCS_LATENCY_NS`].
    pub const SWITCH_LINK_LATENCY_NS: u64 = 600;

    /// HBM bandwidth per 910B/910C die, GB/s. Verified: msmodeling gives
    /// every A2 and A3-die profile `memory_bandwidth_bytes_ps = 1.6 *
    /// (1024**4)` (it reads "1.6 T" as binary, 1759 GB/s; the presets read it
    /// as the decimal 1.6 TB/s); also 3.2 TB/s per two-die 910C package
    /// (CloudMatrix384 paper, as summarised publicly) / 2.
    pub const HBM_910B_GBPS: f64 = 1600.0;
    /// HBM bandwidth of the 910A, GB/s. Unverified (commonly quoted 1.2 TB/s;
    /// msmodeling has no 910A profile).
    pub const HBM_910A_GBPS: f64 = 1200.0;
    /// Per-message overhead α, ns: 2 µs, the HCCL cost model's per-task
    /// latency (`CalcLatencyParams`: 2 µs per task on the AI CPU and CCU
    /// engines, 1 µs on AIV; see the module docs). msmodeling charges 0.5 µs per
    /// HCCS step on A2 instead (see [`HCCS_LATENCY_NS`]). Unverified for 910B.
    pub const MSG_OVERHEAD_NS: u64 = 2000;
    /// A fixed device-side cost per collective op, ns: msmodeling's
    /// `ATLAS_800.STATIC_COST.comm_op_cost_s = 10e-6` for its A2 and A3
    /// profiles ("TODO(jgong5): double-confirm static cost"; 5 µs for its A5
    /// class). Not charged by the presets (their `op_overhead_ns` is 0, the
    /// fabric time alone); bench/README.md shows predictions with and
    /// without it (`hccl test --op-overhead 10`).
    pub const COMM_OP_COST_NS: u64 = 10_000;
}

use sources::*;

/// γ and copy bandwidth from HBM bandwidth: a reduce reads two operands and
/// writes one (HBM/3 bytes of output per second), a copy reads one and writes
/// one (HBM/2). Derived; for the 910B that is 533 and 800 GB/s. For scale
/// (not applied): the HCCL cost model takes 483 GB/s reduce and 750 GB/s
/// local copy (`localReduceBw_`, `localCopyBw_`; not said to be the 910B's),
/// and msprof-analyze's cluster guide shows an on-chip ("LOCAL") copy of
/// 16.78 MB in 24.62 µs, 681 GB/s (`docs/en/user_guide/cluster_analyse_instruct.md`
/// in github.com/Ascend/msprof-analyze; hardware not named).
fn params_from_hbm(hbm_gbps: f64) -> DeviceParams {
    DeviceParams {
        msg_overhead_ns: MSG_OVERHEAD_NS,
        reduce_gbps: hbm_gbps / 3.0,
        copy_gbps: hbm_gbps / 2.0,
        op_overhead_ns: 0,
    }
}

/// Device parameters of a 910B (A2) or one 910C die (A3).
pub fn params_910b() -> DeviceParams {
    params_from_hbm(HBM_910B_GBPS)
}

/// Device parameters of a 910A.
pub fn params_910a() -> DeviceParams {
    params_from_hbm(HBM_910A_GBPS)
}

/// A named preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Preset {
    /// `atlas800t-a2`: 8 × 910B per server, HCCS full mesh, one 200 GbE RoCE
    /// port per NPU to a leaf; leaves to spines.
    Atlas800tA2,
    /// `atlas800-910a`: 8 × 910A per server in two HCCS full-mesh groups of
    /// four, the groups joined over PCIe (switch per group, CPU); 100 GbE RoCE.
    Atlas800With910a,
    /// `atlas900-a3-superpod`: 16 dies (910C) per server on a UB switch (L1),
    /// servers of a super pod joined by L2 UB planes, super pods over RoCE.
    AtlasA3SuperPod,
    /// `ring`: each rank linked to the next (and the last to the first).
    Ring,
    /// `full-mesh`: every pair of ranks linked.
    FullMesh,
    /// `leaf-spine`: ranks on leaf switches, leaves on spines, with an
    /// oversubscription ratio.
    LeafSpine,
    /// `torus2d`: rows × cols grid with wrap-around links.
    Torus2d,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 7] = [
        Preset::Atlas800tA2,
        Preset::Atlas800With910a,
        Preset::AtlasA3SuperPod,
        Preset::Ring,
        Preset::FullMesh,
        Preset::LeafSpine,
        Preset::Torus2d,
    ];

    /// The name accepted by [`Preset::parse`] and `hccl topo show --preset`.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Atlas800tA2 => "atlas800t-a2",
            Preset::Atlas800With910a => "atlas800-910a",
            Preset::AtlasA3SuperPod => "atlas900-a3-superpod",
            Preset::Ring => "ring",
            Preset::FullMesh => "full-mesh",
            Preset::LeafSpine => "leaf-spine",
            Preset::Torus2d => "torus2d",
        }
    }

    /// Parses a preset name (case-insensitive).
    ///
    /// # Errors
    /// [`TopologyError::UnknownPreset`] listing the known names.
    pub fn parse(name: &str) -> Result<Preset, TopologyError> {
        let lower = name.to_ascii_lowercase();
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == lower)
            .ok_or_else(|| TopologyError::UnknownPreset {
                name: name.to_string(),
                known: Preset::ALL.iter().map(|p| p.name()).collect(),
            })
    }

    fn fixed_devices(self) -> Option<u32> {
        match self {
            Preset::Atlas800tA2 | Preset::Atlas800With910a => Some(A2_NPUS_PER_SERVER),
            Preset::AtlasA3SuperPod => Some(A3_NPUS_PER_SERVER),
            _ => None,
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Shape parameters of a preset; `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct PresetOptions {
    /// NPUs per server, generic shapes only (default 1); machine presets
    /// have a fixed count and reject another.
    pub devices_per_server: Option<u32>,
    /// Leaf downlink : uplink bandwidth ratio of leaf-spine networks (the
    /// scale-out of every preset and the `leaf-spine` shape), ≥ 1. Default 1.
    pub oversubscription: f64,
    /// `torus2d` rows × cols; default the most square factorisation of the
    /// rank count (rows ≤ cols).
    pub torus_dims: Option<(u32, u32)>,
    /// Servers per leaf switch (default [`sources::SERVERS_PER_LEAF`]).
    pub servers_per_leaf: Option<u32>,
    /// Spine switches (default [`sources::SPINES`]).
    pub spines: Option<u32>,
    /// `atlas900-a3-superpod`: servers per super pod (default
    /// [`sources::A3_SERVERS_PER_SUPER_POD`]).
    pub servers_per_super_pod: Option<u32>,
    /// Generic shapes: link bandwidth per direction, GB/s (default 25, one
    /// 200 GbE port).
    pub link_gbps: f64,
    /// Generic shapes: link latency, ns (default 1000).
    pub link_latency_ns: u64,
}

impl Default for PresetOptions {
    fn default() -> Self {
        PresetOptions {
            devices_per_server: None,
            oversubscription: 1.0,
            torus_dims: None,
            servers_per_leaf: None,
            spines: None,
            servers_per_super_pod: None,
            link_gbps: A2_ROCE_GBPS,
            link_latency_ns: ROCE_PORT_LATENCY_NS,
        }
    }
}

fn bad(
    preset: Preset,
    parameter: &'static str,
    value: impl fmt::Display,
    reason: &str,
) -> TopologyError {
    TopologyError::InvalidPresetParameter {
        preset: preset.name(),
        parameter,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Builds a preset with `servers` servers and default options.
///
/// # Errors
/// As [`build_preset_with`].
pub fn build_preset(preset: Preset, servers: u32) -> Result<Fabric, TopologyError> {
    build_preset_with(preset, servers, &PresetOptions::default())
}

/// Builds a preset with `servers` servers and the given options.
///
/// # Errors
/// [`TopologyError::InvalidPresetParameter`] for zero servers, a device count
/// a machine preset does not have, an oversubscription below 1, torus
/// dimensions that do not multiply to the rank count, or zero switches.
pub fn build_preset_with(
    preset: Preset,
    servers: u32,
    opts: &PresetOptions,
) -> Result<Fabric, TopologyError> {
    if servers == 0 {
        return Err(bad(preset, "servers", 0, "must be at least 1"));
    }
    // Bounded above so uplinks keep a bandwidth the simulator can use.
    if !(1.0..=1e6).contains(&opts.oversubscription) {
        return Err(bad(
            preset,
            "oversubscription",
            format!("{:?}", opts.oversubscription),
            "must be a number in 1..=1000000 (1 = non-blocking)",
        ));
    }
    if !(opts.link_gbps.is_finite() && opts.link_gbps > 0.0) {
        return Err(bad(
            preset,
            "link bandwidth",
            opts.link_gbps,
            "must be a positive number of GB/s",
        ));
    }
    if opts.servers_per_leaf == Some(0)
        || opts.spines == Some(0)
        || opts.servers_per_super_pod == Some(0)
    {
        return Err(bad(
            preset,
            "switch counts",
            0,
            "servers per leaf, spines and servers per super pod must be at least 1",
        ));
    }
    let devices = match (preset.fixed_devices(), opts.devices_per_server) {
        (Some(fixed), Some(d)) if d != fixed => {
            return Err(bad(
                preset,
                "devices per server",
                d,
                &format!("is fixed at {fixed} for this machine"),
            ));
        }
        (Some(fixed), _) => fixed,
        (None, d) => d.unwrap_or(1),
    };
    if devices == 0 {
        return Err(bad(preset, "devices per server", 0, "must be at least 1"));
    }
    let pods = match preset {
        Preset::AtlasA3SuperPod => Some(
            opts.servers_per_super_pod
                .unwrap_or(A3_SERVERS_PER_SUPER_POD),
        ),
        _ => None,
    };
    if let Err(why) = limits::check_ns(opts.link_latency_ns) {
        return Err(bad(preset, "link latency", opts.link_latency_ns, &why));
    }
    if let Err(why) = limits::check_gbps(opts.link_gbps) {
        return Err(bad(
            preset,
            "link bandwidth",
            format!("{:?}", opts.link_gbps),
            &why,
        ));
    }
    check_memory(preset, servers, devices, opts, limits::memory_bytes())?;
    let cluster = ClusterSpec::uniform(servers, devices, pods)?;
    let name = format!(
        "{preset} x {servers} server{}",
        if servers == 1 { "" } else { "s" }
    );
    build_for_cluster(preset, name, cluster, opts)
}

/// A lower bound of the bytes a preset's fabric takes (its NPU nodes, the
/// links each NPU has at least, leaf-spine uplinks and the cluster spec),
/// and its node and directed-link counts.
fn size_estimate(
    preset: Preset,
    servers: u32,
    devices: u32,
    opts: &PresetOptions,
) -> (u128, u128, u128) {
    let ranks = u128::from(servers) * u128::from(devices);
    let per_leaf = u128::from(opts.servers_per_leaf.unwrap_or(SERVERS_PER_LEAF).max(1));
    let leaves = u128::from(servers).div_ceil(per_leaf);
    let spines = if leaves > 1 {
        u128::from(opts.spines.unwrap_or(SPINES))
    } else {
        0
    };
    // Port to leaf (both directions), leaf to every spine (both directions).
    let scale_out = 2 * ranks + 2 * leaves * spines;
    let d = u128::from(devices);
    let (nodes, links) = match preset {
        Preset::Atlas800tA2 => (ranks + leaves + spines, ranks * (d - 1) + scale_out),
        Preset::Atlas800With910a => (ranks + leaves + spines, 5 * ranks + scale_out),
        Preset::AtlasA3SuperPod => (ranks + leaves + spines, 2 * ranks + scale_out),
        Preset::LeafSpine => (ranks + leaves + spines, scale_out),
        Preset::Ring => (ranks, 2 * ranks),
        Preset::FullMesh => (ranks, ranks * ranks.saturating_sub(1)),
        Preset::Torus2d => (ranks, 2 * ranks),
    };
    let node_bytes = (std::mem::size_of::<Node>() + 16) as u128;
    let link_bytes = (std::mem::size_of::<Link>() + 16) as u128;
    let rank_bytes = std::mem::size_of::<crate::RankInfo>() as u128 + 4;
    (
        nodes * node_bytes + links * link_bytes + ranks * rank_bytes,
        nodes,
        links,
    )
}

/// Refuses, before allocating, a preset size whose fabric alone would not
/// fit in `memory` bytes, naming the parameter and the estimate.
fn check_memory(
    preset: Preset,
    servers: u32,
    devices: u32,
    opts: &PresetOptions,
    memory: u64,
) -> Result<(), TopologyError> {
    let (bytes, nodes, links) = size_estimate(preset, servers, devices, opts);
    if bytes <= u128::from(memory) {
        return Ok(());
    }
    let many_spines = opts
        .spines
        .is_some_and(|s| u128::from(s) * 4 > u128::from(servers));
    let (parameter, value) = if many_spines {
        ("spines", opts.spines.unwrap_or(0))
    } else {
        ("servers", servers)
    };
    Err(bad(
        preset,
        parameter,
        value,
        &format!(
            "is too large for this machine: the fabric alone needs at least {} ({nodes} nodes, {links} directed links, {} ranks), more than its {} of memory; use fewer",
            limits::human_bytes(bytes),
            u128::from(servers) * u128::from(devices),
            limits::human_bytes(u128::from(memory)),
        ),
    ))
}

fn build_for_cluster(
    preset: Preset,
    name: String,
    cluster: ClusterSpec,
    opts: &PresetOptions,
) -> Result<Fabric, TopologyError> {
    let mut b = GraphBuilder::default();
    let world = cluster.world_size();
    let generic_npus = |b: &mut GraphBuilder| -> Vec<NodeIndex> {
        (0..world)
            .map(|r| b.node(format!("npu{r}"), NodeKind::Npu { rank: r }))
            .collect()
    };
    let direct = LinkClass::Custom("direct".into());
    let params = match preset {
        Preset::Atlas800tA2 => {
            let npus = server_npus(&mut b, &cluster);
            for server in cluster.servers() {
                full_mesh(
                    &mut b,
                    &npus,
                    server,
                    A2_HCCS_GBPS,
                    HCCS_LATENCY_NS,
                    &LinkClass::Hccs,
                );
            }
            scale_out(&mut b, &npus, &cluster, opts, A2_ROCE_GBPS);
            params_910b()
        }
        Preset::Atlas800With910a => {
            let npus = server_npus(&mut b, &cluster);
            for (s, server) in cluster.servers().iter().enumerate() {
                let cpu = b.node(format!("s{s}.cpu"), NodeKind::Cpu);
                let groups: Vec<Vec<u32>> = [0, 1]
                    .iter()
                    .map(|&g| {
                        server
                            .iter()
                            .copied()
                            .filter(|&r| {
                                cluster
                                    .rank(r)
                                    .is_some_and(|i| i.device_id / A910_GROUP == g)
                            })
                            .collect()
                    })
                    .collect();
                let rest: Vec<u32> = server
                    .iter()
                    .copied()
                    .filter(|&r| {
                        cluster
                            .rank(r)
                            .is_some_and(|i| i.device_id >= 2 * A910_GROUP)
                    })
                    .collect();
                for (g, group) in groups.iter().chain(std::iter::once(&rest)).enumerate() {
                    if group.is_empty() {
                        continue;
                    }
                    if g < 2 {
                        full_mesh(
                            &mut b,
                            &npus,
                            group,
                            A910_HCCS_GBPS,
                            HCCS_LATENCY_NS,
                            &LinkClass::Hccs,
                        );
                    }
                    let psw = b.node(format!("s{s}.pcie{g}"), NodeKind::PcieSwitch);
                    b.duplex(psw, cpu, A910_PCIE_GBPS, PCIE_LATENCY_NS, &LinkClass::Pcie);
                    for &r in group {
                        b.duplex(
                            npus[r as usize],
                            psw,
                            A910_PCIE_GBPS,
                            PCIE_LATENCY_NS,
                            &LinkClass::Pcie,
                        );
                    }
                }
            }
            scale_out(&mut b, &npus, &cluster, opts, A910_ROCE_GBPS);
            params_910a()
        }
        Preset::AtlasA3SuperPod => {
            let npus = server_npus(&mut b, &cluster);
            let mut planes: Vec<Vec<NodeIndex>> = Vec::new();
            for (p, _) in cluster.super_pods().iter().enumerate() {
                planes.push(
                    (0..A3_UB_PLANES)
                        .map(|k| b.node(format!("pod{p}.ub-l2.{k}"), NodeKind::Switch))
                        .collect(),
                );
            }
            for (s, server) in cluster.servers().iter().enumerate() {
                let l1 = b.node(format!("s{s}.ub-l1"), NodeKind::Switch);
                for &r in server {
                    b.duplex(
                        npus[r as usize],
                        l1,
                        A3_UB_GBPS,
                        UB_LATENCY_NS,
                        &LinkClass::Ub,
                    );
                }
                let pod = cluster.rank(server[0]).map_or(0, |i| i.super_pod) as usize;
                let up = server.len() as f64 * A3_UB_GBPS / f64::from(A3_UB_PLANES);
                for &l2 in &planes[pod] {
                    b.duplex(l1, l2, up, UB_LATENCY_NS, &LinkClass::Ub);
                }
            }
            scale_out(&mut b, &npus, &cluster, opts, A3_ROCE_GBPS);
            params_910b()
        }
        Preset::Ring => {
            let npus = generic_npus(&mut b);
            let n = npus.len();
            let links = if n <= 2 { n.saturating_sub(1) } else { n };
            for i in 0..links {
                b.duplex(
                    npus[i],
                    npus[(i + 1) % n],
                    opts.link_gbps,
                    opts.link_latency_ns,
                    &direct,
                );
            }
            params_910b()
        }
        Preset::FullMesh => {
            let npus = generic_npus(&mut b);
            let all: Vec<u32> = (0..world).collect();
            full_mesh(
                &mut b,
                &npus,
                &all,
                opts.link_gbps,
                opts.link_latency_ns,
                &direct,
            );
            params_910b()
        }
        Preset::LeafSpine => {
            let npus = generic_npus(&mut b);
            scale_out(&mut b, &npus, &cluster, opts, opts.link_gbps);
            params_910b()
        }
        Preset::Torus2d => {
            let (rows, cols) = match opts.torus_dims {
                Some((r, c)) if u64::from(r) * u64::from(c) == u64::from(world) => (r, c),
                Some((r, c)) => {
                    return Err(bad(
                        preset,
                        "torus dimensions",
                        format!("{r}x{c}"),
                        &format!("must multiply to the rank count {world}"),
                    ));
                }
                None => {
                    let r = (1..=world)
                        .take_while(|&r| u64::from(r) * u64::from(r) <= u64::from(world))
                        .filter(|r| world.is_multiple_of(*r))
                        .last()
                        .unwrap_or(1);
                    (r, world / r)
                }
            };
            let npus = generic_npus(&mut b);
            let at = |r: u32, c: u32| npus[(r * cols + c) as usize];
            for r in 0..rows {
                for c in 0..cols {
                    if cols > 1 && (c + 1 < cols || cols > 2) {
                        b.duplex(
                            at(r, c),
                            at(r, (c + 1) % cols),
                            opts.link_gbps,
                            opts.link_latency_ns,
                            &direct,
                        );
                    }
                    if rows > 1 && (r + 1 < rows || rows > 2) {
                        b.duplex(
                            at(r, c),
                            at((r + 1) % rows, c),
                            opts.link_gbps,
                            opts.link_latency_ns,
                            &direct,
                        );
                    }
                }
            }
            params_910b()
        }
    };
    Fabric::from_graph(name, b.graph, cluster, params)
}

/// One NPU node per rank, named `s{server}.npu{device_id}`.
fn server_npus(b: &mut GraphBuilder, cluster: &ClusterSpec) -> Vec<NodeIndex> {
    (0..cluster.world_size())
        .map(|r| {
            let (s, d) = cluster.rank(r).map_or((0, r), |i| (i.server, i.device_id));
            b.node(format!("s{s}.npu{d}"), NodeKind::Npu { rank: r })
        })
        .collect()
}

fn full_mesh(
    b: &mut GraphBuilder,
    npus: &[NodeIndex],
    ranks: &[u32],
    gbps: f64,
    latency_ns: u64,
    class: &LinkClass,
) {
    for (i, &x) in ranks.iter().enumerate() {
        for &y in &ranks[i + 1..] {
            b.duplex(npus[x as usize], npus[y as usize], gbps, latency_ns, class);
        }
    }
}

/// The RoCE scale-out: every NPU port to its server's leaf (servers are
/// grouped onto leaves in order, `servers_per_leaf` per leaf — the
/// "top-of-rack" wiring, not rail-optimised: all ports of a server share a
/// leaf, so two servers under one leaf are 2 hops apart); with more than one
/// leaf, every leaf to every spine with bandwidth
/// `leaf downlink bandwidth / (oversubscription × spines)` per spine.
fn scale_out(
    b: &mut GraphBuilder,
    npus: &[NodeIndex],
    cluster: &ClusterSpec,
    opts: &PresetOptions,
    port_gbps: f64,
) {
    let per_leaf = opts.servers_per_leaf.unwrap_or(SERVERS_PER_LEAF) as usize;
    let servers = cluster.servers();
    let leaves: Vec<NodeIndex> = (0..servers.len().div_ceil(per_leaf))
        .map(|l| b.node(format!("leaf{l}"), NodeKind::Switch))
        .collect();
    let mut down = vec![0.0f64; leaves.len()];
    for (s, ranks) in servers.iter().enumerate() {
        for &r in ranks {
            b.duplex(
                npus[r as usize],
                leaves[s / per_leaf],
                port_gbps,
                ROCE_PORT_LATENCY_NS,
                &LinkClass::Roce,
            );
            down[s / per_leaf] += port_gbps;
        }
    }
    if leaves.len() > 1 {
        let n_spines = opts.spines.unwrap_or(SPINES);
        let spines: Vec<NodeIndex> = (0..n_spines)
            .map(|k| b.node(format!("spine{k}"), NodeKind::Switch))
            .collect();
        for (l, &leaf) in leaves.iter().enumerate() {
            let up = down[l] / (opts.oversubscription * f64::from(n_spines));
            for &spine in &spines {
                b.duplex(leaf, spine, up, SWITCH_LINK_LATENCY_NS, &LinkClass::Roce);
            }
        }
    }
}

impl Fabric {
    /// The fabric of the machines a rank table describes: version 1.0 tables
    /// are taken as Atlas 800T A2 servers (HCCS full mesh among each server's
    /// devices, RoCE scale-out), version 1.2 tables as Atlas A3 super-pod
    /// servers with the table's super pods. Default [`PresetOptions`].
    ///
    /// # Errors
    /// Only if the table's cluster cannot be built (not expected for a
    /// validated table).
    pub fn for_rank_table(table: &RankTable) -> Result<Fabric, TopologyError> {
        let cluster = ClusterSpec::from_rank_table(table);
        let preset = match table.version() {
            Version::V1_2 => Preset::AtlasA3SuperPod,
            _ => Preset::Atlas800tA2,
        };
        let name = format!("rank table v{} as {preset}", table.version());
        build_for_cluster(preset, name, cluster, &PresetOptions::default())
    }
}

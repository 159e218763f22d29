//! One data-parallel training step on a fabric: compute on its own
//! timeline, the gradients' collectives on the simulator.

use std::collections::BTreeMap;

use hccl_algos::collective::CollectiveArgs;
use hccl_algos::select::{select, HcclAlgo};
use hccl_topology::{Fabric, NodeKind};

use super::file::{invalid, WorkloadError};
use super::Workload;
use crate::hooks::{Ctl, Hooks, OpStart};
use crate::report::SimReport;
use crate::scenario::{Mode, Scenario};

/// When a bucket's collectives may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// After the whole backward pass (no overlap).
    AfterBackward,
    /// As soon as the bucket's last gradient is ready (DDP's overlap).
    WhenReady,
}

/// The collectives one bucket of gradients goes through.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketOps {
    /// Name in reports (`bucket 3`, `grad 17`, ...).
    pub label: String,
    /// Its gradients: indices into [`Workload::gradients`].
    pub grads: Vec<usize>,
    /// Its collectives on the world communicator, in order
    /// (`world_size` = the fabric's).
    pub ops: Vec<CollectiveArgs>,
}

/// What a step runs: buckets in launch order and when they launch.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSpec {
    /// When buckets start.
    pub launch: Launch,
    /// The buckets, in the order every rank launches them (one
    /// communication stream: a bucket starts after the previous one ends).
    pub buckets: Vec<BucketOps>,
}

/// One collective of the step.
#[derive(Debug, Clone, PartialEq)]
pub struct OpTiming {
    /// Index of its bucket in [`StepSpec::buckets`].
    pub bucket: usize,
    /// `AllReduce fp32 x 1048576` style label.
    pub label: String,
    /// The algorithm the selector chose.
    pub algo: String,
    /// When its bucket's gradients were ready, ns from the step's start.
    pub ready_ns: u64,
    /// Earliest start over the ranks, ns.
    pub start_ns: u64,
    /// Latest end over the ranks, ns.
    pub end_ns: u64,
    /// Each rank's send buffer, bytes (the collective's per-rank payload).
    pub payload_bytes: u64,
}

/// Link usage of the step, over the fabric's links of one kind.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkGroupUsage {
    /// `hccs npu->npu`, `roce npu->switch`, `roce switch->switch`, ...
    pub group: String,
    /// Directed links of this kind in the fabric.
    pub links: usize,
    /// Of them, links some flow crossed.
    pub used: usize,
    /// Bytes that crossed them.
    pub bytes: u64,
    /// Mean over the group's links of busy time ÷ step time (a link is
    /// busy while any flow crosses it).
    pub busy_fraction: f64,
    /// Bytes ÷ (Σ bandwidth × step time): the share of the group's
    /// capacity the step used.
    pub load_fraction: f64,
}

/// What one simulated step gives.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Forward time, ns.
    pub forward_ns: u64,
    /// Compute time (forward + backward), ns.
    pub compute_ns: u64,
    /// Step time: the later of the compute's end and the last collective's
    /// end over all ranks, ns.
    pub step_ns: u64,
    /// Communication not hidden behind compute: `step_ns − compute_ns`.
    pub exposed_comm_ns: u64,
    /// The busiest rank's communication time (Σ of its collectives'
    /// durations, including waits for slower peers), ns.
    pub comm_ns: u64,
    /// Every collective, in launch order.
    pub ops: Vec<OpTiming>,
    /// Link usage by kind, sorted by group name.
    pub links: Vec<LinkGroupUsage>,
    /// Bytes the NPUs put on the wire (Σ over links leaving an NPU).
    pub injected_bytes: u64,
    /// The simulator's report of the collectives.
    pub report: SimReport,
}

/// Starts each op no earlier than its bucket's ready time.
struct ReadyGate {
    ready: Vec<u64>,
}

impl Hooks for ReadyGate {
    fn before_op(&mut self, ctl: &mut Ctl<'_, '_>, _rank: u32, op: usize) -> OpStart {
        match self.ready.get(op) {
            Some(&t) if t > ctl.now() => OpStart::Delay(t - ctl.now()),
            _ => OpStart::Run,
        }
    }

    fn observes_messages(&self) -> bool {
        false
    }
}

/// Simulates one training step of `w` on every rank of `fabric` (data
/// parallel: every rank computes the same layers in the same time and
/// runs the same collectives).
///
/// Compute: forward, then backward in reverse layer order; a gradient is
/// ready when its layer's backward ends ([`Workload::gradients`]). The
/// compute timeline is not slowed by communication (the NPU's compute and
/// communication streams are independent; memory-bandwidth interference
/// is not modelled). Communication: the buckets' collectives in order on
/// one stream per rank; a bucket's first collective starts at the later of
/// its ready time ([`Launch`]) and the end of the previous collective on
/// that rank. Each collective runs in timing mode with the algorithm the
/// selector picks on this fabric (`hccl_algos::select::select` with
/// [`crate::selector`]'s layout and costs, as `hccl test` does), or
/// `env`'s (`HCCL_ALGO`) where it fits.
///
/// # Errors
/// [`WorkloadError::Invalid`] for a bucket naming a gradient the workload
/// does not have (`buckets[b].grads`) or with no collective;
/// [`WorkloadError::Sim`] for collectives that do not plan (a world size
/// other than the fabric's); [`WorkloadError::Stalled`] if ranks hang.
pub fn simulate_step(
    fabric: &Fabric,
    w: &Workload,
    spec: &StepSpec,
    env: Option<&HcclAlgo>,
) -> Result<StepReport, WorkloadError> {
    let grads = w.gradients();
    let compute_ns = w.compute_ns();
    let layout = crate::selector::layout(fabric);
    let costs = crate::selector::cost_model(fabric);
    let mut sc = Scenario::new(fabric).mode(Mode::Timing);
    let world = sc.world();
    let mut ready = Vec::new();
    let mut meta = Vec::new();
    for (b, bucket) in spec.buckets.iter().enumerate() {
        if bucket.ops.is_empty() {
            return Err(invalid(
                format!("buckets[{b}].ops"),
                "[]",
                "a bucket runs at least one collective",
            ));
        }
        let mut at = match spec.launch {
            Launch::AfterBackward => compute_ns,
            Launch::WhenReady => w.forward_ns(),
        };
        for &g in &bucket.grads {
            let grad = grads.get(g).ok_or_else(|| {
                invalid(
                    format!("buckets[{b}].grads"),
                    g,
                    format!("the workload has gradients 0..{}", grads.len()),
                )
            })?;
            if spec.launch == Launch::WhenReady {
                at = at.max(grad.ready_ns);
            }
        }
        for args in &bucket.ops {
            let algo = select(args, &layout, &costs, env).spec;
            sc.collective(world, args.clone(), algo)?;
            ready.push(at);
            let (send, _) = args.io_bytes(0);
            meta.push((b, algo.to_string(), send, at));
        }
    }
    let mut gate = ReadyGate { ready };
    let report = sc.run_with_hooks(&mut gate)?;
    if let Some(stall) = &report.stall {
        return Err(WorkloadError::Stalled(format!(
            "{} rank(s) stuck at {} ns",
            stall.ranks.len(),
            stall.time_ns
        )));
    }
    let n = fabric.world_size() as usize;
    let mut comm_per_rank = vec![0u64; n];
    let mut last_end = 0u64;
    let mut ops = Vec::with_capacity(meta.len());
    for (o, (bucket, algo, payload_bytes, ready_ns)) in report.ops.iter().zip(meta) {
        let starts = o.start_ns.iter().flatten();
        let ends = o.end_ns.iter().flatten();
        for (r, (s, e)) in o.start_ns.iter().zip(&o.end_ns).enumerate() {
            if let (Some(s), Some(e)) = (s, e) {
                comm_per_rank[r] = comm_per_rank[r].saturating_add(e.saturating_sub(*s));
            }
        }
        let end_ns = ends.copied().max().unwrap_or(0);
        last_end = last_end.max(end_ns);
        ops.push(OpTiming {
            bucket,
            label: o.label.clone(),
            algo,
            ready_ns,
            start_ns: starts.copied().min().unwrap_or(0),
            end_ns,
            payload_bytes,
        });
    }
    let step_ns = compute_ns.max(last_end);
    let (links, injected_bytes) = link_groups(fabric, &report, step_ns);
    Ok(StepReport {
        forward_ns: w.forward_ns(),
        compute_ns,
        step_ns,
        exposed_comm_ns: step_ns - compute_ns,
        comm_ns: comm_per_rank.into_iter().max().unwrap_or(0),
        ops,
        links,
        injected_bytes,
        report,
    })
}

/// Link usage per (class, endpoint kinds), and the bytes leaving NPUs.
fn link_groups(fabric: &Fabric, report: &SimReport, step_ns: u64) -> (Vec<LinkGroupUsage>, u64) {
    struct Acc {
        links: usize,
        used: usize,
        bytes: u64,
        busy: f64,
        capacity_bytes: f64,
    }
    let g = fabric.graph();
    let kind = |n: hccl_topology::NodeIndex| match g[n].kind {
        NodeKind::Npu { .. } => "npu",
        NodeKind::Switch => "switch",
        NodeKind::PcieSwitch => "pcie-switch",
        _ => "cpu",
    };
    let mut groups: BTreeMap<String, Acc> = BTreeMap::new();
    let mut injected = 0u64;
    for e in g.edge_indices() {
        let Some((a, b)) = g.edge_endpoints(e) else {
            continue;
        };
        let link = &g[e];
        let usage = report.links.get(e.index()).copied().unwrap_or_default();
        let acc = groups
            .entry(format!("{} {}->{}", link.class, kind(a), kind(b)))
            .or_insert(Acc {
                links: 0,
                used: 0,
                bytes: 0,
                busy: 0.0,
                capacity_bytes: 0.0,
            });
        acc.links += 1;
        acc.used += usize::from(usage.bytes > 0);
        acc.bytes = acc.bytes.saturating_add(usage.bytes);
        acc.busy += usage.busy_ns as f64;
        // GB/s = bytes per ns.
        acc.capacity_bytes += link.bandwidth_gbps * step_ns as f64;
        if kind(a) == "npu" {
            injected = injected.saturating_add(usage.bytes);
        }
    }
    let step = (step_ns as f64).max(1.0);
    let out = groups
        .into_iter()
        .map(|(group, a)| LinkGroupUsage {
            group,
            links: a.links,
            used: a.used,
            bytes: a.bytes,
            busy_fraction: a.busy / (a.links as f64 * step),
            load_fraction: if a.capacity_bytes > 0.0 {
                a.bytes as f64 / a.capacity_bytes
            } else {
                0.0
            },
        })
        .collect();
    (out, injected)
}

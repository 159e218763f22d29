//! Training workloads: a model's layers (forward and backward compute
//! time, gradient bytes per parameter tensor), built-in profiles
//! ([`profiles`]: ResNet-50, GPT-2 small, GPT-3 XL), a versioned JSON file
//! format, and one data-parallel training step simulated on a fabric
//! ([`simulate_step`]): compute runs on its own timeline (a stream the
//! network does not slow), the gradient collectives run on the simulator,
//! each launched once its gradients are ready and the previous one is done.
//!
//! File format (version 1; unknown fields are refused, every error names
//! its field):
//!
//! ```json
//! {
//!   "version": 1,
//!   "name": "tiny-mlp",
//!   "source": "where the numbers come from (optional)",
//!   "layers": [
//!     {"name": "fc1", "forward_ns": 20000, "backward_ns": 40000, "grad_bytes": [4194304, 4096]},
//!     {"name": "fc2", "forward_ns": 10000, "backward_ns": 20000, "grad_bytes": [40960, 40]}
//!   ]
//! }
//! ```
//!
//! - `layers` in forward (parameter) order; backward runs them in reverse,
//!   so the last layer's gradients are ready first.
//! - `forward_ns` (default 0), `backward_ns`: compute time of the layer on
//!   one rank for one step, ns (at most 2147483647 s each, and in sum).
//! - `grad_bytes`: the layer's gradients, one per parameter tensor in
//!   parameter order, bytes of fp32 (a positive multiple of 4); may be
//!   empty (a layer that only computes, such as a tied output head). A
//!   layer's gradients are ready when its backward ends.

mod file;
pub mod profiles;
mod step;

use serde::{Deserialize, Serialize};

pub use file::{WorkloadError, MAX_GRAD_BYTES};
pub use step::{simulate_step, BucketOps, Launch, LinkGroupUsage, OpTiming, StepReport, StepSpec};

/// The file format version this build reads and writes.
pub const WORKLOAD_VERSION: u32 = 1;

/// A model's training step on one rank: its layers in forward order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Format version: [`WORKLOAD_VERSION`].
    pub version: u32,
    /// Name in reports.
    pub name: String,
    /// Where the numbers come from (free text).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The layers, in forward (parameter) order.
    pub layers: Vec<Layer>,
}

/// One layer of a [`Workload`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// Name (e.g. `layer1.0.conv2`).
    pub name: String,
    /// Forward compute time on one rank for one step, ns.
    #[serde(default)]
    pub forward_ns: u64,
    /// Backward compute time on one rank for one step, ns.
    pub backward_ns: u64,
    /// Bytes of each of its fp32 gradients (one per parameter tensor, in
    /// parameter order).
    #[serde(default)]
    pub grad_bytes: Vec<u64>,
}

/// One gradient (parameter tensor) of a workload, in parameter order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gradient {
    /// Index of its layer.
    pub layer: usize,
    /// Bytes (fp32).
    pub bytes: u64,
    /// When backward has produced it on every rank, ns from the step's start.
    pub ready_ns: u64,
}

impl Workload {
    /// Forward time of the step, ns (the sum over layers).
    pub fn forward_ns(&self) -> u64 {
        self.layers
            .iter()
            .fold(0u64, |a, l| a.saturating_add(l.forward_ns))
    }

    /// Backward time of the step, ns.
    pub fn backward_ns(&self) -> u64 {
        self.layers
            .iter()
            .fold(0u64, |a, l| a.saturating_add(l.backward_ns))
    }

    /// Compute time of the step (forward + backward), ns.
    pub fn compute_ns(&self) -> u64 {
        self.forward_ns().saturating_add(self.backward_ns())
    }

    /// Every gradient in parameter order, with its ready time: the end of
    /// forward plus the backward time of its layer and every layer after it.
    pub fn gradients(&self) -> Vec<Gradient> {
        let mut ends = vec![0u64; self.layers.len()];
        let mut t = self.forward_ns();
        for (i, l) in self.layers.iter().enumerate().rev() {
            t = t.saturating_add(l.backward_ns);
            ends[i] = t;
        }
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                let ready_ns = ends[i];
                l.grad_bytes.iter().map(move |&bytes| Gradient {
                    layer: i,
                    bytes,
                    ready_ns,
                })
            })
            .collect()
    }

    /// Parameters (fp32 elements) over all gradients.
    pub fn param_count(&self) -> u64 {
        self.layers
            .iter()
            .flat_map(|l| &l.grad_bytes)
            .fold(0u64, |a, b| a.saturating_add(b / 4))
    }

    /// Gradient bytes of one step.
    pub fn grad_bytes(&self) -> u64 {
        self.param_count().saturating_mul(4)
    }
}

//! Built-in workload profiles: layer shapes from the published
//! architectures, compute times from FLOP counts and a stated FLOP rate.
//!
//! | profile | parameters | source of the count |
//! | --- | ---: | --- |
//! | `resnet50` | 25,557,032 | torchvision's `ResNet50_Weights.IMAGENET1K_V1` (`num_params`), the ResNet-50 of He et al. 2016 (arXiv:1512.03385, Table 1) with the stride on the 3×3 convolution (torchvision's "V1.5") |
//! | `gpt2` | 124,439,808 | GPT-2 small (Radford et al. 2019: 12 layers, d_model 768, vocabulary 50,257, context 1024; the paper's table says 117M, the released checkpoint has 124 M with the output head tied to the embedding) |
//! | `gpt3-xl` | 1,315,723,264 | GPT-3 XL (Brown et al. 2020, arXiv:2005.14165, Table 2.1: "1.3B", 24 layers, d_model 2048, 16 heads, context 2048), GPT-2's block and vocabulary |
//!
//! The counts are derived here from the shapes; the tests check them
//! against the published figures.
//!
//! **FLOPs.** A layer's forward FLOPs are 2 × its multiply-accumulates
//! (convolutions and matrix products; normalisation, activations and
//! pooling are not counted): ResNet-50 sums to 4.09 G MACs per 224×224
//! image, torchvision's "GFLOPS 4.09". A transformer block's attention
//! adds `4 · n_ctx · d_model` FLOPs per token (QKᵀ and AV, PaLM's
//! accounting: Chowdhery et al. 2022, arXiv:2204.02311, appendix B).
//! Backward is [`BACKWARD_FACTOR`] × forward (gradients of the inputs and
//! of the weights, each a product of the forward's size: Kaplan et al.
//! 2020, arXiv:2001.08361, §2.1).
//!
//! **FLOP rate.** Times are FLOPs ÷ an effective rate, by default
//! [`PEAK_FP16_TFLOPS_910B`] × [`DEFAULT_MFU`]. Both are assumptions: see
//! their docs.

use super::{Layer, Workload, WORKLOAD_VERSION};

/// Peak dense FP16 rate of one Ascend 910B NPU, TFLOP/s: the figure
/// reported for the 910B by third parties (Huawei's own published figure
/// is for the first Ascend 910, 256 TFLOP/s FP16, Hot Chips 31, 2019; we
/// found no Huawei datasheet giving the 910B's). An assumption: pass
/// another rate to [`Profile::workload`] (`hccl workload --tflops`).
pub const PEAK_FP16_TFLOPS_910B: f64 = 320.0;

/// Fraction of the peak a training step achieves (model FLOPs
/// utilisation). An assumption: 0.4 lies in the range large-model
/// training reports (PaLM 540B 46.2%, Megatron-Turing NLG 530B 30.2%,
/// GPT-3 21.3%: Chowdhery et al. 2022, Table 3).
pub const DEFAULT_MFU: f64 = 0.4;

/// Backward FLOPs per forward FLOP (Kaplan et al. 2020, §2.1: 2N forward,
/// 4N backward per token).
pub const BACKWARD_FACTOR: f64 = 2.0;

/// One layer of a profile: its forward FLOPs per sample and its
/// parameter tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileLayer {
    /// Name, as the reference implementation's module (`layer1.0.conv2`, `h.3.mlp`).
    pub name: String,
    /// Forward FLOPs for one sample (an image, a token).
    pub forward_flops: f64,
    /// Elements of each parameter tensor, in parameter order.
    pub params: Vec<u64>,
}

/// A model from its architecture: per-layer FLOPs and parameter shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Name (`resnet50`, `gpt2`, `gpt3-xl`).
    pub name: &'static str,
    /// Where the architecture and its parameter count come from.
    pub source: &'static str,
    /// What one sample is (`image`, `token`).
    pub sample: &'static str,
    /// Samples per rank per step when none is given, and why.
    pub default_batch: (u64, &'static str),
    /// The layers, in forward (parameter) order.
    pub layers: Vec<ProfileLayer>,
}

impl Profile {
    /// Names of the built-in profiles.
    pub const NAMES: [&'static str; 3] = ["resnet50", "gpt2", "gpt3-xl"];

    /// The built-in profile of this name (see [`Profile::NAMES`]).
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            "resnet50" => Some(Profile::resnet50()),
            "gpt2" => Some(Profile::gpt(
                "gpt2",
                Gpt {
                    layers: 12,
                    d_model: 768,
                    n_ctx: 1024,
                    vocab: 50257,
                },
                "GPT-2 small (Radford et al. 2019), 124,439,808 parameters (output head tied to wte)",
                (
                    12 * 1024,
                    "12 sequences of 1024 tokens: nanoGPT's config/train_gpt2.py batch_size",
                ),
            )),
            "gpt3-xl" => Some(Profile::gpt(
                "gpt3-xl",
                Gpt {
                    layers: 24,
                    d_model: 2048,
                    n_ctx: 2048,
                    vocab: 50257,
                },
                "GPT-3 XL (Brown et al. 2020, Table 2.1: 1.3B), 1,315,723,264 parameters (output head tied to wte)",
                (
                    4 * 2048,
                    "4 sequences of 2048 tokens: GPT-3 XL's 1M-token batch over 128 ranks",
                ),
            )),
            _ => None,
        }
    }

    /// ResNet-50 as torchvision builds it (V1.5: stride 2 on the 3×3
    /// convolution of each stage's first block), 224×224 inputs; one
    /// layer per convolution with its batch norm (conv weight, BN weight,
    /// BN bias), downsample branches as their own layer, then `fc`.
    pub fn resnet50() -> Profile {
        let mut layers = Vec::new();
        let mut conv = |name: String, k: u64, cin: u64, cout: u64, hw_out: u64| {
            let weights = k * k * cin * cout;
            layers.push(ProfileLayer {
                name,
                forward_flops: 2.0 * (weights * hw_out * hw_out) as f64,
                params: vec![weights, cout, cout],
            });
        };
        conv("conv1".into(), 7, 3, 64, 112);
        let mut cin = 64;
        // (width, blocks, output side, stride of the first block)
        for (s, (w, n, hw, stride)) in [
            (64, 3, 56, 1),
            (128, 4, 28, 2),
            (256, 6, 14, 2),
            (512, 3, 7, 2),
        ]
        .into_iter()
        .enumerate()
        {
            for b in 0..n {
                let p = format!("layer{}.{b}", s + 1);
                let hw_in = if b == 0 { hw * stride } else { hw };
                conv(format!("{p}.conv1"), 1, cin, w, hw_in);
                conv(format!("{p}.conv2"), 3, w, w, hw);
                conv(format!("{p}.conv3"), 1, w, 4 * w, hw);
                if b == 0 {
                    conv(format!("{p}.downsample"), 1, cin, 4 * w, hw);
                }
                cin = 4 * w;
            }
        }
        layers.push(ProfileLayer {
            name: "fc".into(),
            forward_flops: 2.0 * (2048 * 1000) as f64,
            params: vec![2048 * 1000, 1000],
        });
        Profile {
            name: "resnet50",
            source: "ResNet-50 (He et al. 2016; torchvision V1.5), 25,557,032 parameters, 4.09 G MACs per 224x224 image",
            sample: "image",
            default_batch: (
                32,
                "32 images: pytorch/examples imagenet's batch of 256 per 8-device node",
            ),
            layers,
        }
    }

    /// A GPT-2-style decoder (Radford et al. 2019): token and position
    /// embeddings, `layers` blocks of (ln_1, attention with fused QKV and
    /// an output projection, ln_2, a 4·d_model MLP), all with biases, a
    /// final LayerNorm, and an output head tied to the token embedding
    /// (its gradient is ready when the embedding's is, at the end of
    /// backward; the head's compute is the `lm_head` layer, which has no
    /// parameters of its own).
    fn gpt(
        name: &'static str,
        g: Gpt,
        source: &'static str,
        batch: (u64, &'static str),
    ) -> Profile {
        let d = g.d_model;
        let mut layers = vec![ProfileLayer {
            name: "wte+wpe".into(),
            forward_flops: 0.0,
            params: vec![g.vocab * d, g.n_ctx * d],
        }];
        let ln = |name: String| ProfileLayer {
            name,
            forward_flops: 0.0,
            params: vec![d, d],
        };
        for i in 0..g.layers {
            layers.push(ln(format!("h.{i}.ln_1")));
            layers.push(ProfileLayer {
                name: format!("h.{i}.attn"),
                forward_flops: 2.0 * (4 * d * d) as f64 + 4.0 * (g.n_ctx * d) as f64,
                params: vec![d * 3 * d, 3 * d, d * d, d],
            });
            layers.push(ln(format!("h.{i}.ln_2")));
            layers.push(ProfileLayer {
                name: format!("h.{i}.mlp"),
                forward_flops: 2.0 * (8 * d * d) as f64,
                params: vec![d * 4 * d, 4 * d, 4 * d * d, d],
            });
        }
        layers.push(ln("ln_f".into()));
        layers.push(ProfileLayer {
            name: "lm_head".into(),
            forward_flops: 2.0 * (d * g.vocab) as f64,
            params: vec![],
        });
        Profile {
            name,
            source,
            sample: "token",
            default_batch: batch,
            layers,
        }
    }

    /// Parameters of the model.
    pub fn param_count(&self) -> u64 {
        self.layers.iter().flat_map(|l| &l.params).sum()
    }

    /// Forward FLOPs per sample.
    pub fn forward_flops(&self) -> f64 {
        self.layers.iter().map(|l| l.forward_flops).sum()
    }

    /// The workload of one step of `batch` samples per rank at an
    /// effective `tflops` (10¹² FLOP/s): per layer, forward time =
    /// FLOPs × batch ÷ rate and backward = [`BACKWARD_FACTOR`] × that,
    /// rounded up to whole ns; fp32 gradients (4 bytes per parameter).
    pub fn workload(&self, batch: u64, tflops: f64) -> Workload {
        let ns = |flops: f64| (flops * batch as f64 / (tflops * 1e3)).ceil() as u64;
        Workload {
            version: WORKLOAD_VERSION,
            name: self.name.into(),
            source: format!(
                "{}; {batch} {}s per rank per step at {tflops} TFLOP/s effective; forward FLOPs 2 x MACs, backward {BACKWARD_FACTOR} x forward",
                self.source, self.sample
            ),
            layers: self
                .layers
                .iter()
                .map(|l| Layer {
                    name: l.name.clone(),
                    forward_ns: ns(l.forward_flops),
                    backward_ns: ns(l.forward_flops * BACKWARD_FACTOR),
                    grad_bytes: l.params.iter().map(|p| p * 4).collect(),
                })
                .collect(),
        }
    }
}

/// A GPT-2-style decoder's shape.
#[derive(Debug, Clone, Copy)]
struct Gpt {
    layers: u64,
    d_model: u64,
    n_ctx: u64,
    vocab: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_match_the_published_figures() {
        // torchvision's ResNet50_Weights.IMAGENET1K_V1.meta["num_params"].
        let r = Profile::resnet50();
        assert_eq!(r.param_count(), 25_557_032);
        // 161 parameter tensors, as `len(list(resnet50().parameters()))`.
        assert_eq!(r.layers.iter().map(|l| l.params.len()).sum::<usize>(), 161);
        // torchvision's "GFLOPS 4.09" (multiply-accumulates per image).
        let gmacs = r.forward_flops() / 2e9;
        assert!((gmacs - 4.09).abs() < 0.005, "{gmacs}");
        // GPT-2 small: the released checkpoint's 124,439,808.
        assert_eq!(Profile::builtin("gpt2").unwrap().param_count(), 124_439_808);
        // GPT-3 XL: "1.3B".
        let xl = Profile::builtin("gpt3-xl").unwrap().param_count() as f64;
        assert!((xl / 1.3e9 - 1.0).abs() < 0.02, "{xl}");
        for n in Profile::NAMES {
            let p = Profile::builtin(n).unwrap();
            assert_eq!(p.name, n);
            p.workload(p.default_batch.0, 128.0).validate().unwrap();
        }
        assert!(Profile::builtin("vgg16").is_none());
    }

    #[test]
    fn times_follow_the_flops_and_the_rate() {
        let r = Profile::resnet50();
        let w = r.workload(32, 100.0);
        // 32 images × 8.18 GFLOP forward at 100 TFLOP/s: 2.62 ms.
        let want = r.forward_flops() * 32.0 / 100e12 * 1e9;
        assert!(
            (w.forward_ns() as f64 - want).abs() <= w.layers.len() as f64,
            "{}",
            w.forward_ns()
        );
        let ratio = w.backward_ns() as f64 / w.forward_ns() as f64;
        assert!((ratio - 2.0).abs() < 1e-3, "{ratio}");
        // Twice the rate, half the time (up to rounding per layer).
        let fast = r.workload(32, 200.0);
        assert!(fast.compute_ns().abs_diff(w.compute_ns() / 2) <= 2 * w.layers.len() as u64);
        assert_eq!(w.grad_bytes(), 25_557_032 * 4);
    }

    #[test]
    fn the_tied_embedding_is_ready_last() {
        let w = Profile::builtin("gpt2").unwrap().workload(1024, 128.0);
        let g = w.gradients();
        let last = g.iter().map(|g| g.ready_ns).max().unwrap();
        assert_eq!(g[0].ready_ns, last);
        assert_eq!(g[0].bytes, 50257 * 768 * 4);
        assert_eq!(last, w.compute_ns());
        // The head's gradient (ln_f's) is ready first, after lm_head's backward.
        let first = g.iter().map(|g| g.ready_ns).min().unwrap();
        assert_eq!(first, g[g.len() - 1].ready_ns);
        assert!(first > w.forward_ns());
    }
}

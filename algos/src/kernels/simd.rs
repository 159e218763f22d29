//! Run-time choice of the instruction set a kernel runs on: the crate's
//! one `unsafe` module.
//!
//! Every kernel is written once, as plain Rust over byte slices (see
//! `native` and `half_float`), generic over a [`Simd`] token. [`run`]
//! compiles that code five times: for the portable target (SSE2 on
//! x86-64), for AVX2 + F16C, for AVX-512 (F and BW), for AVX-512 with BF16
//! (and DQ) and for AVX-512 with BF16 and FP16, and calls the widest one
//! the CPU has ([`Isa::best`], detected by `std` at run time and cached
//! there). LLVM vectorizes each copy for its own registers; the only code
//! written per instruction set is the fp16 conversion, which F16C does in
//! one instruction per 8 elements and SSE2 has to compute, the bf16 sum
//! and product, whose rounding back LLVM compiles to twice the
//! instructions the hand-written blocks here take (and AVX-512 BF16 does
//! in one conversion, `bf16_op32_avx512bf16`), the fp16 sum and product,
//! which AVX-512 FP16 computes in fp16 (`fp16_op32_avx512fp16`), and
//! AVX2's in-place 64-bit integer max and min, which LLVM turns into
//! masked stores that AMD Zen runs microcoded (see
//! `int64_extreme16_avx2`).
//!
//! Every path gives the same bits: they run the same Rust (Rust never
//! contracts `a * b + c` into an FMA, and x86's scalar and vector float
//! instructions round alike), the portable fp16 conversion is written to
//! match F16C bit for bit (tested against it and against the `half` crate;
//! `kernels::tests::every_isa_gives_the_same_bits`), and the bf16 blocks
//! round as the portable code does (tested against the `half` crate on
//! every bit pattern; the BF16 conversion's flushed subnormals are
//! detected and such blocks computed on the integer rounding), the FP16
//! sums and products round once as widening does (double rounding through
//! f32 is innocuous; all 2^32 operand pairs checked in an ignored test),
//! and the int64 blocks compare as `Ord` does (tested on every pair of
//! boundary values).
//!
//! `unsafe` is needed for two things, here: calling a function compiled
//! for features the build does not assume (sound once they are detected),
//! and empty `asm!`s that hide a value from the optimiser (`opaque`,
//! `opaque512`);
//! the intrinsics inside such functions are safe, and loads and stores go
//! through `bytemuck`'s safe casts.
#![allow(unsafe_code)]

use std::fmt;

/// An instruction-set level the reduce kernels are compiled for.
///
/// [`Isa::best`] is what [`super::reduce`] and the other kernels use; the
/// others exist so that tests and benchmarks can run each path
/// ([`super::reduce_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Isa {
    /// The build's own target features (SSE2 only on a default `x86_64`
    /// build; whatever `-C target-cpu` adds): runs everywhere.
    Portable,
    /// x86-64 AVX2 and F16C (Intel Haswell, AMD Excavator and later).
    Avx2,
    /// x86-64 AVX-512 F and BW, with AVX2 and F16C (Intel Skylake-SP, AMD
    /// Zen 4 and later).
    Avx512,
    /// [`Isa::Avx512`] with AVX-512 DQ and BF16 (Intel Cooper Lake and
    /// Sapphire Rapids, AMD Zen 4 and later): the bf16 sum and product
    /// round with `vcvtne2ps2bf16`.
    Avx512Bf16,
    /// [`Isa::Avx512Bf16`] with AVX-512 FP16 (Intel Sapphire Rapids and
    /// later): the fp16 sum and product run in fp16 (`vaddph`, `vmulph`).
    /// (A CPU with FP16 but not BF16, if one is ever made, runs
    /// [`Isa::Avx512`].)
    Avx512Fp16,
}

impl Isa {
    /// Every level, narrowest first.
    pub const ALL: [Isa; 5] = [
        Isa::Portable,
        Isa::Avx2,
        Isa::Avx512,
        Isa::Avx512Bf16,
        Isa::Avx512Fp16,
    ];

    /// True if this CPU can run the level (checked at run time; `std`
    /// caches the CPUID answer, so this costs a load and a test).
    pub fn is_available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_available()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Bf16 => {
                Isa::Avx512.is_available()
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512bf16")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Fp16 => {
                Isa::Avx512Bf16.is_available() && std::arch::is_x86_feature_detected!("avx512fp16")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest level this CPU can run.
    pub fn best() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|i| i.is_available())
            .unwrap_or(Isa::Portable)
    }

    /// The levels this CPU can run, narrowest first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
    }

    /// Lower-case name: `portable`, `avx2`, `avx512`, `avx512bf16`,
    /// `avx512fp16`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Bf16 => "avx512bf16",
            Isa::Avx512Fp16 => "avx512fp16",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What differs between the instruction sets inside a kernel: the fp16
/// conversions, 16 elements at a time. Implementations are `Copy` tokens
/// that exist only where their instructions may run.
pub(super) trait Simd: Copy {
    /// True if the conversions below are instructions (F16C), so that the
    /// fp16 kernels convert in staged blocks; false: they are software and
    /// the kernels convert per element in their fused loops instead.
    const F16C: bool;
    /// 16 little-endian fp16 elements widened to 16 little-endian f32
    /// (exact; NaN quieted, payload kept).
    fn fp16_widen16(self, b: &[u8; 32]) -> [u8; 64];
    /// 16 little-endian f32 rounded to fp16 (nearest, ties to even;
    /// overflow to infinity; NaN quieted with its top 10 payload bits).
    fn fp16_narrow16(self, v: &[u8; 64]) -> [u8; 32];
    /// True if [`Simd::bf16_sum32`] and [`Simd::bf16_prod32`] are the
    /// token's own vector code, so that the bf16 kernels run in their
    /// 32-element blocks; false: the kernels' two-elements-per-`u32` loops
    /// (which LLVM vectorizes) are faster.
    const BF16_BLOCKS: bool = false;
    /// 32 little-endian bf16 elements of `x` and `y` added in f32 and
    /// rounded back (nearest, ties to even), as `half_float::f32_to_bf16`.
    #[inline(always)]
    fn bf16_sum32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
        bf16_blocks_portable(x, y, |a, b| a + b)
    }
    /// As [`Simd::bf16_sum32`], multiplied.
    #[inline(always)]
    fn bf16_prod32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
        bf16_blocks_portable(x, y, |a, b| a * b)
    }
    /// True if [`Simd::fp16_sum32`] and [`Simd::fp16_prod32`] are the
    /// token's own vector code (AVX-512 FP16), so that the fp16 sum and
    /// product run in their 32-element blocks; false: they widen with
    /// [`Simd::fp16_widen16`] and round back with [`Simd::fp16_narrow16`].
    const FP16_BLOCKS: bool = false;
    /// 32 little-endian fp16 elements of `x` and `y` added: the bits of
    /// widening to f32, adding and rounding back (nearest, ties to even).
    #[inline(always)]
    fn fp16_sum32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
        fp16_blocks_portable(x, y, |a, b| a + b)
    }
    /// As [`Simd::fp16_sum32`], multiplied.
    #[inline(always)]
    fn fp16_prod32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
        fp16_blocks_portable(x, y, |a, b| a * b)
    }
    /// True if [`Simd::int64_extreme16`] is the token's own vector code,
    /// so that the in-place 64-bit integer `Max` and `Min` run in its
    /// 16-element blocks; false: the generic element loop (`native`).
    const INT64_BLOCKS: bool = false;
    /// 16 little-endian 64-bit integers of `x` and `y`, the larger of each
    /// pair (`MAX`) or the smaller, compared as `i64` (`SIGNED`) or `u64`:
    /// the bits of `Ord::max` / `Ord::min`.
    #[inline(always)]
    fn int64_extreme16<const MAX: bool, const SIGNED: bool>(
        self,
        x: &[u8; 128],
        y: &[u8; 128],
    ) -> [u8; 128] {
        int64_extreme16_portable::<MAX, SIGNED>(x, y)
    }
}

/// 16 64-bit integers of `x` and `y` combined as [`Simd::int64_extreme16`]
/// says, one element at a time.
#[inline(always)]
fn int64_extreme16_portable<const MAX: bool, const SIGNED: bool>(
    x: &[u8; 128],
    y: &[u8; 128],
) -> [u8; 128] {
    let mut out = [0u8; 128];
    let elems = out
        .as_chunks_mut::<8>()
        .0
        .iter_mut()
        .zip(x.as_chunks::<8>().0)
        .zip(y.as_chunks::<8>().0);
    for ((o, a), b) in elems {
        *o = if SIGNED {
            let (a, b) = (i64::from_le_bytes(*a), i64::from_le_bytes(*b));
            if MAX { a.max(b) } else { a.min(b) }.to_le_bytes()
        } else {
            let (a, b) = (u64::from_le_bytes(*a), u64::from_le_bytes(*b));
            if MAX { a.max(b) } else { a.min(b) }.to_le_bytes()
        };
    }
    out
}

/// 32 bf16 of `x` and `y` combined by `f` in f32 and rounded back, two per
/// `u32` (the portable code of the bf16 kernels).
#[inline(always)]
fn bf16_blocks_portable(x: &[u8; 64], y: &[u8; 64], f: impl Fn(f32, f32) -> f32) -> [u8; 64] {
    let mut out = [0u8; 64];
    let pairs = out
        .as_chunks_mut::<4>()
        .0
        .iter_mut()
        .zip(x.as_chunks::<4>().0)
        .zip(y.as_chunks::<4>().0);
    for ((o, a), b) in pairs {
        *o = super::half_float::bf16_pairs(*a, *b, &f);
    }
    out
}

/// 32 fp16 of `x` and `y` combined by `f` in f32 (software conversions)
/// and rounded back, one element at a time.
#[inline(always)]
fn fp16_blocks_portable(x: &[u8; 64], y: &[u8; 64], f: impl Fn(f32, f32) -> f32) -> [u8; 64] {
    use super::half_float::{FpSoft, Half};
    let mut out = [0u8; 64];
    let elems = out
        .as_chunks_mut::<2>()
        .0
        .iter_mut()
        .zip(x.as_chunks::<2>().0)
        .zip(y.as_chunks::<2>().0);
    for ((o, a), b) in elems {
        *o = FpSoft::narrow(f(FpSoft::widen(*a), FpSoft::widen(*b)));
    }
    out
}

/// A kernel call: its arguments, and its body as a function generic over
/// the [`Simd`] token. Implementations mark `run` `#[inline(always)]` (and
/// everything it calls), so that the body compiles inside each
/// `#[target_feature]` entry point below.
pub(super) trait Kernel {
    /// What the kernel returns.
    type Output;
    /// The kernel's body.
    fn run<S: Simd>(self, simd: S) -> Self::Output;
}

/// The portable token: software fp16 conversion (branch-free, so it
/// vectorizes with SSE2).
#[derive(Clone, Copy, Debug)]
pub(super) struct Portable;

impl Simd for Portable {
    const F16C: bool = false;
    #[inline(always)]
    fn fp16_widen16(self, b: &[u8; 32]) -> [u8; 64] {
        use super::half_float::{FpSoft, Half};
        let mut out = [0u8; 64];
        for (o, c) in out
            .as_chunks_mut::<4>()
            .0
            .iter_mut()
            .zip(b.as_chunks::<2>().0)
        {
            *o = FpSoft::widen(*c).to_le_bytes();
        }
        out
    }
    #[inline(always)]
    fn fp16_narrow16(self, v: &[u8; 64]) -> [u8; 32] {
        use super::half_float::{FpSoft, Half};
        let mut out = [0u8; 32];
        for (o, c) in out
            .as_chunks_mut::<2>()
            .0
            .iter_mut()
            .zip(v.as_chunks::<4>().0)
        {
            *o = FpSoft::narrow(f32::from_le_bytes(*c));
        }
        out
    }
}

/// Runs `kernel` on `isa`, or on the portable path if this CPU lacks `isa`.
#[inline]
pub(super) fn run<K: Kernel>(isa: Isa, kernel: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    match isa {
        Isa::Avx512Fp16 if isa.is_available() => {
            // SAFETY: `run_avx512fp16` needs AVX-512 F/BW/DQ/BF16/FP16,
            // AVX2 and F16C, which `is_available` has just detected.
            return unsafe { x86::run_avx512fp16(kernel) };
        }
        Isa::Avx512Bf16 if isa.is_available() => {
            // SAFETY: `run_avx512bf16` needs AVX-512 F/BW/DQ/BF16, AVX2 and
            // F16C, just detected.
            return unsafe { x86::run_avx512bf16(kernel) };
        }
        Isa::Avx512 if isa.is_available() => {
            // SAFETY: `run_avx512` needs AVX-512 F/BW, AVX2 and F16C, which
            // `is_available` has just detected on this CPU.
            return unsafe { x86::run_avx512(kernel) };
        }
        Isa::Avx2 if isa.is_available() => {
            // SAFETY: `run_avx2` needs AVX2 and F16C, just detected.
            return unsafe { x86::run_avx2(kernel) };
        }
        _ => {}
    }
    let _ = isa;
    kernel.run(Portable)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Kernel, Simd};

    /// Proof that AVX2 and F16C are present: made only by `run_avx2`,
    /// which is entered only after detection.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Avx2(());

    /// Proof that AVX-512 F/BW, AVX2 and F16C are present: made only by
    /// `run_avx512`, entered only after detection.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Avx512(());

    /// Proof that AVX-512 F/BW/DQ/BF16, AVX2 and F16C are present: made
    /// only by `run_avx512bf16`, entered only after detection.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Avx512Bf16(());

    /// Proof that AVX-512 F/BW/DQ/BF16/FP16, AVX2 and F16C are present:
    /// made only by `run_avx512fp16`, entered only after detection.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Avx512Fp16(());

    impl Simd for Avx2 {
        const F16C: bool = true;
        #[inline(always)]
        fn fp16_widen16(self, b: &[u8; 32]) -> [u8; 64] {
            // SAFETY: an `Avx2` exists only inside `run_avx2`, which runs
            // only once AVX2 and F16C were detected.
            unsafe { widen16_f16c(b) }
        }
        #[inline(always)]
        fn fp16_narrow16(self, v: &[u8; 64]) -> [u8; 32] {
            // SAFETY: as above: the token proves F16C.
            unsafe { narrow16_f16c(v) }
        }
        const BF16_BLOCKS: bool = true;
        #[inline(always)]
        fn bf16_sum32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            // SAFETY: as above: the token proves AVX2.
            unsafe { bf16_op32_avx2::<false>(x, y) }
        }
        #[inline(always)]
        fn bf16_prod32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            // SAFETY: as above: the token proves AVX2.
            unsafe { bf16_op32_avx2::<true>(x, y) }
        }
        const INT64_BLOCKS: bool = true;
        #[inline(always)]
        fn int64_extreme16<const MAX: bool, const SIGNED: bool>(
            self,
            x: &[u8; 128],
            y: &[u8; 128],
        ) -> [u8; 128] {
            // SAFETY: as above: the token proves AVX2.
            unsafe { int64_extreme16_avx2::<MAX, SIGNED>(x, y) }
        }
    }

    impl Simd for Avx512 {
        const F16C: bool = true;
        #[inline(always)]
        fn fp16_widen16(self, b: &[u8; 32]) -> [u8; 64] {
            // SAFETY: an `Avx512` exists only inside `run_avx512`, which
            // runs only once AVX-512 F was detected.
            unsafe { widen16_avx512(b) }
        }
        #[inline(always)]
        fn fp16_narrow16(self, v: &[u8; 64]) -> [u8; 32] {
            // SAFETY: as above: the token proves AVX-512 F.
            unsafe { narrow16_avx512(v) }
        }
        const BF16_BLOCKS: bool = true;
        #[inline(always)]
        fn bf16_sum32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            // SAFETY: as above: the token proves AVX-512 F/BW.
            unsafe { bf16_op32_avx512::<false>(x, y) }
        }
        #[inline(always)]
        fn bf16_prod32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            // SAFETY: as above: the token proves AVX-512 F/BW.
            unsafe { bf16_op32_avx512::<true>(x, y) }
        }
    }

    // The wider AVX-512 tokens: `Avx512`'s fp16 conversions (their
    // features include its own, so making an `Avx512` from them is sound),
    // their own bf16 blocks, and for `Avx512Fp16` the fp16 blocks.
    impl Simd for Avx512Bf16 {
        const F16C: bool = true;
        #[inline(always)]
        fn fp16_widen16(self, b: &[u8; 32]) -> [u8; 64] {
            Avx512(()).fp16_widen16(b)
        }
        #[inline(always)]
        fn fp16_narrow16(self, v: &[u8; 64]) -> [u8; 32] {
            Avx512(()).fp16_narrow16(v)
        }
        const BF16_BLOCKS: bool = true;
        #[inline(always)]
        fn bf16_sum32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            // SAFETY: an `Avx512Bf16` exists only inside `run_avx512bf16`,
            // which runs only once AVX-512 F/BW/DQ/BF16 were detected.
            unsafe { bf16_op32_avx512bf16::<false>(x, y) }
        }
        #[inline(always)]
        fn bf16_prod32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            // SAFETY: as above.
            unsafe { bf16_op32_avx512bf16::<true>(x, y) }
        }
    }

    // `Avx512Fp16`'s features include `Avx512Bf16`'s: it takes that
    // token's blocks and adds its own fp16 ones.
    impl Simd for Avx512Fp16 {
        const F16C: bool = true;
        #[inline(always)]
        fn fp16_widen16(self, b: &[u8; 32]) -> [u8; 64] {
            Avx512Bf16(()).fp16_widen16(b)
        }
        #[inline(always)]
        fn fp16_narrow16(self, v: &[u8; 64]) -> [u8; 32] {
            Avx512Bf16(()).fp16_narrow16(v)
        }
        const BF16_BLOCKS: bool = true;
        #[inline(always)]
        fn bf16_sum32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            Avx512Bf16(()).bf16_sum32(x, y)
        }
        #[inline(always)]
        fn bf16_prod32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            Avx512Bf16(()).bf16_prod32(x, y)
        }
        const FP16_BLOCKS: bool = true;
        #[inline(always)]
        fn fp16_sum32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            // SAFETY: an `Avx512Fp16` exists only inside `run_avx512fp16`,
            // which runs only once AVX-512 F/BW/DQ/BF16/FP16 were detected.
            unsafe { fp16_op32_avx512fp16::<false>(x, y) }
        }
        #[inline(always)]
        fn fp16_prod32(self, x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
            // SAFETY: as above.
            unsafe { fp16_op32_avx512fp16::<true>(x, y) }
        }
    }

    // Little-endian bytes are the lanes' memory order on x86-64, so the
    // casts are the vector loads and stores. (One 512-bit conversion, not
    // two 256-bit ones, in the AVX-512 path: the staged loops then store
    // and reload whole registers, which the CPU forwards.)
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn widen16_f16c(b: &[u8; 32]) -> [u8; 64] {
        let [lo, hi]: [__m128i; 2] = bytemuck::cast(*b);
        bytemuck::cast::<[__m256; 2], [u8; 64]>([_mm256_cvtph_ps(lo), _mm256_cvtph_ps(hi)])
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn narrow16_f16c(v: &[u8; 64]) -> [u8; 32] {
        let [lo, hi]: [__m256; 2] = bytemuck::cast(*v);
        bytemuck::cast::<[__m128i; 2], [u8; 32]>([
            _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(lo),
            _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(hi),
        ])
    }

    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    #[inline]
    fn widen16_avx512(b: &[u8; 32]) -> [u8; 64] {
        let h: __m256i = bytemuck::cast(*b);
        bytemuck::cast::<__m512, [u8; 64]>(_mm512_cvtph_ps(h))
    }

    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    #[inline]
    fn narrow16_avx512(v: &[u8; 64]) -> [u8; 32] {
        let x: __m512 = bytemuck::cast(*v);
        bytemuck::cast(_mm512_cvtps_ph::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(x))
    }

    // bf16 sums and products, 32 elements (two per 32-bit lane) at a time:
    // each lane's low element widened by a shift, its high one by a mask,
    // the f32 op on both, then the two results' kept halves (top 16 bits)
    // and cut halves (bottom 16) gathered back into the elements' places,
    // and rounding done on all 32 at once in 16-bit lanes: round up iff
    // `cut + (kept & 1) > 0x8000` (ties to even; the add saturates, so
    // 0xFFFF + 1 stays above), an unsigned compare and a masked add.
    // (`vpavgw`, computing the carry of `cut + 0x7FFF + odd` directly, is
    // not kept by LLVM: it widens the average to 32-bit lanes.) The same bits as `half_float::f32_to_bf16` on each f32: a NaN
    // here is an operand quieted or the default NaN (low 16 bits zero, the
    // quiet bit set by the CPU), which this rounding leaves as it is and
    // `f32_to_bf16` too. About 14 vector instructions per 32 elements,
    // against 23 for LLVM's code of the two-per-lane loop.
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    #[inline]
    fn bf16_op32_avx512<const PROD: bool>(x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
        let (a, b): (__m512i, __m512i) = (bytemuck::cast(*x), bytemuck::cast(*y));
        let high = _mm512_set1_epi32(0xFFFF_0000_u32 as i32);
        let (alo, blo) = (_mm512_slli_epi32::<16>(a), _mm512_slli_epi32::<16>(b));
        let (ahi, bhi) = (_mm512_and_si512(a, high), _mm512_and_si512(b, high));
        let (alo, blo) = (_mm512_castsi512_ps(alo), _mm512_castsi512_ps(blo));
        let (ahi, bhi) = (_mm512_castsi512_ps(ahi), _mm512_castsi512_ps(bhi));
        let (lo, hi) = if PROD {
            (_mm512_mul_ps(alo, blo), _mm512_mul_ps(ahi, bhi))
        } else {
            (_mm512_add_ps(alo, blo), _mm512_add_ps(ahi, bhi))
        };
        let (lo, hi) = (_mm512_castps_si512(lo), _mm512_castps_si512(hi));
        let kept = _mm512_or_si512(_mm512_srli_epi32::<16>(lo), _mm512_and_si512(hi, high));
        let cut = _mm512_or_si512(_mm512_andnot_si512(high, lo), _mm512_slli_epi32::<16>(hi));
        let odd = _mm512_and_si512(kept, _mm512_set1_epi16(1));
        let up = _mm512_cmpgt_epu16_mask(
            _mm512_adds_epu16(cut, odd),
            _mm512_set1_epi16(0x8000_u16 as i16),
        );
        bytemuck::cast(_mm512_mask_sub_epi16(kept, up, kept, _mm512_set1_epi16(-1)))
    }

    // bf16 sums and products with AVX-512 BF16: widened and combined as in
    // `bf16_op32_avx512` (each 32-bit lane's low element by a shift, its
    // high one by a mask), then `vcvtne2ps2bf16` rounds the 32 f32 results
    // to bf16 in one instruction, the low elements' into the low 16 words
    // and the high ones' into the top 16, and `vpermw` puts the words back
    // in element order. The SDM's pseudo-code of the conversion is
    // `f32_to_bf16` on normals and infinities (add 0x7FFF plus the kept
    // bit, keep the top half) and on NaNs (the top half with the quiet bit
    // set: a NaN stays a NaN), but it takes denormal inputs as zero
    // ("input denormals are always treated as zero ... MXCSR is not
    // consulted"), so a subnormal f32 result, which rounds to a bf16
    // subnormal or up to the least normal, would become ±0. Only a zero or
    // a denormal converts to ±0, so a block with no ±0 word (one
    // `vptestnmw`, one `kortestd`) is right; one with a ±0 word from a
    // nonzero f32 (two `vptestmd`, taken only for blocks with a zero) is
    // computed by `bf16_op32_avx512` instead. Every test is on integer
    // bits, so the path does not depend on MXCSR (the f32 ops honour its
    // DAZ/FTZ as on every other path; `vfpclassps`, tried first, honours
    // DAZ, and so would `vcmpps`, which LLVM makes of an integer test of an
    // f32's magnitude: [`opaque512`] hides the masks from that fold, and
    // from the one that turns the test of the conversion's words into
    // per-element bf16 compares, 20x slower). 10 instructions between the
    // loads and the store of 32 elements, against 14 for
    // `bf16_op32_avx512` as LLVM emits it (it gathers the kept and cut
    // halves with two `vpermt2w`): in cache 0.43-0.46x → 0.65x memcpy on
    // the project's Xeon (algos/README.md, session 15).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16,avx2,f16c")]
    #[inline]
    fn bf16_op32_avx512bf16<const PROD: bool>(x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
        let (a, b): (__m512i, __m512i) = (bytemuck::cast(*x), bytemuck::cast(*y));
        let high = _mm512_set1_epi32(0xFFFF_0000_u32 as i32);
        let (alo, blo) = (_mm512_slli_epi32::<16>(a), _mm512_slli_epi32::<16>(b));
        let (ahi, bhi) = (_mm512_and_si512(a, high), _mm512_and_si512(b, high));
        let (alo, blo) = (_mm512_castsi512_ps(alo), _mm512_castsi512_ps(blo));
        let (ahi, bhi) = (_mm512_castsi512_ps(ahi), _mm512_castsi512_ps(bhi));
        let (lo, hi) = if PROD {
            (_mm512_mul_ps(alo, blo), _mm512_mul_ps(ahi, bhi))
        } else {
            (_mm512_add_ps(alo, blo), _mm512_add_ps(ahi, bhi))
        };
        let packed: __m512i = bytemuck::cast(_mm512_cvtne2ps_pbh(hi, lo));
        // Words 0-15 are `lo`'s lanes, 16-31 `hi`'s.
        let zero = zero_words(packed, _mm512_set1_epi16(0x7FFF));
        if zero != 0 {
            let magnitude = opaque512(_mm512_set1_epi32(0x7FFF_FFFF));
            let nonzero = |v: __m512| _mm512_test_epi32_mask(_mm512_castps_si512(v), magnitude);
            let flushed = zero & (u32::from(nonzero(hi)) << 16 | u32::from(nonzero(lo)));
            if flushed != 0 {
                return bf16_op32_avx512::<PROD>(x, y);
            }
        }
        let order: __m512i = bytemuck::cast(BF16_INTERLEAVE);
        bytemuck::cast(_mm512_permutexvar_epi16(order, packed))
    }

    /// `vpermw` indices of [`bf16_op32_avx512bf16`]: element `j` is word
    /// `j / 2` of the conversion's output if `j` is even (a low element),
    /// word `16 + j / 2` if odd.
    const BF16_INTERLEAVE: [u16; 32] = {
        let mut idx = [0u16; 32];
        let mut j = 0;
        while j < 32 {
            idx[j] = (j % 2 * 16 + j / 2) as u16;
            j += 1;
        }
        idx
    };

    // fp16 sums and products in fp16 (`vaddph`, `vmulph`, 32 elements per
    // instruction): the same bits as widening to f32, the f32 op and one
    // rounding to fp16, because rounding twice, to f32 (24 bits) and then
    // to fp16 (11 bits), equals rounding once for +, -, x, / and sqrt
    // whenever the wide format has q >= 2p + 2 bits (S. A. Figueroa, "When
    // is double rounding innocuous?", SIGNUM Newsletter 30(3), 1995;
    // 24 >= 2*11 + 2). The theorem counts bits, not exponents, and f32's
    // exponent range covers every case here: an fp16 sum or product is
    // never subnormal in f32 (sums are multiples of 2^-24, products at
    // least 2^-48 in magnitude), a sum below 2^-14 (an fp16 subnormal) is
    // exact in both, and overflow is a rounding to 2^16. Checked on every
    // one of the 2^32 pairs of operands, for both ops, on this project's
    // Sapphire Rapids class Xeon (`kernels::tests::
    // every_16_bit_pair_matches_the_avx512_path`, ignored; 10 s in
    // release): equal bits except which payload a NaN result carries. The
    // FP16 instructions handle subnormals themselves, whatever MXCSR's DAZ
    // and FTZ say (checked on that Xeon with both set: the same subnormal
    // results, where `vaddps` flushed),
    // and so do the F16C conversions of the other paths (their f32 values
    // are never subnormal), so no path depends on MXCSR. NaNs: an operand
    // NaN comes back quieted with its payload, as `vcvtph2ps` then
    // `vcvtps2ph` do; `0 x inf` and `inf - inf` give the default NaN
    // (0xFE00), as the f32 default NaN rounds to.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16,avx512fp16,avx2,f16c")]
    #[inline]
    fn fp16_op32_avx512fp16<const PROD: bool>(x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
        let a = _mm512_castsi512_ph(bytemuck::cast(*x));
        let b = _mm512_castsi512_ph(bytemuck::cast(*y));
        let r = if PROD {
            _mm512_mul_ph(a, b)
        } else {
            _mm512_add_ph(a, b)
        };
        bytemuck::cast(_mm512_castph_si512(r))
    }

    /// [`bf16_op32_avx512`] in two 256-bit halves.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn bf16_op32_avx2<const PROD: bool>(x: &[u8; 64], y: &[u8; 64]) -> [u8; 64] {
        let [a0, a1]: [__m256i; 2] = bytemuck::cast(*x);
        let [b0, b1]: [__m256i; 2] = bytemuck::cast(*y);
        bytemuck::cast([
            bf16_op16_avx2::<PROD>(a0, b0),
            bf16_op16_avx2::<PROD>(a1, b1),
        ])
    }

    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn bf16_op16_avx2<const PROD: bool>(a: __m256i, b: __m256i) -> __m256i {
        let high = _mm256_set1_epi32(0xFFFF_0000_u32 as i32);
        let (alo, blo) = (_mm256_slli_epi32::<16>(a), _mm256_slli_epi32::<16>(b));
        let (ahi, bhi) = (_mm256_and_si256(a, high), _mm256_and_si256(b, high));
        let (alo, blo) = (_mm256_castsi256_ps(alo), _mm256_castsi256_ps(blo));
        let (ahi, bhi) = (_mm256_castsi256_ps(ahi), _mm256_castsi256_ps(bhi));
        let (lo, hi) = if PROD {
            (_mm256_mul_ps(alo, blo), _mm256_mul_ps(ahi, bhi))
        } else {
            (_mm256_add_ps(alo, blo), _mm256_add_ps(ahi, bhi))
        };
        let (lo, hi) = (_mm256_castps_si256(lo), _mm256_castps_si256(hi));
        let kept = _mm256_or_si256(_mm256_srli_epi32::<16>(lo), _mm256_and_si256(hi, high));
        let cut = _mm256_or_si256(_mm256_andnot_si256(high, lo), _mm256_slli_epi32::<16>(hi));
        let odd = _mm256_and_si256(kept, _mm256_set1_epi16(1));
        let sum = _mm256_xor_si256(
            _mm256_adds_epu16(cut, odd),
            _mm256_set1_epi16(0x8000_u16 as i16),
        );
        let up = _mm256_cmpgt_epi16(sum, _mm256_setzero_si256());
        _mm256_sub_epi16(kept, up)
    }

    // 64-bit integer max and min, 4 per register: AVX2 has the signed
    // compare (`vpcmpgtq`) but no `vpmaxsq` (AVX-512), so it is a compare
    // and a blend; unsigned operands compare as signed with their top bits
    // flipped. LLVM compiles the generic loop's `Ord::max` to the same two
    // instructions, but in place (`dst = max(dst, src)`) it then folds the
    // blend with `dst`'s load and the store into a masked store
    // (`vpmaskmovq`; LLVM's DAG combine `foldToMaskedStore`, "store (vselect
    // m, x, load p), p"), which AMD Zen 1-3 run microcoded: 16 GB/s in
    // cache on the project's EPYC (0.37x memcpy), 1.02-1.10x with these
    // blocks (algos/README.md, session 14). The fold needs the blend's operand to be the load itself:
    // [`opaque`] hides it (and rewriting the select in Rust does not help:
    // LLVM turns every form back into the same one).
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn int64_extreme16_avx2<const MAX: bool, const SIGNED: bool>(
        x: &[u8; 128],
        y: &[u8; 128],
    ) -> [u8; 128] {
        let a: [__m256i; 4] = bytemuck::cast(*x);
        let b: [__m256i; 4] = bytemuck::cast(*y);
        let flip = _mm256_set1_epi64x(if SIGNED { 0 } else { i64::MIN });
        bytemuck::cast::<[__m256i; 4], [u8; 128]>(std::array::from_fn(|i| {
            let (a, b) = (opaque(a[i]), b[i]);
            let (sa, sb) = if SIGNED {
                (a, b)
            } else {
                (_mm256_xor_si256(a, flip), _mm256_xor_si256(b, flip))
            };
            // Lanes where `b` is the result (equal lanes: either).
            let take_b = if MAX {
                _mm256_cmpgt_epi64(sb, sa)
            } else {
                _mm256_cmpgt_epi64(sa, sb)
            };
            _mm256_blendv_epi8(a, b, take_b)
        }))
    }

    /// `x` itself, through an empty `asm!` the optimiser cannot see into
    /// (no instruction is emitted).
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn opaque(mut x: __m256i) -> __m256i {
        // SAFETY: the template is empty: it reads and writes only the
        // register holding `x`, and leaves it as it was.
        unsafe {
            std::arch::asm!(
                "/* {0} */",
                inout(ymm_reg) x,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        x
    }

    /// The words `i` of `x` with `x[i] & magnitude[i] == 0`, as a mask
    /// (bit `i`): `_mm512_testn_epi16_mask` as one `vptestnmw`. (LLVM
    /// compiles the intrinsic on a converted bf16 vector to an AND and a
    /// `vptestnmw` of the result with itself, or without [`opaque512`] to
    /// per-element bf16 compares.)
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    #[inline]
    fn zero_words(x: __m512i, magnitude: __m512i) -> u32 {
        let mask: u32;
        // SAFETY: `vptestnmw` (AVX-512 BW, which the caller's features
        // include) reads two vector registers and writes a mask register;
        // no memory, stack or flags.
        unsafe {
            std::arch::asm!(
                "vptestnmw {k}, {x}, {m}",
                k = out(kreg) mask,
                x = in(zmm_reg) x,
                m = in(zmm_reg) magnitude,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        mask
    }

    /// `x` itself, through an empty `asm!` the optimiser cannot see into
    /// (no instruction is emitted): [`opaque`] for a 512-bit register.
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    #[inline]
    fn opaque512(mut x: __m512i) -> __m512i {
        // SAFETY: the template is empty: it reads and writes only the
        // register holding `x`, and leaves it as it was.
        unsafe {
            std::arch::asm!(
                "/* {0} */",
                inout(zmm_reg) x,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        x
    }

    /// `kernel` compiled for AVX2 + F16C.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn run_avx2<K: Kernel>(kernel: K) -> K::Output {
        kernel.run(Avx2(()))
    }

    /// `kernel` compiled for AVX-512 F/BW (with AVX2 + F16C).
    #[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
    pub(super) fn run_avx512<K: Kernel>(kernel: K) -> K::Output {
        kernel.run(Avx512(()))
    }

    /// `kernel` compiled for AVX-512 F/BW/DQ/BF16 (with AVX2 + F16C).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16,avx2,f16c")]
    pub(super) fn run_avx512bf16<K: Kernel>(kernel: K) -> K::Output {
        kernel.run(Avx512Bf16(()))
    }

    /// `kernel` compiled for AVX-512 F/BW/DQ/BF16/FP16 (with AVX2 + F16C).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16,avx512fp16,avx2,f16c")]
    pub(super) fn run_avx512fp16<K: Kernel>(kernel: K) -> K::Output {
        kernel.run(Avx512Fp16(()))
    }
}

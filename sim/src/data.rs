//! Data mode: a rank's buffers for the op it runs, and applying steps to them.

use hccl_algos::kernels;
use hccl_algos::schedule::{BufKind, BufferSizes, Op, Region, StepId};
use hccl_algos::DataType;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Why a step could not be applied; the engine adds op and rank.
#[derive(Debug)]
pub(crate) enum ApplyError {
    OutOfBounds { region: Region, buffer_len: u64 },
    Kernel(kernels::KernelError),
}

/// Input, output and scratch of one rank for one op, plus local steps in flight.
#[derive(Debug, Default)]
pub(crate) struct RankMem {
    pub input: Vec<u8>,
    pub output: Vec<u8>,
    pub scratch: Vec<u8>,
    /// Local steps posted whose cost has not elapsed: applied on completion.
    pub local_ops: Vec<(StepId, Op)>,
    /// In-place: `(input_at, output_at)` in one space held by `output`.
    alias: Option<(u64, u64)>,
    output_len: u64,
    /// fp16/bf16 partial values of `output` and `scratch` (see
    /// [`kernels::Partials`]): a fold of several inputs rounds once.
    parts: [kernels::Partials; 2],
}

impl RankMem {
    /// Buffers of the given sizes; `input` must already have `sizes.input`
    /// bytes. With `alias = Some((input_at, output_at))` input and output
    /// share one space (an in-place call).
    pub(crate) fn new(sizes: BufferSizes, input: Vec<u8>, alias: Option<(u64, u64)>) -> RankMem {
        match alias {
            None => RankMem {
                input,
                output: vec![0; sizes.output as usize],
                scratch: vec![0; sizes.scratch as usize],
                local_ops: Vec::new(),
                alias: None,
                output_len: sizes.output,
                parts: Default::default(),
            },
            Some((input_at, output_at)) => {
                let space = (input_at + sizes.input).max(output_at + sizes.output);
                let mut output = vec![0; space as usize];
                output[input_at as usize..(input_at + sizes.input) as usize]
                    .copy_from_slice(&input);
                RankMem {
                    input: Vec::new(),
                    output,
                    scratch: vec![0; sizes.scratch as usize],
                    local_ops: Vec::new(),
                    alias: Some((input_at, output_at)),
                    output_len: sizes.output,
                    parts: Default::default(),
                }
            }
        }
    }

    /// The output buffer's bytes (consumes the memory).
    pub(crate) fn into_output(self) -> Vec<u8> {
        match self.alias {
            None => self.output,
            Some((_, at)) => self.output[at as usize..(at + self.output_len) as usize].to_vec(),
        }
    }

    /// Where `r` really lives: in-place input and output map into one space.
    fn resolve(&self, r: Region) -> Region {
        match (self.alias, r.buf) {
            (Some((input_at, _)), BufKind::Input) => {
                Region::new(BufKind::Output, r.offset.saturating_add(input_at), r.len)
            }
            (Some((_, output_at)), BufKind::Output) => {
                Region::new(BufKind::Output, r.offset.saturating_add(output_at), r.len)
            }
            _ => r,
        }
    }

    fn buf(&self, kind: BufKind) -> &Vec<u8> {
        match kind {
            BufKind::Input => &self.input,
            BufKind::Output => &self.output,
            BufKind::Scratch => &self.scratch,
        }
    }

    fn buf_mut(&mut self, kind: BufKind) -> &mut Vec<u8> {
        match kind {
            BufKind::Input => &mut self.input,
            BufKind::Output => &mut self.output,
            BufKind::Scratch => &mut self.scratch,
        }
    }

    /// Resolves `r` and checks it; returns the buffer and byte range.
    fn range(&self, r: Region) -> Result<(BufKind, std::ops::Range<usize>), ApplyError> {
        let r = self.resolve(r);
        let len = self.buf(r.buf).len() as u64;
        if r.end() > len || r.end() < r.offset {
            return Err(ApplyError::OutOfBounds {
                region: r,
                buffer_len: len,
            });
        }
        Ok((r.buf, r.offset as usize..r.end() as usize))
    }

    /// The bytes of `r`.
    pub(crate) fn read(&self, r: Region) -> Result<&[u8], ApplyError> {
        let (buf, range) = self.range(r)?;
        Ok(&self.buf(buf)[range])
    }

    fn write(&mut self, r: Region, bytes: &[u8]) -> Result<(), ApplyError> {
        let (buf, range) = self.range(r)?;
        if let Some(p) = self.parts_mut(buf) {
            p.forget(range.clone());
        }
        self.buf_mut(buf)[range].copy_from_slice(bytes);
        Ok(())
    }

    /// The kept partials of a written buffer (the input is never written
    /// unless in place, and then it resolves to the output).
    fn parts_mut(&mut self, kind: BufKind) -> Option<&mut kernels::Partials> {
        match kind {
            BufKind::Input => None,
            BufKind::Output => Some(&mut self.parts[0]),
            BufKind::Scratch => Some(&mut self.parts[1]),
        }
    }

    /// The bytes of `r`, writable, with their buffer's partials and offset.
    fn kept_mut(
        &mut self,
        r: Region,
    ) -> Result<(&mut [u8], &mut kernels::Partials, usize), ApplyError> {
        let (buf, range) = self.range(r)?;
        if buf == BufKind::Input {
            // Not reachable from a verified schedule; kept total.
            return Err(ApplyError::OutOfBounds {
                region: r,
                buffer_len: 0,
            });
        }
        let at = range.start;
        let RankMem {
            output,
            scratch,
            parts,
            ..
        } = self;
        let [po, ps] = parts;
        Ok(match buf {
            BufKind::Scratch => (&mut scratch[range], ps, at),
            _ => (&mut output[range], po, at),
        })
    }

    /// `dst = a (op) b`, where `a` is a region of this rank and `b` bytes.
    fn reduce_to(
        &mut self,
        dtype: DataType,
        op: hccl_algos::ReduceOp,
        dst: Region,
        a: Region,
        b: &[u8],
    ) -> Result<(), ApplyError> {
        if kernels::keeps_partials(dtype) {
            let local = self.read(a)?.to_vec();
            let (d, parts, at) = self.kept_mut(dst)?;
            return kernels::reduce_into_kept(dtype, op, d, at, parts, &local, b)
                .map_err(ApplyError::Kernel);
        }
        let mut acc = self.read(a)?.to_vec();
        kernels::reduce(dtype, op, &mut acc, b).map_err(ApplyError::Kernel)?;
        self.write(dst, &acc)
    }

    /// The f32 values of `r`: its kept partials where there are any.
    fn values(&self, dtype: DataType, r: Region) -> Result<Vec<f32>, ApplyError> {
        let (buf, range) = self.range(r)?;
        let at = range.start;
        let parts = match buf {
            BufKind::Input => None,
            BufKind::Output => Some(&self.parts[0]),
            BufKind::Scratch => Some(&self.parts[1]),
        };
        kernels::values(dtype, &self.buf(buf)[range], at, parts).map_err(ApplyError::Kernel)
    }

    /// Applies a local step (copy, reduce, divide).
    pub(crate) fn apply_local(&mut self, dtype: DataType, op: &Op) -> Result<(), ApplyError> {
        match *op {
            Op::Copy { src, dst } => {
                let bytes = self.read(src)?.to_vec();
                self.write(dst, &bytes)
            }
            Op::LocalReduce { src, dst, op } if kernels::keeps_partials(dtype) => {
                let vals = self.values(dtype, src)?;
                let (d, parts, at) = self.kept_mut(dst)?;
                kernels::fold_kept(dtype, op, d, at, parts, &vals).map_err(ApplyError::Kernel)
            }
            Op::LocalReduce { src, dst, op } => {
                let b = self.read(src)?.to_vec();
                self.reduce_to(dtype, op, dst, dst, &b)
            }
            Op::Divide { dst, divisor } if kernels::keeps_partials(dtype) => {
                let (d, parts, at) = self.kept_mut(dst)?;
                kernels::divide_kept(dtype, d, at, parts, divisor).map_err(ApplyError::Kernel)
            }
            Op::Divide { dst, divisor } => {
                let (buf, range) = self.range(dst)?;
                kernels::divide(dtype, &mut self.buf_mut(buf)[range], divisor)
                    .map_err(ApplyError::Kernel)
            }
            Op::Send { .. } | Op::Recv { .. } | Op::RecvReduce { .. } => Ok(()),
        }
    }

    /// Applies an arrived payload to the receive step `op`.
    pub(crate) fn apply_recv(
        &mut self,
        dtype: DataType,
        op: &Op,
        payload: &[u8],
    ) -> Result<(), ApplyError> {
        match *op {
            Op::Recv { dst, .. } => self.write(dst, payload),
            Op::RecvReduce { local, dst, op, .. } => self.reduce_to(dtype, op, dst, local, payload),
            _ => Ok(()),
        }
    }
}

/// The default input of one rank for one op in data mode: `len` bytes of
/// `dtype` elements with small integer values `0..=3`, drawn from a ChaCha8
/// stream seeded by `(seed, op, rank)`.
///
/// Small integers keep sums and products of up to 64 ranks exact in every
/// type (fp16 and bf16 included), so results can be compared bit for bit with
/// a reference that reduces in another order. A trailing partial element is
/// zero-filled.
pub fn default_input(seed: u64, op: usize, rank: u32, dtype: DataType, len: u64) -> Vec<u8> {
    let stream = seed ^ (op as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (u64::from(rank) << 40);
    let mut rng = ChaCha8Rng::seed_from_u64(stream);
    let size = dtype.size() as usize;
    let mut out = vec![0u8; len as usize];
    for chunk in out.chunks_exact_mut(size) {
        let v: u8 = rng.gen_range(0..=3);
        encode_small(dtype, v, chunk);
    }
    out
}

/// Writes the small integer `v` as one little-endian element of `dtype`.
fn encode_small(dtype: DataType, v: u8, out: &mut [u8]) {
    let f = f32::from(v);
    match dtype {
        DataType::Fp32 => out.copy_from_slice(&f.to_le_bytes()),
        DataType::Fp64 => out.copy_from_slice(&f64::from(v).to_le_bytes()),
        DataType::Fp16 => out.copy_from_slice(&half::f16::from_f32(f).to_le_bytes()),
        DataType::Bf16 => out.copy_from_slice(&half::bf16::from_f32(f).to_le_bytes()),
        _ => out[0] = v, // integers: little-endian, the rest of the bytes stay 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_encode_as_their_type() {
        let mut b = [0u8; 2];
        encode_small(DataType::Fp16, 3, &mut b);
        assert_eq!(u16::from_le_bytes(b), 0x4200, "3.0 in IEEE binary16");
        encode_small(DataType::Bf16, 3, &mut b);
        assert_eq!(u16::from_le_bytes(b), 0x4040, "3.0 in bfloat16");
        let mut w = [0u8; 4];
        encode_small(DataType::Int32, 2, &mut w);
        assert_eq!(i32::from_le_bytes(w), 2);
    }

    #[test]
    fn input_depends_on_seed_op_and_rank_only() {
        let a = default_input(7, 1, 2, DataType::Int8, 64);
        assert_eq!(a, default_input(7, 1, 2, DataType::Int8, 64));
        assert_ne!(a, default_input(7, 1, 3, DataType::Int8, 64));
        assert!(a.iter().all(|&v| v <= 3));
    }
}

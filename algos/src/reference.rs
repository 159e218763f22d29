//! Sequential reference implementations of every collective, and inputs
//! whose results every algorithm must reproduce bit for bit.
//!
//! [`reference()`] takes every rank's input bytes and returns every rank's
//! expected output bytes, computed in the simplest way: reductions fold the
//! ranks' inputs in a fixed order (rank 0, then 1, 2, ...) with the
//! [`crate::kernels`], then divide once for [`ReduceOp::Avg`]; data movement
//! copies blocks where the collective's definition puts them. Buffer shapes
//! follow [`CollectiveArgs::io_bytes`].
//!
//! # Exact inputs
//! An algorithm may reduce in another order than the reference (a ring
//! starts each block at a different rank), and float `+` is not
//! associative. So equality tests use [`verifiable_input`]: values whose
//! every partial result is exact in the element type, whatever the order,
//! as nccl-tests does with its "verifiable" inputs. Integers wrap, which is
//! associative, so any integers will do; the float rules are on
//! [`verifiable_input`]. Tests of *determinism* (same bytes whatever the
//! arrival order) use arbitrary floats instead and compare runs with each
//! other, not with the reference.

use crate::collective::{ArgsError, CollectiveArgs, CollectiveKind};
use crate::dtype::{DataType, ReduceOp};
use crate::kernels::{self, KernelError};
use crate::mem_transport::splitmix64;
use crate::schedule::Rank;

/// Error of computing a reference result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefError {
    /// The arguments are invalid.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// The number of input buffers differs from the world size.
    #[error("{got} input buffers for world_size {world}; give one per rank")]
    InputCount {
        /// Buffers given.
        got: usize,
        /// World size.
        world: u32,
    },
    /// A rank's input has the wrong length.
    #[error("rank {rank}: input is {got} bytes, {kind} with these arguments takes {want}")]
    InputSize {
        /// The rank.
        rank: Rank,
        /// The collective.
        kind: CollectiveKind,
        /// Bytes given.
        got: u64,
        /// Bytes expected ([`CollectiveArgs::io_bytes`]).
        want: u64,
    },
    /// A buffer does not fit in this process's memory.
    #[error("rank {rank}: output of {bytes} bytes does not fit in memory")]
    TooLarge {
        /// The rank.
        rank: Rank,
        /// Its size in bytes.
        bytes: u64,
    },
    /// A kernel rejected its operands.
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

/// The element-wise reduction of `inputs` folded in order:
/// `((inputs[0] op inputs[1]) op inputs[2]) ...`, then, for
/// [`ReduceOp::Avg`], one division by `divisor` (the world size).
/// fp16/bf16 fold and divide in f32 and round once at the end.
/// An empty `inputs` gives an empty result.
///
/// # Errors
/// [`KernelError`] if the inputs are not equally long whole elements.
pub fn reduce_in_rank_order(
    dtype: DataType,
    op: ReduceOp,
    divisor: u32,
    inputs: &[&[u8]],
) -> Result<Vec<u8>, KernelError> {
    let Some((first, rest)) = inputs.split_first() else {
        return Ok(Vec::new());
    };
    let mut acc = first.to_vec();
    if kernels::keeps_partials(dtype) {
        // fp16/bf16: the fold in f32, rounded once (the average too).
        let mut parts = kernels::Partials::new();
        for src in rest {
            let vals = kernels::values(dtype, src, 0, None)?;
            kernels::fold_kept(dtype, op, &mut acc, 0, &mut parts, &vals)?;
        }
        if op == ReduceOp::Avg {
            kernels::divide_kept(dtype, &mut acc, 0, &mut parts, divisor)?;
        }
        return Ok(acc);
    }
    for src in rest {
        kernels::reduce(dtype, op, &mut acc, src)?;
    }
    if op == ReduceOp::Avg {
        kernels::divide(dtype, &mut acc, divisor)?;
    }
    Ok(acc)
}

/// Every rank's expected output for `args`, given every rank's input
/// (`inputs[r]` of [`CollectiveArgs::io_bytes`]`(r).0` bytes).
///
/// Reductions fold in rank order (see [`reduce_in_rank_order`]); blocks are
/// packed as [`crate::collective`]'s table says (V variants by prefix sums,
/// SendRecv/BatchSendRecv in the order of `pairs`).
///
/// # Errors
/// [`RefError`] for invalid arguments, a wrong number or size of inputs.
pub fn reference(args: &CollectiveArgs, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, RefError> {
    use CollectiveKind as K;
    args.validate()?;
    let p = args.world_size;
    if inputs.len() != p as usize {
        return Err(RefError::InputCount {
            got: inputs.len(),
            world: p,
        });
    }
    let mut outputs = Vec::with_capacity(p as usize);
    for (r, input) in inputs.iter().enumerate() {
        let (want_in, want_out) = args.io_bytes(r as Rank);
        if input.len() as u64 != want_in {
            return Err(RefError::InputSize {
                rank: r as Rank,
                kind: args.kind,
                got: input.len() as u64,
                want: want_in,
            });
        }
        let len = usize::try_from(want_out).map_err(|_| RefError::TooLarge {
            rank: r as Rank,
            bytes: want_out,
        })?;
        outputs.push(vec![0u8; len]);
    }
    let esz = args.dtype.size() as usize;
    let n = args.count as usize * esz; // fits: io_bytes sizes were allocated above
    let root = args.root as usize;
    let all: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let reduced = || reduce_in_rank_order(args.dtype, args.op, p, &all);
    match args.kind {
        K::AllReduce => {
            let sum = reduced()?;
            outputs.iter_mut().for_each(|o| o.copy_from_slice(&sum));
        }
        K::Reduce => outputs[root].copy_from_slice(&reduced()?),
        K::ReduceScatter => {
            let sum = reduced()?;
            for (r, o) in outputs.iter_mut().enumerate() {
                o.copy_from_slice(&sum[r * n..(r + 1) * n]);
            }
        }
        K::ReduceScatterV => {
            let sum = reduced()?;
            let v = args.counts.as_ref().expect("validated");
            for (r, o) in outputs.iter_mut().enumerate() {
                let at = v.displ(r) as usize * esz;
                let len = o.len();
                o.copy_from_slice(&sum[at..at + len]);
            }
        }
        K::AllGather | K::AllGatherV => {
            let cat = all.concat();
            outputs.iter_mut().for_each(|o| o.copy_from_slice(&cat));
        }
        K::Broadcast => outputs
            .iter_mut()
            .for_each(|o| o.copy_from_slice(all[root])),
        K::Scatter => {
            for (r, o) in outputs.iter_mut().enumerate() {
                o.copy_from_slice(&all[root][r * n..(r + 1) * n]);
            }
        }
        K::Gather => outputs[root].copy_from_slice(&all.concat()),
        K::AllToAll => {
            for (j, o) in outputs.iter_mut().enumerate() {
                for (i, input) in all.iter().enumerate() {
                    o[i * n..(i + 1) * n].copy_from_slice(&input[j * n..(j + 1) * n]);
                }
            }
        }
        K::AllToAllV => {
            let m = args.send_matrix.as_ref().expect("validated");
            for (j, o) in outputs.iter_mut().enumerate() {
                for (i, input) in all.iter().enumerate() {
                    let len = m.get(i, j) as usize * esz;
                    let from = m.send_displ(i, j) as usize * esz;
                    let to = m.recv_displ(j, i) as usize * esz;
                    o[to..to + len].copy_from_slice(&input[from..from + len]);
                }
            }
        }
        K::SendRecv | K::BatchSendRecv => {
            let mut sent = vec![0usize; p as usize];
            let mut received = vec![0usize; p as usize];
            for t in args.pairs.iter().flat_map(|ps| ps.iter()) {
                let (s, d) = (t.src as usize, t.dst as usize);
                let len = t.count as usize * esz;
                outputs[d][received[d]..received[d] + len]
                    .copy_from_slice(&all[s][sent[s]..sent[s] + len]);
                sent[s] += len;
                received[d] += len;
            }
        }
        K::Barrier => {}
    }
    Ok(outputs)
}

/// Largest magnitude of a summand in [`verifiable_input`] for sums, per
/// float type: with at most [`MAX_SUMMANDS`] nonzero summands, every
/// partial sum stays below 2^(mantissa bits + 1), so it is exact.
/// (bf16: 2 × 64 = 128 < 2^8; fp16: 16 × 64 = 1024 < 2^11.)
fn sum_magnitude(dtype: DataType) -> i64 {
    match dtype {
        DataType::Bf16 => 2,
        DataType::Fp16 => 16,
        _ => 1000,
    }
}

/// At most this many ranks contribute a nonzero summand to any one element
/// of a float sum in [`verifiable_input`].
pub const MAX_SUMMANDS: u32 = 64;

/// At most this many ranks contribute a factor ±2 (the rest ±1) to any one
/// element of a product in [`verifiable_input`]: 2^6 fits int8.
pub const MAX_DOUBLINGS: u32 = 6;

/// Rank `rank`'s `count` elements of input for a reduction `op` over
/// `world` ranks, seeded: the reduction of all ranks' inputs is the same
/// in every order of combination (so any correct algorithm matches
/// [`reference()`] bit for bit), and never overflows where that would matter.
///
/// Element `i` of rank `r`:
/// - integers: any bits (wrapping `+` and `*` are associative); odd values
///   for `Prod`, so products do not collapse to 0;
/// - float `Sum`/`Avg`: a small integer in `[-k, k]` (bf16 k = 2, fp16 16,
///   fp32/fp64 1000), nonzero on at most [`MAX_SUMMANDS`] ranks per element,
///   so every partial sum is an exactly representable integer;
/// - float `Prod`: ±1, or ±2 on at most [`MAX_DOUBLINGS`] ranks: every
///   partial product is a power of two well inside the range;
/// - float `Max`/`Min`: integers in `[-100, 100]`, and a NaN on one rank
///   for about one element in 61, to exercise NaN propagation.
pub fn verifiable_input(
    dtype: DataType,
    op: ReduceOp,
    world: u32,
    rank: Rank,
    count: u64,
    seed: u64,
) -> Vec<u8> {
    let esz = dtype.size() as usize;
    let world = u64::from(world.max(1));
    let r = u64::from(rank);
    let mut out = Vec::with_capacity(count as usize * esz);
    for i in 0..count {
        let mut state = seed ^ r.wrapping_mul(0x9E37_79B9) ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let h = splitmix64(&mut state);
        if !dtype.is_float() {
            let bits = if op == ReduceOp::Prod { h | 1 } else { h };
            out.extend_from_slice(&bits.to_le_bytes()[..esz]);
            continue;
        }
        let value = match op {
            ReduceOp::Sum | ReduceOp::Avg => {
                let stride = world.div_ceil(u64::from(MAX_SUMMANDS));
                let k = sum_magnitude(dtype);
                if (r + i) % stride == 0 {
                    (h % (2 * k as u64 + 1)) as f64 - k as f64
                } else {
                    0.0
                }
            }
            ReduceOp::Prod => {
                let stride = world.div_ceil(u64::from(MAX_DOUBLINGS));
                let magnitude = if (r + i) % stride == 0 && h & 2 != 0 {
                    2.0
                } else {
                    1.0
                };
                if h & 1 == 0 {
                    magnitude
                } else {
                    -magnitude
                }
            }
            ReduceOp::Max | ReduceOp::Min => {
                if i % 61 == 7 && r == i % world {
                    f64::NAN
                } else {
                    (h % 201) as f64 - 100.0
                }
            }
        };
        push_float(&mut out, dtype, value);
    }
    out
}

/// Appends `v` (exactly representable, or NaN) in `dtype`'s encoding.
fn push_float(out: &mut Vec<u8>, dtype: DataType, v: f64) {
    match dtype {
        DataType::Fp16 => out.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        DataType::Bf16 => out.extend_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
        DataType::Fp32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        _ => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// Every rank's input for `args` (sized by [`CollectiveArgs::io_bytes`]):
/// [`verifiable_input`] for reductions, seeded random bytes for data
/// movement (any bytes are exact when only copied).
pub fn verifiable_inputs(args: &CollectiveArgs, seed: u64) -> Vec<Vec<u8>> {
    let esz = args.dtype.size();
    (0..args.world_size)
        .map(|r| {
            let elems = args.io_bytes(r).0 / esz;
            if args.kind.is_reduction() {
                verifiable_input(args.dtype, args.op, args.world_size, r, elems, seed)
            } else {
                let mut state = seed ^ (u64::from(r) << 32) ^ 0xB17E5;
                (0..elems * esz)
                    .map(|_| splitmix64(&mut state) as u8)
                    .collect()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;

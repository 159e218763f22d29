//! An op's three buffers, addressed by schedule [`Region`]s with bounds
//! checks: a bad region is an error, never a panic or an out-of-bounds write.

use std::ops::Range;

use hccl_algos::kernels;
use hccl_algos::schedule::{BufKind, Region};
use hccl_algos::{DataType, ReduceOp};

use super::error::TcpError;

/// The memory one op runs over: the user's input and output (separate, or
/// one buffer for an in-place call, placed as `CollectiveArgs::alias` says)
/// and library scratch. Lengths are those the plan's `BufferSizes` asked for.
#[derive(Debug)]
pub struct OpBuffers<'a> {
    /// The input when separate; empty for in-place calls.
    input: &'a [u8],
    /// The output, or the whole user buffer for in-place calls.
    user: &'a mut [u8],
    scratch: &'a mut [u8],
    /// In-place placement: (input_at, input_len, output_at, output_len) in `user`.
    alias: Option<(u64, u64, u64, u64)>,
    /// fp16/bf16 partial values of `user` and `scratch` (see
    /// [`kernels::Partials`]): a fold of several inputs rounds once.
    parts: [kernels::Partials; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    In,
    User,
    Scratch,
}

fn bad_region(r: Region, len: u64) -> TcpError {
    TcpError::InvalidArgument(format!(
        "region {:?} [{}, {}) is outside its buffer of {len} bytes (schedule or buffer-size bug)",
        r.buf,
        r.offset,
        r.end()
    ))
}

fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

fn kernel_err(e: kernels::KernelError) -> TcpError {
    TcpError::Kernel(e.to_string())
}

impl<'a> OpBuffers<'a> {
    /// True for one buffer holding input and output ([`OpBuffers::in_place`]).
    pub(crate) fn is_in_place(&self) -> bool {
        self.alias.is_some()
    }

    /// Bytes of the op's data: its input or output, whichever is larger
    /// (not the scratch, whose size is the algorithm's).
    pub(crate) fn data_len(&self) -> usize {
        self.input.len().max(self.user.len())
    }

    /// Separate input and output buffers.
    pub fn separate(input: &'a [u8], output: &'a mut [u8], scratch: &'a mut [u8]) -> OpBuffers<'a> {
        OpBuffers {
            input,
            user: output,
            scratch,
            alias: None,
            parts: Default::default(),
        }
    }

    /// One user buffer holding the input at `input_at` (`input_len` bytes)
    /// and the output at `output_at` (`output_len` bytes), overlapping.
    ///
    /// # Errors
    /// [`TcpError::InvalidArgument`] if either does not fit in `user`.
    pub fn in_place(
        user: &'a mut [u8],
        (input_at, input_len): (u64, u64),
        (output_at, output_len): (u64, u64),
        scratch: &'a mut [u8],
    ) -> Result<OpBuffers<'a>, TcpError> {
        let len = user.len() as u64;
        let fits = |at: u64, n: u64| at.checked_add(n).is_some_and(|e| e <= len);
        if !fits(input_at, input_len) || !fits(output_at, output_len) {
            return Err(TcpError::InvalidArgument(format!(
                "in-place buffer of {len} bytes cannot hold input [{input_at}, +{input_len}) and output [{output_at}, +{output_len})"
            )));
        }
        Ok(OpBuffers {
            input: &[],
            user,
            scratch,
            alias: Some((input_at, input_len, output_at, output_len)),
            parts: Default::default(),
        })
    }

    /// Where `r` lives: its space and byte range there.
    fn locate(&self, r: Region) -> Result<(Space, Range<usize>), TcpError> {
        let (space, base, len) = match (r.buf, self.alias) {
            (BufKind::Input, None) => (Space::In, 0, self.input.len() as u64),
            (BufKind::Input, Some((at, n, _, _))) => (Space::User, at, n),
            (BufKind::Output, None) => (Space::User, 0, self.user.len() as u64),
            (BufKind::Output, Some((_, _, at, n))) => (Space::User, at, n),
            (BufKind::Scratch, _) => (Space::Scratch, 0, self.scratch.len() as u64),
        };
        if r.offset.checked_add(r.len).is_none_or(|e| e > len) {
            return Err(bad_region(r, len));
        }
        Ok((space, (base + r.offset) as usize..(base + r.end()) as usize))
    }

    /// Checks that `r` lies inside its buffer.
    ///
    /// # Errors
    /// [`TcpError::InvalidArgument`] naming the region and buffer length.
    pub fn check(&self, r: Region) -> Result<(), TcpError> {
        self.locate(r).map(|_| ())
    }

    /// Checks that `r` lies inside a writable buffer (not the input).
    ///
    /// # Errors
    /// [`TcpError::InvalidArgument`] if out of bounds or in the input.
    pub fn check_writable(&self, r: Region) -> Result<(), TcpError> {
        if r.buf == BufKind::Input {
            return Err(TcpError::InvalidArgument(format!(
                "schedule writes the read-only input buffer at {r:?}"
            )));
        }
        self.check(r)
    }

    /// The bytes of `r`.
    ///
    /// # Errors
    /// Out of bounds.
    pub fn get(&self, r: Region) -> Result<&[u8], TcpError> {
        let (space, rg) = self.locate(r)?;
        Ok(match space {
            Space::In => &self.input[rg],
            Space::User => &self.user[rg],
            Space::Scratch => &self.scratch[rg],
        })
    }

    /// The bytes of `r`, writable (to overwrite: their kept fp16/bf16
    /// partials are forgotten).
    ///
    /// # Errors
    /// Out of bounds, or `r` is in the input.
    pub fn get_mut(&mut self, r: Region) -> Result<&mut [u8], TcpError> {
        let (d, parts, at) = self.kept_mut(r)?;
        parts.forget(at..at + d.len());
        Ok(d)
    }

    /// The bytes of `r`, writable, with their space's partials and the
    /// byte offset of `r` there.
    fn kept_mut(
        &mut self,
        r: Region,
    ) -> Result<(&mut [u8], &mut kernels::Partials, usize), TcpError> {
        self.check_writable(r)?;
        let (space, rg) = self.locate(r)?;
        let at = rg.start;
        let [pu, ps] = &mut self.parts;
        Ok(match space {
            Space::Scratch => (&mut self.scratch[rg], ps, at),
            _ => (&mut self.user[rg], pu, at),
        })
    }

    /// The f32 values of `r`: its kept partials where there are any.
    fn values(&self, dtype: DataType, r: Region) -> Result<Vec<f32>, TcpError> {
        let (space, rg) = self.locate(r)?;
        let at = rg.start;
        let (bytes, parts) = match space {
            Space::In => (&self.input[rg], None),
            Space::User => (&self.user[rg], Some(&self.parts[0])),
            Space::Scratch => (&self.scratch[rg], Some(&self.parts[1])),
        };
        kernels::values(dtype, bytes, at, parts).map_err(kernel_err)
    }

    /// Calls `f(dst, src, partials)` with `dst` writable, `src` readable
    /// and `partials` those of `dst`'s space with `dst`'s byte offset there;
    /// when the two overlap in one buffer, `src` is copied first.
    fn with_pair<T>(
        &mut self,
        src: Region,
        dst: Region,
        f: impl FnOnce(&mut [u8], &[u8], (&mut kernels::Partials, usize)) -> Result<T, TcpError>,
    ) -> Result<T, TcpError> {
        self.check_writable(dst)?;
        let (ss, sr) = self.locate(src)?;
        let (ds, dr) = self.locate(dst)?;
        let OpBuffers {
            input,
            user,
            scratch,
            parts,
            ..
        } = self;
        let [pu, ps] = parts;
        let kept = (if ds == Space::Scratch { ps } else { pu }, dr.start);
        let (s, d): (&[u8], &mut [u8]) = match (ss, ds) {
            (Space::In, Space::Scratch) => (input, scratch),
            (Space::In, _) => (input, user),
            (Space::User, Space::Scratch) => (user, scratch),
            (Space::Scratch, Space::User) => (scratch, user),
            (Space::User, _) | (Space::Scratch, _) => {
                // Same buffer.
                let buf: &mut [u8] = if ds == Space::User { user } else { scratch };
                if overlap(&sr, &dr) {
                    let tmp = buf[sr].to_vec();
                    return f(&mut buf[dr], &tmp, kept);
                }
                return if sr.start < dr.start {
                    let (lo, hi) = buf.split_at_mut(dr.start);
                    f(&mut hi[..dr.len()], &lo[sr], kept)
                } else {
                    let (lo, hi) = buf.split_at_mut(sr.start);
                    f(&mut lo[dr], &hi[..sr.len()], kept)
                };
            }
        };
        f(&mut d[dr], &s[sr], kept)
    }

    /// `dst = src` (equal lengths required; a copy onto the same bytes is a no-op).
    ///
    /// # Errors
    /// Bounds, lengths.
    pub fn copy(&mut self, src: Region, dst: Region) -> Result<(), TcpError> {
        if src.len != dst.len {
            return Err(TcpError::InvalidArgument(format!(
                "copy of {} bytes into a region of {} bytes",
                src.len, dst.len
            )));
        }
        self.check_writable(dst)?;
        if self.locate(src)? == self.locate(dst)? {
            return Ok(());
        }
        self.with_pair(src, dst, |d, s, (parts, at)| {
            parts.forget(at..at + d.len());
            hccl_algos::kernels::copy::copy(d, s);
            Ok(())
        })
    }

    /// True if `a` and `b` are the same bytes (in-place aliasing included).
    pub fn same_bytes(&self, a: Region, b: Region) -> bool {
        matches!((self.locate(a), self.locate(b)), (Ok(x), Ok(y)) if x == y)
    }

    /// `dst = dst (op) src`, element-wise in `dtype`.
    ///
    /// # Errors
    /// Bounds, lengths, partial elements.
    pub fn reduce(
        &mut self,
        dtype: DataType,
        op: ReduceOp,
        src: Region,
        dst: Region,
    ) -> Result<(), TcpError> {
        if kernels::keeps_partials(dtype) {
            let vals = self.values(dtype, src)?;
            let (d, parts, at) = self.kept_mut(dst)?;
            return kernels::fold_kept(dtype, op, d, at, parts, &vals).map_err(kernel_err);
        }
        self.with_pair(src, dst, |d, s, _| {
            kernels::reduce(dtype, op, d, s).map_err(kernel_err)
        })
    }

    /// `dst = dst (op) data` for bytes that arrived from a peer.
    ///
    /// # Errors
    /// Bounds, lengths, partial elements.
    pub fn reduce_from(
        &mut self,
        dtype: DataType,
        op: ReduceOp,
        dst: Region,
        data: &[u8],
    ) -> Result<(), TcpError> {
        if kernels::keeps_partials(dtype) {
            let (d, parts, at) = self.kept_mut(dst)?;
            return kernels::reduce_kept(dtype, op, d, at, parts, data).map_err(kernel_err);
        }
        kernels::reduce(dtype, op, self.get_mut(dst)?, data).map_err(kernel_err)
    }

    /// `dst = local (op) data` in one pass (`local` may be `dst`).
    ///
    /// # Errors
    /// Bounds, lengths, partial elements.
    pub fn reduce_pair_from(
        &mut self,
        dtype: DataType,
        op: ReduceOp,
        local: Region,
        dst: Region,
        data: &[u8],
    ) -> Result<(), TcpError> {
        if self.same_bytes(local, dst) {
            return self.reduce_from(dtype, op, dst, data);
        }
        self.with_pair(local, dst, |d, l, (parts, at)| {
            if kernels::keeps_partials(dtype) {
                kernels::reduce_into_kept(dtype, op, d, at, parts, l, data).map_err(kernel_err)
            } else {
                kernels::reduce_into(dtype, op, d, l, data).map_err(kernel_err)
            }
        })
    }

    /// Divides every element of `dst` by `divisor`.
    ///
    /// # Errors
    /// Bounds, partial elements, zero divisor.
    pub fn divide(&mut self, dtype: DataType, dst: Region, divisor: u32) -> Result<(), TcpError> {
        if kernels::keeps_partials(dtype) {
            let (d, parts, at) = self.kept_mut(dst)?;
            return kernels::divide_kept(dtype, d, at, parts, divisor).map_err(kernel_err);
        }
        kernels::divide(dtype, self.get_mut(dst)?, divisor).map_err(kernel_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_input_writes_are_errors() {
        let input = [1u8, 2, 3, 4];
        let mut output = [0u8; 4];
        let mut scratch = [0u8; 0];
        let mut b = OpBuffers::separate(&input, &mut output, &mut scratch);
        assert!(b.get(Region::new(BufKind::Input, 2, 3)).is_err());
        assert!(b.get(Region::new(BufKind::Input, u64::MAX, 2)).is_err());
        assert!(b.get_mut(Region::new(BufKind::Input, 0, 1)).is_err());
        b.copy(
            Region::new(BufKind::Input, 0, 4),
            Region::new(BufKind::Output, 0, 4),
        )
        .unwrap();
        assert_eq!(b.user, &[1, 2, 3, 4]);
    }

    #[test]
    fn same_buffer_copy_and_reduce_handle_overlap() {
        let mut output = [1u8, 2, 3, 4, 5, 6];
        let mut scratch = [0u8; 0];
        let mut b = OpBuffers::separate(&[], &mut output, &mut scratch);
        b.copy(
            Region::new(BufKind::Output, 0, 4),
            Region::new(BufKind::Output, 2, 4),
        )
        .unwrap();
        assert_eq!(b.user, &[1, 2, 1, 2, 3, 4]);
        b.reduce(
            DataType::Uint8,
            ReduceOp::Sum,
            Region::new(BufKind::Output, 4, 2),
            Region::new(BufKind::Output, 0, 2),
        )
        .unwrap();
        assert_eq!(b.user, &[4, 6, 1, 2, 3, 4]);
        b.reduce(
            DataType::Uint8,
            ReduceOp::Sum,
            Region::new(BufKind::Output, 0, 2),
            Region::new(BufKind::Output, 0, 2),
        )
        .unwrap();
        assert_eq!(&b.user[..2], &[8, 12], "src == dst doubles");
    }

    #[test]
    fn in_place_input_aliases_the_output_slot() {
        // AllGather in place, rank 1 of 2: input is output bytes 2..4.
        let mut user = [0u8, 0, 7, 9];
        let mut scratch = [0u8; 0];
        let mut b = OpBuffers::in_place(&mut user, (2, 2), (0, 4), &mut scratch).unwrap();
        let inp = Region::new(BufKind::Input, 0, 2);
        assert_eq!(b.get(inp).unwrap(), &[7, 9]);
        assert!(b.same_bytes(inp, Region::new(BufKind::Output, 2, 2)));
        b.copy(inp, Region::new(BufKind::Output, 0, 2)).unwrap();
        assert_eq!(b.user, &[7, 9, 7, 9]);
        assert!(
            b.get(Region::new(BufKind::Input, 1, 2)).is_err(),
            "input is 2 bytes long"
        );
        let mut small = [0u8; 3];
        assert!(OpBuffers::in_place(&mut small, (2, 2), (0, 3), &mut []).is_err());
    }
}

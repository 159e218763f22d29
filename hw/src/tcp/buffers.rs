//! An op's three buffers, addressed by schedule [`Region`]s with bounds
//! checks: a bad region is an error, never a panic or an out-of-bounds write.

use hccl_algos::kernels;
use hccl_algos::schedule::{BufKind, Region};
use hccl_algos::{DataType, ReduceOp};

use super::error::TcpError;

/// The memory one op runs over: the user's input (read-only), output, and
/// library scratch. Lengths are those the plan's `BufferSizes` asked for.
#[derive(Debug)]
pub struct OpBuffers<'a> {
    /// Input (send) buffer.
    pub input: &'a [u8],
    /// Output (receive) buffer.
    pub output: &'a mut [u8],
    /// Scratch buffer.
    pub scratch: &'a mut [u8],
}

fn bad_region(r: Region, len: usize) -> TcpError {
    TcpError::InvalidArgument(format!(
        "region {:?} [{}, {}) is outside its buffer of {len} bytes (schedule or buffer-size bug)",
        r.buf,
        r.offset,
        r.end()
    ))
}

fn range(r: Region, len: usize) -> Result<std::ops::Range<usize>, TcpError> {
    if r.end() > len as u64 || r.offset.checked_add(r.len).is_none() {
        return Err(bad_region(r, len));
    }
    Ok(r.offset as usize..r.end() as usize)
}

fn overlap(a: &std::ops::Range<usize>, b: &std::ops::Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

fn kernel_err(e: kernels::KernelError) -> TcpError {
    TcpError::Kernel(e.to_string())
}

impl OpBuffers<'_> {
    fn len_of(&self, b: BufKind) -> usize {
        match b {
            BufKind::Input => self.input.len(),
            BufKind::Output => self.output.len(),
            BufKind::Scratch => self.scratch.len(),
        }
    }

    /// Checks that `r` lies inside its buffer.
    ///
    /// # Errors
    /// [`TcpError::InvalidArgument`] naming the region and buffer length.
    pub fn check(&self, r: Region) -> Result<(), TcpError> {
        range(r, self.len_of(r.buf)).map(|_| ())
    }

    /// Checks that `r` lies inside a writable buffer.
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
        let buf: &[u8] = match r.buf {
            BufKind::Input => self.input,
            BufKind::Output => self.output,
            BufKind::Scratch => self.scratch,
        };
        Ok(&buf[range(r, buf.len())?])
    }

    /// The bytes of `r`, writable.
    ///
    /// # Errors
    /// Out of bounds, or `r` is in the input.
    pub fn get_mut(&mut self, r: Region) -> Result<&mut [u8], TcpError> {
        self.check_writable(r)?;
        let buf: &mut [u8] = match r.buf {
            BufKind::Input => unreachable_input(),
            BufKind::Output => self.output,
            BufKind::Scratch => self.scratch,
        };
        let rg = range(r, buf.len())?;
        Ok(&mut buf[rg])
    }

    /// Calls `f(dst, src)` with `dst` writable and `src` readable; when the
    /// two overlap in one buffer, `src` is copied first.
    fn with_pair<T>(
        &mut self,
        src: Region,
        dst: Region,
        f: impl FnOnce(&mut [u8], &[u8]) -> Result<T, TcpError>,
    ) -> Result<T, TcpError> {
        self.check(src)?;
        self.check_writable(dst)?;
        if src.buf != dst.buf {
            // Separate buffers: no aliasing possible.
            let OpBuffers {
                input,
                output,
                scratch,
            } = self;
            let (s, d): (&[u8], &mut [u8]) = match (src.buf, dst.buf) {
                (BufKind::Input, BufKind::Output) => (input, output),
                (BufKind::Input, _) => (input, scratch),
                (BufKind::Output, _) => (output, scratch),
                (BufKind::Scratch, _) => (scratch, output),
            };
            let (sr, dr) = (range(src, s.len())?, range(dst, d.len())?);
            return f(&mut d[dr], &s[sr]);
        }
        let buf: &mut [u8] = match dst.buf {
            BufKind::Output => self.output,
            _ => self.scratch,
        };
        let (sr, dr) = (range(src, buf.len())?, range(dst, buf.len())?);
        if overlap(&sr, &dr) {
            let tmp = buf[sr].to_vec();
            return f(&mut buf[dr], &tmp);
        }
        if sr.start < dr.start {
            let (lo, hi) = buf.split_at_mut(dr.start);
            f(&mut hi[..dr.len()], &lo[sr])
        } else {
            let (lo, hi) = buf.split_at_mut(sr.start);
            f(&mut lo[dr], &hi[..sr.len()])
        }
    }

    /// `dst = src` (equal lengths required).
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
        if src == dst {
            return self.check(src);
        }
        self.with_pair(src, dst, |d, s| {
            d.copy_from_slice(s);
            Ok(())
        })
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
        self.with_pair(src, dst, |d, s| {
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
        kernels::reduce(dtype, op, self.get_mut(dst)?, data).map_err(kernel_err)
    }

    /// Divides every element of `dst` by `divisor`.
    ///
    /// # Errors
    /// Bounds, partial elements, zero divisor.
    pub fn divide(&mut self, dtype: DataType, dst: Region, divisor: u32) -> Result<(), TcpError> {
        kernels::divide(dtype, self.get_mut(dst)?, divisor).map_err(kernel_err)
    }
}

/// `get_mut` checked `Input` away already; this arm cannot run.
fn unreachable_input() -> &'static mut [u8] {
    &mut []
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_input_writes_are_errors() {
        let input = [1u8, 2, 3, 4];
        let mut output = [0u8; 4];
        let mut scratch = [0u8; 0];
        let mut b = OpBuffers {
            input: &input,
            output: &mut output,
            scratch: &mut scratch,
        };
        assert!(b.get(Region::new(BufKind::Input, 2, 3)).is_err());
        assert!(b.get(Region::new(BufKind::Input, u64::MAX, 2)).is_err());
        assert!(b.get_mut(Region::new(BufKind::Input, 0, 1)).is_err());
        b.copy(
            Region::new(BufKind::Input, 0, 4),
            Region::new(BufKind::Output, 0, 4),
        )
        .unwrap();
        assert_eq!(b.output, &[1, 2, 3, 4]);
    }

    #[test]
    fn same_buffer_copy_and_reduce_handle_overlap() {
        let mut output = [1u8, 2, 3, 4, 5, 6];
        let mut scratch = [0u8; 0];
        let mut b = OpBuffers {
            input: &[],
            output: &mut output,
            scratch: &mut scratch,
        };
        b.copy(
            Region::new(BufKind::Output, 0, 4),
            Region::new(BufKind::Output, 2, 4),
        )
        .unwrap();
        assert_eq!(b.output, &[1, 2, 1, 2, 3, 4]);
        b.reduce(
            DataType::Uint8,
            ReduceOp::Sum,
            Region::new(BufKind::Output, 4, 2),
            Region::new(BufKind::Output, 0, 2),
        )
        .unwrap();
        assert_eq!(b.output, &[4, 6, 1, 2, 3, 4]);
        b.reduce(
            DataType::Uint8,
            ReduceOp::Sum,
            Region::new(BufKind::Output, 0, 2),
            Region::new(BufKind::Output, 0, 2),
        )
        .unwrap();
        assert_eq!(&b.output[..2], &[8, 12], "src == dst doubles");
    }
}

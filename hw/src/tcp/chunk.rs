//! Received bytes on their way to a receive: a buffer and where in it
//! they start.
//!
//! The start is not always 0: a piece copied out of a same-host peer
//! (`process_vm_readv`) lands at the peer's page offset, so that the
//! kernel's `rep movsb` never copies between aliased addresses (5× slower
//! on AMD Zen; [`hccl_algos::kernels::copy`]).

use hccl_algos::kernels::copy::aliased;

/// Page size the aliasing rule works in.
const PAGE: usize = 4096;

/// Bytes `buf[start..]` of a message, consumed by a receive; the buffer
/// goes back to a pool afterwards ([`Chunk::into_buf`]).
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    buf: Vec<u8>,
    start: usize,
}

impl Chunk {
    /// All of `buf`.
    pub(crate) fn whole(buf: Vec<u8>) -> Chunk {
        Chunk { buf, start: 0 }
    }

    /// `len` bytes of room in `buf` (its old bytes are not kept) for a copy
    /// from address `src`, placed so that the copy is not [`aliased`]: at
    /// the same offset within a page as `src` when `buf`'s own start would
    /// be aliased, else at 0. Reuses `buf`'s memory when it is big enough.
    pub(crate) fn for_copy_from(mut buf: Vec<u8>, src: u64, len: usize) -> Chunk {
        let src = src as usize;
        let start = if aliased(buf.as_ptr() as usize, src, len) {
            buf.clear();
            buf.reserve(len + PAGE);
            src.wrapping_sub(buf.as_ptr() as usize) % PAGE
        } else {
            0
        };
        // Within the reserved capacity (start < PAGE), so the buffer does
        // not move; shrinking a reused buffer zeroes nothing.
        buf.resize(start + len, 0);
        Chunk { buf, start }
    }

    /// The bytes, for the copy that fills them.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }

    /// The buffer, for reuse.
    pub(crate) fn into_buf(self) -> Vec<u8> {
        self.buf
    }
}

impl std::ops::Deref for Chunk {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_into_the_chunk_is_never_aliased() {
        let src = vec![7u8; 1 << 20];
        for offset in [0usize, 1, 16, 31, 100, 4000] {
            for len in [100usize, 5000, 300_000] {
                let from = src[offset..].as_ptr() as usize;
                // A reused buffer of every size class, a fresh one too.
                for reuse in [Vec::new(), vec![0u8; 64], vec![0u8; 1 << 20]] {
                    let mut c = Chunk::for_copy_from(reuse, from as u64, len);
                    assert_eq!(c.len(), len);
                    assert!(!aliased(c.bytes_mut().as_ptr() as usize, from, len));
                    c.bytes_mut().copy_from_slice(&src[offset..offset + len]);
                    assert_eq!(&c[..], &src[offset..offset + len]);
                }
            }
        }
    }

    #[test]
    fn an_unaliased_buffer_is_used_from_its_start() {
        let buf = vec![0u8; 8192];
        let at = buf.as_ptr() as u64;
        let c = Chunk::for_copy_from(buf, at, 8192);
        assert_eq!(c.start, 0);
        assert_eq!(c.into_buf().len(), 8192);
    }
}

//! Received bytes on their way to a receive: a buffer and where in it
//! they start.
//!
//! The start is not always 0: a piece copied out of a same-host peer
//! (`process_vm_readv`) lands at the peer's page offset, so that the
//! kernel's `rep movsb` never copies to an address 1-31 bytes past the
//! source modulo 4096 (4-6x slower on AMD Zen 3;
//! [`hccl_algos::kernels::copy`]).

use hccl_algos::kernels::copy::{aliased, PAGE};

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
        // Room first (the buffer may move), then the offset: nothing below
        // moves it again.
        buf.clear();
        buf.reserve(len + PAGE);
        let start = if aliased(buf.as_ptr() as usize, src, len) {
            src.wrapping_sub(buf.as_ptr() as usize) % PAGE
        } else {
            0
        };
        // Within the reserved capacity (start < PAGE); shrinking a reused
        // buffer zeroes nothing.
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
        let space = vec![7u8; (1 << 20) + 2 * PAGE];
        let page = (PAGE - space.as_ptr() as usize % PAGE) % PAGE;
        for offset in [0usize, 1, 8, 16, 31, 100, 4000] {
            for len in [100usize, 5000, 300_000, 1 << 20] {
                let from = &space[page + offset..page + offset + len];
                // Reused buffers of every size class (smaller ones move when
                // they grow), a fresh one too.
                for reuse in [
                    Vec::new(),
                    vec![0u8; 64],
                    vec![0u8; PAGE],
                    vec![0u8; 1 << 20],
                ] {
                    let mut c = Chunk::for_copy_from(reuse, from.as_ptr() as u64, len);
                    assert_eq!(c.len(), len);
                    let at = c.bytes_mut().as_ptr() as usize;
                    assert!(
                        !aliased(at, from.as_ptr() as usize, len),
                        "offset {offset}, len {len}"
                    );
                    c.bytes_mut().copy_from_slice(from);
                    assert_eq!(&c[..], from);
                }
            }
        }
    }

    #[test]
    fn an_unaliased_buffer_is_used_from_its_start() {
        // Room for the copy and a page: the buffer stays where it is.
        let mut buf = Vec::with_capacity(8192 + PAGE);
        buf.resize(8192, 0u8);
        let at = buf.as_ptr() as u64;
        let c = Chunk::for_copy_from(buf, at, 8192);
        assert_eq!(c.start, 0);
        assert_eq!(c.into_buf().len(), 8192);
    }
}

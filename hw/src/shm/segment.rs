//! The shared segment of one same-host pair, and the crate's only
//! `unsafe` code: the positions of its two rings are atomics in memory
//! another process maps too, and its data bytes are copied with raw
//! pointers (never through a Rust reference, which would claim that no
//! one else writes them).
//!
//! A segment is an anonymous `memfd` (no name in any file system): the
//! lower rank of a pair creates it and keeps its descriptor open only
//! until the peer has mapped it through `/proc/<pid>/fd/<fd>` (which
//! needs the same permission as the cross-memory probe, already
//! verified). From then on it exists only as the two mappings, so the
//! kernel frees it when both processes have unmapped it or exited,
//! crashed ones included: nothing is left to clean up on any exit path.
//!
//! Layout (little-endian, 64-byte lines): a header line (magic, version,
//! ring capacity, the pair's 32-byte token), then ring 0 (lower → higher
//! rank) and ring 1: each a line for `tail`, a line for `head` (apart so
//! the two sides do not write one cache line) and `cap` data bytes.

use std::fs::File;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use hccl_algos::kernels::copy;
use memmap2::{MmapOptions, MmapRaw};

use super::ring::RingMem;

/// Bytes of the segment's header.
const HEADER: usize = 64;
/// A ring's two position lines.
const POSITIONS: usize = 128;
/// The segment's first 8 bytes.
const MAGIC: [u8; 8] = *b"HCCLSHM1";
/// Bytes of the pair's token in the header.
pub(crate) const TOKEN_LEN: usize = 32;
/// The name the memfd shows in `/proc/<pid>/maps` (`/memfd:hccl-shm`).
pub const MEMFD_NAME: &str = "hccl-shm";

/// One pair's mapped segment (either side's view).
#[derive(Debug)]
pub(crate) struct Segment {
    map: MmapRaw,
    cap: u64,
}

/// Bytes of a segment whose rings hold `cap` bytes each.
fn segment_len(cap: u64) -> usize {
    HEADER + 2 * (POSITIONS + cap as usize)
}

impl Segment {
    /// Creates a segment with two rings of `cap` bytes (a power of two of
    /// at least 64) and `token` in its header; returns it and the memfd,
    /// which the caller keeps open until the peer has mapped it.
    ///
    /// # Errors
    /// `memfd_create`, `ftruncate` or `mmap` failing (as text).
    #[cfg(target_os = "linux")]
    pub(crate) fn create(cap: u64, token: &[u8; TOKEN_LEN]) -> Result<(Segment, File), String> {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        if !cap.is_power_of_two() || cap < 64 {
            return Err(format!(
                "ring capacity {cap} is not a power of two of at least 64"
            ));
        }
        let fd = memfd_create(MEMFD_NAME, MFdFlags::MFD_CLOEXEC)
            .map_err(|e| format!("memfd_create: {e}"))?;
        let file = File::from(fd);
        let len = segment_len(cap);
        file.set_len(len as u64)
            .map_err(|e| format!("sizing the segment to {len} bytes: {e}"))?;
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|e| format!("mapping the segment: {e}"))?;
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(&MAGIC);
        header[8..16].copy_from_slice(&cap.to_le_bytes());
        header[16..16 + TOKEN_LEN].copy_from_slice(token);
        // SAFETY: the mapping is `len >= HEADER` bytes, writable, and new:
        // no other process has it yet, and `header` is a separate local.
        unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), map.as_mut_ptr(), HEADER) };
        Ok((Segment { map, cap }, file))
    }

    /// Creates a segment: not on this target.
    ///
    /// # Errors
    /// Always.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn create(_cap: u64, _token: &[u8; TOKEN_LEN]) -> Result<(Segment, File), String> {
        Err("shared-memory segments exist on Linux only".into())
    }

    /// Maps the segment the peer `pid` holds open as descriptor `fd`, and
    /// checks its header: the magic, a ring capacity `cap`, the pair's
    /// `token`.
    ///
    /// # Errors
    /// Open or map failing, a file of another size, another header (as
    /// text: the pair then stays on the socket).
    pub(crate) fn open(
        pid: u32,
        fd: u32,
        cap: u64,
        token: &[u8; TOKEN_LEN],
    ) -> Result<Segment, String> {
        let path = format!("/proc/{pid}/fd/{fd}");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening {path}: {e}"))?;
        let len = segment_len(cap);
        let actual = file.metadata().map_err(|e| format!("{path}: {e}"))?.len();
        if actual != len as u64 {
            return Err(format!("{path} has {actual} bytes, not {len}"));
        }
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|e| format!("mapping {path}: {e}"))?;
        let mut header = [0u8; HEADER];
        // SAFETY: the mapping has `len >= HEADER` readable bytes; the
        // creator wrote the header before it sent the descriptor and
        // never writes it again, so nothing writes these bytes now.
        unsafe { std::ptr::copy_nonoverlapping(map.as_ptr(), header.as_mut_ptr(), HEADER) };
        if header[..8] != MAGIC
            || header[8..16] != cap.to_le_bytes()
            || header[16..16 + TOKEN_LEN] != token[..]
        {
            return Err(format!("{path} is not this pair's segment"));
        }
        Ok(Segment { map, cap })
    }

    /// Ring `which` (0: lower → higher rank, 1: the other way).
    pub(crate) fn ring(self: &Arc<Segment>, which: usize) -> SegRing {
        assert!(which < 2, "a segment has two rings");
        SegRing {
            seg: Arc::clone(self),
            base: HEADER + which * (POSITIONS + self.cap as usize),
        }
    }
}

/// One ring of a mapped [`Segment`].
#[derive(Debug, Clone)]
pub(crate) struct SegRing {
    seg: Arc<Segment>,
    /// Offset of the ring's `tail` line in the mapping.
    base: usize,
}

impl SegRing {
    fn position(&self, line: usize) -> &AtomicU64 {
        // SAFETY: `base + line` (line 0 or 64) is inside the mapping (see
        // `segment_len`), 64-byte aligned (the mapping is page aligned and
        // every offset is a multiple of 64), so a valid, aligned `u64` for
        // as long as `self.seg` keeps the mapping. Both processes access
        // it only atomically (this module hands out nothing else for it).
        unsafe { AtomicU64::from_ptr(self.seg.map.as_mut_ptr().add(self.base + line).cast()) }
    }

    /// The data bytes `at..at + len`, checked against the ring's bounds.
    fn data(&self, at: u64, len: usize) -> *mut u8 {
        let end = at.checked_add(len as u64);
        assert!(
            end.is_some_and(|e| e <= self.seg.cap),
            "ring copy out of bounds"
        );
        // SAFETY: `at < cap` (checked above), and the data bytes follow
        // the ring's two position lines inside the mapping.
        unsafe {
            self.seg
                .map
                .as_mut_ptr()
                .add(self.base + POSITIONS + at as usize)
        }
    }
}

impl RingMem for SegRing {
    fn cap(&self) -> u64 {
        self.seg.cap
    }
    fn tail(&self) -> &AtomicU64 {
        self.position(0)
    }
    fn head(&self) -> &AtomicU64 {
        self.position(64)
    }
    fn copy_in(&self, at: u64, src: &[u8]) {
        let dst = self.data(at, src.len());
        // SAFETY: `dst..dst + src.len()` is inside the ring (checked by
        // `data`); the protocol (`ring::write`) gives these bytes to the
        // producer alone until it publishes `tail`, and `src` is local
        // memory, so the ranges do not overlap. A peer that breaks the
        // protocol can only change the bytes (plain `u8`s, any value
        // valid), never this process's memory outside the mapping.
        unsafe { copy_unaliased(src.as_ptr(), dst, src.len()) };
    }
    fn copy_out(&self, at: u64, dst: &mut [u8]) {
        let src = self.data(at, dst.len());
        // SAFETY: as in `copy_in`: inside the ring, owned by the consumer
        // between reading `tail` and publishing `head`; `dst` is local.
        unsafe { copy_unaliased(src, dst.as_mut_ptr(), dst.len()) };
    }
}

/// `copy_nonoverlapping(src, dst, len)`, in [`copy::PIECE`]-byte calls when
/// the addresses are [`copy::aliased`] (slow `rep movsb` on AMD Zen).
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping`: both ranges valid for `len` bytes
/// and disjoint.
unsafe fn copy_unaliased(src: *const u8, dst: *mut u8, len: usize) {
    let step = if copy::aliased(dst as usize, src as usize, len) {
        copy::PIECE
    } else {
        len.max(1)
    };
    let mut at = 0;
    while at < len {
        let n = step.min(len - at);
        // SAFETY: `at + n <= len`, inside both ranges (the caller's
        // contract); the pointer is opaque so that the calls stay apart.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), std::hint::black_box(dst.add(at)), n) };
        at += n;
    }
}

// Rings move to the I/O tasks: `MmapRaw` is `Send + Sync`, and this module
// touches the memory only through atomics and the protocol's exclusive
// byte ranges, so no `unsafe impl` is needed.
#[cfg(test)]
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SegRing>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::ring;

    #[test]
    fn a_segment_opened_through_proc_shares_both_rings() {
        let token = [7u8; TOKEN_LEN];
        let (a, file) = Segment::create(4096, &token).unwrap();
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd() as u32;
        let b = Segment::open(std::process::id(), fd, 4096, &token).unwrap();
        drop(file);
        let (a, b) = (Arc::new(a), Arc::new(b));
        let (a0, b0, a1, b1) = (a.ring(0), b.ring(0), a.ring(1), b.ring(1));
        assert_eq!(ring::write(&a0, b"hello").n, 5);
        assert_eq!(ring::write(&b1, b"back").n, 4);
        let mut got = [0u8; 8];
        let n = ring::read(&b0, &mut got).n;
        assert_eq!(&got[..n], b"hello");
        let n = ring::read(&a1, &mut got).n;
        assert_eq!(&got[..n], b"back");
    }

    #[test]
    fn a_wrong_token_size_or_descriptor_is_refused() {
        let (_a, file) = Segment::create(4096, &[1; TOKEN_LEN]).unwrap();
        use std::os::fd::AsRawFd;
        let (pid, fd) = (std::process::id(), file.as_raw_fd() as u32);
        let e = Segment::open(pid, fd, 4096, &[2; TOKEN_LEN]).unwrap_err();
        assert!(e.contains("not this pair's segment"), "{e}");
        let e = Segment::open(pid, fd, 8192, &[1; TOKEN_LEN]).unwrap_err();
        assert!(e.contains("bytes, not"), "{e}");
        let e = Segment::open(pid, 99_999, 4096, &[1; TOKEN_LEN]).unwrap_err();
        assert!(e.contains("opening /proc/"), "{e}");
        let e = Segment::create(100, &[1; TOKEN_LEN]).unwrap_err();
        assert!(e.contains("power of two"), "{e}");
    }
}

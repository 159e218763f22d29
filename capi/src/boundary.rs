//! The FFI boundary: the crate's one module with `unsafe`. Every C pointer
//! becomes a Rust value here, and nowhere else:
//!
//! - memory this library allocates ([`RawBuf`]: `aclrtMalloc`,
//!   `aclrtMallocHost`), which `memory` hands out as checked spans;
//! - the caller's host memory: out-parameters, arrays of counts, strings,
//!   the root info, the host side of a copy.
//!
//! The C caller's promises are CANN's: a host pointer points at as many
//! valid bytes as the call says, and memory an op uses on a stream is
//! not written by anyone else until the stream is synchronized. What can
//! be checked is checked before this module is reached (null pointers
//! here, unknown device pointers and lengths in `memory`).

#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::ffi::{c_char, CStr};
use std::ptr::NonNull;

/// Alignment of every allocation (bytes): enough for any element type
/// and for the 32-byte alignment ACL documents for device memory.
pub(crate) const ALIGN: usize = 64;

/// Zeroed memory owned by this library: one `aclrtMalloc` or
/// `aclrtMallocHost` allocation.
pub(crate) struct RawBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: RawBuf owns its allocation (like a Box<[u8]>); the bytes are
// plain data, and access goes through `bytes` / `bytes_mut`, whose
// callers keep to the stream ordering the C API promises.
unsafe impl Send for RawBuf {}
// SAFETY: as for Send: shared references only read the address, and
// access to the bytes follows the C API's ordering rules.
unsafe impl Sync for RawBuf {}

impl RawBuf {
    /// `len` (> 0) zeroed bytes aligned to [`ALIGN`]; `None` if the
    /// allocator refuses.
    pub(crate) fn zeroed(len: usize) -> Option<RawBuf> {
        let layout = Layout::from_size_align(len.max(1), ALIGN).ok()?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(p).map(|ptr| RawBuf { ptr, layout })
    }

    /// The address C sees.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// Bytes `[off, off + len)`; `None` past the end.
    pub(crate) fn bytes(&self, off: usize, len: usize) -> Option<&[u8]> {
        if off.checked_add(len)? > self.len() {
            return None;
        }
        // SAFETY: in bounds of a live allocation of initialized (zeroed)
        // bytes; no `&mut` to these bytes exists at the same time unless
        // the C caller breaks the stream-ordering contract.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) })
    }

    /// Bytes `[off, off + len)`, writable; `None` past the end. The memory
    /// is the C program's device memory: ops and copies on streams write
    /// it, in the order the C API's contract (CANN's) gives them.
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn bytes_mut(&self, off: usize, len: usize) -> Option<&mut [u8]> {
        if off.checked_add(len)? > self.len() {
            return None;
        }
        // SAFETY: in bounds of a live allocation of initialized bytes.
        // Exclusive use is the C caller's promise (an op's receive buffer
        // is touched by nobody else until its stream is synchronized); the
        // callers in this crate never hold two overlapping spans of one op
        // at once (an overlapping send buffer is copied first).
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) })
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Writes an out-parameter; `false` for null.
pub(crate) fn write<T>(p: *mut T, v: T) -> bool {
    if p.is_null() {
        return false;
    }
    // SAFETY: non-null; the caller passed room for a T (C API contract).
    unsafe { p.write_unaligned(v) };
    true
}

/// Copies `n` `T`s out of a caller's array; `None` for null (with n > 0).
pub(crate) fn read_array<T: Copy>(p: *const T, n: usize) -> Option<Vec<T>> {
    if n == 0 {
        return Some(Vec::new());
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null; the caller promises n valid Ts (C API contract);
    // each is read unaligned.
    Some(
        (0..n)
            .map(|i| unsafe { p.add(i).read_unaligned() })
            .collect(),
    )
}

/// Writes `vals` into a caller's array of at least `vals.len()` entries;
/// `false` for null.
pub(crate) fn write_array<T: Copy>(p: *mut T, vals: &[T]) -> bool {
    if p.is_null() {
        return false;
    }
    for (i, v) in vals.iter().enumerate() {
        // SAFETY: non-null; the caller passed room for vals.len() Ts.
        unsafe { p.add(i).write_unaligned(*v) };
    }
    true
}

/// A caller's NUL-terminated string (lossy UTF-8); `None` for null.
pub(crate) fn string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null; the caller promises a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A caller's fixed-size char field (`char name[cap]`, maybe without a
/// NUL): the bytes up to the first NUL or `cap`.
pub(crate) fn fixed_string(p: *const c_char, cap: usize) -> Option<String> {
    let bytes = read_array(p.cast::<u8>(), cap)?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(cap);
    Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// Writes `s` as a NUL-terminated string into a caller's buffer of `cap`
/// bytes (truncated to `cap - 1`); `false` for null or `cap == 0`.
pub(crate) fn write_string(p: *mut c_char, s: &str, cap: usize) -> bool {
    if cap == 0 {
        return false;
    }
    let n = s.len().min(cap - 1);
    let mut v: Vec<u8> = s.as_bytes()[..n].to_vec();
    v.push(0);
    write_array(p.cast::<u8>(), &v)
}

/// The address of a caller's host memory, carried to a stream's worker
/// (a plain number: the bytes are reached through [`host_read`] and
/// [`host_write`] when the task runs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostAddr(pub(crate) usize);

/// Copies `len` bytes of the caller's host memory at `at`; `None` for
/// null (with len > 0).
pub(crate) fn host_read(at: HostAddr, len: usize) -> Option<Vec<u8>> {
    read_array(at.0 as *const u8, len)
}

/// Runs `f` on `len` bytes of the caller's host memory at `at`; `None`
/// for null (with len > 0).
pub(crate) fn with_host<R>(at: HostAddr, len: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    if len == 0 {
        return Some(f(&[]));
    }
    if at.0 == 0 {
        return None;
    }
    // SAFETY: non-null; the caller promises len readable bytes there,
    // untouched until the copy is done (C API contract).
    Some(f(unsafe {
        std::slice::from_raw_parts(at.0 as *const u8, len)
    }))
}

/// Runs `f` on `len` writable bytes of the caller's host memory at `at`;
/// `None` for null (with len > 0).
pub(crate) fn with_host_mut<R>(
    at: HostAddr,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> R,
) -> Option<R> {
    if len == 0 {
        return Some(f(&mut []));
    }
    if at.0 == 0 {
        return None;
    }
    // SAFETY: non-null; the caller promises len writable bytes there that
    // nobody else touches until the copy is done (C API contract).
    Some(f(unsafe {
        std::slice::from_raw_parts_mut(at.0 as *mut u8, len)
    }))
}

/// Writes `data` to the caller's host memory at `at`; `false` for null.
pub(crate) fn host_write(at: HostAddr, data: &[u8]) -> bool {
    with_host_mut(at, data.len(), |d| d.copy_from_slice(data)).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_buf_is_zeroed_aligned_and_bounded() {
        let b = RawBuf::zeroed(100).unwrap();
        assert_eq!(b.addr() % ALIGN, 0);
        assert_eq!(b.bytes(0, 100).unwrap(), &[0u8; 100][..]);
        b.bytes_mut(10, 2).unwrap().copy_from_slice(&[7, 8]);
        assert_eq!(b.bytes(9, 4).unwrap(), &[0, 7, 8, 0]);
        assert!(b.bytes(99, 2).is_none());
        assert!(b.bytes_mut(usize::MAX, 2).is_none());
    }

    #[test]
    fn null_pointers_are_none_not_crashes() {
        assert!(!write::<u32>(std::ptr::null_mut(), 1));
        assert_eq!(read_array::<u64>(std::ptr::null(), 2), None);
        assert_eq!(read_array::<u64>(std::ptr::null(), 0), Some(vec![]));
        assert_eq!(string(std::ptr::null()), None);
        assert!(!write_string(std::ptr::null_mut(), "x", 8));
        assert!(host_read(HostAddr(0), 4).is_none());
    }

    #[test]
    fn strings_are_truncated_to_the_callers_room() {
        let mut buf = [1 as c_char; 4];
        assert!(write_string(buf.as_mut_ptr(), "abcdef", 4));
        assert_eq!(string(buf.as_ptr()).unwrap(), "abc");
        let field = [b'h' as c_char, b'i' as c_char];
        assert_eq!(fixed_string(field.as_ptr(), 2).unwrap(), "hi");
    }
}

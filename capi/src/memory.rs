//! Device memory on the host (`aclrtMalloc`, `aclrtMallocHost`, ...):
//! every allocation is registered by address, so a pointer an op or a
//! copy is given is found (with its bounds) or refused with an error
//! code, and a wrong free is `ACL_ERROR_RT_MEMORY_FREE`, not a crash.
//!
//! An op takes [`Span`]s, which hold their allocation (`Arc`): memory
//! freed while an op is still queued lives until the op is done.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::boundary::RawBuf;

/// Which call made an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `aclrtMalloc`: device memory (host memory here).
    Device,
    /// `aclrtMallocHost`: page-locked host memory on a real system.
    Host,
}

/// One allocation.
pub(crate) struct Alloc {
    buf: RawBuf,
    kind: Kind,
}

/// Bytes `[off, off + len)` of one allocation.
#[derive(Clone)]
pub(crate) struct Span {
    alloc: Option<Arc<Alloc>>,
    off: usize,
    len: usize,
}

impl Span {
    /// The empty span (a zero-length buffer, whatever its pointer).
    pub(crate) fn empty() -> Span {
        Span {
            alloc: None,
            off: 0,
            len: 0,
        }
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.alloc {
            Some(a) => a.buf.bytes(self.off, self.len).unwrap_or(&[]),
            None => &[],
        }
    }

    /// The bytes, writable (see `boundary::RawBuf::bytes_mut`).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn bytes_mut(&self) -> &mut [u8] {
        match &self.alloc {
            Some(a) => a.buf.bytes_mut(self.off, self.len).unwrap_or(&mut []),
            None => &mut [],
        }
    }

    /// The C address of the first byte (0 for the empty span).
    pub(crate) fn addr(&self) -> usize {
        self.alloc.as_ref().map_or(0, |a| a.buf.addr() + self.off)
    }

    /// True if both spans share a byte.
    pub(crate) fn overlaps(&self, other: &Span) -> bool {
        let (a, b) = (self.addr(), other.addr());
        self.len > 0 && other.len > 0 && a < b + other.len && b < a + self.len
    }
}

/// Why a pointer was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MemError {
    /// Null with a non-zero length.
    Null,
    /// Not inside any allocation of this library.
    Unknown(usize),
    /// Inside one, but the length runs past its end.
    TooShort {
        addr: usize,
        len: usize,
        room: usize,
    },
}

impl std::fmt::Display for MemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemError::Null => f.write_str("is NULL"),
            MemError::Unknown(a) => write!(
                f,
                "{a:#x} is not memory from aclrtMalloc or aclrtMallocHost (or was freed)"
            ),
            MemError::TooShort { addr, len, room } => write!(
                f,
                "{addr:#x} + {len} bytes runs past the end of its allocation ({room} bytes from there)"
            ),
        }
    }
}

#[derive(Default)]
struct Registry {
    by_addr: BTreeMap<usize, Arc<Alloc>>,
    device_bytes: usize,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default)
}

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    registry().lock().unwrap_or_else(|p| p.into_inner())
}

/// Allocates `len` zeroed bytes; `None` if the allocator refuses. Device
/// memory counts against `limit` bytes (`None`: past the limit).
pub(crate) fn alloc(len: usize, kind: Kind, limit: usize) -> Option<usize> {
    let mut r = lock();
    if kind == Kind::Device && r.device_bytes.saturating_add(len) > limit {
        return None;
    }
    let buf = RawBuf::zeroed(len)?;
    let addr = buf.addr();
    if kind == Kind::Device {
        r.device_bytes += buf.len();
    }
    r.by_addr.insert(addr, Arc::new(Alloc { buf, kind }));
    Some(addr)
}

/// Frees the allocation starting at `addr` made by `kind`'s call; `Err`
/// naming what `addr` is otherwise.
pub(crate) fn free(addr: usize, kind: Kind) -> Result<(), String> {
    let mut r = lock();
    match r.by_addr.get(&addr) {
        Some(a) if a.kind == kind => {}
        Some(a) => {
            return Err(format!(
                "{addr:#x} was allocated by {}, not {}",
                name(a.kind),
                name(kind)
            ))
        }
        None => {
            return Err(format!(
                "{addr:#x} is not the start of an allocation of {} (never allocated, freed already, or inside one)",
                name(kind)
            ))
        }
    }
    let a = r.by_addr.remove(&addr).map(|a| a.buf.len()).unwrap_or(0);
    if kind == Kind::Device {
        r.device_bytes -= a;
    }
    Ok(())
}

fn name(k: Kind) -> &'static str {
    match k {
        Kind::Device => "aclrtMalloc",
        Kind::Host => "aclrtMallocHost",
    }
}

/// The span of `len` bytes at `addr`: empty for `len == 0` (any pointer),
/// else inside one allocation.
pub(crate) fn span(addr: usize, len: usize) -> Result<Span, MemError> {
    if len == 0 {
        return Ok(Span::empty());
    }
    if addr == 0 {
        return Err(MemError::Null);
    }
    find(addr)
        .ok_or(MemError::Unknown(addr))
        .and_then(|(a, off)| {
            let room = a.buf.len() - off;
            if len > room {
                return Err(MemError::TooShort { addr, len, room });
            }
            Ok(Span {
                alloc: Some(a),
                off,
                len,
            })
        })
}

/// True if `addr` is inside an allocation of this library.
pub(crate) fn is_ours(addr: usize) -> bool {
    find(addr).is_some()
}

fn find(addr: usize) -> Option<(Arc<Alloc>, usize)> {
    let r = lock();
    let (&base, a) = r.by_addr.range(..=addr).next_back()?;
    let off = addr - base;
    (off < a.buf.len()).then(|| (Arc::clone(a), off))
}

/// Bytes of device memory allocated now.
pub(crate) fn device_bytes() -> usize {
    lock().device_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_inside_an_allocation_is_found_with_its_bounds() {
        let a = alloc(256, Kind::Device, usize::MAX).unwrap();
        let s = span(a + 16, 32).unwrap();
        assert_eq!((s.addr(), s.bytes().len()), (a + 16, 32));
        assert_eq!(
            span(a + 250, 8).err(),
            Some(MemError::TooShort {
                addr: a + 250,
                len: 8,
                room: 6
            })
        );
        assert_eq!(span(0, 8).err(), Some(MemError::Null));
        assert!(span(0, 0).unwrap().bytes().is_empty());
        free(a, Kind::Device).unwrap();
        assert_eq!(span(a, 8).err(), Some(MemError::Unknown(a)));
    }

    #[test]
    fn a_wrong_free_is_an_error_and_the_memory_stays() {
        let a = alloc(64, Kind::Host, usize::MAX).unwrap();
        assert!(free(a, Kind::Device)
            .unwrap_err()
            .contains("aclrtMallocHost"));
        assert!(free(a + 1, Kind::Host).is_err());
        assert!(is_ours(a));
        free(a, Kind::Host).unwrap();
        assert!(free(a, Kind::Host).is_err(), "a double free is refused");
    }

    #[test]
    fn memory_freed_under_a_queued_op_lives_until_the_op_drops_it() {
        let a = alloc(64, Kind::Device, usize::MAX).unwrap();
        let s = span(a, 64).unwrap();
        free(a, Kind::Device).unwrap();
        s.bytes_mut()[0] = 9;
        assert_eq!(s.bytes()[0], 9);
    }

    #[test]
    fn device_memory_past_the_limit_is_refused() {
        assert!(alloc(1 << 20, Kind::Device, 1 << 10).is_none());
    }

    #[test]
    fn overlap_is_any_shared_byte() {
        let a = alloc(64, Kind::Device, usize::MAX).unwrap();
        let x = span(a, 16).unwrap();
        assert!(x.overlaps(&span(a + 15, 4).unwrap()));
        assert!(!x.overlaps(&span(a + 16, 4).unwrap()));
        assert!(!x.overlaps(&Span::empty()));
        free(a, Kind::Device).unwrap();
    }
}

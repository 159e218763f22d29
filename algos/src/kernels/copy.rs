//! Byte copies that avoid a slow case of `rep movsb` on AMD Zen CPUs.
//!
//! glibc's `memcpy` (2.36 here) copies 2–3 KiB and more with `rep movsb`,
//! and so does the Linux kernel for `process_vm_readv` and socket reads.
//! On AMD EPYC (Zen 3, the project's VM) that instruction is 4–25× slower when the
//! destination lies 1–31 bytes past the source modulo 4096 (the pages
//! alias): measured on 64 KiB copies, `memcpy` 1.8–2.2 GB/s at distances
//! 1–31 against 27–45 GB/s at 0 and 32–4095; `process_vm_readv` of 128
//! KiB–1 MiB 1.5–2.0 GB/s against 7.6–9.6. glibc's bug 30994 describes
//! it on Zen 3/4. Such distances are common: a page-aligned buffer and a
//! large `malloc` block (16 bytes into its page) are 16 bytes apart.
//!
//! [`copy`] keeps `memcpy` for every other distance and splits an aliased
//! copy into [`PIECE`]-byte calls, which glibc copies with vector loads
//! and stores (37–39 GB/s at distance 16). [`aliased`] lets a caller that
//! copies through the kernel pick another destination instead.

/// Bytes per `memcpy` call of an aliased copy: below glibc's `rep movsb`
/// threshold on this CPU (2,112 bytes still took the vector loop in the
/// measurement above, 3,072 did not).
pub const PIECE: usize = 2048;

/// Bytes of the page whose offsets the slow case compares.
pub const PAGE: usize = 4096;

/// Distances (destination − source, modulo [`PAGE`]) treated as aliased: the
/// slow ones measured (1–31; 32–63 ran at 0.7–0.9× of distance 0, not
/// worth a second copy on the cross-memory path).
const ALIASED: std::ops::Range<usize> = 1..32;

/// True if a copy of `len` bytes from address `src` to address `dst` hits
/// the slow `rep movsb` case (see the module docs).
#[must_use]
pub fn aliased(dst: usize, src: usize, len: usize) -> bool {
    len > PIECE && ALIASED.contains(&(dst.wrapping_sub(src) % PAGE))
}

/// `dst.copy_from_slice(src)`, in [`PIECE`]-byte calls when the two are
/// [`aliased`].
///
/// # Panics
/// If the lengths differ, as `copy_from_slice` does (callers check them).
pub fn copy(dst: &mut [u8], src: &[u8]) {
    if !aliased(dst.as_ptr() as usize, src.as_ptr() as usize, src.len()) {
        dst.copy_from_slice(src);
        return;
    }
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of unequal lengths"
    );
    for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
        // Opaque to the optimiser, which would otherwise merge the calls
        // back into one `memcpy` of the whole length.
        std::hint::black_box(d).copy_from_slice(s);
    }
}

/// `dst.extend_from_slice(src)`, in [`PIECE`]-byte calls when the new
/// bytes' place and `src` are [`aliased`].
pub fn extend(dst: &mut Vec<u8>, src: &[u8]) {
    dst.reserve(src.len());
    let at = dst.len();
    let place = dst.as_ptr() as usize + at;
    if !aliased(place, src.as_ptr() as usize, src.len()) {
        dst.extend_from_slice(src);
        return;
    }
    // Within the reserved capacity: the buffer does not move.
    dst.resize(at + src.len(), 0);
    copy(&mut dst[at..], src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliased_distances_are_the_slow_ones() {
        assert!(aliased(4096 + 16, 4096, 4096));
        assert!(aliased(16, 8192, 4096), "modulo the page");
        assert!(!aliased(4096, 4096, 1 << 20), "same offset");
        assert!(aliased(4096 + 31, 4096, 1 << 20));
        assert!(!aliased(4096 + 32, 4096, 1 << 20));
        assert!(
            !aliased(4096, 4096 + 16, 1 << 20),
            "destination before the source"
        );
        assert!(
            !aliased(4096 + 16, 4096, PIECE),
            "short copies take no rep movsb"
        );
    }

    #[test]
    fn every_distance_and_length_copies_every_byte() {
        let src: Vec<u8> = (0..3 * 4096 + 200).map(|i| (i * 7 % 251) as u8).collect();
        let mut big = vec![0u8; src.len() + 8192];
        for distance in [0usize, 1, 16, 31, 63, 64, 100, 2048] {
            for len in [0, 1, PIECE, PIECE + 1, 3 * PIECE + 5, src.len() - 100] {
                let s = &src[100..100 + len];
                let base = big.as_ptr() as usize;
                let shift = (s.as_ptr() as usize + distance).wrapping_sub(base) % 4096;
                big.fill(0);
                let d = &mut big[shift..shift + len];
                let expect = len > PIECE && (1..32).contains(&distance);
                assert_eq!(
                    aliased(d.as_ptr() as usize, s.as_ptr() as usize, len),
                    expect
                );
                copy(d, s);
                assert_eq!(
                    &big[shift..shift + len],
                    s,
                    "distance {distance}, len {len}"
                );
                assert!(big[..shift].iter().all(|&b| b == 0), "nothing before");
                assert!(big[shift + len..].iter().all(|&b| b == 0), "nothing after");
            }
        }
    }

    #[test]
    fn extend_appends_at_every_distance() {
        let src: Vec<u8> = (0..3 * 4096).map(|i| (i * 5 % 253) as u8).collect();
        for distance in [0usize, 1, 16, 31, 32, 100] {
            let mut v: Vec<u8> = Vec::with_capacity(src.len() + 8192);
            let base = v.as_ptr() as usize;
            let head = (src.as_ptr() as usize + distance).wrapping_sub(base) % 4096;
            v.resize(head, 9);
            let place = v.as_ptr() as usize + head;
            assert_eq!(
                aliased(place, src.as_ptr() as usize, src.len()),
                (1..32).contains(&distance)
            );
            extend(&mut v, &src);
            assert!(v[..head].iter().all(|&b| b == 9), "the old bytes stay");
            assert_eq!(&v[head..], &src[..], "distance {distance}");
        }
    }
}

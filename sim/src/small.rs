//! [`SmallList`]: a list of `Copy` values stored inline while short.
//!
//! Per-link flow lists, per-rank completion lists ([`IdList`]), per-rank
//! unmatched posts and per-rank channels hold one to three entries almost
//! always; keeping them inside their owner's struct (the rank's record, a
//! link's state) saves a cache miss on a separate heap buffer at every
//! flow start and end, post, match and completion, and the buffer's
//! allocation (its header and capacity slack are most of a rank's share
//! of memory at scale). Element order is exactly that of a `Vec` under the
//! same calls (the max-min solver's float sums depend on iteration order,
//! so the simulated times do too; hang reports list posts in this order).
//!
//! [`Chunks`]: a growable array in fixed chunks, for tables that grow one
//! element at a time during a run to a size not known in advance (the
//! links that routes use): growing never moves or copies the elements
//! already there, and it holds less than one chunk of slack (a `Vec` holds
//! up to half its capacity idle and, while it grows, its old buffer and
//! its new one twice as large at once).

/// A `Vec<T>` that keeps up to `N` elements inline.
#[derive(Debug, Clone)]
pub(crate) struct SmallList<T, const N: usize> {
    len: u32,
    inline: [T; N],
    /// All elements once there are more than `N` (boxed: one pointer
    /// inline, since most lists never spill).
    #[allow(clippy::box_collection)] // 8 bytes in the owner instead of 24
    spill: Option<Box<Vec<T>>>,
}

/// Up to 3 ids inline, in 24 bytes.
pub(crate) type IdList = SmallList<u32, 3>;

impl<T: Copy + Default, const N: usize> Default for SmallList<T, N> {
    fn default() -> Self {
        SmallList {
            len: 0,
            inline: [T::default(); N],
            spill: None,
        }
    }
}

impl<T: Copy + Default, const N: usize> SmallList<T, N> {
    #[inline]
    pub(crate) fn as_slice(&self) -> &[T] {
        if self.len as usize <= N {
            &self.inline[..self.len as usize]
        } else {
            self.spill.as_deref().map_or(&[], Vec::as_slice)
        }
    }

    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        if self.len as usize <= N {
            &mut self.inline[..self.len as usize]
        } else {
            self.spill.as_deref_mut().map_or(&mut [], Vec::as_mut_slice)
        }
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.as_slice().iter()
    }

    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The spill buffer holding a copy of the inline elements, for a list
    /// of `N` growing past them.
    fn spill_all(&mut self) -> &mut Vec<T> {
        let spill = self.spill.get_or_insert_with(Box::default);
        spill.clear();
        spill.extend_from_slice(&self.inline);
        spill
    }

    /// The spill buffer of a list longer than `N`.
    fn spilled(&mut self) -> &mut Vec<T> {
        self.spill
            .as_mut()
            .expect("a list longer than N has spilled")
    }

    /// Back inline once a spilled list is down to `N` elements.
    fn unspill(&mut self) {
        if self.len as usize == N {
            if let Some(spill) = self.spill.as_mut() {
                self.inline.copy_from_slice(spill);
                spill.clear();
            }
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, x: T) {
        let n = self.len as usize;
        if n < N {
            self.inline[n] = x;
            self.len += 1;
        } else {
            self.push_spilled(x);
        }
    }

    /// [`Self::push`] past the inline elements, out of line: inlined, the
    /// spill path kept `push` itself out of line at every flow start,
    /// post and completion.
    #[cold]
    #[inline(never)]
    fn push_spilled(&mut self, x: T) {
        if self.len as usize == N {
            self.spill_all().push(x);
        } else {
            self.spilled().push(x);
        }
        self.len += 1;
    }

    /// Inserts `x` at `i`, shifting the later elements right (`Vec::insert`).
    pub(crate) fn insert(&mut self, i: usize, x: T) {
        let n = self.len as usize;
        assert!(i <= n, "insert index {i} past length {n}");
        if n < N {
            self.inline.copy_within(i..n, i + 1);
            self.inline[i] = x;
        } else if n == N {
            self.spill_all().insert(i, x);
        } else {
            self.spilled().insert(i, x);
        }
        self.len += 1;
    }

    /// Removes element `i`, keeping the order of the others (`Vec::remove`).
    #[inline]
    pub(crate) fn remove(&mut self, i: usize) -> T {
        let n = self.len as usize;
        assert!(i < n, "remove index {i} out of {n}");
        if n <= N {
            let x = self.inline[i];
            self.inline.copy_within(i + 1..n, i);
            self.len -= 1;
            x
        } else {
            self.remove_spilled(i)
        }
    }

    /// [`Self::remove`] of a spilled list, out of line.
    #[cold]
    #[inline(never)]
    fn remove_spilled(&mut self, i: usize) -> T {
        let x = self.spilled().remove(i);
        self.len -= 1;
        self.unspill();
        x
    }

    /// Removes element `i`, moving the last one into its place.
    #[inline]
    pub(crate) fn swap_remove(&mut self, i: usize) -> T {
        let n = self.len as usize;
        assert!(i < n, "swap_remove index {i} out of {n}");
        if n <= N {
            let x = self.inline[i];
            self.inline[i] = self.inline[n - 1];
            self.len -= 1;
            x
        } else {
            self.swap_remove_spilled(i)
        }
    }

    /// [`Self::swap_remove`] of a spilled list, out of line.
    #[cold]
    #[inline(never)]
    fn swap_remove_spilled(&mut self, i: usize) -> T {
        let x = self.spilled().swap_remove(i);
        self.len -= 1;
        self.unspill();
        x
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<T> {
        let n = self.len as usize;
        if n == 0 {
            return None;
        }
        Some(self.swap_remove(n - 1))
    }

    /// Keeps the elements for which `keep` is true, in order (`Vec::retain`).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let n = self.len as usize;
        if n <= N {
            let mut k = 0;
            for i in 0..n {
                let x = self.inline[i];
                if keep(&x) {
                    self.inline[k] = x;
                    k += 1;
                }
            }
            self.len = k as u32;
            return;
        }
        let Some(spill) = self.spill.as_mut() else {
            unreachable!("a list longer than N has spilled")
        };
        spill.retain(keep);
        let k = spill.len();
        if k <= N {
            self.inline[..k].copy_from_slice(spill);
            spill.clear();
        }
        self.len = k as u32;
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
        if let Some(s) = self.spill.as_mut() {
            s.clear();
        }
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| {
            s.capacity() * std::mem::size_of::<T>() + std::mem::size_of::<Vec<T>>()
        })
    }
}

/// Elements per chunk of a [`Chunks`] (a power of two: an index splits
/// with a shift and a mask).
const CHUNK: usize = 64;

/// A `Vec<T>` without reallocation: elements live in chunks of [`CHUNK`],
/// each allocated once, whole, when the first of its elements is pushed
/// (its unused tail holds `T::default()`).
#[derive(Debug)]
pub(crate) struct Chunks<T> {
    /// Fixed-size chunks: an index's position inside one needs no bounds
    /// check.
    chunks: Vec<Box<[T; CHUNK]>>,
    len: usize,
}

impl<T> Default for Chunks<T> {
    fn default() -> Self {
        Chunks {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Default> Chunks<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, x: T) {
        let i = self.len % CHUNK;
        if i == 0 {
            self.chunks
                .push(Box::new(std::array::from_fn(|_| T::default())));
        }
        self.chunks.last_mut().expect("a chunk with room exists")[i] = x;
        self.len += 1;
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter()).take(self.len)
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let len = self.len;
        self.chunks.iter_mut().flat_map(|c| c.iter_mut()).take(len)
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Box<[T; CHUNK]>>()
            + self.chunks.len() * std::mem::size_of::<[T; CHUNK]>()
    }
}

impl<T> std::ops::Index<usize> for Chunks<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl<T> std::ops::IndexMut<usize> for Chunks<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Indexing, iteration and length as a `Vec`'s, across chunk
    /// boundaries (iteration stops at the length, not the chunk's end).
    #[test]
    fn chunks_behave_like_a_vec_and_never_reallocate() {
        let mut c: Chunks<u64> = Chunks::default();
        let mut v: Vec<u64> = Vec::new();
        for i in 0..(3 * CHUNK as u64 + 5) {
            c.push(i * 3);
            v.push(i * 3);
            assert_eq!(c.len(), v.len());
            assert_eq!(c.iter().count(), v.len());
        }
        assert_eq!(c.chunks.len(), 4);
        for (i, x) in v.iter().enumerate() {
            assert_eq!(c[i], *x);
        }
        c[CHUNK + 1] += 1;
        v[CHUNK + 1] += 1;
        for x in c.iter_mut() {
            *x += 2;
        }
        let got: Vec<u64> = c.iter().copied().collect();
        let want: Vec<u64> = v.iter().map(|x| x + 2).collect();
        assert_eq!(got, want);
        assert_eq!(c.heap_bytes(), c.chunks.capacity() * 8 + 4 * CHUNK * 8);
    }

    /// Same contents as a `Vec` under a mixed sequence crossing the inline size both ways.
    #[test]
    fn behaves_like_a_vec() {
        let mut a = IdList::default();
        let mut v: Vec<u32> = Vec::new();
        let mut x = 7u32;
        for i in 0..400u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            match (x >> 16) % 3 {
                0 | 1 if v.len() < 9 => {
                    a.push(i);
                    v.push(i);
                }
                _ if !v.is_empty() => {
                    let k = (x as usize >> 4) % v.len();
                    assert_eq!(a.swap_remove(k), v.swap_remove(k));
                }
                _ => assert_eq!(a.pop(), v.pop()),
            }
            assert_eq!(a.as_slice(), &v[..], "after op {i}");
            assert_eq!(a.len(), v.len());
        }
    }

    /// The ordered operations (insert, remove, retain) too, on a list of 2
    /// inline, against a `Vec`.
    #[test]
    fn ordered_operations_behave_like_a_vec() {
        let mut a: SmallList<u64, 2> = SmallList::default();
        let mut v: Vec<u64> = Vec::new();
        let mut x = 11u64;
        for i in 0..2000u64 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let r = (x >> 33) as usize;
            match r % 7 {
                0 | 1 if v.len() < 7 => {
                    let at = r / 7 % (v.len() + 1);
                    a.insert(at, i);
                    v.insert(at, i);
                }
                2 if v.len() < 7 => {
                    a.push(i);
                    v.push(i);
                }
                3 | 4 if !v.is_empty() => {
                    let at = r / 7 % v.len();
                    assert_eq!(a.remove(at), v.remove(at));
                }
                5 => {
                    let m = (r / 7 % 3 + 2) as u64;
                    a.retain(|e| e % m != 0);
                    v.retain(|e| e % m != 0);
                }
                6 if !v.is_empty() => {
                    let at = r / 7 % v.len();
                    a.as_mut_slice()[at] += 1;
                    v[at] += 1;
                }
                _ => a.clear_and(&mut v),
            }
            assert_eq!(a.as_slice(), &v[..], "after op {i}");
            assert_eq!(a.iter().count(), v.len());
        }
    }

    impl SmallList<u64, 2> {
        fn clear_and(&mut self, v: &mut Vec<u64>) {
            self.clear();
            v.clear();
        }
    }
}

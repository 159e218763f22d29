//! [`IdList`]: a list of `u32` ids stored inline while short.
//!
//! Per-link flow lists and per-rank completion lists hold one or two ids
//! almost always; keeping them inside their owner's struct saves a cache
//! miss on a separate heap buffer at every flow start, end and completion.
//! Element order is exactly that of a `Vec` under the same `push`,
//! `swap_remove` and `pop` calls (the max-min solver's float sums depend on
//! iteration order, so the simulated times do too).

/// Ids kept inline.
const INLINE: usize = 3;

/// A `Vec<u32>` that keeps up to 3 elements inline, in 24 bytes.
#[derive(Debug, Default, Clone)]
pub(crate) struct IdList {
    len: u32,
    inline: [u32; INLINE],
    /// All elements once there are more than `INLINE` (boxed: one pointer
    /// inline, since most lists never spill).
    #[allow(clippy::box_collection)] // 8 bytes in the owner instead of 24
    spill: Option<Box<Vec<u32>>>,
}

impl IdList {
    pub(crate) fn as_slice(&self) -> &[u32] {
        if self.len as usize <= INLINE {
            &self.inline[..self.len as usize]
        } else {
            self.spill.as_deref().map_or(&[], Vec::as_slice)
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn push(&mut self, x: u32) {
        let n = self.len as usize;
        if n < INLINE {
            self.inline[n] = x;
        } else {
            let spill = self.spill.get_or_insert_with(Box::default);
            if n == INLINE {
                spill.clear();
                spill.extend_from_slice(&self.inline);
            }
            spill.push(x);
        }
        self.len += 1;
    }

    /// Removes element `i`, moving the last one into its place.
    pub(crate) fn swap_remove(&mut self, i: usize) -> u32 {
        let n = self.len as usize;
        assert!(i < n, "swap_remove index {i} out of {n}");
        let x;
        if n <= INLINE {
            x = self.inline[i];
            self.inline[i] = self.inline[n - 1];
        } else {
            let spill = self
                .spill
                .as_mut()
                .expect("a list longer than INLINE has spilled");
            x = spill.swap_remove(i);
            if n - 1 == INLINE {
                self.inline.copy_from_slice(spill);
            }
        }
        self.len -= 1;
        x
    }

    pub(crate) fn pop(&mut self) -> Option<u32> {
        let n = self.len as usize;
        if n == 0 {
            return None;
        }
        Some(self.swap_remove(n - 1))
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
        if let Some(s) = self.spill.as_mut() {
            s.clear();
        }
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.spill
            .as_ref()
            .map_or(0, |s| s.capacity() * 4 + std::mem::size_of::<Vec<u32>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

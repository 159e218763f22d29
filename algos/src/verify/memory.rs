//! The memory model of the race check and the symbolic run: where a rank's
//! buffers lie in its memories, sets of ranks, and the contents of byte
//! ranges (which ranks' input, from which offset, divided or not).

use std::collections::BTreeMap;
use std::rc::Rc;

use crate::schedule::{BufKind, Rank, Region};

/// Maps a rank's buffers into its memories: 0 = input (and output when in
/// place), 1 = output, 2 = scratch.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placement {
    pub(super) alias: Option<crate::collective::Alias>,
}

impl Placement {
    pub(super) fn locate(&self, r: Region) -> (usize, u64) {
        match (r.buf, self.alias) {
            (BufKind::Scratch, _) => (2, r.offset),
            (BufKind::Input, Some(a)) => (0, a.input_at + r.offset),
            (BufKind::Output, Some(a)) => (0, a.output_at + r.offset),
            (BufKind::Input, None) => (0, r.offset),
            (BufKind::Output, None) => (1, r.offset),
        }
    }
}

/// A set of ranks as sorted, disjoint, non-adjacent half-open ranges.
pub(super) type RankSet = Rc<[(u32, u32)]>;

pub(super) fn set_of(r: Rank) -> RankSet {
    Rc::from(vec![(r, r + 1)])
}

pub(super) fn set_all(p: u32) -> RankSet {
    Rc::from(vec![(0, p)])
}

/// Union of disjoint sets, or the first rank in both.
pub(super) fn union(a: &[(u32, u32)], b: &[(u32, u32)]) -> Result<RankSet, Rank> {
    let mut all: Vec<(u32, u32)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s < last.1 => return Err(s),
            Some(last) if s == last.1 => last.1 = e,
            _ => out.push((s, e)),
        }
    }
    Ok(out.into())
}

/// Union allowing overlap (for barrier knowledge).
pub(super) fn union_any(a: &[(u32, u32)], b: &[(u32, u32)]) -> RankSet {
    let mut all: Vec<(u32, u32)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out.into()
}

pub(super) fn fmt_set(s: &[(u32, u32)]) -> String {
    let parts: Vec<String> = s
        .iter()
        .map(|&(a, b)| {
            if b == a + 1 {
                a.to_string()
            } else {
                format!("{a}..{b}")
            }
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// Contents of a byte range.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Val {
    /// Never written.
    Undef,
    /// The combination of `ranks`' input bytes starting at input byte `off`
    /// (all contributions share the offset), divided once if `div`.
    Data { ranks: RankSet, off: u64, div: bool },
}

impl Val {
    pub(super) fn shift(&self, d: u64) -> Val {
        match self {
            Val::Undef => Val::Undef,
            Val::Data { ranks, off, div } => Val::Data {
                ranks: ranks.clone(),
                off: off + d,
                div: *div,
            },
        }
    }

    /// True if `next` continues `self` (of length `len`) seamlessly.
    pub(super) fn continued_by(&self, len: u64, next: &Val) -> bool {
        match (self, next) {
            (Val::Undef, Val::Undef) => true,
            (
                Val::Data { ranks, off, div },
                Val::Data {
                    ranks: r2,
                    off: o2,
                    div: d2,
                },
            ) => ranks == r2 && *o2 == off + len && div == d2,
            _ => false,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Val::Undef => "never written".into(),
            Val::Data { ranks, off, div } => format!(
                "{}input of ranks {} from input byte {off}",
                if *div { "avg of " } else { "" },
                fmt_set(ranks)
            ),
        }
    }
}

/// A memory as a tiling of byte ranges with contents.
#[derive(Debug, Default)]
pub(super) struct Mem {
    map: BTreeMap<u64, (u64, Val)>,
}

impl Mem {
    pub(super) fn new(size: u64) -> Mem {
        let mut map = BTreeMap::new();
        if size > 0 {
            map.insert(0, (size, Val::Undef));
        }
        Mem { map }
    }

    pub(super) fn split(&mut self, at: u64) {
        let Some((&start, (len, val))) = self.map.range(..=at).next_back() else {
            return;
        };
        if start == at || start + len <= at {
            return;
        }
        let (len, val) = (*len, val.clone());
        self.map.insert(start, (at - start, val.clone()));
        self.map
            .insert(at, (start + len - at, val.shift(at - start)));
    }

    pub(super) fn read(&self, off: u64, len: u64) -> Vec<(u64, Val)> {
        let end = off + len;
        if len == 0 {
            return vec![];
        }
        let first = self.map.range(..=off).next_back().map_or(0, |(k, _)| *k);
        self.map
            .range(first..end)
            .filter_map(|(&s, (l, v))| {
                let (a, b) = (s.max(off), (s + l).min(end));
                (a < b).then(|| (b - a, v.shift(a - s)))
            })
            .collect()
    }

    pub(super) fn write(&mut self, off: u64, pieces: Vec<(u64, Val)>) {
        let len: u64 = pieces.iter().map(|p| p.0).sum();
        if len == 0 {
            return;
        }
        self.split(off);
        self.split(off + len);
        let keys: Vec<u64> = self.map.range(off..off + len).map(|(k, _)| *k).collect();
        for k in keys {
            self.map.remove(&k);
        }
        let mut at = off;
        for (l, v) in pieces {
            self.map.insert(at, (l, v));
            at += l;
        }
        // Coalesce the written range with itself and its neighbours.
        let from = self.map.range(..off).next_back().map_or(off, |(k, _)| *k);
        let keys: Vec<u64> = self.map.range(from..=off + len).map(|(k, _)| *k).collect();
        let mut cur = keys[0];
        for &k in &keys[1..] {
            let (clen, cval) = self.map[&cur].clone();
            let (nlen, nval) = self.map[&k].clone();
            if cur + clen == k && cval.continued_by(clen, &nval) {
                self.map.remove(&k);
                self.map.insert(cur, (clen + nlen, cval));
            } else {
                cur = k;
            }
        }
    }
}

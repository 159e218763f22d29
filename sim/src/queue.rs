//! The event queue: events ordered by `(time, seq)`.
//!
//! `seq` is the push order, so events at the same virtual time pop in the
//! order they were scheduled: the order never depends on heap internals,
//! addresses or hashing.
//!
//! Stored as a **radix heap** (Ahuja, Mehlhorn, Orlin & Tarjan 1990), which
//! fits a monotone integer clock: an event of time `t` waits in bucket
//! `bit length of (t xor last)`, where `last` is the time of the latest pop
//! (never larger than any pending time). A push appends to a bucket; a pop
//! takes bucket 0 (time `last`) in order, and when it is empty moves the
//! lowest non-empty bucket down around its minimum. Events of one time are
//! always in the same bucket and move together, so their push order is
//! kept. Appends and in-order scans touch memory sequentially: this
//! replaced a `BTreeMap` of per-instant FIFOs (itself a replacement of a
//! binary heap), whose node and FIFO loads were a quarter of the run time
//! at 4,096 ranks.

/// What happens when an event fires. Ids index the engine's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// A matched message's overhead α has elapsed: its flow enters the fabric.
    FlowStart { msg: u32 },
    /// A flow's last byte left the sender (valid only if `version` is current).
    FlowEnd { flow: u32, version: u32 },
    /// A message without a flow (0 bytes, or to itself) finished sending.
    TxDone { msg: u32 },
    /// A message reached its receiver (after hop latencies and any reduce).
    Deliver { msg: u32 },
    /// A local step (copy, reduce, divide) of `rank` finished.
    LocalDone { rank: u32, step: u32 },
    /// A rank delayed by a hook may start its next op.
    Wake { rank: u32 },
    /// A timer set by a hook.
    Timer { id: u64 },
    /// `rank` started op `op` a timeout ago: stall if it is still in it.
    Timeout { rank: u32, op: u32 },
}

impl EventKind {
    /// A small stable code and two operands, for the trace hash.
    pub(crate) fn trace_words(&self) -> [u64; 3] {
        match *self {
            EventKind::FlowStart { msg } => [1, u64::from(msg), 0],
            EventKind::FlowEnd { flow, version } => [2, u64::from(flow), u64::from(version)],
            EventKind::Deliver { msg } => [3, u64::from(msg), 0],
            EventKind::LocalDone { rank, step } => [4, u64::from(rank), u64::from(step)],
            EventKind::Wake { rank } => [5, u64::from(rank), 0],
            EventKind::Timer { id } => [6, id, 0],
            EventKind::Timeout { rank, op } => [7, u64::from(rank), u64::from(op)],
            EventKind::TxDone { msg } => [8, u64::from(msg), 0],
        }
    }
}

/// Pending events, earliest `(time, seq)` first.
#[derive(Debug)]
pub(crate) struct EventQueue {
    /// Time of the latest pop (or promotion); every pending time is `>=`.
    last: u64,
    /// Bucket 0 holds events of time `last`, read from `cursor` on;
    /// bucket `i > 0` events whose time differs from `last` first in bit `i - 1`.
    buckets: Vec<Vec<(u64, EventKind)>>,
    /// Buffers of emptied buckets, handed to buckets that fill from empty.
    /// Events wander over ~20 buckets as `last` moves, and a bucket that
    /// kept its own buffer kept its high-water mark: at 512 ranks the
    /// buckets held ~500 B of capacity per rank for ~3 pending events.
    spare: Vec<Vec<(u64, EventKind)>>,
    cursor: usize,
    /// Earliest pending time, once `peek_time` computed it with bucket 0
    /// empty (kept exact by `push`; cleared by a pop).
    peeked: Option<u64>,
    len: usize,
    peak_len: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            last: 0,
            buckets: (0..=64).map(|_| Vec::new()).collect(),
            spare: Vec::new(),
            cursor: 0,
            peeked: None,
            len: 0,
            peak_len: 0,
        }
    }
}

/// Bucket of `time` relative to `last`.
fn bucket(time: u64, last: u64) -> usize {
    (64 - (time ^ last).leading_zeros()) as usize
}

impl EventQueue {
    /// Schedules `kind` at `time`, which must not be before the latest pop
    /// (a peek does not move that bound: the engine peeks, then schedules
    /// flow ends between now and the peeked time). A `time` of `u64::MAX`
    /// is "never" (a saturated sum of delays): the event is not queued, so
    /// nothing happens at a time that does not exist.
    pub(crate) fn push(&mut self, time: u64, kind: EventKind) {
        if time == u64::MAX {
            return;
        }
        debug_assert!(time >= self.last, "time never goes back");
        let time = time.max(self.last);
        if let Some(m) = self.peeked.as_mut() {
            *m = (*m).min(time);
        }
        self.bucket_mut(bucket(time, self.last)).push((time, kind));
        self.len += 1;
        self.peak_len = self.peak_len.max(self.len);
    }

    /// Bucket `b`, given a spare buffer if it has none.
    fn bucket_mut(&mut self, b: usize) -> &mut Vec<(u64, EventKind)> {
        if self.buckets[b].capacity() == 0 {
            if let Some(buf) = self.spare.pop() {
                self.buckets[b] = buf;
            }
        }
        &mut self.buckets[b]
    }

    /// Makes bucket 0 non-empty if any event is pending.
    fn promote(&mut self) -> bool {
        if self.cursor < self.buckets[0].len() {
            return true;
        }
        self.peeked = None;
        self.buckets[0].clear();
        self.cursor = 0;
        let Some(j) = (1..self.buckets.len()).find(|&j| !self.buckets[j].is_empty()) else {
            return false;
        };
        let moving = std::mem::take(&mut self.buckets[j]);
        let last = moving.iter().map(|e| e.0).min().expect("non-empty bucket");
        self.last = last;
        for &(t, k) in &moving {
            self.bucket_mut(bucket(t, last)).push((t, k));
        }
        // The emptied bucket's buffer goes to the next bucket that fills.
        let mut moving = moving;
        moving.clear();
        self.spare.push(moving);
        true
    }

    /// The earliest pending time, without moving the push bound.
    pub(crate) fn peek_time(&mut self) -> Option<u64> {
        if self.cursor < self.buckets[0].len() {
            return Some(self.last);
        }
        if self.peeked.is_none() {
            let j = (1..self.buckets.len()).find(|&j| !self.buckets[j].is_empty())?;
            self.peeked = self.buckets[j].iter().map(|e| e.0).min();
        }
        self.peeked
    }

    /// The earliest event. Inline while bucket 0 has events (about ten
    /// pops in eleven): the promotion, out of line, kept six registers'
    /// saves and restores on every pop.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<(u64, EventKind)> {
        if let Some(&e) = self.buckets[0].get(self.cursor) {
            self.cursor += 1;
            self.len -= 1;
            return Some(e);
        }
        self.pop_promoted()
    }

    /// [`Self::pop`] with bucket 0 drained.
    #[inline(never)]
    fn pop_promoted(&mut self) -> Option<(u64, EventKind)> {
        if !self.promote() {
            return None;
        }
        let e = self.buckets[0][self.cursor];
        self.cursor += 1;
        self.len -= 1;
        Some(e)
    }

    pub(crate) fn peak_len(&self) -> usize {
        self.peak_len
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.buckets
            .iter()
            .chain(&self.spare)
            .map(|b| b.capacity() * std::mem::size_of::<(u64, EventKind)>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_push_order() {
        let mut q = EventQueue::default();
        q.push(5, EventKind::Wake { rank: 0 });
        q.push(3, EventKind::Wake { rank: 1 });
        q.push(5, EventKind::Wake { rank: 2 });
        q.push(3, EventKind::Wake { rank: 3 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let ranks: Vec<u32> = order
            .iter()
            .map(|(_, k)| match k {
                EventKind::Wake { rank } => *rank,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(ranks, vec![1, 3, 0, 2]);
        assert_eq!(q.peak_len(), 4);
    }

    #[test]
    fn pushes_at_the_current_instant_keep_the_order() {
        let mut q = EventQueue::default();
        let w = |rank| EventKind::Wake { rank };
        q.push(10, w(0));
        q.push(10, w(1));
        q.push(40, w(2));
        assert_eq!(q.pop(), Some((10, w(0))));
        q.push(10, w(3)); // same instant: after 1
        q.push(12, w(4));
        q.push(40, w(5));
        q.push(11, w(6));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![
                (10, w(1)),
                (10, w(3)),
                (11, w(6)),
                (12, w(4)),
                (40, w(2)),
                (40, w(5))
            ]
        );
        assert_eq!(q.peek_time(), None);
        // A peek does not stop pushes between the last pop and the peeked time.
        q.push(100, w(7));
        assert_eq!(q.peek_time(), Some(100));
        q.push(50, w(8));
        assert_eq!(q.peek_time(), Some(50));
        assert_eq!(q.pop(), Some((50, w(8))));
        assert_eq!(q.pop(), Some((100, w(7))));
    }

    /// Against a sorted model: random monotone pushes interleaved with pops,
    /// many events per instant, times spanning many buckets.
    #[test]
    fn matches_a_sorted_model() {
        let mut q = EventQueue::default();
        let mut model: Vec<(u64, u64, u32)> = Vec::new(); // (time, seq, id)
        let (mut now, mut seq, mut x) = (0u64, 0u64, 99u64);
        for id in 0..5000u32 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let dt = match x >> 61 {
                0..=2 => 0,
                3..=5 => (x >> 20) % 16,
                6 => (x >> 20) % 100_000,
                _ => (x >> 20) % (1 << 40),
            };
            if x % 5 == 0 {
                model.sort_unstable();
                assert_eq!(q.peek_time(), model.first().map(|m| m.0));
            }
            q.push(now + dt, EventKind::Wake { rank: id });
            model.push((now + dt, seq, id));
            seq += 1;
            if (x >> 10) % 3 == 0 {
                model.sort_unstable();
                let (t, _, want) = model.remove(0);
                assert_eq!(q.pop(), Some((t, EventKind::Wake { rank: want })));
                now = t;
            }
        }
        model.sort_unstable();
        for (t, _, want) in model {
            assert_eq!(q.pop(), Some((t, EventKind::Wake { rank: want })));
        }
        assert_eq!(q.pop(), None);
    }
}

//! The event queue: events ordered by `(time, seq)`.
//!
//! `seq` is the push order, so events at the same virtual time pop in the
//! order they were scheduled: the order never depends on heap internals,
//! addresses or hashing. Stored as a `BTreeMap` from time to a FIFO of the
//! events at that time: collective schedules put thousands of ranks'
//! events on the same few instants, so the map stays small and a pop is
//! usually a `pop_front` (this replaced a binary heap that took 12% of the
//! run time at 512 ranks).

use std::collections::{BTreeMap, VecDeque};

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
///
/// The FIFO of the earliest instant is kept outside the map (`cur`): most
/// pops and many pushes touch only it, not the tree's nodes.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    /// Events of instant `cur_time`, the earliest pending (empty: none).
    cur: VecDeque<EventKind>,
    cur_time: u64,
    /// Events of later instants.
    by_time: BTreeMap<u64, VecDeque<EventKind>>,
    /// Empty FIFOs kept for reuse (no allocation per distinct time).
    pool: Vec<VecDeque<EventKind>>,
    len: usize,
    peak_len: usize,
}

impl EventQueue {
    pub(crate) fn push(&mut self, time: u64, kind: EventKind) {
        self.len += 1;
        self.peak_len = self.peak_len.max(self.len);
        if self.cur.is_empty() {
            // Nothing current: `time` becomes current unless the map
            // holds an instant at or before it.
            match self.by_time.first_key_value() {
                Some((&t, _)) if t <= time => {}
                _ => {
                    self.cur_time = time;
                    self.cur.push_back(kind);
                    return;
                }
            }
        } else if time == self.cur_time {
            self.cur.push_back(kind);
            return;
        } else if time < self.cur_time {
            // Earlier than the current instant: park the current FIFO.
            let cur = std::mem::replace(&mut self.cur, self.pool.pop().unwrap_or_default());
            self.by_time.insert(self.cur_time, cur);
            self.cur_time = time;
            self.cur.push_back(kind);
            return;
        }
        let pool = &mut self.pool;
        self.by_time
            .entry(time)
            .or_insert_with(|| pool.pop().unwrap_or_default())
            .push_back(kind);
    }

    /// Makes `cur` the earliest instant's FIFO if it is empty.
    fn promote(&mut self) {
        if self.cur.is_empty() {
            if let Some((t, q)) = self.by_time.pop_first() {
                let old = std::mem::replace(&mut self.cur, q);
                self.pool.push(old);
                self.cur_time = t;
            }
        }
    }

    pub(crate) fn peek_time(&mut self) -> Option<u64> {
        self.promote();
        (!self.cur.is_empty()).then_some(self.cur_time)
    }

    pub(crate) fn pop(&mut self) -> Option<(u64, EventKind)> {
        self.promote();
        let kind = self.cur.pop_front()?;
        self.len -= 1;
        Some((self.cur_time, kind))
    }

    pub(crate) fn peak_len(&self) -> usize {
        self.peak_len
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let fifo = |q: &VecDeque<EventKind>| q.capacity() * std::mem::size_of::<EventKind>();
        fifo(&self.cur)
            + self.by_time.values().map(fifo).sum::<usize>()
            + self.pool.iter().map(fifo).sum::<usize>()
            + self.by_time.len() * 64
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
    fn pushes_around_the_current_instant_keep_the_order() {
        let mut q = EventQueue::default();
        let w = |rank| EventKind::Wake { rank };
        q.push(10, w(0));
        q.push(10, w(1));
        assert_eq!(q.pop(), Some((10, w(0))));
        q.push(10, w(2)); // same instant: after 1
        q.push(4, w(3)); // earlier than the current instant
        q.push(7, w(4));
        q.push(4, w(5));
        q.push(12, w(6));
        assert_eq!(q.pop(), Some((4, w(3))));
        assert_eq!(q.pop(), Some((4, w(5))));
        q.push(7, w(7)); // current FIFO empty, map already holds 7
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(7, w(4)), (7, w(7)), (10, w(1)), (10, w(2)), (12, w(6))]
        );
        assert_eq!(q.peek_time(), None);
    }
}

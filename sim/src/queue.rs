//! The event queue: a binary heap ordered by `(time, seq)`.
//!
//! `seq` is a counter assigned at push time, so events at the same virtual
//! time pop in the order they were scheduled: the order never depends on
//! heap internals, addresses or hashing.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    time: u64,
    seq: u64,
    kind: EventKind,
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse to pop the earliest first.
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Pending events, earliest `(time, seq)` first.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Entry>,
    next_seq: u64,
    peak_len: usize,
}

impl EventQueue {
    pub(crate) fn push(&mut self, time: u64, kind: EventKind) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { time, seq, kind });
        self.peak_len = self.peak_len.max(self.heap.len());
    }

    pub(crate) fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.time)
    }

    pub(crate) fn pop(&mut self) -> Option<(u64, EventKind)> {
        self.heap.pop().map(|e| (e.time, e.kind))
    }

    pub(crate) fn peak_len(&self) -> usize {
        self.peak_len
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.heap.capacity() * std::mem::size_of::<Entry>()
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
}

//! `HcclGroupStart` / `HcclGroupEnd` and the point-to-point ops they
//! gather. Outside a group a send or receive is enqueued at once. Inside
//! one, this thread's sends and receives are held and enqueued at
//! `HcclGroupEnd` as one `HcclBatchSendRecv` per (communicator, stream),
//! so a group in which two ranks each receive before they send cannot
//! deadlock (NCCL's group semantics). Collectives are enqueued at once
//! even inside a group: each only enqueues work anyway.

use std::cell::RefCell;
use std::sync::Arc;

use hccl::comm::DataType;
use hccl::{Comm, CommError, P2pItem};

use crate::comms::{self, CommEntry};
use crate::memory::Span;
use crate::stream::Stream;

/// One send or receive.
pub(crate) struct P2pSpec {
    pub(crate) send: bool,
    pub(crate) buf: Span,
    pub(crate) count: u64,
    pub(crate) dtype: DataType,
    pub(crate) peer: u32,
}

struct Held {
    f: &'static str,
    comm: Arc<CommEntry>,
    stream: Arc<Stream>,
    items: Vec<P2pSpec>,
}

#[derive(Default)]
struct Group {
    depth: u32,
    held: Vec<Held>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// `HcclGroupStart`: groups nest.
pub(crate) fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// `HcclGroupEnd`: the outermost end enqueues what was held; `false`
/// without a matching start.
pub(crate) fn end() -> bool {
    let held = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return None;
        }
        g.depth -= 1;
        Some(if g.depth == 0 {
            std::mem::take(&mut g.held)
        } else {
            Vec::new()
        })
    });
    let Some(held) = held else {
        return false;
    };
    for h in held {
        let f = if h.items.len() > 1 {
            "HcclGroupEnd"
        } else {
            h.f
        };
        comms::submit(f, h.comm, &h.stream, move |c| run(c, &h.items));
    }
    true
}

/// Enqueues `items` on `stream` now, or at the group's end inside a
/// group.
pub(crate) fn p2p(f: &'static str, comm: Arc<CommEntry>, stream: Arc<Stream>, items: Vec<P2pSpec>) {
    let items = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Some(items);
        }
        let same = |h: &Held| Arc::ptr_eq(&h.comm, &comm) && Arc::ptr_eq(&h.stream, &stream);
        match g.held.iter_mut().find(|h| same(h)) {
            Some(h) => h.items.extend(items),
            None => g.held.push(Held {
                f,
                comm: Arc::clone(&comm),
                stream: Arc::clone(&stream),
                items,
            }),
        }
        None
    });
    if let Some(items) = items {
        comms::submit(f, comm, &stream, move |c| run(c, &items));
    }
}

fn run(c: &Comm, items: &[P2pSpec]) -> Result<(), CommError> {
    if let [one] = items {
        return if one.send {
            c.send_bytes(one.buf.bytes(), one.count, one.dtype, one.peer)
        } else {
            c.recv_bytes(one.buf.bytes_mut(), one.count, one.dtype, one.peer)
        };
    }
    let mut list: Vec<P2pItem<'_>> = items
        .iter()
        .map(|i| {
            if i.send {
                P2pItem::send_bytes(i.buf.bytes(), i.count, i.dtype, i.peer)
            } else {
                P2pItem::recv_bytes(i.buf.bytes_mut(), i.count, i.dtype, i.peer)
            }
        })
        .collect();
    c.batch_send_recv(&mut list)
}

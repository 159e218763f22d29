//! Point-to-point: send and receive (HCCL's `HcclSend` / `HcclRecv`),
//! batches (`HcclBatchSendRecv`) and async sends and receives.
//!
//! **Matching.** Only the two ranks of a message take part, so a p2p op
//! does not consume the communicator-wide op seq that collectives share:
//! each ordered (sender, receiver) pair numbers its messages `0, 1, 2, ...`
//! in call order (items of a batch in list order), and message `n` of a
//! pair meets receive `n` of that pair, whether either side sent it alone,
//! in a batch or async. The receiver checks the sender's count and data
//! type against its own before any byte lands in its buffer, and fails
//! naming both values.
//!
//! **On TCP** every p2p frame carries seq [`hccl_hw::tcp::P2P_SEQ_BIT`]
//! (a namespace collectives never use) and its pair's message number as
//! the step tag (mod 2^32: at most 65,536 messages can be outstanding, so
//! the wrap never meets a live one). The frame's op signature holds the
//! data type, with count 0 (a batch sends messages of several counts under
//! one signature); a count mismatch shows as a length mismatch, reworded
//! here in elements. A batch runs as one op per data type (ascending HCCL
//! code, the same order on every rank) with all its sends and receives
//! posted at once, so a ring exchange cannot deadlock.
//!
//! **On the simulator** (`HCCL_BACKEND=sim`) each message runs through
//! `hccl_sim` as a one-transfer SendRecv scenario when its receiver takes
//! it; see [`super::backend::sim_world`]. A batch leaves all its sends before it
//! receives, so again a ring exchange cannot deadlock.
//!
//! **Order.** P2p ops run in call order with the rank's other ops, like
//! HCCL's ops on one stream: a blocking or async receive that waits holds
//! back this rank's later ops. So a ring exchange written as
//! `recv_async` then `send` deadlocks (until `HCCL_EXEC_TIMEOUT`) on both
//! backends, as it would on one HCCL stream; use [`Comm::batch_send_recv`].

use super::backend::sim_world::Msg;
use super::device::{self, elems, Buffer, BufferMut, Home, In, Out, Side, SideMut};
use super::drain::AsyncKind;
use super::local::Waits;
use super::recorder::{self, OpDesc};
use super::{lock, Comm, CommError, DataType, Element, OpHandle, Shared, State};

/// Direction of a [`P2pItem`] (HCCL's `HcclSendRecvType`: `HCCL_SEND`,
/// `HCCL_RECV`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2pKind {
    /// Send the item's buffer to its peer.
    Send,
    /// Receive the peer's message into the item's buffer.
    Recv,
}

/// An item's buffer: what it sends, or where it receives (host bytes,
/// or an NPU's memory that HCCL reads or writes itself).
pub(crate) enum P2pBuf<'a> {
    Send(&'a [u8]),
    Recv(&'a mut [u8]),
    #[cfg(feature = "ascend")]
    Npu {
        npu: &'a super::backend::ascend::Npu,
        send: bool,
    },
}

impl std::fmt::Debug for P2pBuf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            P2pBuf::Send(b) => write!(f, "Send({} bytes)", b.len()),
            P2pBuf::Recv(b) => write!(f, "Recv({} bytes)", b.len()),
            #[cfg(feature = "ascend")]
            P2pBuf::Npu { npu, send } => write!(f, "Npu(send: {send}, {} bytes)", npu.len()),
        }
    }
}

/// One send or receive of [`Comm::batch_send_recv`] (HCCL's
/// `HcclSendRecvItem`: `sendRecvType`, `buf`, `count`, `dataType`,
/// `remoteRank`). Build it with [`P2pItem::send`] / [`P2pItem::recv`]
/// (typed: count and data type from the buffer) or the `_bytes` forms;
/// a buffer is a host slice or a [`super::DeviceBuffer`] (any
/// [`Buffer`]), whose device the batch checks.
#[derive(Debug)]
pub struct P2pItem<'a> {
    pub(crate) peer: u32,
    pub(crate) count: u64,
    pub(crate) dtype: DataType,
    pub(crate) buf: P2pBuf<'a>,
    /// The device of a device buffer (checked by the call).
    pub(crate) home: Option<&'a Home>,
}

impl<'a> P2pItem<'a> {
    /// Send `buf` (all its elements) to rank `peer`.
    pub fn send<B: Buffer + ?Sized>(buf: &'a B, peer: u32) -> P2pItem<'a> {
        let count = elems(buf) as u64;
        P2pItem::of_side(device::side(buf), count, <B::Elem as Element>::DTYPE, peer)
    }

    /// Receive `buf`'s length in elements from rank `peer` into `buf`.
    pub fn recv<B: BufferMut + ?Sized>(buf: &'a mut B, peer: u32) -> P2pItem<'a> {
        let count = elems(buf) as u64;
        P2pItem::of_side_mut(
            device::side_mut(buf),
            count,
            <B::Elem as Element>::DTYPE,
            peer,
        )
    }

    /// Send `count` elements of `dtype` held in `buf` (host bytes or a
    /// `DeviceBuffer<u8>`, which must have `count * dtype.size()` bytes;
    /// checked by the batch) to rank `peer`.
    pub fn send_bytes<B: Buffer<Elem = u8> + ?Sized>(
        buf: &'a B,
        count: u64,
        dtype: DataType,
        peer: u32,
    ) -> P2pItem<'a> {
        P2pItem::of_side(device::side(buf), count, dtype, peer)
    }

    /// Receive `count` elements of `dtype` from rank `peer` into `buf`
    /// (`count * dtype.size()` bytes; checked by the batch).
    pub fn recv_bytes<B: BufferMut<Elem = u8> + ?Sized>(
        buf: &'a mut B,
        count: u64,
        dtype: DataType,
        peer: u32,
    ) -> P2pItem<'a> {
        P2pItem::of_side_mut(device::side_mut(buf), count, dtype, peer)
    }

    fn of_side(side: Side<'a>, count: u64, dtype: DataType, peer: u32) -> P2pItem<'a> {
        let (buf, home) = match side {
            Side::Host(b) => (P2pBuf::Send(b), None),
            Side::Device(h, In::Host(b)) => (P2pBuf::Send(b), Some(h)),
            #[cfg(feature = "ascend")]
            Side::Device(h, In::Npu(npu)) => (P2pBuf::Npu { npu, send: true }, Some(h)),
        };
        P2pItem {
            peer,
            count,
            dtype,
            buf,
            home,
        }
    }

    fn of_side_mut(side: SideMut<'a>, count: u64, dtype: DataType, peer: u32) -> P2pItem<'a> {
        let (buf, home) = match side {
            SideMut::Host(b) => (P2pBuf::Recv(b), None),
            SideMut::Device(h, Out::Host(b)) => (P2pBuf::Recv(b), Some(h)),
            #[cfg(feature = "ascend")]
            SideMut::Device(h, Out::Npu(npu)) => (P2pBuf::Npu { npu, send: false }, Some(h)),
        };
        P2pItem {
            peer,
            count,
            dtype,
            buf,
            home,
        }
    }

    /// Send or receive.
    pub fn kind(&self) -> P2pKind {
        match self.buf {
            P2pBuf::Send(_) => P2pKind::Send,
            P2pBuf::Recv(_) => P2pKind::Recv,
            #[cfg(feature = "ascend")]
            P2pBuf::Npu { send: true, .. } => P2pKind::Send,
            #[cfg(feature = "ascend")]
            P2pBuf::Npu { send: false, .. } => P2pKind::Recv,
        }
    }

    /// The other rank.
    pub fn peer(&self) -> u32 {
        self.peer
    }

    /// Elements moved.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The buffer's bytes.
    pub(crate) fn len(&self) -> usize {
        match &self.buf {
            P2pBuf::Send(b) => b.len(),
            P2pBuf::Recv(b) => b.len(),
            #[cfg(feature = "ascend")]
            P2pBuf::Npu { npu, .. } => npu.len(),
        }
    }

    /// The message as the simulator names it, with number `n` of its pair.
    pub(crate) fn msg(&self, me: u32, n: u64) -> Msg {
        let (src, dst) = match self.kind() {
            P2pKind::Send => (me, self.peer),
            P2pKind::Recv => (self.peer, me),
        };
        Msg {
            src,
            dst,
            n,
            count: self.count,
            dtype: self.dtype,
        }
    }
}

impl Comm {
    /// Sends `buf` (a host slice or a [`super::DeviceBuffer`]: on the
    /// Ascend backend HCCL reads the device memory itself) to rank `dest`
    /// (HCCL's `HcclSend`). Returns once the
    /// message is handed to the transport (the receiver may not have it
    /// yet; past `HCCL_BUFFSIZE` unreceived bytes the sender waits);
    /// `dest` must call [`Comm::recv`] (or receive in a batch) with the
    /// same length and element type. Messages between one pair arrive in
    /// the order sent; other ranks take no part.
    ///
    /// # Errors
    /// [`CommError::Peer`] at once if `dest` is out of range or this rank;
    /// [`CommError::WrongDevice`] for another device's buffer;
    /// transport errors; `HCCL_EXEC_TIMEOUT` if the receiver never takes a
    /// message the sender must wait for. A receive of another count or
    /// type fails the receiver; a send that returned already (eager, as
    /// MPI's) is `Ok` and this rank's next op fails naming the mismatch,
    /// while a send still waiting fails at once with it, on both backends.
    pub fn send<B: Buffer + ?Sized>(&self, buf: &B, dest: u32) -> Result<(), CommError> {
        self.p2p_now("Send", false, &mut [P2pItem::send(buf, dest)])
    }

    /// Receives `buf.len()` elements from rank `src` into `buf` (HCCL's
    /// `HcclRecv`). Blocks until the whole message has arrived.
    ///
    /// # Errors
    /// [`CommError::Peer`] at once if `src` is out of range or this rank;
    /// a mismatch error naming both counts (or data types) if the sender's
    /// message differs, raised before `buf` is touched (the communicator
    /// is then broken on every rank, as after any failed op); after
    /// `HCCL_EXEC_TIMEOUT`, an error naming `src`, the message number and
    /// what was expected; transport errors.
    pub fn recv<B: BufferMut + ?Sized>(&self, buf: &mut B, src: u32) -> Result<(), CommError> {
        self.p2p_now("Recv", false, &mut [P2pItem::recv(buf, src)])
    }

    /// [`Comm::send`] on bytes: `buf` holds `count` elements of `dtype`
    /// (`count * dtype.size()` bytes).
    ///
    /// # Errors
    /// As [`Comm::send`]; [`CommError::Buffer`] if the length is wrong.
    pub fn send_bytes<B: Buffer<Elem = u8> + ?Sized>(
        &self,
        buf: &B,
        count: u64,
        dtype: DataType,
        dest: u32,
    ) -> Result<(), CommError> {
        self.p2p_now(
            "Send",
            false,
            &mut [P2pItem::send_bytes(buf, count, dtype, dest)],
        )
    }

    /// [`Comm::recv`] on bytes: `buf` receives `count` elements of `dtype`
    /// (`count * dtype.size()` bytes).
    ///
    /// # Errors
    /// As [`Comm::recv`]; [`CommError::Buffer`] if the length is wrong.
    pub fn recv_bytes<B: BufferMut<Elem = u8> + ?Sized>(
        &self,
        buf: &mut B,
        count: u64,
        dtype: DataType,
        src: u32,
    ) -> Result<(), CommError> {
        self.p2p_now(
            "Recv",
            false,
            &mut [P2pItem::recv_bytes(buf, count, dtype, src)],
        )
    }

    /// Runs a list of sends and receives together (HCCL's
    /// `HcclBatchSendRecv`): all are in flight at once, so patterns where
    /// every rank sends and receives (a ring exchange: send to r+1,
    /// receive from r−1) cannot deadlock. Items to one peer are numbered
    /// in list order (see the module docs), so they meet that peer's
    /// sends or receives in order, whether the peer batches them or not.
    /// Returns when every item is done. Items may mix data types; an empty
    /// list does nothing. On TCP a batch with more than one send (or
    /// receive) per data type stages them through one packed buffer (one
    /// extra copy each).
    ///
    /// # Errors
    /// Before anything moves: [`CommError::Peer`] naming the item for a
    /// peer out of range or this rank, [`CommError::Buffer`] for a buffer
    /// whose length is not `count * dtype.size()`. Then as
    /// [`Comm::send`] / [`Comm::recv`] (mismatches name both counts or
    /// data types).
    pub fn batch_send_recv(&self, items: &mut [P2pItem<'_>]) -> Result<(), CommError> {
        if items.is_empty() {
            return Ok(());
        }
        self.p2p_now("BatchSendRecv", true, items)
    }

    /// [`Comm::send`] on its own thread; the handle gives `buf` back when
    /// the send is done. Runs in call order with this rank's other ops.
    pub fn send_async<T: Element>(&self, buf: Vec<T>, dest: u32) -> OpHandle<Vec<T>> {
        let turn = check(&self.shared, "Send", false, &[P2pItem::send(&buf, dest)])
            .map(|()| self.take_turn());
        let name = format!("hccl-send-{dest}");
        self.spawn_async(name, AsyncKind::Send(dest), move |shared| {
            let items = &mut [P2pItem::send(&buf, dest)];
            turn.and_then(|turn| p2p_at(shared, turn, "Send", false, items))?;
            Ok(buf)
        })
    }

    /// [`Comm::recv`] on its own thread: receives `buf.len()` elements from
    /// `src` into `buf`, which the handle returns. Runs in call order with
    /// this rank's other ops (see the module docs on ring exchanges).
    ///
    /// **Unlike MPI's `Irecv`**, this receive holds back the rank's later
    /// ops until it completes: `recv_async(prev)` then `send(next)` on
    /// every rank of a ring waits for `HCCL_EXEC_TIMEOUT`. Post such an
    /// exchange as one [`Comm::batch_send_recv`] (HCCL's
    /// `HcclBatchSendRecv`), which starts all its sends and receives at
    /// once.
    pub fn recv_async<T: Element>(&self, mut buf: Vec<T>, src: u32) -> OpHandle<Vec<T>> {
        let turn = check(&self.shared, "Recv", false, &[P2pItem::recv(&mut buf, src)])
            .map(|()| self.take_turn());
        let name = format!("hccl-recv-{src}");
        self.spawn_async(name, AsyncKind::Recv(src), move |shared| {
            let items = &mut [P2pItem::recv(&mut buf, src)];
            turn.and_then(|turn| p2p_at(shared, turn, "Recv", false, items))?;
            Ok(buf)
        })
    }

    fn p2p_now(&self, op: &str, batch: bool, items: &mut [P2pItem<'_>]) -> Result<(), CommError> {
        check(&self.shared, op, batch, items)?;
        let turn = self.take_turn();
        let peers: Vec<u32> = items.iter().map(|it| it.peer).collect();
        let call = self.enter_blocking(&op, Waits::Peers(&peers));
        let r = p2p_at(&self.shared, turn, op, batch, items);
        Comm::end_blocking(call, r)
    }
}

/// The name of item `i` in errors: the op itself when it is not a batch.
fn label(op: &str, batch: bool, i: usize, kind: P2pKind) -> String {
    if batch {
        format!("{op} item {i} ({kind:?})")
    } else {
        op.to_string()
    }
}

/// Checks peers and buffer lengths before anything waits or moves.
fn check(sh: &Shared, op: &str, batch: bool, items: &[P2pItem<'_>]) -> Result<(), CommError> {
    let rank = sh.rank;
    for (i, it) in items.iter().enumerate() {
        if it.peer >= sh.size || it.peer == rank {
            return Err(CommError::Peer {
                op: label(op, batch, i, it.kind()),
                peer: it.peer,
                rank,
                size: sh.size,
            });
        }
        let what = match it.kind() {
            P2pKind::Send => "send buffer",
            P2pKind::Recv => "receive buffer",
        };
        if let Some(home) = it.home {
            sh.check_home(&label(op, batch, i, it.kind()), what, home)?;
        }
        let expected = it
            .count
            .checked_mul(it.dtype.size())
            .ok_or_else(|| CommError::Shape {
                op: label(op, batch, i, it.kind()),
                detail: format!(
                    "count {} x {} bytes of {} overflows u64",
                    it.count,
                    it.dtype.size(),
                    it.dtype
                ),
            })?;
        if expected != it.len() as u64 {
            return Err(CommError::Buffer {
                op: label(op, batch, i, it.kind()),
                what,
                expected,
                got: it.len() as u64,
            });
        }
    }
    Ok(())
}

/// Runs checked `items` at turn `turn`.
fn p2p_at(
    sh: &Shared,
    turn: u64,
    op: &str,
    batch: bool,
    items: &mut [P2pItem<'_>],
) -> Result<(), CommError> {
    let rank = sh.rank;
    let id = recorder::queue(sh, p2p_desc(turn, op, items));
    let mut started = None;
    let r = Comm::at_turn(sh, turn, |st| {
        if let Some(e) = lock(&sh.error).clone() {
            return Err(e.into_broken());
        }
        let State {
            backend,
            p2p_sent,
            p2p_received,
            ..
        } = st;
        let Some(backend) = backend.as_mut() else {
            return Err(CommError::Broken(format!(
                "rank {rank}: the communicator was aborted"
            )));
        };
        let numbers: Vec<u64> = items
            .iter()
            .map(|it| {
                let c = match it.kind() {
                    P2pKind::Send => &mut p2p_sent[it.peer as usize],
                    P2pKind::Recv => &mut p2p_received[it.peer as usize],
                };
                *c += 1;
                *c - 1
            })
            .collect();
        let name = match (batch, items.first()) {
            (false, Some(it)) => {
                let m = it.msg(rank, numbers[0]);
                format!(
                    "{op} (rank {} -> rank {}, message {} of the pair)",
                    m.src, m.dst, m.n
                )
            }
            _ => format!("{op} ({} items)", items.len()),
        };
        recorder::running(sh, id);
        let r = backend.p2p(sh, &name, items, &numbers);
        started = backend.started();
        r
    });
    let ran = match &r {
        Ok(()) => recorder::Ran {
            started,
            ..recorder::Ran::default()
        },
        Err(e) => recorder::Ran::failed(sh, None, e, Vec::new(), started),
    };
    recorder::ended(sh, id, &r, Some(ran));
    r
}

/// The flight recorder's description of point-to-point op `op`.
fn p2p_desc(turn: u64, op: &str, items: &[P2pItem<'_>]) -> OpDesc {
    OpDesc {
        seq: None,
        turn,
        kind: match op {
            "Send" => "Send",
            "Recv" => "Recv",
            _ => "BatchSendRecv",
        },
        count: items.iter().map(|it| it.count).sum(),
        dtype: items.first().map_or(DataType::Int8, |it| it.dtype),
        op: None,
        root: None,
        items: items
            .iter()
            .map(|it| (it.kind() == P2pKind::Send, it.peer, it.count))
            .collect(),
        counts: None,
        matrix: None,
        bytes: items.iter().map(|it| it.len() as u64).sum(),
    }
}

//! A pair's two rings as the byte stream of its connection: the transport's
//! reader and writer tasks read and write [`ShmReader`] / [`ShmWriter`]
//! exactly as they do the socket halves (same frames, same order), and the
//! socket stays open beside them as the doorbell and the liveness signal.
//!
//! **Waking.** A side that cannot move (empty ring to read, full ring to
//! write) registers its task's waker and, unless the rank's thread is
//! looking at the rings itself ([`ShmLink::set_polling`]: it spins while an
//! op waits and the ranks fit the CPUs), sets its sleep flag in the ring
//! ([`super::ring`]). The other side's next move sees the flag and writes
//! one byte to the socket; the peer's [`watch`] task, asleep in `epoll`
//! with the rest of the runtime, wakes the task. So a rank on a shared core
//! sleeps in the kernel, and a spinning rank costs its peer no system call.
//!
//! **Ending.** The socket's end (the peer closed or died: the kernel closes
//! its descriptors either way) marks the link closed; the reader first
//! takes every byte still in the ring (the peer wrote them before it
//! closed), then reads the end of the stream, as on a socket.

use std::io::Write as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::ring;
use super::segment::{SegRing, Segment};

/// One same-host pair's link as this rank sees it.
#[derive(Debug)]
pub(crate) struct ShmLink {
    rx: SegRing,
    tx: SegRing,
    /// The connection's socket (non-blocking): doorbell bytes out.
    bell: std::net::TcpStream,
    /// The socket has ended: no more bytes will come into `rx`.
    closed: AtomicBool,
    /// The rank's thread looks at the rings itself: no sleep flags.
    polling: AtomicBool,
    rx_waker: Mutex<Option<Waker>>,
    tx_waker: Mutex<Option<Waker>>,
}

fn put(slot: &Mutex<Option<Waker>>, w: &Waker) {
    let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
    match &*s {
        Some(old) if old.will_wake(w) => {}
        _ => *s = Some(w.clone()),
    }
}

fn wake(slot: &Mutex<Option<Waker>>) {
    let w = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(w) = w {
        w.wake();
    }
}

impl ShmLink {
    /// The link over `seg` for the `lower` or higher rank of the pair,
    /// ringing doorbells on `bell` (a clone of the connection's socket).
    pub(crate) fn new(seg: Segment, lower: bool, bell: std::net::TcpStream) -> Arc<ShmLink> {
        let seg = Arc::new(seg);
        let (tx, rx) = if lower { (0, 1) } else { (1, 0) };
        Arc::new(ShmLink {
            rx: seg.ring(rx),
            tx: seg.ring(tx),
            bell,
            closed: AtomicBool::new(false),
            polling: AtomicBool::new(false),
            rx_waker: Mutex::new(None),
            tx_waker: Mutex::new(None),
        })
    }

    /// One doorbell byte; a full socket buffer already holds unread ones.
    fn ring_bell(&self) {
        let _ = (&self.bell).write(&[1]);
    }

    /// Writes what fits of `bytes` into the outgoing ring now (the rank's
    /// thread writing a whole frame itself while its writer task is idle);
    /// returns the bytes written.
    pub(crate) fn write_now(&self, bytes: &[u8]) -> usize {
        if self.closed.load(Ordering::Acquire) {
            return 0;
        }
        let m = ring::write(&self.tx, bytes);
        if m.wake {
            self.ring_bell();
        }
        m.n
    }

    /// Writes all of `parts` into the outgoing ring now, or nothing if
    /// they do not fit in its free space (see [`ShmLink::write_now`]);
    /// returns whether they were written.
    pub(crate) fn write_all_now(&self, parts: &[&[u8]]) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let Some(m) = ring::write_all(&self.tx, parts) else {
            return false;
        };
        if m.wake {
            self.ring_bell();
        }
        true
    }

    /// Says whether the rank's thread looks at the rings itself
    /// ([`ShmLink::kick`]) from now on. Turning it off sets the sleep flags
    /// of whichever task waits, so that the peer's next move rings the
    /// doorbell; call it before the thread sleeps.
    pub(crate) fn set_polling(&self, on: bool) {
        self.polling.store(on, Ordering::Release);
        if on {
            ring::consumer_awake(&self.rx);
            ring::producer_awake(&self.tx);
            return;
        }
        let rx_waits = self.rx_waker.lock().map(|w| w.is_some()).unwrap_or(true);
        if rx_waits && !ring::consumer_sleep(&self.rx) {
            wake(&self.rx_waker);
        }
        let tx_waits = self.tx_waker.lock().map(|w| w.is_some()).unwrap_or(true);
        if tx_waits && !ring::producer_sleep(&self.tx) {
            wake(&self.tx_waker);
        }
    }

    /// Wakes a waiting task whose ring can move now (called by the rank's
    /// thread while it polls, from inside the runtime).
    pub(crate) fn kick(&self) {
        if ring::readable(&self.rx) > 0 || self.closed.load(Ordering::Acquire) {
            wake(&self.rx_waker);
        }
        if ring::writable(&self.tx) > 0 || self.closed.load(Ordering::Acquire) {
            wake(&self.tx_waker);
        }
    }

    /// Bytes in the incoming ring.
    pub(crate) fn readable(&self) -> bool {
        ring::readable(&self.rx) > 0
    }

    /// Whether the link needs its tasks run by the runtime: its end came,
    /// or a writer task waits and the ring has room.
    pub(crate) fn needs_task(&self) -> bool {
        self.closed.load(Ordering::Acquire)
            || (ring::writable(&self.tx) > 0
                && self.tx_waker.lock().map(|w| w.is_some()).unwrap_or(true))
    }

    fn end(&self) {
        self.closed.store(true, Ordering::Release);
        wake(&self.rx_waker);
        wake(&self.tx_waker);
    }
}

/// Reads the socket of a ring link: any byte is a doorbell (wake both
/// tasks), its end closes the link. Runs until then, holding the write
/// half `_w` (dropped, it would shut the socket's write side: the end of
/// the stream for the peer).
pub(crate) async fn watch(link: Arc<ShmLink>, mut r: OwnedReadHalf, _w: OwnedWriteHalf) {
    let mut buf = [0u8; 64];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => {
                link.end();
                return;
            }
            Ok(_) => {
                wake(&link.rx_waker);
                wake(&link.tx_waker);
            }
        }
    }
}

/// The incoming ring as an [`AsyncRead`].
#[derive(Debug)]
pub(crate) struct ShmReader(pub(crate) Arc<ShmLink>);

impl AsyncRead for ShmReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let l = &*self.0;
        loop {
            let closed = l.closed.load(Ordering::Acquire);
            let ready = ring::readable(&l.rx) as usize;
            if ready > 0 && buf.remaining() > 0 {
                let want = ready.min(buf.remaining());
                let m = ring::read(&l.rx, buf.initialize_unfilled_to(want));
                buf.advance(m.n);
                if m.wake {
                    l.ring_bell();
                }
                return Poll::Ready(Ok(()));
            }
            if closed || buf.remaining() == 0 {
                return Poll::Ready(Ok(())); // the end of the stream
            }
            put(&l.rx_waker, cx.waker());
            if l.polling.load(Ordering::Acquire) {
                if ring::readable(&l.rx) == 0 && !l.closed.load(Ordering::Acquire) {
                    return Poll::Pending;
                }
            } else if ring::consumer_sleep(&l.rx) && !l.closed.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        }
    }
}

/// The outgoing ring as an [`AsyncWrite`]; shutting it down shuts the
/// socket's write side, which ends the peer's stream after the ring's
/// bytes.
#[derive(Debug)]
pub(crate) struct ShmWriter(pub(crate) Arc<ShmLink>);

impl AsyncWrite for ShmWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        src: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let l = &*self.0;
        if src.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            if l.closed.load(Ordering::Acquire) {
                return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
            }
            let m = ring::write(&l.tx, src);
            if m.n > 0 {
                if m.wake {
                    l.ring_bell();
                }
                return Poll::Ready(Ok(m.n));
            }
            put(&l.tx_waker, cx.waker());
            if l.polling.load(Ordering::Acquire) {
                if ring::writable(&l.tx) == 0 {
                    return Poll::Pending;
                }
            } else if ring::producer_sleep(&l.tx) {
                return Poll::Pending;
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let _ = self.0.bell.shutdown(std::net::Shutdown::Write);
        Poll::Ready(Ok(()))
    }
}

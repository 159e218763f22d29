//! The ring's protocol: a single-producer single-consumer byte ring over
//! any memory that offers two `u64` positions and byte copies
//! ([`RingMem`]): the mapped segment ([`super::segment`]) between
//! processes, a loom model in the tests.
//!
//! **Positions.** `tail` counts bytes ever written, `head` bytes ever
//! read (so `tail - head` bytes are in the ring, never more than its
//! capacity, a power of two; a position wraps only after 2^63 bytes).
//! The producer alone moves `tail`, the consumer alone moves `head`.
//! Bytes are copied in before `tail` is published (`Release`) and copied
//! out only after it is read (`Acquire`); the same pair on `head` keeps
//! the producer off bytes still being read.
//!
//! **Sleeping without a lost wake-up.** Bit 63 of each position is a
//! flag set by the *other* side: the consumer sets [`SLEEP`] in `tail`
//! (compare-and-swap from the `tail` it found equal to `head`) before
//! it sleeps on an empty ring; the producer sets it in `head` before it
//! sleeps on a full ring. The side that moves the position replaces it
//! with a `swap`, which returns the old value: if the flag was in it,
//! the sleeper must be woken (a doorbell, outside this module). One
//! location, read-modify-writes only: either the sleeper's CAS comes
//! first (the mover's swap sees the flag and rings) or the move comes
//! first (the CAS fails, the sleeper sees the new position and does not
//! sleep). No fence pairing, so it holds under loom's model too.
// Under loom only the models use these (the mapped rings are not built).
#![cfg_attr(loom, allow(dead_code))]

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

/// The flag bit of a position: "the other side sleeps, ring its doorbell
/// when you move this".
pub(crate) const SLEEP: u64 = 1 << 63;

/// Memory a ring lives in: the two positions and `cap()` data bytes.
pub(crate) trait RingMem {
    /// Data bytes, a power of two.
    fn cap(&self) -> u64;
    /// Bytes ever written (bit 63: [`SLEEP`] of the consumer).
    fn tail(&self) -> &AtomicU64;
    /// Bytes ever read (bit 63: [`SLEEP`] of the producer).
    fn head(&self) -> &AtomicU64;
    /// Copies `src` to data offset `at` (`at + src.len() <= cap()`). Only
    /// the producer calls it, on bytes the consumer does not own.
    fn copy_in(&self, at: u64, src: &[u8]);
    /// Copies data from offset `at` into `dst` (`at + dst.len() <= cap()`).
    /// Only the consumer calls it, on bytes the producer published.
    fn copy_out(&self, at: u64, dst: &mut [u8]);
}

/// What a write or read did: bytes moved, and whether the other side had
/// said it sleeps (its doorbell must be rung).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Moved {
    /// Bytes written or read (0: the ring was full or empty).
    pub(crate) n: usize,
    /// The other side was asleep: wake it.
    pub(crate) wake: bool,
}

/// Writes as much of `src` as fits (none if the ring is full). The
/// caller is the ring's one producer.
pub(crate) fn write<M: RingMem>(m: &M, src: &[u8]) -> Moved {
    let (t, free) = producer_view(m);
    let n = (src.len() as u64).min(free);
    copy_in_at(m, t, &src[..n as usize]);
    publish(m, t, n)
}

/// Writes all of `parts`, one after another, or nothing if together they
/// do not fit (`None`): a whole frame from separate buffers (an op-start
/// frame, a header and the caller's payload) without first gathering
/// them into one. The caller is the ring's one producer.
pub(crate) fn write_all<M: RingMem>(m: &M, parts: &[&[u8]]) -> Option<Moved> {
    let (t, free) = producer_view(m);
    let n: u64 = parts.iter().map(|p| p.len() as u64).sum();
    if n > free {
        return None;
    }
    let mut at = t;
    for p in parts {
        copy_in_at(m, at, p);
        at += p.len() as u64;
    }
    Some(publish(m, t, n))
}

/// The producer's `tail` (flag clear) and the bytes free behind it.
fn producer_view<M: RingMem>(m: &M) -> (u64, u64) {
    let cap = m.cap();
    let t = m.tail().load(Relaxed) & !SLEEP;
    let h = m.head().load(Acquire) & !SLEEP;
    (t, cap - used(t, h, cap))
}

/// Copies `src` to the ring at position `pos` (wrapping at the end),
/// into bytes the producer owns.
fn copy_in_at<M: RingMem>(m: &M, pos: u64, src: &[u8]) {
    let cap = m.cap();
    let at = pos & (cap - 1);
    let first = (src.len() as u64).min(cap - at) as usize;
    m.copy_in(at, &src[..first]);
    m.copy_in(0, &src[first..]);
}

/// Publishes `n` bytes copied in behind `tail` `t` (nothing for none).
fn publish<M: RingMem>(m: &M, t: u64, n: u64) -> Moved {
    if n == 0 {
        return Moved { n: 0, wake: false };
    }
    let old = m.tail().swap(t + n, AcqRel);
    Moved {
        n: n as usize,
        wake: old & SLEEP != 0,
    }
}

/// Reads as much as `dst` holds of what is in the ring. The caller is the
/// ring's one consumer.
pub(crate) fn read<M: RingMem>(m: &M, dst: &mut [u8]) -> Moved {
    let cap = m.cap();
    let h = m.head().load(Relaxed) & !SLEEP;
    let t = m.tail().load(Acquire) & !SLEEP;
    let n = (dst.len() as u64).min(used(t, h, cap));
    if n == 0 {
        return Moved { n: 0, wake: false };
    }
    let at = h & (cap - 1);
    let first = n.min(cap - at);
    m.copy_out(at, &mut dst[..first as usize]);
    m.copy_out(0, &mut dst[first as usize..n as usize]);
    let old = m.head().swap(h + n, AcqRel);
    Moved {
        n: n as usize,
        wake: old & SLEEP != 0,
    }
}

/// Bytes the consumer could read now.
pub(crate) fn readable<M: RingMem>(m: &M) -> u64 {
    let t = m.tail().load(Acquire) & !SLEEP;
    used(t, m.head().load(Relaxed) & !SLEEP, m.cap())
}

/// Bytes the producer could write now.
pub(crate) fn writable<M: RingMem>(m: &M) -> u64 {
    let h = m.head().load(Acquire) & !SLEEP;
    m.cap() - used(m.tail().load(Relaxed) & !SLEEP, h, m.cap())
}

/// Bytes in the ring at positions `t` and `h`, at most `cap` whatever the
/// other process wrote there: a peer that breaks the protocol can garble
/// the stream (which the frame checks catch), never move a copy out of
/// the ring's bounds.
fn used(t: u64, h: u64, cap: u64) -> u64 {
    (t.wrapping_sub(h) & !SLEEP).min(cap)
}

/// The consumer says it sleeps: true if the ring is empty and the flag is
/// set (the producer's next write rings the doorbell), false if bytes
/// arrived (read them instead of sleeping).
pub(crate) fn consumer_sleep<M: RingMem>(m: &M) -> bool {
    let h = m.head().load(Relaxed) & !SLEEP;
    arm(m.tail(), h)
}

/// The producer says it sleeps: true if the ring is full and the flag is
/// set (the consumer's next read rings the doorbell), false if space
/// appeared.
pub(crate) fn producer_sleep<M: RingMem>(m: &M) -> bool {
    let t = m.tail().load(Relaxed) & !SLEEP;
    arm(m.head(), t.wrapping_sub(m.cap()) & !SLEEP)
}

/// Sets [`SLEEP`] in `pos` if it still holds `expected` (flag clear).
fn arm(pos: &AtomicU64, expected: u64) -> bool {
    match pos.compare_exchange(expected, expected | SLEEP, AcqRel, Acquire) {
        Ok(_) => true,
        Err(cur) => cur == expected | SLEEP,
    }
}

/// The consumer is awake again: clears its flag (a producer that has
/// not swapped it away yet then rings no doorbell).
pub(crate) fn consumer_awake<M: RingMem>(m: &M) {
    if m.tail().load(Relaxed) & SLEEP != 0 {
        m.tail().fetch_and(!SLEEP, AcqRel);
    }
}

/// The producer is awake again: clears its flag.
pub(crate) fn producer_awake<M: RingMem>(m: &M) {
    if m.head().load(Relaxed) & SLEEP != 0 {
        m.head().fetch_and(!SLEEP, AcqRel);
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::RefCell;

    /// A ring in plain memory (one thread).
    pub(crate) struct VecMem {
        tail: AtomicU64,
        head: AtomicU64,
        data: RefCell<Vec<u8>>,
    }

    impl VecMem {
        pub(crate) fn new(cap: usize) -> VecMem {
            assert!(cap.is_power_of_two());
            VecMem {
                tail: AtomicU64::new(0),
                head: AtomicU64::new(0),
                data: RefCell::new(vec![0; cap]),
            }
        }
    }

    impl RingMem for VecMem {
        fn cap(&self) -> u64 {
            self.data.borrow().len() as u64
        }
        fn tail(&self) -> &AtomicU64 {
            &self.tail
        }
        fn head(&self) -> &AtomicU64 {
            &self.head
        }
        fn copy_in(&self, at: u64, src: &[u8]) {
            let at = at as usize;
            self.data.borrow_mut()[at..at + src.len()].copy_from_slice(src);
        }
        fn copy_out(&self, at: u64, dst: &mut [u8]) {
            let at = at as usize;
            dst.copy_from_slice(&self.data.borrow()[at..at + dst.len()]);
        }
    }

    #[test]
    fn full_ring_takes_nothing_and_empty_ring_gives_nothing() {
        let m = VecMem::new(8);
        assert_eq!(read(&m, &mut [0; 4]).n, 0);
        assert_eq!(write(&m, &[1; 10]).n, 8);
        assert_eq!(write(&m, &[2; 1]).n, 0);
        assert_eq!(writable(&m), 0);
        assert_eq!(readable(&m), 8);
        let mut out = [0; 3];
        assert_eq!(read(&m, &mut out).n, 3);
        assert_eq!(out, [1; 3]);
        // Wraps: 3 bytes at offsets 0..3 after the 5 left at 3..8.
        assert_eq!(write(&m, &[7, 8, 9]).n, 3);
        let mut out = [0; 8];
        assert_eq!(read(&m, &mut out).n, 8);
        assert_eq!(out, [1, 1, 1, 1, 1, 7, 8, 9]);
    }

    #[test]
    fn write_all_takes_every_part_in_order_or_nothing() {
        let m = VecMem::new(8);
        assert_eq!(write(&m, &[9; 3]).n, 3);
        assert_eq!(read(&m, &mut [0; 3]).n, 3);
        // 6 bytes from three parts, wrapping at the end (positions 3..9).
        let parts: [&[u8]; 3] = [&[1, 2], &[], &[3, 4, 5, 6]];
        assert_eq!(write_all(&m, &parts), Some(Moved { n: 6, wake: false }));
        // 2 free: three bytes do not fit, and none is written.
        assert_eq!(write_all(&m, &[&[7], &[8, 8]]), None);
        assert_eq!(readable(&m), 6);
        let mut out = [0; 8];
        assert_eq!(read(&m, &mut out).n, 6);
        assert_eq!(out[..6], [1, 2, 3, 4, 5, 6]);
        // A sleeping consumer is woken by it, as by `write`.
        assert!(consumer_sleep(&m));
        assert_eq!(write_all(&m, &[&[1]]), Some(Moved { n: 1, wake: true }));
        assert_eq!(write_all(&m, &[&[]]), Some(Moved { n: 0, wake: false }));
    }

    #[test]
    fn a_sleeping_consumer_is_woken_by_the_next_write_only() {
        let m = VecMem::new(8);
        assert!(consumer_sleep(&m));
        assert!(consumer_sleep(&m), "arming twice keeps it armed");
        assert_eq!(write(&m, &[1]), Moved { n: 1, wake: true });
        assert_eq!(write(&m, &[2]), Moved { n: 1, wake: false });
        assert!(!consumer_sleep(&m), "bytes are waiting: no sleep");
        assert_eq!(read(&m, &mut [0; 8]).n, 2);
        assert!(consumer_sleep(&m));
        consumer_awake(&m);
        assert_eq!(write(&m, &[3]), Moved { n: 1, wake: false });
    }

    #[test]
    fn a_sleeping_producer_is_woken_by_the_next_read_only() {
        let m = VecMem::new(4);
        assert!(!producer_sleep(&m), "space: no sleep");
        assert_eq!(write(&m, &[1; 4]).n, 4);
        assert!(producer_sleep(&m));
        assert_eq!(read(&m, &mut [0; 1]), Moved { n: 1, wake: true });
        assert_eq!(read(&m, &mut [0; 1]), Moved { n: 1, wake: false });
        assert_eq!(write(&m, &[1; 2]).n, 2);
        assert!(producer_sleep(&m));
        producer_awake(&m);
        assert_eq!(read(&m, &mut [0; 1]), Moved { n: 1, wake: false });
    }

    proptest! {
        /// Any sequence of writes and reads of any sizes delivers exactly
        /// the bytes written, in order, and never more than fits.
        #[test]
        fn bytes_come_out_in_order(
            cap_log in 0u32..7,
            ops in proptest::collection::vec((any::<bool>(), 0usize..100), 1..200),
        ) {
            let cap = 1usize << cap_log;
            let m = VecMem::new(cap);
            let (mut sent, mut got) = (Vec::<u8>::new(), Vec::<u8>::new());
            let mut next = 0u8;
            for (is_write, len) in ops {
                if is_write {
                    let src: Vec<u8> = (0..len).map(|i| next.wrapping_add(i as u8)).collect();
                    let free = writable(&m) as usize;
                    let n = write(&m, &src).n;
                    prop_assert_eq!(n, len.min(free));
                    sent.extend_from_slice(&src[..n]);
                    next = next.wrapping_add(n as u8);
                } else {
                    let mut dst = vec![0; len];
                    let avail = readable(&m) as usize;
                    let n = read(&m, &mut dst).n;
                    prop_assert_eq!(n, len.min(avail));
                    got.extend_from_slice(&dst[..n]);
                }
                prop_assert!(readable(&m) as usize <= cap);
                prop_assert_eq!(readable(&m) as usize + writable(&m) as usize, cap);
            }
            let mut rest = vec![0; cap];
            let n = read(&m, &mut rest).n;
            got.extend_from_slice(&rest[..n]);
            prop_assert_eq!(got, sent);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicU8;
    use loom::sync::{Arc, Condvar, Mutex};

    /// A ring whose bytes are relaxed atomics: a byte read before its
    /// write was published, or overwritten before it was read, gives a
    /// wrong value in some interleaving loom explores.
    struct LoomMem {
        tail: AtomicU64,
        head: AtomicU64,
        data: Vec<AtomicU8>,
    }

    impl LoomMem {
        fn new(cap: usize) -> LoomMem {
            LoomMem {
                tail: AtomicU64::new(0),
                head: AtomicU64::new(0),
                data: (0..cap).map(|_| AtomicU8::new(0)).collect(),
            }
        }
    }

    impl RingMem for LoomMem {
        fn cap(&self) -> u64 {
            self.data.len() as u64
        }
        fn tail(&self) -> &AtomicU64 {
            &self.tail
        }
        fn head(&self) -> &AtomicU64 {
            &self.head
        }
        fn copy_in(&self, at: u64, src: &[u8]) {
            for (i, b) in src.iter().enumerate() {
                self.data[at as usize + i].store(*b, Relaxed);
            }
        }
        fn copy_out(&self, at: u64, dst: &mut [u8]) {
            for (i, b) in dst.iter_mut().enumerate() {
                *b = self.data[at as usize + i].load(Relaxed);
            }
        }
    }

    /// A doorbell: a sleeper blocks on a condition variable until rung, so
    /// a lost wake-up leaves a thread blocked for ever, which loom reports
    /// as a deadlock.
    #[derive(Default)]
    struct Bell {
        rung: Mutex<bool>,
        cv: Condvar,
    }
    impl Bell {
        fn ring(&self) {
            *self.rung.lock().unwrap() = true;
            self.cv.notify_one();
        }
        fn wait(&self) {
            let mut rung = self.rung.lock().unwrap();
            while !*rung {
                rung = self.cv.wait(rung).unwrap();
            }
            *rung = false;
        }
    }

    /// Runs a producer of `len` bytes (1, 2, 3, ...) through a ring of
    /// `cap` bytes, both sides sleeping on their doorbells when they
    /// cannot move, and checks what the consumer got.
    /// `whole`: the producer writes two-byte frames of two parts with
    /// [`write_all`] (all or nothing) instead of what fits.
    fn model(cap: usize, len: u8, chunk: usize, whole: bool) {
        loom::model(move || {
            let m = Arc::new(LoomMem::new(cap));
            let to_consumer = Arc::new(Bell::default());
            let to_producer = Arc::new(Bell::default());
            let (pm, pc, pp) = (m.clone(), to_consumer.clone(), to_producer.clone());
            let producer = loom::thread::spawn(move || {
                let src: Vec<u8> = (1..=len).collect();
                let mut done = 0;
                while done < src.len() {
                    let w = if whole {
                        let (a, b) = src[done..(done + 2).min(src.len())].split_at(1);
                        write_all(&*pm, &[a, b]).unwrap_or(Moved { n: 0, wake: false })
                    } else {
                        write(&*pm, &src[done..])
                    };
                    if w.wake {
                        pc.ring();
                    }
                    done += w.n;
                    if w.n == 0 {
                        if producer_sleep(&*pm) {
                            pp.wait();
                            producer_awake(&*pm);
                        } else {
                            // Room, but not for the whole frame.
                            loom::thread::yield_now();
                        }
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < len as usize {
                let mut b = vec![0u8; chunk];
                let r = read(&*m, &mut b);
                if r.wake {
                    to_producer.ring();
                }
                got.extend_from_slice(&b[..r.n]);
                if r.n == 0 && consumer_sleep(&*m) {
                    to_consumer.wait();
                    consumer_awake(&*m);
                }
            }
            producer.join().unwrap();
            let want: Vec<u8> = (1..=len).collect();
            assert_eq!(got, want);
        });
    }

    /// Three bytes through two: the producer fills the ring and sleeps,
    /// the consumer empties it and sleeps, in every interleaving; no byte
    /// is lost or read stale, and no sleeper misses its wake-up.
    #[test]
    fn loom_ring_delivers_in_order_without_lost_wakeups() {
        model(2, 3, 2, false);
    }

    /// One-byte reads of a wrapping ring: positions cross the end twice.
    #[test]
    fn loom_ring_wraps() {
        model(2, 4, 1, false);
    }

    /// Whole two-part frames ([`write_all`]) through a ring that holds one
    /// frame, read a byte at a time: each frame lands whole and in order.
    #[test]
    fn loom_whole_frames_arrive_in_order() {
        model(2, 4, 1, true);
    }
}

//! Message matching: which posted receive a data frame's bytes go to.
//!
//! A message is matched by (peer, op seq, step tag). A frame whose receive
//! is posted streams into the posted region, chunk by chunk; one that
//! arrives first is kept (its chunks, as the driver gave them) until its
//! receive is posted, then handed over in order. Each peer's connection
//! carries one message at a time, so a peer has at most one message "in
//! progress" (header seen, bytes still to come). Lengths and signatures
//! are checked before any byte is handed out for a receive.
//!
//! Generic over the chunk type `C` (the driver's bytes and the budget they
//! hold; tests use plain ids): the matcher only stores and hands chunks
//! back, never reads them.

use std::collections::HashMap;

use hccl_algos::schedule::{Region, StepId};
use hccl_algos::ReduceOp;

use crate::tcp::rank::{is_p2p_seq, MAX_EARLY_MESSAGES};
use crate::tcp::wire::Signature;

/// A message's identity within the communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    /// The sender.
    pub(crate) peer: u32,
    /// Its op's sequence number.
    pub(crate) seq: u64,
    /// The step tag.
    pub(crate) tag: u32,
}

/// What a posted receive does with the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvKind {
    /// Copies them into `dst`.
    Copy {
        /// Where they land.
        dst: Region,
    },
    /// Reduces them with `local` into `dst` (same length).
    Reduce {
        /// The local operand.
        local: Region,
        /// Where the result lands.
        dst: Region,
        /// The reduction.
        op: ReduceOp,
    },
}

#[derive(Debug)]
struct Posted {
    step: StepId,
    kind: RecvKind,
    len: u64,
    got: u64,
}

#[derive(Debug)]
struct Early<C> {
    len: u64,
    sig: Signature,
    got: u64,
    chunks: Vec<C>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dest {
    Posted,
    Early,
}

#[derive(Clone, Copy, Debug)]
struct Incoming {
    key: Key,
    dest: Dest,
}

/// Why a frame or a receive could not be matched. The driver words it as
/// a [`crate::tcp::TcpError`] (it knows the op's name and how to describe
/// a signature).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MatchError {
    /// The message's op signature `sig` differs from the running op's.
    Mismatch {
        /// The sender.
        peer: u32,
        /// Its signature.
        sig: Signature,
    },
    /// The message has `received` bytes where the receive expects
    /// `expected`.
    Length {
        /// The sender.
        peer: u32,
        /// The step tag.
        tag: u32,
        /// The receive's length.
        expected: u64,
        /// The message's length.
        received: u64,
    },
    /// More than [`MAX_EARLY_MESSAGES`] messages wait for their receives.
    TooManyEarly,
    /// A second message with the same key arrived before the first was
    /// received.
    Duplicate {
        /// Op seq.
        seq: u64,
        /// Step tag.
        tag: u32,
    },
    /// A second receive with the same key was posted.
    TwoReceives {
        /// The sender.
        peer: u32,
        /// Step tag.
        tag: u32,
    },
    /// More bytes than the message holds: `got` + `n` > `len`.
    Overflow {
        /// Bytes received so far.
        got: u64,
        /// Bytes that came now.
        n: u64,
        /// The message's length.
        len: u64,
    },
}

impl std::fmt::Display for MatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MatchError::Mismatch { peer, .. } => write!(f, "rank {peer}'s op signature differs"),
            MatchError::Length {
                expected, received, ..
            } => write!(f, "{received} bytes where {expected} are expected"),
            MatchError::TooManyEarly => write!(
                f,
                "more than {MAX_EARLY_MESSAGES} messages arrived before their receives"
            ),
            MatchError::Duplicate { seq, tag } => {
                write!(f, "second message with op #{seq} tag {tag}")
            }
            MatchError::TwoReceives { peer, tag } => {
                write!(f, "two receives from rank {peer} with tag {tag}")
            }
            MatchError::Overflow { got, n, len } => {
                write!(f, "message overflows its region: {got} + {n} > {len}")
            }
        }
    }
}

/// What a data frame's header led to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderAction {
    /// A zero-length message completed the posted receive `step`.
    Complete(StepId),
    /// Its bytes will stream into a posted receive.
    Stream,
    /// It is kept until its receive is posted.
    Kept,
}

/// Where a chunk of the message in progress goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ChunkAction<C> {
    /// No message of the peer is in progress (or its receive went away,
    /// or no op runs to take it): the chunk is not needed.
    Unused(C),
    /// Kept with its early message.
    Kept,
    /// Into the posted receive: `kind`'s regions at `offset` bytes from
    /// their start. `done`: the chunk completes receive `step`.
    Place {
        /// The chunk.
        chunk: C,
        /// The receive's regions.
        kind: RecvKind,
        /// Bytes of the message before this chunk.
        offset: u64,
        /// The receive's step.
        step: StepId,
        /// The message is now complete.
        done: bool,
    },
}

/// What posting a receive found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PostAction<C> {
    /// Nothing arrived yet: the receive waits.
    Wait,
    /// Its message arrived first: apply `chunks`, in order, from offset 0.
    /// `complete`: that is all of it (the receive is done), else the rest
    /// streams in as [`ChunkAction::Place`] at the following offsets.
    Early {
        /// The bytes that came, in order.
        chunks: Vec<C>,
        /// Whether they are the whole message.
        complete: bool,
    },
}

/// The matching state of one rank: posted receives, early messages and
/// each peer's message in progress.
#[derive(Debug)]
pub(crate) struct Matcher<C> {
    posted: HashMap<Key, Posted>,
    early: HashMap<Key, Early<C>>,
    /// Per peer: the message whose bytes are arriving.
    incoming: Vec<Option<Incoming>>,
}

impl<C> Matcher<C> {
    /// Matching for a communicator of `nranks`.
    pub(crate) fn new(nranks: u32) -> Self {
        Matcher {
            posted: HashMap::new(),
            early: HashMap::new(),
            incoming: vec![None; nranks as usize],
        }
    }

    /// A data frame from `peer` with key `key`, `len` payload bytes and
    /// signature `sig` starts. `op` is the running op (its seq and
    /// signature), if any: a frame of that op must carry its signature.
    ///
    /// # Errors
    /// [`MatchError::Mismatch`], [`MatchError::Length`] against a posted
    /// receive, [`MatchError::TooManyEarly`], [`MatchError::Duplicate`].
    pub(crate) fn on_header(
        &mut self,
        key: Key,
        len: u64,
        sig: &Signature,
        op: Option<(u64, &Signature)>,
    ) -> Result<HeaderAction, MatchError> {
        let peer = key.peer;
        // P2p seqs are numbered per pair, so another sender's message may
        // share the running op's seq: only a frame whose receive is posted
        // belongs to the op; the rest wait (and are checked when their
        // receive is posted).
        let mine = op.filter(|(seq, _)| {
            *seq == key.seq && (!is_p2p_seq(key.seq) || self.posted.contains_key(&key))
        });
        if let Some((_, want)) = mine {
            if sig != want {
                return Err(MatchError::Mismatch { peer, sig: *sig });
            }
            if let Some(p) = self.posted.get(&key) {
                if p.len != len {
                    return Err(MatchError::Length {
                        peer,
                        tag: key.tag,
                        expected: p.len,
                        received: len,
                    });
                }
                if len == 0 {
                    let step = p.step;
                    self.posted.remove(&key);
                    return Ok(HeaderAction::Complete(step));
                }
                self.incoming[peer as usize] = Some(Incoming {
                    key,
                    dest: Dest::Posted,
                });
                return Ok(HeaderAction::Stream);
            }
        }
        if self.early.len() >= MAX_EARLY_MESSAGES {
            return Err(MatchError::TooManyEarly);
        }
        if self.early.contains_key(&key) {
            return Err(MatchError::Duplicate {
                seq: key.seq,
                tag: key.tag,
            });
        }
        self.early.insert(
            key,
            Early {
                len,
                sig: *sig,
                got: 0,
                chunks: Vec::new(),
            },
        );
        if len > 0 {
            self.incoming[peer as usize] = Some(Incoming {
                key,
                dest: Dest::Early,
            });
        }
        Ok(HeaderAction::Kept)
    }

    /// The next `n` bytes (`chunk`) of `peer`'s message in progress.
    /// `op_running`: an op is running to take bytes for a posted receive.
    ///
    /// # Errors
    /// [`MatchError::Overflow`] if they go past the posted receive's end.
    pub(crate) fn on_chunk(
        &mut self,
        peer: u32,
        chunk: C,
        n: u64,
        op_running: bool,
    ) -> Result<ChunkAction<C>, MatchError> {
        let Some(inc) = self.incoming[peer as usize] else {
            return Ok(ChunkAction::Unused(chunk));
        };
        match inc.dest {
            Dest::Early => {
                let Some(e) = self.early.get_mut(&inc.key) else {
                    return Ok(ChunkAction::Unused(chunk));
                };
                e.got += n;
                e.chunks.push(chunk);
                if e.got >= e.len {
                    self.incoming[peer as usize] = None;
                }
                Ok(ChunkAction::Kept)
            }
            Dest::Posted => {
                let Some(p) = self.posted.get_mut(&inc.key).filter(|_| op_running) else {
                    return Ok(ChunkAction::Unused(chunk));
                };
                if p.got + n > p.len {
                    return Err(MatchError::Overflow {
                        got: p.got,
                        n,
                        len: p.len,
                    });
                }
                let (offset, kind, step) = (p.got, p.kind, p.step);
                p.got += n;
                let done = p.got >= p.len;
                if done {
                    self.posted.remove(&inc.key);
                    self.incoming[peer as usize] = None;
                }
                Ok(ChunkAction::Place {
                    chunk,
                    kind,
                    offset,
                    step,
                    done,
                })
            }
        }
    }

    /// Where the next `n` bytes of `peer`'s message could be read straight
    /// into (a posted plain receive while an op runs): the destination
    /// region, at its offset. Nothing changes until [`Matcher::advance`].
    ///
    /// # Errors
    /// [`MatchError::Overflow`] if they go past the receive's end.
    pub(crate) fn direct(
        &self,
        peer: u32,
        n: u64,
        op_running: bool,
    ) -> Result<Option<Region>, MatchError> {
        let Some(inc) = self.incoming[peer as usize].filter(|i| i.dest == Dest::Posted) else {
            return Ok(None);
        };
        let Some(p) = self.posted.get(&inc.key).filter(|_| op_running) else {
            return Ok(None);
        };
        let RecvKind::Copy { dst } = p.kind else {
            return Ok(None);
        };
        if p.got + n > p.len {
            return Err(MatchError::Overflow {
                got: p.got,
                n,
                len: p.len,
            });
        }
        Ok(Some(Region::new(dst.buf, dst.offset + p.got, n)))
    }

    /// `n` bytes of `peer`'s message landed where [`Matcher::direct`]
    /// said; returns the receive's step if that completes it.
    pub(crate) fn advance(&mut self, peer: u32, n: u64) -> Option<StepId> {
        let inc = self.incoming[peer as usize]?;
        let p = self.posted.get_mut(&inc.key)?;
        p.got += n;
        if p.got < p.len {
            return None;
        }
        let step = p.step;
        self.posted.remove(&inc.key);
        self.incoming[peer as usize] = None;
        Some(step)
    }

    /// Posts receive `step` of the message `key`: `len` bytes, for the
    /// op with signature `sig`. A message that arrived first is handed
    /// over ([`PostAction::Early`]).
    ///
    /// # Errors
    /// [`MatchError::TwoReceives`]; against an early message,
    /// [`MatchError::Mismatch`], [`MatchError::Length`] (the message is
    /// dropped: the op fails).
    pub(crate) fn post(
        &mut self,
        key: Key,
        step: StepId,
        kind: RecvKind,
        len: u64,
        sig: &Signature,
    ) -> Result<PostAction<C>, MatchError> {
        if self.posted.contains_key(&key) {
            return Err(MatchError::TwoReceives {
                peer: key.peer,
                tag: key.tag,
            });
        }
        let mut posted = Posted {
            step,
            kind,
            len,
            got: 0,
        };
        let Some(early) = self.early.remove(&key) else {
            self.posted.insert(key, posted);
            return Ok(PostAction::Wait);
        };
        if early.sig != *sig {
            return Err(MatchError::Mismatch {
                peer: key.peer,
                sig: early.sig,
            });
        }
        if early.len != len {
            return Err(MatchError::Length {
                peer: key.peer,
                tag: key.tag,
                expected: len,
                received: early.len,
            });
        }
        if early.got > len {
            return Err(MatchError::Overflow {
                got: 0,
                n: early.got,
                len,
            });
        }
        let complete = early.got >= len;
        if !complete {
            // The rest is still streaming in: redirect it here.
            posted.got = early.got;
            if let Some(inc) = self.incoming[key.peer as usize]
                .as_mut()
                .filter(|i| i.key == key)
            {
                inc.dest = Dest::Posted;
            }
            self.posted.insert(key, posted);
        }
        Ok(PostAction::Early {
            chunks: early.chunks,
            complete,
        })
    }

    /// True if a receive from `peer` is posted.
    pub(crate) fn posted_from(&self, peer: u32) -> bool {
        self.posted.keys().any(|k| k.peer == peer)
    }

    /// True if a message of `peer`'s is in progress.
    pub(crate) fn receiving(&self, peer: u32) -> bool {
        self.incoming[peer as usize].is_some()
    }

    /// Stops taking `peer`'s message in progress (its bytes cannot come).
    pub(crate) fn stop_receiving(&mut self, peer: u32) {
        self.incoming[peer as usize] = None;
    }

    /// What this rank was receiving from `peer`, as (length, bytes
    /// received): a posted receive, else the early message in progress.
    pub(crate) fn progress_from(&self, peer: u32) -> Option<(u64, u64)> {
        let arriving = self.incoming[peer as usize]
            .and_then(|i| self.early.get(&i.key))
            .map(|e| (e.len, e.got));
        (self.posted.iter())
            .find(|(k, _)| k.peer == peer)
            .map(|(_, p)| (p.len, p.got))
            .or(arriving)
    }

    /// The posted receives as (peer, tag, bytes received, length), in no
    /// order.
    pub(crate) fn posted(&self) -> impl Iterator<Item = (u32, u32, u64, u64)> + '_ {
        (self.posted.iter()).map(|(k, p)| (k.peer, k.tag, p.got, p.len))
    }

    /// Drops every posted receive (their op failed).
    pub(crate) fn clear_posted(&mut self) {
        self.posted.clear();
    }

    /// The point-to-point messages that no receive took: (sender, tag,
    /// bytes), ascending.
    pub(crate) fn unreceived(&self) -> Vec<(u32, u64, u64)> {
        let mut v: Vec<(u32, u64, u64)> = (self.early.iter())
            .filter(|(k, _)| is_p2p_seq(k.seq))
            .map(|(k, e)| (k.peer, u64::from(k.tag), e.len))
            .collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_algos::schedule::BufKind;

    const SIG: Signature = [7; 32];
    const OTHER: Signature = [8; 32];

    fn key(peer: u32, tag: u32) -> Key {
        Key { peer, seq: 3, tag }
    }

    fn copy(len: u64) -> RecvKind {
        RecvKind::Copy {
            dst: Region::new(BufKind::Output, 100, len),
        }
    }

    #[test]
    fn a_posted_receive_takes_its_message_chunk_by_chunk() {
        let mut m = Matcher::<&str>::new(2);
        assert_eq!(m.post(key(1, 5), 9, copy(6), 6, &SIG), Ok(PostAction::Wait));
        let op = Some((3, &SIG));
        assert_eq!(
            m.on_header(key(1, 5), 6, &SIG, op),
            Ok(HeaderAction::Stream)
        );
        let first = m.on_chunk(1, "abcd", 4, true).unwrap();
        assert!(matches!(
            first,
            ChunkAction::Place {
                chunk: "abcd",
                offset: 0,
                step: 9,
                done: false,
                ..
            }
        ));
        assert_eq!(m.progress_from(1), Some((6, 4)));
        let last = m.on_chunk(1, "ef", 2, true).unwrap();
        assert!(matches!(
            last,
            ChunkAction::Place {
                offset: 4,
                done: true,
                ..
            }
        ));
        assert!(!m.receiving(1) && !m.posted_from(1));
        // Nothing is in progress now: a stray chunk is not used.
        assert_eq!(m.on_chunk(1, "x", 1, true), Ok(ChunkAction::Unused("x")));
    }

    #[test]
    fn an_early_message_waits_and_is_handed_over_when_posted() {
        let mut m = Matcher::<&str>::new(2);
        assert_eq!(
            m.on_header(key(1, 5), 6, &SIG, None),
            Ok(HeaderAction::Kept)
        );
        assert_eq!(m.on_chunk(1, "abcd", 4, false), Ok(ChunkAction::Kept));
        // Half arrived: the receive takes it, and the rest streams in.
        let got = m.post(key(1, 5), 9, copy(6), 6, &SIG).unwrap();
        assert_eq!(
            got,
            PostAction::Early {
                chunks: vec!["abcd"],
                complete: false
            }
        );
        let rest = m.on_chunk(1, "ef", 2, true).unwrap();
        assert!(matches!(
            rest,
            ChunkAction::Place {
                offset: 4,
                done: true,
                ..
            }
        ));
    }

    #[test]
    fn a_zero_length_message_completes_its_receive_at_the_header() {
        let mut m = Matcher::<()>::new(2);
        m.post(key(1, 0), 4, copy(0), 0, &SIG).unwrap();
        let op = Some((3, &SIG));
        assert_eq!(
            m.on_header(key(1, 0), 0, &SIG, op),
            Ok(HeaderAction::Complete(4))
        );
        // Early and empty: complete as soon as it is posted.
        assert_eq!(
            m.on_header(key(1, 1), 0, &SIG, None),
            Ok(HeaderAction::Kept)
        );
        assert!(!m.receiving(1));
        let got = m.post(key(1, 1), 5, copy(0), 0, &SIG).unwrap();
        assert_eq!(
            got,
            PostAction::Early {
                chunks: vec![],
                complete: true
            }
        );
    }

    #[test]
    fn lengths_and_signatures_are_checked_before_any_byte_is_handed_out() {
        let mut m = Matcher::<&str>::new(3);
        let op = Some((3, &SIG));
        m.post(key(1, 5), 9, copy(6), 6, &SIG).unwrap();
        assert_eq!(
            m.on_header(key(1, 5), 7, &SIG, op),
            Err(MatchError::Length {
                peer: 1,
                tag: 5,
                expected: 6,
                received: 7
            })
        );
        assert_eq!(
            m.on_header(key(2, 5), 6, &OTHER, op),
            Err(MatchError::Mismatch {
                peer: 2,
                sig: OTHER
            })
        );
        // Early ones are checked when their receive is posted.
        let mut m = Matcher::<&str>::new(3);
        m.on_header(key(1, 5), 7, &SIG, None).unwrap();
        m.on_header(key(2, 5), 6, &OTHER, None).unwrap();
        assert_eq!(
            m.post(key(1, 5), 9, copy(6), 6, &SIG),
            Err(MatchError::Length {
                peer: 1,
                tag: 5,
                expected: 6,
                received: 7
            })
        );
        assert_eq!(
            m.post(key(2, 5), 9, copy(6), 6, &SIG),
            Err(MatchError::Mismatch {
                peer: 2,
                sig: OTHER
            })
        );
    }

    #[test]
    fn bad_sequences_are_refused() {
        let mut m = Matcher::<&str>::new(2);
        m.post(key(1, 5), 9, copy(2), 2, &SIG).unwrap();
        assert_eq!(
            m.post(key(1, 5), 10, copy(2), 2, &SIG),
            Err(MatchError::TwoReceives { peer: 1, tag: 5 })
        );
        m.on_header(key(1, 5), 2, &SIG, Some((3, &SIG))).unwrap();
        assert_eq!(
            m.on_chunk(1, "abc", 3, true),
            Err(MatchError::Overflow {
                got: 0,
                n: 3,
                len: 2
            })
        );
        m.on_header(key(1, 6), 0, &SIG, None).unwrap();
        assert_eq!(
            m.on_header(key(1, 6), 0, &SIG, None),
            Err(MatchError::Duplicate { seq: 3, tag: 6 })
        );
    }

    #[test]
    fn a_p2p_frame_of_another_pair_with_the_running_seq_waits() {
        let seq = crate::tcp::P2P_SEQ_BIT | 4;
        let k = Key {
            peer: 1,
            seq,
            tag: 4,
        };
        let mut m = Matcher::<&str>::new(2);
        // Another pair's frame (no receive posted): kept, not checked.
        assert_eq!(
            m.on_header(k, 3, &OTHER, Some((seq, &SIG))),
            Ok(HeaderAction::Kept)
        );
        assert_eq!(m.unreceived(), vec![(1, 4, 3)]);
    }

    #[test]
    fn direct_reads_land_at_the_receive_offset() {
        let mut m = Matcher::<&str>::new(2);
        m.post(key(1, 5), 9, copy(6), 6, &SIG).unwrap();
        m.on_header(key(1, 5), 6, &SIG, Some((3, &SIG))).unwrap();
        assert_eq!(m.direct(1, 4, false), Ok(None), "no op runs");
        let at = m.direct(1, 4, true).unwrap().unwrap();
        assert_eq!((at.offset, at.len), (100, 4));
        assert_eq!(m.advance(1, 4), None);
        assert_eq!(
            m.direct(1, 3, true),
            Err(MatchError::Overflow {
                got: 4,
                n: 3,
                len: 6
            })
        );
        assert_eq!(m.direct(1, 2, true).unwrap().unwrap().offset, 104);
        assert_eq!(m.advance(1, 2), Some(9));
        assert!(!m.receiving(1));
    }

    /// One message of the proptest: its length, how its bytes are cut
    /// into chunks, and the length its receive is posted with.
    #[derive(Clone, Debug)]
    struct Msg {
        len: u64,
        chunks: Vec<u64>,
        post_len: u64,
    }

    fn msg() -> impl proptest::strategy::Strategy<Value = Msg> {
        use proptest::prelude::*;
        (0u64..12, proptest::collection::vec(1u64..5, 0..6), 0u8..8).prop_map(
            |(len, cuts, wrong)| {
                // Chunk sizes summing to len, from the cuts, then the rest.
                let mut chunks = Vec::new();
                let mut left = len;
                for c in cuts {
                    if left == 0 {
                        break;
                    }
                    let c = c.min(left);
                    chunks.push(c);
                    left -= c;
                }
                if left > 0 {
                    chunks.push(left);
                }
                // One message in eight is received with a wrong length.
                let post_len = if wrong == 0 { len + 1 } else { len };
                Msg {
                    len,
                    chunks,
                    post_len,
                }
            },
        )
    }

    /// A chunk's identity: (peer, message, chunk index).
    type Id = (u32, u32, usize);

    proptest::proptest! {
        /// Any interleaving of the peers' frames (each peer's in order:
        /// header, then its chunks, message after message) with the posted
        /// receives (in any order) hands every chunk to its own message's
        /// receive exactly once, at the right offset and in order, and
        /// completes each receive once; a length mismatch is reported for
        /// the message that has it, before any of its bytes is handed out;
        /// for a collective and for a point-to-point op.
        #[test]
        fn every_interleaving_delivers_each_message_to_its_receive(
            peers in proptest::collection::vec(proptest::collection::vec(msg(), 0..4), 1..4),
            picks in proptest::collection::vec(0usize..1000, 0..200),
            p2p: bool,
        ) {
            // A point-to-point op's frames belong to it only once their
            // receive is posted; the outcome is the same.
            let seq = if p2p { crate::tcp::P2P_SEQ_BIT | 3 } else { 3 };
            let n = peers.len() as u32 + 1;
            let mut m = Matcher::<Id>::new(n);
            let step = |p: u32, t: u32| p * 16 + t;
            // Per peer: the next message and the next chunk of it (None:
            // its header is next).
            let mut next: Vec<(usize, Option<usize>)> = vec![(0, None); peers.len()];
            let mut unposted: Vec<(u32, u32)> = (0..peers.len())
                .flat_map(|p| (0..peers[p].len()).map(move |t| (p as u32 + 1, t as u32)))
                .collect();
            // Per receive step: the chunks it got, with offsets, and
            // completions.
            let mut got: HashMap<StepId, Vec<(Id, u64)>> = HashMap::new();
            let mut done: HashMap<StepId, u32> = HashMap::new();
            let mut picks = picks.into_iter().chain(std::iter::repeat(0));
            let mut failed = None;
            loop {
                // What may happen next: a peer's next frame, or a post.
                let frames: Vec<usize> = (0..peers.len())
                    .filter(|&p| next[p].0 < peers[p].len())
                    .collect();
                let choices = frames.len() + unposted.len();
                if choices == 0 {
                    break;
                }
                let c = picks.next().unwrap_or(0) % choices;
                let r = if c < frames.len() {
                    let pi = frames[c];
                    let peer = pi as u32 + 1;
                    let (mi, ci) = next[pi];
                    let msg = &peers[pi][mi];
                    let k = Key { peer, seq, tag: mi as u32 };
                    match ci {
                        None => {
                            next[pi] = if msg.len == 0 { (mi + 1, None) } else { (mi, Some(0)) };
                            m.on_header(k, msg.len, &SIG, Some((seq, &SIG))).map(|a| {
                                if let HeaderAction::Complete(s) = a {
                                    *done.entry(s).or_default() += 1;
                                }
                            })
                        }
                        Some(ci) => {
                            next[pi] = if ci + 1 == msg.chunks.len() { (mi + 1, None) } else { (mi, Some(ci + 1)) };
                            m.on_chunk(peer, (peer, mi as u32, ci), msg.chunks[ci], true).map(|a| match a {
                                ChunkAction::Place { chunk, offset, step, done: d, .. } => {
                                    got.entry(step).or_default().push((chunk, offset));
                                    if d {
                                        *done.entry(step).or_default() += 1;
                                    }
                                }
                                ChunkAction::Kept => {}
                                ChunkAction::Unused(c) => panic!("chunk {c:?} lost"),
                            })
                        }
                    }
                } else {
                    let (peer, tag) = unposted.swap_remove(c - frames.len());
                    let msg = &peers[peer as usize - 1][tag as usize];
                    let k = Key { peer, seq, tag };
                    let s = step(peer, tag);
                    let kind = copy(msg.post_len);
                    m.post(k, s, kind, msg.post_len, &SIG).map(|a| {
                        if let PostAction::Early { chunks, complete } = a {
                            let mut off = 0;
                            for id in chunks {
                                got.entry(s).or_default().push((id, off));
                                off += peers[id.0 as usize - 1][id.1 as usize].chunks[id.2];
                            }
                            if complete {
                                *done.entry(s).or_default() += 1;
                            }
                        }
                    })
                };
                if let Err(e) = r {
                    failed = Some(e);
                    break;
                }
            }
            // Each receive got its own message's chunks, in order, at
            // their offsets (a prefix of them if the op failed).
            for (&s, list) in &got {
                let (peer, tag) = (s / 16, s % 16);
                let msg = &peers[peer as usize - 1][tag as usize];
                proptest::prop_assert_eq!(msg.len, msg.post_len, "a mismatched message was delivered");
                let mut off = 0;
                for (i, &(id, at)) in list.iter().enumerate() {
                    proptest::prop_assert_eq!(id, (peer, tag, i));
                    proptest::prop_assert_eq!(at, off);
                    off += msg.chunks[i];
                }
            }
            proptest::prop_assert!(done.values().all(|&d| d == 1), "completed twice: {:?}", done);
            let mismatched: Vec<(u32, u32)> = (0..peers.len())
                .flat_map(|p| (0..peers[p].len()).map(move |t| (p, t)))
                .filter(|&(p, t)| peers[p][t].len != peers[p][t].post_len)
                .map(|(p, t)| (p as u32 + 1, t as u32))
                .collect();
            match failed {
                None => {
                    proptest::prop_assert!(mismatched.is_empty(), "mismatch not reported");
                    // Every receive completed with all of its bytes.
                    for (p, msgs) in peers.iter().enumerate() {
                        for (t, msg) in msgs.iter().enumerate() {
                            let s = step(p as u32 + 1, t as u32);
                            proptest::prop_assert_eq!(done.get(&s), Some(&1));
                            let n = got.get(&s).map_or(0, |g| g.len());
                            proptest::prop_assert_eq!(n, msg.chunks.len());
                        }
                    }
                }
                Some(MatchError::Length { peer, tag, expected, received }) => {
                    proptest::prop_assert!(mismatched.contains(&(peer, tag)));
                    let msg = &peers[peer as usize - 1][tag as usize];
                    proptest::prop_assert_eq!((expected, received), (msg.post_len, msg.len));
                }
                Some(e) => proptest::prop_assert!(false, "unexpected error {e:?}"),
            }
        }
    }
}

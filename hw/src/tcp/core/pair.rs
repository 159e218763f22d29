//! Two ranks' cores wired together in memory (quinn-proto's test `Pair`):
//! one rank's [`SendQueue`] pieces become frames on an in-memory
//! connection that the other rank's [`Matcher`] files, with the writer
//! and the reader simulated. No sockets, no runtime.

use std::collections::VecDeque;

use hccl_algos::schedule::{BufKind, Region, StepId};

use super::matcher::{ChunkAction, HeaderAction, Key, Matcher, PostAction, RecvKind};
use super::sends::SendQueue;
use crate::tcp::rank::SEND_PIECE;
use crate::tcp::wire::{FrameHeader, FrameKind, Signature};

const SIG: Signature = [3; 32];
const SEQ: u64 = 0;

/// What goes over the in-memory connection.
enum Frame {
    Header(FrameHeader),
    Chunk(Vec<u8>),
}

/// One rank: its input and output buffers and its core's send and
/// receive sides towards the one peer.
struct Side {
    input: Vec<u8>,
    output: Vec<u8>,
    sends: SendQueue,
    matcher: Matcher<Vec<u8>>,
    /// Steps that completed here.
    done: Vec<StepId>,
}

impl Side {
    fn new(input: Vec<u8>) -> Self {
        let n = input.len();
        Side {
            input,
            output: vec![0; n],
            sends: SendQueue::default(),
            matcher: Matcher::new(2),
            done: Vec::new(),
        }
    }

    /// The simulated writer: every piece the window lets go, as frames on
    /// `wire`; a written piece leaves the window at once.
    fn write(&mut self, wire: &mut VecDeque<Frame>) {
        while let Some(p) = self.sends.next_piece(None) {
            if p.first {
                wire.push_back(Frame::Header(p.header));
            }
            let (a, n) = (p.src.offset as usize, p.src.len as usize);
            // The reader takes payloads in chunks of its own size.
            for c in self.input[a..a + n].chunks(SEND_PIECE / 3) {
                wire.push_back(Frame::Chunk(c.to_vec()));
            }
            self.sends.on_written();
            if p.last {
                self.sends.complete(p.seq, p.step);
                self.done.push(p.step);
            }
        }
    }

    /// The simulated reader: files one frame from `peer`.
    fn read(&mut self, peer: u32, frame: Frame) {
        match frame {
            Frame::Header(h) => {
                let key = Key {
                    peer,
                    seq: h.seq,
                    tag: h.tag,
                };
                let a = self
                    .matcher
                    .on_header(key, h.len, &h.sig, Some((SEQ, &SIG)));
                if let HeaderAction::Complete(step) = a.unwrap() {
                    self.done.push(step);
                }
            }
            Frame::Chunk(data) => {
                let n = data.len() as u64;
                match self.matcher.on_chunk(peer, data, n, true).unwrap() {
                    ChunkAction::Place {
                        chunk,
                        kind,
                        offset,
                        step,
                        done,
                    } => {
                        self.place(kind, offset, &chunk);
                        if done {
                            self.done.push(step);
                        }
                    }
                    ChunkAction::Kept => {}
                    ChunkAction::Unused(_) => panic!("a chunk was lost"),
                }
            }
        }
    }

    fn place(&mut self, kind: RecvKind, offset: u64, data: &[u8]) {
        let RecvKind::Copy { dst } = kind else {
            panic!("the pair only copies")
        };
        let at = (dst.offset + offset) as usize;
        self.output[at..at + data.len()].copy_from_slice(data);
    }

    fn post(&mut self, peer: u32, step: StepId, tag: u32) {
        let dst = Region::new(BufKind::Output, 0, self.output.len() as u64);
        let key = Key {
            peer,
            seq: SEQ,
            tag,
        };
        let len = dst.len;
        let a = self
            .matcher
            .post(key, step, RecvKind::Copy { dst }, len, &SIG);
        if let PostAction::Early { chunks, complete } = a.unwrap() {
            let mut offset = 0;
            for c in chunks {
                self.place(RecvKind::Copy { dst }, offset, &c);
                offset += c.len() as u64;
            }
            if complete {
                self.done.push(step);
            }
        }
    }

    fn send(&mut self, step: StepId, tag: u32) {
        let len = self.input.len() as u64;
        let header = FrameHeader {
            kind: FrameKind::Data,
            session: 1,
            comm: 2,
            seq: SEQ,
            tag,
            len,
            sig: SIG,
        };
        let src = Region::new(BufKind::Input, 0, len);
        self.sends.push(SEQ, step, src, header);
    }
}

/// Rank 0 and rank 1 swap their buffers (one ring step each way), the
/// receive posted after `early` frames of the peer's message have
/// arrived: every byte lands where it belongs and all four steps complete
/// once.
fn swap(len: usize, early: usize) {
    let bytes = |seed: u8| {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    };
    let mut s = [Side::new(bytes(0x5a)), Side::new(bytes(0xa5))];
    let mut wires = [VecDeque::new(), VecDeque::new()]; // wires[r]: frames to rank r
    for side in &mut s {
        side.send(1, 7);
    }
    let mut posted = [false; 2];
    let mut arrived = [0usize; 2];
    loop {
        for r in 0..2 {
            s[r].write(&mut wires[1 - r]);
        }
        let mut moved = false;
        for r in 0..2 {
            if !posted[r] && (arrived[r] >= early || wires[r].is_empty()) {
                s[r].post(1 - r as u32, 2, 7);
                posted[r] = true;
                moved = true;
            }
            if let Some(f) = wires[r].pop_front() {
                s[r].read(1 - r as u32, f);
                arrived[r] += 1;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    for r in 0..2 {
        assert!(posted[r], "rank {r} never posted its receive");
        assert_eq!(s[r].output, s[1 - r].input, "rank {r}'s output");
        let mut done = s[r].done.clone();
        done.sort_unstable();
        assert_eq!(done, vec![1, 2], "rank {r}'s completed steps");
        assert_eq!(s[r].sends.in_progress(), 0);
    }
}

#[test]
fn two_ranks_swap_a_multi_piece_message_posted_before_it_arrives() {
    swap(3 * SEND_PIECE + 17, 0);
}

#[test]
fn two_ranks_swap_a_multi_piece_message_posted_mid_way() {
    swap(3 * SEND_PIECE + 17, 5);
}

#[test]
fn two_ranks_swap_a_message_that_arrived_whole_before_its_receive() {
    swap(1000, usize::MAX);
}

#[test]
fn two_ranks_swap_empty_messages() {
    swap(0, 1);
}

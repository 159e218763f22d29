//! Point-to-point send and receive (HCCL's `HcclSend` / `HcclRecv`).
//!
//! Only the two ranks take part, so a p2p op does not consume the
//! communicator-wide op seq that collectives share: each ordered
//! (sender, receiver) pair numbers its own messages, carried in the frame's
//! seq as [`hccl_hw::tcp::P2P_SEQ_BIT`]` | n`, a namespace collectives never
//! use. There is no op-signature ring; instead the message carries
//! (count, dtype) and the receiver checks it against its own call before any
//! byte lands in its buffer. Messages of one pair arrive in the order sent.

use hccl_algos::collective::{CollectiveArgs, CollectiveKind, OpSignature, P2p};
use hccl_algos::layout::GroupLayout;
use hccl_algos::transport::OpContext;
use hccl_hw::tcp::{OpBuffers, OpInfo, P2P_SEQ_BIT};

use super::element::{bytes, bytes_mut};
use super::{lock, pick_algo, signature, Backend, Comm, CommError, DataType, Element, ReduceOp};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Send,
    Recv,
}

impl Comm {
    /// Sends `buf` to rank `dest` (HCCL's `HcclSend`). Blocks until the
    /// message is handed to the transport; `dest` must call
    /// [`Comm::recv`] with the same length and element type. Messages
    /// between one pair arrive in the order sent; other ranks take no part.
    ///
    /// # Errors
    /// [`CommError::Peer`] at once if `dest` is out of range or this rank;
    /// transport errors. Not available on `HCCL_BACKEND=sim`
    /// ([`CommError::Unsupported`]).
    pub fn send<T: Element>(&self, buf: &[T], dest: u32) -> Result<(), CommError> {
        self.send_bytes(bytes(buf), buf.len() as u64, T::DTYPE, dest)
    }

    /// Receives `buf.len()` elements from rank `src` into `buf` (HCCL's
    /// `HcclRecv`). Blocks until the whole message has arrived.
    ///
    /// # Errors
    /// [`CommError::Peer`] at once if `src` is out of range or this rank;
    /// a mismatch error naming both counts (or data types) if the sender's
    /// message differs, raised before `buf` is touched; transport errors.
    /// Not available on `HCCL_BACKEND=sim` ([`CommError::Unsupported`]).
    pub fn recv<T: Element>(&self, buf: &mut [T], src: u32) -> Result<(), CommError> {
        let count = buf.len() as u64;
        self.recv_bytes(bytes_mut(buf), count, T::DTYPE, src)
    }

    /// [`Comm::send`] on bytes: `buf` holds `count` elements of `dtype`
    /// (`count * dtype.size()` bytes).
    ///
    /// # Errors
    /// As [`Comm::send`]; [`CommError::Buffer`] if the length is wrong.
    pub fn send_bytes(
        &self,
        buf: &[u8],
        count: u64,
        dtype: DataType,
        dest: u32,
    ) -> Result<(), CommError> {
        self.p2p(Dir::Send, count, dtype, dest, buf, &mut [])
    }

    /// [`Comm::recv`] on bytes: `buf` receives `count` elements of `dtype`
    /// (`count * dtype.size()` bytes).
    ///
    /// # Errors
    /// As [`Comm::recv`]; [`CommError::Buffer`] if the length is wrong.
    pub fn recv_bytes(
        &self,
        buf: &mut [u8],
        count: u64,
        dtype: DataType,
        src: u32,
    ) -> Result<(), CommError> {
        self.p2p(Dir::Recv, count, dtype, src, &[], buf)
    }

    fn p2p(
        &self,
        dir: Dir,
        count: u64,
        dtype: DataType,
        peer: u32,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<(), CommError> {
        let sh = &*self.shared;
        let (op, rank) = (if dir == Dir::Send { "Send" } else { "Recv" }, sh.rank);
        if peer >= sh.size || peer == rank {
            return Err(CommError::Peer {
                op,
                peer,
                rank,
                size: sh.size,
            });
        }
        let (src, dst) = match dir {
            Dir::Send => (rank, peer),
            Dir::Recv => (peer, rank),
        };
        let args = CollectiveArgs::p2p(false, vec![P2p { src, dst, count }], dtype, sh.size);
        args.validate()?;
        let (inb, outb) = args.io_bytes(rank);
        for (what, expected, got) in [
            ("send buffer", inb, input.len()),
            ("receive buffer", outb, output.len()),
        ] {
            if expected != got as u64 {
                return Err(CommError::Buffer {
                    op: op.into(),
                    what,
                    expected,
                    got: got as u64,
                });
            }
        }
        // Run after every op this rank called before (collectives hold tickets).
        let after = *lock(&sh.tickets);
        let mut st = lock(&sh.state);
        while st.turn < after && st.backend.is_some() {
            st = sh.turn_cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(e) = lock(&sh.error).clone() {
            return Err(CommError::Broken(e.to_string()));
        }
        let st = &mut *st;
        let t = match st.backend.as_mut() {
            None => {
                return Err(CommError::Broken(format!(
                    "rank {rank}: the communicator was aborted"
                )))
            }
            Some(Backend::Sim(_)) => {
                return Err(CommError::Unsupported(format!(
                    "{op} on HCCL_BACKEND=sim: the simulator backend runs one scenario per op with \
                     every rank, so a lone send cannot be paired with a lone recv; use HCCL_BACKEND=tcp"
                )))
            }
            Some(Backend::Tcp(t)) => t,
        };
        let counter = match dir {
            Dir::Send => &mut st.p2p_sent[peer as usize],
            Dir::Recv => &mut st.p2p_received[peer as usize],
        };
        let n = *counter;
        *counter += 1;
        let r = (|| -> Result<(), CommError> {
            let spec = pick_algo(&args)?;
            let layout = GroupLayout::flat(sh.size);
            let (sizes, plan) = hccl_algos::algo::plan(&args, &spec, &layout, rank)?;
            st.scratch.clear();
            st.scratch.resize(sizes.scratch as usize, 0);
            let sig = OpSignature {
                kind: CollectiveKind::SendRecv,
                count,
                dtype,
                op: ReduceOp::Sum,
                root: 0,
            };
            let describe = |remote: &hccl_hw::tcp::wire::Signature, from| {
                signature::describe_p2p(&sig, rank, remote, from)
            };
            let name = format!("{op} (rank {src} -> rank {dst}, message {n} of the pair)");
            let info = OpInfo {
                name: &name,
                sig: signature::encode(&sig),
                describe: &describe,
            };
            let ctx = OpContext {
                comm: sh.id,
                seq: P2P_SEQ_BIT | n,
                rank,
                dtype,
            };
            let bufs = OpBuffers::separate(input, output, &mut st.scratch);
            t.run(&ctx, &info, bufs, plan)?;
            Ok(())
        })();
        if let Err(e) = &r {
            lock(&sh.error).get_or_insert(e.clone());
        }
        r
    }
}

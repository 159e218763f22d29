//! The simulator backend (`HCCL_BACKEND=sim`): every rank is a
//! communicator of this process on one shared [`SimWorld`], which runs
//! each op as an `hccl_sim` data-mode scenario once every rank has called
//! it, on the tree's simulated cluster (`sim_cluster`: fabric, faults,
//! seed, virtual clocks), and compares the ranks' op signatures first, as
//! TCP does.

use std::sync::Arc;
use std::time::Duration;

use hccl_hw::tcp::AbortKind;

use super::sim_cluster::{Fate, SimRank};
use super::sim_world::SimWorld;
use super::{Backend, Interrupt, Prepared, Splitter};
use crate::comm::p2p::{P2pBuf, P2pItem, P2pKind};
use crate::comm::plan::HostFit;
use crate::comm::profile::OpTime;
use crate::comm::recorder;
use crate::comm::run::UserBufs;
use crate::comm::{BackendKind, CommError, Shared};

/// One rank of a simulated communicator.
pub(crate) struct SimBackend {
    world: Arc<SimWorld>,
    rank: u32,
}

/// Where `n` simulated ranks run, for planning: one host, and whether
/// they fit its CPUs as TCP computes it for `n` ranks on this host (each
/// TCP rank reports `available_parallelism`, and a host's ranks fit when
/// they are no more than that), so that a simulated communicator runs the
/// very schedule TCP would run for the same call with every rank on this
/// host (sliced when TCP would slice).
pub(crate) fn fit(n: u32) -> HostFit {
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    HostFit {
        hosts: 1,
        ranks_fit_cpus: n as usize <= cpus,
    }
}

impl SimBackend {
    /// Rank `rank` of `world`.
    pub(crate) fn new(world: Arc<SimWorld>, rank: u32) -> SimBackend {
        SimBackend { world, rank }
    }
}

impl Drop for SimBackend {
    fn drop(&mut self) {
        // The peers learn that this rank is gone (a lost peer on TCP).
        self.world.leave(self.rank);
    }
}

impl Backend for SimBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Sim
    }

    fn host_fit(&self) -> HostFit {
        self.world.host_fit()
    }

    fn exec_timeout(&self) -> Option<Duration> {
        self.world.exec_timeout()
    }

    fn interrupter(&self) -> Interrupt {
        let (w, rank) = (Arc::clone(&self.world), self.rank);
        Arc::new(move |reason: &str| w.fail(rank, reason, AbortKind::Failed))
    }

    fn run(
        &mut self,
        sh: &Shared,
        op: Prepared<'_>,
        user: UserBufs<'_>,
    ) -> Result<OpTime, CommError> {
        let args = op.args;
        let rank = self.rank;
        let (inb, outb) = args.io_bytes(rank);
        let alias = args.alias(rank);
        let (input, out_at) = match (&user, alias) {
            (UserBufs::Separate(i, _), _) => (i.to_vec(), 0),
            (UserBufs::InPlace(b), Some(a)) => (
                b[a.input_at as usize..(a.input_at + inb) as usize].to_vec(),
                a.output_at,
            ),
            (UserBufs::InPlace(b), None) => (b[..inb as usize].to_vec(), 0),
        };
        let global = self.world.global_rank(rank);
        let me = self.world.cluster.call(global);
        // Its flight record shows the call the plan made: none for a
        // skipped call, the `wrong_args` fault's arguments.
        if me.fate == Fate::Skip {
            recorder::skipped(sh);
        }
        if let Some(c) = self.world.cluster.wrong_args(global, me.call) {
            recorder::called_as(sh, c);
        }
        let name = format!("comm '{}' {:?} #{}", sh.name, args.kind, op.seq);
        let ran = self.world.run(&sh.name, rank, me, op, input);
        let Some((out, (start, end))) = ran.map_err(|e| e.in_op(&name))? else {
            // Skipped by the fault plan: nothing written, no time taken.
            let now = self.world.cluster.clock(global);
            return Ok(OpTime::Simulated(now, now));
        };
        let dst: &mut [u8] = match user {
            UserBufs::Separate(_, o) => o,
            UserBufs::InPlace(b) => &mut b[out_at as usize..(out_at + outb) as usize],
        };
        if out.len() != dst.len() {
            return Err(CommError::Sim(format!(
                "{:?}: simulator returned {} bytes for a {}-byte output",
                args.kind,
                out.len(),
                dst.len()
            )));
        }
        dst.copy_from_slice(&out);
        Ok(OpTime::Simulated(start, end))
    }

    /// Leave every send, take every receive, then wait for sends the
    /// pair's `HCCL_BUFFSIZE` does not cover.
    fn p2p(
        &mut self,
        sh: &Shared,
        name: &str,
        items: &mut [P2pItem<'_>],
        numbers: &[u64],
    ) -> Result<(), CommError> {
        let (w, me) = (&self.world, self.rank);
        let call = w.cluster.call(w.global_rank(me));
        match call.fate {
            // A rank that never calls send or recv: its peers wait.
            Fate::Skip => {
                recorder::skipped(sh);
                return Ok(());
            }
            Fate::Crash => return Err(w.wait_broken(name).in_op(name)),
            Fate::Run => {}
        }
        for (it, &n) in items.iter().zip(numbers) {
            if let P2pBuf::Send(b) = &it.buf {
                w.post_send(name, it.msg(me, n), b.to_vec(), call)
                    .map_err(|e| e.in_op(name))?;
            }
        }
        for (it, &n) in items.iter_mut().zip(numbers) {
            let m = it.msg(me, n);
            if let P2pBuf::Recv(b) = &mut it.buf {
                let out = w
                    .recv((&sh.name, name), m, call)
                    .map_err(|e| e.in_op(name))?;
                if out.len() != b.len() {
                    return Err(CommError::Sim(format!(
                        "{name}: simulator returned {} bytes for a {}-byte receive",
                        out.len(),
                        b.len()
                    )));
                }
                b.copy_from_slice(&out);
            }
        }
        for (it, &n) in items.iter().zip(numbers) {
            if it.kind() == P2pKind::Send {
                w.wait_sent(name, it.msg(me, n))
                    .map_err(|e| e.in_op(name))?;
            }
        }
        Ok(())
    }

    fn fail(&mut self, reason: &str, kind: AbortKind) {
        self.world.fail(self.rank, reason, kind);
    }

    fn async_error(&mut self) -> Option<CommError> {
        // Failures reach the ranks through their next op.
        None
    }

    fn unreceived(&mut self) -> Vec<(u32, u64, u64)> {
        self.world.unreceived(self.rank)
    }

    fn never_started(&mut self, seq: u64) -> Vec<u32> {
        self.world.never_called(seq, self.rank)
    }

    fn sim_rank(&self) -> Option<SimRank> {
        Some(SimRank {
            cluster: Arc::clone(&self.world.cluster),
            global: self.world.global_rank(self.rank),
        })
    }

    fn splitter(&self) -> Box<dyn Splitter> {
        Box::new(SimSplitter(Arc::clone(&self.world)))
    }
}

/// A simulated split or sub-communicator: its rank 0 makes the sub-world
/// and the token is the sub-world's number in the parent. It needs no
/// data from the parent, but the token still travels over it as TCP's
/// root info does, so the parent's later ops have the same sequence
/// numbers on both backends.
struct SimSplitter(Arc<SimWorld>);

impl Splitter for SimSplitter {
    fn token_len(&self) -> usize {
        8
    }

    fn host(&self, members: &[u32]) -> Result<Vec<u8>, CommError> {
        Ok(self.0.host_sub_world(members).to_le_bytes().to_vec())
    }

    fn join(
        self: Box<Self>,
        token: &[u8],
        name: &str,
        _size: u32,
        new_rank: u32,
    ) -> Result<Box<dyn Backend>, CommError> {
        let id = <[u8; 8]>::try_from(token).map(u64::from_le_bytes).ok();
        let sub = id.and_then(|id| self.0.join_sub_world(id)).ok_or_else(|| {
            CommError::Broken(format!(
                "{name}: the simulated sub-world of rank 0 is unknown"
            ))
        })?;
        Ok(Box::new(SimBackend::new(sub, new_rank)))
    }
}

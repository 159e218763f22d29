//! Closing a communicator: goodbyes, flushing the writers, draining the
//! peers, withdrawing what is lent.

use std::time::{Duration, Instant};

use super::tuning::{ABORT_FLUSH, LINGER};
use super::TcpRank;
use crate::tcp::io::{Event, Outgoing};
use crate::tcp::wire::{FrameHeader, FrameKind};

impl TcpRank {
    /// Says goodbye to every peer and lets the writers flush (at most
    /// [`LINGER`]). With `linger`, it then reads until every peer has said
    /// goodbye too (at most [`LINGER`]): closing a socket with unread bytes
    /// makes the kernel send a reset, which could destroy data a slower peer
    /// has not read yet.
    pub(super) fn shutdown(&mut self, linger: bool) {
        if self.health.closed() {
            return;
        }
        self.send_deferred_abort();
        self.health.close();
        let bye = FrameHeader {
            kind: FrameKind::Bye,
            session: self.session,
            comm: self.comm,
            seq: 0,
            tag: 0,
            len: 0,
            sig: [0; 32],
        }
        .encode()
        .to_vec();
        for p in 0..self.nranks {
            if p != self.rank {
                self.send_control(p, bye.clone());
            }
        }
        self.flush_outbox();
        for p in 0..self.nranks {
            if p != self.rank {
                if let Some(tx) = &self.peers[p as usize].tx {
                    let _ = tx.send(Outgoing::End);
                }
            }
        }
        for p in &mut self.peers {
            p.tx = None;
        }
        self.set_shm_polling(false);
        let Some(rt) = self.runtime.as_ref() else {
            return;
        };
        let writers = std::mem::take(&mut self.writers);
        let broken = self.health.broken().is_some();
        let bound = if broken { ABORT_FLUSH } else { LINGER };
        let end = Instant::now() + bound;
        rt.block_on(async {
            let _ = tokio::time::timeout(bound, async {
                for w in writers {
                    let _ = w.await;
                }
            })
            .await;
        });
        if linger && !broken {
            // Peers in this process (`Comm::init_all`) read only while
            // their own thread runs an op, so an idle one never says
            // goodbye: waiting for them cost LINGER per communicator when
            // a program dropped its communicators one after another. What
            // they sent is drained below instead, so closing sends no reset.
            let me = std::process::id();
            let mut waiting: Vec<bool> = self
                .peers
                .iter()
                .enumerate()
                .map(|(p, peer)| {
                    p as u32 != self.rank && peer.dead.is_none() && peer.cma_pid != Some(me)
                })
                .collect();
            // The peer whose connection ended, if `ev` says so.
            let handle = |rank: &mut TcpRank, ev: Event| match ev {
                Event::Closed { peer, .. } | Event::Protocol { peer, .. } => Some(peer),
                Event::CmaAck { peer, desc } => {
                    // Acked: the peer is done with it.
                    rank.peers[peer as usize].sends.ack_quietly(desc);
                    None
                }
                _ => None,
            };
            while waiting.contains(&true) && Instant::now() < end {
                let wait = end.saturating_duration_since(Instant::now());
                let Some(ev) = self.next_event(Some(wait)) else {
                    break;
                };
                if let Some(p) = handle(self, ev) {
                    waiting[p as usize] = false;
                }
            }
            while let Some(ev) = self.next_event(Some(Duration::ZERO)) {
                handle(self, ev);
            }
        }
        // Only a failed op leaves pieces lent, and its lend word was
        // poisoned before it returned; poison once more in case.
        self.lend_word.poison();
        for (p, peer) in self.peers.iter_mut().enumerate() {
            let n = peer.sends.lent();
            if n > 0 {
                let bytes = peer.sends.forget_lent();
                tracing::debug!(
                    "hccl rank {}: {n} piece(s) ({bytes} bytes) lent to rank {p} were never acked; withdrawn by the lend word",
                    self.rank
                );
            }
        }
        for p in &self.peers {
            if let Some(b) = &p.budget {
                b.close();
            }
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

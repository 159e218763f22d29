//! Matching: every Send pairs with exactly one Recv/RecvReduce of the same
//! `(sender, receiver, tag)` and length.

use std::collections::HashMap;

use super::VerifyError;
use crate::schedule::{Op, Rank, RankSchedule, StepId};

/// `partner[rank][step]` = the matching step on the peer (u32::MAX for local steps).
pub(super) type Partners = Vec<Vec<StepId>>;

pub(super) fn match_messages(scheds: &[RankSchedule]) -> Result<Partners, VerifyError> {
    // (sender, receiver, tag) -> step on the sender / on the receiver.
    let mut sends: HashMap<(Rank, Rank, u32), StepId> = HashMap::new();
    let mut recvs: HashMap<(Rank, Rank, u32), StepId> = HashMap::new();
    for s in scheds {
        for (i, step) in s.steps.iter().enumerate() {
            let i = i as StepId;
            let (map, key) = match step.op {
                Op::Send { peer, tag, .. } => (&mut sends, (s.rank, peer, tag)),
                Op::Recv { peer, tag, .. } | Op::RecvReduce { peer, tag, .. } => {
                    (&mut recvs, (peer, s.rank, tag))
                }
                _ => continue,
            };
            if let Some(first) = map.insert(key, i) {
                return Err(VerifyError::DuplicateMessage {
                    rank: s.rank,
                    first,
                    second: i,
                    sender: key.0,
                    receiver: key.1,
                    tag: key.2,
                });
            }
        }
    }
    let mut partner: Partners = scheds
        .iter()
        .map(|s| vec![StepId::MAX; s.steps.len()])
        .collect();
    // Deterministic error order: walk the schedules, not the maps.
    for s in scheds {
        for (i, step) in s.steps.iter().enumerate() {
            let i = i as StepId;
            match step.op {
                Op::Send { peer, tag, src } => {
                    let Some(&j) = recvs.get(&(s.rank, peer, tag)) else {
                        return Err(VerifyError::Unmatched {
                            rank: s.rank,
                            step: i,
                            what: "send",
                            missing: "receive",
                            sender: s.rank,
                            receiver: peer,
                            peer,
                            tag,
                        });
                    };
                    let recv_len = scheds[peer as usize].steps[j as usize].op.bytes();
                    if recv_len != src.len {
                        return Err(VerifyError::LengthMismatch {
                            sender: s.rank,
                            receiver: peer,
                            tag,
                            send_step: i,
                            recv_step: j,
                            send_len: src.len,
                            recv_len,
                        });
                    }
                    partner[s.rank as usize][i as usize] = j;
                    partner[peer as usize][j as usize] = i;
                }
                Op::Recv { peer, tag, .. } | Op::RecvReduce { peer, tag, .. }
                    if !sends.contains_key(&(peer, s.rank, tag)) =>
                {
                    return Err(VerifyError::Unmatched {
                        rank: s.rank,
                        step: i,
                        what: "receive",
                        missing: "send",
                        sender: peer,
                        receiver: s.rank,
                        peer,
                        tag,
                    });
                }
                _ => {}
            }
        }
    }
    Ok(partner)
}

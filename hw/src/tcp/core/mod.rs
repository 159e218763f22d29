//! The TCP transport's protocol core, without I/O: plain state machines
//! that the driver ([`super::rank`]) feeds events (a frame arrived, a
//! receive was posted, a peer was lost, the time is `now`) and that answer
//! with what to do (deliver these bytes there, complete this step, fail
//! with this error). No sockets, no tokio, no clock reads: time comes in
//! as an argument, so every rule here has unit tests without a network
//! (quinn-proto's shape: a protocol state machine, driven by quinn's
//! runtime).
//!
//! - [`matcher`]: data messages to posted receives (peer, op seq, tag),
//!   early messages, lengths.
//! - [`agreement`]: the op signature check around all ranks, the steps it
//!   holds back, the "late" and "agreed" words.
//! - [`failure`]: broken or usable, what a failure tells the peers, peer
//!   aborts and lost connections, withdrawn loans, a timeout's words.
//! - [`sends`]: one peer's sends: pieces, how far ahead, lent pieces and
//!   their acks, completion.
//!
//! Tests in `pair` wire two ranks' cores together in memory.

pub(crate) mod agreement;
pub(crate) mod failure;
pub(crate) mod matcher;
#[cfg(test)]
mod pair;
pub(crate) mod sends;

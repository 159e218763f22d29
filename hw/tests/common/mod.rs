//! Helpers shared by the transport's integration tests (`loopback.rs`,
//! `cma.rs`): loopback settings, a bootstrap root, and a hand-written
//! all-reduce plan run over a [`TcpRank`], so the transport is tested
//! apart from the algorithms.
#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;

use hccl_algos::schedule::{BufKind, Deps, Op, Rank, RankPlan, Region, Step};
use hccl_algos::transport::OpContext;
use hccl_algos::{DataType, ReduceOp};
use hccl_hw::tcp::wire::Signature;
use hccl_hw::tcp::{OpBuffers, OpInfo, RootInfo, TcpConfig, TcpError, TcpRank};

/// The communicator id of every test op.
pub const COMM: u64 = 0xC0FFEE;

/// Loopback settings, generous for busy CI machines (timeout tests set
/// their own).
pub fn cfg() -> TcpConfig {
    TcpConfig {
        if_ip: Some("127.0.0.1".parse().unwrap()),
        connect_timeout: Duration::from_secs(30),
        exec_timeout: Some(Duration::from_secs(20)),
        ..TcpConfig::default()
    }
}

/// A bootstrap root on a free loopback port.
pub fn root(cfg: &TcpConfig) -> RootInfo {
    RootInfo::create_at(cfg, "127.0.0.1:0".parse().unwrap(), "HCCL_IF_BASE_PORT").unwrap()
}

/// Names a signature disagreement with rank `peer`.
pub fn describe(remote: &Signature, peer: Rank) -> String {
    format!(
        "signature mismatch with rank {peer} (remote first byte {})",
        remote[0]
    )
}

/// Op `seq` of rank `rank` on [`COMM`], fp32.
pub fn ctx(rank: u32, seq: u64) -> OpContext {
    OpContext {
        comm: COMM,
        seq,
        rank,
        dtype: DataType::Fp32,
    }
}

/// An "AllReduce" whose signature is `sig`.
pub fn op_info(sig: Signature) -> OpInfo<'static> {
    OpInfo {
        name: "AllReduce",
        sig,
        describe: &describe,
    }
}

/// A step of a hand-written plan.
pub fn step(op: Op, deps: Deps) -> Step {
    Step { op, deps }
}

/// A one-step plan: `op` alone.
pub fn one_step(op: Op) -> RankPlan {
    Box::new(vec![step(op, Deps::NONE)].into_iter())
}

/// The one-step plan sending the first `len` input bytes to `peer` (tag 0).
pub fn send_plan(peer: Rank, len: u64) -> RankPlan {
    one_step(Op::Send {
        peer,
        tag: 0,
        src: Region::new(BufKind::Input, 0, len),
    })
}

/// The one-step plan receiving `len` bytes from `peer` (tag 0) into the
/// start of the output.
pub fn recv_plan(peer: Rank, len: u64) -> RankPlan {
    one_step(Op::Recv {
        peer,
        tag: 0,
        dst: Region::new(BufKind::Output, 0, len),
    })
}

/// Direct all-reduce by hand: copy input to output, send input to every
/// peer, receive-and-reduce from every peer in turn.
pub fn naive_allreduce(rank: u32, n: u32, bytes: u64) -> RankPlan {
    let all_in = Region::new(BufKind::Input, 0, bytes);
    let all_out = Region::new(BufKind::Output, 0, bytes);
    let mut steps = vec![step(
        Op::Copy {
            src: all_in,
            dst: all_out,
        },
        Deps::NONE,
    )];
    for p in (0..n).filter(|&p| p != rank) {
        steps.push(step(
            Op::Send {
                peer: p,
                tag: 7,
                src: all_in,
            },
            Deps::NONE,
        ));
    }
    let mut last = 0;
    for p in (0..n).filter(|&p| p != rank) {
        let id = steps.len() as u32;
        steps.push(step(
            Op::RecvReduce {
                peer: p,
                tag: 7,
                local: all_out,
                dst: all_out,
                op: ReduceOp::Sum,
            },
            Deps::on(&[last]),
        ));
        last = id;
    }
    Box::new(steps.into_iter())
}

pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Runs [`naive_allreduce`] of `input` as op `seq` with signature `sig`;
/// returns the output.
pub fn run_allreduce(
    t: &mut TcpRank,
    seq: u64,
    input: &[u8],
    sig: Signature,
) -> Result<Vec<u8>, TcpError> {
    let (rank, n) = (t.rank(), t.nranks());
    let mut out = vec![0u8; input.len()];
    let bufs = OpBuffers::separate(input, &mut out, &mut []);
    t.run(
        &ctx(rank, seq),
        &op_info(sig),
        bufs,
        naive_allreduce(rank, n, input.len() as u64),
    )?;
    Ok(out)
}

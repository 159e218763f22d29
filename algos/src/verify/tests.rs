//! Deliberately broken schedules, each caught with its specific error.

use super::*;
use crate::algo::{schedule, AlgoSpec, Algorithm};
use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::dtype::{DataType, ReduceOp};
use crate::layout::GroupLayout;
use crate::schedule::{Deps, Op, Step};

fn ring_allreduce(p: u32, count: u64) -> (CollectiveArgs, Vec<RankSchedule>) {
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, p);
    let s = schedule(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(p),
    )
    .unwrap();
    (args, s)
}

#[test]
fn ring_allreduce_passes() {
    let (args, s) = ring_allreduce(4, 10);
    let rep = verify(&args, &s).unwrap();
    assert_eq!(rep.messages, 4 * 2 * 3);
    assert_eq!(rep.critical_path_messages, 6);
}

#[test]
fn dropped_receive_is_unmatched() {
    let (args, mut s) = ring_allreduce(4, 10);
    // Rank 2's step 1 is the first RecvReduce (from rank 1, tag 0).
    s[2].steps[1].op = Op::Copy {
        src: Region::new(BufKind::Output, 0, 0),
        dst: Region::new(BufKind::Output, 0, 0),
    };
    let e = verify(&args, &s).unwrap_err();
    assert_eq!(
        e,
        VerifyError::Unmatched {
            rank: 1,
            step: 0,
            what: "send",
            missing: "receive",
            sender: 1,
            receiver: 2,
            peer: 2,
            tag: 0
        },
        "{e}"
    );
}

#[test]
fn length_mismatch_is_named() {
    let (args, mut s) = ring_allreduce(4, 10);
    if let Op::Send { src, .. } = &mut s[0].steps[0].op {
        src.len -= 4;
    }
    let e = verify(&args, &s).unwrap_err();
    assert!(
        matches!(
            e,
            VerifyError::LengthMismatch {
                sender: 0,
                receiver: 1,
                tag: 0,
                send_len: 4,
                recv_len: 8,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn region_out_of_bounds_is_named() {
    let (args, mut s) = ring_allreduce(2, 10);
    if let Op::Send { src, .. } = &mut s[1].steps[0].op {
        src.offset = 36;
    }
    let e = verify(&args, &s).unwrap_err();
    assert!(
        matches!(
            e,
            VerifyError::OutOfBounds {
                rank: 1,
                step: 0,
                size: 40,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("input[36..56)"), "{e}");
}

#[test]
fn double_counted_contribution_is_caught() {
    // Rank 1 reduces its own input into the output twice.
    let (args, mut s) = ring_allreduce(2, 4);
    // p = 2: rank 1 steps: 0 send block 0, 1 recvreduce block 1, 2 send block 1, 3 recv block 0.
    let out1 = Region::new(BufKind::Output, 8, 8);
    let in1 = Region::new(BufKind::Input, 8, 8);
    s[1].steps.insert(
        2,
        Step {
            op: Op::LocalReduce {
                src: in1,
                dst: out1,
                op: ReduceOp::Sum,
            },
            deps: Deps::on(&[1]),
        },
    );
    // Shift the later steps' dependencies past the inserted one.
    s[1].steps[3].deps = Deps::on(&[2]);
    s[1].steps[4].deps = Deps::on(&[0]);
    let e = verify(&args, &s).unwrap_err();
    assert!(
        matches!(&e, VerifyError::BadData { rank: 1, step: 2, what, .. } if what.contains("counts rank 1's contribution twice")),
        "{e}"
    );
}

#[test]
fn missing_dependency_is_a_race() {
    let (args, mut s) = ring_allreduce(4, 10);
    // Step 2 (send of round 1) forwards what step 1 received: drop the dependency.
    s[0].steps[2].deps = Deps::NONE;
    let e = verify(&args, &s).unwrap_err();
    assert!(
        matches!(
            e,
            VerifyError::Race {
                rank: 0,
                first: 1,
                second: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn cyclic_wait_is_a_deadlock() {
    // Two ranks that both receive before they send.
    let args = CollectiveArgs::new(CollectiveKind::AllGather, 1, DataType::Fp32, 2);
    let mk = |me: Rank| {
        let peer = 1 - me;
        RankSchedule {
            rank: me,
            buffers: crate::schedule::BufferSizes {
                input: 4,
                output: 8,
                scratch: 0,
            },
            steps: vec![
                Step {
                    op: Op::Copy {
                        src: Region::new(BufKind::Input, 0, 4),
                        dst: Region::new(BufKind::Output, me as u64 * 4, 4),
                    },
                    deps: Deps::NONE,
                },
                Step {
                    op: Op::Recv {
                        peer,
                        tag: 0,
                        dst: Region::new(BufKind::Output, peer as u64 * 4, 4),
                    },
                    deps: Deps::NONE,
                },
                Step {
                    op: Op::Send {
                        peer,
                        tag: 0,
                        src: Region::new(BufKind::Input, 0, 4),
                    },
                    deps: Deps::on(&[1]),
                },
            ],
        }
    };
    let e = verify(&args, &[mk(0), mk(1)]).unwrap_err();
    match &e {
        VerifyError::Deadlock { waits, .. } => {
            assert_eq!(waits.len(), 2);
            assert!(
                waits[0].starts_with("rank 0 step 1 (receive from 1 tag 0) posted"),
                "{e}"
            );
        }
        _ => panic!("{e}"),
    }
}

#[test]
fn window_too_small_deadlocks() {
    // Rank 0 sends 3 messages then receives 3; rank 1 does the same. With
    // window 2 both fill their windows with sends nobody receives.
    let args = CollectiveArgs::p2p(
        true,
        (0..3)
            .map(|_| crate::collective::P2p {
                src: 0,
                dst: 1,
                count: 1,
            })
            .chain((0..3).map(|_| crate::collective::P2p {
                src: 1,
                dst: 0,
                count: 1,
            }))
            .collect(),
        DataType::Int8,
        2,
    );
    let mut s = schedule(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(2),
    )
    .unwrap();
    assert!(verify(&args, &s).is_ok());
    // Reorder rank 1 so it sends its 3 before receiving.
    let steps = s[1].steps.clone();
    s[1].steps = steps[3..].iter().chain(&steps[..3]).copied().collect();
    assert!(verify(&args, &s).is_ok(), "window 64 holds everything");
    let e = verify_with(
        &args,
        &s,
        &VerifyOptions {
            window: 2,
            check_races: true,
        },
    )
    .unwrap_err();
    assert!(matches!(e, VerifyError::Deadlock { window: 2, .. }), "{e}");
}

#[test]
fn wrong_placement_is_reported_with_expected_contents() {
    let args = CollectiveArgs::new(CollectiveKind::AllGather, 2, DataType::Fp32, 3);
    let mut s = schedule(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(3),
    )
    .unwrap();
    // Rank 0's first copy puts its own block at slot 1 instead of slot 0.
    if let Op::Copy { dst, .. } = &mut s[0].steps[0].op {
        dst.offset = 8;
    }
    let e = verify_with(
        &args,
        &s,
        &VerifyOptions {
            window: 64,
            check_races: false,
        },
    )
    .unwrap_err();
    assert!(matches!(e, VerifyError::WrongOutput { rank: 0, .. }), "{e}");
    assert!(e.to_string().contains("should be input of ranks {"), "{e}");
}

#[test]
fn avg_needs_exactly_one_divide() {
    let args =
        CollectiveArgs::new(CollectiveKind::AllReduce, 8, DataType::Fp32, 2).with_op(ReduceOp::Avg);
    let mut s = schedule(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(2),
    )
    .unwrap();
    verify(&args, &s).unwrap();
    // p = 2, rank 0: send, recvreduce, divide, send, recv. Drop the divide (make it empty).
    assert!(matches!(s[0].steps[2].op, Op::Divide { .. }));
    s[0].steps[2].op = Op::Divide {
        dst: Region::new(BufKind::Output, 0, 0),
        divisor: 2,
    };
    let e = verify(&args, &s).unwrap_err();
    assert!(
        matches!(&e, VerifyError::WrongOutput { expected, .. } if expected.starts_with("avg of")),
        "{e}"
    );
    // Divide by the wrong number.
    let mut s2 = schedule(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(2),
    )
    .unwrap();
    if let Op::Divide { divisor, .. } = &mut s2[1].steps[2].op {
        *divisor = 3;
    }
    let e = verify(&args, &s2).unwrap_err();
    assert!(
        matches!(&e, VerifyError::BadStep { rank: 1, step: 2, what } if what.contains("divide by 3")),
        "{e}"
    );
}

#[test]
fn barrier_without_enough_rounds_is_incomplete() {
    let args = CollectiveArgs::new(CollectiveKind::Barrier, 0, DataType::Fp32, 5);
    let mut s = schedule(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(5),
    )
    .unwrap();
    verify(&args, &s).unwrap();
    // Drop the last round (2 steps) everywhere.
    for r in &mut s {
        r.steps.truncate(r.steps.len() - 2);
    }
    let e = verify(&args, &s).unwrap_err();
    assert!(
        matches!(e, VerifyError::BarrierIncomplete { rank: 0, .. }),
        "{e}"
    );
}

#[test]
fn reduce_in_data_movement_is_rejected() {
    let args = CollectiveArgs::new(CollectiveKind::AllGather, 2, DataType::Fp32, 2);
    let mut s = schedule(
        &args,
        &AlgoSpec::Flat(Algorithm::Ring),
        &GroupLayout::flat(2),
    )
    .unwrap();
    let r = Region::new(BufKind::Output, 0, 8);
    s[0].steps.push(Step {
        op: Op::LocalReduce {
            src: r,
            dst: r,
            op: ReduceOp::Sum,
        },
        deps: Deps::FENCE,
    });
    let e = verify(&args, &s).unwrap_err();
    assert!(
        matches!(&e, VerifyError::BadStep { rank: 0, what, .. } if what.contains("moves data only")),
        "{e}"
    );
}

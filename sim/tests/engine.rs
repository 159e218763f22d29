//! Engine behaviour on hand-written schedules, with hand-computed times.

use hccl_algos::schedule::{BufKind, BufferSizes, Deps, Op, RankSchedule, Region, Step};
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::{
    Ctl, Delivered, FixedPlans, Hooks, MessageFate, MessageInfo, Mode, RankStatus, Scenario,
    StallReason,
};
use hccl_topology::{build_preset_with, Fabric, Preset, PresetOptions};

/// `n` single-NPU servers of a generic preset, 25 GB/s and 1000 ns links.
fn fabric(preset: Preset, n: u32) -> Fabric {
    build_preset_with(preset, n, &PresetOptions::default()).unwrap()
}

fn step(op: Op) -> Step {
    Step {
        op,
        deps: Deps::NONE,
    }
}

fn sched(rank: u32, bytes: u64, steps: Vec<Step>) -> RankSchedule {
    RankSchedule {
        rank,
        buffers: BufferSizes {
            input: bytes,
            output: bytes,
            scratch: 0,
        },
        steps,
    }
}

fn region(buf: BufKind, len: u64) -> Region {
    Region::new(buf, 0, len)
}

/// Rank 0 sends `bytes` to rank 1 with tag 7.
fn one_message(bytes: u64) -> FixedPlans {
    FixedPlans {
        label: "p2p".into(),
        dtype: DataType::Uint8,
        ranks: vec![
            sched(
                0,
                bytes,
                vec![step(Op::Send {
                    peer: 1,
                    tag: 7,
                    src: region(BufKind::Input, bytes),
                })],
            ),
            sched(
                1,
                bytes,
                vec![step(Op::Recv {
                    peer: 0,
                    tag: 7,
                    dst: region(BufKind::Output, bytes),
                })],
            ),
        ],
    }
}

#[test]
fn one_message_costs_alpha_beta_and_latency() {
    let f = fabric(Preset::Ring, 2);
    let alpha = f.params().msg_overhead_ns;
    assert_eq!(alpha, 2000, "preset α the hand computation below assumes");
    let bytes = 25_000; // 1000 ns at 25 GB/s
    let plans = one_message(bytes);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(w, plans).unwrap();
    let rep = sc.run().unwrap();
    assert!(rep.stall.is_none());
    let op = &rep.ops[0];
    // Sender done when the last byte leaves: α + B/β = 2000 + 1000.
    assert_eq!(op.end_ns[0], Some(3000));
    // Receiver: plus one hop of 1000 ns.
    assert_eq!(op.end_ns[1], Some(4000));
    assert_eq!(op.time_ns, Some(4000));
    let busy: Vec<_> = rep.links.iter().filter(|l| l.bytes > 0).collect();
    assert_eq!(busy.len(), 1, "one directed link carried the message");
    assert_eq!(busy[0].bytes, bytes);
    assert_eq!(busy[0].busy_ns, 1000);
}

/// Keeps what the hooks saw of each message.
#[derive(Default)]
struct Seen {
    delay_ns: u64,
    matched_at: Vec<u64>,
    delivered: Vec<(u64, Delivered)>,
}

impl Hooks for Seen {
    fn on_message(&mut self, ctl: &mut Ctl<'_, '_>, _msg: &MessageInfo<'_>) -> MessageFate {
        self.matched_at.push(ctl.now());
        if self.delay_ns > 0 {
            MessageFate::Delay(self.delay_ns)
        } else {
            MessageFate::Deliver
        }
    }

    fn on_delivered(&mut self, ctl: &mut Ctl<'_, '_>, msg: &Delivered) {
        self.delivered.push((ctl.now(), *msg));
    }
}

#[test]
fn a_delivered_record_carries_its_match_and_delivery_times() {
    let f = fabric(Preset::Ring, 2);
    let bytes = 25_000;
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(w, one_message(bytes)).unwrap();
    // Times of one_message_costs_alpha_beta_and_latency: matched at 0,
    // at the receiver at α + B/β + one hop = 4000 ns.
    let mut seen = Seen::default();
    sc.run_with_hooks(&mut seen).unwrap();
    let want = Delivered {
        op: 0,
        src: 0,
        dst: 1,
        tag: 7,
        bytes,
        start_ns: 0,
        end_ns: 4000,
    };
    assert_eq!(seen.delivered, vec![(4000, want)]);
    // A hook's delay moves the delivery, not the match time.
    let mut delayed = Seen {
        delay_ns: 500,
        ..Seen::default()
    };
    let rep = sc.run_with_hooks(&mut delayed).unwrap();
    assert_eq!(delayed.matched_at, vec![0]);
    let (now, d) = delayed.delivered[0];
    assert_eq!((d.start_ns, d.end_ns), (0, now));
    assert!(now > 4000, "delivered at {now}");
    assert_eq!(rep.ops[0].end_ns[1], Some(now));
}

/// AllToAll-style incast: ranks 1..=3 each send B to rank 0 through one
/// leaf switch. The leaf->rank0 link (25 GB/s) is shared by three flows, each
/// limited to 25/3 GB/s by max-min fairness; their uplinks are not the
/// bottleneck. So each transfer takes ceil(B / (25/3)) ns after α, then two
/// hops of latency.
#[test]
fn incast_shares_the_receivers_downlink_max_min_fairly() {
    let f = fabric(Preset::LeafSpine, 4);
    let b = 30_000u64; // 30000 / (25/3) = 3600 ns
    let mut ranks = vec![sched(
        0,
        b,
        (1..=3)
            .map(|p| {
                step(Op::Recv {
                    peer: p,
                    tag: 0,
                    dst: Region::new(BufKind::Scratch, 0, b),
                })
            })
            .collect(),
    )];
    ranks[0].buffers.scratch = b;
    for r in 1..=3 {
        ranks.push(sched(
            r,
            b,
            vec![step(Op::Send {
                peer: 0,
                tag: 0,
                src: region(BufKind::Input, b),
            })],
        ));
    }
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(
        w,
        FixedPlans {
            label: "incast".into(),
            dtype: DataType::Uint8,
            ranks,
        },
    )
    .unwrap();
    let rep = sc.run().unwrap();
    let route = f.route(1, 0).unwrap();
    assert_eq!(route.hops(), 2);
    let lat = f.latency_ns(&route);
    let alpha = f.params().msg_overhead_ns;
    assert_eq!(rep.ops[0].end_ns[0], Some(alpha + 3600 + lat));
    for r in 1..=3 {
        assert_eq!(
            rep.ops[0].end_ns[r],
            Some(alpha + 3600),
            "senders finish together"
        );
    }
    assert_eq!(rep.stats.largest_component, 3);
}

/// Two flows share a link, one ends early: the other speeds up (progressive
/// filling is redone when a flow leaves).
#[test]
fn rates_recover_when_a_competing_flow_ends() {
    let f = fabric(Preset::LeafSpine, 3);
    // Ranks 1 and 2 send to 0: 10 KB and 30 KB. Shared downlink 25 GB/s.
    // Both at 12.5 GB/s until the small one ends at 10000/12.5 = 800 ns
    // (after α); the big one has 30000 - 10000 = 20000 B left at 25 GB/s:
    // 800 ns more. Ends at α + 1600.
    let ranks = vec![
        RankSchedule {
            rank: 0,
            buffers: BufferSizes {
                input: 0,
                output: 40_000,
                scratch: 0,
            },
            steps: vec![
                step(Op::Recv {
                    peer: 1,
                    tag: 0,
                    dst: Region::new(BufKind::Output, 0, 10_000),
                }),
                step(Op::Recv {
                    peer: 2,
                    tag: 0,
                    dst: Region::new(BufKind::Output, 10_000, 30_000),
                }),
            ],
        },
        sched(
            1,
            10_000,
            vec![step(Op::Send {
                peer: 0,
                tag: 0,
                src: region(BufKind::Input, 10_000),
            })],
        ),
        sched(
            2,
            30_000,
            vec![step(Op::Send {
                peer: 0,
                tag: 0,
                src: region(BufKind::Input, 30_000),
            })],
        ),
    ];
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(
        w,
        FixedPlans {
            label: "two".into(),
            dtype: DataType::Uint8,
            ranks,
        },
    )
    .unwrap();
    let rep = sc.run().unwrap();
    let alpha = f.params().msg_overhead_ns;
    assert_eq!(rep.ops[0].end_ns[1], Some(alpha + 800));
    assert_eq!(rep.ops[0].end_ns[2], Some(alpha + 1600));
}

fn two_rank_reduce(mode: Mode, seed: u64) -> hccl_sim::SimReport {
    let f = fabric(Preset::Ring, 2);
    let n = 16u64;
    let bytes = n * 4;
    // Rank 0 sends its input; rank 1 reduces it with its own input into
    // its output, then copies the output into scratch and back.
    let ranks = vec![
        sched(
            0,
            bytes,
            vec![step(Op::Send {
                peer: 1,
                tag: 1,
                src: region(BufKind::Input, bytes),
            })],
        ),
        RankSchedule {
            rank: 1,
            buffers: BufferSizes {
                input: bytes,
                output: bytes,
                scratch: bytes,
            },
            steps: vec![
                step(Op::RecvReduce {
                    peer: 0,
                    tag: 1,
                    local: region(BufKind::Input, bytes),
                    dst: region(BufKind::Output, bytes),
                    op: ReduceOp::Sum,
                }),
                Step {
                    op: Op::Copy {
                        src: region(BufKind::Output, bytes),
                        dst: region(BufKind::Scratch, bytes),
                    },
                    deps: Deps::on(&[0]),
                },
                Step {
                    op: Op::Divide {
                        dst: region(BufKind::Scratch, bytes),
                        divisor: 1,
                    },
                    deps: Deps::on(&[1]),
                },
            ],
        },
    ];
    let inputs: Vec<Vec<u8>> = (0..2i32)
        .map(|r| {
            (0..n as i32)
                .flat_map(|i| (i * 10 + r).to_le_bytes())
                .collect()
        })
        .collect();
    let mut sc = Scenario::new(&f).mode(mode).seed(seed);
    let w = sc.world();
    sc.op_with_inputs(
        w,
        FixedPlans {
            label: "reduce".into(),
            dtype: DataType::Int32,
            ranks,
        },
        inputs,
    )
    .unwrap();
    sc.run().unwrap()
}

#[test]
fn data_mode_moves_and_reduces_real_bytes() {
    let rep = two_rank_reduce(Mode::Data, 1);
    let out = rep.ops[0].outputs.as_ref().unwrap();
    let got: Vec<i32> = out[1]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<i32> = (0..16).map(|i| (i * 10) + (i * 10 + 1)).collect();
    assert_eq!(got, want);
    // Timing is the same in both modes.
    let t = two_rank_reduce(Mode::Timing, 1);
    assert_eq!(t.ops[0].end_ns, rep.ops[0].end_ns);
    assert!(t.ops[0].outputs.is_none());
}

#[test]
fn same_seed_same_trace_hash() {
    let a = two_rank_reduce(Mode::Timing, 5);
    let b = two_rank_reduce(Mode::Timing, 5);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert!(a.stats.events > 0);
    let f = fabric(Preset::Ring, 2);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(
        w,
        FixedPlans {
            label: "empty".into(),
            dtype: DataType::Int32,
            ranks: vec![sched(0, 0, vec![]), sched(1, 0, vec![])],
        },
    )
    .unwrap();
    assert_ne!(
        sc.run().unwrap().trace_hash,
        a.trace_hash,
        "another scenario, another trace"
    );
}

#[test]
fn a_receive_without_a_send_is_a_stall_not_an_error() {
    let f = fabric(Preset::Ring, 2);
    let ranks = vec![
        sched(
            0,
            8,
            vec![step(Op::Recv {
                peer: 1,
                tag: 3,
                dst: region(BufKind::Output, 8),
            })],
        ),
        sched(1, 8, vec![]),
    ];
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(
        w,
        FixedPlans {
            label: "lonely".into(),
            dtype: DataType::Uint8,
            ranks,
        },
    )
    .unwrap();
    let rep = sc.run().unwrap();
    let stall = rep.stall.expect("rank 0 never finishes");
    assert_eq!(stall.reason, StallReason::QueueDrained);
    assert_eq!(stall.ranks.len(), 1);
    assert_eq!(stall.ranks[0].rank, 0);
    assert_eq!(stall.ranks[0].status, RankStatus::Running);
    assert_eq!(stall.ranks[0].in_flight.len(), 1);
    assert_eq!(stall.unmatched.len(), 1);
    assert!(!stall.unmatched[0].is_send);
    assert_eq!(
        (
            stall.unmatched[0].src,
            stall.unmatched[0].dst,
            stall.unmatched[0].tag
        ),
        (1, 0, 3)
    );
    assert_eq!(rep.ops[0].end_ns[1], Some(0));
    assert_eq!(rep.ops[0].time_ns, None);
}

/// Two communicators used in opposite orders by two ranks: each waits in a
/// different op for the other. Expressed with `rank_order`.
#[test]
fn two_communicators_in_opposite_orders_deadlock() {
    let f = fabric(Preset::Ring, 2);
    let ping = |label: &str| FixedPlans {
        label: label.into(),
        dtype: DataType::Uint8,
        ranks: vec![
            sched(
                0,
                4,
                vec![step(Op::Send {
                    peer: 1,
                    tag: 0,
                    src: region(BufKind::Input, 4),
                })],
            ),
            sched(
                1,
                4,
                vec![step(Op::Recv {
                    peer: 0,
                    tag: 0,
                    dst: region(BufKind::Output, 4),
                })],
            ),
        ],
    };
    let mut sc = Scenario::new(&f);
    let a = sc.communicator("a", &[0, 1]).unwrap();
    let b = sc.communicator("b", &[0, 1]).unwrap();
    let op_a = sc.op(a, ping("on a")).unwrap();
    let op_b = sc.op(b, ping("on b")).unwrap();
    sc.rank_order(1, &[op_b, op_a]).unwrap();
    let rep = sc.run().unwrap();
    let stall = rep.stall.unwrap();
    let ops: Vec<_> = stall.ranks.iter().map(|r| (r.rank, r.op)).collect();
    assert_eq!(ops, vec![(0, Some(0)), (1, Some(1))]);
    assert_eq!(stall.ranks[1].remaining_ops, vec![0]);
    assert_eq!(stall.unmatched.len(), 2);
}

#[test]
fn bad_communicators_are_rejected_with_names() {
    let f = fabric(Preset::Ring, 2);
    let mut sc = Scenario::new(&f);
    let e = sc.communicator("x", &[0, 5]).unwrap_err().to_string();
    assert!(
        e.contains("'x'") && e.contains("rank 5") && e.contains("0..2"),
        "{e}"
    );
    let e = sc.communicator("y", &[1, 1]).unwrap_err().to_string();
    assert!(e.contains("listed twice"), "{e}");
}

#[test]
fn mismatched_lengths_are_an_error_naming_both_sides() {
    let f = fabric(Preset::Ring, 2);
    let ranks = vec![
        sched(
            0,
            8,
            vec![step(Op::Send {
                peer: 1,
                tag: 2,
                src: region(BufKind::Input, 8),
            })],
        ),
        sched(
            1,
            8,
            vec![step(Op::Recv {
                peer: 0,
                tag: 2,
                dst: region(BufKind::Output, 4),
            })],
        ),
    ];
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    sc.op(
        w,
        FixedPlans {
            label: "bad".into(),
            dtype: DataType::Uint8,
            ranks,
        },
    )
    .unwrap();
    let e = sc.run().unwrap_err().to_string();
    assert!(
        e.contains("sends 8 bytes") && e.contains("receives 4"),
        "{e}"
    );
}

#[test]
fn huge_counts_add_up_saturating() {
    // Issue 22: the bytes a link carried over a run were summed with `+`;
    // a ring AllReduce of 2^64 - 4 bytes on 4 ranks carries 1.5 times
    // that on every link.
    use hccl_algos::algo::{AlgoSpec, Algorithm};
    use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
    let f = fabric(Preset::Ring, 4);
    let mut sc = Scenario::new(&f);
    let w = sc.world();
    let count = (1u64 << 62) - 1;
    let args = CollectiveArgs::new(CollectiveKind::AllReduce, count, DataType::Fp32, 4);
    sc.collective(w, args, AlgoSpec::Flat(Algorithm::Ring))
        .unwrap();
    let rep = sc.run().unwrap();
    assert!(rep.stall.is_none());
    // 1.5 x 2^64 B at 25 GB/s per link: about 1.1e9 s, a real time.
    let t = rep.ops[0].time_ns.unwrap();
    assert!((1.1e18..1.2e18).contains(&(t as f64)), "{t}");
    assert!(rep.links.iter().any(|l| l.bytes == u64::MAX));
}

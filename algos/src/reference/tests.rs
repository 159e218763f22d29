//! Reference results on small cases worked out by hand, and the
//! order-independence of verifiable inputs.

use super::*;
use crate::collective::P2p;

fn args(kind: CollectiveKind, count: u64, dtype: DataType, p: u32) -> CollectiveArgs {
    CollectiveArgs::new(kind, count, dtype, p)
}

fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn reduce_folds_in_rank_order_then_divides_once() {
    let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (a, b, c) = (f(&[1.0, 2.0]), f(&[3.0, 4.0]), f(&[5.0, 6.0]));
    let ins = [a.as_slice(), &b, &c];
    assert_eq!(
        reduce_in_rank_order(DataType::Fp32, ReduceOp::Sum, 3, &ins).unwrap(),
        f(&[9.0, 12.0])
    );
    assert_eq!(
        reduce_in_rank_order(DataType::Fp32, ReduceOp::Avg, 3, &ins).unwrap(),
        f(&[3.0, 4.0])
    );
    // Integer average truncates toward zero: (-7 + 0) / 2 = -3.
    let (x, y) = (i32s(&[-7]), i32s(&[0]));
    assert_eq!(
        reduce_in_rank_order(DataType::Int32, ReduceOp::Avg, 2, &[&x, &y]).unwrap(),
        i32s(&[-3])
    );
    // The fold order is visible with floats: (1e8 + 1) + -1e8 = 0 in f32
    // (1e8 + 1 rounds to 1e8), while a reverse fold would give 1.
    let (p, q, r) = (f(&[1e8]), f(&[1.0]), f(&[-1e8]));
    assert_eq!(
        reduce_in_rank_order(DataType::Fp32, ReduceOp::Sum, 3, &[&p, &q, &r]).unwrap(),
        f(&[0.0])
    );
    assert!(reduce_in_rank_order(DataType::Fp32, ReduceOp::Sum, 2, &[&p, &[0u8; 3]]).is_err());
    assert!(reduce_in_rank_order(DataType::Fp32, ReduceOp::Sum, 2, &[])
        .unwrap()
        .is_empty());
}

#[test]
fn reductions_by_hand() {
    let ins = vec![i32s(&[1, 2]), i32s(&[10, 20]), i32s(&[100, 200])];
    let out = reference(
        &args(CollectiveKind::AllReduce, 2, DataType::Int32, 3),
        &ins,
    )
    .unwrap();
    assert_eq!(out, vec![i32s(&[111, 222]); 3]);
    let a = args(CollectiveKind::Reduce, 2, DataType::Int32, 3)
        .with_root(2)
        .with_op(ReduceOp::Max);
    assert_eq!(
        reference(&a, &ins).unwrap(),
        vec![vec![], vec![], i32s(&[100, 200])]
    );
    let rs = args(CollectiveKind::ReduceScatter, 1, DataType::Uint8, 2);
    assert_eq!(
        reference(&rs, &[vec![1, 2], vec![3, 4]]).unwrap(),
        vec![vec![4], vec![6]]
    );
    let rsv = CollectiveArgs::v_counts(true, vec![1, 2], DataType::Uint8).unwrap();
    assert_eq!(
        reference(&rsv, &[vec![1, 2, 3], vec![10, 20, 30]]).unwrap(),
        vec![vec![11], vec![22, 33]]
    );
}

#[test]
fn data_movement_by_hand() {
    let u8s = DataType::Uint8;
    let ag = args(CollectiveKind::AllGather, 1, u8s, 3);
    assert_eq!(
        reference(&ag, &[vec![7], vec![8], vec![9]]).unwrap(),
        vec![vec![7, 8, 9]; 3]
    );
    let agv = CollectiveArgs::v_counts(false, vec![2, 1], u8s).unwrap();
    assert_eq!(
        reference(&agv, &[vec![1, 2], vec![3]]).unwrap(),
        vec![vec![1, 2, 3]; 2]
    );
    let bc = args(CollectiveKind::Broadcast, 2, u8s, 3).with_root(1);
    assert_eq!(
        reference(&bc, &[vec![], vec![4, 5], vec![]]).unwrap(),
        vec![vec![4, 5]; 3]
    );
    let sc = args(CollectiveKind::Scatter, 1, u8s, 3);
    assert_eq!(
        reference(&sc, &[vec![1, 2, 3], vec![], vec![]]).unwrap(),
        vec![vec![1], vec![2], vec![3]]
    );
    let ga = args(CollectiveKind::Gather, 1, u8s, 3).with_root(1);
    assert_eq!(
        reference(&ga, &[vec![1], vec![2], vec![3]]).unwrap(),
        vec![vec![], vec![1, 2, 3], vec![]]
    );
    let a2a = args(CollectiveKind::AllToAll, 1, u8s, 2);
    assert_eq!(
        reference(&a2a, &[vec![1, 2], vec![3, 4]]).unwrap(),
        vec![vec![1, 3], vec![2, 4]]
    );
    // Rank 0 sends 1 element to itself and 2 to rank 1; rank 1 sends 1 to itself.
    let a2av = CollectiveArgs::all_to_all_v(vec![vec![1, 2], vec![0, 1]], u8s).unwrap();
    assert_eq!(
        reference(&a2av, &[vec![1, 2, 3], vec![4]]).unwrap(),
        vec![vec![1], vec![2, 3, 4]]
    );
    let pairs = vec![
        P2p {
            src: 0,
            dst: 1,
            count: 1,
        },
        P2p {
            src: 1,
            dst: 0,
            count: 2,
        },
        P2p {
            src: 0,
            dst: 1,
            count: 1,
        },
    ];
    let b = CollectiveArgs::p2p(true, pairs, u8s, 2);
    assert_eq!(
        reference(&b, &[vec![1, 2], vec![3, 4]]).unwrap(),
        vec![vec![3, 4], vec![1, 2]]
    );
    let bar = args(CollectiveKind::Barrier, 0, u8s, 2);
    assert_eq!(
        reference(&bar, &[vec![], vec![]]).unwrap(),
        vec![Vec::<u8>::new(); 2]
    );
}

#[test]
fn wrong_inputs_are_errors() {
    let a = args(CollectiveKind::AllReduce, 2, DataType::Fp32, 2);
    assert_eq!(
        reference(&a, &[vec![0; 8]]),
        Err(RefError::InputCount { got: 1, world: 2 })
    );
    let e = reference(&a, &[vec![0; 8], vec![0; 4]]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "rank 1: input is 4 bytes, all_reduce with these arguments takes 8"
    );
    let bad_root = args(CollectiveKind::Broadcast, 1, DataType::Fp32, 2).with_root(2);
    assert!(matches!(
        reference(&bad_root, &[vec![], vec![]]),
        Err(RefError::Args(_))
    ));
}

/// Reduces `inputs` in the order given by `order`.
fn fold(dtype: DataType, op: ReduceOp, world: u32, inputs: &[Vec<u8>], order: &[usize]) -> Vec<u8> {
    let ins: Vec<&[u8]> = order.iter().map(|&i| inputs[i].as_slice()).collect();
    reduce_in_rank_order(dtype, op, world, &ins).unwrap()
}

#[test]
fn verifiable_inputs_reduce_to_the_same_bits_in_any_order() {
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            for world in [1u32, 2, 7, 64, 200] {
                let ins: Vec<Vec<u8>> = (0..world)
                    .map(|r| verifiable_input(dtype, op, world, r, 150, 42))
                    .collect();
                let forward: Vec<usize> = (0..world as usize).collect();
                let reverse: Vec<usize> = forward.iter().rev().copied().collect();
                // A fixed scramble: stride 37 through the ranks (37 is prime
                // and does not divide 64 or 200).
                let scrambled: Vec<usize> = (0..world as usize)
                    .map(|i| i * 37 % world as usize)
                    .collect();
                let want = fold(dtype, op, world, &ins, &forward);
                assert_eq!(want.len(), 150 * dtype.size() as usize);
                for order in [&reverse, &scrambled] {
                    assert_eq!(
                        fold(dtype, op, world, &ins, order),
                        want,
                        "{dtype} {op} world {world}"
                    );
                }
            }
        }
    }
}

#[test]
fn verifiable_inputs_are_not_trivial() {
    // Sums are not all zero, products not all +-1, max has NaNs somewhere,
    // and different ranks and seeds give different inputs.
    let sum = verifiable_input(DataType::Bf16, ReduceOp::Sum, 8, 3, 64, 1);
    assert!(sum.chunks(2).any(|c| c != [0, 0] && c != [0, 0x80]));
    let f = |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap());
    let prod = verifiable_input(DataType::Fp32, ReduceOp::Prod, 4, 0, 64, 1);
    assert!(prod.chunks(4).any(|c| f(c).abs() == 2.0));
    assert!(prod.chunks(4).all(|c| [1.0, 2.0].contains(&f(c).abs())));
    let max: Vec<Vec<u8>> = (0..4)
        .map(|r| verifiable_input(DataType::Fp32, ReduceOp::Max, 4, r, 200, 1))
        .collect();
    assert!(max
        .iter()
        .flatten()
        .collect::<Vec<_>>()
        .chunks(4)
        .any(|c| f32::from_le_bytes([*c[0], *c[1], *c[2], *c[3]]).is_nan()));
    assert_ne!(max[0], max[1]);
    assert_ne!(
        verifiable_input(DataType::Int32, ReduceOp::Sum, 4, 0, 8, 1),
        verifiable_input(DataType::Int32, ReduceOp::Sum, 4, 0, 8, 2)
    );
    // Integer products use odd factors, so 64 of them never give 0.
    let ins: Vec<Vec<u8>> = (0..64)
        .map(|r| verifiable_input(DataType::Int8, ReduceOp::Prod, 64, r, 50, 3))
        .collect();
    let order: Vec<usize> = (0..64).collect();
    assert!(fold(DataType::Int8, ReduceOp::Prod, 64, &ins, &order)
        .iter()
        .all(|&b| b % 2 == 1));
}

#[test]
fn verifiable_inputs_follow_io_sizes() {
    let a = args(CollectiveKind::ReduceScatter, 5, DataType::Fp16, 3);
    let ins = verifiable_inputs(&a, 9);
    assert_eq!(
        ins.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![30, 30, 30]
    );
    let g = args(CollectiveKind::Scatter, 5, DataType::Int64, 3).with_root(2);
    let ins = verifiable_inputs(&g, 9);
    assert_eq!(
        ins.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![0, 0, 120]
    );
    assert!(reference(&g, &ins).is_ok());
}

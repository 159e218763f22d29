//! What a collective call is: its kind, its arguments, the buffer sizes each
//! rank must provide, in-place rules, and the signature ranks compare.
//!
//! `count` follows HCCL's C API (`hccl.h`) for every collective:
//!
//! | kind | `count` means | input bytes (rank r) | output bytes (rank r) | in-place alias |
//! |---|---|---|---|---|
//! | AllReduce | elements per rank | `count` | `count` | input = output |
//! | ReduceScatter | elements each rank *receives* (`recvCount`) | `world*count` | `count` | output = input + `r*count` |
//! | AllGather | elements each rank *sends* (`sendCount`) | `count` | `world*count` | input = output + `r*count` |
//! | Broadcast | elements of the buffer | `count` on root, 0 elsewhere | `count` | root: input = output |
//! | Reduce | elements per rank | `count` | `count` on root, 0 elsewhere | root: input = output |
//! | Scatter | elements each rank receives (`recvCount`) | `world*count` on root, 0 elsewhere | `count` | root: output = input + `root*count` |
//! | Gather | elements each rank sends | `count` | `world*count` on root, 0 elsewhere | root: input = output + `root*count` |
//! | AllToAll | elements each rank sends to *each* peer (`sendCount`) | `world*count` | `world*count` | input = output (staged through scratch) |
//! | AllToAllV | `send_matrix[i][j]` elements from i to j | row sum | column sum | not supported |
//! | AllGatherV | `counts[i]` elements sent by rank i | `counts[r]` | `sum(counts)` | input = output + `displ(r)` |
//! | ReduceScatterV | `counts[i]` elements received by rank i | `sum(counts)` | `counts[r]` | output = input + `displ(r)` |
//! | SendRecv, BatchSendRecv | per transfer, [`P2p::count`] | sum of the rank's sends | sum of its receives | not supported |
//! | Barrier | unused (0) | 0 | 0 | — |
//!
//! Counts are elements (`u64`), sizes bytes (`u64`); every `count * size`
//! product is checked, so an overflow is an error, never a wrapped size.
//! V-variant displacements are packed (prefix sums of the counts), which is
//! the common use of HCCL's `displs` arguments.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dtype::{DataType, ParseNameError, ReduceOp};
use crate::schedule::Rank;

/// A collective operation. [`CollectiveKind::name`] spells it as hccl_test's
/// binaries do (`all_reduce`, `reduce_scatter`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    /// Every rank gets the reduction of all inputs.
    AllReduce,
    /// Rank r gets block r of the reduction of all inputs.
    ReduceScatter,
    /// Every rank gets every rank's input, concatenated in rank order.
    AllGather,
    /// Every rank gets the root's input.
    Broadcast,
    /// The root gets the reduction of all inputs.
    Reduce,
    /// Rank r gets block r of the root's input.
    Scatter,
    /// The root gets every rank's input, concatenated in rank order.
    Gather,
    /// Rank j's block i = rank i's block j (equal block sizes).
    AllToAll,
    /// AllToAll with per-pair counts ([`CollectiveArgs::send_matrix`]).
    AllToAllV,
    /// AllGather with per-rank counts ([`CollectiveArgs::counts`]).
    AllGatherV,
    /// ReduceScatter with per-rank counts ([`CollectiveArgs::counts`]).
    ReduceScatterV,
    /// One point-to-point transfer (HCCL's `HcclSend`/`HcclRecv` pair).
    SendRecv,
    /// A batch of point-to-point transfers (HCCL's `HcclBatchSendRecv`).
    BatchSendRecv,
    /// No rank leaves before every rank has entered.
    Barrier,
}

impl CollectiveKind {
    /// Every kind.
    pub const ALL: [CollectiveKind; 14] = [
        CollectiveKind::AllReduce,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllGather,
        CollectiveKind::Broadcast,
        CollectiveKind::Reduce,
        CollectiveKind::Scatter,
        CollectiveKind::Gather,
        CollectiveKind::AllToAll,
        CollectiveKind::AllToAllV,
        CollectiveKind::AllGatherV,
        CollectiveKind::ReduceScatterV,
        CollectiveKind::SendRecv,
        CollectiveKind::BatchSendRecv,
        CollectiveKind::Barrier,
    ];

    /// hccl_test's spelling (`all_reduce`, `alltoallv`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce => "all_reduce",
            CollectiveKind::ReduceScatter => "reduce_scatter",
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::Reduce => "reduce",
            CollectiveKind::Scatter => "scatter",
            CollectiveKind::Gather => "gather",
            CollectiveKind::AllToAll => "alltoall",
            CollectiveKind::AllToAllV => "alltoallv",
            CollectiveKind::AllGatherV => "all_gather_v",
            CollectiveKind::ReduceScatterV => "reduce_scatter_v",
            CollectiveKind::SendRecv => "send_recv",
            CollectiveKind::BatchSendRecv => "batch_send_recv",
            CollectiveKind::Barrier => "barrier",
        }
    }

    /// HCCL's op name in `HCCL_ALGO` (`allreduce`, `allgather`, ...): the
    /// V variants share their base op's name, as HCCL's docs specify.
    /// `None` for kinds `HCCL_ALGO` cannot configure.
    pub const fn hccl_algo_name(self) -> Option<&'static str> {
        match self {
            CollectiveKind::AllReduce => Some("allreduce"),
            CollectiveKind::ReduceScatter | CollectiveKind::ReduceScatterV => Some("reducescatter"),
            CollectiveKind::AllGather | CollectiveKind::AllGatherV => Some("allgather"),
            CollectiveKind::Broadcast => Some("broadcast"),
            CollectiveKind::Reduce => Some("reduce"),
            CollectiveKind::Scatter => Some("scatter"),
            CollectiveKind::AllToAll | CollectiveKind::AllToAllV => Some("alltoall"),
            _ => None,
        }
    }

    /// True if the output is a reduction (uses [`CollectiveArgs::op`]).
    pub const fn is_reduction(self) -> bool {
        matches!(
            self,
            CollectiveKind::AllReduce
                | CollectiveKind::ReduceScatter
                | CollectiveKind::Reduce
                | CollectiveKind::ReduceScatterV
        )
    }

    /// True if the collective has a root (uses [`CollectiveArgs::root`]).
    pub const fn is_rooted(self) -> bool {
        matches!(
            self,
            CollectiveKind::Broadcast
                | CollectiveKind::Reduce
                | CollectiveKind::Scatter
                | CollectiveKind::Gather
        )
    }
}

impl fmt::Display for CollectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CollectiveKind {
    type Err = ParseNameError;

    /// Accepts hccl_test names (`all_reduce`), HCCL_ALGO names
    /// (`allreduce`) and CamelCase (`AllReduce`), case-insensitively, with or
    /// without `_`/`-`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key: String = s
            .trim()
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_ascii_lowercase();
        CollectiveKind::ALL
            .into_iter()
            .find(|k| k.name().replace('_', "") == key)
            .ok_or_else(|| ParseNameError {
                what: "collective",
                value: s.to_string(),
                accepted: CollectiveKind::ALL.map(|k| k.name()).join(", "),
            })
    }
}

/// One point-to-point transfer of a SendRecv / BatchSendRecv.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct P2p {
    /// Sending rank.
    pub src: Rank,
    /// Receiving rank.
    pub dst: Rank,
    /// Elements moved.
    pub count: u64,
}

/// Per-rank counts with their packed displacements (prefix sums), in elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VCounts {
    counts: Vec<u64>,
    displs: Vec<u64>,
}

impl VCounts {
    /// Counts per rank; displacements are their prefix sums.
    ///
    /// # Errors
    /// [`ArgsError::SizeOverflow`] if the total overflows `u64`.
    pub fn new(counts: Vec<u64>) -> Result<VCounts, ArgsError> {
        let mut displs = Vec::with_capacity(counts.len() + 1);
        let mut acc = 0u64;
        displs.push(0);
        for &c in &counts {
            acc = acc.checked_add(c).ok_or(ArgsError::SizeOverflow {
                what: "sum of counts",
                count: c,
                elem_size: 1,
            })?;
            displs.push(acc);
        }
        Ok(VCounts { counts, displs })
    }

    /// Elements of rank `i`.
    pub fn count(&self, i: usize) -> u64 {
        self.counts[i]
    }

    /// Element offset of rank `i`'s block (`i` may equal `len()`: the total).
    pub fn displ(&self, i: usize) -> u64 {
        self.displs[i]
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// True if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Sum of all counts.
    pub fn total(&self) -> u64 {
        *self.displs.last().unwrap_or(&0)
    }

    /// The counts.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }
}

/// AllToAllV send counts: `get(i, j)` elements go from rank i to rank j, with
/// packed send displacements (row prefix sums) and receive displacements
/// (column prefix sums).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountMatrix {
    n: usize,
    counts: Vec<u64>,
    send_displs: Vec<u64>,
    recv_displs: Vec<u64>,
}

impl CountMatrix {
    /// `rows[i][j]` = elements rank i sends to rank j.
    ///
    /// # Errors
    /// [`ArgsError::CountsLength`] if the matrix is not square;
    /// [`ArgsError::SizeOverflow`] if a row or column sum overflows.
    pub fn new(rows: Vec<Vec<u64>>) -> Result<CountMatrix, ArgsError> {
        let n = rows.len();
        if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != n) {
            return Err(ArgsError::CountsLength {
                field: "send_matrix row",
                index: Some(i),
                len: r.len(),
                world: n as u32,
            });
        }
        let counts: Vec<u64> = rows.into_iter().flatten().collect();
        let overflow = |c| ArgsError::SizeOverflow {
            what: "send_matrix row/column sum",
            count: c,
            elem_size: 1,
        };
        let mut send_displs = vec![0u64; n * (n + 1)];
        let mut recv_displs = vec![0u64; n * (n + 1)];
        for i in 0..n {
            for j in 0..n {
                let c = counts[i * n + j];
                send_displs[i * (n + 1) + j + 1] = send_displs[i * (n + 1) + j]
                    .checked_add(c)
                    .ok_or_else(|| overflow(c))?;
                // Column j, row i: receive displacement of rank j for sender i.
                recv_displs[j * (n + 1) + i + 1] = recv_displs[j * (n + 1) + i]
                    .checked_add(c)
                    .ok_or_else(|| overflow(c))?;
            }
        }
        Ok(CountMatrix {
            n,
            counts,
            send_displs,
            recv_displs,
        })
    }

    /// Side length (the world size it was built for).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Elements rank `i` sends to rank `j`.
    pub fn get(&self, i: usize, j: usize) -> u64 {
        self.counts[i * self.n + j]
    }

    /// Element offset in rank `i`'s input of its block for rank `j`.
    pub fn send_displ(&self, i: usize, j: usize) -> u64 {
        self.send_displs[i * (self.n + 1) + j]
    }

    /// Element offset in rank `j`'s output of the block from rank `i`.
    pub fn recv_displ(&self, j: usize, i: usize) -> u64 {
        self.recv_displs[j * (self.n + 1) + i]
    }

    /// Total elements rank `i` sends.
    pub fn send_total(&self, i: usize) -> u64 {
        self.send_displ(i, self.n)
    }

    /// Total elements rank `j` receives.
    pub fn recv_total(&self, j: usize) -> u64 {
        self.recv_displ(j, self.n)
    }
}

/// The arguments of one collective call, the same on every rank.
///
/// See the module docs for what `count` means per kind. Fields a kind does
/// not use are ignored (`op` for data movement, `root` for unrooted kinds).
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveArgs {
    /// The collective.
    pub kind: CollectiveKind,
    /// Elements; meaning per kind in the module docs. Ignored by V variants,
    /// SendRecv, BatchSendRecv and Barrier.
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// Reduction, for AllReduce / ReduceScatter(V) / Reduce.
    pub op: ReduceOp,
    /// Root rank, for Broadcast / Reduce / Scatter / Gather.
    pub root: Rank,
    /// Number of ranks in the communicator (>= 1).
    pub world_size: u32,
    /// Send and receive buffers alias as the module docs' table says.
    pub in_place: bool,
    /// AllGatherV / ReduceScatterV: per-rank counts (length `world_size`).
    pub counts: Option<Arc<VCounts>>,
    /// AllToAllV: the `world_size` × `world_size` send counts.
    pub send_matrix: Option<Arc<CountMatrix>>,
    /// SendRecv (exactly one) / BatchSendRecv transfers, in a global order
    /// every rank agrees on.
    pub pairs: Option<Arc<[P2p]>>,
}

impl CollectiveArgs {
    /// Arguments of a plain collective (`count`-based kinds), with `op = sum`,
    /// `root = 0`, not in place.
    pub fn new(kind: CollectiveKind, count: u64, dtype: DataType, world_size: u32) -> Self {
        CollectiveArgs {
            kind,
            count,
            dtype,
            op: ReduceOp::Sum,
            root: 0,
            world_size,
            in_place: false,
            counts: None,
            send_matrix: None,
            pairs: None,
        }
    }

    /// Sets the reduce op.
    pub fn with_op(mut self, op: ReduceOp) -> Self {
        self.op = op;
        self
    }

    /// Sets the root.
    pub fn with_root(mut self, root: Rank) -> Self {
        self.root = root;
        self
    }

    /// Sets the in-place flag.
    pub fn with_in_place(mut self, in_place: bool) -> Self {
        self.in_place = in_place;
        self
    }

    /// AllGatherV (`reduce == false`) or ReduceScatterV with per-rank counts.
    ///
    /// # Errors
    /// [`ArgsError::SizeOverflow`] if the counts' sum overflows.
    pub fn v_counts(reduce: bool, counts: Vec<u64>, dtype: DataType) -> Result<Self, ArgsError> {
        let world = counts.len() as u32;
        let kind = if reduce {
            CollectiveKind::ReduceScatterV
        } else {
            CollectiveKind::AllGatherV
        };
        let mut a = CollectiveArgs::new(kind, 0, dtype, world);
        a.counts = Some(Arc::new(VCounts::new(counts)?));
        Ok(a)
    }

    /// AllToAllV with `rows[i][j]` elements from rank i to rank j.
    ///
    /// # Errors
    /// As [`CountMatrix::new`].
    pub fn all_to_all_v(rows: Vec<Vec<u64>>, dtype: DataType) -> Result<Self, ArgsError> {
        let world = rows.len() as u32;
        let mut a = CollectiveArgs::new(CollectiveKind::AllToAllV, 0, dtype, world);
        a.send_matrix = Some(Arc::new(CountMatrix::new(rows)?));
        Ok(a)
    }

    /// SendRecv (one transfer) or BatchSendRecv (any number).
    pub fn p2p(batch: bool, pairs: Vec<P2p>, dtype: DataType, world_size: u32) -> Self {
        let kind = if batch {
            CollectiveKind::BatchSendRecv
        } else {
            CollectiveKind::SendRecv
        };
        let mut a = CollectiveArgs::new(kind, 0, dtype, world_size);
        a.pairs = Some(pairs.into());
        a
    }

    /// A valid argument set of any `kind` for `p` (>= 1) ranks, for tests,
    /// sweeps and examples: V variants and point-to-point get per-rank counts
    /// spread deterministically around `count` (by -2..=+2, floored at 0;
    /// the spread comes from `seed`); SendRecv is `root -> root + 1`;
    /// BatchSendRecv has every rank send to `r + 1` and receive from `r + 2`.
    ///
    /// # Errors
    /// [`ArgsError`] from the V-variant constructors (e.g. `p = 0`).
    pub fn example(
        kind: CollectiveKind,
        p: u32,
        count: u64,
        dtype: DataType,
        root: Rank,
        seed: u64,
    ) -> Result<CollectiveArgs, ArgsError> {
        use CollectiveKind as K;
        let vary = |i: u64| (count + (i.wrapping_mul(7).wrapping_add(seed)) % 5).saturating_sub(2);
        let n = u64::from(p);
        match kind {
            K::AllGatherV | K::ReduceScatterV => CollectiveArgs::v_counts(
                kind == K::ReduceScatterV,
                (0..n).map(vary).collect(),
                dtype,
            ),
            K::AllToAllV => CollectiveArgs::all_to_all_v(
                (0..n)
                    .map(|i| (0..n).map(|j| vary(i * 31 + j)).collect())
                    .collect(),
                dtype,
            ),
            K::SendRecv => Ok(CollectiveArgs::p2p(
                false,
                vec![P2p {
                    src: root,
                    dst: (root + 1) % p,
                    count,
                }],
                dtype,
                p,
            )),
            K::BatchSendRecv => {
                let pairs = (0..p)
                    .flat_map(|i| {
                        [
                            P2p {
                                src: i,
                                dst: (i + 1) % p,
                                count: vary(u64::from(i)),
                            },
                            P2p {
                                src: (i + 2) % p,
                                dst: i,
                                count,
                            },
                        ]
                    })
                    .collect();
                Ok(CollectiveArgs::p2p(true, pairs, dtype, p))
            }
            _ => Ok(CollectiveArgs::new(kind, count, dtype, p).with_root(root)),
        }
    }

    /// Checks every field a kind uses.
    ///
    /// # Errors
    /// [`ArgsError`] naming the field and its value: zero world, root out of
    /// range, missing or wrongly sized count vectors, ranks out of range in
    /// transfers, byte sizes overflowing `u64`, unsupported in-place use.
    pub fn validate(&self) -> Result<(), ArgsError> {
        let p = self.world_size;
        if p == 0 {
            return Err(ArgsError::ZeroWorld);
        }
        let kind = self.kind;
        if kind.is_rooted() && self.root >= p {
            return Err(ArgsError::RootOutOfRange {
                kind,
                root: self.root,
                world: p,
            });
        }
        let esz = self.dtype.size();
        let bytes = |what: &'static str, count: u64| {
            count.checked_mul(esz).ok_or(ArgsError::SizeOverflow {
                what,
                count,
                elem_size: esz,
            })
        };
        bytes("count", self.count)?;
        match kind {
            CollectiveKind::ReduceScatter
            | CollectiveKind::AllGather
            | CollectiveKind::Scatter
            | CollectiveKind::Gather
            | CollectiveKind::AllToAll => {
                let total = self
                    .count
                    .checked_mul(p as u64)
                    .ok_or(ArgsError::SizeOverflow {
                        what: "world_size * count",
                        count: self.count,
                        elem_size: esz,
                    })?;
                bytes("world_size * count", total)?;
            }
            CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => {
                let v = self.counts.as_ref().ok_or(ArgsError::Missing {
                    kind,
                    field: "counts",
                })?;
                if v.len() != p as usize {
                    return Err(ArgsError::CountsLength {
                        field: "counts",
                        index: None,
                        len: v.len(),
                        world: p,
                    });
                }
                bytes("sum of counts", v.total())?;
            }
            CollectiveKind::AllToAllV => {
                let m = self.send_matrix.as_ref().ok_or(ArgsError::Missing {
                    kind,
                    field: "send_matrix",
                })?;
                if m.n() != p as usize {
                    return Err(ArgsError::CountsLength {
                        field: "send_matrix",
                        index: None,
                        len: m.n(),
                        world: p,
                    });
                }
                for i in 0..m.n() {
                    bytes("send_matrix row sum", m.send_total(i))?;
                    bytes("send_matrix column sum", m.recv_total(i))?;
                }
            }
            CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => {
                let pairs = self.pairs.as_ref().ok_or(ArgsError::Missing {
                    kind,
                    field: "pairs",
                })?;
                if kind == CollectiveKind::SendRecv && pairs.len() != 1 {
                    return Err(ArgsError::SendRecvPairs { len: pairs.len() });
                }
                let mut in_tot = vec![0u64; p as usize];
                let mut out_tot = vec![0u64; p as usize];
                for (index, t) in pairs.iter().enumerate() {
                    for (field, rank) in [("src", t.src), ("dst", t.dst)] {
                        if rank >= p {
                            return Err(ArgsError::PairRank {
                                index,
                                field,
                                rank,
                                world: p,
                            });
                        }
                    }
                    let s = &mut in_tot[t.src as usize];
                    *s = s.checked_add(t.count).ok_or(ArgsError::SizeOverflow {
                        what: "sum of a rank's send counts",
                        count: t.count,
                        elem_size: esz,
                    })?;
                    bytes("sum of a rank's send counts", *s)?;
                    let d = &mut out_tot[t.dst as usize];
                    *d = d.checked_add(t.count).ok_or(ArgsError::SizeOverflow {
                        what: "sum of a rank's receive counts",
                        count: t.count,
                        elem_size: esz,
                    })?;
                    bytes("sum of a rank's receive counts", *d)?;
                }
            }
            _ => {}
        }
        if self.in_place
            && matches!(
                kind,
                CollectiveKind::AllToAllV
                    | CollectiveKind::SendRecv
                    | CollectiveKind::BatchSendRecv
            )
        {
            return Err(ArgsError::InPlaceUnsupported { kind });
        }
        Ok(())
    }

    /// Input and output bytes rank `rank` must provide (see the module
    /// docs). Call [`Self::validate`] first: this saturates instead of
    /// erroring.
    pub fn io_bytes(&self, rank: Rank) -> (u64, u64) {
        let p = self.world_size as u64;
        let esz = self.dtype.size();
        let n = self.count.saturating_mul(esz);
        let all = n.saturating_mul(p);
        let is_root = rank == self.root;
        let r = rank as usize;
        match self.kind {
            CollectiveKind::AllReduce => (n, n),
            CollectiveKind::ReduceScatter => (all, n),
            CollectiveKind::AllGather => (n, all),
            CollectiveKind::Broadcast => (if is_root { n } else { 0 }, n),
            CollectiveKind::Reduce => (n, if is_root { n } else { 0 }),
            CollectiveKind::Scatter => (if is_root { all } else { 0 }, n),
            CollectiveKind::Gather => (n, if is_root { all } else { 0 }),
            CollectiveKind::AllToAll => (all, all),
            CollectiveKind::AllToAllV => {
                self.send_matrix
                    .as_ref()
                    .filter(|m| r < m.n())
                    .map_or((0, 0), |m| {
                        (
                            m.send_total(r).saturating_mul(esz),
                            m.recv_total(r).saturating_mul(esz),
                        )
                    })
            }
            CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => {
                let Some(v) = self.counts.as_ref().filter(|v| r < v.len()) else {
                    return (0, 0);
                };
                let mine = v.count(r).saturating_mul(esz);
                let total = v.total().saturating_mul(esz);
                if self.kind == CollectiveKind::AllGatherV {
                    (mine, total)
                } else {
                    (total, mine)
                }
            }
            CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => {
                let (mut i, mut o) = (0u64, 0u64);
                for t in self.pairs.iter().flat_map(|p| p.iter()) {
                    if t.src == rank {
                        i = i.saturating_add(t.count.saturating_mul(esz));
                    }
                    if t.dst == rank {
                        o = o.saturating_add(t.count.saturating_mul(esz));
                    }
                }
                (i, o)
            }
            CollectiveKind::Barrier => (0, 0),
        }
    }

    /// Where input and output overlap on `rank` when [`Self::in_place`] is
    /// set: `Some(Alias { input_at, output_at })` places both buffers in one
    /// address space (one of the two bases is 0). `None` when not in place or
    /// when the rank has an empty buffer.
    pub fn alias(&self, rank: Rank) -> Option<Alias> {
        if !self.in_place {
            return None;
        }
        let (inb, outb) = self.io_bytes(rank);
        if inb == 0 || outb == 0 {
            return None;
        }
        let esz = self.dtype.size();
        let n = self.count.saturating_mul(esz);
        let r = rank as u64;
        let v_displ = || {
            self.counts
                .as_ref()
                .map_or(0, |v| v.displ(rank as usize).saturating_mul(esz))
        };
        let (input_at, output_at) = match self.kind {
            CollectiveKind::AllReduce
            | CollectiveKind::Broadcast
            | CollectiveKind::Reduce
            | CollectiveKind::AllToAll => (0, 0),
            CollectiveKind::ReduceScatter => (0, r.saturating_mul(n)),
            CollectiveKind::Scatter => (0, (self.root as u64).saturating_mul(n)),
            CollectiveKind::AllGather => (r.saturating_mul(n), 0),
            CollectiveKind::Gather => ((self.root as u64).saturating_mul(n), 0),
            CollectiveKind::AllGatherV => (v_displ(), 0),
            CollectiveKind::ReduceScatterV => (0, v_displ()),
            _ => return None,
        };
        Some(Alias {
            input_at,
            output_at,
        })
    }

    /// The signature ranks compare before running the op.
    pub fn signature(&self) -> OpSignature {
        // FNV-1a over the V counts or the AllToAllV matrix, so ranks that
        // disagree on them are caught like a count mismatch.
        let fnv = |vals: &mut dyn Iterator<Item = u64>| {
            vals.fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
                v.to_le_bytes()
                    .iter()
                    .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
            })
        };
        let counts = match (&self.counts, &self.send_matrix) {
            (Some(c), _) => fnv(&mut c.counts.iter().copied()),
            (None, Some(m)) => fnv(&mut m.counts.iter().copied()),
            (None, None) => 0,
        };
        OpSignature {
            kind: self.kind,
            count: self.count,
            dtype: self.dtype,
            op: self.op,
            root: self.root,
            counts,
        }
    }

    /// Total bytes of the "message" used for cost models and busbw: the
    /// output size of AllReduce/AllGather/..., the input size of
    /// ReduceScatter, the largest rank's traffic for V variants.
    pub fn message_bytes(&self) -> u64 {
        (0..self.world_size.min(4096))
            .map(|r| {
                let (i, o) = self.io_bytes(r);
                i.max(o)
            })
            .max()
            .unwrap_or(0)
    }
}

/// Placement of input and output in one address space for in-place calls:
/// input byte `x` is the same memory as output byte `x + input_at - output_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alias {
    /// Where the input starts.
    pub input_at: u64,
    /// Where the output starts.
    pub output_at: u64,
}

/// Error of bad collective arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgsError {
    /// world_size is 0.
    #[error("world_size = 0: a communicator has at least one rank")]
    ZeroWorld,
    /// The root is not a rank of the communicator.
    #[error(
        "{kind}: root = {root} is outside the communicator (world_size {world}); use a root in 0..={}",
        .world.saturating_sub(1)
    )]
    RootOutOfRange {
        /// The collective.
        kind: CollectiveKind,
        /// The given root.
        root: Rank,
        /// World size.
        world: u32,
    },
    /// A count vector or matrix has the wrong length.
    #[error("{field}{} has length {len}, expected world_size = {world}", index.map(|i| format!("[{i}]")).unwrap_or_default())]
    CountsLength {
        /// The field.
        field: &'static str,
        /// Row index, for a matrix row.
        index: Option<usize>,
        /// Its length.
        len: usize,
        /// World size.
        world: u32,
    },
    /// A size in bytes does not fit in `u64`.
    #[error(
        "{what} = {count} elements of {elem_size} bytes overflows u64 bytes; use a smaller count"
    )]
    SizeOverflow {
        /// Which quantity.
        what: &'static str,
        /// The count involved.
        count: u64,
        /// Element size in bytes.
        elem_size: u64,
    },
    /// A field the kind needs is missing.
    #[error("{kind} needs `{field}`, which is not set")]
    Missing {
        /// The collective.
        kind: CollectiveKind,
        /// The missing field.
        field: &'static str,
    },
    /// SendRecv takes exactly one transfer.
    #[error("send_recv takes exactly one transfer, got {len}; use batch_send_recv for more")]
    SendRecvPairs {
        /// Number of transfers given.
        len: usize,
    },
    /// A transfer names a rank outside the communicator.
    #[error("pairs[{index}].{field} = {rank} is outside the communicator (world_size {world})")]
    PairRank {
        /// Index of the transfer.
        index: usize,
        /// `src` or `dst`.
        field: &'static str,
        /// The rank.
        rank: Rank,
        /// World size.
        world: u32,
    },
    /// The kind has no in-place form.
    #[error(
        "{kind} has no in-place form (HCCL has none either); use separate send and receive buffers"
    )]
    InPlaceUnsupported {
        /// The collective.
        kind: CollectiveKind,
    },
}

/// What ranks compare to check they call the same collective (HCCL's
/// EI0005 "parameters differ between ranks" check).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OpSignature {
    /// The collective.
    pub kind: CollectiveKind,
    /// Its count.
    pub count: u64,
    /// Its element type.
    pub dtype: DataType,
    /// Its reduce op (compared only for reductions).
    pub op: ReduceOp,
    /// Its root (compared only for rooted kinds).
    pub root: Rank,
    /// A hash (FNV-1a) of the per-rank counts of AllGatherV /
    /// ReduceScatterV or the send matrix of AllToAllV; 0 for other kinds.
    pub counts: u64,
}

/// Two ranks disagree on a collective's arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {field} mismatch, local {local}, remote {remote} (rank {peer}); every rank must call the collective with the same arguments")]
pub struct MismatchError {
    /// The local collective.
    pub kind: CollectiveKind,
    /// The first field that differs (`kind`, `dtype`, `count`, `per-rank
    /// counts`, `op`, `root`).
    pub field: &'static str,
    /// Local value, printed.
    pub local: String,
    /// Remote value, printed.
    pub remote: String,
    /// The remote rank.
    pub peer: Rank,
}

impl OpSignature {
    /// Checks `remote` (from rank `peer`) against `local`: kind, count and
    /// dtype always; op for reductions; root for rooted kinds.
    ///
    /// # Errors
    /// [`MismatchError`] naming the first differing field, both values and the peer.
    pub fn check_consistent(
        local: &OpSignature,
        remote: &OpSignature,
        peer: Rank,
    ) -> Result<(), MismatchError> {
        let err = |field, l: String, r: String| MismatchError {
            kind: local.kind,
            field,
            local: l,
            remote: r,
            peer,
        };
        if local.kind != remote.kind {
            return Err(err("kind", local.kind.to_string(), remote.kind.to_string()));
        }
        // The data type first: ranks that agree on bytes but not on the
        // type also disagree on the count, and the type is the cause.
        if local.dtype != remote.dtype {
            return Err(err(
                "dtype",
                local.dtype.to_string(),
                remote.dtype.to_string(),
            ));
        }
        if local.count != remote.count {
            return Err(err(
                "count",
                local.count.to_string(),
                remote.count.to_string(),
            ));
        }
        if local.counts != remote.counts {
            let h = |x: u64| format!("counts with hash {x:#018x}");
            return Err(err("per-rank counts", h(local.counts), h(remote.counts)));
        }
        if local.kind.is_reduction() && local.op != remote.op {
            return Err(err("op", local.op.to_string(), remote.op.to_string()));
        }
        if local.kind.is_rooted() && local.root != remote.root {
            return Err(err("root", local.root.to_string(), remote.root.to_string()));
        }
        Ok(())
    }
}

/// Free-function form of [`OpSignature::check_consistent`].
///
/// # Errors
/// As [`OpSignature::check_consistent`].
pub fn check_consistent(
    local: &OpSignature,
    remote: &OpSignature,
    peer: Rank,
) -> Result<(), MismatchError> {
    OpSignature::check_consistent(local, remote, peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_accept_hccl_spellings() {
        for k in CollectiveKind::ALL {
            assert_eq!(k.name().parse::<CollectiveKind>(), Ok(k));
        }
        assert_eq!("allreduce".parse(), Ok(CollectiveKind::AllReduce));
        assert_eq!("AllToAllV".parse(), Ok(CollectiveKind::AllToAllV));
        let e = "all_reduc".parse::<CollectiveKind>().unwrap_err();
        assert!(e.to_string().contains("all_reduce"), "{e}");
    }

    #[test]
    fn sizes_follow_hccl_count_semantics() {
        let a = CollectiveArgs::new(CollectiveKind::ReduceScatter, 10, DataType::Fp32, 4);
        assert_eq!(a.io_bytes(2), (160, 40));
        let a = CollectiveArgs::new(CollectiveKind::AllGather, 10, DataType::Fp16, 4);
        assert_eq!(a.io_bytes(0), (20, 80));
        let a = CollectiveArgs::new(CollectiveKind::Scatter, 3, DataType::Int8, 4).with_root(1);
        assert_eq!(a.io_bytes(1), (12, 3));
        assert_eq!(a.io_bytes(0), (0, 3));
        let a = CollectiveArgs::all_to_all_v(vec![vec![1, 2], vec![3, 4]], DataType::Fp64).unwrap();
        assert_eq!(a.io_bytes(0), (24, 32));
        assert_eq!(a.io_bytes(1), (56, 48));
    }

    #[test]
    fn validation_names_field_and_value() {
        let a = CollectiveArgs::new(CollectiveKind::Broadcast, 1, DataType::Fp32, 4).with_root(4);
        let e = a.validate().unwrap_err().to_string();
        assert!(e.contains("root = 4") && e.contains("world_size 4"), "{e}");
        let a = CollectiveArgs::new(CollectiveKind::AllGather, u64::MAX / 8, DataType::Fp64, 2);
        let e = a.validate().unwrap_err();
        assert!(matches!(e, ArgsError::SizeOverflow { .. }), "{e}");
        let mut a = CollectiveArgs::v_counts(false, vec![1, 2, 3], DataType::Fp32).unwrap();
        a.world_size = 4;
        let e = a.validate().unwrap_err().to_string();
        assert!(
            e.contains("counts has length 3, expected world_size = 4"),
            "{e}"
        );
        let a = CollectiveArgs::p2p(
            true,
            vec![P2p {
                src: 0,
                dst: 9,
                count: 1,
            }],
            DataType::Fp32,
            2,
        );
        let e = a.validate().unwrap_err().to_string();
        assert!(e.contains("pairs[0].dst = 9"), "{e}");
        let e = CountMatrix::new(vec![vec![1, 2], vec![1]])
            .unwrap_err()
            .to_string();
        assert!(e.contains("send_matrix row[1] has length 1"), "{e}");
    }

    #[test]
    fn mismatch_names_field_values_and_peer() {
        let a = CollectiveArgs::new(CollectiveKind::AllReduce, 6, DataType::Fp32, 2).signature();
        let mut b = a;
        b.count = 4;
        let e = check_consistent(&a, &b, 1).unwrap_err().to_string();
        assert!(
            e.contains("count mismatch, local 6, remote 4 (rank 1)"),
            "{e}"
        );
        // Root differences do not matter for an unrooted kind.
        let mut c = a;
        c.root = 3;
        assert!(check_consistent(&a, &c, 1).is_ok());
        let mut d = a;
        d.op = ReduceOp::Max;
        let e = check_consistent(&a, &d, 5).unwrap_err();
        assert_eq!(
            (e.field, e.local.as_str(), e.remote.as_str()),
            ("op", "sum", "max")
        );
        // Same bytes, another type: the type is named, not the count.
        let mut f = a;
        f.dtype = DataType::Fp16;
        f.count = 12;
        let e = check_consistent(&a, &f, 1).unwrap_err();
        assert_eq!(e.field, "dtype", "{e}");
    }

    #[test]
    fn in_place_aliases_own_slot() {
        let a = CollectiveArgs::new(CollectiveKind::ReduceScatter, 10, DataType::Fp32, 4)
            .with_in_place(true);
        assert_eq!(
            a.alias(3),
            Some(Alias {
                input_at: 0,
                output_at: 120
            })
        );
        let a = CollectiveArgs::new(CollectiveKind::AllGather, 10, DataType::Fp32, 4)
            .with_in_place(true);
        assert_eq!(
            a.alias(1),
            Some(Alias {
                input_at: 40,
                output_at: 0
            })
        );
    }
}

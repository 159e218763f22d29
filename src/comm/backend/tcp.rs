//! The TCP backend: one [`TcpRank`] per communicator rank (processes,
//! hosts or threads), running the facade's plans with `hccl_hw::tcp`.
//! The op signature travels encoded in each op's first frames, with the
//! algorithm and the reduce precision.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hccl_algos::collective::{CollectiveArgs, P2p};
use hccl_algos::schedule::{Op, RankPlan};
use hccl_algos::transport::OpContext;
use hccl_hw::tcp::root::ROOT_INFO_LEN;
use hccl_hw::tcp::wire::Signature;
use hccl_hw::tcp::{AbortKind, OpBuffers, OpInfo, TcpConfig, TcpError, TcpRank, P2P_SEQ_BIT};

use super::{Backend, Interrupt, Prepared, Splitter};
use crate::comm::p2p::{P2pBuf, P2pItem, P2pKind};
use crate::comm::plan::HostFit;
use crate::comm::profile::OpTime;
use crate::comm::run::UserBufs;
use crate::comm::{comm_id, crossed, signature, BackendKind, CommError, RootInfo, Shared};

/// A communicator rank over TCP.
pub(crate) struct TcpBackend {
    rank: TcpRank,
    /// Scratch memory of the plans, grown, never re-zeroed: schedules
    /// write scratch before reading it (the verifier checks), and zeroing
    /// a one-shot's p − 1 vectors per op costs as much as the op.
    scratch: Vec<u8>,
    /// When the last op started ([`Backend::started`]).
    started: Option<std::time::Instant>,
}

impl TcpBackend {
    /// Joins the communicator `name` of `nranks` ranks as `rank` through
    /// `root` (blocks until every rank joined or `HCCL_CONNECT_TIMEOUT`).
    ///
    /// # Errors
    /// The bootstrap's errors.
    pub(crate) fn connect(
        name: &str,
        cfg: TcpConfig,
        root: &RootInfo,
        nranks: u32,
        rank: u32,
    ) -> Result<TcpBackend, CommError> {
        let rank = TcpRank::connect(cfg, root, nranks, rank, comm_id(name))?;
        Ok(TcpBackend {
            rank,
            scratch: Vec::new(),
            started: None,
        })
    }
}

/// The first `need` bytes of `scratch`, grown if short.
fn scratch_of(scratch: &mut Vec<u8>, need: u64) -> &mut [u8] {
    let need = need as usize;
    if scratch.len() < need {
        scratch.resize(need, 0);
    }
    &mut scratch[..need]
}

impl Backend for TcpBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Tcp
    }

    fn host_fit(&self) -> HostFit {
        HostFit {
            hosts: self.rank.hosts(),
            ranks_fit_cpus: self.rank.ranks_fit_cpus(),
        }
    }

    fn exec_timeout(&self) -> Option<Duration> {
        self.rank.config().exec_timeout
    }

    fn interrupter(&self) -> Interrupt {
        let h = self.rank.abort_handle();
        Arc::new(move |reason: &str| h.abort_with(reason))
    }

    fn run(
        &mut self,
        sh: &Shared,
        op: Prepared<'_>,
        user: UserBufs<'_>,
    ) -> Result<OpTime, CommError> {
        let Prepared {
            seq,
            args,
            called,
            sig,
            wide,
            planned,
        } = op;
        self.started = None;
        let kind = format!("{:?}", args.kind);
        let rank = sh.rank;
        let (inb, outb) = args.io_bytes(rank);
        let alias = args.alias(rank);
        let spec = planned.algo;
        let scratch = scratch_of(&mut self.scratch, planned.sizes.scratch);
        let describe = |remote: &Signature, peer| {
            signature::describe(called, &sig, (&spec, wide), rank, remote, peer)
        };
        // Errors name the communicator: "comm 'world' AllReduce #3".
        let label = format!("comm '{}' {kind}", sh.name);
        let info = OpInfo {
            name: &label,
            sig: signature::encode_full(&sig, &spec, wide),
            describe: &describe,
        };
        let bufs = match (user, alias) {
            (UserBufs::Separate(i, o), _) => OpBuffers::separate(i, o, scratch),
            (UserBufs::InPlace(b), Some(a)) => {
                OpBuffers::in_place(b, (a.input_at, inb), (a.output_at, outb), scratch)?
            }
            (UserBufs::InPlace(b), None) if outb == 0 => OpBuffers::separate(b, &mut [], scratch),
            (UserBufs::InPlace(b), None) => OpBuffers::separate(&[], b, scratch),
        };
        let ctx = OpContext {
            comm: sh.id,
            seq,
            rank,
            dtype: args.dtype,
        };
        let start = std::time::Instant::now();
        self.started = Some(start);
        let t = &mut self.rank;
        t.run(&ctx, &info, bufs, planned.plan)
            .map_err(|e| crossed::explain(sh, t, seq, e))?;
        Ok(OpTime::Measured(start, std::time::Instant::now()))
    }

    fn started(&self) -> Option<std::time::Instant> {
        self.started
    }

    fn never_started(&mut self, seq: u64) -> Vec<u32> {
        let arrived = self.rank.arrived(seq);
        let me = self.rank.rank();
        (0..self.rank.nranks())
            .filter(|r| *r != me && !arrived.contains(r))
            .collect()
    }

    /// One op per data type (ascending HCCL code), sends then receives,
    /// each step tagged with its message number.
    fn p2p(
        &mut self,
        sh: &Shared,
        name: &str,
        items: &mut [P2pItem<'_>],
        numbers: &[u64],
    ) -> Result<(), CommError> {
        let me = sh.rank;
        self.started = Some(std::time::Instant::now());
        let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, it) in items.iter().enumerate() {
            groups.entry(it.dtype as u32).or_default().push(i);
        }
        for group in groups.values() {
            let dtype = items[group[0]].dtype;
            let esz = dtype.size();
            let kinds: Vec<P2pKind> = items.iter().map(P2pItem::kind).collect();
            let kinds = &kinds;
            let of = |k: P2pKind| group.iter().copied().filter(move |&i| kinds[i] == k);
            let order: Vec<usize> = of(P2pKind::Send).chain(of(P2pKind::Recv)).collect();
            let pairs: Vec<P2p> = order
                .iter()
                .map(|&i| {
                    let m = items[i].msg(me, numbers[i]);
                    P2p {
                        src: m.src,
                        dst: m.dst,
                        count: m.count,
                    }
                })
                .collect();
            // The batch schedule tags transfer i with i: retag with the message
            // number so that the peer's own list order does not matter.
            let tags: Vec<u32> = order.iter().map(|&i| numbers[i] as u32).collect();
            // Receive steps of this op, by (peer, tag), for wording a length
            // mismatch as a count mismatch.
            let recv_keys: Vec<(u32, u32)> = order
                .iter()
                .filter(|&&i| items[i].kind() == P2pKind::Recv)
                .map(|&i| (items[i].peer, numbers[i] as u32))
                .collect();
            let args = CollectiveArgs::p2p(true, pairs, dtype, sh.size);
            let planned = sh.plan(&args)?;
            let plan: RankPlan = Box::new(planned.plan.map(move |mut s| {
                if let Op::Send { tag, .. } | Op::Recv { tag, .. } = &mut s.op {
                    if let Some(&n) = tags.get(*tag as usize) {
                        *tag = n;
                    }
                }
                s
            }));
            let in_group = |i: usize| group.contains(&i);
            let mut sends: Vec<&[u8]> = Vec::new();
            let mut recvs: Vec<&mut [u8]> = Vec::new();
            for (i, it) in items.iter_mut().enumerate() {
                if !in_group(i) {
                    continue;
                }
                match &mut it.buf {
                    P2pBuf::Send(b) => sends.push(b),
                    P2pBuf::Recv(b) => recvs.push(b),
                    // The call refused another device's buffer already.
                    #[cfg(feature = "ascend")]
                    P2pBuf::Npu { .. } => {
                        return Err(CommError::Unsupported(format!(
                            "{name}: an NPU buffer on the TCP backend"
                        )))
                    }
                }
            }
            let packed_in: Vec<u8>;
            let input: &[u8] = match sends.as_slice() {
                [] => &[],
                [one] => one,
                many => {
                    packed_in = many.concat();
                    &packed_in
                }
            };
            let single = recvs.len() <= 1;
            let mut packed_out = if single {
                Vec::new()
            } else {
                vec![0u8; recvs.iter().map(|b| b.len()).sum()]
            };
            let scratch = scratch_of(&mut self.scratch, planned.sizes.scratch);
            let describe =
                |remote: &Signature, from| signature::describe_p2p(dtype, me, remote, from);
            let info = OpInfo {
                name,
                sig: signature::encode(&signature::p2p_signature(dtype)),
                describe: &describe,
            };
            let ctx = OpContext {
                comm: sh.id,
                seq: P2P_SEQ_BIT,
                rank: me,
                dtype,
            };
            let r = {
                let output: &mut [u8] = match recvs.first_mut() {
                    Some(b) if single => b,
                    _ => &mut packed_out,
                };
                self.rank.run(
                    &ctx,
                    &info,
                    OpBuffers::separate(input, output, scratch),
                    plan,
                )
            };
            if let Err(e) = r {
                return Err(CommError::from(match e {
                    TcpError::LengthMismatch {
                        op,
                        seq,
                        peer,
                        tag,
                        expected,
                        received,
                        ..
                    } if recv_keys.contains(&(peer, tag))
                        && expected % esz == 0
                        && received % esz == 0 =>
                    {
                        TcpError::Mismatch {
                            op,
                            seq,
                            detail: signature::p2p_mismatch(
                                peer,
                                me,
                                Some((received / esz, expected / esz)),
                                (dtype, dtype),
                            ),
                        }
                    }
                    e => e,
                }));
            }
            if !single {
                let mut at = 0;
                for b in recvs.iter_mut() {
                    let n = b.len();
                    hccl_algos::kernels::copy::copy(b, &packed_out[at..at + n]);
                    at += n;
                }
            }
        }
        Ok(())
    }

    fn fail(&mut self, reason: &str, kind: AbortKind) {
        self.rank.fail_with(reason, kind);
    }

    fn async_error(&mut self) -> Option<CommError> {
        self.rank.async_error().map(CommError::from)
    }

    fn unreceived(&mut self) -> Vec<(u32, u64, u64)> {
        self.rank.unreceived()
    }

    fn ops_ahead(&mut self) -> Vec<(u32, u64, String)> {
        self.rank
            .peers_ahead()
            .into_iter()
            .map(|(peer, seq, sig)| {
                let kind = signature::decode(&sig)
                    .map_or("an op".to_string(), |s| format!("{:?}", s.kind));
                (peer, seq, kind)
            })
            .collect()
    }

    fn splitter(&self) -> Box<dyn Splitter> {
        Box::new(TcpSplitter {
            local_ip: self.rank.local_ip(),
        })
    }
}

/// A TCP split or sub-communicator: its rank 0 starts a root on a free
/// port; the token is the root info; each member joins that root.
struct TcpSplitter {
    /// Where this rank listens for the parent: the new communicator
    /// listens there too unless `HCCL_IF_IP` / `HCCL_SOCKET_IFNAME` say.
    local_ip: std::net::IpAddr,
}

impl TcpSplitter {
    fn config(&self) -> Result<TcpConfig, CommError> {
        let mut cfg = TcpConfig::from_env()?;
        if cfg.if_ip.is_none() && cfg.socket_ifname.is_none() {
            cfg.if_ip = Some(self.local_ip);
        }
        Ok(cfg)
    }
}

impl Splitter for TcpSplitter {
    fn token_len(&self) -> usize {
        ROOT_INFO_LEN
    }

    fn host(&self, _members: &[u32]) -> Result<Vec<u8>, CommError> {
        let cfg = TcpConfig {
            base_port: 0,
            ..self.config()?
        };
        Ok(RootInfo::create(&cfg)?.to_bytes().to_vec())
    }

    fn join(
        self: Box<Self>,
        token: &[u8],
        name: &str,
        size: u32,
        new_rank: u32,
    ) -> Result<Box<dyn Backend>, CommError> {
        let root = RootInfo::from_bytes(token)
            .map_err(|e| CommError::Unsupported(format!("split: {e}")))?;
        let b = TcpBackend::connect(name, self.config()?, &root, size, new_rank)?;
        Ok(Box::new(b))
    }
}

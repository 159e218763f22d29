//! The simulator backend: every rank of the communicator is a thread of
//! this process ([`super::Comm::init_all`] with `HCCL_BACKEND=sim`). Each
//! rank hands its call to a shared [`SimWorld`]; when the last rank of an op
//! arrives, one `hccl_sim` data-mode scenario runs the op on a simulated
//! full-mesh fabric and every rank takes its output back. Arguments are
//! checked for consistency across ranks first, as on TCP.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::{CollectiveArgs, OpSignature};
use hccl_algos::layout::GroupLayout;
use hccl_sim::{Collective, Mode, Scenario};
use hccl_topology::{build_preset, Fabric, Preset};

use super::CommError;

type Outputs = Result<Arc<Vec<Vec<u8>>>, String>;

struct Pending {
    args: CollectiveArgs,
    inputs: Vec<Option<Vec<u8>>>,
    arrived: u32,
    result: Option<Outputs>,
    taken: u32,
}

#[derive(Default)]
struct SimState {
    ops: BTreeMap<u64, Pending>,
    /// Sub-worlds created by `split`, by (parent split seq, color).
    splits: BTreeMap<(u64, u32), Arc<SimWorld>>,
}

/// The shared state of one simulated communicator.
pub(crate) struct SimWorld {
    n: u32,
    fabric: Fabric,
    timeout: Option<Duration>,
    state: Mutex<SimState>,
    cv: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimWorld {
    /// A world of `n` ranks on a simulated full mesh (`hccl_topology`'s
    /// `full-mesh` preset); `timeout` bounds how long a rank waits for the
    /// others to call an op (`HCCL_EXEC_TIMEOUT`).
    pub(crate) fn new(n: u32, timeout: Option<Duration>) -> Result<Arc<SimWorld>, CommError> {
        let fabric = build_preset(Preset::FullMesh, n)?;
        Ok(Arc::new(SimWorld {
            n,
            fabric,
            timeout,
            state: Mutex::new(SimState::default()),
            cv: Condvar::new(),
        }))
    }

    /// The sub-world for `color` of split number `split` (created by the first caller).
    pub(crate) fn split_world(
        &self,
        split: u64,
        color: u32,
        n: u32,
    ) -> Result<Arc<SimWorld>, CommError> {
        let mut s = lock(&self.state);
        if let Some(w) = s.splits.get(&(split, color)) {
            return Ok(Arc::clone(w));
        }
        let w = SimWorld::new(n, self.timeout)?;
        s.splits.insert((split, color), Arc::clone(&w));
        Ok(w)
    }

    fn simulate(&self, args: &CollectiveArgs, spec: AlgoSpec, inputs: Vec<Vec<u8>>) -> Outputs {
        let mut sc = Scenario::new(&self.fabric).mode(Mode::Data);
        let comm = sc.world();
        let coll = Collective {
            args: args.clone(),
            algo: spec,
            layout: GroupLayout::flat(self.n),
        };
        sc.op_with_inputs(comm, coll, inputs)
            .map_err(|e| e.to_string())?;
        let report = sc.run().map_err(|e| e.to_string())?;
        if let Some(stall) = report.stall {
            return Err(format!("the simulated op hung: {stall:?}"));
        }
        report
            .ops
            .into_iter()
            .next()
            .and_then(|o| o.outputs)
            .map(Arc::new)
            .ok_or_else(|| "the simulator returned no outputs".into())
    }

    /// Runs op `seq` for `rank` with `input`; blocks until every rank has
    /// called it; returns this rank's output bytes.
    pub(crate) fn run(
        &self,
        rank: u32,
        seq: u64,
        args: &CollectiveArgs,
        spec: AlgoSpec,
        input: Vec<u8>,
    ) -> Result<Vec<u8>, CommError> {
        let name = format!("{:?} #{seq}", args.kind);
        let mut s = lock(&self.state);
        let n = self.n;
        let p = s.ops.entry(seq).or_insert_with(|| Pending {
            args: args.clone(),
            inputs: vec![None; n as usize],
            arrived: 0,
            result: None,
            taken: 0,
        });
        if let Err(e) = OpSignature::check_consistent(&args.signature(), &p.args.signature(), 0) {
            let msg = format!(
                "{name}: {} mismatch, local {} (rank {rank}), remote {} (an earlier rank); every rank must call the collective with the same arguments",
                e.field, e.local, e.remote
            );
            p.result.get_or_insert(Err(msg));
        }
        p.inputs[rank as usize] = Some(input);
        p.arrived += 1;
        if p.arrived == n && p.result.is_none() {
            let inputs = p
                .inputs
                .iter_mut()
                .map(|i| i.take().unwrap_or_default())
                .collect();
            let args = p.args.clone();
            let r = self.simulate(&args, spec, inputs);
            if let Some(p) = s.ops.get_mut(&seq) {
                p.result = Some(r);
            }
            self.cv.notify_all();
        }
        let deadline = self.timeout.map(|t| Instant::now() + t);
        loop {
            let Some(p) = s.ops.get_mut(&seq) else {
                return Err(CommError::Sim(format!("{name}: op state vanished")));
            };
            if let Some(r) = &p.result {
                let r = r.clone();
                p.taken += 1;
                if p.taken == n {
                    s.ops.remove(&seq);
                }
                return match r {
                    Ok(outs) => Ok(outs.get(rank as usize).cloned().unwrap_or_default()),
                    Err(e) => Err(CommError::Sim(e)),
                };
            }
            let missing: Vec<usize> = p
                .inputs
                .iter()
                .enumerate()
                .filter(|(_, i)| i.is_none())
                .map(|(r, _)| r)
                .collect();
            let wait = match deadline {
                Some(d) if Instant::now() >= d => {
                    let msg = format!("{name}: timed out waiting for ranks {missing:?} to call the op (HCCL_EXEC_TIMEOUT)");
                    p.result = Some(Err(msg.clone()));
                    p.taken += 1;
                    self.cv.notify_all();
                    return Err(CommError::Sim(msg));
                }
                Some(d) => d - Instant::now(),
                None => Duration::from_secs(3600),
            };
            s = self
                .cv
                .wait_timeout(s, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

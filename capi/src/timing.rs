//! `HCCL_TIMING=sim`: the data of every op still moves over the real
//! transport and is real, but each HCCL op advances its stream's virtual
//! clock by the op's *simulated* time on a modelled cluster, and events
//! record that clock, so `aclrtEventElapsedTime` measures what the
//! collectives between two events take on that cluster (CANN's hccl_test
//! then prints a simulated table with real result checks).
//!
//! The cluster: `HCCL_SIM_PRESET` (default `atlas800t-a2`, one Atlas 800T
//! A2 server of 8 × Ascend 910B) with as many whole servers as the ranks
//! fill (`HCCL_SIM_SERVERS` to say it); the algorithm is the selector's
//! choice on that fabric, as `hccl test` (the simulator's sweep) picks it.
//! Ops other than collectives (copies, point-to-point) add no time. A
//! world that does not fill whole servers of a machine preset keeps wall
//! times, with a warning.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use hccl_algos::collective::CollectiveArgs;
use hccl_algos::layout::GroupLayout;
use hccl_algos::select::{self, CostModel};
use hccl_sim::{Collective, Mode, Scenario};
use hccl_topology::{build_preset, Fabric, Preset};

/// `HCCL_TIMING`: `sim` turns simulated event times on (default: wall
/// time).
pub const ENV_TIMING: &str = "HCCL_TIMING";
const ENV_PRESET: &str = "HCCL_SIM_PRESET";
const ENV_SERVERS: &str = "HCCL_SIM_SERVERS";
const DEFAULT_PRESET: &str = "atlas800t-a2";

/// True under `HCCL_TIMING=sim` (read once; another value is a warning).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(
        || match std::env::var(ENV_TIMING).ok().as_deref().map(str::trim) {
            Some("sim") => true,
            None | Some("") | Some("wall") => false,
            Some(v) => {
                tracing::warn!(
                    "{ENV_TIMING}={v:?}: accepted are sim and wall; events measure wall time"
                );
                false
            }
        },
    )
}

struct Model {
    fabric: Fabric,
    layout: GroupLayout,
    costs: CostModel,
    /// Simulated ns per op, by its arguments (a benchmark repeats one op).
    cache: Mutex<HashMap<String, Option<u64>>>,
}

fn models() -> &'static Mutex<HashMap<u32, Option<Arc<Model>>>> {
    static M: OnceLock<Mutex<HashMap<u32, Option<Arc<Model>>>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// The cluster of `n` ranks (`None`, with a warning, if it cannot be built).
fn model(n: u32) -> Option<Arc<Model>> {
    let mut m = models().lock().unwrap_or_else(|p| p.into_inner());
    m.entry(n)
        .or_insert_with(|| match build(n) {
            Ok(model) => Some(Arc::new(model)),
            Err(e) => {
                tracing::warn!("{ENV_TIMING}=sim: {e}; events measure wall time");
                None
            }
        })
        .clone()
}

fn build(n: u32) -> Result<Model, String> {
    let name = std::env::var(ENV_PRESET)
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_PRESET.into());
    let preset = Preset::parse(&name).map_err(|e| format!("{ENV_PRESET}: {e}"))?;
    let per_server = build_preset(preset, 1)
        .map_err(|e| e.to_string())?
        .world_size()
        .max(1);
    let servers = match std::env::var(ENV_SERVERS)
        .ok()
        .filter(|s| !s.trim().is_empty())
    {
        Some(s) => s
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("{ENV_SERVERS}={s:?} is not a number"))?,
        None => n.div_ceil(per_server),
    };
    let fabric = build_preset(preset, servers.max(1)).map_err(|e| e.to_string())?;
    if fabric.world_size() != n {
        return Err(format!(
            "{n} ranks do not fill {servers} server(s) of {name} ({} NPUs)",
            fabric.world_size()
        ));
    }
    let layout = hccl_sim::selector::layout(&fabric);
    let costs = hccl_sim::selector::cost_model(&fabric);
    Ok(Model {
        fabric,
        layout,
        costs,
        cache: Mutex::new(HashMap::new()),
    })
}

/// The simulated time of `args` on the cluster, ns (`None`: not
/// simulated, e.g. the cluster could not be built).
pub(crate) fn op_ns(args: &CollectiveArgs) -> Option<u64> {
    let m = model(args.world_size)?;
    let key = format!("{args:?}");
    if let Some(t) = m.cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return *t;
    }
    let t = simulate(&m, args);
    m.cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, t);
    t
}

fn simulate(m: &Model, args: &CollectiveArgs) -> Option<u64> {
    let spec = select::select(args, &m.layout, &m.costs, None).spec;
    let mut sc = Scenario::new(&m.fabric).mode(Mode::Timing);
    let world = sc.world();
    let op = Collective {
        args: args.clone(),
        algo: spec,
        layout: m.layout.clone(),
    };
    if let Err(e) = sc.op(world, op) {
        tracing::warn!("{ENV_TIMING}=sim: {e}");
        return None;
    }
    let report = sc
        .run()
        .map_err(|e| tracing::warn!("{ENV_TIMING}=sim: {e}"))
        .ok()?;
    // Per rank, its own start to its own end (what a rank's stream events
    // see); the longest rank counts, as `hccl test` reports it.
    let op = report.ops.first()?;
    op.start_ns
        .iter()
        .zip(&op.end_ns)
        .filter_map(|(s, e)| Some(e.as_ref()?.saturating_sub(*s.as_ref()?)))
        .max()
        .map(|t| t + m.fabric.params().op_overhead_ns)
}

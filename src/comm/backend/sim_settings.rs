//! What a simulated cluster is made of ([`SimSettings`]): the fabric
//! (`HCCL_SIM_PRESET` / `HCCL_SIM_SERVERS`, or `HCCL_SIM_RANK_TABLE`), the
//! fault plan (`HCCL_SIM_FAULTS`, the format of `hccl sim --faults`), the
//! seed (`HCCL_SIM_SEED`) and where a hang report is written
//! (`HCCL_FLIGHT_RECORDER_DIR`). Read once, when `Comm::init_all` builds
//! the simulator backend; every bad value fails the constructor naming
//! the variable and the value.

use std::path::PathBuf;

use hccl_sim::faults::{Fault, FaultPlan};
use hccl_topology::{build_preset, Fabric, Preset, RankTable};

use crate::comm::CommError;

/// The fabric preset of the simulated cluster (`hccl topo show --preset`'s names).
pub(crate) const ENV_PRESET: &str = "HCCL_SIM_PRESET";
/// The number of servers of the preset.
pub(crate) const ENV_SERVERS: &str = "HCCL_SIM_SERVERS";
/// An HCCL rank table whose machines are the simulated cluster (as `hccl sim --rank-table`).
pub(crate) const ENV_RANK_TABLE: &str = "HCCL_SIM_RANK_TABLE";
/// A fault plan file (JSON, as `hccl sim --faults`; see `sim/README.md`).
pub(crate) const ENV_FAULTS: &str = "HCCL_SIM_FAULTS";
/// The seed of the simulation (random faults; default 0).
pub(crate) const ENV_SEED: &str = "HCCL_SIM_SEED";
/// Where the flight recorder's dumps go; a simulated hang report is written there too.
pub(crate) const ENV_REPORT_DIR: &str = "HCCL_FLIGHT_RECORDER_DIR";

/// How the simulator backend models the cluster: read from the
/// environment by [`crate::Comm::init_all`] under `HCCL_BACKEND=sim`
/// ([`SimSettings::from_env`]), or given to
/// [`crate::Comm::init_all_sim`].
///
/// Without a preset, servers or rank table, the fabric is a full mesh of
/// the ranks (`full-mesh`, one NPU per server).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimSettings {
    /// `HCCL_SIM_PRESET`: a preset name (`atlas800t-a2`, `leaf-spine`, ...).
    pub preset: Option<String>,
    /// `HCCL_SIM_SERVERS`: servers of the preset (default: as many as the
    /// ranks fill; machine presets have their own NPUs per server, the
    /// generic shapes one).
    pub servers: Option<String>,
    /// `HCCL_SIM_RANK_TABLE`: a rank table file (excludes the two above).
    pub rank_table: Option<PathBuf>,
    /// `HCCL_SIM_FAULTS`: a fault plan file.
    pub faults: Option<PathBuf>,
    /// `HCCL_SIM_SEED`: a decimal `u64`.
    pub seed: Option<String>,
    /// `HCCL_FLIGHT_RECORDER_DIR`: where a hang report is written
    /// (`hccl_sim_hang_<pid>.txt` and `.json`).
    pub report_dir: Option<PathBuf>,
}

/// [`SimSettings`] checked against a world of `n` ranks: what the
/// simulated cluster runs on.
pub(crate) struct Resolved {
    pub(crate) fabric: Fabric,
    pub(crate) plan: FaultPlan,
    pub(crate) seed: u64,
    pub(crate) report_dir: Option<PathBuf>,
    /// How to run the same simulation again (the hang report's replay line).
    pub(crate) replay: String,
}

fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

fn bad(var: &'static str, value: impl Into<String>, reason: impl Into<String>) -> CommError {
    CommError::Env {
        var,
        value: value.into(),
        reason: reason.into(),
    }
}

impl SimSettings {
    /// The settings in the environment (blank variables count as unset).
    pub fn from_env() -> SimSettings {
        SimSettings {
            preset: env(ENV_PRESET),
            servers: env(ENV_SERVERS),
            rank_table: env(ENV_RANK_TABLE).map(PathBuf::from),
            faults: env(ENV_FAULTS).map(PathBuf::from),
            seed: env(ENV_SEED),
            report_dir: env(ENV_REPORT_DIR).map(PathBuf::from),
        }
    }

    /// Checks the settings for a world of `n` ranks and builds its fabric
    /// and fault plan.
    ///
    /// # Errors
    /// [`CommError::Env`] naming the variable and its value: an unknown
    /// preset, servers that are not a positive number, a cluster of
    /// another size than `n`, an unreadable or invalid rank table or fault
    /// plan, a seed that is not a `u64`.
    pub(crate) fn resolve(&self, n: u32) -> Result<Resolved, CommError> {
        let seed = match &self.seed {
            None => 0,
            Some(s) => s.trim().parse::<u64>().map_err(|_| {
                bad(
                    ENV_SEED,
                    s,
                    "is not a seed; write a decimal number in 0..=18446744073709551615",
                )
            })?,
        };
        let fabric = self.fabric(n)?;
        let plan = match &self.faults {
            None => FaultPlan::default(),
            Some(p) => {
                let shown = p.display().to_string();
                let plan =
                    FaultPlan::from_file(p).map_err(|e| bad(ENV_FAULTS, &shown, e.to_string()))?;
                check_plan(&plan, n)
                    .and_then(|()| super::sim_cluster::check_links(&fabric, &plan))
                    .map_err(|r| bad(ENV_FAULTS, &shown, r))?;
                plan
            }
        };
        Ok(Resolved {
            fabric,
            plan,
            seed,
            report_dir: self.report_dir.clone(),
            replay: self.replay(seed),
        })
    }

    fn fabric(&self, n: u32) -> Result<Fabric, CommError> {
        if let Some(path) = &self.rank_table {
            let shown = path.display().to_string();
            if self.preset.is_some() || self.servers.is_some() {
                return Err(bad(
                    ENV_RANK_TABLE,
                    &shown,
                    format!("a rank table gives the cluster; unset {ENV_PRESET} and {ENV_SERVERS}"),
                ));
            }
            let table = RankTable::from_file(path)
                .map_err(|e| bad(ENV_RANK_TABLE, &shown, e.to_string()))?;
            let f = Fabric::for_rank_table(&table)
                .map_err(|e| bad(ENV_RANK_TABLE, &shown, e.to_string()))?;
            if f.world_size() != n {
                return Err(bad(
                    ENV_RANK_TABLE,
                    &shown,
                    format!(
                        "the table has {} ranks; the program made a communicator of {n}",
                        f.world_size()
                    ),
                ));
            }
            return Ok(f);
        }
        if self.preset.is_none() && self.servers.is_none() {
            return Ok(build_preset(Preset::FullMesh, n)?);
        }
        let name = self.preset.as_deref().unwrap_or("atlas800t-a2");
        let preset = Preset::parse(name).map_err(|e| bad(ENV_PRESET, name, e.to_string()))?;
        // The NPUs of one server: the machine's, or one for generic shapes.
        let per = build_preset(preset, 1).map_or(1, |f| f.world_size().max(1));
        let servers = match &self.servers {
            Some(s) => match s.trim().parse::<u32>() {
                Ok(v) if v > 0 => v,
                _ => return Err(bad(ENV_SERVERS, s, "is not a number of servers; write a whole number of at least 1")),
            },
            None if n.is_multiple_of(per) => n / per,
            None => {
                return Err(bad(
                    ENV_PRESET,
                    name,
                    format!("a {name} server has {per} NPUs, which {n} ranks do not fill; make {per}·k ranks or set {ENV_SERVERS}"),
                ))
            }
        };
        let f = build_preset(preset, servers).map_err(|e| {
            let (var, value) = match &self.servers {
                Some(s) => (ENV_SERVERS, s.as_str()),
                None => (ENV_PRESET, name),
            };
            bad(var, value, e.to_string())
        })?;
        if f.world_size() != n {
            let value = self.servers.clone().unwrap_or_else(|| servers.to_string());
            return Err(bad(
                ENV_SERVERS,
                value,
                format!(
                    "{servers} {name} server(s) are {} ranks; the program made a communicator of {n}",
                    f.world_size()
                ),
            ));
        }
        Ok(f)
    }

    /// The environment that runs this simulation again.
    fn replay(&self, seed: u64) -> String {
        let mut line = String::from("rerun the program with HCCL_BACKEND=sim");
        let mut add = |var: &str, v: Option<String>| {
            if let Some(v) = v {
                line.push_str(&format!(" {var}={v}"));
            }
        };
        add(ENV_PRESET, self.preset.clone());
        add(ENV_SERVERS, self.servers.clone());
        add(
            ENV_RANK_TABLE,
            self.rank_table.as_ref().map(|p| p.display().to_string()),
        );
        add(
            ENV_FAULTS,
            self.faults.as_ref().map(|p| p.display().to_string()),
        );
        add(ENV_SEED, Some(seed.to_string()));
        line
    }
}

/// What the backend cannot take from a plan `hccl sim` takes: ranks out
/// of range, and a drop by `nth` without its `op` (ops run one at a time,
/// so "the n-th message of the whole run" has no meaning here).
fn check_plan(plan: &FaultPlan, n: u32) -> Result<(), String> {
    for (i, f) in plan.faults.iter().enumerate() {
        let ranks: Vec<(&str, u32)> = match f {
            Fault::Crash { rank, .. }
            | Fault::SlowRank { rank, .. }
            | Fault::Skip { rank, .. }
            | Fault::WrongArgs { rank, .. } => vec![("rank", *rank)],
            Fault::Jitter { from, to, .. } | Fault::Drop { from, to, .. } => {
                let mut v = Vec::new();
                v.extend(from.map(|r| ("from", r)));
                v.extend(to.map(|r| ("to", r)));
                v
            }
            _ => Vec::new(),
        };
        if let Some((field, r)) = ranks.into_iter().find(|&(_, r)| r >= n) {
            return Err(format!(
                "faults[{i}].{field} = {r}: the cluster has ranks 0..{n}"
            ));
        }
        if let Fault::Drop {
            nth: Some(k),
            op: None,
            ..
        } = f
        {
            return Err(format!(
                "faults[{i}].nth = {k}: the simulator backend counts a drop's nth within one op; give \"op\" (the sender's op index)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &SimSettings, n: u32) -> String {
        match s.resolve(n) {
            Ok(_) => panic!("{s:?} accepted for {n} ranks"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_values_name_the_variable_and_the_value() {
        let s = |f: fn(&mut SimSettings)| {
            let mut s = SimSettings::default();
            f(&mut s);
            s
        };
        let e = err(&s(|s| s.preset = Some("atlas9000".into())), 16);
        assert!(
            e.contains("HCCL_SIM_PRESET") && e.contains("atlas9000"),
            "{e}"
        );
        let e = err(&s(|s| s.servers = Some("two".into())), 16);
        assert!(e.contains("HCCL_SIM_SERVERS") && e.contains("two"), "{e}");
        let e = err(&s(|s| s.servers = Some("0".into())), 16);
        assert!(
            e.contains("HCCL_SIM_SERVERS") && e.contains("\"0\"") || e.contains("= 0"),
            "{e}"
        );
        let e = err(&s(|s| s.servers = Some("3".into())), 16);
        assert!(
            e.contains("HCCL_SIM_SERVERS") && e.contains("24 ranks"),
            "{e}"
        );
        let e = err(&s(|s| s.preset = Some("atlas800t-a2".into())), 12);
        assert!(
            e.contains("HCCL_SIM_PRESET") && e.contains("12 ranks"),
            "{e}"
        );
        let e = err(&s(|s| s.seed = Some("-1".into())), 4);
        assert!(e.contains("HCCL_SIM_SEED") && e.contains("-1"), "{e}");
        let e = err(&s(|s| s.faults = Some("/nonexistent/plan.json".into())), 4);
        assert!(
            e.contains("HCCL_SIM_FAULTS") && e.contains("/nonexistent/plan.json"),
            "{e}"
        );
        let e = err(
            &s(|s| s.rank_table = Some("/nonexistent/rt.json".into())),
            4,
        );
        assert!(
            e.contains("HCCL_SIM_RANK_TABLE") && e.contains("/nonexistent/rt.json"),
            "{e}"
        );
    }

    #[test]
    fn a_plan_must_fit_the_cluster() {
        let dir = std::env::temp_dir().join(format!("hccl-simset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            SimSettings {
                faults: Some(p),
                ..SimSettings::default()
            }
        };
        let e = err(
            &write(
                "far.json",
                r#"{"faults": [{"kind": "crash", "rank": 9, "at_op": 1}]}"#,
            ),
            4,
        );
        assert!(
            e.contains("HCCL_SIM_FAULTS") && e.contains("faults[0].rank = 9"),
            "{e}"
        );
        let e = err(
            &write(
                "nth.json",
                r#"{"faults": [{"kind": "drop", "from": 0, "to": 1, "nth": 1}]}"#,
            ),
            4,
        );
        assert!(e.contains("faults[0].nth") && e.contains("\"op\""), "{e}");
        let e = err(
            &write("bad.json", r#"{"faults": [{"kind": "crash", "rank": 1}]}"#),
            4,
        );
        assert!(
            e.contains("HCCL_SIM_FAULTS") && e.contains("faults[0]"),
            "{e}"
        );
        let ok = write(
            "ok.json",
            r#"{"faults": [{"kind": "crash", "rank": 1, "at_op": 3}]}"#,
        );
        assert_eq!(ok.resolve(4).unwrap().plan.faults.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_preset_fills_its_servers() {
        let s = SimSettings {
            preset: Some("atlas800t-a2".into()),
            ..SimSettings::default()
        };
        assert_eq!(s.resolve(16).unwrap().fabric.world_size(), 16);
        let r = SimSettings::default().resolve(3).unwrap();
        assert_eq!(r.fabric.world_size(), 3);
        assert_eq!(
            r.replay,
            "rerun the program with HCCL_BACKEND=sim HCCL_SIM_SEED=0"
        );
    }
}

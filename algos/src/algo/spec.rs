//! What to run: [`Algorithm`] (one flat algorithm, by HCCL's name) and
//! [`AlgoSpec`] (flat or one per topology level), parsed and printed as
//! `HCCL_ALGO` writes them.

use std::fmt;
use std::str::FromStr;

use crate::collective::CollectiveKind;

/// A collective algorithm. [`fmt::Display`] and [`FromStr`] use HCCL's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Ring (`ring`): k-1 + k-1 steps, bandwidth-optimal, linear latency.
    Ring,
    /// Full mesh (`mesh`, also `fullmesh`): every pair exchanges directly in one step.
    Mesh,
    /// Recursive halving-doubling (`H-D_R`, HCCL's RHD), any rank count.
    HalvingDoubling,
    /// Nonuniform hierarchical ring (`NHR`), ⌈log2 p⌉ steps.
    Nhr,
    /// Nonuniform Bruck (`NB`), ⌈log2 p⌉ steps.
    Nb,
    /// Pairwise exchange (`pairwise`), AllToAll(V) only.
    Pairwise,
    /// Binomial tree (`tree`), Broadcast / Reduce / Scatter / Gather.
    Tree,
    /// HCCL's hierarchical pipeline (`pipeline`, `HCCL_ALGO=level1:pipeline`):
    /// inter-server ring steps overlap intra-server full-mesh steps
    /// (AllGather, ReduceScatter, AllReduce; see the `pipeline` module).
    /// Uses the [`GroupLayout`](crate::layout::GroupLayout)'s servers; on one server it is the mesh.
    Pipeline,
    /// One-shot AllReduce (`oneshot`, HCCL's `AllReduceMeshOneshot`
    /// executor for small AllReduces in a server): one concurrent exchange
    /// of whole vectors, then a local rank-order fold (see `mesh`).
    Oneshot,
    /// Recursive-doubling AllReduce (`doubling`, HCCL's `AllReduceDoubling`
    /// template): ⌈log2 p⌉ exchanges of whole vectors, AllReduce only (see
    /// `hd`).
    Doubling,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 10] = [
        Algorithm::Ring,
        Algorithm::Mesh,
        Algorithm::HalvingDoubling,
        Algorithm::Nhr,
        Algorithm::Nb,
        Algorithm::Pairwise,
        Algorithm::Tree,
        Algorithm::Pipeline,
        Algorithm::Oneshot,
        Algorithm::Doubling,
    ];

    /// HCCL's name.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Mesh => "mesh",
            Algorithm::HalvingDoubling => "H-D_R",
            Algorithm::Nhr => "NHR",
            Algorithm::Nb => "NB",
            Algorithm::Pairwise => "pairwise",
            Algorithm::Tree => "tree",
            Algorithm::Pipeline => "pipeline",
            Algorithm::Oneshot => "oneshot",
            Algorithm::Doubling => "doubling",
        }
    }

    /// True if [`plan`](super::plan) implements `kind` with this algorithm (flat).
    /// SendRecv, BatchSendRecv and Barrier have one algorithm each and
    /// accept any name.
    pub fn supports(self, kind: CollectiveKind) -> bool {
        use CollectiveKind as K;
        if matches!(kind, K::SendRecv | K::BatchSendRecv | K::Barrier) {
            return true;
        }
        match self {
            Algorithm::Ring => !matches!(kind, K::AllToAll | K::AllToAllV),
            Algorithm::Mesh => true,
            Algorithm::HalvingDoubling => matches!(
                kind,
                K::AllReduce | K::AllGather | K::AllGatherV | K::ReduceScatter | K::ReduceScatterV
            ),
            Algorithm::Nhr | Algorithm::Nb => matches!(
                kind,
                K::AllReduce
                    | K::AllGather
                    | K::AllGatherV
                    | K::ReduceScatter
                    | K::ReduceScatterV
                    | K::Broadcast
            ),
            Algorithm::Tree => matches!(kind, K::Broadcast | K::Reduce),
            Algorithm::Pairwise => matches!(kind, K::AllToAll | K::AllToAllV),
            Algorithm::Pipeline => {
                matches!(kind, K::AllReduce | K::AllGather | K::ReduceScatter)
            }
            Algorithm::Oneshot | Algorithm::Doubling => kind == K::AllReduce,
        }
    }

    /// The algorithms that implement `kind`.
    pub fn supported_for(kind: CollectiveKind) -> Vec<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .filter(|a| a.supports(kind))
            .collect()
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of parsing an algorithm name or an algorithm spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}; accepted: {accepted}")]
pub struct ParseAlgoError {
    /// What was parsed ("algorithm", "level", ...).
    pub what: &'static str,
    /// The rejected text.
    pub value: String,
    /// The accepted values.
    pub accepted: String,
}

impl FromStr for Algorithm {
    type Err = ParseAlgoError;

    /// HCCL's names, case-insensitively; also `fullmesh`, `RHD`, `HD`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase().replace(['-', '_'], "");
        let a = match key.as_str() {
            "ring" => Algorithm::Ring,
            "mesh" | "fullmesh" => Algorithm::Mesh,
            "hdr" | "rhd" | "hd" => Algorithm::HalvingDoubling,
            "nhr" => Algorithm::Nhr,
            "nb" => Algorithm::Nb,
            "pairwise" => Algorithm::Pairwise,
            "tree" => Algorithm::Tree,
            "pipeline" => Algorithm::Pipeline,
            "oneshot" | "meshoneshot" => Algorithm::Oneshot,
            "doubling" | "rd" | "recursivedoubling" => Algorithm::Doubling,
            _ => {
                return Err(ParseAlgoError {
                    what: "algorithm",
                    value: s.to_string(),
                    accepted: Algorithm::ALL.map(|a| a.name()).join(", "),
                })
            }
        };
        Ok(a)
    }
}

/// Algorithms per topology level; `None` = let the library choose (HCCL's `NA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Levels {
    /// Inside a server.
    pub level0: Option<Algorithm>,
    /// Between servers.
    pub level1: Option<Algorithm>,
    /// Between super pods.
    pub level2: Option<Algorithm>,
}

/// Which algorithm(s) to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlgoSpec {
    /// One algorithm over the whole communicator.
    Flat(Algorithm),
    /// One algorithm per level of the [`GroupLayout`](crate::layout::GroupLayout) (HCCL's hierarchical
    /// composition, e.g. AllReduce = level0 ReduceScatter → level1 AllReduce
    /// → level0 AllGather).
    Hierarchical(Levels),
}

impl fmt::Display for AlgoSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlgoSpec::Flat(a) => write!(f, "{a}"),
            AlgoSpec::Hierarchical(l) => {
                let n = |a: Option<Algorithm>| a.map_or("NA", |a| a.name());
                write!(f, "level0:{};level1:{}", n(l.level0), n(l.level1))?;
                if let Some(a) = l.level2 {
                    write!(f, ";level2:{a}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for AlgoSpec {
    type Err = ParseAlgoError;

    /// An algorithm name (`ring`) or HCCL's level syntax
    /// (`level0:NA;level1:H-D_R;level2:ring`, `NA` = choose automatically).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if !s.contains(':') {
            return s.parse().map(AlgoSpec::Flat);
        }
        let mut l = Levels::default();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (level, name) = part.split_once(':').ok_or_else(|| ParseAlgoError {
                what: "level setting (expected levelN:<algo>)",
                value: part.to_string(),
                accepted: "level0:<algo>, level1:<algo>, level2:<algo>".into(),
            })?;
            let algo = if name.trim().eq_ignore_ascii_case("NA") {
                None
            } else {
                Some(name.parse::<Algorithm>()?)
            };
            match level.trim() {
                "level0" => l.level0 = algo,
                "level1" => l.level1 = algo,
                "level2" => l.level2 = algo,
                other => {
                    return Err(ParseAlgoError {
                        what: "level",
                        value: other.to_string(),
                        accepted: "level0, level1, level2".into(),
                    })
                }
            }
        }
        Ok(AlgoSpec::Hierarchical(l))
    }
}

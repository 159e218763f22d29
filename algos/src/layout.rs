//! Where ranks sit: the only topology facts the algorithms need.
//!
//! For each rank, its server index and super-pod index. Hierarchical
//! algorithms need a *regular* layout (ranks numbered server by server, the
//! same number of ranks on every server, the same number of servers in every
//! super pod), as HCCL's hierarchical algorithms assume symmetric servers;
//! [`GroupLayout::regular`] reports that shape or why it is not regular.

use std::sync::OnceLock;

use crate::schedule::Rank;

/// Server and super-pod index of every rank.
#[derive(Clone)]
pub struct GroupLayout {
    server_of: Vec<u32>,
    pod_of: Vec<u32>,
    /// [`GroupLayout::regular`]'s answer, computed once: it is O(ranks) and
    /// hierarchical planning asks it once per rank (O(ranks²) at 16,384
    /// ranks in the simulator otherwise).
    shape: OnceLock<Result<Regular, LayoutError>>,
}

/// Equal when the ranks sit in the same places (the cached shape follows
/// from them).
impl PartialEq for GroupLayout {
    fn eq(&self, other: &GroupLayout) -> bool {
        self.server_of == other.server_of && self.pod_of == other.pod_of
    }
}

impl Eq for GroupLayout {}

/// The ranks' places only, as before the shape was stored (whether it has
/// been asked yet changes nothing printed).
impl std::fmt::Debug for GroupLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupLayout")
            .field("server_of", &self.server_of)
            .field("pod_of", &self.pod_of)
            .finish()
    }
}

/// The shape of a regular layout: `world = pods * servers_per_pod * ranks_per_server`,
/// rank `r` on server `r / ranks_per_server`, in pod `r / (ranks_per_server * servers_per_pod)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regular {
    /// Ranks on each server (level-0 group size).
    pub ranks_per_server: u32,
    /// Servers in each super pod.
    pub servers_per_pod: u32,
    /// Number of super pods.
    pub pods: u32,
}

/// Error of building or using a [`GroupLayout`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// The server and pod vectors differ in length.
    #[error(
        "layout: server_of has {servers} entries but pod_of has {pods}; give one entry per rank"
    )]
    LengthMismatch {
        /// Entries of `server_of`.
        servers: usize,
        /// Entries of `pod_of`.
        pods: usize,
    },
    /// The layout has no ranks.
    #[error("layout has no ranks")]
    Empty,
    /// The layout is not regular (see the module docs).
    #[error("layout is not regular at rank {rank}: {why}; hierarchical algorithms need ranks numbered server by server with equal servers and pods")]
    Irregular {
        /// First rank where regularity breaks.
        rank: Rank,
        /// What is wrong.
        why: String,
    },
    /// A rank count of zero in a shape.
    #[error("layout shape has a zero: {what} = 0")]
    ZeroShape {
        /// Which part.
        what: &'static str,
    },
}

impl GroupLayout {
    /// All `world` ranks on one server in one pod.
    pub fn flat(world: u32) -> GroupLayout {
        GroupLayout {
            server_of: vec![0; world as usize],
            pod_of: vec![0; world as usize],
            shape: OnceLock::new(),
        }
    }

    /// `servers` servers of `per_server` ranks each, in one pod.
    pub fn servers(servers: u32, per_server: u32) -> GroupLayout {
        GroupLayout::pods(1, servers, per_server)
    }

    /// `pods` super pods of `servers_per_pod` servers of `per_server` ranks.
    pub fn pods(pods: u32, servers_per_pod: u32, per_server: u32) -> GroupLayout {
        let world = pods as usize * servers_per_pod as usize * per_server as usize;
        let per_server = per_server.max(1) as usize;
        let per_pod = per_server * servers_per_pod.max(1) as usize;
        GroupLayout {
            server_of: (0..world).map(|r| (r / per_server) as u32).collect(),
            pod_of: (0..world).map(|r| (r / per_pod) as u32).collect(),
            shape: OnceLock::new(),
        }
    }

    /// From explicit per-rank indices.
    ///
    /// # Errors
    /// [`LayoutError::LengthMismatch`] or [`LayoutError::Empty`].
    pub fn from_parts(server_of: Vec<u32>, pod_of: Vec<u32>) -> Result<GroupLayout, LayoutError> {
        if server_of.len() != pod_of.len() {
            return Err(LayoutError::LengthMismatch {
                servers: server_of.len(),
                pods: pod_of.len(),
            });
        }
        if server_of.is_empty() {
            return Err(LayoutError::Empty);
        }
        Ok(GroupLayout {
            server_of,
            pod_of,
            shape: OnceLock::new(),
        })
    }

    /// Number of ranks.
    pub fn world_size(&self) -> u32 {
        self.server_of.len() as u32
    }

    /// Server index of `rank`.
    pub fn server_of(&self, rank: Rank) -> u32 {
        self.server_of[rank as usize]
    }

    /// Super-pod index of `rank`.
    pub fn pod_of(&self, rank: Rank) -> u32 {
        self.pod_of[rank as usize]
    }

    /// Number of distinct servers.
    pub fn server_count(&self) -> u32 {
        let mut v = self.server_of.clone();
        v.sort_unstable();
        v.dedup();
        v.len() as u32
    }

    /// The regular shape, if the layout has one (computed on the first
    /// call, O(ranks); later calls return the stored answer).
    ///
    /// # Errors
    /// [`LayoutError::Irregular`] naming the first rank that breaks it.
    pub fn regular(&self) -> Result<Regular, LayoutError> {
        self.shape.get_or_init(|| self.find_regular()).clone()
    }

    fn find_regular(&self) -> Result<Regular, LayoutError> {
        let n = self.server_of.len();
        if n == 0 {
            return Err(LayoutError::Empty);
        }
        let per_server = self
            .server_of
            .iter()
            .take_while(|&&s| s == self.server_of[0])
            .count();
        let per_pod = self
            .pod_of
            .iter()
            .take_while(|&&s| s == self.pod_of[0])
            .count();
        if per_pod % per_server != 0 || !n.is_multiple_of(per_pod) {
            return Err(LayoutError::Irregular {
                rank: per_pod.min(n - 1) as Rank,
                why: format!(
                    "{per_pod} ranks in the first pod is not a multiple of {per_server} ranks per server, or {n} ranks is not a multiple of it"
                ),
            });
        }
        for r in 0..n {
            let s_first = self.server_of[r / per_server * per_server];
            let p_first = self.pod_of[r / per_pod * per_pod];
            if self.server_of[r] != s_first {
                return Err(LayoutError::Irregular {
                    rank: r as Rank,
                    why: format!(
                        "server index {} breaks the pattern of {per_server} consecutive ranks per server",
                        self.server_of[r]
                    ),
                });
            }
            if self.pod_of[r] != p_first {
                return Err(LayoutError::Irregular {
                    rank: r as Rank,
                    why: format!(
                        "pod index {} breaks the pattern of {per_pod} consecutive ranks per pod",
                        self.pod_of[r]
                    ),
                });
            }
        }
        // A server (pod) index may label only one block of consecutive ranks.
        for (ids, block, what) in [
            (&self.server_of, per_server, "server"),
            (&self.pod_of, per_pod, "pod"),
        ] {
            let mut seen = std::collections::BTreeMap::new();
            for b in (0..n).step_by(block) {
                if let Some(prev) = seen.insert(ids[b], b) {
                    return Err(LayoutError::Irregular {
                        rank: b as Rank,
                        why: format!("{what} index {} already used by rank {prev}", ids[b]),
                    });
                }
            }
        }
        Ok(Regular {
            ranks_per_server: per_server as u32,
            servers_per_pod: (per_pod / per_server) as u32,
            pods: (n / per_pod) as u32,
        })
    }
}

impl From<&hccl_topology::ClusterSpec> for GroupLayout {
    /// Each rank's server and super-pod index from the cluster model (a
    /// rank table or a preset). Whether the result is usable by the
    /// hierarchical algorithms is [`GroupLayout::regular`]'s question.
    fn from(c: &hccl_topology::ClusterSpec) -> GroupLayout {
        let ranks = 0..c.world_size();
        GroupLayout {
            server_of: ranks.clone().map(|r| c.server_of(r).unwrap_or(0)).collect(),
            pod_of: ranks.map(|r| c.super_pod_of(r).unwrap_or(0)).collect(),
            shape: OnceLock::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_shapes_are_found() {
        let l = GroupLayout::pods(2, 3, 4);
        assert_eq!(
            l.regular(),
            Ok(Regular {
                ranks_per_server: 4,
                servers_per_pod: 3,
                pods: 2
            })
        );
        assert_eq!(l.server_of(23), 5);
        assert_eq!(l.pod_of(12), 1);
        // The stored answer is the same, and a layout that has answered
        // equals one that has not.
        assert_eq!(l.regular(), l.find_regular());
        assert_eq!(l, GroupLayout::pods(2, 3, 4));
        let bad = GroupLayout::from_parts(vec![0, 0, 1], vec![0; 3]).unwrap();
        assert!(bad.regular().is_err());
        assert_eq!(bad.regular(), bad.find_regular());
    }

    #[test]
    fn irregular_layouts_name_the_rank() {
        // Servers of 2, 2, 1 ranks.
        let l = GroupLayout::from_parts(vec![0, 0, 1, 1, 2], vec![0; 5]).unwrap();
        assert!(
            matches!(l.regular(), Err(LayoutError::Irregular { rank: 4, .. })),
            "{:?}",
            l.regular()
        );
        // Interleaved servers.
        let l = GroupLayout::from_parts(vec![0, 1, 0, 1], vec![0; 4]).unwrap();
        let e = l.regular().unwrap_err();
        assert!(matches!(e, LayoutError::Irregular { rank: 2, .. }), "{e}");
    }

    #[test]
    fn from_cluster_spec_keeps_servers_and_pods() {
        // Three servers of two NPUs, super pods of two servers (the last
        // pod has one server, so the layout is not regular).
        let spec = hccl_topology::ClusterSpec::uniform(3, 2, Some(2)).unwrap();
        let l = GroupLayout::from(&spec);
        assert_eq!(
            l,
            GroupLayout::from_parts(vec![0, 0, 1, 1, 2, 2], vec![0, 0, 0, 0, 1, 1]).unwrap()
        );
        assert!(l.regular().is_err());
        let spec = hccl_topology::ClusterSpec::uniform(4, 2, Some(2)).unwrap();
        let l = GroupLayout::from(&spec);
        assert_eq!(l, GroupLayout::pods(2, 2, 2));
    }
}

//! Checking a plan against a fabric and scenario: names to link ids, ranks
//! and ops in range.

use hccl_topology::Fabric;
use petgraph::graph::NodeIndex;
use petgraph::visit::EdgeRef;

use super::{FaultError, LinkRef};
use crate::flows::LinkId;
use crate::scenario::Scenario;

fn node_by_name(fabric: &Fabric, path: &str, name: &str) -> Result<NodeIndex, FaultError> {
    let g = fabric.graph();
    g.node_indices()
        .find(|&n| g[n].name == name)
        .ok_or_else(|| FaultError::UnknownNode {
            path: path.into(),
            name: name.into(),
            examples: g
                .node_indices()
                .filter(|&n| g[n].name.ends_with('0') || g[n].name.ends_with('1'))
                .take(4)
                .map(|n| format!("'{}'", g[n].name))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The directed link ids a [`LinkRef`] names, sorted, without repeats.
pub(crate) fn links(
    fabric: &Fabric,
    path: &str,
    link: &LinkRef,
    directed: bool,
) -> Result<Vec<LinkId>, FaultError> {
    let g = fabric.graph();
    let mut out: Vec<LinkId> = Vec::new();
    match link {
        LinkRef::Id(id) => {
            if *id as usize >= g.edge_count() {
                return Err(FaultError::LinkOutOfRange {
                    path: path.into(),
                    id: *id,
                    count: g.edge_count(),
                });
            }
            out.push(*id);
        }
        LinkRef::Nodes([a, b]) => {
            let na = node_by_name(fabric, &format!("{path}[0]"), a)?;
            let nb = node_by_name(fabric, &format!("{path}[1]"), b)?;
            out.extend(g.edges_connecting(na, nb).map(|e| e.id().index() as LinkId));
            if !directed {
                out.extend(g.edges_connecting(nb, na).map(|e| e.id().index() as LinkId));
            }
            if out.is_empty() {
                return Err(FaultError::NotLinked {
                    path: path.into(),
                    a: a.clone(),
                    b: b.clone(),
                });
            }
        }
        LinkRef::Route { ranks: [a, b] } => {
            for (i, r) in [a, b].into_iter().enumerate() {
                check_rank(fabric, &format!("{path}.ranks[{i}]"), *r)?;
            }
            let mut add = |s: u32, d: u32| -> Result<(), FaultError> {
                let route = fabric.route(s, d).map_err(|e| FaultError::BadArgs {
                    path: path.into(),
                    reason: e.to_string(),
                })?;
                out.extend(route.edges().iter().map(|e| e.index() as LinkId));
                Ok(())
            };
            add(*a, *b)?;
            if !directed {
                add(*b, *a)?;
            }
            if out.is_empty() {
                return Err(FaultError::BadArgs {
                    path: path.into(),
                    reason: format!("ranks {a} and {b} are the same NPU: the route has no link"),
                });
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

pub(crate) fn check_rank(fabric: &Fabric, path: &str, rank: u32) -> Result<(), FaultError> {
    if rank >= fabric.world_size() {
        return Err(FaultError::RankOutOfRange {
            path: path.into(),
            rank,
            world_size: fabric.world_size(),
        });
    }
    Ok(())
}

/// Checks `op` exists and, with `rank`, that the rank is a member of its
/// communicator.
pub(crate) fn check_op(
    sc: &Scenario<'_>,
    path: &str,
    op: usize,
    rank: Option<u32>,
) -> Result<(), FaultError> {
    let entry = sc.ops.get(op).ok_or(FaultError::OpOutOfRange {
        path: path.into(),
        op,
        count: sc.ops.len(),
    })?;
    if let Some(r) = rank {
        let comm = &sc.comms[entry.comm];
        if comm.index_of.get(r as usize).copied().unwrap_or(u32::MAX) == u32::MAX {
            return Err(FaultError::NotAMember {
                path: path.into(),
                rank: r,
                op,
                comm: comm.name.clone(),
            });
        }
    }
    Ok(())
}

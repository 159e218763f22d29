//! Routing: deterministic fewest-hop paths, equal-cost paths spread by a
//! hash of (src, dst), found by a bidirectional BFS over reused scratch.

use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;

use crate::fabric::{Link, Node};

/// A route: the directed edges from the source NPU to the destination NPU,
/// in order. Empty when source and destination are the same rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    edges: Vec<EdgeIndex>,
}

impl Route {
    pub(crate) fn new(edges: Vec<EdgeIndex>) -> Route {
        Route { edges }
    }

    /// The directed edges, source side first; look them up with
    /// [`crate::Fabric::link`].
    pub fn edges(&self) -> &[EdgeIndex] {
        &self.edges
    }

    /// Number of hops (edges).
    pub fn hops(&self) -> usize {
        self.edges.len()
    }
}

/// Reused search state. Stamps mark which entries belong to the current
/// search, so nothing is cleared between searches.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    generation: u32,
    fwd_stamp: Vec<u32>,
    fwd_dist: Vec<u32>,
    bwd_stamp: Vec<u32>,
    bwd_dist: Vec<u32>,
    fwd_frontier: Vec<NodeIndex>,
    bwd_frontier: Vec<NodeIndex>,
    next: Vec<NodeIndex>,
    meet: Vec<NodeIndex>,
}

impl Scratch {
    fn begin(&mut self, nodes: usize) {
        if self.fwd_stamp.len() != nodes {
            *self = Scratch::default();
            self.fwd_stamp = vec![0; nodes];
            self.fwd_dist = vec![0; nodes];
            self.bwd_stamp = vec![0; nodes];
            self.bwd_dist = vec![0; nodes];
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.fwd_stamp.fill(0);
            self.bwd_stamp.fill(0);
            self.generation = 1;
        }
    }
}

/// SplitMix64 step: a fixed, well-mixed hash (no RNG, no per-process seed).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Fewest-hop path from `src` to `dst`; with `scale_up_only`, scale-out
/// links (RoCE) are not used. `key` seeds the equal-cost choice.
pub(crate) fn search(
    g: &DiGraph<Node, Link>,
    sc: &mut Scratch,
    src: NodeIndex,
    dst: NodeIndex,
    key: u64,
    scale_up_only: bool,
) -> Option<Vec<EdgeIndex>> {
    if src == dst {
        return Some(Vec::new());
    }
    let allowed = |l: &Link| !(scale_up_only && l.class.is_scale_out());
    sc.begin(g.node_count());
    let generation = sc.generation;
    sc.fwd_stamp[src.index()] = generation;
    sc.fwd_dist[src.index()] = 0;
    sc.bwd_stamp[dst.index()] = generation;
    sc.bwd_dist[dst.index()] = 0;
    sc.fwd_frontier.clear();
    sc.fwd_frontier.push(src);
    sc.bwd_frontier.clear();
    sc.bwd_frontier.push(dst);
    let (mut df, mut db) = (0u32, 0u32);
    sc.meet.clear();
    // Expand whole layers, the smaller frontier first. When a layer meets the
    // other side, every meeting node lies on a shortest path (the layers
    // before were disjoint), and they are all found because the layer is
    // finished before stopping.
    while sc.meet.is_empty() {
        if sc.fwd_frontier.is_empty() || sc.bwd_frontier.is_empty() {
            return None;
        }
        sc.next.clear();
        if sc.fwd_frontier.len() <= sc.bwd_frontier.len() {
            for &u in &sc.fwd_frontier {
                for e in g.edges_directed(u, Direction::Outgoing) {
                    let v = e.target().index();
                    if !allowed(e.weight()) || sc.fwd_stamp[v] == generation {
                        continue;
                    }
                    sc.fwd_stamp[v] = generation;
                    sc.fwd_dist[v] = df + 1;
                    sc.next.push(e.target());
                    if sc.bwd_stamp[v] == generation {
                        sc.meet.push(e.target());
                    }
                }
            }
            df += 1;
            std::mem::swap(&mut sc.fwd_frontier, &mut sc.next);
        } else {
            for &u in &sc.bwd_frontier {
                for e in g.edges_directed(u, Direction::Incoming) {
                    let v = e.source().index();
                    if !allowed(e.weight()) || sc.bwd_stamp[v] == generation {
                        continue;
                    }
                    sc.bwd_stamp[v] = generation;
                    sc.bwd_dist[v] = db + 1;
                    sc.next.push(e.source());
                    if sc.fwd_stamp[v] == generation {
                        sc.meet.push(e.source());
                    }
                }
            }
            db += 1;
            std::mem::swap(&mut sc.bwd_frontier, &mut sc.next);
        }
    }

    let mut h = mix(key);
    let meet = sc.meet[(h % sc.meet.len() as u64) as usize];
    let mut path = Vec::with_capacity((df + db) as usize);
    // Back from the meeting node to src over predecessors one layer closer,
    // then on from it to dst over successors one layer closer.
    let layers = Layers {
        g,
        allowed,
        generation,
    };
    layers.walk(
        &sc.fwd_stamp,
        &sc.fwd_dist,
        meet,
        src,
        Direction::Incoming,
        &mut h,
        &mut path,
    )?;
    path.reverse();
    layers.walk(
        &sc.bwd_stamp,
        &sc.bwd_dist,
        meet,
        dst,
        Direction::Outgoing,
        &mut h,
        &mut path,
    )?;
    Some(path)
}

/// The BFS layers of one search, for walking a shortest path out of them.
struct Layers<'g, A> {
    g: &'g DiGraph<Node, Link>,
    allowed: A,
    generation: u32,
}

impl<A: Fn(&Link) -> bool> Layers<'_, A> {
    /// Walks from `from` to `to`, one layer closer per hop, over edges in
    /// direction `dir` (`Incoming`: toward the search's source, using the
    /// forward layers; `Outgoing`: toward its destination, using the
    /// backward ones), choosing among equal-cost edges by the running hash
    /// `h`. Pushes the edges to `path`; `None` if a layer has no edge.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        stamp: &[u32],
        dist: &[u32],
        from: NodeIndex,
        to: NodeIndex,
        dir: Direction,
        h: &mut u64,
        path: &mut Vec<EdgeIndex>,
    ) -> Option<()> {
        let far = |e: &petgraph::graph::EdgeReference<'_, Link>| match dir {
            Direction::Incoming => e.source(),
            Direction::Outgoing => e.target(),
        };
        let mut cur = from;
        while cur != to {
            let want = dist[cur.index()] - 1;
            let ok = |e: &petgraph::graph::EdgeReference<'_, Link>| {
                let u = far(e).index();
                (self.allowed)(e.weight()) && stamp[u] == self.generation && dist[u] == want
            };
            let count = self.g.edges_directed(cur, dir).filter(ok).count();
            if count == 0 {
                return None;
            }
            *h = mix(*h);
            let pick = self
                .g
                .edges_directed(cur, dir)
                .filter(ok)
                .nth((*h % count as u64) as usize)?;
            path.push(pick.id());
            cur = far(&pick);
        }
        Some(())
    }
}

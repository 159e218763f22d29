//! Bisection bandwidth: maximum flow between the two rank halves (Dinic).

use std::collections::VecDeque;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use crate::fabric::{Link, Node};

struct Arc {
    to: usize,
    cap: f64,
}

/// Max flow, GB/s, from the NPUs of ranks `0..n/2` to those of `n/2..n`.
pub(crate) fn rank_halves_max_flow(g: &DiGraph<Node, Link>, npus: &[NodeIndex]) -> f64 {
    let n = npus.len();
    if n < 2 {
        return 0.0;
    }
    let total: f64 = g.edge_weights().map(|l| l.bandwidth_gbps).sum::<f64>() + 1.0;
    let source = g.node_count();
    let sink = source + 1;
    let mut arcs: Vec<Arc> = Vec::with_capacity(2 * (g.edge_count() + n));
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); g.node_count() + 2];
    let mut add = |arcs: &mut Vec<Arc>, a: usize, b: usize, cap: f64| {
        adj[a].push(arcs.len());
        arcs.push(Arc { to: b, cap });
        adj[b].push(arcs.len());
        arcs.push(Arc { to: a, cap: 0.0 });
    };
    for e in g.edge_references() {
        add(
            &mut arcs,
            e.source().index(),
            e.target().index(),
            e.weight().bandwidth_gbps,
        );
    }
    for (r, npu) in npus.iter().enumerate() {
        if r < n / 2 {
            add(&mut arcs, source, npu.index(), total);
        } else {
            add(&mut arcs, npu.index(), sink, total);
        }
    }
    let eps = 1e-9 * total;
    let mut flow = 0.0;
    let mut level = vec![u32::MAX; adj.len()];
    let mut next = vec![0usize; adj.len()];
    loop {
        level.fill(u32::MAX);
        level[source] = 0;
        let mut q = VecDeque::from([source]);
        while let Some(u) = q.pop_front() {
            for &a in &adj[u] {
                let v = arcs[a].to;
                if arcs[a].cap > eps && level[v] == u32::MAX {
                    level[v] = level[u] + 1;
                    q.push_back(v);
                }
            }
        }
        if level[sink] == u32::MAX {
            return flow;
        }
        next.fill(0);
        // Iterative DFS for blocking flow: a stack of (node, arc taken).
        loop {
            let mut stack: Vec<usize> = Vec::new();
            let mut u = source;
            let pushed = loop {
                if u == sink {
                    let f = stack
                        .iter()
                        .map(|&a| arcs[a].cap)
                        .fold(f64::INFINITY, f64::min);
                    break Some(f);
                }
                let mut advanced = false;
                while next[u] < adj[u].len() {
                    let a = adj[u][next[u]];
                    let v = arcs[a].to;
                    if arcs[a].cap > eps && level[v] == level[u] + 1 {
                        stack.push(a);
                        u = v;
                        advanced = true;
                        break;
                    }
                    next[u] += 1;
                }
                if !advanced {
                    // Dead end: retreat one arc and skip it.
                    level[u] = u32::MAX;
                    match stack.pop() {
                        None => break None,
                        Some(a) => {
                            u = arcs[a ^ 1].to;
                            next[u] += 1;
                        }
                    }
                }
            };
            match pushed {
                None => break,
                Some(f) => {
                    for &a in &stack {
                        arcs[a].cap -= f;
                        arcs[a ^ 1].cap += f;
                    }
                    flow += f;
                }
            }
        }
    }
}

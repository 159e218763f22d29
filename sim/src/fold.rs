//! Symmetry folding: run one rank per orbit of a shift symmetry.
//!
//! If rank `r + d` (mod n) runs the plan of rank `r` with every peer moved
//! by `d` ([`crate::PlanSource::shift_period`]), and the fabric treats the
//! moved messages alike, every rank's trajectory is the image of rank
//! `r mod d`'s: the same steps at the same times. [`analyse`] looks for the
//! smallest such `d` and proves the fabric part of it; the engine then runs
//! only ranks `0..d` and copies their times to the images
//! ([`crate::Scenario::symmetry`]).
//!
//! The fabric part, for the channels the representatives send on (their
//! peers, read from their plans):
//!
//! - each channel's `G = n / d` images (`r + kd → p + kd`) have routes of
//!   the same length with the same bandwidth and latency at every position;
//! - **good links**: the edges at one position of a channel's images form
//!   an *orbit* of `G` distinct edges, and every other use of any of them is
//!   the same orbit at a consistent phase. The folded network has one link
//!   per good orbit: all `G` edges carry images of the same flows at the
//!   same times, so one link stands for all of them (also in the usage
//!   report). A route may cross an orbit once.
//! - **slack links**: every other used edge (ECMP's hashed spine choice
//!   breaks the orbits there). Such an edge is left out of the folded
//!   routes only if it can never limit a rate: its capacity is at least the
//!   sum, over the image channels crossing it, of each channel's smallest
//!   good-link capacity (a channel carries one flow at a time, and a flow
//!   never runs faster than its good links allow). Then the max-min rates
//!   with it are the rates without it (the allocation without it is
//!   feasible with it and every flow keeps its bottleneck), so nothing
//!   changes; its latency stays in the route's latency. Its usage is
//!   rebuilt from the flows of the channels crossing it.
//!
//! What is not proved here: the plans' symmetry (declared by the plan
//! source and checked for every rank of mid-size cases by tests), and that
//! the engine's order among events of one instant does not matter (the
//! folded-vs-full tests compare every rank's times and links bit for bit).
//! Anything else — data mode, hooks, per-rank op orders, communicators
//! other than the world in order, a stall or an error — runs in full.

use std::collections::{BTreeMap, BTreeSet};

use hccl_algos::schedule::Op;

use crate::flows::{LinkId, LinkSpec, LinkUsage};
use crate::scenario::{Mode, Scenario};

const NONE: u32 = u32::MAX;

/// The route of a representative's channel in the folded network.
#[derive(Debug, Clone)]
pub(crate) struct FoldRoute {
    /// Folded link ids (good orbits), in route order.
    pub links: Vec<LinkId>,
    /// Sum of the hop latencies of the whole fabric route, slack links too.
    pub latency: u64,
    /// Index among the channels crossing slack links, or `u32::MAX`.
    pub slack: u32,
}

/// A proved shift symmetry of a scenario and its folded network.
#[derive(Debug)]
pub(crate) struct Fold {
    /// Ranks `r` and `r + period` (mod world) are images of each other.
    pub period: u32,
    /// Ranks of the fabric.
    pub world: u32,
    /// The folded network's links: one per good orbit.
    pub links: Vec<LinkSpec>,
    /// Per fabric edge: its folded link (good orbit), or `u32::MAX`.
    edge_link: Vec<u32>,
    /// (representative sender, fabric receiver) -> route.
    routes: BTreeMap<(u32, u32), FoldRoute>,
    /// Per slack edge: the slack channels of the image channels crossing it
    /// (a channel once per image).
    slack_edges: Vec<(usize, Vec<u32>)>,
    /// Number of channels crossing slack links.
    pub slack_chans: u32,
}

impl Fold {
    /// Representative of `rank` and the shift that carries it there.
    #[inline]
    pub(crate) fn rep(&self, rank: u32) -> (u32, u32) {
        (rank % self.period, rank / self.period * self.period)
    }

    /// `rank` moved back by `shift` (mod world).
    #[inline]
    pub(crate) fn unshift(&self, rank: u32, shift: u32) -> u32 {
        ((u64::from(rank) + u64::from(self.world) - u64::from(shift)) % u64::from(self.world))
            as u32
    }

    /// The folded route of the channel from representative `src` to `dst`.
    pub(crate) fn route(&self, src: u32, dst: u32) -> Option<&FoldRoute> {
        self.routes.get(&(src, dst))
    }

    /// Every fabric edge's usage from the folded links' usage and the
    /// slack channels' flows (`(start, end)` intervals and bytes each).
    pub(crate) fn expand_usage(
        &self,
        folded: &[LinkUsage],
        slack_flows: &[Vec<(u64, u64)>],
        slack_bytes: &[u64],
    ) -> Vec<LinkUsage> {
        let mut out: Vec<LinkUsage> = self
            .edge_link
            .iter()
            .map(|&l| {
                if l == NONE {
                    LinkUsage::default()
                } else {
                    folded[l as usize]
                }
            })
            .collect();
        // Many spine links carry the same set of channels: merge each set once.
        let mut memo: BTreeMap<&[u32], LinkUsage> = BTreeMap::new();
        for (edge, uses) in &self.slack_edges {
            let u = *memo.entry(uses.as_slice()).or_insert_with(|| {
                let bytes = uses
                    .iter()
                    .map(|&c| slack_bytes[c as usize])
                    .fold(0u64, u64::saturating_add);
                let distinct: BTreeSet<u32> = uses.iter().copied().collect();
                let mut iv: Vec<(u64, u64)> = distinct
                    .iter()
                    .flat_map(|&c| slack_flows[c as usize].iter().copied())
                    .collect();
                iv.sort_unstable();
                let (mut busy, mut open, mut close) = (0u64, 0u64, None::<u64>);
                for (s, e) in iv {
                    match close {
                        Some(c) if s <= c => close = Some(c.max(e)),
                        _ => {
                            if let Some(c) = close {
                                busy = busy.saturating_add(c - open);
                            }
                            open = s;
                            close = Some(e);
                        }
                    }
                }
                if let Some(c) = close {
                    busy = busy.saturating_add(c - open);
                }
                LinkUsage {
                    busy_ns: busy,
                    bytes,
                }
            });
            out[*edge] = u;
        }
        out
    }
}

/// Whether the scenario may fold at all, and the plans' common period.
fn plan_period(sc: &Scenario<'_>) -> Option<u32> {
    let n = sc.fabric.world_size();
    if !sc.symmetry
        || sc.mode != Mode::Timing
        || !sc.orders.is_empty()
        || n < 2
        || sc.ops.is_empty()
    {
        return None;
    }
    let mut period = 1u64;
    for op in &sc.ops {
        let comm = &sc.comms[op.comm];
        if comm.members.len() != n as usize
            || comm.members.iter().enumerate().any(|(i, &m)| m != i as u32)
        {
            return None;
        }
        let p = u64::from(op.source.shift_period(n)?);
        if p == 0 || u64::from(n) % p != 0 {
            return None;
        }
        period = lcm(period, p);
    }
    u32::try_from(period).ok()
}

fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

/// The smallest proved period of `sc` and its folded network, or `None`
/// (run in full).
pub(crate) fn analyse(sc: &Scenario<'_>) -> Option<Fold> {
    let base = plan_period(sc)?;
    let n = sc.fabric.world_size();
    // Send peers of each representative, read from its plans once.
    let mut peers: Vec<BTreeSet<u32>> = Vec::new();
    let units = n / base;
    for m in (1..units).filter(|&m| units.is_multiple_of(m)) {
        let d = base * m;
        while peers.len() < d as usize {
            let r = peers.len() as u32;
            let mut set = BTreeSet::new();
            for op in &sc.ops {
                let (_, plan) = op.source.plan(r, n).ok()?;
                for step in plan {
                    if let Op::Send { peer, .. } = step.op {
                        set.insert(peer);
                    }
                }
            }
            peers.push(set);
        }
        if let Some(f) = try_period(sc, d, &peers[..d as usize]) {
            return Some(f);
        }
    }
    None
}

/// One position of one channel: its `G` image edges, in image order.
struct PosOrbit {
    chan: usize,
    edges: Vec<u32>,
    orbit: u32,
    conflict: bool,
}

fn try_period(sc: &Scenario<'_>, d: u32, peers: &[BTreeSet<u32>]) -> Option<Fold> {
    let fabric = sc.fabric;
    let n = fabric.world_size();
    let g = n / d;
    let spec = |e: u32| {
        let l = fabric.link(petgraph::graph::EdgeIndex::new(e as usize));
        LinkSpec {
            bandwidth_gbps: l.bandwidth_gbps,
            latency_ns: l.latency_ns,
        }
    };
    let same = |a: LinkSpec, b: LinkSpec| {
        a.bandwidth_gbps.to_bits() == b.bandwidth_gbps.to_bits() && a.latency_ns == b.latency_ns
    };
    let chans: Vec<(u32, u32)> = peers
        .iter()
        .enumerate()
        .flat_map(|(r, set)| set.iter().map(move |&p| (r as u32, p)))
        .collect();
    // images[c][k]: the route of image k of channel c. Image-major, so a
    // wrong period fails at the first image that differs.
    let route = |s: u32, t: u32| -> Option<Vec<u32>> {
        Some(
            fabric
                .route(s, t)
                .ok()?
                .edges()
                .iter()
                .map(|e| e.index() as u32)
                .collect(),
        )
    };
    let mut images: Vec<Vec<Vec<u32>>> = Vec::with_capacity(chans.len());
    for &(s, t) in &chans {
        images.push(vec![route(s, t)?]);
    }
    for k in 1..g {
        let shift = u64::from(k) * u64::from(d);
        for (c, &(s, t)) in chans.iter().enumerate() {
            let mv = |x: u32| ((u64::from(x) + shift) % u64::from(n)) as u32;
            let r = route(mv(s), mv(t))?;
            let r0 = &images[c][0];
            if r.len() != r0.len() || r.iter().zip(r0).any(|(&a, &b)| !same(spec(a), spec(b))) {
                return None;
            }
            images[c].push(r);
        }
    }
    // Orbits: (orbit, phase) per edge.
    let edges = fabric.graph().edge_count();
    let mut assign: Vec<(u32, u32)> = vec![(NONE, 0); edges];
    let mut orbit_bad: Vec<bool> = Vec::new();
    let mut orbit_rep: Vec<u32> = Vec::new();
    let mut pos: Vec<PosOrbit> = Vec::new();
    for (c, im) in images.iter().enumerate() {
        for i in 0..im[0].len() {
            let es: Vec<u32> = im.iter().map(|r| r[i]).collect();
            let (o0, p0) = assign[es[0] as usize];
            let mut conflict = false;
            let orbit = if o0 == NONE {
                let o = orbit_bad.len() as u32;
                orbit_bad.push(false);
                orbit_rep.push(es[0]);
                for (k, &e) in es.iter().enumerate() {
                    let a = &mut assign[e as usize];
                    if a.0 == NONE {
                        *a = (o, k as u32);
                    } else {
                        conflict = true;
                        orbit_bad[a.0 as usize] = true;
                    }
                }
                o
            } else {
                for (k, &e) in es.iter().enumerate() {
                    let want = (o0, (p0 + k as u32) % g);
                    let a = assign[e as usize];
                    if a != want {
                        conflict = true;
                        if a.0 != NONE {
                            orbit_bad[a.0 as usize] = true;
                        }
                    }
                }
                o0
            };
            if conflict {
                orbit_bad[orbit as usize] = true;
            }
            pos.push(PosOrbit {
                chan: c,
                edges: es,
                orbit,
                conflict,
            });
        }
    }
    // A route crosses a good orbit at most once: a second crossing would
    // put two of its images on one edge.
    let mut seen: Vec<u32> = Vec::new();
    let mut start = 0;
    while start < pos.len() {
        let c = pos[start].chan;
        let end = start + pos[start..].iter().take_while(|p| p.chan == c).count();
        seen.clear();
        for p in &pos[start..end] {
            if seen.contains(&p.orbit) {
                orbit_bad[p.orbit as usize] = true;
            }
            seen.push(p.orbit);
        }
        start = end;
    }
    let edge_bad = |e: u32| {
        let o = assign[e as usize].0;
        o == NONE || orbit_bad[o as usize]
    };
    // Good orbits become folded links.
    let mut link_of: Vec<u32> = vec![NONE; orbit_bad.len()];
    let mut links = Vec::new();
    for (o, &bad) in orbit_bad.iter().enumerate() {
        if !bad {
            link_of[o] = links.len() as u32;
            links.push(spec(orbit_rep[o]));
        }
    }
    // Channel routes and their rate bounds (smallest good capacity).
    let mut bound = vec![f64::INFINITY; chans.len()];
    let mut folded: Vec<Vec<LinkId>> = vec![Vec::new(); chans.len()];
    let mut has_slack = vec![false; chans.len()];
    for p in &pos {
        if p.conflict || orbit_bad[p.orbit as usize] {
            has_slack[p.chan] = true;
        } else {
            folded[p.chan].push(link_of[p.orbit as usize]);
            bound[p.chan] = bound[p.chan].min(spec(p.edges[0]).bandwidth_gbps);
        }
    }
    let mut slack_id = vec![NONE; chans.len()];
    let mut slack_chans = 0u32;
    for c in 0..chans.len() {
        if has_slack[c] {
            if folded[c].is_empty() {
                return None; // nothing left to carry the flow
            }
            slack_id[c] = slack_chans;
            slack_chans += 1;
        }
    }
    // Slack links: every use, and the proof that none limits a rate.
    let mut uses: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for p in &pos {
        for &e in &p.edges {
            if edge_bad(e) {
                uses.entry(e).or_default().push(p.chan as u32);
            }
        }
    }
    let mut slack_edges = Vec::with_capacity(uses.len());
    for (e, cs) in uses {
        let demand: f64 = cs.iter().map(|&c| bound[c as usize]).sum();
        if demand.is_nan() || demand > spec(e).bandwidth_gbps {
            return None;
        }
        let mut ids: Vec<u32> = cs.iter().map(|&c| slack_id[c as usize]).collect();
        ids.sort_unstable();
        slack_edges.push((e as usize, ids));
    }
    let mut edge_link = vec![NONE; edges];
    for (e, &(o, _)) in assign.iter().enumerate() {
        if o != NONE && !orbit_bad[o as usize] {
            edge_link[e] = link_of[o as usize];
        }
    }
    let routes = chans
        .iter()
        .enumerate()
        .map(|(c, &key)| {
            let latency = images[c][0]
                .iter()
                .map(|&e| spec(e).latency_ns)
                .fold(0u64, u64::saturating_add);
            (
                key,
                FoldRoute {
                    links: std::mem::take(&mut folded[c]),
                    latency,
                    slack: slack_id[c],
                },
            )
        })
        .collect();
    Some(Fold {
        period: d,
        world: n,
        links,
        edge_link,
        routes,
        slack_edges,
        slack_chans,
    })
}

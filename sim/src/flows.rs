//! Flows on links, sharing bandwidth max-min fairly.
//!
//! A flow is one message crossing the fabric along a fixed route (a list of
//! directed links). At any instant every active flow has a rate; the rates
//! are the **max-min fair** allocation (Bertsekas & Gallager, *Data
//! Networks*, 2nd ed., §6.5.2): no flow's rate can grow without shrinking a
//! flow whose rate is already smaller or equal. They are computed by
//! progressive filling: all unfrozen flows grow together; the link whose
//! fair share `remaining capacity / unfrozen flows` is smallest saturates
//! first and freezes its flows at that share; repeat.
//!
//! **Incremental recomputation.** Max-min rates of flows that share no link,
//! directly or through a chain of flows, are independent. So when flows
//! start or end, the links they touch are marked dirty, and
//! `FlowNet::reallocate` re-runs progressive filling only over the
//! *connected components* of the bipartite link–flow graph that contain a
//! dirty link. Flows outside those components keep their rates and their
//! scheduled end events. Starts and ends at the same virtual time are
//! batched into one reallocation (the engine calls `reallocate` once before
//! time advances), which matters when thousands of ranks start a ring step
//! in the same nanosecond.
//!
//! A flow's progress is settled lazily: `remaining` is brought up to date
//! only when its rate changes. Its end time is `now + remaining / rate`,
//! rounded up to a whole nanosecond ([`crate::cost::ceil_ns`]); a rate
//! change bumps the flow's `version`, which invalidates the old end event.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::cost::ceil_ns;
use crate::small::{Chunks, IdList};

/// Index of a directed link: the fabric's edge index.
pub type LinkId = u32;

/// Bandwidth and latency of one directed link, as the simulator uses them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpec {
    /// Bandwidth in GB/s (G = 10^9 bytes/s, i.e. bytes per ns).
    pub bandwidth_gbps: f64,
    /// Latency of the hop in ns, added once per message crossing it.
    pub latency_ns: u64,
}

/// Busy time and traffic of one link over a run, for profiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct LinkUsage {
    /// Nanoseconds during which at least one flow was crossing the link.
    pub busy_ns: u64,
    /// Bytes of finished flows that crossed the link (saturates at
    /// `u64::MAX`).
    pub bytes: u64,
}

/// State of a link some route uses (links no route crosses have none: a
/// fabric has many more links than a collective touches). 64 bytes,
/// aligned to them: one cache line each.
#[derive(Debug, Default)]
#[repr(align(64))]
struct LinkState {
    /// Current capacity, bytes per ns.
    cap: f64,
    /// The link's id (fabric edge) outside the network.
    id: LinkId,
    flows: IdList,
    /// Nanoseconds busy before the current busy period, minus that
    /// period's start while flows cross the link (wrapping: busy time so
    /// far is `busy + now` then, `busy` when idle). One field instead of a
    /// start time and a total; exact, since a link is busy at most `now`
    /// ns in all.
    busy: u64,
    /// Bytes of finished flows (saturating).
    bytes: u64,
    epoch: u32,
    /// Progressive filling: the link's index in the component being
    /// filled (its scratch is `FlowNet::comp_rem[pos]`).
    pos: u32,
    dirty: bool,
}

/// A flow on the fabric: 56 bytes of fields, aligned to 64 (one cache
/// line each; at a 56-byte stride six flows in eight crossed two).
#[derive(Debug, Default)]
#[repr(align(64))]
struct Flow {
    route: u32,
    bytes: u64,
    rate: f64,
    next_rate: f64,
    remaining: f64,
    last: u64,
    version: u32,
    epoch: u32,
    frozen: bool,
    live: bool,
}

/// A flow whose rate changed: its new end time (`None`: rate 0, it waits
/// until some capacity returns). Events for older versions are stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resched {
    pub flow: u32,
    pub version: u32,
    pub end: Option<u64>,
}

/// Interned routes: each a run of link ids plus its summed latency.
#[derive(Debug, Default)]
struct Routes {
    links: Vec<LinkId>,
    /// (start in `links`, length, total latency ns)
    spans: Vec<(u32, u32, u64)>,
}

/// The links, the routes in use and the active flows. Links are known by
/// their id outside (`LinkId`, `0..link_count`) and by a dense index
/// inside (state only for links that some route uses).
#[derive(Debug)]
pub(crate) struct FlowNet {
    /// Dense index of each link id, `u32::MAX` while no route uses it.
    slot: Vec<u32>,
    /// Used links, by dense index; routes, dirty lists and the solver use
    /// dense indices. In chunks: links are added as routes first use them,
    /// a vector's doubling would hold up to twice their number (and, while
    /// growing, its old buffer and new one at once, at the peak of a
    /// hierarchical run, where the level-1 phase's routes appear).
    links: Chunks<LinkState>,
    routes: Routes,
    flows: Vec<Flow>,
    free: Vec<u32>,
    dirty: Vec<LinkId>,
    epoch: u32,
    active: usize,
    peak_active: usize,
    comp_links: Vec<LinkId>,
    comp_flows: Vec<u32>,
    /// Progressive-filling scratch of each link of the component, by its
    /// `pos`: capacity not yet given away, flows on it not yet frozen.
    comp_rem: Vec<(f64, u32)>,
    heap: BinaryHeap<Reverse<(u64, LinkId)>>,
    largest_component: usize,
}

const NO_SLOT: u32 = u32::MAX;

impl FlowNet {
    /// A network of `link_count` links, none used yet.
    pub(crate) fn new(link_count: usize) -> FlowNet {
        FlowNet {
            slot: vec![NO_SLOT; link_count],
            links: Chunks::default(),
            routes: Routes::default(),
            flows: Vec::new(),
            free: Vec::new(),
            dirty: Vec::new(),
            epoch: 0,
            active: 0,
            peak_active: 0,
            comp_links: Vec::new(),
            comp_flows: Vec::new(),
            comp_rem: Vec::new(),
            heap: BinaryHeap::new(),
            largest_component: 0,
        }
    }

    pub(crate) fn link_count(&self) -> usize {
        self.slot.len()
    }

    /// Dense index of link `l`, its state made from `spec` on first use.
    fn dense(&mut self, l: LinkId, spec: LinkSpec) -> u32 {
        let s = &mut self.slot[l as usize];
        if *s == NO_SLOT {
            *s = self.links.len() as u32;
            self.links.push(LinkState {
                cap: spec.bandwidth_gbps,
                id: l,
                flows: IdList::default(),
                busy: 0,
                bytes: 0,
                epoch: 0,
                pos: 0,
                dirty: false,
            });
        }
        *s
    }

    /// Interns a route; returns its id. Link ids must be `< link_count()`;
    /// `spec` gives a link's bandwidth and latency.
    pub(crate) fn add_route(&mut self, links: &[LinkId], spec: impl Fn(LinkId) -> LinkSpec) -> u32 {
        let latency = links
            .iter()
            .map(|&l| spec(l).latency_ns)
            .fold(0u64, u64::saturating_add);
        self.add_route_with_latency(links, latency, spec)
    }

    /// Interns a route whose latency is given (a folded route leaves out
    /// links whose latency still counts).
    pub(crate) fn add_route_with_latency(
        &mut self,
        links: &[LinkId],
        latency: u64,
        spec: impl Fn(LinkId) -> LinkSpec,
    ) -> u32 {
        let start = self.routes.links.len() as u32;
        for &l in links {
            let d = self.dense(l, spec(l));
            self.routes.links.push(d);
        }
        self.routes.spans.push((start, links.len() as u32, latency));
        (self.routes.spans.len() - 1) as u32
    }

    fn route_links(routes: &Routes, route: u32) -> &[LinkId] {
        let (s, n, _) = routes.spans[route as usize];
        &routes.links[s as usize..(s + n) as usize]
    }

    /// Sum of hop latencies of `route`, ns.
    pub(crate) fn route_latency(&self, route: u32) -> u64 {
        self.routes.spans[route as usize].2
    }

    /// Number of hops of `route`.
    pub(crate) fn route_hops(&self, route: u32) -> usize {
        self.routes.spans[route as usize].1 as usize
    }

    /// The links (ids) of `route`, in order.
    pub(crate) fn route(&self, route: u32) -> impl Iterator<Item = LinkId> + '_ {
        Self::route_links(&self.routes, route)
            .iter()
            .map(|&d| self.links[d as usize].id)
    }

    /// Starts a flow of `bytes` (> 0) on a route with at least one link.
    /// Its rate is set by the next [`FlowNet::reallocate`].
    pub(crate) fn start(&mut self, now: u64, route: u32, bytes: u64) -> u32 {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.flows.push(Flow::default());
                (self.flows.len() - 1) as u32
            }
        };
        let f = &mut self.flows[id as usize];
        f.route = route;
        f.bytes = bytes;
        f.rate = f64::NAN; // "no rate yet": differs from any computed rate
        f.remaining = bytes as f64;
        f.last = now;
        f.version = f.version.wrapping_add(1);
        f.live = true;
        for &l in Self::route_links(&self.routes, route) {
            let link = &mut self.links[l as usize];
            if link.flows.is_empty() {
                link.busy = link.busy.wrapping_sub(now);
            }
            link.flows.push(id);
            if !link.dirty {
                link.dirty = true;
                self.dirty.push(l);
            }
        }
        self.active += 1;
        self.peak_active = self.peak_active.max(self.active);
        id
    }

    /// True if `version` is the current version of live flow `flow`.
    pub(crate) fn is_current(&self, flow: u32, version: u32) -> bool {
        self.flows
            .get(flow as usize)
            .is_some_and(|f| f.live && f.version == version)
    }

    /// Removes a finished flow, accounting its bytes and busy time.
    pub(crate) fn finish(&mut self, now: u64, flow: u32) {
        let f = &mut self.flows[flow as usize];
        f.live = false;
        f.version = f.version.wrapping_add(1);
        let bytes = f.bytes;
        for &l in Self::route_links(&self.routes, f.route) {
            let link = &mut self.links[l as usize];
            if let Some(pos) = link.flows.as_slice().iter().position(|&x| x == flow) {
                link.flows.swap_remove(pos);
            }
            // Saturating: huge counts can pass u64::MAX bytes over a run.
            link.bytes = link.bytes.saturating_add(bytes);
            if link.flows.is_empty() {
                link.busy = link.busy.wrapping_add(now);
            } else if !link.dirty {
                link.dirty = true;
                self.dirty.push(l);
            }
        }
        self.free.push(flow);
        self.active -= 1;
    }

    /// Sets a link's capacity (a fault: degraded or down at 0 GB/s);
    /// `spec` is the link's own (for its state, if it has none yet).
    pub(crate) fn set_bandwidth(&mut self, link: LinkId, gbps: f64, spec: LinkSpec) {
        let d = self.dense(link, spec);
        let l = &mut self.links[d as usize];
        l.cap = gbps.max(0.0);
        if !l.dirty && !l.flows.is_empty() {
            l.dirty = true;
            self.dirty.push(d);
        }
    }

    /// A link's current capacity, GB/s, if it has state (a route used it
    /// or a fault set it); otherwise it is the fabric's.
    pub(crate) fn bandwidth(&self, link: LinkId) -> Option<f64> {
        let d = *self.slot.get(link as usize)?;
        (d != NO_SLOT).then(|| self.links[d as usize].cap)
    }

    pub(crate) fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Recomputes max-min rates in every component touching a dirty link
    /// and appends the flows whose rate changed to `out`.
    pub(crate) fn reallocate(&mut self, now: u64, out: &mut Vec<Resched>) {
        let dirty = std::mem::take(&mut self.dirty);
        self.next_epoch();
        for &l in &dirty {
            let link = &mut self.links[l as usize];
            link.dirty = false;
            if link.epoch == self.epoch || link.flows.is_empty() {
                continue;
            }
            if let Some(f) = self.lone_flow(l) {
                // The component is one flow: what `collect_component`,
                // `fill` and `apply` do for it, without the scratch lists
                // (every flow of a ring at its start or end).
                self.largest_component = self.largest_component.max(1);
                let epoch = self.epoch;
                let flow = &mut self.flows[f as usize];
                flow.epoch = epoch;
                let mut rate = f64::INFINITY;
                for &l2 in Self::route_links(&self.routes, flow.route) {
                    let link2 = &mut self.links[l2 as usize];
                    link2.epoch = epoch;
                    rate = rate.min(link2.cap);
                }
                flow.next_rate = rate;
                settle(flow, f, now, out);
                continue;
            }
            self.collect_component(l);
            self.largest_component = self.largest_component.max(self.comp_flows.len());
            self.fill();
            self.apply(now, out);
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    fn next_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            for l in self.links.iter_mut() {
                l.epoch = 0;
            }
            for f in &mut self.flows {
                f.epoch = 0;
            }
            self.epoch = 1;
        }
    }

    /// The flow on link `l`, if it is the only flow on every link of its
    /// route (its component of the link–flow graph is itself). Reads only.
    fn lone_flow(&self, l: LinkId) -> Option<u32> {
        let &[f] = self.links[l as usize].flows.as_slice() else {
            return None;
        };
        let route = self.flows[f as usize].route;
        Self::route_links(&self.routes, route)
            .iter()
            .all(|&l2| self.links[l2 as usize].flows.len() == 1)
            .then_some(f)
    }

    /// Breadth-first over links and flows from `start`, marking with the epoch.
    fn collect_component(&mut self, start: LinkId) {
        self.comp_links.clear();
        self.comp_flows.clear();
        let epoch = self.epoch;
        self.links[start as usize].epoch = epoch;
        self.comp_links.push(start);
        let mut next = 0;
        while next < self.comp_links.len() {
            let l = self.comp_links[next] as usize;
            next += 1;
            for i in 0..self.links[l].flows.len() {
                let f = self.links[l].flows.as_slice()[i];
                let flow = &mut self.flows[f as usize];
                if flow.epoch == epoch {
                    continue;
                }
                flow.epoch = epoch;
                self.comp_flows.push(f);
                for &l2 in Self::route_links(&self.routes, flow.route) {
                    let link2 = &mut self.links[l2 as usize];
                    if link2.epoch != epoch {
                        link2.epoch = epoch;
                        self.comp_links.push(l2);
                    }
                }
            }
        }
    }

    /// Progressive filling over the collected component: sets `next_rate`.
    fn fill(&mut self) {
        if let [f] = self.comp_flows[..] {
            // Alone on all its links: the bottleneck capacity.
            let flow = &self.flows[f as usize];
            let rate = Self::route_links(&self.routes, flow.route)
                .iter()
                .map(|&l| self.links[l as usize].cap)
                .fold(f64::INFINITY, f64::min);
            self.flows[f as usize].next_rate = rate;
            return;
        }
        self.heap.clear();
        self.comp_rem.clear();
        for (pos, &l) in self.comp_links.iter().enumerate() {
            let link = &mut self.links[l as usize];
            link.pos = pos as u32;
            let (rem, unfrozen) = (link.cap, link.flows.len() as u32);
            self.comp_rem.push((rem, unfrozen));
            self.heap.push(Reverse((share_key(rem, unfrozen), l)));
        }
        for &f in &self.comp_flows {
            self.flows[f as usize].frozen = false;
        }
        while let Some(Reverse((key, l))) = self.heap.pop() {
            let (rem, unfrozen) = self.comp_rem[self.links[l as usize].pos as usize];
            if unfrozen == 0 || share_key(rem, unfrozen) != key {
                continue; // saturated already, or a stale entry
            }
            let share = f64::from_bits(key);
            for i in 0..self.links[l as usize].flows.len() {
                let f = self.links[l as usize].flows.as_slice()[i];
                let flow = &mut self.flows[f as usize];
                if flow.frozen {
                    continue;
                }
                flow.frozen = true;
                flow.next_rate = share;
                for &l2 in Self::route_links(&self.routes, flow.route) {
                    let (rem, unfrozen) = &mut self.comp_rem[self.links[l2 as usize].pos as usize];
                    *rem -= share;
                    *unfrozen -= 1;
                    if l2 != l && *unfrozen > 0 {
                        self.heap.push(Reverse((share_key(*rem, *unfrozen), l2)));
                    }
                }
            }
        }
    }

    /// Settles progress of flows whose rate changed and reports new end times.
    fn apply(&mut self, now: u64, out: &mut Vec<Resched>) {
        for &f in &self.comp_flows {
            settle(&mut self.flows[f as usize], f, now, out);
        }
    }

    /// Current rate of a live flow, GB/s (NaN before its first reallocation).
    #[cfg(test)]
    pub(crate) fn rate(&self, flow: u32) -> f64 {
        self.flows[flow as usize].rate
    }

    /// Busy time and bytes of every link (by id), up to `now`.
    pub(crate) fn usage(&self, now: u64) -> Vec<LinkUsage> {
        let mut out = vec![LinkUsage::default(); self.slot.len()];
        for l in self.links.iter() {
            let busy_ns = if l.flows.is_empty() {
                l.busy
            } else {
                l.busy.wrapping_add(now)
            };
            out[l.id as usize] = LinkUsage {
                busy_ns,
                bytes: l.bytes,
            };
        }
        out
    }

    pub(crate) fn peak_active(&self) -> usize {
        self.peak_active
    }

    pub(crate) fn largest_component(&self) -> usize {
        self.largest_component
    }

    /// Heap bytes held by the network state (for the memory estimate).
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.links.heap_bytes()
            + self.slot.capacity() * 4
            + self
                .links
                .iter()
                .map(|l| l.flows.heap_bytes())
                .sum::<usize>()
            + self.routes.links.capacity() * 4
            + self.routes.spans.capacity() * size_of::<(u32, u32, u64)>()
            + self.flows.capacity() * size_of::<Flow>()
            + self.free.capacity() * 4
    }
}

/// Moves flow `f` (`flow`) to its `next_rate` if that differs from its
/// rate: settles its progress at `now`, bumps its version and reports its
/// new end time to `out`.
fn settle(flow: &mut Flow, f: u32, now: u64, out: &mut Vec<Resched>) {
    if flow.next_rate.to_bits() == flow.rate.to_bits() {
        return;
    }
    if flow.rate > 0.0 {
        flow.remaining -= flow.rate * (now - flow.last) as f64;
        flow.remaining = flow.remaining.max(0.0);
    }
    flow.last = now;
    flow.rate = flow.next_rate;
    flow.version = flow.version.wrapping_add(1);
    let end = if flow.rate > 0.0 {
        Some(now.saturating_add(ceil_ns(flow.remaining / flow.rate)))
    } else {
        None
    };
    out.push(Resched {
        flow: f,
        version: flow.version,
        end,
    });
}

/// Heap key of a link's fair share: non-negative f64 bits order like the
/// numbers, so `(bits, link id)` is a total, deterministic order.
fn share_key(rem: f64, unfrozen: u32) -> u64 {
    if unfrozen == 0 {
        return u64::MAX;
    }
    (rem.max(0.0) / f64::from(unfrozen)).to_bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A network of links with capacities `caps` (latency 0), and a way
    /// to intern routes over them.
    struct Net {
        net: FlowNet,
        caps: Vec<f64>,
    }

    impl std::ops::Deref for Net {
        type Target = FlowNet;
        fn deref(&self) -> &FlowNet {
            &self.net
        }
    }

    impl std::ops::DerefMut for Net {
        fn deref_mut(&mut self) -> &mut FlowNet {
            &mut self.net
        }
    }

    impl Net {
        fn add_route(&mut self, links: &[LinkId]) -> u32 {
            let caps = &self.caps;
            self.net.add_route(links, |l| LinkSpec {
                bandwidth_gbps: caps[l as usize],
                latency_ns: 0,
            })
        }
    }

    fn net(caps: &[f64]) -> Net {
        Net {
            net: FlowNet::new(caps.len()),
            caps: caps.to_vec(),
        }
    }

    fn rates(n: &mut Net, flows: &[u32]) -> Vec<f64> {
        let mut out = Vec::new();
        n.reallocate(0, &mut out);
        flows.iter().map(|&f| n.rate(f)).collect()
    }

    /// A link's state is one 64-byte record (a hierarchical run holds ~3
    /// per rank).
    #[test]
    fn link_state_is_64_bytes() {
        assert_eq!(std::mem::size_of::<LinkState>(), 64);
    }

    /// Busy time counts each busy period once, idle gaps not at all, and
    /// an open period up to `now`.
    #[test]
    fn busy_time_is_the_union_of_busy_periods() {
        let mut n = net(&[1.0]);
        let r = n.add_route(&[0]);
        let a = n.start(10, r, 5);
        let b = n.start(12, r, 5);
        n.finish(15, a);
        n.finish(20, b);
        assert_eq!(n.usage(30)[0].busy_ns, 10, "10..20");
        let c = n.start(40, r, 5);
        assert_eq!(n.usage(47)[0].busy_ns, 17, "10..20 and 40..47");
        n.finish(50, c);
        assert_eq!(
            n.usage(90)[0],
            LinkUsage {
                busy_ns: 20,
                bytes: 15
            }
        );
    }

    #[test]
    fn three_flows_with_different_bottlenecks() {
        // Link 0 (10 GB/s) is shared by flows a, b, c. a also crosses link 1
        // (2 GB/s), b crosses link 2 (3 GB/s). By hand: link 1's share 2 is
        // the smallest -> a = 2; link 2: 3 -> b = 3; link 0 has 10-2-3 = 5
        // left for c alone -> c = 5.
        let mut n = net(&[10.0, 2.0, 3.0]);
        let ra = n.add_route(&[0, 1]);
        let rb = n.add_route(&[0, 2]);
        let rc = n.add_route(&[0]);
        let a = n.start(0, ra, 100);
        let b = n.start(0, rb, 100);
        let c = n.start(0, rc, 100);
        assert_eq!(rates(&mut n, &[a, b, c]), vec![2.0, 3.0, 5.0]);
    }

    #[test]
    fn equal_split_then_reallocates_when_one_ends() {
        let mut n = net(&[8.0]);
        let r = n.add_route(&[0]);
        let a = n.start(0, r, 800);
        let b = n.start(0, r, 400);
        let mut out = Vec::new();
        n.reallocate(0, &mut out);
        // Both at 4 GB/s: b (400 B) ends at 100 ns, a at 200 ns.
        assert_eq!(
            out.iter().map(|r| r.end).collect::<Vec<_>>(),
            vec![Some(200), Some(100)]
        );
        n.finish(100, b);
        out.clear();
        n.reallocate(100, &mut out);
        // a sent 400 B by 100 ns; the remaining 400 B at 8 GB/s take 50 ns.
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].flow, a);
        assert_eq!(out[0].end, Some(150));
        assert!(
            !n.is_current(a, out[0].version - 1),
            "old end event is stale"
        );
        n.finish(150, a);
        assert_eq!(
            n.usage(150)[0],
            LinkUsage {
                busy_ns: 150,
                bytes: 1200
            }
        );
    }

    #[test]
    fn only_the_touched_component_is_recomputed() {
        let mut n = net(&[4.0, 4.0]);
        let r0 = n.add_route(&[0]);
        let r1 = n.add_route(&[1]);
        let a = n.start(0, r0, 400);
        let mut out = Vec::new();
        n.reallocate(0, &mut out);
        out.clear();
        let _b = n.start(10, r1, 400);
        n.reallocate(10, &mut out);
        assert_eq!(out.len(), 1, "flow a shares no link with b: untouched");
        assert_ne!(out[0].flow, a);
    }

    #[test]
    fn incast_shares_the_receiver_link_equally() {
        // AllToAll incast: 4 senders, each own uplink 10 GB/s, one shared
        // downlink of 10 GB/s -> 2.5 GB/s each.
        let mut n = net(&[10.0, 10.0, 10.0, 10.0, 10.0]);
        let flows: Vec<u32> = (0..4)
            .map(|i| {
                let r = n.add_route(&[i, 4]);
                n.start(0, r, 1000)
            })
            .collect();
        assert_eq!(rates(&mut n, &flows), vec![2.5; 4]);
    }

    #[test]
    fn zero_capacity_link_stalls_its_flows() {
        let mut n = net(&[0.0]);
        let r = n.add_route(&[0]);
        n.start(0, r, 10);
        let mut out = Vec::new();
        n.reallocate(0, &mut out);
        assert_eq!(out[0].end, None);
    }
}

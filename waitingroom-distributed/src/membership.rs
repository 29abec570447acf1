//! The replicated membership: who is in the cluster ([`Contact`]s), the spanning tree over them,
//! and a version; with the short forms probes carry ([`View`]) and the order in which two clusters
//! meeting after a partition rank ([`ClusterRank`]).
//!
//! Edits are deterministic: the same edit of the same membership gives the same tree on every
//! node, so concurrent detectors of one failure usually agree. Trees are kept shallow: a new
//! node hangs off the most central node that still has a free slot, and the parts left by a
//! removed node are reconnected centre to centre.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use waitingroom_core::NodeId;

/// How to reach a member: its id, the incarnation of the process behind it, and an address
/// the transport understands (a URL for the HTTP server, a name in the simulator).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Contact {
    /// The node's id.
    pub id: NodeId,
    /// Changes every time the process restarts or rejoins, so messages meant for (or sent by) an
    /// earlier life of the node are told apart.
    pub incarnation: u64,
    /// Transport address (shared: it is copied into every message).
    pub addr: Arc<str>,
}

/// A short description of a membership: its version and a digest of its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct View {
    /// Membership version.
    pub version: u64,
    /// Digest of members and edges: two memberships with one version and different digests
    /// conflict.
    pub digest: u64,
}

/// Orders clusters when two meet after a partition: the bigger one wins; on equal size the one
/// holding the smaller node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClusterRank {
    /// Number of members, negated so that smaller ranks are better.
    pub neg_size: i64,
    /// Smallest member id.
    pub min_id: NodeId,
}

/// Members, spanning tree and version, as broadcast on every change.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Membership {
    /// Bumped on every change; a higher version wins.
    pub version: u64,
    /// Live members by id.
    pub members: BTreeMap<NodeId, Contact>,
    /// Tree edges, each stored once as (smaller id, larger id).
    pub edges: BTreeSet<(NodeId, NodeId)>,
    /// Lives known to be gone (failed, left or replaced), with where they lived: such a node
    /// may come back only with a higher incarnation, and its address lets any node ask it about
    /// the visitors it held.
    pub removed: BTreeMap<NodeId, Contact>,
}

fn edge(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
    if a < b { (a, b) } else { (b, a) }
}

impl Membership {
    /// A cluster of one.
    pub fn single(contact: Contact) -> Self {
        let mut m = Membership {
            version: 1,
            ..Membership::default()
        };
        m.members.insert(contact.id, contact);
        m
    }

    /// Version and content digest, carried by probes.
    pub fn view(&self) -> View {
        // FNV-1a over ids, incarnations and edges: deterministic across processes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut mix = |x: u64| {
            for b in x.to_le_bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for c in self.members.values() {
            mix(c.id.0);
            mix(c.incarnation);
        }
        for (a, b) in &self.edges {
            mix(a.0);
            mix(b.0);
        }
        View {
            version: self.version,
            digest: h,
        }
    }

    /// Whether `id` is a member.
    pub fn contains(&self, id: NodeId) -> bool {
        self.members.contains_key(&id)
    }

    /// The tree neighbours of `id`, in id order.
    pub fn neighbours(&self, id: NodeId) -> Vec<NodeId> {
        self.edges
            .iter()
            .filter_map(|&(a, b)| {
                if a == id {
                    Some(b)
                } else if b == id {
                    Some(a)
                } else {
                    None
                }
            })
            .collect()
    }

    /// How this cluster ranks against another one met after a partition.
    pub fn rank(&self) -> ClusterRank {
        ClusterRank {
            neg_size: -(self.members.len() as i64),
            min_id: self.members.keys().next().copied().unwrap_or(NodeId(0)),
        }
    }

    /// Adds `contact` (replacing an older incarnation of the same id) with one edge, bumping the
    /// version. `max_degree` bounds how many neighbours a node gets where possible.
    pub fn with_added(&self, contact: Contact, max_degree: usize) -> Membership {
        let mut next = self.clone();
        if let Some(old) = next.members.get(&contact.id).cloned() {
            next.drop_node(old);
        }
        next.removed.remove(&contact.id);
        let id = contact.id;
        next.members.insert(id, contact);
        next.attach(id, max_degree);
        next.reconnect(max_degree);
        next.version = self.version.saturating_add(1);
        next
    }

    /// Removes `id` (if it is a member with at most `incarnation`), reconnecting the tree, and
    /// bumps the version. Returns None when there is nothing to remove.
    pub fn with_removed(&self, id: NodeId, incarnation: u64, max_degree: usize) -> Option<Self> {
        let member = self.members.get(&id)?;
        if member.incarnation > incarnation {
            return None;
        }
        let member = member.clone();
        let mut next = self.clone();
        next.drop_node(member);
        next.reconnect(max_degree);
        next.version = self.version.saturating_add(1);
        Some(next)
    }

    /// Resolves two different memberships with the same version (concurrent changes): merge the
    /// member sets, then rebuild the tree from scratch by adding members in id order, so every
    /// node that sees the conflict computes the same result.
    pub fn merged(&self, other: &Membership, max_degree: usize) -> Membership {
        let mut removed = self.removed.clone();
        for (&id, c) in &other.removed {
            let e = removed.entry(id).or_insert_with(|| c.clone());
            if c.incarnation > e.incarnation {
                *e = c.clone();
            }
        }
        let mut members: BTreeMap<NodeId, Contact> = BTreeMap::new();
        for c in self.members.values().chain(other.members.values()) {
            if removed
                .get(&c.id)
                .is_some_and(|gone| gone.incarnation >= c.incarnation)
            {
                continue;
            }
            match members.get(&c.id) {
                Some(existing) if existing.incarnation >= c.incarnation => {}
                _ => {
                    members.insert(c.id, c.clone());
                }
            }
        }
        let mut next = Membership {
            version: self.version.max(other.version).saturating_add(1),
            members: BTreeMap::new(),
            edges: BTreeSet::new(),
            removed,
        };
        for (id, c) in members {
            next.members.insert(id, c);
            next.attach(id, max_degree);
        }
        next
    }

    fn drop_node(&mut self, gone: Contact) {
        let id = gone.id;
        self.members.remove(&id);
        self.edges.retain(|&(a, b)| a != id && b != id);
        match self.removed.get(&id) {
            Some(known) if known.incarnation >= gone.incarnation => {}
            _ => {
                self.removed.insert(id, gone);
            }
        }
    }

    /// Whether `id`'s life `incarnation` is known to be gone.
    pub fn is_gone(&self, id: NodeId, incarnation: u64) -> bool {
        self.removed
            .get(&id)
            .is_some_and(|gone| gone.incarnation >= incarnation)
    }

    /// Connects the (edgeless) node `id` to the best node of the rest of the tree.
    fn attach(&mut self, id: NodeId, max_degree: usize) {
        let others: Vec<NodeId> = self.members.keys().copied().filter(|&n| n != id).collect();
        if let Some(to) = self.best_anchor(&others, max_degree) {
            self.edges.insert(edge(id, to));
        }
    }

    /// Joins the components of the graph one edge at a time, centre to centre, until one tree.
    fn reconnect(&mut self, max_degree: usize) {
        loop {
            let comps = self.components();
            if comps.len() <= 1 {
                return;
            }
            let a = self.best_anchor(&comps[0], max_degree);
            let b = self.best_anchor(&comps[1], max_degree);
            if let (Some(a), Some(b)) = (a, b) {
                self.edges.insert(edge(a, b));
            }
        }
    }

    /// Connected components, each sorted, ordered by their smallest id.
    fn components(&self) -> Vec<Vec<NodeId>> {
        let adj = self.adjacency();
        let mut seen = BTreeSet::new();
        let mut comps = Vec::new();
        for &start in self.members.keys() {
            if !seen.insert(start) {
                continue;
            }
            let mut comp = vec![start];
            let mut todo = vec![start];
            while let Some(n) = todo.pop() {
                for &m in adj.get(&n).into_iter().flatten() {
                    if seen.insert(m) {
                        comp.push(m);
                        todo.push(m);
                    }
                }
            }
            comp.sort();
            comps.push(comp);
        }
        comps
    }

    fn adjacency(&self) -> BTreeMap<NodeId, Vec<NodeId>> {
        let mut adj: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
        for &(a, b) in &self.edges {
            adj.entry(a).or_default().push(b);
            adj.entry(b).or_default().push(a);
        }
        adj
    }

    /// Among `candidates` (one connected part), the node to hang new edges on: the most central
    /// (smallest eccentricity within its part) with fewer than `max_degree` neighbours, then the
    /// fewest neighbours, then the smallest id. Falls back to ignoring the degree bound.
    fn best_anchor(&self, candidates: &[NodeId], max_degree: usize) -> Option<NodeId> {
        let adj = self.adjacency();
        let degree = |n: NodeId| adj.get(&n).map_or(0, Vec::len);
        let ecc = candidates
            .first()
            .map(|&n| eccentricities(&adj, n))
            .unwrap_or_default();
        let score = |n: NodeId| (ecc.get(&n).copied().unwrap_or(0), degree(n), n);
        candidates
            .iter()
            .copied()
            .filter(|&n| degree(n) < max_degree)
            .min_by_key(|&n| score(n))
            .or_else(|| candidates.iter().copied().min_by_key(|&n| score(n)))
    }

    /// The neighbour of `from` on the tree path to `to` (`from` itself when they are equal or
    /// not connected).
    pub fn next_hop(&self, from: NodeId, to: NodeId) -> NodeId {
        if from == to {
            return from;
        }
        let adj = self.adjacency();
        let mut prev: BTreeMap<NodeId, NodeId> = BTreeMap::new();
        let mut queue = VecDeque::from([to]);
        prev.insert(to, to);
        while let Some(n) = queue.pop_front() {
            if n == from {
                return prev[&n];
            }
            for &m in adj.get(&n).into_iter().flatten() {
                if let std::collections::btree_map::Entry::Vacant(e) = prev.entry(m) {
                    e.insert(n);
                    queue.push_back(m);
                }
            }
        }
        from
    }

    /// Whether the edges form one spanning tree over exactly the members.
    pub fn is_spanning_tree(&self) -> bool {
        let n = self.members.len();
        if self.edges.len() + 1 != n.max(1) {
            return false;
        }
        if self
            .edges
            .iter()
            .any(|(a, b)| !self.contains(*a) || !self.contains(*b))
        {
            return false;
        }
        self.components().len() <= 1
    }

    /// Longest shortest path in the tree (0 for one node).
    pub fn diameter(&self) -> usize {
        let adj = self.adjacency();
        self.components()
            .iter()
            .filter_map(|part| part.first())
            .flat_map(|&n| eccentricities(&adj, n).into_values())
            .max()
            .unwrap_or(0)
    }
}

/// Hops from `start` to every node of its connected part.
fn distances(adj: &BTreeMap<NodeId, Vec<NodeId>>, start: NodeId) -> BTreeMap<NodeId, usize> {
    let mut dist: BTreeMap<NodeId, usize> = BTreeMap::from([(start, 0)]);
    let mut queue = VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        let d = dist[&n];
        for &m in adj.get(&n).into_iter().flatten() {
            if let std::collections::btree_map::Entry::Vacant(e) = dist.entry(m) {
                e.insert(d + 1);
                queue.push_back(m);
            }
        }
    }
    dist
}

/// The eccentricity (largest distance to another node) of every node in `start`'s connected
/// part. In a tree, two breadth-first searches from the ends of a diameter give them all, in
/// O(n) searches instead of one per node (the simulator's 128-node clusters spent a fifth of
/// their time here): the node farthest from any node is an end `a` of a diameter, the node
/// farthest from `a` the other end `b`, and every node's farthest node is `a` or `b`. A part
/// with a cycle (never made by the tree edits, but checked) gets one search per node.
fn eccentricities(adj: &BTreeMap<NodeId, Vec<NodeId>>, start: NodeId) -> BTreeMap<NodeId, usize> {
    let farthest = |d: &BTreeMap<NodeId, usize>| {
        d.iter()
            .max_by_key(|&(&n, &k)| (k, std::cmp::Reverse(n)))
            .map_or(start, |(&n, _)| n)
    };
    let from_start = distances(adj, start);
    let degrees: usize = from_start
        .keys()
        .map(|n| adj.get(n).map_or(0, Vec::len))
        .sum();
    if degrees / 2 + 1 != from_start.len() {
        return from_start
            .keys()
            .map(|&n| (n, distances(adj, n).into_values().max().unwrap_or(0)))
            .collect();
    }
    let a = farthest(&from_start);
    let from_a = distances(adj, a);
    let from_b = distances(adj, farthest(&from_a));
    from_a
        .into_iter()
        .map(|(n, da)| (n, da.max(from_b[&n])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64) -> Contact {
        Contact {
            id: NodeId(id),
            incarnation: 1,
            addr: format!("n{id}").into(),
        }
    }

    fn grown(n: u64) -> Membership {
        let mut m = Membership::single(c(1));
        for id in 2..=n {
            m = m.with_added(c(id), 4);
        }
        m
    }

    #[test]
    fn adding_keeps_a_shallow_spanning_tree() {
        for n in 1..=32 {
            let m = grown(n);
            assert!(m.is_spanning_tree(), "n={n}");
            assert_eq!(m.version, n);
            // A degree-4 tree over 32 nodes can have diameter 6; growing by centrality stays
            // close to that.
            assert!(
                m.diameter() <= 2 * (n as f64).log(3.0).ceil() as usize + 1,
                "n={n}"
            );
        }
    }

    /// The two-search eccentricities equal one breadth-first search per node, on grown trees,
    /// a path, and (the fallback) a part with a cycle.
    #[test]
    fn eccentricities_match_a_search_from_every_node() {
        let brute =
            |adj: &BTreeMap<NodeId, Vec<NodeId>>, start: NodeId| -> BTreeMap<NodeId, usize> {
                distances(adj, start)
                    .keys()
                    .map(|&n| (n, distances(adj, n).into_values().max().unwrap_or(0)))
                    .collect()
            };
        let mut shapes: Vec<BTreeMap<NodeId, Vec<NodeId>>> =
            (1..=40).map(|n| grown(n).adjacency()).collect();
        let path = tree_of(&[(1, 2), (2, 3), (3, 4), (4, 5)]);
        let cycle = tree_of(&[(1, 2), (2, 3), (3, 4), (4, 1), (4, 5)]);
        shapes.extend([path, cycle]);
        for adj in &shapes {
            let start = *adj.keys().next().unwrap_or(&NodeId(1));
            assert_eq!(eccentricities(adj, start), brute(adj, start), "{adj:?}");
        }
    }

    fn tree_of(edges: &[(u64, u64)]) -> BTreeMap<NodeId, Vec<NodeId>> {
        let mut adj: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
        for &(a, b) in edges {
            adj.entry(NodeId(a)).or_default().push(NodeId(b));
            adj.entry(NodeId(b)).or_default().push(NodeId(a));
        }
        adj
    }

    #[test]
    fn removing_any_node_reconnects_deterministically() {
        let m = grown(16);
        for id in 1..=16 {
            let a = m.with_removed(NodeId(id), 1, 4).unwrap();
            let b = m.with_removed(NodeId(id), 1, 4).unwrap();
            assert_eq!(a, b);
            assert!(a.is_spanning_tree());
            assert!(!a.contains(NodeId(id)));
            assert_eq!(a.removed.get(&NodeId(id)), Some(&c(id)));
        }
        assert!(m.with_removed(NodeId(99), 1, 4).is_none());
        // A newer incarnation is not removed by news about an older one.
        let m2 = m.with_added(
            Contact {
                incarnation: 5,
                ..c(3)
            },
            4,
        );
        assert!(m2.with_removed(NodeId(3), 1, 4).is_none());
        assert!(m2.is_spanning_tree());
    }

    #[test]
    fn conflicting_changes_merge_to_the_same_tree_both_ways() {
        let base = grown(6);
        let a = base.with_removed(NodeId(2), 1, 4).unwrap();
        let b = base.with_added(c(7), 4);
        assert_eq!(a.version, b.version);
        let ab = a.merged(&b, 4);
        let ba = b.merged(&a, 4);
        assert_eq!(ab, ba);
        assert!(ab.is_spanning_tree());
        assert!(!ab.contains(NodeId(2)));
        assert!(ab.contains(NodeId(7)));
        assert_eq!(ab.version, a.version + 1);
    }

    #[test]
    fn next_hop_walks_the_tree() {
        let m = grown(10);
        for from in 1..=10 {
            for to in 1..=10 {
                let (from, to) = (NodeId(from), NodeId(to));
                let mut at = from;
                let mut steps = 0;
                while at != to {
                    let next = m.next_hop(at, to);
                    assert!(m.neighbours(at).contains(&next));
                    at = next;
                    steps += 1;
                    assert!(steps <= 10);
                }
            }
        }
    }
}

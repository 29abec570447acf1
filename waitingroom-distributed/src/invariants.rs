//! Safety checks over a set of live nodes, shared by the simulator and the tests.
//!
//! - at most one root among the nodes that share a settled membership;
//! - once the membership has converged (every live node applied the same one, listing exactly
//!   the live nodes): the tree is a spanning tree of the live members;
//! - once the network is also quiet (no message in flight): pointers lead every node to the one
//!   root, the root holds the cluster minimum, every weight a node keeps for a child branch is
//!   that branch's true minimum (the QPID node invariant), and no live node holding visitors is
//!   outside the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use waitingroom_core::NodeId;

use crate::membership::Membership;
use crate::messages::Weight;
use crate::node::Node;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// More than one node of one membership considers itself the root.
    MultipleRoots {
        /// Membership version.
        version: u64,
        /// The roots.
        roots: Vec<NodeId>,
    },
    /// The converged membership's edges are not a spanning tree of the live members.
    NotSpanningTree {
        /// Membership version.
        version: u64,
    },
    /// Following pointers from `node` does not reach the root.
    LostPointer {
        /// Where the walk started.
        node: NodeId,
    },
    /// The quiet network has no root although visitors wait.
    NoRoot,
    /// The root does not hold the cluster minimum.
    RootNotMinimum {
        /// The root.
        root: NodeId,
        /// Its weight.
        root_weight: Weight,
        /// The true minimum.
        minimum: Weight,
    },
    /// A node's weight for a child branch is not that branch's minimum.
    StaleWeight {
        /// The node.
        node: NodeId,
        /// The neighbour heading the branch.
        neighbour: NodeId,
        /// What the node believes.
        believed: Option<Weight>,
        /// The branch's true minimum.
        actual: Weight,
    },
    /// A live node holding visitors is not in the cluster although the network is quiet.
    Unreachable {
        /// The node.
        node: NodeId,
        /// Visitors queued there.
        queued: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::MultipleRoots { version, roots } => {
                write!(f, "membership v{version} has several roots: {roots:?}")
            }
            Violation::NotSpanningTree { version } => {
                write!(
                    f,
                    "membership v{version} is not a spanning tree of the live nodes"
                )
            }
            Violation::LostPointer { node } => {
                write!(f, "pointers from node {node} do not lead to the root")
            }
            Violation::NoRoot => write!(f, "quiet cluster without a root while visitors wait"),
            Violation::RootNotMinimum {
                root,
                root_weight,
                minimum,
            } => write!(
                f,
                "root {root} holds {root_weight:?} but the minimum is {minimum:?}"
            ),
            Violation::StaleWeight {
                node,
                neighbour,
                believed,
                actual,
            } => write!(
                f,
                "node {node} believes branch {neighbour} holds {believed:?}, it holds {actual:?}"
            ),
            Violation::Unreachable { node, queued } => {
                write!(f, "node {node} holds {queued} visitors outside the cluster")
            }
        }
    }
}

/// Whether the live nodes have converged on one membership that lists exactly them, all settled.
pub fn converged(nodes: &[&Node]) -> bool {
    let Some(first) = nodes.first() else {
        return true;
    };
    let m = first.shared_membership();
    let live: BTreeMap<NodeId, u64> = nodes
        .iter()
        .map(|n| (n.id(), n.contact().incarnation))
        .collect();
    let listed: BTreeMap<NodeId, u64> = m.members.values().map(|c| (c.id, c.incarnation)).collect();
    // Nodes that applied one shared tree hold the same membership without a comparison.
    let same = |n: &Node| Arc::ptr_eq(n.shared_membership(), m) || **n.shared_membership() == **m;
    live == listed && nodes.iter().all(|n| n.is_settled() && same(n))
}

/// A settled membership as the one-root check groups nodes: its version and its members.
type RootsKey = (u64, Vec<NodeId>);

/// Checks the invariants over the live nodes. `quiet` says no message is in flight.
pub fn check(nodes: &[&Node], quiet: bool) -> Vec<Violation> {
    let mut out = Vec::new();
    // At most one root per settled membership. The members of one shared tree are listed (and
    // compared) once, not once per node that applied it.
    let mut keys: Vec<(RootsKey, Vec<(usize, NodeId)>)> = Vec::new();
    let mut key_of: BTreeMap<*const Membership, usize> = BTreeMap::new();
    for (at, n) in nodes.iter().enumerate().filter(|(_, n)| n.is_settled()) {
        let m = n.shared_membership();
        let k = *key_of.entry(Arc::as_ptr(m)).or_insert_with(|| {
            keys.push(((m.version, m.members.keys().copied().collect()), Vec::new()));
            keys.len() - 1
        });
        if n.is_root() {
            keys[k].1.push((at, n.id()));
        }
    }
    let mut roots: BTreeMap<&RootsKey, Vec<(usize, NodeId)>> = BTreeMap::new();
    for (key, found) in &keys {
        roots.entry(key).or_default().extend(found);
    }
    let roots = roots.into_iter().map(|(key, mut found)| {
        found.sort_unstable();
        (key, found.into_iter().map(|(_, id)| id).collect::<Vec<_>>())
    });
    for (&(version, _), r) in roots {
        if r.len() > 1 {
            out.push(Violation::MultipleRoots { version, roots: r });
        }
    }
    if !converged(nodes) {
        if quiet {
            for n in nodes
                .iter()
                .filter(|n| !n.is_member() && n.room().queued() > 0)
            {
                out.push(Violation::Unreachable {
                    node: n.id(),
                    queued: n.room().queued(),
                });
            }
        }
        return out;
    }
    let Some(first) = nodes.first() else {
        return out;
    };
    let m = first.membership();
    if !m.is_spanning_tree() {
        out.push(Violation::NotSpanningTree { version: m.version });
        return out;
    }
    if quiet {
        check_qpid(nodes, &mut out);
    }
    out
}

fn check_qpid(nodes: &[&Node], out: &mut Vec<Violation>) {
    let by_id: BTreeMap<NodeId, &Node> = nodes.iter().map(|n| (n.id(), *n)).collect();
    // Each node's own weight, read once (reading it builds the node's weight table).
    let heads: BTreeMap<NodeId, Weight> =
        by_id.iter().map(|(&id, n)| (id, n.weights().0)).collect();
    let head = |id: NodeId| heads.get(&id).copied().unwrap_or(Weight::Empty);
    let minimum = by_id
        .keys()
        .map(|&id| head(id))
        .min()
        .unwrap_or(Weight::Empty);
    let roots: Vec<NodeId> = nodes
        .iter()
        .filter(|n| n.is_root())
        .map(|n| n.id())
        .collect();
    let Some(&root) = roots.first() else {
        if minimum != Weight::Empty {
            out.push(Violation::NoRoot);
        }
        return;
    };
    if head(root) != minimum {
        out.push(Violation::RootNotMinimum {
            root,
            root_weight: head(root),
            minimum,
        });
    }
    for &start in by_id.keys() {
        let mut at = start;
        let mut steps = 0;
        while at != root {
            match by_id.get(&at).and_then(|n| n.parent()) {
                Some(p) if steps <= by_id.len() => at = p,
                _ => {
                    out.push(Violation::LostPointer { node: start });
                    break;
                }
            }
            steps += 1;
        }
    }
    // QPID node invariant: the weight kept for every branch away from the root is exact.
    let m = nodes[0].membership();
    let mut branches = Branches::new(m, &head);
    for (&id, node) in &by_id {
        let (_, table) = node.weights();
        for (&nb, believed) in &table {
            if node.parent() == Some(nb) {
                continue;
            }
            let actual = branches.min(id, nb);
            if *believed != Some(actual) {
                out.push(Violation::StaleWeight {
                    node: id,
                    neighbour: nb,
                    believed: *believed,
                    actual,
                });
            }
        }
    }
}

/// The smallest head on either side of the tree's edges, each side computed once: one side of
/// an edge is the node beyond it and the sides beyond that node's other edges, so the checks of
/// every weight table of a tree cost one walk per edge instead of one walk of the tree per
/// table entry.
struct Branches<'a> {
    adj: BTreeMap<NodeId, Vec<NodeId>>,
    head: &'a dyn Fn(NodeId) -> Weight,
    known: BTreeMap<(NodeId, NodeId), Weight>,
}

impl<'a> Branches<'a> {
    fn new(m: &crate::membership::Membership, head: &'a dyn Fn(NodeId) -> Weight) -> Self {
        let mut adj: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
        for &(a, b) in &m.edges {
            adj.entry(a).or_default().push(b);
            adj.entry(b).or_default().push(a);
        }
        Branches {
            adj,
            head,
            known: BTreeMap::new(),
        }
    }

    /// The smallest head on `nb`'s side of the edge (`from`, `nb`); for two nodes that are
    /// not neighbours, of everything reachable from `nb` without passing `from`.
    fn min(&mut self, from: NodeId, nb: NodeId) -> Weight {
        let is_edge = from != nb && self.adj.get(&from).is_some_and(|n| n.contains(&nb));
        if !is_edge {
            return self.reachable_min(from, nb);
        }
        if let Some(&w) = self.known.get(&(from, nb)) {
            return w;
        }
        // Depth-first, without recursion: a side is known once the sides beyond it are.
        let mut stack = vec![(from, nb, false)];
        while let Some((f, n, expanded)) = stack.pop() {
            if self.known.contains_key(&(f, n)) {
                continue;
            }
            let beyond: Vec<NodeId> = self.adj[&n].iter().copied().filter(|&x| x != f).collect();
            if !expanded {
                stack.push((f, n, true));
                stack.extend(beyond.iter().map(|&x| (n, x, false)));
                continue;
            }
            let best = beyond
                .iter()
                .map(|&x| self.known[&(n, x)])
                .fold((self.head)(n), Weight::min);
            self.known.insert((f, n), best);
        }
        self.known[&(from, nb)]
    }

    /// The smallest head reachable from `nb` without passing `from`.
    fn reachable_min(&self, from: NodeId, nb: NodeId) -> Weight {
        let mut seen = BTreeSet::from([from, nb]);
        let mut todo = vec![nb];
        let mut best = Weight::Empty;
        while let Some(n) = todo.pop() {
            best = best.min((self.head)(n));
            for &x in self.adj.get(&n).into_iter().flatten() {
                if seen.insert(x) {
                    todo.push(x);
                }
            }
        }
        best
    }
}

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

use waitingroom_core::NodeId;

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
    let m = first.membership();
    let live: BTreeMap<NodeId, u64> = nodes
        .iter()
        .map(|n| (n.id(), n.contact().incarnation))
        .collect();
    let listed: BTreeMap<NodeId, u64> = m.members.values().map(|c| (c.id, c.incarnation)).collect();
    live == listed && nodes.iter().all(|n| n.is_settled() && n.membership() == m)
}

/// Checks the invariants over the live nodes. `quiet` says no message is in flight.
pub fn check(nodes: &[&Node], quiet: bool) -> Vec<Violation> {
    let mut out = Vec::new();
    // At most one root per settled membership.
    let mut roots: BTreeMap<(u64, Vec<NodeId>), Vec<NodeId>> = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.is_settled()) {
        let m = n.membership();
        let key = (m.version, m.members.keys().copied().collect());
        let entry = roots.entry(key).or_default();
        if n.is_root() {
            entry.push(n.id());
        }
    }
    for ((version, _), r) in roots {
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
    let head = |id: NodeId| by_id.get(&id).map_or(Weight::Empty, |n| n.weights().0);
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
    for (&id, node) in &by_id {
        let (_, table) = node.weights();
        for (&nb, believed) in &table {
            if node.parent() == Some(nb) {
                continue;
            }
            let actual = branch_min(m, id, nb, &head);
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

/// The smallest head on `nb`'s side of the edge (`from`, `nb`).
fn branch_min(
    m: &crate::membership::Membership,
    from: NodeId,
    nb: NodeId,
    head: &dyn Fn(NodeId) -> Weight,
) -> Weight {
    let mut seen = BTreeSet::from([from, nb]);
    let mut todo = vec![nb];
    let mut best = Weight::Empty;
    while let Some(n) = todo.pop() {
        best = best.min(head(n));
        for x in m.neighbours(n) {
            if seen.insert(x) {
                todo.push(x);
            }
        }
    }
    best
}

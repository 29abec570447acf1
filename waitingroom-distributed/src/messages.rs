//! Everything nodes say to each other. All types are serde types so any transport can carry
//! them; the node never looks at how they travel.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use waitingroom_core::round_records::RoundRecord;
use waitingroom_core::{NodeId, QueueKey, Time};

use crate::live::LiveSettings;
use crate::membership::{ClusterRank, Contact, Membership, View};
use crate::released::{self, Digest, Page, Release};
use crate::voters::{SEEN_KEPT, Voters};

/// A message on the wire, with who sent it to whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The sender, with the address to answer at.
    pub from: Contact,
    /// Receiver's id; [`NodeId`]`(0)` when the sender only knows an address (joining).
    pub to: NodeId,
    /// Receiver's incarnation as the sender knows it; 0 when unknown.
    pub to_incarnation: u64,
    /// What is said.
    pub body: Body,
}

/// The outer layer of a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Body {
    /// Protocol traffic on the reliable, ordered per-link channel. `seq` numbers this link's
    /// messages within its `epoch` (the thesis' per-link counter, generalised: stale and
    /// duplicate copies are dropped and gaps are waited for); `ack` acknowledges the reverse
    /// direction's epoch `ack_epoch`.
    Channel {
        /// The sending link's epoch: a link started afresh has a newer one.
        epoch: u64,
        /// Sequence number within the epoch, starting at 1.
        seq: u64,
        /// The epoch of the receiver's link that `ack` refers to.
        ack_epoch: u64,
        /// Highest sequence number received in order on that epoch.
        ack: u64,
        /// The protocol message.
        msg: ChannelMsg,
    },
    /// A bare acknowledgement when there is nothing to piggyback it on.
    ChannelAck {
        /// The epoch of the receiver's link acknowledged.
        epoch: u64,
        /// Highest sequence number received in order on it.
        ack: u64,
        /// The sender lost track of this link (it hears it in the middle): start a new epoch.
        resync: bool,
    },
    /// SWIM probe. Carries the sender's view of the membership, so that probes also spread
    /// membership changes (anti-entropy): whoever sees an older view sends its tree.
    Ping {
        /// Matches the answer to the probe.
        nonce: u64,
        /// The sender's membership view.
        view: View,
        /// The sender's clock when it sent this (0: not told), echoed in the answer so that the
        /// sender can measure the clock offset (NTP's way).
        #[serde(default)]
        time: Time,
    },
    /// Answer to [`Body::Ping`], possibly relayed for an indirect probe.
    PingAck {
        /// The probe answered.
        nonce: u64,
        /// The node that was probed (differs from the sender when relayed).
        target: NodeId,
        /// The sender's membership view.
        view: View,
        /// The ping's `time`, and the answerer's clock when it answered (None when relayed, or
        /// the ping told no time).
        #[serde(default)]
        clock: Option<(Time, Time)>,
    },
    /// A membership and spanning tree: broadcast on every change, and sent to any node whose
    /// view is older (it is idempotent, so losing or repeating it is harmless). With it, the
    /// newest voters the sender knows (filled in as it is sent, `Node::send_raw`): a node that
    /// joins learns them with its membership, so it never takes itself and other newcomers for
    /// a cluster without voters (`voters.rs`).
    Tree(Arc<Membership>, Arc<Voters>),
    /// SWIM indirect probe: please ping `target` for me.
    PingReq {
        /// Who to ping.
        target: Contact,
        /// The requester's probe nonce, echoed in the relayed ack.
        nonce: u64,
    },
    /// A node asks to be added to the cluster.
    JoinRequest {
        /// The joining node.
        contact: Contact,
    },
    /// "You are not a member of my cluster": sent to a node that talks to us without being in
    /// our membership, so it can rejoin (or, if its cluster ranks higher, we will).
    NotMember {
        /// The sender's cluster, for deciding which side of a healed partition wins.
        cluster: ClusterRank,
        /// The sender's membership version.
        version: u64,
    },
}

/// Protocol messages carried on the reliable channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChannelMsg {
    /// QPID update: the smallest weight on the sender's side of the link (lazy: sent towards the
    /// parent, and to every neighbour around a membership change).
    Update {
        /// The sender's weight as seen from the receiver.
        weight: Weight,
        /// Membership version the sender had applied.
        version: u64,
    },
    /// "Tell me your weight again": a node settling after a membership change that has waited
    /// long for a neighbour (its update was lost on the way, e.g. while it rejoined).
    WeightQuery {
        /// Membership version of the sender.
        version: u64,
    },
    /// QPID findRoot: the sender's side of the link holds `weight`; re-aim your pointer. May carry
    /// admissions that the new root should make.
    FindRoot {
        /// The sender's weight as seen from the receiver.
        weight: Weight,
        /// Admissions handed over to the new root.
        admit: Option<Admission>,
        /// Membership version the sender had applied.
        version: u64,
    },
    /// QPID deleteMin, forwarded along the pointers to the root; no reply travels back.
    DeleteMin {
        /// How many to admit, and below which join time.
        admit: Admission,
    },
    /// "This visitor is queued with me now": sent to the node that held them before they were
    /// re-queued (it was unreachable then), so the old entry is not let in a second time; or
    /// "their pass is counted with me now", to the node that issued or last refreshed it.
    Forget {
        /// The visitor's ticket id.
        ticket: waitingroom_core::TicketId,
    },
    /// Anti-entropy of the released passes (`released.rs`): the digests of the sender's
    /// buckets, sent to its parent when a result's digest differs from its set; the answer is
    /// [`ChannelMsg::Releases`] pages of the buckets that differ.
    ReleasesAsk {
        /// One digest per bucket.
        buckets: Vec<Digest>,
    },
    /// Released passes: an answer to [`ChannelMsg::ReleasesAsk`], or the whole set sent to a
    /// node that was just added.
    Releases(Page),
    /// "I hold these releases": the answer to a release sent by the member that took it, which
    /// confirms it to its visitor once a majority of the voters hold it.
    ReleasesHeld {
        /// The released passes' ticket ids.
        tickets: Vec<waitingroom_core::TicketId>,
    },
    /// TAG: please count your subtree.
    CountRequest(CountRequest),
    /// TAG: the counts of the sender's subtree (None when the sender refused the round).
    CountReply {
        /// The round.
        stamp: Stamp,
        /// The counts, or None if the round is aborted (membership change in progress).
        counts: Option<Box<Counts>>,
    },
    /// TAG result, flooded down the tree after a completed count: the cluster-wide picture,
    /// and in range admission the set of visitors to let out. Shared: the copies a node passes
    /// on to its children, keeps until they are acknowledged and resends are one result.
    CountResult(Arc<CountResult>),
}

/// A QPID weight: the smallest queue key on one side of a link, or empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Weight {
    /// The smallest queued key (any key sorts before [`Weight::Empty`]).
    Key(QueueKey),
    /// Nobody is queued there.
    Empty,
}

impl Weight {
    /// The weight of an optional queue head.
    pub fn of(head: Option<QueueKey>) -> Weight {
        head.map_or(Weight::Empty, Weight::Key)
    }

    /// The key, if any.
    pub fn key(self) -> Option<QueueKey> {
        match self {
            Weight::Key(k) => Some(k),
            Weight::Empty => None,
        }
    }
}

/// A batch of admissions travelling towards the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// How many visitors are still to be let out.
    pub count: u64,
    /// Only visitors who joined strictly before this time: every such visitor was known to the
    /// count that decided this batch, so admitting them in key order is exactly FIFO.
    pub cutoff: Time,
    /// Membership version the count ran under; stale batches are dropped.
    pub version: u64,
    /// The round whose record lets the batch out: the node that lets a visitor out under it
    /// names it on their pass, though it may have joined after the round and never seen its
    /// result (waitingroom-distributed/README.md#fairness-records).
    #[serde(default)]
    pub round: Option<u64>,
}

/// Identifies one eviction round: the interval boundary it belongs to, and who started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Stamp {
    /// The eviction interval boundary.
    pub time: Time,
    /// The root that started the round.
    pub origin: NodeId,
}

impl Body {
    /// A tree message for `m` (the voters are filled in as it is sent).
    pub fn tree(m: Membership) -> Body {
        Body::shared_tree(Arc::new(m))
    }

    /// A tree message for `m`, shared with the other messages of a broadcast: one copy of the
    /// membership for all of them instead of one per member.
    pub fn shared_tree(m: Arc<Membership>) -> Body {
        Body::Tree(m, Arc::default())
    }
}

impl Stamp {
    /// Names no round (node 0 is never a member).
    pub const NONE: Stamp = Stamp {
        time: 0,
        origin: NodeId(0),
    };
}

/// TAG count request, flooded down the tree from the root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountRequest {
    /// The round.
    pub stamp: Stamp,
    /// Membership version of the root; a node on another version refuses the round.
    pub version: u64,
    /// Join-time boundaries for the histogram each node reports (ascending; the last one is
    /// the round's cutoff).
    pub bounds: Vec<Time>,
    /// How many of its smallest eligible keys each subtree reports (range admission with a
    /// limited number of free places); 0 when not needed.
    pub select: u32,
    /// The root's latest decided ranges, spread so that every node knows every decision.
    pub ranges: Vec<AdmitRange>,
}

/// Sent down the tree when a count completes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountResult {
    /// The cluster-wide picture.
    pub summary: Summary,
    /// Range admission: every node lets out its visitors in this range, in key order.
    pub admit: Option<AdmitRange>,
    /// The root's previous ranges, so a node that missed one (a crash cut the flood short)
    /// still lets out what was decided, attributed to the round that decided it.
    pub earlier: Vec<AdmitRange>,
    /// The digest of every release the root knows (`released.rs`): a node whose own differs
    /// catches up.
    #[serde(default)]
    pub releases: Digest,
}

/// "Let out every visitor who joined before `cutoff` and whose key is at most `max_key`": the
/// count knew every such visitor, so this is exactly the set of the smallest keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmitRange {
    /// Join-time cutoff of the round.
    pub cutoff: Time,
    /// Largest key to admit; None admits everyone before the cutoff.
    pub max_key: Option<QueueKey>,
    /// Membership version of the round.
    pub version: u64,
    /// When the round decided it (its interval boundary).
    pub decided_at: Time,
    /// The round's record: wherever the range goes its record goes, so a node that lets
    /// visitors out under a range it learned from a later round (it missed the result) also
    /// publishes the record and names it on their passes
    /// (waitingroom-distributed/README.md#fairness-records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<RoundRecord>,
}

impl AdmitRange {
    /// Whether this range lets out `key`.
    pub fn covers(&self, key: &QueueKey) -> bool {
        key.join_time < self.cutoff && self.max_key.is_none_or(|m| *key <= m)
    }
}

/// What a subtree reports in a count.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counts {
    /// Visitors on the site (admitted, or holding a valid pass).
    pub on_site: u64,
    /// Visitors waiting.
    pub queued: u64,
    /// `below[i]` = visitors waiting who joined before `bounds[i]`.
    pub below: Vec<u64>,
    /// Visitors let out so far, ever (monotone per node).
    pub admitted_total: u64,
    /// Nodes counted.
    pub nodes: u64,
    /// The subtree's smallest eligible keys, ascending, at most the round's `select`.
    pub smallest: Vec<QueueKey>,
    /// The latest decided ranges known in the subtree (a new root may have missed some).
    pub ranges: Vec<AdmitRange>,
    /// Each counted node's own figures, so the cluster knows what a member held if it dies.
    pub per_node: Vec<NodeCounts>,
    /// Departed members' places the subtree still counts: a new root that missed a member's
    /// last grant learns it here.
    pub departed: Vec<Departed>,
    /// The newest voters any node of the subtree knows (the majority rule).
    pub voters: Voters,
    /// The newest live settings any node of the subtree knows (`live.rs`).
    #[serde(default)]
    pub settings: LiveSettings,
    /// Passes the subtree's nodes took back recently (`released.rs`).
    #[serde(default)]
    pub released: Vec<Release>,
    /// Rounds whose result some node of the subtree never heard (`lease.rs`).
    #[serde(default)]
    pub lost: Vec<LostRound>,
    /// Before any voters are agreed: every member the subtree's nodes have had (`voters.rs`).
    #[serde(default)]
    pub seen: BTreeSet<NodeId>,
}

/// A round whose result a node never heard: its root may have granted places nobody else
/// knows of, which live at most `remaining_ms` more
/// (waitingroom-distributed/README.md#4-a-lost-round-counts-as-spent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostRound {
    /// The round.
    pub stamp: Stamp,
    /// How long any grant it made may still live, from when this was sent.
    pub remaining_ms: Time,
}

/// One node's part of a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCounts {
    /// The node.
    pub node: NodeId,
    /// Its visitors on the site.
    pub on_site: u64,
    /// Its visitors waiting who joined before the round's cutoff.
    pub eligible: u64,
    /// The first and the current incarnation of its process: its room counts every visitor any
    /// of those lives let out, so their departures hold no place any more (`departed.rs`).
    /// None from a node that does not say: its departures stay counted until they expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lives: Option<(u64, u64)>,
}

/// Most departures a count carries (a peer must not grow one without bound).
const DEPARTED_SENT: usize = 256;

/// Most lost rounds a count carries.
const LOST_SENT: usize = 64;

/// Places on the site that a departed member's visitors may still hold: their passes stay
/// valid after the node that issued them is gone, but nobody counts them any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Departed {
    /// When the last of those passes has expired.
    pub until: Time,
    /// The departed member.
    pub node: NodeId,
    /// The membership version that removed it (with `node`, names the departure).
    pub version: u64,
    /// Places it held at its last count, with its share of that round's admissions.
    pub places: u64,
    /// The incarnation of the life that departed, if known: once a count shows that life's
    /// process alive again, what it let out is counted there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
}

impl Counts {
    /// Adds another subtree's counts to these.
    pub fn add(&mut self, other: &Counts) {
        // Saturating: these come from peers, and a wrong count must not crash a node.
        self.on_site = self.on_site.saturating_add(other.on_site);
        self.queued = self.queued.saturating_add(other.queued);
        self.admitted_total = self.admitted_total.saturating_add(other.admitted_total);
        self.nodes = self.nodes.saturating_add(other.nodes);
        if self.below.len() < other.below.len() {
            self.below.resize(other.below.len(), 0);
        }
        for (a, b) in self.below.iter_mut().zip(&other.below) {
            *a = a.saturating_add(*b);
        }
        for r in &other.ranges {
            if !self.ranges.iter().any(|k| k.decided_at == r.decided_at) {
                self.ranges.push(r.clone());
            }
        }
        // Subtrees are disjoint, so a node shows up twice only in a malformed count; a set
        // keeps merging O(n log n) whatever a peer sends.
        let mut known: BTreeSet<NodeId> = self.per_node.iter().map(|n| n.node).collect();
        for n in &other.per_node {
            if known.insert(n.node) {
                self.per_node.push(*n);
            }
        }
        if other.voters > self.voters {
            self.voters = other.voters.clone();
        }
        if self.settings.is_older_than(&other.settings) {
            self.settings = other.settings.clone();
        }
        released::merge(&mut self.released, &other.released);
        for &id in &other.seen {
            if self.seen.len() >= SEEN_KEPT {
                break;
            }
            self.seen.insert(id);
        }
        for l in &other.lost {
            let full = self.lost.len() >= LOST_SENT;
            if let Some(k) = self.lost.iter_mut().find(|k| k.stamp == l.stamp) {
                k.remaining_ms = k.remaining_ms.max(l.remaining_ms);
            } else if !full {
                self.lost.push(*l);
            } else if let Some(last) = self.lost.last_mut() {
                // Past the bound the last one stands in for the rest, naming no round (so
                // that no root settles it).
                last.stamp = Stamp::NONE;
                last.remaining_ms = last.remaining_ms.max(l.remaining_ms);
            }
        }
        for d in &other.departed {
            let same = |k: &&mut Departed| (k.node, k.version) == (d.node, d.version);
            if let Some(k) = self.departed.iter_mut().find(same) {
                k.until = k.until.max(d.until);
                k.places = k.places.max(d.places);
            } else if self.departed.len() < DEPARTED_SENT {
                self.departed.push(*d);
            }
        }
    }

    /// Merges another subtree's smallest keys into these, keeping the `limit` smallest.
    pub fn merge_smallest(&mut self, other: &[QueueKey], limit: usize) {
        let mut merged = Vec::with_capacity((self.smallest.len() + other.len()).min(limit));
        let (mut a, mut b) = (self.smallest.iter().peekable(), other.iter().peekable());
        while merged.len() < limit {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x <= y => a.next(),
                (Some(_), Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            merged.extend(next.copied());
        }
        self.smallest = merged;
    }
}

/// The cluster-wide picture after one eviction round, spread with the next round's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The round this summarises.
    pub stamp: Stamp,
    /// Histogram boundaries of that round.
    pub bounds: Vec<Time>,
    /// Cluster-wide `below` counts of that round (before its admissions).
    pub below: Vec<u64>,
    /// Membership version of the round.
    pub version: u64,
    /// Visitors waiting cluster-wide at the count, before its admissions.
    pub queued: u64,
    /// Visitors on the site at the count, including the places departed members' visitors may
    /// still hold.
    pub on_site: u64,
    /// Visitors the round decided to let out.
    pub admitted: u64,
    /// Measured admission rate, visitors per second, times 1000 (integer for determinism).
    pub rate_milli_per_s: u64,
    /// Places that may be given out by straight-through admission until the next round,
    /// cluster-wide (split between members by id order).
    pub free_places: u64,
    /// Members at the count.
    pub members: u64,
    /// Places each member holds after this round (its visitors on the site, its share of the
    /// round's admissions and its grant), by node id: what to keep counting if it departs.
    pub places: Vec<(NodeId, u64)>,
    /// Places each member may give out until its grant expires, by node id; None when the root
    /// heard from no majority of the voters and granted nothing
    /// (waitingroom-distributed/README.md#admission-leases).
    pub grants: Option<Vec<(NodeId, u64)>>,
    /// The voters after this round: the members counted, when they held a majority.
    pub voters: Voters,
    /// The newest live settings the root knows: every member adopts them.
    #[serde(default)]
    pub settings: LiveSettings,
    /// The departed members' places still counted, as the root knew them.
    pub departed: Vec<Departed>,
    /// Passes given back recently, as the round's count carried them up (`released.rs`).
    #[serde(default)]
    pub released: Vec<Release>,
    /// The round's record, if it let anyone out: the claims every node signs the same way
    /// (waitingroom-distributed/README.md#fairness-records; `waitingroom_core::round_records`).
    #[serde(default)]
    pub record: Option<RoundRecord>,
    /// Lost rounds the root held against the site (it granted nothing while any was live):
    /// every member holds them too, so that they outlive this root.
    #[serde(default)]
    pub lost: Vec<LostRound>,
}

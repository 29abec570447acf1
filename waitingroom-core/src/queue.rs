//! The local priority queue of one node.
//!
//! Positions are shown to every waiting visitor on every check-in, so `rank` is as hot as
//! insert and pop; a plain ordered set answers it in O(n). The queue is therefore a counted
//! B+-tree: every inner node keeps the number of keys under each child, which turns rank into a
//! sum along one root-to-leaf path. Nodes live in two arenas addressed by `u32` (boxed one by one
//! so that growing an arena never copies megabytes of keys, and freed nodes are kept for reuse),
//! and a hash set indexed by ticket id finds the key of a ticket for `get` and `remove`.
//!
//! With one million entries queued in join order (the usual case: leaves left behind by appends
//! are three quarters full) the tree takes about 33 bytes per entry and the index about 52, so
//! the whole queue stays below 90 bytes per visitor. The engine keeps only the tree (`KeyTree`)
//! and finds keys through its own visitor table.
//!
//! Most check-ins need no search at all: the engine keeps each queued visitor's last rank with
//! their record (`SeenRank`), and between two check-ins a queue mostly appends new visitors
//! behind them and lets visitors out in front of them, which shifts that rank by a count.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Range;

use crate::types::{NodeId, QueueKey, TicketId, Time};

/// Keys per leaf: 64 keys of 24 bytes is small enough that shifting a whole leaf costs less than
/// the cache misses of one more tree level.
const LEAF_CAP: usize = 64;
/// A quarter rather than a half, so that a node hovering around the limit does not split and
/// merge on every other operation.
const LEAF_MIN: usize = LEAF_CAP / 4;
const INNER_CAP: usize = 64;
const INNER_MIN: usize = INNER_CAP / 4;
/// End of the leaf chain.
const NONE: u32 = u32::MAX;

/// Queued visitors of one node, ordered by [`QueueKey`], indexed by ticket id.
///
/// Insert, pop-min, peek-min, remove, get, contains and rank each take O(log n) time.
#[derive(Clone)]
pub struct LocalQueue {
    tree: KeyTree,
    by_id: HashSet<ById, TicketHasher>,
}

impl Default for LocalQueue {
    fn default() -> Self {
        LocalQueue {
            tree: KeyTree::new(),
            by_id: HashSet::with_hasher(TicketHasher),
        }
    }
}

impl fmt::Debug for LocalQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.tree.fmt(f)
    }
}

impl LocalQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of queued visitors.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether nobody is queued.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Queues `key`. Returns false, changing nothing, when its ticket id is already queued.
    pub fn insert(&mut self, key: QueueKey) -> bool {
        if !self.by_id.insert(ById(key)) {
            return false;
        }
        self.tree.insert(key);
        true
    }

    /// The smallest key, if any.
    pub fn peek_min(&self) -> Option<QueueKey> {
        self.tree.first()
    }

    /// Removes and returns the smallest key.
    pub fn pop_min(&mut self) -> Option<QueueKey> {
        let key = self.tree.pop_first()?;
        self.by_id.remove(&key.ticket);
        Some(key)
    }

    /// Removes the entry of `ticket`, returning its key.
    pub fn remove(&mut self, ticket: TicketId) -> Option<QueueKey> {
        let ById(key) = self.by_id.take(&ticket)?;
        let removed = self.tree.remove(key);
        debug_assert!(removed, "ticket index and tree disagree");
        Some(key)
    }

    /// The key of `ticket`, if queued.
    pub fn get(&self, ticket: TicketId) -> Option<QueueKey> {
        self.by_id.get(&ticket).map(|entry| entry.0)
    }

    /// Whether `ticket` is queued.
    pub fn contains(&self, ticket: TicketId) -> bool {
        self.by_id.contains(&ticket)
    }

    /// How many queued keys are strictly smaller than `key`.
    pub fn rank(&self, key: &QueueKey) -> usize {
        self.tree.rank(key)
    }

    /// All queued keys, smallest first.
    pub fn iter(&self) -> impl Iterator<Item = QueueKey> + '_ {
        self.tree.iter()
    }
}

/// A queue key in the ticket index: equal and hashed by ticket id alone, so the set can be
/// probed with a bare [`TicketId`] and no key is stored twice.
#[derive(Clone, Copy)]
struct ById(QueueKey);

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.ticket == other.0.ticket
    }
}

impl Eq for ById {}

impl Hash for ById {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.ticket.hash(state);
    }
}

impl Borrow<TicketId> for ById {
    fn borrow(&self) -> &TicketId {
        &self.0.ticket
    }
}

/// Hashes ticket ids with one folded multiply instead of SipHash.
///
/// Flooding resistance buys nothing here: ticket ids are drawn from the room's own random
/// generator and come back signed, so nobody outside chooses them. The mix still spreads small
/// or patterned ids (as in tests) over both the low bits (bucket) and the high bits (tag) that
/// the standard table uses. Public for other tables keyed by ticket id (the simulator's).
#[derive(Debug, Clone, Copy, Default)]
pub struct TicketHasher;

impl BuildHasher for TicketHasher {
    type Hasher = FoldHasher;

    fn build_hasher(&self) -> FoldHasher {
        FoldHasher(0x243f_6a88_85a3_08d3)
    }
}

/// The hasher [`TicketHasher`] builds.
pub struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let product = u128::from(self.0 ^ n) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// What [`KeyTree::remove_target`] takes out.
#[derive(Clone, Copy)]
enum Target {
    First,
    Key(QueueKey),
}

/// Keys live in `keys[lo..hi]`: popping the front only moves `lo`, so draining a leaf from the
/// front (what `pop_min` does all day) shifts nothing.
#[derive(Clone)]
struct Leaf {
    lo: u32,
    hi: u32,
    /// The next leaf in key order, for iteration.
    next: u32,
    keys: Keys<LEAF_CAP>,
}

impl Leaf {
    fn boxed() -> Box<Self> {
        Box::new(Leaf {
            lo: 0,
            hi: 0,
            next: NONE,
            keys: Keys::EMPTY,
        })
    }

    fn len(&self) -> usize {
        (self.hi - self.lo) as usize
    }

    fn range(&self) -> Range<usize> {
        self.lo as usize..self.hi as usize
    }

    /// The key at `pos`, counted from the first key.
    fn key(&self, pos: usize) -> QueueKey {
        debug_assert!(pos < self.len());
        self.keys.get(self.lo as usize + pos)
    }

    /// Whether the leaf holds `key` at `pos` (counted from the first key).
    fn holds_at(&self, pos: usize, key: &QueueKey) -> bool {
        pos < self.len() && self.key(pos) == *key
    }

    /// How many keys are below `key`.
    fn count_below(&self, key: &QueueKey) -> usize {
        self.keys.count_below(self.range(), key, false)
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = QueueKey> + '_ {
        self.range().map(|i| self.keys.get(i))
    }

    fn compact_front(&mut self) {
        let len = self.len();
        self.keys.copy_within(self.range(), 0);
        self.lo = 0;
        self.hi = len as u32;
    }

    fn compact_back(&mut self) {
        let len = self.len();
        self.keys.copy_within(self.range(), LEAF_CAP - len);
        self.lo = (LEAF_CAP - len) as u32;
        self.hi = LEAF_CAP as u32;
    }

    /// Inserts at `pos` (counted from the first key) into a leaf that is not full, shifting
    /// whichever side is shorter when both have room.
    fn insert(&mut self, pos: usize, key: QueueKey) {
        let len = self.len();
        debug_assert!(len < LEAF_CAP && pos <= len);
        let lo = self.lo as usize;
        if lo > 0 && pos < len - pos {
            self.keys.copy_within(lo..lo + pos, lo - 1);
            self.lo -= 1;
            self.keys.set(lo - 1 + pos, key);
        } else {
            if self.hi as usize == LEAF_CAP {
                // Compacting now rather than shifting by one keeps a run of appends cheap.
                self.compact_front();
            }
            let at = self.lo as usize + pos;
            self.keys.copy_within(at..self.hi as usize, at + 1);
            self.hi += 1;
            self.keys.set(at, key);
        }
    }

    fn remove(&mut self, pos: usize) -> QueueKey {
        let len = self.len();
        let lo = self.lo as usize;
        let key = self.keys.get(lo + pos);
        if pos < len - 1 - pos {
            self.keys.copy_within(lo..lo + pos, lo + 1);
            self.lo += 1;
        } else {
            self.keys
                .copy_within(lo + pos + 1..self.hi as usize, lo + pos);
            self.hi -= 1;
        }
        if self.lo == self.hi {
            self.lo = 0;
            self.hi = 0;
        }
        key
    }
}

/// Child `i` holds `counts[i]` keys, all at least `keys[i]` and all below `keys[i + 1]`.
/// `keys[0]` is not used for routing; rebalancing writes the parent's separator there before
/// entries move between siblings, so each moved entry carries a valid bound.
#[derive(Clone)]
struct Inner {
    len: usize,
    keys: Keys<INNER_CAP>,
    children: [u32; INNER_CAP],
    counts: [u64; INNER_CAP],
}

impl Inner {
    fn boxed() -> Box<Self> {
        Box::new(Inner {
            len: 0,
            keys: Keys::EMPTY,
            children: [0; INNER_CAP],
            counts: [0; INNER_CAP],
        })
    }

    /// The child whose key range holds `key`.
    fn child_index(&self, key: &QueueKey) -> usize {
        self.keys.count_below(1..self.len, key, true)
    }

    fn total(&self) -> u64 {
        self.counts[..self.len].iter().sum()
    }

    fn insert_entry(&mut self, pos: usize, key: QueueKey, child: u32, count: u64) {
        let len = self.len;
        self.keys.copy_within(pos..len, pos + 1);
        self.children.copy_within(pos..len, pos + 1);
        self.counts.copy_within(pos..len, pos + 1);
        self.keys.set(pos, key);
        self.children[pos] = child;
        self.counts[pos] = count;
        self.len += 1;
    }

    fn remove_entry(&mut self, pos: usize) {
        let len = self.len;
        self.keys.copy_within(pos + 1..len, pos);
        self.children.copy_within(pos + 1..len, pos);
        self.counts.copy_within(pos + 1..len, pos);
        self.len -= 1;
    }

    /// Moves entries `from..from + n` of `src` to `at..at + n` of `self`, overwriting.
    fn copy_from(&mut self, at: usize, src: &Inner, from: usize, n: usize) {
        self.keys.copy_from(at, &src.keys, from, n);
        self.children[at..at + n].copy_from_slice(&src.children[from..from + n]);
        self.counts[at..at + n].copy_from_slice(&src.counts[from..from + n]);
    }

    fn shift(&mut self, from: usize, to: usize) {
        let len = self.len;
        self.keys.copy_within(from..len, to);
        self.children.copy_within(from..len, to);
        self.counts.copy_within(from..len, to);
    }
}

/// A split passes up the new right sibling: its separator, index and number of keys.
type Split = (QueueKey, u32, u64);

/// The ordered, counted keys of a [`LocalQueue`] without its ticket index, for an owner that
/// already maps tickets to their keys (the engine's visitor table): one hash table per visitor
/// instead of two. Keys must be distinct.
#[derive(Clone)]
#[allow(
    clippy::vec_box,
    reason = "boxed nodes keep growing an arena from moving every key, and bound its slack to a \
              pointer per node"
)]
pub(crate) struct KeyTree {
    leaves: Vec<Box<Leaf>>,
    inners: Vec<Box<Inner>>,
    free_leaves: Vec<u32>,
    free_inners: Vec<u32>,
    root: u32,
    /// Inner levels above the leaves; 0 when the root is a leaf.
    height: u32,
    len: usize,
    /// The smallest key, kept rather than looked up: a node asks for its QPID weight after
    /// every check-in, and the walk down to the first leaf missed the cache most times.
    head: Option<QueueKey>,
    /// The latest join time ever inserted.
    newest: Time,
    /// Keys removed from the front: each lowers the rank of every other key by one.
    front_pops: u64,
    /// Changes that may have moved ranks otherwise (see [`SeenRank`]): keys inserted with a
    /// join time before `newest`, or removed from anywhere but the front.
    shifts: u64,
    /// The last `SHIFT_LOG` of those changes: change `s` (counted from 0) is at `s % SHIFT_LOG`,
    /// with whether its key was inserted (or removed).
    shift_log: Vec<(QueueKey, bool)>,
    /// A key (queued or not) and its rank, kept on every change (`KeyTree::mark`): the
    /// cluster's position estimate asks for the rank of its last count's cutoff on every
    /// check-in, and a search reads a leaf and the nodes above it.
    mark: Option<(QueueKey, usize)>,
}

/// Changes remembered for [`SeenRank`]: a node re-queueing the visitors of a crashed one gets
/// a burst of them.
const SHIFT_LOG: u64 = 64;

/// A key's rank as counted once, and what it takes to know it again without a search.
///
/// Nearly all a queue does is append new keys behind every other and let keys out from the
/// front. Neither moves a waiting key except down by one per key let out, so its rank is its
/// rank then less the keys popped since, corrected by the other changes since (`shifts`, kept in
/// the tree's log) whose keys are below it. A key that joins in the newest join time's
/// millisecond may still land before the others of that millisecond without counting as a
/// change, so only keys older than the newest join time are noted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeenRank {
    /// The rank then, plus the keys popped from the front before then.
    base: u64,
    /// The tree's `shifts` then.
    shifts: u64,
}

impl SeenRank {
    /// Nothing noted: never holds (`shifts` never reaches it).
    pub(crate) const NONE: SeenRank = SeenRank {
        base: 0,
        shifts: u64::MAX,
    };
}

/// The keys of one tree node, stored by field: the join times side by side, so that the scans
/// placing a key (rank, insert, remove) read 8 of its 24 bytes. Keys order by join time first;
/// the few that share one with the key sought are settled by the rest.
#[derive(Clone)]
struct Keys<const N: usize> {
    times: [Time; N],
    rest: [(TicketId, NodeId); N],
}

impl<const N: usize> Keys<N> {
    /// Unused slots hold zeros; they are never read as keys.
    const EMPTY: Self = Keys {
        times: [0; N],
        rest: [(TicketId(0), NodeId(0)); N],
    };

    fn get(&self, i: usize) -> QueueKey {
        let (ticket, node) = self.rest[i];
        QueueKey {
            join_time: self.times[i],
            ticket,
            node,
        }
    }

    fn set(&mut self, i: usize, key: QueueKey) {
        self.times[i] = key.join_time;
        self.rest[i] = (key.ticket, key.node);
    }

    fn copy_within(&mut self, src: Range<usize>, dest: usize) {
        self.times.copy_within(src.clone(), dest);
        self.rest.copy_within(src, dest);
    }

    /// Copies `src`'s keys `from..from + n` to `at..at + n`.
    fn copy_from<const M: usize>(&mut self, at: usize, src: &Keys<M>, from: usize, n: usize) {
        self.times[at..at + n].copy_from_slice(&src.times[from..from + n]);
        self.rest[at..at + n].copy_from_slice(&src.rest[from..from + n]);
    }

    /// How many of the sorted keys in `range` are below `key` (or equal too, with `or_equal`).
    ///
    /// A scan of the whole range rather than a binary search: its loads do not depend on each
    /// other, so a node that is not in cache arrives in about one memory latency instead of one
    /// per probe (the two compared in the simulator:
    /// docs/benchmarks.md#simulator-hot-path-changes-measured).
    fn count_below(&self, range: Range<usize>, key: &QueueKey, or_equal: bool) -> usize {
        let start = range.start;
        let times = &self.times[range];
        let mut n = times.iter().filter(|&&t| t < key.join_time).count();
        while n < times.len() && times[n] == key.join_time {
            let k = self.get(start + n);
            if k > *key || (k == *key && !or_equal) {
                break;
            }
            n += 1;
        }
        n
    }
}

/// Two distinct elements of one slice, both mutable.
fn two_mut<T>(items: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b);
    if a < b {
        let (head, tail) = items.split_at_mut(b);
        (&mut head[a], &mut tail[0])
    } else {
        let (head, tail) = items.split_at_mut(a);
        (&mut tail[0], &mut head[b])
    }
}

fn arena_index(len: usize) -> u32 {
    u32::try_from(len)
        .ok()
        .filter(|&i| i != NONE)
        .expect("queue node arena exceeds u32 indices")
}

impl fmt::Debug for KeyTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Default for KeyTree {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyTree {
    pub(crate) fn new() -> Self {
        KeyTree {
            leaves: vec![Leaf::boxed()],
            inners: Vec::new(),
            free_leaves: Vec::new(),
            free_inners: Vec::new(),
            root: 0,
            height: 0,
            len: 0,
            head: None,
            newest: 0,
            front_pops: 0,
            shifts: 0,
            shift_log: Vec::new(),
            mark: None,
        }
    }

    fn alloc_leaf(&mut self) -> u32 {
        match self.free_leaves.pop() {
            Some(index) => {
                let leaf = &mut self.leaves[index as usize];
                leaf.lo = 0;
                leaf.hi = 0;
                leaf.next = NONE;
                index
            }
            None => {
                let index = arena_index(self.leaves.len());
                self.leaves.push(Leaf::boxed());
                index
            }
        }
    }

    fn alloc_inner(&mut self) -> u32 {
        match self.free_inners.pop() {
            Some(index) => {
                self.inners[index as usize].len = 0;
                index
            }
            None => {
                let index = arena_index(self.inners.len());
                self.inners.push(Inner::boxed());
                index
            }
        }
    }

    fn first_leaf(&self) -> u32 {
        let mut node = self.root;
        for _ in 0..self.height {
            node = self.inners[node as usize].children[0];
        }
        node
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn first(&self) -> Option<QueueKey> {
        self.head
    }

    /// The smallest key, looked up.
    fn find_first(&self) -> Option<QueueKey> {
        let leaf = &self.leaves[self.first_leaf() as usize];
        (leaf.len() > 0).then(|| leaf.key(0))
    }

    /// The rank of `key`, which is in the tree, and a note of it for [`KeyTree::rank_again`].
    pub(crate) fn rank_noted(&self, key: &QueueKey) -> (usize, SeenRank) {
        let rank = self.rank(key);
        (rank, self.note(key, rank))
    }

    fn note(&self, key: &QueueKey, rank: usize) -> SeenRank {
        if key.join_time < self.newest {
            SeenRank {
                base: rank as u64 + self.front_pops,
                shifts: self.shifts,
            }
        } else {
            SeenRank::NONE
        }
    }

    /// The rank now of `key`, still in the tree, whose rank was noted as `seen`, and a fresh
    /// note; None when more changed since than the log remembers (then `rank_noted`).
    pub(crate) fn rank_again(&self, key: &QueueKey, seen: SeenRank) -> Option<(usize, SeenRank)> {
        let since = self.shifts.checked_sub(seen.shifts)?;
        if since > SHIFT_LOG {
            return None;
        }
        let mut rank = i128::from(seen.base) - i128::from(self.front_pops);
        for s in seen.shifts..self.shifts {
            let (moved, inserted) = self.shift_log[(s % SHIFT_LOG) as usize];
            if moved < *key {
                rank += if inserted { 1 } else { -1 };
            }
        }
        let rank = usize::try_from(rank).ok()?;
        Some((rank, self.note(key, rank)))
    }

    /// Records a change that may move ranks other than from the front (see [`SeenRank`]).
    fn shifted(&mut self, key: QueueKey, inserted: bool) {
        let at = (self.shifts % SHIFT_LOG) as usize;
        if at < self.shift_log.len() {
            self.shift_log[at] = (key, inserted);
        } else {
            self.shift_log.push((key, inserted));
        }
        self.shifts += 1;
    }

    /// How many keys are strictly smaller than `key`.
    pub(crate) fn rank(&self, key: &QueueKey) -> usize {
        let mut node = self.root;
        let mut before = 0u64;
        for _ in 0..self.height {
            let inner = &self.inners[node as usize];
            let i = inner.child_index(key);
            before += inner.counts[..i].iter().sum::<u64>();
            node = inner.children[i];
        }
        before as usize + self.leaves[node as usize].count_below(key)
    }

    pub(crate) fn iter(&self) -> Iter<'_> {
        let leaf = self.first_leaf();
        Iter {
            leaves: &self.leaves,
            leaf,
            pos: self.leaves[leaf as usize].lo as usize,
            remaining: self.len,
        }
    }

    /// Adds `key`, which must not be in the tree yet.
    pub(crate) fn insert(&mut self, key: QueueKey) {
        let root = self.root;
        if let Some((separator, right, right_count)) =
            self.insert_under(root, self.height, key, true)
        {
            let left_count = (self.len + 1) as u64 - right_count;
            let new_root = self.alloc_inner();
            let inner = &mut self.inners[new_root as usize];
            inner.len = 2;
            inner.keys.set(1, separator);
            inner.children[0] = root;
            inner.children[1] = right;
            inner.counts[0] = left_count;
            inner.counts[1] = right_count;
            self.root = new_root;
            self.height += 1;
        }
        self.len += 1;
        if self.head.is_none_or(|head| key < head) {
            self.head = Some(key);
        }
        self.moved_mark(key, 1);
        // Behind every key, or in the newest join time's millisecond (see `SeenRank`).
        if key.join_time < self.newest {
            self.shifted(key, true);
        }
        self.newest = self.newest.max(key.join_time);
    }

    /// `rightmost` says whether `node` is the last node of its level: keys that land past its end
    /// are new maxima, which join times make the common case.
    fn insert_under(
        &mut self,
        node: u32,
        level: u32,
        key: QueueKey,
        rightmost: bool,
    ) -> Option<Split> {
        if level == 0 {
            return self.insert_into_leaf(node, key, rightmost);
        }
        let inner = &mut self.inners[node as usize];
        let i = inner.child_index(&key);
        inner.counts[i] += 1;
        let child = inner.children[i];
        let child_rightmost = rightmost && i + 1 == inner.len;
        let (separator, right, right_count) =
            self.insert_under(child, level - 1, key, child_rightmost)?;
        let inner = &mut self.inners[node as usize];
        inner.counts[i] -= right_count;
        if inner.len < INNER_CAP {
            inner.insert_entry(i + 1, separator, right, right_count);
            return None;
        }
        let new = self.alloc_inner();
        let (inner, sibling) = two_mut(&mut self.inners, node as usize, new as usize);
        let pos = i + 1;
        // A new maximum takes only what the new node needs to be legal, so appending keys leaves
        // nodes three quarters full behind instead of half.
        let keep = if rightmost && pos == INNER_CAP {
            INNER_CAP - INNER_MIN
        } else {
            INNER_CAP / 2
        };
        sibling.copy_from(0, inner, keep, INNER_CAP - keep);
        sibling.len = INNER_CAP - keep;
        inner.len = keep;
        if pos <= keep {
            inner.insert_entry(pos, separator, right, right_count);
        } else {
            sibling.insert_entry(pos - keep, separator, right, right_count);
        }
        Some((sibling.keys.get(0), new, sibling.total()))
    }

    fn insert_into_leaf(&mut self, node: u32, key: QueueKey, rightmost: bool) -> Option<Split> {
        let leaf = &mut self.leaves[node as usize];
        let pos = leaf.count_below(&key);
        if leaf.len() < LEAF_CAP {
            leaf.insert(pos, key);
            return None;
        }
        let new = self.alloc_leaf();
        let (leaf, sibling) = two_mut(&mut self.leaves, node as usize, new as usize);
        sibling.next = leaf.next;
        leaf.next = new;
        // As for inner nodes. A full leaf has no room on either side, so its keys fill the array.
        let keep = if rightmost && pos == LEAF_CAP {
            LEAF_CAP - LEAF_MIN
        } else {
            LEAF_CAP / 2
        };
        sibling.keys.copy_from(0, &leaf.keys, keep, LEAF_CAP - keep);
        sibling.hi = (LEAF_CAP - keep) as u32;
        leaf.hi = keep as u32;
        if pos <= keep {
            leaf.insert(pos, key);
        } else {
            sibling.insert(pos - keep, key);
        }
        Some((sibling.key(0), new, sibling.len() as u64))
    }

    pub(crate) fn pop_first(&mut self) -> Option<QueueKey> {
        self.remove_target(Target::First)
    }

    /// Removes `key`; false, changing nothing, when it is not in the tree.
    pub(crate) fn remove(&mut self, key: QueueKey) -> bool {
        self.remove_target(Target::Key(key)).is_some()
    }

    fn remove_target(&mut self, target: Target) -> Option<QueueKey> {
        if self.len == 0 {
            return None;
        }
        let front = match target {
            Target::First => true,
            Target::Key(key) => self.head == Some(key),
        };
        let key = self.remove_under(self.root, self.height, target)?;
        self.len -= 1;
        while self.height > 0 && self.inners[self.root as usize].len == 1 {
            let old = self.root;
            self.root = self.inners[old as usize].children[0];
            self.height -= 1;
            self.free_inners.push(old);
        }
        if front {
            self.front_pops += 1;
            self.head = self.find_first();
        } else {
            self.shifted(key, false);
        }
        self.moved_mark(key, -1);
        Some(key)
    }

    /// Keeps the rank of `key` from now on (of one key at a time), for [`KeyTree::marked`].
    pub(crate) fn mark(&mut self, key: QueueKey) {
        if self.mark.is_none_or(|(marked, _)| marked != key) {
            self.mark = Some((key, self.rank(&key)));
        }
    }

    /// The rank of `key` if it is the one marked.
    pub(crate) fn marked(&self, key: &QueueKey) -> Option<usize> {
        let (marked, rank) = self.mark?;
        debug_assert!(
            marked != *key || rank == self.rank(key),
            "a marked rank went stale"
        );
        (marked == *key).then_some(rank)
    }

    fn moved_mark(&mut self, key: QueueKey, by: isize) {
        if let Some((marked, rank)) = &mut self.mark
            && key < *marked
        {
            *rank = rank.wrapping_add_signed(by);
        }
    }

    fn remove_under(&mut self, node: u32, level: u32, target: Target) -> Option<QueueKey> {
        if level == 0 {
            let leaf = &mut self.leaves[node as usize];
            let pos = match target {
                Target::First => 0,
                Target::Key(key) => {
                    let pos = leaf.count_below(&key);
                    if !leaf.holds_at(pos, &key) {
                        return None;
                    }
                    pos
                }
            };
            return Some(leaf.remove(pos));
        }
        let inner = &mut self.inners[node as usize];
        let i = match target {
            Target::First => 0,
            Target::Key(key) => inner.child_index(&key),
        };
        let child = inner.children[i];
        let key = self.remove_under(child, level - 1, target)?;
        self.inners[node as usize].counts[i] -= 1;
        let underfull = if level == 1 {
            self.leaves[child as usize].len() < LEAF_MIN
        } else {
            self.inners[child as usize].len < INNER_MIN
        };
        if underfull {
            self.rebalance(node, i, level == 1);
        }
        Some(key)
    }

    /// Refills child `i` of `parent` from a neighbour, merging the two when they fit in one.
    fn rebalance(&mut self, parent: u32, i: usize, leaves: bool) {
        let inner = &self.inners[parent as usize];
        if inner.len < 2 {
            // Only the root can have a single child, and `remove` collapses it.
            return;
        }
        let left = if i + 1 < inner.len { i } else { i - 1 };
        let right = left + 1;
        let (a, b) = (inner.children[left], inner.children[right]);
        let separator = inner.keys.get(right);
        let outcome = if leaves {
            self.rebalance_leaves(a, b)
        } else {
            self.rebalance_inners(a, b, separator)
        };
        let inner = &mut self.inners[parent as usize];
        match outcome {
            Rebalanced::Merged => {
                inner.counts[left] += inner.counts[right];
                inner.remove_entry(right);
                if leaves {
                    self.free_leaves.push(b);
                } else {
                    self.free_inners.push(b);
                }
            }
            Rebalanced::Moved {
                separator,
                right_count,
            } => {
                let total = inner.counts[left] + inner.counts[right];
                inner.counts[left] = total - right_count;
                inner.counts[right] = right_count;
                inner.keys.set(right, separator);
            }
        }
    }

    fn rebalance_leaves(&mut self, a: u32, b: u32) -> Rebalanced {
        let (left, right) = two_mut(&mut self.leaves, a as usize, b as usize);
        let (left_len, right_len) = (left.len(), right.len());
        let total = left_len + right_len;
        if total <= LEAF_CAP {
            left.compact_front();
            left.keys
                .copy_from(left_len, &right.keys, right.lo as usize, right_len);
            left.hi = total as u32;
            left.next = right.next;
            return Rebalanced::Merged;
        }
        let want = total / 2;
        if left_len < want {
            let n = want - left_len;
            left.compact_front();
            left.keys
                .copy_from(left_len, &right.keys, right.lo as usize, n);
            left.hi = want as u32;
            right.lo += n as u32;
        } else {
            let n = left_len - want;
            right.compact_back();
            right.lo -= n as u32;
            let (from, to) = (left.hi as usize - n, right.lo as usize);
            right.keys.copy_from(to, &left.keys, from, n);
            left.hi -= n as u32;
        }
        Rebalanced::Moved {
            separator: right.key(0),
            right_count: right.len() as u64,
        }
    }

    fn rebalance_inners(&mut self, a: u32, b: u32, separator: QueueKey) -> Rebalanced {
        let (left, right) = two_mut(&mut self.inners, a as usize, b as usize);
        // The parent's separator becomes the bound of the right node's first child once that
        // child sits behind others.
        right.keys.set(0, separator);
        let (left_len, right_len) = (left.len, right.len);
        let total = left_len + right_len;
        if total <= INNER_CAP {
            left.copy_from(left_len, right, 0, right_len);
            left.len = total;
            return Rebalanced::Merged;
        }
        let want = total / 2;
        if left_len < want {
            let n = want - left_len;
            left.copy_from(left_len, right, 0, n);
            left.len = want;
            right.shift(n, 0);
            right.len -= n;
        } else {
            let n = left_len - want;
            right.shift(0, n);
            right.len += n;
            right.copy_from(0, left, want, n);
            left.len = want;
        }
        Rebalanced::Moved {
            separator: right.keys.get(0),
            right_count: right.total(),
        }
    }
}

enum Rebalanced {
    /// The right node's entries moved into the left one; the right node is unused.
    Merged,
    /// Entries moved between the two; the right one now has this separator and count.
    Moved {
        separator: QueueKey,
        right_count: u64,
    },
}

pub(crate) struct Iter<'a> {
    leaves: &'a [Box<Leaf>],
    leaf: u32,
    pos: usize,
    remaining: usize,
}

impl Iterator for Iter<'_> {
    type Item = QueueKey;

    fn next(&mut self) -> Option<QueueKey> {
        if self.remaining == 0 {
            return None;
        }
        loop {
            let leaf = &self.leaves[self.leaf as usize];
            if self.pos < leaf.hi as usize {
                self.pos += 1;
                self.remaining -= 1;
                return Some(leaf.keys.get(self.pos - 1));
            }
            self.leaf = leaf.next;
            self.pos = self.leaves[self.leaf as usize].lo as usize;
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
impl KeyTree {
    /// Panics unless every structural invariant holds.
    fn check(&self) {
        let mut live_leaves = Vec::new();
        let mut live_inners = Vec::new();
        let count = self.check_node(
            self.root,
            self.height,
            (None, None),
            true,
            &mut live_leaves,
            &mut live_inners,
        );
        assert_eq!(count, self.len as u64);
        assert_eq!(self.head, self.find_first(), "stale head");
        if let Some((key, rank)) = self.mark {
            assert_eq!(rank, self.rank(&key), "stale mark");
        }

        let mut chain = Vec::new();
        let mut leaf = self.first_leaf();
        while leaf != NONE {
            chain.push(leaf);
            leaf = self.leaves[leaf as usize].next;
        }
        assert_eq!(chain, live_leaves, "leaf chain out of key order");

        let keys: Vec<QueueKey> = self.iter().collect();
        assert_eq!(keys.len(), self.len);
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));

        for (live, free, arena) in [
            (&live_leaves, &self.free_leaves, self.leaves.len()),
            (&live_inners, &self.free_inners, self.inners.len()),
        ] {
            let mut all: Vec<u32> = live.iter().chain(free).copied().collect();
            all.sort_unstable();
            all.dedup();
            assert_eq!(
                all.len(),
                live.len() + free.len(),
                "node both live and free"
            );
            assert_eq!(all.len(), arena, "node neither live nor free");
        }
    }

    /// Checks the subtree of `node`, whose keys must lie in `bounds` (lower inclusive, upper
    /// exclusive); returns its number of keys.
    fn check_node(
        &self,
        node: u32,
        level: u32,
        bounds: (Option<QueueKey>, Option<QueueKey>),
        is_root: bool,
        live_leaves: &mut Vec<u32>,
        live_inners: &mut Vec<u32>,
    ) -> u64 {
        let (lower, upper) = bounds;
        if level == 0 {
            let leaf = &self.leaves[node as usize];
            assert!(leaf.lo <= leaf.hi && leaf.hi as usize <= LEAF_CAP);
            assert!(is_root || leaf.len() >= LEAF_MIN, "leaf underfull");
            for key in leaf.iter() {
                assert!(lower.is_none_or(|lower| lower <= key));
                assert!(upper.is_none_or(|upper| key < upper));
            }
            live_leaves.push(node);
            return leaf.len() as u64;
        }
        live_inners.push(node);
        let inner = &self.inners[node as usize];
        assert!(inner.len <= INNER_CAP);
        assert!(
            inner.len >= if is_root { 2 } else { INNER_MIN },
            "inner underfull"
        );
        let mut total = 0;
        for i in 0..inner.len {
            let low = if i == 0 {
                lower
            } else {
                Some(inner.keys.get(i))
            };
            let high = if i + 1 == inner.len {
                upper
            } else {
                Some(inner.keys.get(i + 1))
            };
            let count = self.check_node(
                inner.children[i],
                level - 1,
                (low, high),
                false,
                live_leaves,
                live_inners,
            );
            assert!(count > 0);
            assert_eq!(count, inner.counts[i], "stale subtree count");
            total += count;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;
    use rand::{Rng, RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn key(join_time: u64, ticket: u64, node: u64) -> QueueKey {
        QueueKey {
            join_time,
            ticket: TicketId(ticket),
            node: NodeId(node),
        }
    }

    /// The obviously correct queue the real one is compared with.
    #[derive(Default)]
    struct Model {
        keys: BTreeSet<QueueKey>,
        by_id: BTreeMap<TicketId, QueueKey>,
    }

    impl Model {
        fn insert(&mut self, key: QueueKey) -> bool {
            if self.by_id.contains_key(&key.ticket) {
                return false;
            }
            self.by_id.insert(key.ticket, key);
            self.keys.insert(key);
            true
        }

        fn pop_min(&mut self) -> Option<QueueKey> {
            let key = self.keys.pop_first()?;
            self.by_id.remove(&key.ticket);
            Some(key)
        }

        fn remove(&mut self, ticket: TicketId) -> Option<QueueKey> {
            let key = self.by_id.remove(&ticket)?;
            self.keys.remove(&key);
            Some(key)
        }

        fn rank(&self, key: &QueueKey) -> usize {
            self.keys.range(..*key).count()
        }
    }

    fn assert_same(queue: &LocalQueue, model: &Model) {
        queue.tree.check();
        assert_eq!(queue.len(), model.keys.len());
        assert_eq!(queue.by_id.len(), model.keys.len());
        assert!(queue.iter().eq(model.keys.iter().copied()));
    }

    #[test]
    fn empty_queue_answers_nothing() {
        let mut queue = LocalQueue::new();
        assert!(queue.is_empty());
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.peek_min(), None);
        assert_eq!(queue.pop_min(), None);
        assert_eq!(queue.remove(TicketId(1)), None);
        assert_eq!(queue.get(TicketId(1)), None);
        assert!(!queue.contains(TicketId(1)));
        assert_eq!(queue.rank(&key(5, 5, 5)), 0);
        assert_eq!(queue.iter().count(), 0);
        queue.tree.check();
        assert_eq!(format!("{queue:?}"), "[]");
        assert_eq!(LocalQueue::default().len(), 0);
    }

    #[test]
    fn duplicate_ticket_is_refused_and_changes_nothing() {
        let mut queue = LocalQueue::new();
        assert!(queue.insert(key(10, 7, 1)));
        assert!(!queue.insert(key(10, 7, 1)));
        assert!(!queue.insert(key(3, 7, 2)));
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get(TicketId(7)), Some(key(10, 7, 1)));
        assert_eq!(queue.peek_min(), Some(key(10, 7, 1)));
        assert_eq!(queue.rank(&key(10, 7, 1)), 0);
        queue.tree.check();
    }

    #[test]
    fn remove_missing_ticket_changes_nothing() {
        let mut queue = LocalQueue::new();
        queue.insert(key(1, 1, 0));
        queue.insert(key(2, 2, 0));
        assert_eq!(queue.remove(TicketId(3)), None);
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.remove(TicketId(1)), Some(key(1, 1, 0)));
        assert_eq!(queue.remove(TicketId(1)), None);
        assert!(!queue.contains(TicketId(1)));
        assert!(queue.contains(TicketId(2)));
        assert_eq!(queue.iter().collect::<Vec<_>>(), vec![key(2, 2, 0)]);
    }

    #[test]
    fn rank_counts_strictly_smaller_keys_present_or_not() {
        let mut queue = LocalQueue::new();
        for i in 0..1_000 {
            queue.insert(key(10 * i, i, 0));
        }
        assert_eq!(queue.rank(&QueueKey::first_at(0)), 0);
        assert_eq!(queue.rank(&key(0, 0, 0)), 0);
        assert_eq!(queue.rank(&key(0, 0, 1)), 1);
        assert_eq!(queue.rank(&key(10, 1, 0)), 1);
        assert_eq!(queue.rank(&QueueKey::first_at(15)), 2);
        assert_eq!(queue.rank(&key(9_990, 999, 0)), 999);
        assert_eq!(queue.rank(&key(9_990, 999, 1)), 1_000);
        assert_eq!(
            queue.rank(&key(u64::MAX, TicketId(u64::MAX).0, u64::MAX)),
            1_000
        );
        for i in 0..1_000 {
            assert_eq!(queue.rank(&key(10 * i, i, 0)), i as usize);
        }
    }

    #[test]
    fn pops_in_key_order_and_debug_lists_keys() {
        let mut queue = LocalQueue::new();
        for ticket in [5, 3, 9, 1] {
            queue.insert(key(7, ticket, 0));
        }
        queue.insert(key(6, 100, 0));
        let clone = queue.clone();
        assert!(format!("{queue:?}").starts_with("[QueueKey { join_time: 6"));
        let popped: Vec<u64> = std::iter::from_fn(|| queue.pop_min())
            .map(|k| k.ticket.0)
            .collect();
        assert_eq!(popped, vec![100, 1, 3, 5, 9]);
        assert!(queue.is_empty());
        assert_eq!(clone.len(), 5);
    }

    #[test]
    fn key_tree_remove_of_absent_key_changes_nothing() {
        let mut tree = KeyTree::new();
        assert!(!tree.remove(key(1, 1, 1)));
        for i in 0..5_000 {
            tree.insert(key(i, i, 0));
        }
        assert!(!tree.remove(key(10, 10, 1)));
        assert!(!tree.remove(key(5_000, 0, 0)));
        tree.check();
        assert_eq!(tree.len(), 5_000);
        assert!(tree.remove(key(10, 10, 0)));
        assert_eq!(tree.rank(&key(11, 11, 0)), 10);
        tree.check();
    }

    /// Many keys through every kind of split, borrow and merge, in both directions, checked
    /// against the model with the structure verified at each phase.
    #[test]
    fn large_workload_matches_model() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut queue = LocalQueue::new();
        let mut model = Model::default();
        let random_key = |rng: &mut ChaCha8Rng, max_join: u64| {
            key(
                rng.random_range(0..max_join),
                rng.next_u64(),
                rng.random_range(0..3),
            )
        };

        // Joins in time order, with a re-queued visitor in the middle now and then.
        for join_time in 0..200_000u64 {
            let key = if join_time % 10 == 0 {
                random_key(&mut rng, join_time + 1)
            } else {
                key(join_time, rng.next_u64(), 0)
            };
            assert_eq!(queue.insert(key), model.insert(key));
        }
        assert_same(&queue, &model);
        assert!(queue.tree.height >= 2);
        // Appends leave full leaves behind: far fewer than at half fill.
        assert!(queue.tree.leaves.len() < 200_000 / (LEAF_CAP / 2) * 3 / 4);

        for (rank, key) in model.keys.iter().enumerate().step_by(97) {
            assert_eq!(queue.rank(key), rank);
            assert_eq!(queue.get(key.ticket), Some(*key));
        }
        for _ in 0..500 {
            let probe = random_key(&mut rng, 210_000);
            assert_eq!(queue.rank(&probe), model.rank(&probe));
        }

        // Steady churn: once every key has been replaced, the arenas must stop growing.
        let mut next_join = 200_000;
        let mut churn = |queue: &mut LocalQueue, model: &mut Model, steps: u64| {
            for _ in 0..steps {
                assert_eq!(queue.pop_min(), model.pop_min());
                let key = key(next_join, rng.next_u64(), 0);
                next_join += 1;
                assert_eq!(queue.insert(key), model.insert(key));
            }
        };
        churn(&mut queue, &mut model, 200_000);
        let (leaves, inners) = (queue.tree.leaves.len(), queue.tree.inners.len());
        churn(&mut queue, &mut model, 50_000);
        assert_same(&queue, &model);
        assert!(queue.tree.leaves.len() <= leaves + 1);
        assert!(queue.tree.inners.len() <= inners + 1);

        // Random removals thin the tree out until borrows and merges run everywhere.
        while model.keys.len() > 20_000 {
            let probe = random_key(&mut rng, 300_000);
            let target = model
                .keys
                .range(probe..)
                .next()
                .or(model.keys.first())
                .copied()
                .unwrap();
            assert_eq!(queue.remove(target.ticket), model.remove(target.ticket));
        }
        assert_same(&queue, &model);

        // Refill in the middle, in descending order (the worst case for splits).
        for i in 0..50_000u64 {
            let key = key(250_000 - i, rng.next_u64(), 1);
            assert_eq!(queue.insert(key), model.insert(key));
        }
        assert_same(&queue, &model);

        while let Some(expected) = model.pop_min() {
            assert_eq!(queue.peek_min(), Some(expected));
            assert_eq!(queue.pop_min(), Some(expected));
        }
        assert_same(&queue, &model);
        assert_eq!(queue.tree.height, 0);
        assert_eq!(queue.pop_min(), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(QueueKey),
        /// Appends `count` keys with rising join times, growing the tree fast.
        Run {
            join_time: u64,
            ticket: u64,
            count: u64,
        },
        Pop,
        PopMany(u16),
        Remove(u64),
        Rank(QueueKey),
        Get(u64),
        Peek,
    }

    fn small_key() -> impl Strategy<Value = QueueKey> {
        (0..40u64, 0..600u64, 0..3u64).prop_map(|(j, t, n)| key(j, t, n))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => small_key().prop_map(Op::Insert),
            1 => (0..45u64, 0..5_000u64, 1..300u64)
                .prop_map(|(join_time, ticket, count)| Op::Run { join_time, ticket, count }),
            2 => Just(Op::Pop),
            1 => (1..200u16).prop_map(Op::PopMany),
            3 => (0..5_000u64).prop_map(Op::Remove),
            3 => (0..42u64, 0..5_001u64, 0..4u64).prop_map(|(j, t, n)| Op::Rank(key(j, t, n))),
            1 => (0..5_000u64).prop_map(Op::Get),
            1 => Just(Op::Peek),
        ]
    }

    /// What a waiting room does to its queue, for the noted ranks (`SeenRank`).
    #[derive(Debug, Clone)]
    enum Step {
        /// A visitor joins now; the clock moves on by 0 or 1 ms first.
        Join {
            later: bool,
            ticket: u64,
        },
        /// A visitor re-queued under an older join time.
        Requeue {
            age: u64,
            ticket: u64,
        },
        Pop,
        /// The `i`-th queued key (modulo their number) leaves.
        Remove(usize),
        /// The rank of the `i`-th queued key is counted and noted.
        Note(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            8 => (any::<bool>(), any::<u64>()).prop_map(|(later, ticket)| Step::Join { later, ticket }),
            1 => (0..20u64, any::<u64>()).prop_map(|(age, ticket)| Step::Requeue { age, ticket }),
            3 => Just(Step::Pop),
            1 => any::<usize>().prop_map(Step::Remove),
            4 => any::<usize>().prop_map(Step::Note),
        ]
    }

    /// Applies `steps` to a tree and to a sorted vector, checking after each that every note
    /// still held answers the true rank (and takes the fresh note, with `refresh`, as the engine
    /// does); returns how many answers came from notes, and after the last step how many notes
    /// answered and how many were held (`SeenRank::NONE` aside).
    fn replay_noted(steps: &[Step], refresh: bool) -> (usize, usize, usize) {
        let (mut tree, mut model) = (KeyTree::new(), Vec::<QueueKey>::new());
        let mut notes: Vec<(QueueKey, SeenRank)> = Vec::new();
        let (mut clock, mut answered, mut last) = (100, 0, 0);
        let mut mark = None;
        let rank = |model: &[QueueKey], k: &QueueKey| model.partition_point(|m| m < k);
        for step in steps {
            let joined = match *step {
                Step::Join { later, ticket } => {
                    clock += u64::from(later);
                    Some(key(clock, ticket, 1))
                }
                Step::Requeue { age, ticket } => Some(key(clock.saturating_sub(age), ticket, 1)),
                Step::Pop => {
                    let first = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(tree.pop_first(), first);
                    None
                }
                Step::Remove(i) if !model.is_empty() => {
                    let k = model.remove(i % model.len());
                    assert!(tree.remove(k));
                    None
                }
                Step::Note(i) if !model.is_empty() => {
                    let k = model[i % model.len()];
                    let (r, seen) = tree.rank_noted(&k);
                    assert_eq!(r, rank(&model, &k));
                    notes.push((k, seen));
                    // A time's first key, queued or not, marked (as the cluster's cutoffs are).
                    let at = QueueKey::first_at(k.join_time - i as u64 % 3);
                    tree.mark(at);
                    mark = Some(at);
                    None
                }
                Step::Remove(_) | Step::Note(_) => None,
            };
            if let Some(k) = joined
                && let Err(at) = model.binary_search(&k)
            {
                model.insert(at, k);
                tree.insert(k);
            }
            if let Some(m) = mark {
                assert_eq!(tree.marked(&m), Some(rank(&model, &m)), "stale mark {m:?}");
            }
            // A key that left takes its note along (a record that changes drops it).
            notes.retain(|(k, _)| model.binary_search(k).is_ok());
            last = 0;
            for (k, seen) in &mut notes {
                if let Some((r, fresh)) = tree.rank_again(k, *seen) {
                    assert_eq!(r, rank(&model, k), "stale note for {k:?}");
                    answered += 1;
                    last += 1;
                    if refresh {
                        *seen = fresh;
                    }
                }
            }
        }
        let held = notes.iter().filter(|(_, s)| *s != SeenRank::NONE).count();
        (answered, last, held)
    }

    #[test]
    fn noted_ranks_follow_joins_and_admissions_without_a_search() {
        // Joins behind everyone (some in the same millisecond) and pops from the front: every
        // note of a key older than the newest holds throughout.
        let mut steps = Vec::new();
        for i in 0..1_000u64 {
            steps.push(Step::Join {
                later: i % 3 == 0,
                ticket: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            });
            steps.push(Step::Note(i as usize * 7));
            if i % 2 == 0 {
                steps.push(Step::Pop);
            }
        }
        let (answered, ..) = replay_noted(&steps, false);
        assert!(answered > 50_000, "{answered}");
    }

    #[test]
    fn noted_ranks_survive_a_burst_of_requeues_the_log_holds() {
        // Visitors queue and are noted; then a crashed node's visitors are re-queued here
        // (older join times) and some leave from the middle: fewer changes than the log holds,
        // so every note still answers, corrected.
        let mut steps: Vec<Step> = (0..400)
            .flat_map(|i: u64| {
                [
                    Step::Join {
                        later: true,
                        ticket: i,
                    },
                    Step::Note(i as usize / 2),
                ]
            })
            .collect();
        steps.extend((0..40).map(|i| Step::Requeue {
            age: 150 + 3 * i,
            ticket: 1_000 + i,
        }));
        steps.extend((0..20).map(|i| Step::Remove(i * 17)));
        steps.push(Step::Note(0));
        let (_, last, held) = replay_noted(&steps, false);
        // Every note of a key still queued and older than the newest answers after 60 changes.
        assert!(held > 350, "{held}");
        assert_eq!(last, held);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn noted_ranks_never_go_stale(steps in prop::collection::vec(step(), 1..600)) {
            replay_noted(&steps, false);
            replay_noted(&steps, true);
        }

        #[test]
        fn matches_btreeset_model(ops in prop::collection::vec(op(), 1..400)) {
            let mut queue = LocalQueue::new();
            let mut model = Model::default();
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(key) => prop_assert_eq!(queue.insert(key), model.insert(key)),
                    Op::Run { join_time, ticket, count } => {
                        for i in 0..count {
                            let key = key(join_time + i / 4, ticket + i * 13, i % 2);
                            prop_assert_eq!(queue.insert(key), model.insert(key));
                        }
                    }
                    Op::Pop => prop_assert_eq!(queue.pop_min(), model.pop_min()),
                    Op::PopMany(count) => {
                        for _ in 0..count {
                            prop_assert_eq!(queue.pop_min(), model.pop_min());
                        }
                    }
                    Op::Remove(ticket) => {
                        let ticket = TicketId(ticket);
                        prop_assert_eq!(queue.remove(ticket), model.remove(ticket));
                    }
                    Op::Rank(key) => prop_assert_eq!(queue.rank(&key), model.rank(&key)),
                    Op::Get(ticket) => {
                        let ticket = TicketId(ticket);
                        prop_assert_eq!(queue.get(ticket), model.by_id.get(&ticket).copied());
                        prop_assert_eq!(queue.contains(ticket), model.by_id.contains_key(&ticket));
                    }
                    Op::Peek => prop_assert_eq!(queue.peek_min(), model.keys.first().copied()),
                }
                prop_assert_eq!(queue.len(), model.keys.len());
                prop_assert_eq!(queue.is_empty(), model.keys.is_empty());
                if step % 8 == 0 {
                    assert_same(&queue, &model);
                }
            }
            assert_same(&queue, &model);
            for key in model.keys.iter().take(50) {
                prop_assert_eq!(queue.rank(key), model.rank(key));
            }
        }
    }
}

//! The local priority queue of one node.

use std::collections::{BTreeSet, HashMap};

use crate::types::{QueueKey, TicketId};

/// Queued visitors of one node, ordered by [`QueueKey`], indexed by ticket id.
#[derive(Debug, Default, Clone)]
pub struct LocalQueue {
    keys: BTreeSet<QueueKey>,
    by_id: HashMap<TicketId, QueueKey>,
}

impl LocalQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of queued visitors.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether nobody is queued.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Queues `key`. Returns false, changing nothing, when its ticket id is already queued.
    pub fn insert(&mut self, key: QueueKey) -> bool {
        if self.by_id.contains_key(&key.ticket) {
            return false;
        }
        self.by_id.insert(key.ticket, key);
        self.keys.insert(key);
        true
    }

    /// The smallest key, if any.
    pub fn peek_min(&self) -> Option<QueueKey> {
        self.keys.first().copied()
    }

    /// Removes and returns the smallest key.
    pub fn pop_min(&mut self) -> Option<QueueKey> {
        let key = self.keys.pop_first()?;
        self.by_id.remove(&key.ticket);
        Some(key)
    }

    /// Removes the entry of `ticket`, returning its key.
    pub fn remove(&mut self, ticket: TicketId) -> Option<QueueKey> {
        let key = self.by_id.remove(&ticket)?;
        self.keys.remove(&key);
        Some(key)
    }

    /// The key of `ticket`, if queued.
    pub fn get(&self, ticket: TicketId) -> Option<QueueKey> {
        self.by_id.get(&ticket).copied()
    }

    /// Whether `ticket` is queued.
    pub fn contains(&self, ticket: TicketId) -> bool {
        self.by_id.contains_key(&ticket)
    }

    /// How many queued keys are strictly smaller than `key`.
    pub fn rank(&self, key: &QueueKey) -> usize {
        self.keys.range(..*key).count()
    }

    /// All queued keys, smallest first.
    pub fn iter(&self) -> impl Iterator<Item = QueueKey> + '_ {
        self.keys.iter().copied()
    }
}

//! Per-destination queues, each drained by one sender task. Protocol messages and forwarded
//! visitor requests both travel this way: whatever is queued for one node leaves together in
//! the next request, and while a request is in flight new items pile up for the one after.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// A sender task with nothing to send for this long exits and frees its queue.
const IDLE_EXIT: Duration = Duration::from_secs(30);

/// One destination's queue.
#[derive(Debug)]
pub(super) struct Outbox<T> {
    items: Mutex<VecDeque<T>>,
    ready: Notify,
}

impl<T> Outbox<T> {
    fn items(&self) -> MutexGuard<'_, VecDeque<T>> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` and wakes the sender. With `limit` items queued already the oldest is
    /// dropped first; returns whether one was.
    pub(super) fn push(&self, item: T, limit: usize) -> bool {
        let mut q = self.items();
        let dropped = q.len() >= limit && q.pop_front().is_some();
        q.push_back(item);
        drop(q);
        self.ready.notify_one();
        dropped
    }

    /// The queued items, oldest first (for tests).
    #[cfg(test)]
    pub(super) fn queued(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.items().iter().cloned().collect()
    }
}

/// The queues by destination address.
#[derive(Debug)]
pub(super) struct Outboxes<T>(Mutex<HashMap<String, Arc<Outbox<T>>>>);

/// The map of queues, locked.
pub(super) type Locked<'a, T> = MutexGuard<'a, HashMap<String, Arc<Outbox<T>>>>;

impl<T> Default for Outboxes<T> {
    fn default() -> Self {
        Outboxes(Mutex::new(HashMap::new()))
    }
}

impl<T> Outboxes<T> {
    /// Locks the map. Items are pushed while it is held, and an idle sender takes it before it
    /// leaves: so nothing pushed is ever left in a queue without a sender.
    pub(super) fn lock(&self) -> Locked<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue of `addr`; a new one is handed to `start`, which spawns its sender.
    pub(super) fn get_or_start(
        map: &mut Locked<'_, T>,
        addr: &str,
        start: impl FnOnce(String, Arc<Outbox<T>>),
    ) -> Arc<Outbox<T>> {
        if let Some(q) = map.get(addr) {
            return q.clone();
        }
        let q = Arc::new(Outbox {
            items: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
        });
        map.insert(addr.to_owned(), q.clone());
        start(addr.to_owned(), q.clone());
        q
    }

    /// For the sender of `addr`'s queue `q`: the next batch, at most `max` items, oldest
    /// first; waits for one. `None` once nothing came for [`IDLE_EXIT`]: the queue has then
    /// been removed and the sender should exit.
    pub(super) async fn next_batch(
        &self,
        addr: &str,
        q: &Arc<Outbox<T>>,
        max: usize,
    ) -> Option<Vec<T>> {
        loop {
            let batch: Vec<T> = {
                let mut items = q.items();
                let n = items.len().min(max);
                items.drain(..n).collect()
            };
            if !batch.is_empty() {
                return Some(batch);
            }
            tokio::select! {
                _ = q.ready.notified() => {}
                _ = tokio::time::sleep(IDLE_EXIT) => {
                    // Leave only if nothing arrived meanwhile (checked under the map lock).
                    let mut map = self.lock();
                    if q.items().is_empty() {
                        if map.get(addr).is_some_and(|x| Arc::ptr_eq(x, q)) {
                            map.remove(addr);
                        }
                        return None;
                    }
                }
            }
        }
    }
}

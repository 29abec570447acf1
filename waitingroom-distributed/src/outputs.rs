//! What a node hands its driver: [`Transmit`]s (messages to deliver) and [`Event`]s (things
//! that happened). Kept apart from the node so that the modules producing them (the reliable
//! channel, the protocol parts) need not import the node.

use serde::{Deserialize, Serialize};
use waitingroom_core::{QueueKey, Time};

use crate::membership::Contact;
use crate::messages::{Envelope, Summary};

/// A message for the driver to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The transport address of the receiver.
    pub to_addr: std::sync::Arc<str>,
    /// The message.
    pub envelope: Envelope,
}

/// Something that happened, for the driver's metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A visitor queued here was let out.
    Admitted {
        /// Their queue key.
        key: QueueKey,
        /// When this node marked them admitted.
        at: Time,
        /// When the decision was made (the root's clock): visitors decided together are let out
        /// in key order, so the admission sequence is ordered by `(decided_at, key)`.
        decided_at: Time,
    },
    /// This node is now a member of a cluster.
    Joined {
        /// Membership version.
        version: u64,
    },
    /// The cluster declared this node dead (or it lost a partition); it rejoins, keeping its
    /// queued visitors.
    Rejoining,
    /// A member was added.
    MemberAdded(Contact),
    /// A member was removed (failed, left, or restarted with a new incarnation).
    MemberRemoved(Contact),
    /// SWIM declared a member dead.
    MemberFailed(Contact),
    /// This node, as root, completed a count.
    CountCompleted(Summary),
    /// No count was seen for too long: the tree was rebuilt.
    TreeRepaired,
}

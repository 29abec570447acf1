//! What a node hands its driver, and how the protocol parts hand it to the node.
//!
//! The driver drains [`Transmit`]s (messages to deliver) and [`Event`]s (things that happened).
//! The parts (QPID, TAG, SWIM, membership changes) never send themselves: each call puts what
//! it wants said into an [`Outbox`], in order, and the node then numbers reliable messages on
//! their links, addresses them and queues them for the driver in that same order. Kept apart
//! from the node so that the modules producing outputs need not import it.

use serde::{Deserialize, Serialize};
use waitingroom_core::round_records::RoundRecord;
use waitingroom_core::{NodeId, QueueKey, Time};

use crate::lease::Pause;
use crate::live::LiveSettings;
use crate::membership::Contact;
use crate::messages::{Body, ChannelMsg, Envelope, Summary};

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
    CountCompleted(Box<Summary>),
    /// No count was seen for too long: the tree was rebuilt.
    TreeRepaired,
    /// This node stopped letting visitors out, and why
    /// (waitingroom-distributed/README.md#admission-leases).
    AdmissionPaused(Pause),
    /// This node lets visitors out again.
    AdmissionResumed,
    /// New live settings are in force at this node (an operator's change, made here or
    /// carried by a round).
    SettingsChanged(LiveSettings),
    /// An operator's change made here no longer fitted when it was made again on top of a
    /// concurrent change that won over it (an event that now overlaps another), and is dropped
    /// (waitingroom-distributed/README.md#live-settings).
    SettingsChangeDropped {
        /// The field at fault.
        field: String,
        /// Why the change no longer fits.
        reason: String,
    },
    /// A round that let visitors out, as its record's claims: the driver signs them (every
    /// node gets the same bytes), keeps the record and tells the node its link
    /// ([`crate::Node::record_linked`]), which the next record names as `prev`.
    RoundRecorded(Box<RoundRecord>),
}

/// One thing a part wants the node to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Output {
    /// A message on the reliable channel to member `to`; dropped if `to` is not a member when
    /// the node sends it.
    ToMember(NodeId, ChannelMsg),
    /// An unreliable message (probes, trees, join requests).
    Raw(Contact, Body),
    /// An event for the driver.
    Event(Event),
}

/// What a part said during one call, in order.
#[derive(Debug, Default)]
#[must_use = "the node must send what the part put in its outbox"]
pub(crate) struct Outbox(Vec<Output>);

impl Outbox {
    /// Sends `msg` reliably to member `to`.
    pub(crate) fn send(&mut self, to: NodeId, msg: ChannelMsg) {
        self.0.push(Output::ToMember(to, msg));
    }

    /// Sends `body` unreliably to `to`.
    pub(crate) fn raw(&mut self, to: Contact, body: Body) {
        self.0.push(Output::Raw(to, body));
    }

    /// Tells the driver `event`.
    pub(crate) fn emit(&mut self, event: Event) {
        self.0.push(Output::Event(event));
    }

    /// Everything put in, in order.
    pub(crate) fn into_outputs(self) -> std::vec::IntoIter<Output> {
        self.0.into_iter()
    }
}

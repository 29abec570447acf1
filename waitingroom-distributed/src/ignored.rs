//! Why a node ignored a peer message, as raft-rs' `step` says `StepPeerNotFound`: a message
//! dropped on the floor leaves a reason a driver can count (the server's
//! `waitingroom_peer_messages_ignored_total{reason}`).

use thiserror::Error;

/// Why [`crate::Node::handle_message`] did not act on a message. Most are the normal wear of a
/// network that loses, repeats and reorders messages while members come and go; a steady rate
/// of one kind is worth a look. A message that was answered without changing anything (an old
/// tree answered with ours, a count request refused while settling) is not ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Error)]
pub enum Ignored {
    /// This node has shut down (it still takes acknowledgements, so its farewell drains).
    #[error("the node has shut down")]
    Stopped,
    /// Addressed to another node, or to another life (incarnation) of this one.
    #[error("addressed to another node or another life of this one")]
    Misaddressed,
    /// On a link from an earlier life of the sender, or an epoch of it that was replaced.
    #[error("on a stale link (an earlier incarnation or epoch of the sender's)")]
    StaleLink,
    /// A copy of a message already delivered, or already held back for delivery.
    #[error("a copy of a message already received")]
    Duplicate,
    /// So far ahead of the link's next message that the hold-back buffer is full.
    #[error("too far ahead on its link: the hold-back buffer is full")]
    HoldBackFull,
    /// An acknowledgement for no link this node sends on (an older epoch, or a forgotten one).
    #[error("an acknowledgement for a stale link")]
    StaleAck,
    /// For a membership version this node has not applied yet: kept, and handled once it has.
    #[error("for a newer membership version: kept until it is applied")]
    FutureVersion,
    /// For a membership version not applied yet, with no room left to keep it.
    #[error("for a newer membership version, and the buffer for those is full")]
    FutureFull,
    /// This node is not a member of a cluster (idle, or still joining).
    #[error("this node is not a member of a cluster")]
    NotInCluster,
    /// The sender is not a member of this node's cluster (it is told so).
    #[error("the sender is not a member of this node's cluster")]
    SenderNotMember,
    /// For a membership version older than the one applied (for a tree: not newer).
    #[error("for an older membership version")]
    StaleVersion,
    /// A membership that neither lists this node nor removes it: another cluster's.
    #[error("a membership without this node")]
    NotIncluded,
    /// A join request from a life of the node that was already replaced or removed.
    #[error("a join request from an earlier life of the node")]
    StaleIncarnation,
    /// A join request that names no node, or this one.
    #[error("a join request naming no node, or this one")]
    Malformed,
    /// The other cluster of a healed partition ranks lower: its nodes will join ours.
    #[error("from a cluster that ranks lower than ours")]
    LowerRank,
    /// A QPID message from a member that is not a tree neighbour.
    #[error("a QPID message from a member that is not a tree neighbour")]
    UnknownNeighbour,
    /// A one-at-a-time deleteMin at a node still settling after a membership change (the next
    /// count lets the visitor out).
    #[error("a deleteMin while the node is settling")]
    NotSettled,
    /// A count reply for no round in progress here (an older round, or a copy).
    #[error("a count reply for a round not in progress")]
    StaleRound,
    /// A probe answer that matches no probe in progress (it came after the next probe began).
    #[error("an answer to no probe in progress")]
    UnknownProbe,
}

impl Ignored {
    /// Every reason, in declaration order.
    pub const ALL: [Ignored; 19] = [
        Ignored::Stopped,
        Ignored::Misaddressed,
        Ignored::StaleLink,
        Ignored::Duplicate,
        Ignored::HoldBackFull,
        Ignored::StaleAck,
        Ignored::FutureVersion,
        Ignored::FutureFull,
        Ignored::NotInCluster,
        Ignored::SenderNotMember,
        Ignored::StaleVersion,
        Ignored::NotIncluded,
        Ignored::StaleIncarnation,
        Ignored::Malformed,
        Ignored::LowerRank,
        Ignored::UnknownNeighbour,
        Ignored::NotSettled,
        Ignored::StaleRound,
        Ignored::UnknownProbe,
    ];

    /// A short label that does not change between versions (metrics, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Ignored::Stopped => "stopped",
            Ignored::Misaddressed => "misaddressed",
            Ignored::StaleLink => "stale_link",
            Ignored::Duplicate => "duplicate",
            Ignored::HoldBackFull => "hold_back_full",
            Ignored::StaleAck => "stale_ack",
            Ignored::FutureVersion => "future_version",
            Ignored::FutureFull => "future_full",
            Ignored::NotInCluster => "not_in_cluster",
            Ignored::SenderNotMember => "sender_not_member",
            Ignored::StaleVersion => "stale_version",
            Ignored::NotIncluded => "not_included",
            Ignored::StaleIncarnation => "stale_incarnation",
            Ignored::Malformed => "malformed",
            Ignored::LowerRank => "lower_rank",
            Ignored::UnknownNeighbour => "unknown_neighbour",
            Ignored::NotSettled => "not_settled",
            Ignored::StaleRound => "stale_round",
            Ignored::UnknownProbe => "unknown_probe",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_snake_case() {
        let labels: std::collections::BTreeSet<&str> =
            Ignored::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), Ignored::ALL.len());
        for l in labels {
            assert!(l.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{l}");
        }
    }
}

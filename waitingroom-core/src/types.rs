//! The data every part of the waiting room shares: identifiers, the queue key, tickets and passes.
//!
//! Field meanings follow the thesis this design comes from (Distributed Virtual Waiting Room,
//! appendix A.1). All times are milliseconds on the caller's clock (Unix milliseconds in the
//! server, simulated milliseconds in the simulator).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds. The engine never reads a clock: callers pass `now` in.
pub type Time = u64;

/// Identifies one node (one process) of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u64);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An identifier given to a visitor when they join; the pass they get later carries it too.
///
/// Its high 32 bits are random. A room's own ids carry in their low 32 bits the sequence number of
/// the join, scrambled under the high half, by which the room finds the visitor's record without
/// hashing (`visitor_table.rs`); lottery ids are drawn whole ([`crate::lottery::drawn_id`]).
///
/// In JSON it is a 16-digit lowercase hex string: browsers parse JSON numbers as doubles, which
/// cannot hold every `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TicketId(pub u64);

impl fmt::Display for TicketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl Serialize for TicketId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TicketId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(serde::de::Error::custom("ticket id must be 16 hex digits"));
        }
        u64::from_str_radix(&text, 16)
            .map(TicketId)
            .map_err(|_| serde::de::Error::custom("ticket id must be 16 hex digits"))
    }
}

/// The weight of a queued visitor: compared by join time, then ticket id, then node id.
///
/// The join time gives first-in-first-out order; the ticket id (random in its high half)
/// breaks ties between visitors who joined in the same millisecond in a random but consistent
/// way; the node id makes a visitor re-queued on another node a distinct entry (QPID allows no
/// duplicate weights).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QueueKey {
    /// When the visitor first joined the waiting room.
    pub join_time: Time,
    /// The visitor's ticket id.
    pub ticket: TicketId,
    /// The node whose local queue holds this entry.
    pub node: NodeId,
}

impl QueueKey {
    /// The smallest key with this join time: every key that joined at `join_time` or later is
    /// not smaller than it. Useful as a rank probe ("how many joined before `t`").
    pub fn first_at(join_time: Time) -> Self {
        QueueKey {
            join_time,
            ticket: TicketId(0),
            node: NodeId(0),
        }
    }
}

/// What a waiting visitor holds (appendix A.1.1): proof of when they joined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ticket {
    /// The visitor's identifier ([`TicketId`]), kept on the pass.
    pub id: TicketId,
    /// When the visitor joined the queue; their place in line.
    pub join_time: Time,
    /// The node where the ticket was last refreshed (and where the visitor is queued).
    pub node: NodeId,
    /// When this ticket was issued.
    pub issued_at: Time,
    /// When the visitor's client should check in next. Earlier is allowed.
    pub next_refresh: Time,
    /// After this time the ticket is no longer accepted; checking in refreshes it.
    pub expires_at: Time,
    /// The position last shown to the visitor: a later estimate never shows a larger number.
    pub previous_position: Option<u64>,
    /// When the visitor was let out of the queue, once they have been.
    pub eviction_time: Option<Time>,
    /// In a lottery, the number the id was drawn with (`lottery::drawn_id`); None otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<u64>,
    /// The round whose record let the visitor out, once the node that let them out named it:
    /// whatever node later hands out their pass (their node may be gone, and a node that joined
    /// after the round never learns its record) names the same round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
}

impl Ticket {
    /// The queue key this ticket has when queued on `node`.
    pub fn key_on(&self, node: NodeId) -> QueueKey {
        QueueKey {
            join_time: self.join_time,
            ticket: self.id,
            node,
        }
    }
}

/// What an admitted visitor holds (appendix A.1.2): permission to be on the site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pass {
    /// The id of the ticket this pass was made from.
    pub id: TicketId,
    /// The node the pass was last refreshed on.
    pub node: NodeId,
    /// When the original ticket joined the queue.
    pub queue_join_time: Time,
    /// When the pass was first created.
    pub created_at: Time,
    /// When this copy of the pass was issued (creation or last refresh).
    pub issued_at: Time,
    /// After this time the pass is no longer valid unless refreshed before.
    pub expires_at: Time,
    /// When the visitor was let out of the queue.
    pub eviction_time: Time,
    /// The admission round whose record let the holder out (docs/operating.md#fairness-records);
    /// None when they were let straight through, or by a node that knew no record of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
    /// The ticket's lottery draw, kept so that anyone can check the id was drawn
    /// (`lottery::audit_draws`); None outside a lottery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<u64>,
}

impl Pass {
    /// The node of a bypass pass: none (node ids start at 1).
    pub const BYPASS_NODE: NodeId = NodeId(0);

    /// Whether this is a bypass pass: one an operator minted for staff or monitoring, issued by
    /// no node, so no node counts it against the target and none extends it.
    pub fn is_bypass(&self) -> bool {
        self.node == Self::BYPASS_NODE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_key_orders_by_join_time_then_ticket_then_node() {
        let key = |join_time, ticket, node| QueueKey {
            join_time,
            ticket: TicketId(ticket),
            node: NodeId(node),
        };
        let (a, b, c, d) = (key(1, 9, 9), key(2, 0, 0), key(2, 1, 0), key(2, 1, 1));
        assert!(a < b && b < c && c < d);
        assert!(QueueKey::first_at(2) <= b);
        assert!(QueueKey::first_at(2) > a);
    }

    #[test]
    fn ticket_id_is_hex_in_json() {
        let id = TicketId(u64::MAX - 1);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"fffffffffffffffe\"");
        assert_eq!(serde_json::from_str::<TicketId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<TicketId>("\"xyz\"").is_err());
        assert!(serde_json::from_str::<TicketId>("12").is_err());
        assert!(serde_json::from_str::<TicketId>("\"+123456789abcdef\"").is_err());
    }
}

//! What each simulated visitor's client keeps between requests: their latest ticket, and the
//! node a sticky load balancer sends them to. One cache line per visitor.
//!
//! Nearly every event of a large run reads one random visitor's record, and with millions
//! waiting it is never in cache. A `Ticket` as the protocol returns it spans two cache lines
//! (96 bytes, 104 as an `Option`), and the sticky node in an array of its own would be a
//! third. Packed, the record is one line of 64 bytes. Every
//! field is kept exactly; times as 32-bit milliseconds, which `RunConfig::validate` bounds.

use waitingroom_core::{NodeId, Ticket, TicketId, Time};

/// No node chosen yet.
pub(super) const NONE: u32 = u32::MAX;

/// The client holds a ticket.
const HOLDS: u8 = 1;
/// The ticket carries `previous_position`.
const POSITION: u8 = 2;
/// The ticket carries `eviction_time`.
const EVICTED: u8 = 4;
/// The ticket carries `draw`.
const DRAW: u8 = 8;
/// The ticket carries `round`.
const ROUND: u8 = 16;

/// One visitor's client.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
pub(super) struct Client {
    id: u64,
    previous_position: u64,
    draw: u64,
    join_time: u32,
    issued_at: u32,
    next_refresh: u32,
    expires_at: u32,
    eviction_time: u32,
    node: u32,
    round: u32,
    /// The node slot the load balancer sends this visitor to (`NONE` until chosen).
    pub(super) sticky: u32,
    /// Which parts are there: `HOLDS`, `POSITION`, `EVICTED`, `DRAW`, `ROUND`.
    flags: u8,
}

/// A simulated time in 32 bits.
fn narrow(t: Time) -> u32 {
    u32::try_from(t).expect("simulated times fit in 32 bits of milliseconds (RunConfig::validate)")
}

impl Client {
    /// A client that holds no ticket and has no node yet.
    pub(super) const NEW: Client = Client {
        id: 0,
        previous_position: 0,
        draw: 0,
        join_time: 0,
        issued_at: 0,
        next_refresh: 0,
        expires_at: 0,
        eviction_time: 0,
        node: 0,
        round: 0,
        sticky: NONE,
        flags: 0,
    };

    /// Keeps `t` as the visitor's ticket from now on.
    pub(super) fn keep(&mut self, t: &Ticket) {
        let flag = |present: bool, flag: u8| if present { flag } else { 0 };
        *self = Client {
            id: t.id.0,
            previous_position: t.previous_position.unwrap_or(0),
            draw: t.draw.unwrap_or(0),
            join_time: narrow(t.join_time),
            issued_at: narrow(t.issued_at),
            next_refresh: narrow(t.next_refresh),
            expires_at: narrow(t.expires_at),
            eviction_time: narrow(t.eviction_time.unwrap_or(0)),
            node: u32::try_from(t.node.0).expect("simulated node ids fit in 32 bits"),
            round: (t.round.unwrap_or(0).try_into()).expect("simulated rounds fit in 32 bits"),
            sticky: self.sticky,
            flags: HOLDS
                | flag(t.previous_position.is_some(), POSITION)
                | flag(t.eviction_time.is_some(), EVICTED)
                | flag(t.draw.is_some(), DRAW)
                | flag(t.round.is_some(), ROUND),
        };
    }

    /// The visitor gave their ticket up (for a pass).
    pub(super) fn drop_ticket(&mut self) {
        self.flags = 0;
    }

    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The id of the ticket held, if any.
    pub(super) fn ticket_id(&self) -> Option<TicketId> {
        self.has(HOLDS).then_some(TicketId(self.id))
    }

    /// The node that issued the ticket held and when it asked to be checked in with next.
    pub(super) fn asked(&self) -> Option<(NodeId, Time)> {
        self.has(HOLDS)
            .then(|| (NodeId(self.node.into()), self.next_refresh.into()))
    }

    /// The ticket held, as it was kept.
    pub(super) fn ticket(&self) -> Option<Ticket> {
        if !self.has(HOLDS) {
            return None;
        }
        Some(Ticket {
            id: TicketId(self.id),
            join_time: self.join_time.into(),
            node: NodeId(self.node.into()),
            issued_at: self.issued_at.into(),
            next_refresh: self.next_refresh.into(),
            expires_at: self.expires_at.into(),
            previous_position: self.has(POSITION).then_some(self.previous_position),
            eviction_time: self.has(EVICTED).then_some(self.eviction_time.into()),
            draw: self.has(DRAW).then_some(self.draw),
            round: self.has(ROUND).then_some(self.round.into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(i: u64) -> Ticket {
        Ticket {
            id: TicketId(u64::MAX - i),
            join_time: 1_000 + i,
            node: NodeId(7 + i),
            issued_at: 2_000 + i,
            next_refresh: 2_600 + i,
            expires_at: u64::from(u32::MAX) - i,
            previous_position: (i & 1 != 0).then_some(u64::MAX - 3 * i),
            eviction_time: (i & 2 != 0).then_some(1_500 + i),
            draw: (i & 4 != 0).then_some(u64::MAX / 3 + i),
            round: (i & 1 == 0).then_some(u64::from(u32::MAX) - i),
        }
    }

    #[test]
    fn a_kept_ticket_comes_back_exactly_in_one_cache_line() {
        assert_eq!(size_of::<Client>(), 64);
        let mut client = Client::NEW;
        assert_eq!(
            (client.ticket(), client.ticket_id(), client.asked()),
            (None, None, None)
        );
        client.sticky = 5;
        for i in 0..8 {
            let t = ticket(i);
            client.keep(&t);
            assert_eq!(client.ticket().as_ref(), Some(&t));
            assert_eq!(client.ticket_id(), Some(t.id));
            assert_eq!(client.asked(), Some((t.node, t.next_refresh)));
            assert_eq!(client.sticky, 5, "keeping a ticket keeps the node");
        }
        client.drop_ticket();
        assert_eq!((client.ticket(), client.asked()), (None, None));
    }

    #[test]
    #[should_panic(expected = "32 bits")]
    fn a_time_past_32_bits_is_refused_loudly() {
        let mut t = ticket(0);
        t.expires_at = u64::from(u32::MAX) + 1;
        let mut client = Client::NEW;
        client.keep(&t);
    }
}

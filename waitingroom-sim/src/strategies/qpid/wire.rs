//! What the nodes send: the simulated network plus the counts the invariant checks and the
//! report need.

use waitingroom_distributed::{Body, Transmit};

use super::nodes::slot_of_addr;
use crate::network::Network;
use crate::room::Ctx;
use crate::scheduler::Ev;

/// The network and what is on it.
pub(super) struct Wire {
    pub(super) net: Network,
    /// Messages in flight that can change protocol state (everything but SWIM probes).
    pub(super) in_flight: u64,
    /// Messages the nodes handed to the network.
    pub(super) messages: u64,
}

impl Wire {
    pub(super) fn new(net: Network) -> Self {
        Wire {
            net,
            in_flight: 0,
            messages: 0,
        }
    }

    /// Hands a message from the node in slot `from` to the network: it is dropped when its
    /// address names no node or a partition separates the two, else each copy the network
    /// delivers is scheduled.
    pub(super) fn send(&mut self, ctx: &mut Ctx, from: usize, t: Transmit, slots: usize) {
        self.messages += 1;
        let Some(to) = slot_of_addr(&t.to_addr, slots) else {
            self.net.stats.to_dead += 1;
            return;
        };
        if !self.net.connected(from, to) {
            self.net.stats.sent += 1;
            self.net.stats.cut += 1;
            return;
        }
        let counts = u64::from(!is_probe(&t.envelope.body));
        let [first, second] = self.net.delays_between(from, to);
        if let Some(d) = second {
            self.in_flight += counts;
            ctx.sched.at(ctx.now + d, Ev::Deliver(Box::new(t.clone())));
        }
        if let Some(d) = first {
            self.in_flight += counts;
            ctx.sched.at(ctx.now + d, Ev::Deliver(Box::new(t)));
        }
    }

    /// A message left the network (delivered or dropped on arrival).
    pub(super) fn arrived(&mut self, t: &Transmit) {
        if !is_probe(&t.envelope.body) {
            self.in_flight -= 1;
        }
    }
}

/// SWIM probes carry no state the invariants look at; everything else may.
fn is_probe(body: &Body) -> bool {
    matches!(
        body,
        Body::Ping { .. } | Body::PingAck { .. } | Body::PingReq { .. }
    )
}

/// A small number naming a message's kind, for the trace.
pub(super) fn body_code(body: &Body) -> u64 {
    match body {
        Body::Channel { seq, .. } => 1 + (seq << 4),
        Body::ChannelAck { ack, .. } => 2 + (ack << 4),
        Body::Ping { .. } => 3,
        Body::PingAck { .. } => 4,
        Body::PingReq { .. } => 5,
        Body::JoinRequest { .. } => 6,
        Body::NotMember { .. } => 7,
        Body::Tree(..) => 8,
    }
}

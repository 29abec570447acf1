//! Visitors who play the rules, for `scripts/swarm.sh`: each visitor draws a [`Role`] from the
//! fractions of `--banked`, `--refresh-elsewhere`, `--replay-leave`, `--abandon` and
//! `--come-back` (the rest are honest):
//! - banked: let in, it keeps checking in with the admitted ticket for `--bank-ms` (past the
//!   time the room holds an unclaimed admission) and only then leaves;
//! - refresh elsewhere, replay leave: once it has its pass (`adversary.rs`);
//! - abandon: it stops checking in after a few check-ins (not lost: it went away);
//! - come back: it stays away for up to `--away-ms` after a few check-ins, then checks in with
//!   the ticket it had (and joins again, as the page does, if that ticket expired meanwhile).

use anyhow::bail;

use super::args::Adversaries;

/// What a visitor does beyond an honest visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Honest,
    Banked,
    RefreshElsewhere,
    ReplayLeave,
    Abandon,
    ComeBack,
}

/// Check-ins before an abandoner gives up or a come-back visitor goes away: 1 to this many.
const CHECKINS_BEFORE: u32 = 4;

/// The roles' fractions and lengths, checked.
#[derive(Debug, Clone)]
pub(super) struct Mix {
    fractions: [(f64, Role); 5],
    pub(super) bank_ms: u64,
    pub(super) away_ms: u64,
}

impl Mix {
    /// The mix `--banked` and the others ask for.
    pub(super) fn new(a: &Adversaries) -> anyhow::Result<Self> {
        let fractions = [
            (a.banked, Role::Banked),
            (a.refresh_elsewhere, Role::RefreshElsewhere),
            (a.replay_leave, Role::ReplayLeave),
            (a.abandon, Role::Abandon),
            (a.come_back, Role::ComeBack),
        ];
        if fractions.iter().any(|(f, _)| !(0.0..=1.0).contains(f))
            || fractions.iter().map(|(f, _)| f).sum::<f64>() > 1.0
        {
            bail!(
                "the fractions of adversarial visitors are each within 0..1 and add up to at most 1"
            );
        }
        if a.refresh_elsewhere > 0.0 && a.node_url.is_empty() {
            bail!("--refresh-elsewhere needs the nodes' own addresses (--node-url)");
        }
        Ok(Mix {
            fractions,
            bank_ms: a.bank_ms,
            away_ms: a.away_ms,
        })
    }

    /// A role for one visitor, at random by the fractions.
    pub(super) fn draw(&self) -> Role {
        let u: f64 = rand::random();
        let mut upto = 0.0;
        for (f, role) in self.fractions {
            upto += f;
            if u < upto {
                return role;
            }
        }
        Role::Honest
    }

    /// After how many check-ins an abandoner gives up or a come-back visitor goes away.
    pub(super) fn checkins_before() -> u32 {
        1 + rand::random::<u32>() % CHECKINS_BEFORE
    }
}

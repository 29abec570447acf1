//! Provable lotteries (docs/operating.md#random-queueing).
//!
//! A lottery orders the visitors who share one join time by their ticket ids (the queue's
//! second key, [`crate::QueueKey`]). To make that order checkable, a lottery's ids are not drawn
//! freely: each is [`drawn_id`] of the lottery's seed and a number the node draws for the
//! visitor (`draw`, carried in the ticket and the pass). The seed is drawn when the lottery is
//! set up, before anyone joins it; its SHA-256 (the commitment) is published at once in a
//! signed [`LotteryRecord`] of its own type ([`LOTTERY_TYP`]: never a ticket, a pass or a round
//! record), and the seed itself in the same record from the reveal on (an event's start; for
//! the room's random queueing, when it is switched off).
//!
//! What an outsider can then check ([`audit_draws`]): that the revealed seed is the committed
//! one, and that every pass's id is the hash of that seed and its draw — so no id was picked by
//! hand, and no seed was picked after the fact to suit someone; together with the round records
//! ([`crate::round_records`]), that visitors were let out in the order of those ids. What it
//! cannot check: the cluster's nodes know the seed while the lottery runs (it travels with the
//! live settings), so a node that wanted to cheat could try draws until one gave a small id;
//! the cluster is trusted with its own signing key in the same way.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::keys::{ClusterKey, VerifyingKeySet};
use crate::round_records::{RecordError, sign_typed, verify_typed};
use crate::types::{TicketId, Time};

/// The JWS `typ` of a lottery record.
pub const LOTTERY_TYP: &str = "wr-lottery+jwt";

/// A lottery's seed: 32 random bytes, drawn by the node the lottery was set up at.
pub type LotterySeed = [u8; 32];

/// Separates this hash from any other use of SHA-256 over the same bytes.
const DRAW_DOMAIN: &[u8] = b"waitingroom lottery draw v1";

/// The ticket id of the visitor given `draw` in the lottery of `seed`: the first 8 bytes
/// (big-endian) of SHA-256(domain ‖ seed ‖ draw as 8 big-endian bytes).
pub fn drawn_id(seed: &LotterySeed, draw: u64) -> TicketId {
    let digest = Sha256::new()
        .chain_update(DRAW_DOMAIN)
        .chain_update(seed)
        .chain_update(draw.to_be_bytes())
        .finalize();
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    TicketId(u64::from_be_bytes(first))
}

/// The commitment to `seed`: its SHA-256, base64url without padding.
pub fn commitment(seed: &LotterySeed) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(seed))
}

/// The claims of a lottery record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LotteryRecord {
    /// Which lottery: `random` for the room's random queueing, else the event's name.
    pub name: String,
    /// [`commitment`] of the seed.
    pub commit: String,
    /// When the seed is revealed (reference clock, Unix ms); None: when the room's random
    /// queueing is switched off.
    pub reveal_at_ms: Option<Time>,
    /// The seed, base64url without padding, from the reveal on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
}

impl LotteryRecord {
    /// The record of the lottery `name` drawn from `seed`, with the seed in it if `revealed`.
    pub fn new(name: &str, seed: &LotterySeed, reveal_at_ms: Option<Time>, revealed: bool) -> Self {
        LotteryRecord {
            name: name.to_owned(),
            commit: commitment(seed),
            reveal_at_ms,
            seed: revealed.then(|| URL_SAFE_NO_PAD.encode(seed)),
        }
    }

    /// The revealed seed, if the record holds one of the right length.
    pub fn revealed_seed(&self) -> Option<LotterySeed> {
        let bytes = URL_SAFE_NO_PAD.decode(self.seed.as_deref()?).ok()?;
        bytes.try_into().ok()
    }
}

/// Signs `record` with `key` (EdDSA, `typ` [`LOTTERY_TYP`]); deterministic, so every node
/// publishes the same string for the same lottery.
pub fn sign_lottery(key: &ClusterKey, record: &LotteryRecord) -> String {
    sign_typed(key, LOTTERY_TYP, record)
}

/// Checks a lottery record's signature and type, and returns its claims.
pub fn verify_lottery(keys: &VerifyingKeySet, jws: &str) -> Result<LotteryRecord, RecordError> {
    verify_typed(keys, LOTTERY_TYP, jws)
}

/// A pass's id and the draw it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrawnPass {
    /// The pass's (ticket) id.
    pub id: TicketId,
    /// The draw it names.
    pub draw: u64,
}

/// Something [`audit_draws`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LotteryFinding {
    /// Record `index` (in the list given) is not a valid lottery record of this cluster.
    BadRecord {
        /// Position in the list.
        index: usize,
        /// Why.
        error: String,
    },
    /// The lottery's revealed seed is not the one it committed to.
    SeedMismatch {
        /// The lottery.
        name: String,
    },
    /// A pass's id is no lottery's seed and draw hashed: picked, not drawn.
    NotDrawn {
        /// The pass.
        pass: DrawnPass,
    },
    /// The pass's lottery may not be revealed yet: its draw cannot be checked now.
    Unrevealed {
        /// The pass.
        pass: DrawnPass,
    },
}

impl LotteryFinding {
    /// Whether this breaks the lottery's promise.
    pub fn is_violation(&self) -> bool {
        !matches!(self, LotteryFinding::Unrevealed { .. })
    }
}

/// The outcome of [`audit_draws`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LotteryAudit {
    /// Valid lottery records.
    pub lotteries: usize,
    /// Of those, revealed with the seed they committed to.
    pub revealed: usize,
    /// Passes whose id was recomputed from a revealed seed and their draw.
    pub draws_verified: usize,
    /// Everything found.
    pub findings: Vec<LotteryFinding>,
}

/// Checks lottery `records` against `keys` (signature, type, revealed seed against its
/// commitment), then that each pass's id is [`drawn_id`] of a revealed seed and its draw.
pub fn audit_draws(
    records: &[String],
    keys: &VerifyingKeySet,
    passes: &[DrawnPass],
) -> LotteryAudit {
    let mut report = LotteryAudit::default();
    let mut seeds = Vec::new();
    let mut unrevealed = false;
    for (index, jws) in records.iter().enumerate() {
        let record = match verify_lottery(keys, jws) {
            Ok(r) => r,
            Err(e) => {
                let error = e.to_string();
                report
                    .findings
                    .push(LotteryFinding::BadRecord { index, error });
                continue;
            }
        };
        report.lotteries += 1;
        match record.revealed_seed() {
            Some(seed) if commitment(&seed) == record.commit => seeds.push(seed),
            Some(_) => report
                .findings
                .push(LotteryFinding::SeedMismatch { name: record.name }),
            None => unrevealed = true,
        }
    }
    report.revealed = seeds.len();
    for &pass in passes {
        if seeds.iter().any(|s| drawn_id(s, pass.draw) == pass.id) {
            report.draws_verified += 1;
        } else if unrevealed {
            report.findings.push(LotteryFinding::Unrevealed { pass });
        } else {
            report.findings.push(LotteryFinding::NotDrawn { pass });
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ClusterKey {
        ClusterKey::from_seed([7; 32])
    }

    fn keys() -> VerifyingKeySet {
        key().verifying_keys()
    }

    #[test]
    fn a_draw_is_the_seed_and_number_hashed() {
        let seed = [1; 32];
        assert_eq!(drawn_id(&seed, 5), drawn_id(&seed, 5));
        assert_ne!(drawn_id(&seed, 5), drawn_id(&seed, 6));
        assert_ne!(drawn_id(&seed, 5), drawn_id(&[2; 32], 5));
        // Pinned, so that an auditor's own implementation of the rule can be checked against it.
        let mut digest = Sha256::new();
        digest.update(b"waitingroom lottery draw v1");
        digest.update([1; 32]);
        digest.update(5u64.to_be_bytes());
        let d = digest.finalize();
        let want = u64::from_be_bytes(d[..8].try_into().unwrap());
        assert_eq!(drawn_id(&seed, 5), TicketId(want));
    }

    #[test]
    fn the_audit_checks_seeds_and_draws() {
        let seed = [9; 32];
        let open = sign_lottery(&key(), &LotteryRecord::new("launch", &seed, Some(5), false));
        let shown = sign_lottery(&key(), &LotteryRecord::new("launch", &seed, Some(5), true));
        let drawn = DrawnPass {
            id: drawn_id(&seed, 42),
            draw: 42,
        };
        let picked = DrawnPass {
            id: TicketId(1),
            draw: 42,
        };
        // Before the reveal: nothing to check yet, and nothing wrong.
        let before = audit_draws(std::slice::from_ref(&open), &keys(), &[drawn]);
        assert_eq!(
            (before.lotteries, before.revealed, before.draws_verified),
            (1, 0, 0)
        );
        assert!(!before.findings.iter().any(LotteryFinding::is_violation));
        // After it: the draw checks, a picked id does not.
        let after = audit_draws(std::slice::from_ref(&shown), &keys(), &[drawn, picked]);
        assert_eq!((after.revealed, after.draws_verified), (1, 1));
        assert_eq!(
            after.findings,
            vec![LotteryFinding::NotDrawn { pass: picked }]
        );
        // A revealed seed other than the committed one.
        let mut swapped = LotteryRecord::new("launch", &seed, Some(5), true);
        swapped.commit = commitment(&[8; 32]);
        let bad = audit_draws(&[sign_lottery(&key(), &swapped)], &keys(), &[]);
        assert_eq!(
            bad.findings,
            vec![LotteryFinding::SeedMismatch {
                name: "launch".into()
            }]
        );
        // A record edited after signing, and a round record offered as a lottery record.
        let mut parts: Vec<String> = shown.split('.').map(str::to_owned).collect();
        parts[1] = URL_SAFE_NO_PAD.encode(br#"{"name":"launch","commit":"x","reveal_at_ms":5}"#);
        let edited = parts.join(".");
        let other = crate::round_records::sign_record(&key(), &round());
        let found = audit_draws(&[edited, other], &keys(), &[]);
        assert_eq!(found.lotteries, 0);
        assert!(
            found
                .findings
                .iter()
                .all(|f| matches!(f, LotteryFinding::BadRecord { .. }))
        );
        assert_eq!(found.findings.len(), 2);
    }

    fn round() -> crate::round_records::RoundRecord {
        crate::round_records::RoundRecord {
            round: 0,
            decided_at_ms: 1,
            cutoff: crate::round_records::Cutoff::from(crate::types::QueueKey {
                join_time: 1,
                ticket: TicketId(1),
                node: crate::types::NodeId(1),
            }),
            admitted: 1,
            root: crate::types::NodeId(1),
            version: 1,
            prev: String::new(),
            lottery: false,
            through: 0,
        }
    }
}

//! Round records: signed, hash-chained records of the admission rounds, so anyone can check the
//! fairness of who was let out.
//!
//! The protocol decides each admission round at the root with a cutoff in queue order (Distributed
//! Virtual Waiting Room, §4.5.3: the round lets out every queued key up to it), so the whole
//! admission history is a short list of decisions. Each round that lets anyone out becomes a record
//! — its number, when it was decided, the cutoff (the largest queue key it lets out), how many it
//! let out, the root, the membership version — signed with the cluster key as a compact JWS of its
//! own type ([`ROUND_TYP`]: never a ticket or a pass) and chained: `prev` is the SHA-256 of the
//! previous record's JWS. Ed25519 signatures are deterministic, so every node that signs the same
//! claims gets the same bytes, and the chain is the same everywhere.
//!
//! [`audit`] checks a published list of records, and the passes visitors hold against it:
//! signatures, the chain, cutoffs that never go back, and that each pass's queue key is covered
//! by the round that let it out (a pass let out before its round's cutoff reached it is an
//! inversion: someone who joined later got in earlier), or, for a visitor let straight through at
//! join, that the round named granted places for that (`through`) and no more passes than it
//! granted name it so.
//!
//! A round that grants places visitors may take straight through at join (nobody waited) is
//! recorded too, with how many places it granted in all (`through`): such a visitor is let out
//! under the grant that round's result gave their node, and their pass names that round.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::keys::{ClusterKey, VerifyingKeySet};
use crate::token::{TokenError, sign_compact};
use crate::types::{NodeId, QueueKey, TicketId, Time};

/// The JWS `typ` of a round record.
pub const ROUND_TYP: &str = "wr-round+jwt";

/// The largest queue key a round lets out, as published (`id` is the ticket id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cutoff {
    /// Join time.
    pub join_time: Time,
    /// Ticket id.
    pub id: TicketId,
    /// Node of the queue entry.
    pub node: NodeId,
}

impl From<QueueKey> for Cutoff {
    fn from(k: QueueKey) -> Cutoff {
        Cutoff {
            join_time: k.join_time,
            id: k.ticket,
            node: k.node,
        }
    }
}

impl Cutoff {
    /// Whether `key` is at or below this cutoff (the round lets it out).
    pub fn covers(&self, key: &QueueKey) -> bool {
        (key.join_time, key.ticket, key.node) <= (self.join_time, self.id, self.node)
    }
}

/// The claims of one round record, in the order they are signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoundRecord {
    /// Consecutive round number.
    pub round: u64,
    /// When the root decided it (its clock, Unix ms).
    pub decided_at_ms: Time,
    /// The largest queue key it lets out.
    pub cutoff: Cutoff,
    /// How many it lets out.
    pub admitted: u64,
    /// The root that decided it.
    pub root: NodeId,
    /// The membership version it was decided under.
    pub version: u64,
    /// [`link`] of the previous record; empty for the first.
    pub prev: String,
    /// The round drew lots (random queueing): its cutoff is the largest ticket id let out
    /// among visitors who share one join time, and need not grow from round to round.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lottery: bool,
    /// Places the round granted the members in all, when visitors may be let straight through
    /// at join (under a member's grant while it lives: its share of the places the round left
    /// free, and of a range's its own queue did not use up): at most this many passes name the
    /// round without its cutoff covering them. Absent: none (and so in records signed before
    /// the field existed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub through: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Serialize)]
struct Header<'a> {
    alg: &'static str,
    kid: &'a str,
    typ: &'static str,
}

/// Signs `record` with `key` (EdDSA, `typ` [`ROUND_TYP`]). Deterministic: the same claims and
/// key always give the same string.
pub fn sign_record(key: &ClusterKey, record: &RoundRecord) -> String {
    sign_typed(key, ROUND_TYP, record)
}

/// Signs `claims` as a compact EdDSA JWS of type `typ`: the published records (rounds here,
/// lotteries in `lottery.rs`), each of a type no ticket or pass has.
pub(crate) fn sign_typed<T: Serialize>(key: &ClusterKey, typ: &'static str, claims: &T) -> String {
    let header = serde_json::to_string(&Header {
        alg: "EdDSA",
        kid: key.kid(),
        typ,
    })
    .expect("a header serialises");
    let payload = serde_json::to_vec(claims).expect("claims serialise");
    sign_compact(key, &header, &payload)
}

/// Checks a record's signature (any key of `keys`) and that its type is `typ`, and returns its
/// claims.
pub(crate) fn verify_typed<T: for<'de> Deserialize<'de>>(
    keys: &VerifyingKeySet,
    typ: &str,
    jws: &str,
) -> Result<T, RecordError> {
    let (header, payload) = keys.verify_compact(jws)?;
    if header.typ.as_deref() != Some(typ) {
        return Err(RecordError::NotARecord(header.typ));
    }
    serde_json::from_slice(&payload).map_err(|e| RecordError::Claims(e.to_string()))
}

/// Why a string is not a valid round record of this cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Not a JWS signed by a key of the set.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// Signed, but of another type (a pass, say).
    #[error("not a record of this kind: typ {0:?}")]
    NotARecord(Option<String>),
    /// Signed and typed, but the claims are not a record's.
    #[error("invalid record claims: {0}")]
    Claims(String),
}

/// Checks a record's signature (any key of `keys`) and type, and returns its claims.
pub fn verify_record(keys: &VerifyingKeySet, jws: &str) -> Result<RoundRecord, RecordError> {
    verify_typed(keys, ROUND_TYP, jws)
}

/// What the next record's `prev` holds: the SHA-256 of this record's JWS string, base64url
/// without padding.
pub fn link(jws: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(jws.as_bytes()))
}

/// A pass as the audit needs it: the round that let its holder out, and their queue key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmittedPass {
    /// The round the pass names.
    pub round: u64,
    /// When its holder was let out (the pass's `eviction_time`): for a visitor let out by a
    /// round, when that round was decided, which with the number names one record, also where
    /// two roots gave their rounds the same number (a [`Finding::Fork`]); for one let straight
    /// through, when they joined, after the round whose grant let them through.
    pub decided_at: Time,
    /// The visitor's queue key.
    pub key: QueueKey,
}

/// Something the audit found. [`Finding::is_violation`] tells what breaks the promise from what
/// only needs saying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Record `index` (in the list given) is not a valid round record of this cluster.
    BadRecord {
        /// Position in the list.
        index: usize,
        /// Why.
        error: String,
    },
    /// Record `round` names a previous record that is not in the list before it (removed,
    /// reordered or made up).
    BrokenChain {
        /// The round.
        round: u64,
    },
    /// Record `round` follows a record whose number is not `round - 1`.
    Misnumbered {
        /// The round.
        round: u64,
    },
    /// Record `round`'s cutoff is below the one of the record it follows: it lets out only
    /// keys an earlier round already covered — visitors re-queued after their node died before
    /// letting them out, or back from away — catching up, not letting anyone in early. Listed,
    /// not a violation (each pass is checked against its own round for that).
    CutoffWentBack {
        /// The round.
        round: u64,
    },
    /// Two records follow the same one (a root took over without the other's last record):
    /// recorded, not hidden; not unfair by itself.
    Fork {
        /// The round both records carry.
        round: u64,
    },
    /// The list starts after round 0 (earlier records are no longer kept).
    StartsAt {
        /// The first round listed.
        round: u64,
    },
    /// More passes name round `round` as the one whose grant let them straight through than
    /// the places it granted for that.
    BeyondThrough {
        /// The round.
        round: u64,
        /// How many passes name it that way.
        passes: u64,
        /// The places it granted for them.
        through: u64,
    },
    /// A pass names a round the list does not hold (no record of that number decided when the
    /// pass says).
    UnknownRound {
        /// The pass.
        pass: AdmittedPass,
    },
    /// A pass's key is above its round's cutoff: its holder got in before their turn.
    Inversion {
        /// The pass.
        pass: AdmittedPass,
    },
    /// A pass's key was already covered by an earlier round: its holder was let out later than
    /// their turn (away, or re-queued after their node died) — listed, not unfair.
    Late {
        /// The pass.
        pass: AdmittedPass,
        /// The first round that covered it.
        covered_by: u64,
    },
}

impl Finding {
    /// Whether this breaks the fairness promise or the log's integrity.
    pub fn is_violation(&self) -> bool {
        matches!(
            self,
            Finding::BadRecord { .. }
                | Finding::BrokenChain { .. }
                | Finding::Misnumbered { .. }
                | Finding::BeyondThrough { .. }
                | Finding::UnknownRound { .. }
                | Finding::Inversion { .. }
        )
    }
}

/// The outcome of [`audit`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    /// Valid records checked.
    pub rounds: usize,
    /// Passes checked.
    pub passes: usize,
    /// Everything found, in the order found.
    pub findings: Vec<Finding>,
}

impl Audit {
    /// The findings that are violations.
    pub fn violations(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.is_violation())
    }
}

/// Checks `records` (compact JWS, in published order) against `keys`, then `passes` against the
/// records.
pub fn audit(records: &[String], keys: &VerifyingKeySet, passes: &[AdmittedPass]) -> Audit {
    let mut report = Audit::default();
    let chain = check_chain(records, keys, &mut report.findings);
    report.rounds = chain.len();
    // Passes let straight through under each round's grants.
    let mut through: BTreeMap<(u64, Time), u64> = BTreeMap::new();
    for pass in passes {
        match check_pass(&chain, pass) {
            Checked::Through(round) => *through.entry(round).or_default() += 1,
            Checked::Found(f) => report.findings.push(f),
            Checked::Fine => {}
        }
    }
    for (round, passes) in through {
        let through = chain.get(&round).map_or(0, |r| r.through);
        if passes > through {
            let round = round.0;
            (report.findings).push(Finding::BeyondThrough {
                round,
                passes,
                through,
            });
        }
    }
    report.passes = passes.len();
    report
}

/// What [`check_pass`] makes of one pass.
enum Checked {
    /// Covered by its round, and by no earlier one.
    Fine,
    /// Let straight through under the grants of this round (number, decision time): counted
    /// against its `through`.
    Through((u64, Time)),
    /// Something to say.
    Found(Finding),
}

/// The valid records by round and decision time (both sides of a fork kept: each names its own
/// passes), checking the chain on the way.
fn check_chain(
    records: &[String],
    keys: &VerifyingKeySet,
    findings: &mut Vec<Finding>,
) -> BTreeMap<(u64, Time), RoundRecord> {
    // Each valid record's link → its record, and whether something already follows it.
    let mut seen: BTreeMap<String, (RoundRecord, bool)> = BTreeMap::new();
    let mut by_round: BTreeMap<(u64, Time), RoundRecord> = BTreeMap::new();
    for (index, jws) in records.iter().enumerate() {
        let r = match verify_record(keys, jws) {
            Ok(r) => r,
            Err(e) => {
                let error = e.to_string();
                findings.push(Finding::BadRecord { index, error });
                continue;
            }
        };
        let first = seen.is_empty();
        match seen.get_mut(&r.prev) {
            Some((before, followed)) => {
                if *followed {
                    findings.push(Finding::Fork { round: r.round });
                }
                *followed = true;
                if r.round != before.round + 1 {
                    findings.push(Finding::Misnumbered { round: r.round });
                }
                if r.cutoff < before.cutoff && !(r.lottery || before.lottery) {
                    findings.push(Finding::CutoffWentBack { round: r.round });
                }
            }
            None if first => {
                if !(r.round == 0 && r.prev.is_empty()) {
                    findings.push(Finding::StartsAt { round: r.round });
                }
            }
            None => findings.push(Finding::BrokenChain { round: r.round }),
        }
        // Two roots that decided one round number at one time (a fork) both granted places for
        // joins: a pass let through names the round the same way under either's grant.
        let fresh = !seen.contains_key(&link(jws));
        (by_round.entry((r.round, r.decided_at_ms)))
            .and_modify(|kept| {
                kept.through = kept.through.saturating_add(r.through * u64::from(fresh))
            })
            .or_insert_with(|| r.clone());
        seen.insert(link(jws), (r, false));
    }
    by_round
}

/// A pass's key must be covered by its round and by no earlier one.
fn check_pass(chain: &BTreeMap<(u64, Time), RoundRecord>, pass: &AdmittedPass) -> Checked {
    let round = pass.round;
    let Some((&at, own)) = named_round(chain, round, pass.decided_at) else {
        return Checked::Found(Finding::UnknownRound { pass: *pass });
    };
    if at.1 != pass.decided_at {
        return Checked::Through(at);
    }
    if !own.cutoff.covers(&pass.key) {
        // A round that granted places for joins let everyone it counted out, so a key it does
        // not cover joined after its count, at its decision's instant: let straight through
        // under its grants.
        if own.through > 0 {
            return Checked::Through(at);
        }
        return Checked::Found(Finding::Inversion { pass: *pass });
    }
    // Cutoffs never go back along the chain, so the first round covering the key is found by
    // a scan of the earlier ones (a binary search would trust what the audit checks).
    chain
        .range(..(round, 0))
        .find(|(_, r)| r.cutoff.covers(&pass.key))
        .map_or(Checked::Fine, |(&(covered_by, _), _)| {
            Checked::Found(Finding::Late {
                pass: *pass,
                covered_by,
            })
        })
}

/// The record a pass names: round `round` decided at `at` (let out by it), else a record of
/// that number that granted places for joins (its holder let straight through under that
/// round's grant when they joined, at `at`): the latest decided before `at`, or, the join's
/// clock behind the root's, the first (two only where two roots gave their rounds one number).
fn named_round(
    chain: &BTreeMap<(u64, Time), RoundRecord>,
    round: u64,
    at: Time,
) -> Option<(&(u64, Time), &RoundRecord)> {
    let through = |(_, r): &(&(u64, Time), &RoundRecord)| r.through > 0;
    chain.get_key_value(&(round, at)).or_else(|| {
        let before = chain.range((round, 0)..=(round, at)).rev().find(through);
        before.or_else(|| chain.range((round, at)..=(round, Time::MAX)).find(through))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyRing;
    use crate::types::Pass;

    fn key() -> ClusterKey {
        ClusterKey::from_seed([7; 32])
    }

    fn k(join_time: Time, ticket: u64) -> QueueKey {
        QueueKey {
            join_time,
            ticket: TicketId(ticket),
            node: NodeId(1),
        }
    }

    /// Rounds 0..n, round i letting out every key that joined before (i + 1) × 1000.
    fn chain(n: u64) -> Vec<String> {
        let mut prev = String::new();
        (0..n)
            .map(|round| {
                let jws = sign_record(&key(), &record(round, &prev, (round + 1) * 1000));
                prev = link(&jws);
                jws
            })
            .collect()
    }

    fn record(round: u64, prev: &str, below: Time) -> RoundRecord {
        RoundRecord {
            round,
            decided_at_ms: below,
            cutoff: k(below - 1, u64::MAX).into(),
            admitted: 10,
            root: NodeId(1),
            version: 3,
            prev: prev.to_owned(),
            lottery: false,
            through: 0,
        }
    }

    fn keys() -> VerifyingKeySet {
        key().verifying_keys()
    }

    fn violations(a: &Audit) -> Vec<Finding> {
        a.violations().cloned().collect()
    }

    #[test]
    fn an_honest_log_and_its_passes_pass() {
        let passes = [
            AdmittedPass {
                round: 0,
                decided_at: 1000,
                key: k(10, 1),
            },
            AdmittedPass {
                round: 1,
                decided_at: 2000,
                key: k(1500, 2),
            },
            AdmittedPass {
                round: 2,
                decided_at: 3000,
                key: k(2999, 3),
            },
        ];
        let a = audit(&chain(3), &keys(), &passes);
        assert_eq!((a.rounds, a.passes), (3, 3));
        assert_eq!(a.findings, []);
    }

    #[test]
    fn records_are_deterministic_and_never_pass_as_tokens() {
        let r = record(0, "", 1000);
        let jws = sign_record(&key(), &r);
        assert_eq!(jws, sign_record(&key(), &r));
        assert_eq!(verify_record(&keys(), &jws), Ok(r));
        let ring = KeyRing::new(key());
        assert!(ring.verify_pass(&jws, 0).is_err());
        assert!(ring.verify_ticket(&jws, 0).is_err());
        // A pass is no round record either.
        let pass = Pass {
            id: TicketId(1),
            node: NodeId(1),
            queue_join_time: 1,
            created_at: 1,
            issued_at: 1,
            expires_at: 2,
            eviction_time: 1,
            round: None,
            draw: None,
        };
        assert!(matches!(
            verify_record(&keys(), &ring.sign_pass(&pass)),
            Err(RecordError::NotARecord(_))
        ));
    }

    #[test]
    fn a_changed_cutoff_is_a_bad_record() {
        let mut records = chain(3);
        // Re-encode round 1's payload with a larger cutoff, keeping the signature.
        let parts: Vec<&str> = records[1].split('.').collect();
        let mut claims = record(1, &link(&records[0]), 2000);
        claims.cutoff = k(9_999, 0).into();
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
        records[1] = format!("{}.{payload}.{}", parts[0], parts[2]);
        let a = audit(&records, &keys(), &[]);
        assert!(matches!(
            violations(&a)[0],
            Finding::BadRecord { index: 1, .. }
        ));
    }

    #[test]
    fn a_removed_or_swapped_record_breaks_the_chain() {
        let mut removed = chain(4);
        removed.remove(2);
        assert_eq!(
            violations(&audit(&removed, &keys(), &[])),
            [Finding::BrokenChain { round: 3 }]
        );
        let mut swapped = chain(4);
        swapped.swap(1, 2);
        assert!(
            violations(&audit(&swapped, &keys(), &[])).contains(&Finding::BrokenChain { round: 2 })
        );
    }

    #[test]
    fn a_cutoff_that_goes_back_is_listed_as_catching_up() {
        let first = sign_record(&key(), &record(0, "", 5000));
        let second = sign_record(&key(), &record(1, &link(&first), 3000));
        let report = audit(&[first, second], &keys(), &[]);
        assert_eq!(report.findings, [Finding::CutoffWentBack { round: 1 }]);
        assert_eq!(violations(&report), []);
        // A pass of that round was covered by the round before: late, not early.
        let pass = AdmittedPass {
            round: 1,
            decided_at: 3000,
            key: k(2000, 1),
        };
        let first = sign_record(&key(), &record(0, "", 5000));
        let second = sign_record(&key(), &record(1, &link(&first), 3000));
        let report = audit(&[first, second], &keys(), &[pass]);
        assert_eq!(
            report.findings[1],
            Finding::Late {
                pass,
                covered_by: 0
            }
        );
    }

    #[test]
    fn a_pass_moved_to_an_earlier_round_is_an_inversion_and_a_late_one_is_listed() {
        let records = chain(3);
        let early = AdmittedPass {
            round: 0,
            decided_at: 1000,
            key: k(2500, 9),
        };
        let late = AdmittedPass {
            round: 2,
            decided_at: 3000,
            key: k(500, 8),
        };
        let unknown = AdmittedPass {
            round: 7,
            decided_at: 8000,
            key: k(1, 1),
        };
        let a = audit(&records, &keys(), &[early, late, unknown]);
        assert_eq!(
            a.findings,
            [
                Finding::Inversion { pass: early },
                Finding::Late {
                    pass: late,
                    covered_by: 0
                },
                Finding::UnknownRound { pass: unknown },
            ]
        );
        assert_eq!(violations(&a).len(), 2);
    }

    /// A round that granted places for joins covers as many straight-through passes as it
    /// granted, no more.
    #[test]
    fn straight_through_passes_count_against_their_rounds_through() {
        // Round 0 lets everyone out before 1000 and grants 2 places for joins; round 1 none.
        let mut first = record(0, "", 1000);
        first.through = 2;
        let first = sign_record(&key(), &first);
        let second = sign_record(&key(), &record(1, &link(&first), 2000));
        let records = [first, second];
        // Let through when they joined, at 1500, under round 0's grant.
        let joined = |ticket| AdmittedPass {
            round: 0,
            decided_at: 1500,
            key: k(1500, ticket),
        };
        let a = audit(&records, &keys(), &[joined(1), joined(2)]);
        assert_eq!(a.findings, []);
        let a = audit(&records, &keys(), &[joined(1), joined(2), joined(3)]);
        assert_eq!(
            violations(&a),
            [Finding::BeyondThrough {
                round: 0,
                passes: 3,
                through: 2
            }]
        );
        // A round that granted no places for joins lets nobody through.
        let after_one = AdmittedPass {
            round: 1,
            decided_at: 2500,
            key: k(2500, 4),
        };
        let a = audit(&records, &keys(), &[after_one]);
        assert_eq!(violations(&a), [Finding::UnknownRound { pass: after_one }]);
        // Another root's round 1 of the same time (a fork) granted a place for a join.
        let mut other = record(1, &link(&records[0]), 2000);
        (other.through, other.root) = (1, NodeId(2));
        let forked = [
            records[0].clone(),
            records[1].clone(),
            sign_record(&key(), &other),
        ];
        let a = audit(&forked, &keys(), &[after_one]);
        assert_eq!(a.findings, [Finding::Fork { round: 1 }]);
        // A record that grants no places for joins reads as one signed before the field existed.
        let old = serde_json::to_string(&record(0, "", 1000)).unwrap();
        assert!(!old.contains("through"));
        let read: RoundRecord = serde_json::from_str(&old).unwrap();
        assert_eq!(read.through, 0);
    }

    #[test]
    fn a_fork_after_a_takeover_is_listed_and_a_late_start_noted() {
        let records = chain(2);
        // A new root that knew only round 0 decides its own round 1.
        let other = sign_record(&key(), &record(1, &link(&records[0]), 2500));
        let mut forked = records.clone();
        forked.push(other);
        let a = audit(&forked, &keys(), &[]);
        assert_eq!(a.findings, [Finding::Fork { round: 1 }]);
        // Each side of the fork names its own passes: a key the new root's round 1 let out,
        // which the first round 1 does not cover, is checked against the round that let it out.
        let pass = |decided_at| AdmittedPass {
            round: 1,
            decided_at,
            key: k(2200, 4),
        };
        let a = audit(&forked, &keys(), &[pass(2500), pass(2000)]);
        assert_eq!(
            a.findings,
            [
                Finding::Fork { round: 1 },
                Finding::Inversion { pass: pass(2000) }
            ]
        );
        let a = audit(&records[1..], &keys(), &[]);
        assert_eq!(a.findings, [Finding::StartsAt { round: 1 }]);
    }
}

//! Pass checks that remember the passes they verified.
//!
//! A gate asks for the same pass on every request its visitor makes (nginx `auth_request` on
//! `GET /api/pass/verify`, or the Rust gate in front of each route), and checking its Ed25519
//! signature costs tens of microseconds where finding it again costs well under one. Everything
//! a check decides from the token's bytes under one set of keys (header, key, signature,
//! claims) comes out the same every time; only the clock moves. So a [`CachedPassVerifier`]
//! keeps the passes it verified, under the SHA-256 of the whole token (a forger would need a
//! second token with the same digest to be believed), checks their times again on every hit,
//! and owns its keys: keys that change make a new verifier, with nothing remembered.
//!
//! Bounded: two generations of at most [`GENERATION`] passes each. When the young one is full
//! the old one is dropped and the young one takes its place; a pass found in the old one moves
//! to the young one, so passes in use stay while the rest age out. Nothing is kept of a token
//! that did not verify.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use sha2::{Digest as _, Sha256};

use crate::keys::VerifyingKeySet;
use crate::token::{MAX_TOKEN_LEN, TokenError, check_times};
use crate::types::{Pass, Time};

/// Passes remembered per generation. A pass and its digest take 121 bytes of a hash table of
/// 16,384 slots (a table is at most seven eighths full): 2 MB a generation, about 4 MB in all.
pub const GENERATION: usize = 8_192;

type Seen = HashMap<[u8; 32], Pass>;

/// A [`VerifyingKeySet`] that remembers the passes it verified (see the module docs).
#[derive(Debug)]
pub struct CachedPassVerifier {
    keys: VerifyingKeySet,
    seen: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    young: Seen,
    old: Seen,
}

impl Generations {
    /// The pass remembered under `digest`, moved to the young generation.
    fn get(&mut self, digest: &[u8; 32]) -> Option<Pass> {
        if let Some(pass) = self.young.get(digest) {
            return Some(pass.clone());
        }
        let pass = self.old.remove(digest)?;
        self.insert(*digest, pass.clone());
        Some(pass)
    }

    fn insert(&mut self, digest: [u8; 32], pass: Pass) {
        if self.young.len() >= GENERATION {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(digest, pass);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }
}

impl CachedPassVerifier {
    /// Checks passes against `keys`.
    pub fn new(keys: VerifyingKeySet) -> Self {
        CachedPassVerifier {
            keys,
            seen: Mutex::default(),
        }
    }

    /// The keys passes are checked against.
    pub fn keys(&self) -> &VerifyingKeySet {
        &self.keys
    }

    /// What [`VerifyingKeySet::verify_pass`] answers for `token` at `now`, without checking
    /// the signature again for a pass verified before.
    pub fn verify_pass(&self, token: &str, now: Time) -> Result<Pass, TokenError> {
        if token.len() > MAX_TOKEN_LEN {
            // Refused before anything is read of it: not worth hashing first.
            return self.keys.verify_pass(token, now);
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(pass) = self.generations().get(&digest) {
            check_times(self.keys.leeway_ms, pass.issued_at, pass.expires_at, now)?;
            return Ok(pass);
        }
        let pass = self.keys.verify_pass(token, now)?;
        self.generations().insert(digest, pass.clone());
        Ok(pass)
    }

    /// How many passes are remembered.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.generations().len()
    }

    fn generations(&self) -> std::sync::MutexGuard<'_, Generations> {
        // What it guards is a cache: whatever a panicking holder left is still usable.
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::ClusterKey;
    use crate::types::{NodeId, TicketId};
    use proptest::prelude::*;

    fn pass(id: u64, issued_at: Time, expires_at: Time) -> Pass {
        Pass {
            id: TicketId(id),
            node: NodeId(1),
            queue_join_time: 10,
            created_at: issued_at,
            issued_at,
            expires_at,
            eviction_time: issued_at,
            round: None,
            draw: None,
        }
    }

    fn key(seed: u8) -> ClusterKey {
        ClusterKey::from_seed([seed; 32])
    }

    #[test]
    fn a_remembered_pass_is_checked_against_the_clock_again() {
        let k = key(1);
        let v = CachedPassVerifier::new(k.verifying_keys());
        let token = crate::token::sign_pass(&k, &pass(7, 1_000, 5_000));
        assert_eq!(v.verify_pass(&token, 2_000), Ok(pass(7, 1_000, 5_000)));
        assert_eq!(v.remembered(), 1);
        assert_eq!(v.verify_pass(&token, 4_999), Ok(pass(7, 1_000, 5_000)));
        assert_eq!(v.verify_pass(&token, 5_000), Err(TokenError::Expired));
        let later = crate::token::sign_pass(&k, &pass(8, 90_000, 99_000));
        assert_eq!(
            v.keys().verify_pass(&later, 2_000),
            Err(TokenError::NotYetValid)
        );
        assert_eq!(v.verify_pass(&later, 89_000), Ok(pass(8, 90_000, 99_000)));
        assert_eq!(v.verify_pass(&later, 2_000), Err(TokenError::NotYetValid));
    }

    #[test]
    fn only_what_verified_is_remembered_and_a_changed_token_is_checked_whole() {
        let k = key(2);
        let v = CachedPassVerifier::new(k.verifying_keys());
        let token = crate::token::sign_pass(&k, &pass(7, 1_000, 5_000));
        let forged = crate::token::sign_pass(&key(3), &pass(7, 1_000, 5_000));
        assert_eq!(v.verify_pass(&forged, 2_000), Err(TokenError::UnknownKey));
        assert_eq!(v.verify_pass(&forged, 2_000), Err(TokenError::UnknownKey));
        assert_eq!(v.remembered(), 0);
        assert!(v.verify_pass(&token, 2_000).is_ok());
        // The same signature under other claims: not the token remembered.
        let (head, sig) = token.rsplit_once('.').unwrap();
        let (header, _) = head.split_once('.').unwrap();
        let other = crate::token::sign_pass(&k, &pass(8, 1_000, 5_000));
        let claims = other.split('.').nth(1).unwrap();
        let spliced = format!("{header}.{claims}.{sig}");
        assert_eq!(
            v.verify_pass(&spliced, 2_000),
            Err(TokenError::BadSignature)
        );
        assert_eq!(v.remembered(), 1);
    }

    #[test]
    fn at_most_two_generations_are_kept_and_a_pass_in_use_stays() {
        let k = key(4);
        let v = CachedPassVerifier::new(k.verifying_keys());
        let kept = crate::token::sign_pass(&k, &pass(0, 1_000, 5_000));
        assert!(v.verify_pass(&kept, 2_000).is_ok());
        let mut g = v.generations();
        for i in 1..(3 * GENERATION as u64) {
            let mut digest = [0u8; 32];
            digest[..8].copy_from_slice(&i.to_le_bytes());
            g.insert(digest, pass(i, 1_000, 5_000));
            if i % 1_000 == 0 {
                let kept_digest: [u8; 32] = Sha256::digest(kept.as_bytes()).into();
                assert!(g.get(&kept_digest).is_some(), "dropped while in use at {i}");
            }
            assert!(g.len() <= 2 * GENERATION);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Whatever tokens come in whatever order at whatever times, the answers are those of
        /// the key set itself.
        #[test]
        fn answers_as_the_keys_do(
            steps in prop::collection::vec((0usize..6, 0u64..12_000), 1..40)
        ) {
            let k = key(5);
            let v = CachedPassVerifier::new(k.verifying_keys());
            let tokens = [
                crate::token::sign_pass(&k, &pass(1, 1_000, 5_000)),
                crate::token::sign_pass(&k, &pass(2, 6_000, 11_000)),
                crate::token::sign_pass(&key(6), &pass(3, 1_000, 5_000)),
                crate::token::sign_ticket(&k, &crate::types::Ticket {
                    id: TicketId(4), join_time: 0, node: NodeId(1), issued_at: 0,
                    next_refresh: 1, expires_at: 9_000, previous_position: None,
                    eviction_time: None, draw: None, round: None,
                }),
                "not.a.token".to_owned(),
                crate::token::sign_pass(&k, &pass(6, 0, 12_000)),
            ];
            for (i, now) in steps {
                prop_assert_eq!(
                    v.verify_pass(&tokens[i], now),
                    v.keys().verify_pass(&tokens[i], now)
                );
            }
        }
    }
}

//! Ticket and pass tokens: what every visitor request carries, so the most exposed decoder.

use std::sync::OnceLock;

use waitingroom_core::token::{mac_compact, sign_compact};
use waitingroom_core::{CachedPassVerifier, ClusterKey, KeyRing, Time, sign_pass, sign_ticket};

/// The cluster key the targets sign and verify with, and the ring that checks with it.
pub(crate) fn key() -> &'static (ClusterKey, KeyRing) {
    static KEY: OnceLock<(ClusterKey, KeyRing)> = OnceLock::new();
    KEY.get_or_init(|| {
        let key = ClusterKey::from_seed([7; 32]);
        let ring = KeyRing::new(key.clone());
        (key, ring)
    })
}

/// Input: a mode byte, eight bytes of `now` (little endian), then the rest.
///
/// - mode even: the rest is a token, as a visitor would send it.
/// - mode odd: the rest is a protected header and a payload separated by the first `0xff`
///   byte, made into a token with the cluster key before verification: signed with EdDSA (as
///   passes are) when bit 1 of the mode is clear, authenticated with the derived HS256 ticket
///   secret (as tickets are) when it is set. A random token never carries a valid signature or
///   MAC, so this is the only way the fuzzer reaches the claims parser.
///
/// Whatever verifies must sign again into a token that verifies to the same value, and never
/// verify as the other kind; the pass cache answers as the keys do.
pub fn tokens(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (now, rest) = match rest.split_first_chunk::<8>() {
        Some((now, rest)) => (Time::from_le_bytes(*now), rest),
        None => (0, rest),
    };
    let (key, ring) = key();
    let token = token(mode, rest);
    let _ = ring.public().verify_compact(&token);
    let (ticket, pass) = (
        ring.verify_ticket(&token, now),
        ring.verify_pass(&token, now),
    );
    assert!(ticket.is_err() || pass.is_err(), "a ticket is never a pass");
    // The pass cache answers as the keys do: when it first sees the token, and again (a hit
    // for a pass that verified) at another time and when the pass expires.
    let cached = CachedPassVerifier::new(ring.public().clone());
    assert_eq!(cached.verify_pass(&token, now), pass, "the pass cache");
    let expiry = pass.as_ref().map_or(now, |p| p.expires_at);
    for at in [now.wrapping_add(u64::from(mode) << 12), expiry] {
        let again = ring.verify_pass(&token, at);
        assert_eq!(
            cached.verify_pass(&token, at),
            again,
            "the pass cache at {at}"
        );
    }
    if let Ok(ticket) = ticket {
        let again = ring.verify_ticket(&sign_ticket(key, &ticket), now);
        assert_eq!(again, Ok(ticket), "ticket round trip");
    }
    if let Ok(pass) = pass {
        let again = ring.verify_pass(&sign_pass(key, &pass), now);
        assert_eq!(again, Ok(pass), "pass round trip");
    }
}

/// The token an input's mode and rest stand for (see [`tokens`]).
pub(crate) fn token(mode: u8, rest: &[u8]) -> String {
    if mode & 1 == 0 {
        return String::from_utf8_lossy(rest).into_owned();
    }
    let key = &key().0;
    let cut = rest.iter().position(|&b| b == 0xff).unwrap_or(rest.len());
    let header = String::from_utf8_lossy(&rest[..cut]);
    let payload = rest.get(cut + 1..).unwrap_or_default();
    if mode & 2 == 0 {
        sign_compact(key, &header, payload)
    } else {
        mac_compact(key, &header, payload)
    }
}

//! Ticket and pass tokens: what every visitor request carries, so the most exposed decoder.

use std::sync::OnceLock;

use waitingroom_core::token::sign_compact;
use waitingroom_core::{ClusterKey, Time, VerifyingKeySet, sign_pass, sign_ticket};

/// The cluster key the targets sign and verify with.
pub(crate) fn key() -> &'static (ClusterKey, VerifyingKeySet) {
    static KEY: OnceLock<(ClusterKey, VerifyingKeySet)> = OnceLock::new();
    KEY.get_or_init(|| {
        let key = ClusterKey::from_seed([7; 32]);
        let set = key.verifying_keys();
        (key, set)
    })
}

/// Input: a mode byte, eight bytes of `now` (little endian), then the rest.
///
/// - mode even: the rest is a token, as a visitor would send it.
/// - mode odd: the rest is a protected header and a payload separated by the first `0xff`
///   byte, signed with the cluster key before verification. A random token never carries a
///   valid signature, so this is the only way the fuzzer reaches the claims parser.
///
/// Whatever verifies must sign again into a token that verifies to the same value.
pub fn tokens(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (now, rest) = match rest.split_first_chunk::<8>() {
        Some((now, rest)) => (Time::from_le_bytes(*now), rest),
        None => (0, rest),
    };
    let (key, set) = key();
    let token = if mode % 2 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        let cut = rest.iter().position(|&b| b == 0xff).unwrap_or(rest.len());
        let header = String::from_utf8_lossy(&rest[..cut]);
        let payload = rest.get(cut + 1..).unwrap_or_default();
        sign_compact(key, &header, payload)
    };
    let _ = set.verify_compact(&token);
    if let Ok(ticket) = set.verify_ticket(&token, now) {
        let again = set.verify_ticket(&sign_ticket(key, &ticket), now);
        assert_eq!(again.as_ref(), Ok(&ticket), "ticket round trip");
        assert!(
            set.verify_pass(&token, now).is_err(),
            "a ticket is not a pass"
        );
    }
    if let Ok(pass) = set.verify_pass(&token, now) {
        let again = set.verify_pass(&sign_pass(key, &pass), now);
        assert_eq!(again.as_ref(), Ok(&pass), "pass round trip");
    }
}

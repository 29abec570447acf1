//! Peer authentication (`waitingroom_http::peer::auth`) and its replay cache
//! (`waitingroom_http::peer::replay`): what anyone who reaches a node's internal port can send.

use std::sync::OnceLock;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use waitingroom_core::{NodeId, Time};
use waitingroom_http::crypto::Crypto;
use waitingroom_http::peer::auth::{
    COVERED_HEADERS, Expect, HEADER_DIGEST, HEADER_KID, ReplyHead, RequestHead, Route, check_body,
    check_head,
};
use waitingroom_http::peer::replay::{Admit, ReplayCache};

use crate::tokens::key;

/// The headers a request's MAC covers, in the order the input's field byte picks them.
pub const FIELDS: [&str; 10] = COVERED_HEADERS;

const NOW: Time = 1_700_000_000_000;
const PATH: &str = "/peer/messages";

fn crypto() -> &'static Crypto {
    static C: OnceLock<Crypto> = OnceLock::new();
    C.get_or_init(|| Crypto::new(key().0.clone()))
}

fn expect() -> Expect<'static> {
    Expect {
        me: NodeId(1),
        address: "http://127.0.0.1:9",
        incarnation: 7,
        by_address: true,
        max_body: 4096,
        window_ms: 5_000,
    }
}

/// A request as node 2 signs it for node 1 (incarnation 7), at [`NOW`], with nonce 1.
fn signed(body: &[u8]) -> (RequestHead, HeaderMap) {
    let route = Route {
        path: PATH,
        from: NodeId(2),
        to: NodeId(1),
        to_incarnation: 7,
    };
    let (head, mac) = RequestHead::sign(crypto(), route, NOW, 1, body);
    let mut h = HeaderMap::new();
    for (name, value) in head.headers(&mac) {
        h.insert(name, HeaderValue::from_str(&value).expect("ASCII"));
    }
    h.insert("content-length", body.len().into());
    (head, h)
}

/// Input: `[ops, clock, body_len, edits...]`: a request node 2 signed for node 1 (its body the
/// first `body_len` bytes after the header, up to 64), then up to `ops % 8` edits of its headers
/// or body, each `[what, field, len, bytes...]` (`what % 5`: set the field to the bytes, remove
/// it, add a second line with the bytes, flip a bit of its value, or set the body to the
/// bytes), checked at [`NOW`] shifted by `clock` seconds (signed). What must hold: no panic;
/// anything accepted is the very request signed (same head, same body); accepted once, it is
/// refused as a replay the second time; an answer's check never accepts a changed answer.
pub fn peer_auth(data: &[u8]) {
    let Some(c) = Case::read(data) else {
        return;
    };
    let cache = ReplayCache::new(8, expect().window_ms);
    let checked = c.check(&cache);
    if let Ok(got) = &checked {
        if check_body(got, &c.sent_body).is_ok() {
            assert_eq!(got, &c.head, "an accepted request is the one signed");
            assert_eq!(c.sent_body, c.body, "an accepted body is the one signed");
        }
        assert!(c.check(&cache).is_err(), "a request is accepted once");
    }
    reply(&c.headers, &c.sent_body, &c.body);
}

/// Whether a [`peer_auth`] input is accepted, head and body (for the seed tests).
pub fn accepted(data: &[u8]) -> bool {
    Case::read(data).is_some_and(|c| {
        let cache = ReplayCache::new(8, expect().window_ms);
        c.check(&cache)
            .is_ok_and(|head| check_body(&head, &c.sent_body).is_ok())
    })
}

/// One [`peer_auth`] input, read: the request signed, and the request as sent.
struct Case {
    head: RequestHead,
    body: Vec<u8>,
    headers: HeaderMap,
    sent_body: Vec<u8>,
    now: Time,
}

impl Case {
    fn read(data: &[u8]) -> Option<Case> {
        let [ops, clock, body_len, rest @ ..] = data else {
            return None;
        };
        let take = usize::from(*body_len % 65).min(rest.len());
        let (body, mut edits) = rest.split_at(take);
        let (head, mut headers) = signed(body);
        let mut sent_body = body.to_vec();
        for _ in 0..ops % 8 {
            let [what, field, len, more @ ..] = edits else {
                break;
            };
            let n = usize::from(*len % 80).min(more.len());
            let (bytes, next) = more.split_at(n);
            edits = next;
            let name = HeaderName::from_static(FIELDS[usize::from(*field) % FIELDS.len()]);
            edit(&mut headers, &mut sent_body, &name, *what, bytes);
        }
        Some(Case {
            head,
            body: body.to_vec(),
            headers,
            sent_body,
            now: NOW.wrapping_add_signed(i64::from(*clock as i8) * 1_000),
        })
    }

    fn check(
        &self,
        cache: &ReplayCache,
    ) -> Result<RequestHead, waitingroom_http::peer::auth::PeerAuthError> {
        check_head(
            crypto(),
            &expect(),
            "POST",
            PATH,
            &self.headers,
            self.now,
            cache,
        )
    }
}

fn edit(headers: &mut HeaderMap, body: &mut Vec<u8>, name: &HeaderName, what: u8, bytes: &[u8]) {
    match what % 5 {
        0 => {
            if let Ok(v) = HeaderValue::from_bytes(bytes) {
                headers.insert(name.clone(), v);
            }
        }
        1 => {
            headers.remove(name);
        }
        2 => {
            if let Ok(v) = HeaderValue::from_bytes(bytes) {
                headers.append(name.clone(), v);
            }
        }
        3 => {
            let Some(v) = headers.get(name) else { return };
            let mut raw = v.as_bytes().to_vec();
            if raw.is_empty() {
                return;
            }
            let at = usize::from(bytes.first().copied().unwrap_or(0)) % raw.len();
            raw[at] ^= 1 << (bytes.get(1).copied().unwrap_or(0) % 8);
            if let Ok(v) = HeaderValue::from_bytes(&raw) {
                headers.insert(name.clone(), v);
            }
        }
        _ => *body = bytes.to_vec(),
    }
}

/// An answer signed for nonce 1 by node 1, its headers taken from the (edited) request's where
/// they share a name: accepted only when nothing it covers changed.
fn reply(edited: &HeaderMap, sent_body: &[u8], body: &[u8]) {
    let mut h = HeaderMap::new();
    for (name, value) in ReplyHead::sign(crypto(), 1, 200, NodeId(1), body) {
        h.insert(name, HeaderValue::from_str(&value).expect("ASCII"));
    }
    let original = h.clone();
    for name in [HEADER_KID, HEADER_DIGEST] {
        if edited.get(name) != original.get(name) {
            h.remove(name);
            for v in edited.get_all(name) {
                h.append(name, v.clone());
            }
        }
    }
    let ok = ReplyHead::check(crypto(), 1, NodeId(1), 200, &h, sent_body).is_ok();
    if ok {
        assert_eq!(sent_body, body, "an accepted answer has the signed body");
        assert_eq!(h.get(HEADER_DIGEST), original.get(HEADER_DIGEST));
    }
    assert!(ReplyHead::check(crypto(), 2, NodeId(1), 200, &original, body).is_err());
}

/// Input: `[capacity, monotonic, ops...]`, each op `[nonce, step, skew]`: move the clock by
/// `step` ms (signed, so it may step back, when `monotonic` is even), then admit nonce
/// `nonce % 16` stamped `skew` ms (signed) from the clock — if that is within the 100-ms window,
/// as the header check before the cache requires; a stamp chosen by `nonce / 16` re-sends the
/// last request with that nonce (a replay, same stamp) instead. What must hold: the cache never
/// holds more than its capacity; a request it accepted is never accepted again, whatever the
/// clock did; and, on a clock that never steps back, it refuses for being full only when that
/// many accepted stamps are still within the window, a replay only when it is one, and never
/// "too old".
pub fn replay_cache(data: &[u8]) {
    let [capacity, monotonic, ops @ ..] = data else {
        return;
    };
    const WINDOW: Time = 100;
    let capacity = usize::from(*capacity % 8) + 1;
    let monotonic = monotonic % 2 == 1;
    let cache = ReplayCache::new(capacity, WINDOW);
    let mut now: Time = 10_000;
    // The stamp of the last accepted request with each nonce.
    let mut accepted: [Option<Time>; 16] = [None; 16];
    for op in ops.chunks_exact(3) {
        let nonce = usize::from(op[0] % 16);
        now = if monotonic {
            now + u64::from(op[1])
        } else {
            now.wrapping_add_signed(i64::from(op[1] as i8))
        };
        let replay = op[0] >= 128 && accepted[nonce].is_some();
        let stamp = match accepted[nonce] {
            Some(t) if replay => t,
            _ => now.wrapping_add_signed(i64::from(op[2] as i8)),
        };
        if stamp.abs_diff(now) > WINDOW {
            continue;
        }
        let got = cache.admit(nonce as u64, stamp, now);
        if replay {
            assert_ne!(
                got,
                Admit::Fresh,
                "nonce {nonce} stamped {stamp} accepted again at {now}"
            );
        }
        if monotonic {
            let live = accepted
                .iter()
                .flatten()
                .filter(|&&t| now <= t + WINDOW)
                .count();
            match got {
                Admit::Full => assert!(live >= capacity, "full with {live} live of {capacity}"),
                Admit::Replayed => assert!(accepted[nonce].is_some_and(|t| now <= t + WINDOW)),
                Admit::TooOld => {
                    panic!("{stamp} too old at {now} on a clock that never stepped back")
                }
                Admit::Fresh => {}
            }
        }
        if got == Admit::Fresh {
            accepted[nonce] = Some(stamp);
        }
        assert!(
            cache.len() <= capacity,
            "{} held, capacity {capacity}",
            cache.len()
        );
    }
}

/// Seeds of [`peer_auth`]: the request unedited, and one edit of each kind on each field.
pub fn peer_auth_seeds() -> Vec<Vec<u8>> {
    let body = br#"[{"from":{"id":2},"to":1}]"#;
    let mut out = vec![[&[0u8, 0, body.len() as u8][..], body].concat()];
    for field in 0..FIELDS.len() as u8 {
        for what in 0..5u8 {
            let mut v = vec![1, 0, body.len() as u8];
            v.extend_from_slice(body);
            v.extend_from_slice(&[what, field, 2, b'1', b'2']);
            out.push(v);
        }
    }
    out.push(vec![0, 6, 0]);
    out.push(vec![0, 250, 0]);
    out
}

/// Seeds of [`replay_cache`]: replays within and past the window, a full cache, a clock going
/// back and forth.
pub fn replay_cache_seeds() -> Vec<Vec<u8>> {
    vec![
        vec![
            2, 1, 1, 0, 0, 129, 50, 0, 1, 160, 0, 129, 1, 0, 2, 0, 0, 3, 0, 50,
        ],
        vec![0, 1, 5, 0, 0, 133, 0, 0, 6, 250, 0, 134, 0, 0],
        vec![
            7, 0, 1, 0, 0, 2, 100, 0, 129, 100, 0, 129, 156, 0, 3, 10, 200,
        ],
    ]
}

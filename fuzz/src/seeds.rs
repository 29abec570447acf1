//! Seed inputs: valid examples of what each target decodes, for libFuzzer to mutate (written to
//! `fuzz/corpus/<target>/` by `scripts/fuzz-run.sh`) and for the stable tests.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use waitingroom_core::{NodeId, Pass, Ticket, TicketId, sign_pass, sign_ticket};

use crate::peer::templates;
use crate::tokens::key;

/// The targets, by the names of their binaries.
pub const TARGETS: [&str; 8] = [
    "tokens",
    "cluster_key",
    "peer_message",
    "peer_batch",
    "peer_values",
    "visitor_request",
    "peer_auth",
    "replay_cache",
];

/// The seed inputs of `target`.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "tokens" => tokens(),
        "cluster_key" => cluster_keys(),
        "peer_message" => peer_messages(),
        "peer_batch" => peer_batches(),
        "peer_values" => peer_values(),
        "visitor_request" => visitor_requests(),
        "peer_auth" => crate::peer_auth::peer_auth_seeds(),
        "replay_cache" => crate::peer_auth::replay_cache_seeds(),
        _ => Vec::new(),
    }
}

const NOW: u64 = 1_700_000_000_000;

fn ticket() -> Ticket {
    Ticket {
        id: TicketId(0x0123_4567_89ab_cdef),
        join_time: NOW - 60_000,
        node: NodeId(2),
        issued_at: NOW - 1_000,
        next_refresh: NOW + 5_000,
        expires_at: NOW + 30_000,
        previous_position: Some(12),
        eviction_time: None,
        draw: None,
        round: None,
    }
}

fn pass() -> Pass {
    Pass {
        id: TicketId(0x0123_4567_89ab_cdef),
        node: NodeId(2),
        queue_join_time: NOW - 60_000,
        created_at: NOW - 1_000,
        issued_at: NOW - 1_000,
        expires_at: NOW + 600_000,
        eviction_time: NOW - 2_000,
        round: Some(7),
        draw: Some(41),
    }
}

fn with_prefix(mode: u8, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![mode];
    v.extend_from_slice(&NOW.to_le_bytes());
    v.extend_from_slice(rest);
    v
}

fn tokens() -> Vec<Vec<u8>> {
    let (key, _) = key();
    let mut out = Vec::new();
    // Mode 3 re-makes the ticket's claims under HS256, mode 1 the pass's under EdDSA.
    for (token, remake) in [
        (sign_ticket(key, &ticket()), 3),
        (sign_pass(key, &pass()), 1),
    ] {
        out.push(with_prefix(0, token.as_bytes()));
        // The same claims, to be made again: header and payload split by 0xff; and under the
        // other kind's algorithm, which must not verify as either kind.
        let mut parts = token.split('.');
        let mut part = || {
            URL_SAFE_NO_PAD
                .decode(parts.next().unwrap_or_default())
                .expect("own tokens are base64url")
        };
        let header = part();
        let payload = part();
        let mut signed = header;
        signed.push(0xff);
        signed.extend_from_slice(&payload);
        out.push(with_prefix(remake, &signed));
        out.push(with_prefix(remake ^ 2, &signed));
    }
    out.push(with_prefix(0, b"eyJhbGciOiJub25lIn0.e30."));
    out.push(with_prefix(
        1,
        b"{\"alg\":\"HS256\",\"typ\":\"wr-ticket\"}\xff{\"kind\":\"ticket\"}",
    ));
    out.push(with_prefix(
        3,
        b"{\"alg\":\"EdDSA\",\"typ\":\"wr-pass+jwt\"}\xff{\"kind\":\"pass\"}",
    ));
    out
}

fn cluster_keys() -> Vec<Vec<u8>> {
    let (key, ring) = key();
    vec![
        "07".repeat(32).into_bytes(),
        b"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc".to_vec(),
        key.to_pkcs8_pem().into_bytes(),
        ring.public().jwks().to_string().into_bytes(),
    ]
}

/// Every envelope the template cluster sent, aimed at each template node with the receiver's
/// id (the snapshots were taken mid-run, so many of these are exactly the next message the
/// template expects on that link), and once more re-addressed and from a member.
fn peer_messages() -> Vec<Vec<u8>> {
    let t = templates();
    let mut out = Vec::new();
    for (i, env) in t.traffic.iter().enumerate() {
        let json = serde_json::to_vec(env).expect("encodes");
        for (at, (node, _)) in t.nodes.iter().enumerate() {
            if node.id() == env.to {
                out.push([&[at as u8][..], &json].concat());
            }
        }
        let steer = 8 | 16 | (i % 8) as u8 | (((i / 8) % 8) as u8) << 5;
        out.push([&[steer][..], &json].concat());
    }
    out.sort();
    out.dedup();
    out
}

/// The traffic cut into consecutive batches of a few envelopes.
fn peer_batches() -> Vec<Vec<u8>> {
    let traffic = &templates().traffic;
    traffic
        .chunks(5)
        .enumerate()
        .map(|(i, chunk)| {
            let mut v = vec![8 | 16 | (i % 8) as u8];
            v.extend(serde_json::to_vec(chunk).expect("encodes"));
            v
        })
        .collect()
}

/// One input per envelope of the traffic, every value kept (bytes below 0x80), aimed at the
/// receiver's template.
fn peer_values() -> Vec<Vec<u8>> {
    let t = templates();
    let mut out = Vec::new();
    for (i, env) in t.traffic.iter().enumerate() {
        let at = t
            .nodes
            .iter()
            .position(|(n, _)| n.id() == env.to)
            .unwrap_or(0);
        let i = u16::try_from(i).unwrap_or(u16::MAX).to_le_bytes();
        out.push(vec![at as u8, 0, i[0], i[1]]);
    }
    out
}

/// One `visitor_request` input: the flags byte, then the requests.
fn session(flags: u8, requests: &[&str]) -> Vec<u8> {
    let mut v = vec![flags];
    for (i, r) in requests.iter().enumerate() {
        if i > 0 {
            v.push(crate::visitor::REQUEST_SEPARATOR);
        }
        v.extend_from_slice(r.as_bytes());
    }
    v
}

/// Sessions a visitor, a browser, a gate, an operator, an abuser and a peer would have.
fn visitor_requests() -> Vec<Vec<u8>> {
    let mut out = visitor_sessions();
    out.extend(abuse_sessions());
    out.extend(operator_and_peer_sessions());
    out
}

/// The `visitor_request` flag that lets visitors straight in while there is room.
const STRAIGHT: u8 = 1;

/// A JSON `POST` of `body` to `path`.
fn post(path: &str, body: &str) -> String {
    format!("POST {path}\ncontent-type: application/json\n\n{body}")
}

/// A JSON `POST` the target signs as a peer would.
fn signed(path: &str, body: &str) -> String {
    format!("POST {path}\ncontent-type: application/json\nx-fuzz-sign: 1\n\n{body}")
}

/// Visitors through the API and in a browser: the whole visit and its abuses, with and without
/// room on the site.
fn visitor_sessions() -> Vec<Vec<u8>> {
    vec![
        // The whole visit, then the abuses: replay, pass as ticket, ticket as pass.
        session(
            STRAIGHT,
            &[
                &post("/api/join", "{}"),
                &post("/api/checkin", r#"{"ticket":"$T"}"#),
                &post("/api/leave", r#"{"ticket":"$T"}"#),
                "GET /api/pass/verify\nauthorization: Bearer $P\n\n",
                &post("/api/pass/refresh", r#"{"pass":"$P"}"#),
                &post("/api/leave", r#"{"ticket":"$0"}"#),
                &post("/api/checkin", r#"{"ticket":"$P"}"#),
                "GET /api/pass/verify\ncookie: wr_pass=$T\n\n",
            ],
        ),
        // The same with cookies.
        session(
            STRAIGHT,
            &[
                "POST /api/join\n\n",
                "POST /api/checkin\ncookie: wr_ticket=$T\n\n",
                "POST /api/leave\ncookie: a=b; wr_ticket=\"$T\"\n\n",
                "POST /api/pass/refresh\ncookie: wr_pass=$P\n\n",
                "HEAD /api/pass/verify\ncookie: wr_pass=$P\n\n",
                "GET /api/pass/verify\nauthorization: Bearer \n\n",
            ],
        ),
        // A browser on the waiting page: the page, its button, the page again; a button
        // pressed from another site.
        session(
            STRAIGHT,
            &[
                "GET /\naccept: text/html\n\n",
                "POST /\ncontent-type: application/x-www-form-urlencoded\norigin: http://x\nhost: x\n\njoin=1",
                "POST /\nsec-fetch-site: cross-site\n\n",
                "POST /api/join\norigin: null\n\n",
                "GET /some/page?x=1\naccept: text/html,*/*\ncookie: wr_ticket=$T\n\n",
                "HEAD /\naccept: text/html\n\n",
                "GET /\naccept: text/html\ncookie: wr_pass=$P\n\n",
                "GET /\naccept: text/html\ncookie: wr_ticket=$P\n\n",
            ],
        ),
        // Everyone queued (nobody is let out).
        session(
            0,
            &[
                &post("/api/join", ""),
                &post("/api/checkin", r#"{"ticket":"$T"}"#),
                &post("/api/leave", r#"{"ticket":"$T"}"#),
                "GET /\naccept: text/html\ncookie: wr_ticket=$T\n\n",
            ],
        ),
        // One place on the site: the second visitor waits.
        session(
            STRAIGHT | 2,
            &[
                &post("/api/join", "{}"),
                &post("/api/join", "{}"),
                &post("/api/leave", r#"{"ticket":"$0"}"#),
                &post("/api/leave", r#"{"ticket":"$T"}"#),
            ],
        ),
    ]
}

/// Junk requests, and floods from one client with forwarding headers spoofed.
fn abuse_sessions() -> Vec<Vec<u8>> {
    vec![
        // Junk on small body limits.
        session(
            16,
            &[
                "GET /api/join\n\n",
                "POST /nope\n\n",
                "DELETE /api/checkin\n\n",
                "POST /api/checkin\ncontent-type: text/plain\n\n{}",
                &post("/api/checkin", r#"{"ticket":42}"#),
                &post("/api/join", r#"{"admin":true}"#),
                &post("/api/checkin", &format!("{}{{}}", " ".repeat(100))),
                "POST /api/leave\ncontent-type: application/json; charset=utf-8\n\n{\"ticket\":\"\"}",
            ],
        ),
        // A flood from one client behind a balancer, and spoofed forwarding headers.
        session(
            STRAIGHT | 4 | 8,
            &[
                "POST /api/join\nx-forwarded-for: 198.51.100.7\n\n",
                "POST /api/join\nx-forwarded-for: 198.51.100.7\n\n",
                "POST /api/join\nx-forwarded-for: 198.51.100.7\n\n",
                "POST /api/join\nx-forwarded-for: 10.0.0.1, 198.51.100.7\n\n",
                "POST /api/join\nx-forwarded-for: 10.0.0.1\nx-forwarded-for: 198.51.100.7\n\n",
                "POST /api/join\nx-fuzz-client: 2\n\n",
                "GET /\naccept: text/html\nx-forwarded-for: 198.51.100.7\n\n",
            ],
        ),
    ]
}

/// An operator, and peers: forwarded visitor operations, a node asking to join, and real
/// protocol traffic.
fn operator_and_peer_sessions() -> Vec<Vec<u8>> {
    let mut out = vec![
        // An operator.
        session(
            STRAIGHT,
            &[
                "GET /livez\n\n",
                "GET /readyz\n\n",
                "GET /metrics\n\n",
                "GET /api/cluster\n\n",
                "GET /.well-known/jwks.json\n\n",
                "OPTIONS /metrics\n\n",
            ],
        ),
        // A peer forwarding a visitor's check-in and leave, and requests that are not signed.
        session(
            STRAIGHT,
            &[
                &post("/api/join", "{}"),
                &signed(
                    "/peer/visitor/batch",
                    r#"[{"op":"checkin","claims":$C},{"op":"leave","claims":$C}]"#,
                ),
                &signed("/peer/visitor/checkin", r#"{"claims":$C}"#),
                &signed("/peer/visitor/leave", r#"{"ticket":"$T"}"#),
                &post("/peer/messages", "[]"),
                &post("/peer/visitor/batch", r#"[{"op":"leave","claims":$C}]"#),
            ],
        ),
        // A node asking to join.
        session(
            STRAIGHT,
            &[&signed(
                "/peer/messages",
                r#"[{"from":{"id":4242,"incarnation":1,"addr":"http://127.0.0.1:9"},"to":0,"to_incarnation":0,"body":{"JoinRequest":{"contact":{"id":4242,"incarnation":1,"addr":"http://127.0.0.1:9"}}}}]"#,
            )],
        ),
    ];
    // Real protocol traffic, signed, in small batches (the node is id 1, incarnation 1, as is
    // the template cluster's first node).
    let traffic = &templates().traffic;
    for chunk in traffic.chunks(4).take(6) {
        let batch = serde_json::to_string(chunk).expect("encodes");
        out.push(session(STRAIGHT, &[&signed("/peer/messages", &batch)]));
    }
    out
}

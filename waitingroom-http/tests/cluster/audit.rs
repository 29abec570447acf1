//! `waitingroom-node audit` against a server that means it harm
//! (docs/operating.md#auditing-a-cluster-you-do-not-trust): an entry it cannot read, no answer,
//! an endless answer, endless pages, records signed with keys that are not the cluster's. Each
//! ends the audit with a non-zero exit within a minute. The server is a plain TCP listener on
//! 127.0.0.1 in the test.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};

use waitingroom_core::round_records::{Cutoff, RoundRecord};

use crate::harness::*;

/// What the hostile server answers to one request line (`GET /path?query HTTP/1.1`).
enum Answer {
    /// 200 with this JSON body.
    Json(String),
    /// Nothing, ever (the connection stays open).
    Never,
    /// 200 with a body that never ends: `{"rounds": ["aaaa…` for as long as the client reads.
    Endless,
}

/// Serves `answer` on 127.0.0.1 (a thread per connection, for the life of the test binary);
/// returns the base URL.
fn hostile(answer: impl Fn(&str) -> Answer + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let answer = answer.clone();
            std::thread::spawn(move || serve(stream, &*answer));
        }
    });
    url
}

fn serve(mut stream: TcpStream, answer: &dyn Fn(&str) -> Answer) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16_384 {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let line = head.lines().next().unwrap_or("");
    match answer(line) {
        Answer::Json(body) => {
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
        }
        Answer::Never => std::thread::sleep(Duration::from_secs(600)),
        Answer::Endless => {
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n\
                  {\"rounds\": [\"",
            );
            let chunk = vec![b'a'; 64 * 1024];
            while stream.write_all(&chunk).is_ok() {}
        }
    }
}

/// Round `round`'s record, signed with `crypto`'s key, following `prev` (a link, or "").
fn record(crypto: &Crypto, round: u64, prev: &str) -> String {
    crypto.sign_record(&RoundRecord {
        round,
        decided_at_ms: 1_000 + round,
        cutoff: Cutoff {
            join_time: 10 + round,
            id: TicketId(round),
            node: NodeId(1),
        },
        admitted: 1,
        root: NodeId(1),
        version: 1,
        prev: prev.to_owned(),
        lottery: false,
        through: 0,
    })
}

/// A cluster's answers: its key set, `page` for the first page of records and none after,
/// no lotteries.
fn cluster_like(crypto: &Crypto, page: Value) -> impl Fn(&str) -> Answer + Send + Sync + 'static {
    let jwks = crypto.jwks().to_string();
    let page = json!({ "rounds": page }).to_string();
    move |line: &str| {
        if line.contains("/.well-known/jwks.json") {
            Answer::Json(jwks.clone())
        } else if line.contains("/api/lotteries") {
            Answer::Json(r#"{"lotteries": []}"#.to_owned())
        } else if line.contains("after=") {
            Answer::Json(r#"{"rounds": []}"#.to_owned())
        } else {
            Answer::Json(page.clone())
        }
    }
}

/// Runs `waitingroom-node audit --url url` with `extra`; the exit status, stdout, stderr and
/// how long it took. The audit is killed past 60 s (the test then fails).
fn audit(url: &str, extra: &[&str]) -> (std::process::ExitStatus, String, String, Duration) {
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .args(["audit", "--url", url])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the audit ran for more than 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    (status, out.join().unwrap(), err.join().unwrap(), took)
}

/// An entry the audit cannot read — junk at the end of a page, or not even a string — is a
/// violation: the page is checked, not dropped, and the audit exits non-zero.
#[test]
fn an_unreadable_record_is_a_violation() {
    let crypto = Crypto::generate();
    let first = record(&crypto, 0, "");
    for junk in [json!("junk"), json!(42), json!({"round": 1})] {
        let url = hostile(cluster_like(&crypto, json!([first.clone(), junk])));
        let (status, out, err, _) = audit(&url, &[]);
        assert!(!status.success(), "{junk}: {out}{err}");
        assert!(out.contains("rounds checked: 1"), "{junk}: {out}");
        assert!(out.contains("violations: 1"), "{junk}: {out}");
        assert!(
            out.contains("VIOLATION: BadRecord { index: 1"),
            "{junk}: {out}"
        );
    }
    // The same page without the junk audits clean.
    let url = hostile(cluster_like(&crypto, json!([first])));
    let (status, out, err, _) = audit(&url, &[]);
    assert!(status.success(), "{out}{err}");
}

/// A server that never answers, one whose answer never ends, and one that pages forever: each
/// ends the audit with an error that says which limit it hit, well within a minute.
#[test]
fn a_server_that_never_answers_or_never_ends_stops_the_audit() {
    let url = hostile(|_: &str| Answer::Never);
    let (status, _, err, took) = audit(&url, &["--timeout-ms", "2000"]);
    assert!(!status.success(), "{err}");
    assert!(err.contains("cannot reach"), "{err}");
    assert!(took < Duration::from_secs(30), "{took:?}");

    let crypto = Crypto::generate();
    let jwks = crypto.jwks().to_string();
    let url = hostile(move |line: &str| {
        if line.contains("jwks.json") {
            Answer::Json(jwks.clone())
        } else {
            Answer::Endless
        }
    });
    let (status, _, err, _) = audit(&url, &[]);
    assert!(!status.success(), "{err}");
    assert!(err.contains("larger than --max-body-bytes"), "{err}");

    // Every page holds one more round than asked for: pages without end.
    let signer = Crypto::generate();
    let jwks = signer.jwks().to_string();
    let url = hostile(move |line: &str| {
        if line.contains("jwks.json") {
            return Answer::Json(jwks.clone());
        }
        let after = line
            .split(['&', '?', ' '])
            .find_map(|p| p.strip_prefix("after="))
            .and_then(|a| a.parse::<u64>().ok());
        let next = after.map_or(0, |a| a + 1);
        Answer::Json(json!({ "rounds": [record(&signer, next, "")] }).to_string())
    });
    let (status, _, err, _) = audit(&url, &[]);
    assert!(!status.success(), "{err}");
    assert!(err.contains("more than --max-pages (1000)"), "{err}");
    let (status, _, err, _) = audit(&url, &["--max-records", "20"]);
    assert!(!status.success(), "{err}");
    assert!(err.contains("more than --max-records (20)"), "{err}");
}

/// Records signed with keys that are not the cluster's, and served with those keys: with the
/// cluster's keys pinned (`--jwks`, a key set or a single key) every one is a violation;
/// without, the audit says on stderr and in its JSON that it trusted the served keys.
#[test]
fn pinned_keys_catch_records_signed_with_foreign_keys() {
    let cluster = Crypto::generate();
    let foreign = Crypto::generate();
    let first = record(&foreign, 0, "");
    let second = record(&foreign, 1, &waitingroom_core::round_records::link(&first));
    let url = hostile(cluster_like(&foreign, json!([first, second])));
    let dir = std::env::temp_dir().join(format!("wr-audit-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let set = dir.join("jwks.json");
    std::fs::write(&set, cluster.jwks().to_string()).unwrap();
    let one = dir.join("jwk.json");
    std::fs::write(&one, cluster.public_jwk().to_string()).unwrap();
    for file in [&set, &one] {
        let (status, out, err, _) = audit(&url, &["--jwks", file.to_str().unwrap(), "--json"]);
        assert!(!status.success(), "{out}{err}");
        let report: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["violations"], 2, "{report}");
        assert_eq!(report["rounds"], 0, "{report}");
        assert_eq!(report["keys"]["trusted"], "pinned", "{report}");
        assert!(!err.contains("trusting the keys"), "{err}");
    }
    let (status, out, err, _) = audit(&url, &["--json"]);
    assert!(status.success(), "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["keys"]["trusted"], "served by the audited cluster");
    assert_eq!(report["rounds"], 2, "{report}");
    assert!(err.contains("trusting the keys"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

//! Fills in the round records this node missed, from its peers, so that any node answers
//! `GET /api/rounds` for the whole cluster (docs/operating.md#fairness-records).
//!
//! The protocol brings a node the record of every round it lets anyone out under, and of the
//! rounds whose results reach it; a node that was stopped, cut off or restarting while rounds
//! let visitors out elsewhere, and let nobody out under them, never hears of those
//! (waitingroom-distributed/README.md#fairness-records). Its published list then has a hole:
//! a record naming a predecessor it does not hold (a broken chain to an auditor), or passes
//! naming rounds it never published. So every few seconds the node asks one member in turn for
//! the records after the point where its own list wants filling in
//! ([`RoundLog::sync_point`](crate::round_log::RoundLog::sync_point)), over the peer client, and
//! keeps those signed with the cluster key ([`RoundLog::keep_signed`]); a record newer than
//! any the node knew moves its chain on, as a restart from the rounds log does. A hole no
//! member fills after a few asks is left (the list shows it, as it must).

use std::sync::Arc;
use std::time::Duration;

use crate::round_log::RoundLog;

use super::App;

/// How often a node asks a peer for the records it misses.
const SYNC_EVERY: Duration = Duration::from_secs(2);

/// Records asked for at once (about 0.5 KB each).
const SYNC_LIMIT: usize = 200;

/// Largest answer read.
const SYNC_BODY_MAX: usize = 1 << 20;

/// Asks for one hole this many times (each time another member, in turn) before leaving it.
const HOLE_TRIES: u32 = 3;

/// Runs for as long as the process does.
pub async fn run(app: Arc<App>) {
    let mut next_peer = 0usize;
    let mut hole: (Option<u64>, u32) = (None, 0);
    let mut skip_below = None;
    loop {
        tokio::time::sleep(SYNC_EVERY).await;
        let peers: Vec<String> = app.driver.with(|node, _| {
            let me = node.id();
            (node.membership().members.values())
                .filter(|c| c.id != me)
                .map(|c| c.addr.to_string())
                .collect()
        });
        if peers.is_empty() {
            continue;
        }
        let peer = &peers[next_peer % peers.len()];
        next_peer = next_peer.wrapping_add(1);
        let rounds = app.driver.rounds();
        let point = rounds.sync_point(skip_below);
        if point.hole.is_some() && point.hole == hole.0 {
            hole.1 += 1;
            if hole.1 >= HOLE_TRIES {
                skip_below = point.hole;
                continue;
            }
        } else {
            hole = (point.hole, 0);
        }
        match fetch(&app, peer, point.after).await {
            Ok(list) => keep(&app, rounds, &list),
            Err(e) => tracing::debug!(peer, error = %e, "round records: cannot ask the peer"),
        }
    }
}

/// Keeps the records of `list` this node lacks; the node's chain goes on from the newest.
fn keep(app: &App, rounds: &RoundLog, list: &[String]) {
    let new = list
        .iter()
        .filter_map(|jws| rounds.keep_signed(jws))
        .count();
    if new == 0 {
        return;
    }
    tracing::info!(new, "round records: filled in from a peer");
    if let Some((round, link)) = rounds.last() {
        app.driver.with(|node, _| node.resume_records(round, link));
    }
}

/// The records `peer` publishes after round `after` (up to [`SYNC_LIMIT`]).
async fn fetch(app: &App, peer: &str, after: Option<u64>) -> anyhow::Result<Vec<String>> {
    let query = after.map_or(String::new(), |a| format!("&after={a}"));
    let url = format!(
        "{}/api/rounds?limit={SYNC_LIMIT}{query}",
        peer.trim_end_matches('/')
    );
    let mut resp = (app.transport.client().get(&url))
        .timeout(SYNC_EVERY)
        .send()
        .await?
        .error_for_status()?;
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > SYNC_BODY_MAX {
            anyhow::bail!("{url}: answer larger than {SYNC_BODY_MAX} bytes");
        }
        body.extend_from_slice(&chunk);
    }
    let answer: serde_json::Value = serde_json::from_slice(&body)?;
    let list = (answer["rounds"].as_array())
        .ok_or_else(|| anyhow::anyhow!("{url}: no `rounds` list"))?
        .iter()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    Ok(list)
}

//! `waitingroom-node audit`: checks a cluster's published admission records
//! (docs/operating.md#fairness-records) — signatures against its keys, the hash chain, round
//! numbers, cutoffs that never go back — and passes visitors hold against them (each covered by the
//! round it names, by no earlier one, or one of the places for straight-through joins that
//! round granted), with `waitingroom_core::round_records::audit`; and its
//! lotteries (docs/operating.md#random-queueing): each revealed seed against its commitment, and
//! each lottery pass's id against the seed and its draw, with
//! `waitingroom_core::lottery::audit_draws`.
//!
//! The audited cluster may be the adversary
//! (docs/operating.md#auditing-a-cluster-you-do-not-trust): every entry it serves is checked,
//! and one the audit cannot read is a violation, never skipped; every request has a connect and
//! a total timeout, every answer a size cap read as it streams in, and the paging a cap on pages
//! and records, so a server that never answers, answers forever or pages forever ends the audit
//! with an error instead of holding it. The keys come from a file
//! the auditor holds (`--jwks`); without one the audit trusts the key set the cluster serves, and
//! says so.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::Value;

use waitingroom_core::lottery::{self, DrawnPass, LotteryAudit};
use waitingroom_core::round_records::{self, AdmittedPass};
use waitingroom_core::{Jwk, NodeId, QueueKey, VerifyingKeySet};
use waitingroom_http::round_log::claim;

/// Fetch a cluster's round records from one node (its public URL) and check them: every
/// signature against the cluster's keys, the chain of records, the round numbers, and that no
/// round's cutoff goes back; the lotteries' records (a revealed seed is the one committed to);
/// with --passes, that each pass was let out by the round it names and not before its turn, and
/// that a lottery pass's id was drawn from its lottery's seed. Exits non-zero on any violation,
/// on any entry it cannot read, and when the node does not answer in time or answers more than
/// the caps allow.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// A node's (or the balancer's) public base URL.
    #[arg(long, value_name = "URL")]
    url: String,
    /// Passes to check, one JWS per line (`waitingroom-node load --save-passes`).
    #[arg(long, value_name = "FILE")]
    passes: Option<PathBuf>,
    /// The cluster's public keys to check against: a JWK set (`/.well-known/jwks.json` saved
    /// while the cluster was trusted) or one JWK (as `keygen` prints it). Without it the audit
    /// takes the keys the audited node serves, and says so.
    #[arg(long, value_name = "FILE")]
    jwks: Option<PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Longest wait for a connection to the node, ms.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    connect_timeout_ms: u64,
    /// Longest time one request may take, its whole answer read, ms.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    timeout_ms: u64,
    /// Longest time the whole audit may take, s.
    #[arg(long, value_name = "S", default_value_t = 300)]
    max_seconds: u64,
    /// Largest answer read, bytes (a page of 1,000 records is about 0.5 MB).
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Most pages of records fetched.
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    max_pages: usize,
    /// Most records fetched (each node keeps 100,000 by default: `--rounds-kept`).
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    max_records: usize,
}

/// Runs `waitingroom-node audit`, within `--max-seconds`.
pub async fn run(args: AuditArgs) -> anyhow::Result<()> {
    let limit = Duration::from_secs(args.max_seconds);
    match tokio::time::timeout(limit, audit(&args)).await {
        Ok(done) => done,
        Err(_) => bail!(
            "the audit did not finish within --max-seconds ({} s)",
            args.max_seconds
        ),
    }
}

async fn audit(args: &AuditArgs) -> anyhow::Result<()> {
    let base = args.url.trim_end_matches('/');
    let fetch = Fetch::new(args)?;
    let keys = Keys::get(&fetch, base, args.jwks.as_ref()).await?;
    if let Keys::Served { url, .. } = &keys {
        eprintln!(
            "waitingroom-node audit: trusting the keys {url} serves; the audit cannot tell them \
             from keys the audited cluster made up (pin the keys with --jwks FILE)"
        );
    }
    let set = keys.set();
    let records = fetch.records(base).await?;
    let passes = match &args.passes {
        Some(path) => read_passes(path, set)?,
        None => Passes::default(),
    };
    let report = round_records::audit(&records, set, &passes.in_rounds);
    let lotteries = fetch
        .list(&format!("{base}/api/lotteries"), "lotteries")
        .await?;
    let draws = lottery::audit_draws(&lotteries, set, &passes.drawn);
    let violations = report.violations().count();
    let draw_violations = draws.findings.iter().filter(|f| f.is_violation()).count();
    let total = violations + draw_violations;
    if args.json {
        println!("{}", json_report(&report, &draws, &passes, &keys, total));
    } else {
        print_text(&report, &draws, &passes, &keys, total);
    }
    if total > 0 {
        bail!("{total} violations in the round and lottery records");
    }
    Ok(())
}

/// The keys the audit checks against, and where they come from.
enum Keys {
    /// From the auditor's file.
    Pinned { file: PathBuf, set: VerifyingKeySet },
    /// From the audited node itself.
    Served { url: String, set: VerifyingKeySet },
}

impl Keys {
    async fn get(fetch: &Fetch, base: &str, file: Option<&PathBuf>) -> anyhow::Result<Keys> {
        if let Some(file) = file {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let set = key_set(&text)
                .map_err(|e| anyhow::anyhow!("{}: not a JWK set nor a JWK: {e}", file.display()))?;
            return Ok(Keys::Pinned {
                file: file.clone(),
                set,
            });
        }
        let url = format!("{base}/.well-known/jwks.json");
        let jwks = fetch.json(&url).await?;
        let set = VerifyingKeySet::from_jwks_json(&jwks.to_string())
            .map_err(|e| anyhow::anyhow!("{url}: not a key set: {e}"))?;
        Ok(Keys::Served { url, set })
    }

    fn set(&self) -> &VerifyingKeySet {
        match self {
            Keys::Pinned { set, .. } | Keys::Served { set, .. } => set,
        }
    }

    /// Where the keys come from, as the report says it.
    fn source(&self) -> Value {
        let kids: Vec<&str> = self.set().kids().collect();
        match self {
            Keys::Pinned { file, .. } => serde_json::json!({
                "trusted": "pinned", "file": file.display().to_string(), "kids": kids,
            }),
            Keys::Served { url, .. } => serde_json::json!({
                "trusted": "served by the audited cluster", "url": url, "kids": kids,
            }),
        }
    }
}

/// A JWK set, or a single JWK.
fn key_set(text: &str) -> Result<VerifyingKeySet, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if value.get("keys").is_some() {
        return VerifyingKeySet::from_jwks_json(text).map_err(|e| e.to_string());
    }
    let jwk: Jwk = serde_json::from_value(value).map_err(|e| e.to_string())?;
    VerifyingKeySet::from_jwk(&jwk).map_err(|e| e.to_string())
}

fn json_report(
    report: &round_records::Audit,
    draws: &LotteryAudit,
    passes: &Passes,
    keys: &Keys,
    total: usize,
) -> Value {
    let findings: Vec<String> = report.findings.iter().map(|f| format!("{f:?}")).collect();
    let lottery_findings: Vec<String> = draws.findings.iter().map(|f| format!("{f:?}")).collect();
    serde_json::json!({
        "keys": keys.source(),
        "rounds": report.rounds,
        "passes": report.passes,
        "passes_without_round": passes.without_round,
        "lotteries": draws.lotteries,
        "lotteries_revealed": draws.revealed,
        "lottery_passes": passes.drawn.len(),
        "draws_verified": draws.draws_verified,
        "violations": total,
        "findings": findings,
        "lottery_findings": lottery_findings,
    })
}

fn print_text(
    report: &round_records::Audit,
    draws: &LotteryAudit,
    passes: &Passes,
    keys: &Keys,
    violations: usize,
) {
    match keys {
        Keys::Pinned { file, .. } => println!("keys: pinned ({})", file.display()),
        Keys::Served { url, .. } => println!("keys: trusted as served ({url})"),
    }
    println!("rounds checked: {}", report.rounds);
    println!("passes checked: {}", report.passes);
    println!(
        "passes naming no round (bypass, or let through while the site had no limit or the room was in passthrough): {}",
        passes.without_round
    );
    println!(
        "lotteries: {} ({} revealed); lottery passes: {}, drawn from their seed: {}",
        draws.lotteries,
        draws.revealed,
        passes.drawn.len(),
        draws.draws_verified
    );
    println!("violations: {violations}");
    let label = |violation: bool| if violation { "VIOLATION" } else { "note" };
    for f in &report.findings {
        println!("  {}: {f:?}", label(f.is_violation()));
    }
    for f in &draws.findings {
        println!("  {}: {f:?}", label(f.is_violation()));
    }
}

/// The passes of a file, as the audit takes them.
#[derive(Debug, Default)]
struct Passes {
    /// Passes that name their round, with their holder's queue key (its node unknown: 0).
    in_rounds: Vec<AdmittedPass>,
    /// Valid passes that name none.
    without_round: usize,
    /// Passes of lottery visitors: their id and draw.
    drawn: Vec<DrawnPass>,
}

/// Reads and verifies (signature, and valid when issued) the passes in `path`.
fn read_passes(path: &PathBuf, keys: &VerifyingKeySet) -> anyhow::Result<Passes> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut passes = Passes::default();
    for (n, token) in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let issued = claim(token, "issued_at").unwrap_or(0);
        let pass = keys
            .verify_pass(token, issued)
            .map_err(|e| anyhow::anyhow!("{} line {}: not a pass: {e}", path.display(), n + 1))?;
        let key = QueueKey {
            join_time: pass.queue_join_time,
            ticket: pass.id,
            node: NodeId(0),
        };
        if let Some(draw) = pass.draw {
            passes.drawn.push(DrawnPass { id: pass.id, draw });
        }
        match pass.round {
            Some(round) => passes.in_rounds.push(AdmittedPass {
                round,
                decided_at: pass.eviction_time,
                key,
            }),
            None => passes.without_round += 1,
        }
    }
    Ok(passes)
}

/// Requests to the audited node, each within the timeouts and its answer within the size cap.
struct Fetch {
    client: reqwest::Client,
    max_body: usize,
    max_pages: usize,
    max_records: usize,
}

impl Fetch {
    fn new(args: &AuditArgs) -> anyhow::Result<Fetch> {
        let client = waitingroom_http::crypto::tls::client_builder()
            .connect_timeout(Duration::from_millis(args.connect_timeout_ms))
            .timeout(Duration::from_millis(args.timeout_ms))
            .build()?;
        Ok(Fetch {
            client,
            max_body: args.max_body_bytes,
            max_pages: args.max_pages,
            max_records: args.max_records,
        })
    }

    /// Every record the node publishes, page by page, each page from the highest round number
    /// the one before holds. An entry that is not a record's (not a string, no round number)
    /// is kept, for the audit to count as a violation; it never ends the paging early.
    async fn records(&self, base: &str) -> anyhow::Result<Vec<String>> {
        let mut records: Vec<String> = Vec::new();
        let mut after: Option<u64> = None;
        for _ in 0..self.max_pages {
            let query = after.map_or(String::new(), |a| format!("&after={a}"));
            let url = format!("{base}/api/rounds?limit=1000{query}");
            let got = self.list(&url, "rounds").await?;
            if records.len().saturating_add(got.len()) > self.max_records {
                bail!(
                    "{base}/api/rounds: more than --max-records ({}) records; the audit stops \
                     rather than hold them all",
                    self.max_records
                );
            }
            let last = got.iter().filter_map(|jws| round_of(jws)).max();
            let done = got.is_empty() || last.is_none_or(|l| after.is_some_and(|a| l <= a));
            records.extend(got);
            if done {
                return Ok(records);
            }
            after = last;
        }
        bail!(
            "{base}/api/rounds: more than --max-pages ({}) pages; the audit stops rather than \
             page forever",
            self.max_pages
        )
    }

    /// The entries of the list `field` of the JSON object `url` answers: strings as they
    /// are, anything else as its JSON text (which no check accepts as a record).
    async fn list(&self, url: &str, field: &str) -> anyhow::Result<Vec<String>> {
        let answer = self.json(url).await?;
        let list = answer[field]
            .as_array()
            .with_context(|| format!("{url}: the answer has no `{field}` list"))?;
        Ok(list
            .iter()
            .map(|r| r.as_str().map_or_else(|| r.to_string(), str::to_owned))
            .collect())
    }

    /// `url`'s answer as JSON, read as it streams in and refused past the size cap.
    async fn json(&self, url: &str) -> anyhow::Result<Value> {
        let mut resp = self
            .client
            .get(url)
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        let status = resp.status();
        if !status.is_success() {
            bail!("{url} answered {status}");
        }
        let too_large = || {
            anyhow::anyhow!(
                "{url}: the answer is larger than --max-body-bytes ({} bytes)",
                self.max_body
            )
        };
        if resp
            .content_length()
            .is_some_and(|n| n > self.max_body as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .with_context(|| format!("{url}: the answer did not come whole in time"))?
        {
            if body.len() + chunk.len() > self.max_body {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).with_context(|| format!("{url}: not JSON"))
    }
}

/// The round number a record's claims carry (unverified: the audit checks it).
fn round_of(jws: &str) -> Option<u64> {
    claim(jws, "round")
}

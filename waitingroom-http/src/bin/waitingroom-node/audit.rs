//! `waitingroom-node audit`: checks a cluster's published admission records
//! (docs/operating.md#fairness-records) — signatures against its JWKS, the hash chain, round
//! numbers, cutoffs that never go back — and passes visitors hold against them (each covered by the
//! round it names, by no earlier one), with `waitingroom_core::round_records::audit`; and its
//! lotteries (docs/operating.md#random-queueing): each revealed seed against its commitment, and
//! each lottery pass's id against the seed and its draw, with
//! `waitingroom_core::lottery::audit_draws`.

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::Value;
use std::path::PathBuf;

use waitingroom_core::lottery::{self, DrawnPass, LotteryAudit};
use waitingroom_core::round_records::{self, AdmittedPass, Finding};
use waitingroom_core::{NodeId, QueueKey, VerifyingKeySet};
use waitingroom_http::round_log::claim;

/// Fetch a cluster's round records from one node (its public URL) and check them: every
/// signature against the cluster's published keys, the chain of records, the round numbers,
/// and that no round's cutoff goes back; the lotteries' records (a revealed seed is the one
/// committed to); with --passes, that each pass was let out by the round it names and not
/// before its turn, and that a lottery pass's id was drawn from its lottery's seed. Exits
/// non-zero on any violation.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// A node's (or the balancer's) public base URL.
    #[arg(long, value_name = "URL")]
    url: String,
    /// Passes to check, one JWS per line (`waitingroom-node load --save-passes`).
    #[arg(long, value_name = "FILE")]
    passes: Option<PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Runs `waitingroom-node audit`.
pub async fn run(args: AuditArgs) -> anyhow::Result<()> {
    let base = args.url.trim_end_matches('/');
    let client = waitingroom_http::crypto::tls::client_builder().build()?;
    let jwks_url = format!("{base}/.well-known/jwks.json");
    let jwks = get(&client, &jwks_url).await?;
    let keys = VerifyingKeySet::from_jwks_json(&jwks.to_string())
        .map_err(|e| anyhow::anyhow!("{jwks_url}: not a key set: {e}"))?;
    let records = fetch_records(&client, base).await?;
    let passes = match &args.passes {
        Some(path) => read_passes(path, &keys)?,
        None => Passes::default(),
    };
    let report = round_records::audit(&records, &keys, &passes.in_rounds);
    let lotteries = fetch_list(&client, &format!("{base}/api/lotteries"), "lotteries").await?;
    let draws = lottery::audit_draws(&lotteries, &keys, &passes.drawn);
    let violations: Vec<&Finding> = report.violations().collect();
    let draw_violations = draws.findings.iter().filter(|f| f.is_violation()).count();
    let total = violations.len() + draw_violations;
    if args.json {
        let findings: Vec<String> = report.findings.iter().map(|f| format!("{f:?}")).collect();
        let lottery_findings: Vec<String> =
            draws.findings.iter().map(|f| format!("{f:?}")).collect();
        let out = serde_json::json!({
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
        });
        println!("{out}");
    } else {
        print_text(&report, &draws, &passes, total);
    }
    if total > 0 {
        bail!("{total} violations in the round and lottery records");
    }
    Ok(())
}

fn print_text(
    report: &round_records::Audit,
    draws: &LotteryAudit,
    passes: &Passes,
    violations: usize,
) {
    println!("rounds checked: {}", report.rounds);
    println!("passes checked: {}", report.passes);
    println!(
        "passes naming no round (let straight through, or bypass): {}",
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
            Some(round) => passes.in_rounds.push(AdmittedPass { round, key }),
            None => passes.without_round += 1,
        }
    }
    Ok(passes)
}

/// Every record the node publishes, page by page.
async fn fetch_records(client: &reqwest::Client, base: &str) -> anyhow::Result<Vec<String>> {
    let mut records: Vec<String> = Vec::new();
    let mut after: Option<u64> = None;
    loop {
        let query = after.map_or(String::new(), |a| format!("?after={a}"));
        let got = fetch_list(client, &format!("{base}/api/rounds{query}"), "rounds").await?;
        let Some(last) = got.last().and_then(|jws| round_of(jws)) else {
            return Ok(records);
        };
        records.extend(got);
        if after.is_some_and(|a| last <= a) {
            return Ok(records);
        }
        after = Some(last);
    }
}

/// The strings of the list `field` of the JSON object `url` answers.
async fn fetch_list(
    client: &reqwest::Client,
    url: &str,
    field: &str,
) -> anyhow::Result<Vec<String>> {
    let answer = get(client, url).await?;
    let list = answer[field]
        .as_array()
        .with_context(|| format!("{url}: the answer has no `{field}` list"))?;
    Ok(list
        .iter()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect())
}

/// The round number a record's claims carry (unverified: the audit checks it).
fn round_of(jws: &str) -> Option<u64> {
    claim(jws, "round")
}

async fn get(client: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let resp = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    let status = resp.status();
    if !status.is_success() {
        bail!("{url} answered {status}");
    }
    resp.json()
        .await
        .with_context(|| format!("{url}: not JSON"))
}

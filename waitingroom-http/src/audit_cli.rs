//! `waitingroom-node audit`: checks a cluster's published admission records (README,
//! "Fairness records") — signatures against its JWKS, the hash chain, round numbers, cutoffs
//! that never go back — and passes visitors hold against them (each covered by the round it
//! names, by no earlier one), with `waitingroom_core::rounds::audit`.

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::Value;
use std::path::PathBuf;

use waitingroom_core::rounds::{self, AdmittedPass, Finding};
use waitingroom_core::{NodeId, QueueKey, VerifyingKeySet};
use waitingroom_http::rounds::claim;

/// Fetch a cluster's round records from one node (its public URL) and check them: every
/// signature against the cluster's published keys, the chain of records, the round numbers,
/// and that no round's cutoff goes back; with --passes, that each pass was let out by the
/// round it names and not before its turn. Exits non-zero on any violation.
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
    let client = waitingroom_http::tls::client_builder().build()?;
    let jwks_url = format!("{base}/.well-known/jwks.json");
    let jwks = get(&client, &jwks_url).await?;
    let keys = VerifyingKeySet::from_jwks_json(&jwks.to_string())
        .map_err(|e| anyhow::anyhow!("{jwks_url}: not a key set: {e}"))?;
    let records = fetch_records(&client, base).await?;
    let passes = match &args.passes {
        Some(path) => read_passes(path, &keys)?,
        None => Passes::default(),
    };
    let report = rounds::audit(&records, &keys, &passes.in_rounds);
    let violations: Vec<&Finding> = report.violations().collect();
    if args.json {
        let findings: Vec<String> = report.findings.iter().map(|f| format!("{f:?}")).collect();
        let out = serde_json::json!({
            "rounds": report.rounds,
            "passes": report.passes,
            "passes_without_round": passes.without_round,
            "violations": violations.len(),
            "findings": findings,
        });
        println!("{out}");
    } else {
        println!("rounds checked: {}", report.rounds);
        println!("passes checked: {}", report.passes);
        println!(
            "passes naming no round (let straight through, or bypass): {}",
            passes.without_round
        );
        println!("violations: {}", violations.len());
        for f in &report.findings {
            let kind = if f.is_violation() {
                "VIOLATION"
            } else {
                "note"
            };
            println!("  {kind}: {f:?}");
        }
    }
    if !violations.is_empty() {
        bail!("{} violations in the round records", violations.len());
    }
    Ok(())
}

/// The passes of a file, as the audit takes them.
#[derive(Debug, Default)]
struct Passes {
    /// Passes that name their round, with their holder's queue key (its node unknown: 0).
    in_rounds: Vec<AdmittedPass>,
    /// Valid passes that name none.
    without_round: usize,
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
        let page = get(client, &format!("{base}/api/rounds{query}")).await?;
        let got: Vec<String> = page["rounds"]
            .as_array()
            .context("the answer has no `rounds` list")?
            .iter()
            .filter_map(|r| r.as_str().map(str::to_owned))
            .collect();
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

//! `waitingroom-node bench-checkin`: how many check-ins per second one node serves.
//!
//! C workers each join once, then check in back to back with the ticket they were last given,
//! for S seconds, over kept-alive connections. Reports requests/s and latency percentiles.
//! Run it against a node that queues visitors (e.g. `--admit-straight-through false
//! --target-on-site 1`) so check-ins do the full work: verify, rank, re-sign.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use serde::Serialize;
use serde_json::Value;

use crate::latency::{max_ms, micros_since, percentile_ms};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Base URL of the node.
    #[arg(long)]
    url: String,
    /// Join at this node instead (then every check-in at --url is forwarded to it: measures
    /// the any-node-serves-any-visitor path).
    #[arg(long)]
    join_url: Option<String>,
    /// Concurrent visitors (one connection each).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// How long to measure, seconds.
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    concurrency: usize,
    duration_s: f64,
    requests: u64,
    errors: u64,
    requests_per_s: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

async fn join(client: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    let v: Value = client
        .post(format!("{url}/api/join"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    v["ticket"]
        .as_str()
        .map(str::to_owned)
        .context("join answer without a ticket")
}

/// Joins `--concurrency` visitors, has each check in back to back for `--duration-s`, and
/// reports requests/s and latency.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.concurrency == 0 || args.duration_s == 0 {
        bail!("--concurrency and --duration-s must be at least 1");
    }
    let url = args.url.trim_end_matches('/').to_owned();
    let client = waitingroom_http::crypto::tls::client_builder()
        .no_proxy()
        .pool_max_idle_per_host(args.concurrency)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(10))
        .build()?;
    let join_url = args
        .join_url
        .as_deref()
        .map_or_else(|| url.clone(), |u| u.trim_end_matches('/').to_owned());
    let mut tickets = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        tickets.push(join(&client, &join_url).await.context("join failed")?);
    }
    eprintln!(
        "{} visitors joined; checking in for {} s",
        args.concurrency, args.duration_s
    );
    let start = Instant::now();
    let end = start + Duration::from_secs(args.duration_s);
    let checkin_url = format!("{url}/api/checkin");
    let tasks: Vec<_> = tickets
        .into_iter()
        .map(|ticket| {
            tokio::spawn(check_in_until(
                client.clone(),
                checkin_url.clone(),
                ticket,
                end,
            ))
        })
        .collect();
    let mut all: Vec<u32> = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await?;
        all.extend(l);
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    print(
        &args,
        &Report {
            concurrency: args.concurrency,
            duration_s: elapsed,
            requests: all.len() as u64,
            errors,
            requests_per_s: all.len() as f64 / elapsed,
            p50_ms: percentile_ms(&all, 0.50),
            p90_ms: percentile_ms(&all, 0.90),
            p99_ms: percentile_ms(&all, 0.99),
            max_ms: max_ms(&all),
        },
    )
}

/// One visitor checking in back to back with the ticket it was last given, until `end`:
/// each request's latency (µs) and how many failed.
async fn check_in_until(
    client: reqwest::Client,
    url: String,
    mut ticket: String,
    end: Instant,
) -> (Vec<u32>, u64) {
    let mut lat_us: Vec<u32> = Vec::with_capacity(100_000);
    let mut errors = 0u64;
    while Instant::now() < end {
        let t0 = Instant::now();
        let r = client
            .post(&url)
            .json(&serde_json::json!({ "ticket": ticket }))
            .send()
            .await;
        let ok = match r {
            Ok(resp) if resp.status().is_success() => match resp.json::<Value>().await {
                Ok(v) => {
                    if let Some(t) = v["ticket"].as_str() {
                        ticket = t.to_owned();
                    }
                    true
                }
                Err(_) => false,
            },
            _ => false,
        };
        lat_us.push(micros_since(t0));
        if !ok {
            errors += 1;
        }
    }
    (lat_us, errors)
}

fn print(args: &BenchArgs, r: &Report) -> anyhow::Result<()> {
    if args.json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        println!(
            "check-ins: {} in {:.1} s = {:.0}/s with {} concurrent; errors {}; latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            r.requests,
            r.duration_s,
            r.requests_per_s,
            r.concurrency,
            r.errors,
            r.p50_ms,
            r.p90_ms,
            r.p99_ms,
            r.max_ms
        );
    }
    Ok(())
}

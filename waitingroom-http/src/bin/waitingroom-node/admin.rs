//! `waitingroom-node admin`: the admin API (docs/operating.md#live-settings,
//! docs/operating.md#scheduled-events) from a shell.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use serde_json::{Map, Value};
use waitingroom_http::crypto::tls::{InternalTls, TlsFiles};

/// The admin API of a running cluster through one node's internal listener: read or change
/// the live settings, schedule events, mint bypass passes. A change made at any node applies to
/// every node after the next eviction round.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// A node's internal base URL (its --internal-listen, e.g. http://10.0.0.5:9080).
    #[arg(long, env = "WAITINGROOM_ADMIN_URL", value_name = "URL")]
    url: String,
    /// File holding the admin token (the node's --admin-token-file).
    #[arg(long, env = "WAITINGROOM_ADMIN_TOKEN_FILE", value_name = "PATH")]
    token_file: PathBuf,
    /// With mutual TLS on the internal listener: a client certificate from the cluster's CA,
    /// its key, and the CA (PEM files, as the node's --internal-tls-*).
    #[arg(long, num_args = 3, value_names = ["CERT", "KEY", "CA"])]
    tls: Option<Vec<PathBuf>>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Print the live settings (JSON), with their version and whether a round confirmed them.
    Get,
    /// Change settings: KEY=VALUE... e.g. `set target_on_site=500 mode=queue_all`,
    /// `set target_on_site=unlimited`, `set new_users_per_minute=null`. Keys: target_on_site,
    /// new_users_per_minute, mode (normal, queue_all, passthrough, reject), queueing_method
    /// (fifo, random), pass_expiry_ms, session_duration_ms. Prints the settings after the
    /// change.
    Set {
        /// KEY=VALUE pairs.
        #[arg(value_name = "KEY=VALUE", required = true)]
        changes: Vec<String>,
    },
    /// Scheduled events: list, add or delete.
    Events {
        #[command(subcommand)]
        action: EventAction,
    },
    /// Mint a bypass pass for staff or monitoring (no place on the site, never extended; revoke
    /// with POST /api/pass/release). Prints it as JSON (`pass`: the token to send as the pass
    /// cookie or a bearer token).
    Pass {
        /// Who it is for (logged with the pass's id).
        label: String,
        /// How long it lasts: N with s, m or h (at most 720h). Default: 24h.
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
    },
    /// The majority rule's voters (docs/operating.md#lost-majority; `/api/cluster` shows them).
    Voters {
        #[command(subcommand)]
        action: VotersAction,
    },
}

#[derive(Debug, Subcommand)]
enum VotersAction {
    /// Make this node's members the voters: the way out when a cluster lost its majority (a
    /// 3-node cluster that lost two nodes). Only if the nodes left out are gone for good: one
    /// alive on the other side of a cut may still let visitors in.
    Reset {
        /// Required: you checked that the nodes left out are gone.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
enum EventAction {
    /// Print the events (JSON), each with its phase now.
    List,
    /// Schedule an event. Times are ms since the epoch, or from now: `+90s`, `+15m`, `+2h`.
    /// Before --start visitors who join are pre-queued (from --prequeue-start); at the start
    /// they are let out first, in a random order with --shuffle. KEY=VALUE settings
    /// (target_on_site, new_users_per_minute, mode, queueing_method) apply from the
    /// pre-queue to --end.
    Add(EventArgs),
    /// Delete an event.
    Delete {
        /// The event's name.
        name: String,
    },
}

/// An event to schedule (`events add`).
#[derive(Debug, Args)]
struct EventArgs {
    /// The event's name (letters, digits, `-`, `_`).
    name: String,
    /// When visitors start to be let out.
    #[arg(long, value_name = "TIME")]
    start: String,
    /// When the event's settings stop applying.
    #[arg(long, value_name = "TIME")]
    end: String,
    /// When the pre-queue opens (default: the start, no pre-queue).
    #[arg(long, value_name = "TIME")]
    prequeue_start: Option<String>,
    /// Let pre-queued visitors out in a random order.
    #[arg(long)]
    shuffle: bool,
    /// Settings that apply during the event.
    #[arg(value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

/// Runs `waitingroom-node admin`.
pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| format!("cannot read {}", args.token_file.display()))?;
    let base = args.url.trim_end_matches('/');
    let client = match args.tls.as_deref() {
        Some([cert, key, ca]) => {
            let files = TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            };
            let tls = InternalTls::load(&files).map_err(|e| anyhow::anyhow!("--tls: {e}"))?;
            waitingroom_http::crypto::tls::client_builder()
                .tls_backend_preconfigured(tls.client)
                .build()?
        }
        _ => waitingroom_http::crypto::tls::client_builder().build()?,
    };
    let settings = format!("{base}/admin/settings");
    let events = format!("{base}/admin/events");
    let (req, url) = match &args.action {
        Action::Get => (client.get(&settings), settings),
        Action::Set { changes } => (client.patch(&settings).json(&patch(changes)?), settings),
        Action::Events { action } => match action {
            EventAction::List => (client.get(&events), events),
            EventAction::Delete { name } => {
                let url = format!("{events}/{name}");
                (client.delete(&url), url)
            }
            EventAction::Add(add) => (client.post(&events).json(&event(add, now_ms())?), events),
        },
        Action::Pass { label, expires_in } => {
            let url = format!("{base}/admin/passes");
            let mut body = serde_json::json!({ "label": label });
            if let Some(d) = expires_in {
                body["expires_in_ms"] = time(&format!("+{d}"), 0)?.into();
            }
            (client.post(&url).json(&body), url)
        }
        Action::Voters {
            action: VotersAction::Reset { yes },
        } => {
            if !yes {
                bail!("voters reset: add --yes once you checked the nodes left out are gone");
            }
            let url = format!("{base}/admin/voters/reset");
            let body = serde_json::json!({ "confirm": true });
            (client.post(&url).json(&body), url)
        }
    };
    let resp = req
        .bearer_auth(token.trim())
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let why = body["error"].as_str().unwrap_or("no explanation");
        bail!("{url} answered {status}: {why}");
    }
    println!("{}", serde_json::to_string_pretty(&body)?);
    if body["confirmed"] == false {
        eprintln!(
            "note: no round confirmed the change yet; it is in force at this node and reaches \
             the others with the next round (check again with `get`)"
        );
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The JSON body of `events add`, with times relative to `now`.
fn event(add: &EventArgs, now: u64) -> anyhow::Result<Value> {
    let mut body = serde_json::json!({
        "name": add.name,
        "start_ms": time(&add.start, now)?,
        "end_ms": time(&add.end, now)?,
        "shuffle_at_start": add.shuffle,
        "settings": patch(&add.settings)?,
    });
    if let Some(t) = &add.prequeue_start {
        body["prequeue_start_ms"] = time(t, now)?.into();
    }
    Ok(body)
}

/// A time: ms since the epoch, or `+N` with `s`, `m` or `h` from `now`.
fn time(text: &str, now: u64) -> anyhow::Result<u64> {
    let bad = || anyhow::anyhow!("`{text}`: expected ms since the epoch or +N[s|m|h]");
    let Some(rel) = text.strip_prefix('+') else {
        return text.parse().map_err(|_| bad());
    };
    let (n, unit) = rel.split_at(rel.len().saturating_sub(1));
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    let n: u64 = n.parse().map_err(|_| bad())?;
    Ok(now + n * ms)
}

/// The JSON object of `KEY=VALUE` pairs: numbers and null as JSON, anything else a string.
fn patch(changes: &[String]) -> anyhow::Result<Value> {
    let mut fields = Map::new();
    for change in changes {
        let Some((key, value)) = change.split_once('=') else {
            bail!("`{change}`: expected KEY=VALUE");
        };
        let value = match value.trim() {
            "null" => Value::Null,
            v => v
                .parse::<u64>()
                .map_or_else(|_| Value::String(v.to_owned()), Value::from),
        };
        fields.insert(key.trim().to_owned(), value);
    }
    Ok(Value::Object(fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_become_a_json_patch() {
        let p = patch(&[
            "target_on_site=500".into(),
            "mode=queue_all".into(),
            "new_users_per_minute=null".into(),
            "target_on_site=unlimited".into(),
        ])
        .unwrap();
        assert_eq!(
            p,
            serde_json::json!({
                "target_on_site": "unlimited", "mode": "queue_all", "new_users_per_minute": null
            })
        );
        assert!(patch(&["mode".into()]).is_err());
    }

    #[test]
    fn event_times_may_be_relative() {
        assert_eq!(time("1700000000000", 5).unwrap(), 1_700_000_000_000);
        assert_eq!(time("+90s", 1_000).unwrap(), 91_000);
        assert_eq!(time("+2m", 0).unwrap(), 120_000);
        assert_eq!(time("+1h", 0).unwrap(), 3_600_000);
        assert!(time("+5d", 0).is_err() && time("soon", 0).is_err() && time("+s", 0).is_err());
        let add = EventArgs {
            name: "sale".into(),
            start: "+1m".into(),
            end: "+1h".into(),
            prequeue_start: Some("+10s".into()),
            shuffle: true,
            settings: vec!["target_on_site=50".into()],
        };
        assert_eq!(
            event(&add, 0).unwrap(),
            serde_json::json!({"name": "sale", "start_ms": 60_000, "end_ms": 3_600_000,
                "prequeue_start_ms": 10_000, "shuffle_at_start": true,
                "settings": {"target_on_site": 50}})
        );
    }
}

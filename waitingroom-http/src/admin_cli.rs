//! `waitingroom-node admin`: the admin API (README, "Live settings") from a shell.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use serde_json::{Map, Value};
use waitingroom_http::tls::{InternalTls, TlsFiles};

/// Read or change the live settings of a running cluster through one node's internal
/// listener. A change made at any node applies to every node after the next eviction round.
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
    /// (fifo), pass_expiry_ms, session_duration_ms. Prints the settings after the change.
    Set {
        /// KEY=VALUE pairs.
        #[arg(value_name = "KEY=VALUE", required = true)]
        changes: Vec<String>,
    },
}

/// Runs `waitingroom-node admin`.
pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| format!("cannot read {}", args.token_file.display()))?;
    let url = format!("{}/admin/settings", args.url.trim_end_matches('/'));
    let client = match args.tls.as_deref() {
        Some([cert, key, ca]) => {
            let files = TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            };
            let tls = InternalTls::load(&files).map_err(|e| anyhow::anyhow!("--tls: {e}"))?;
            waitingroom_http::tls::client_builder()
                .tls_backend_preconfigured(tls.client)
                .build()?
        }
        _ => waitingroom_http::tls::client_builder().build()?,
    };
    let req = match &args.action {
        Action::Get => client.get(&url),
        Action::Set { changes } => client.patch(&url).json(&patch(changes)?),
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
}

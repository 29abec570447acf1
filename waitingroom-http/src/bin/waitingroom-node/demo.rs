//! `waitingroom-node demo`: a working local cluster in one command.
//!
//! Spawns N copies of this binary with `run` (the first starts the cluster, the others join
//! through it) and one with `origin`, prints the URLs, and on Ctrl-C sends every child SIGTERM
//! (they leave the cluster cleanly), then SIGKILL to any that did not stop in time.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use tokio::process::{Child, Command};
use waitingroom_http::crypto::Crypto;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Public port of the first node (visitors); the others follow.
    #[arg(long, default_value_t = 8081)]
    base_port: u16,
    /// Internal port of the first node (peers, /metrics, /api/cluster); the others follow.
    #[arg(long, default_value_t = 9081)]
    internal_base_port: u16,
    /// Port of the demo origin site.
    #[arg(long, default_value_t = 8090)]
    origin_port: u16,
    /// Directory for the cluster key. [default: a new temporary directory]
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,
    /// Extra settings passed to every node, after `--` (e.g. `-- --target-on-site 10`).
    #[arg(last = true)]
    node_args: Vec<String>,
}

/// Children, killed (SIGKILL) on drop whatever happens.
struct Children(Vec<(String, Child)>);

impl Children {
    /// The name of the first child to exit on its own (polled every 250 ms).
    async fn first_exit(&mut self) -> String {
        loop {
            for (name, child) in &mut self.0 {
                if let Ok(Some(_)) = child.try_wait() {
                    return name.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// SIGTERM to every child, then wait up to `grace` before SIGKILL.
    async fn stop(&mut self, grace: Duration) {
        for (_, child) in &self.0 {
            if let Some(pid) = child.id() {
                // `kill` the command, not libc: this crate forbids unsafe code.
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
        }
        let deadline = Instant::now() + grace;
        for (name, child) in &mut self.0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, child.wait()).await {
                Ok(Ok(status)) => eprintln!("{name} stopped ({status})"),
                _ => {
                    let _ = child.start_kill();
                    eprintln!("{name} killed");
                }
            }
        }
    }
}

fn spawn(name: &str, args: &[String]) -> anyhow::Result<(String, Child)> {
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let child = Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {name}"))?;
    Ok((name.to_owned(), child))
}

async fn wait_ready(client: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(r) = client.get(url).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{url} did not become ready within 15 s")
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let key_file = cluster_key(args.dir.clone())?;
    let origin_url = format!("http://127.0.0.1:{}/", args.origin_port);
    let client = waitingroom_http::crypto::tls::client_builder().build()?;
    let mut children = Children(Vec::new());
    if let Err(e) = start_all(&args, &key_file, &origin_url, &client, &mut children).await {
        children.stop(Duration::from_secs(2)).await;
        return Err(e);
    }
    println!("waitingroom demo is running (key: {})", key_file.display());
    for i in 0..args.nodes {
        println!(
            "  node {}:   {url}/   (metrics {internal}/metrics, cluster {internal}/api/cluster)",
            i + 1,
            url = args.node_url(i),
            internal = args.internal_url(i)
        );
    }
    println!("  origin:   {origin_url}  (sends visitors without a pass to node 1)");
    println!(
        "open {}/ in a few browser tabs; Ctrl-C stops everything",
        args.node_url(0)
    );

    // Stop on Ctrl-C, or as soon as any child dies on its own.
    let exited = tokio::select! {
        _ = tokio::signal::ctrl_c() => None,
        name = children.first_exit() => Some(name),
    };
    children.stop(Duration::from_secs(5)).await;
    match exited {
        Some(name) => bail!("{name} exited unexpectedly; stopped the others"),
        None => Ok(()),
    }
}

impl DemoArgs {
    fn node_url(&self, i: u16) -> String {
        format!("http://127.0.0.1:{}", self.base_port + i)
    }

    fn internal_url(&self, i: u16) -> String {
        format!("http://127.0.0.1:{}", self.internal_base_port + i)
    }
}

/// The return-path secret of the key in `key_file`, in a file beside it (for the origin's gate).
fn gate_secret_file(key_file: &Path) -> anyhow::Result<PathBuf> {
    let path = key_file.with_file_name("gate-secret");
    let crypto = Crypto::load(key_file)?;
    crate::keys::write_private(&path, &format!("{}\n", crypto.gate_secret()), true)?;
    Ok(path)
}

/// The cluster key in `dir` (a new temporary directory if none), made if missing.
fn cluster_key(dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match dir {
        Some(d) => d,
        None => {
            let d = std::env::temp_dir().join(format!("waitingroom-demo-{}", std::process::id()));
            std::fs::create_dir_all(&d)
                .with_context(|| format!("cannot create {}", d.display()))?;
            d
        }
    };
    let key_file = dir.join("cluster-key.pem");
    if !key_file.exists() {
        crate::keys::write_private(&key_file, &Crypto::generate().to_pkcs8_pem(), false)?;
    }
    Ok(key_file)
}

/// Starts the nodes one by one (each ready before the next: they join through the first),
/// then the origin.
async fn start_all(
    args: &DemoArgs,
    key_file: &Path,
    origin_url: &str,
    client: &reqwest::Client,
    children: &mut Children,
) -> anyhow::Result<()> {
    for i in 0..args.nodes {
        let mut a: Vec<String> = vec![
            "run".into(),
            "--listen".into(),
            format!("127.0.0.1:{}", args.base_port + i),
            "--internal-listen".into(),
            format!("127.0.0.1:{}", args.internal_base_port + i),
            "--key-file".into(),
            key_file.display().to_string(),
            "--origin-url".into(),
            origin_url.to_owned(),
            // Small numbers so a few browser tabs already queue.
            "--target-on-site".into(),
            "3".into(),
            "--pass-expiry-ms".into(),
            "30000".into(),
        ];
        if i > 0 {
            a.extend(["--peers".into(), args.internal_url(0)]);
        }
        a.extend(args.node_args.iter().cloned());
        children.0.push(spawn(&format!("node {}", i + 1), &a)?);
        wait_ready(client, &format!("{}/readyz", args.node_url(i))).await?;
    }
    children.0.push(spawn(
        "origin",
        &[
            "origin".into(),
            "--listen".into(),
            format!("127.0.0.1:{}", args.origin_port),
            "--waiting-room-url".into(),
            format!("{}/", args.node_url(0)),
            "--jwks-url".into(),
            format!("{}/.well-known/jwks.json", args.node_url(0)),
            "--gate-secret-file".into(),
            gate_secret_file(key_file)?.display().to_string(),
        ],
    )?);
    wait_ready(client, &format!("{origin_url}healthz")).await
}

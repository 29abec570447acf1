//! The harness every cluster test uses: real `waitingroom-node` processes on 127.0.0.1
//! (ephemeral ports), each killed when its guard drops, and the requests tests send them.
//! Intervals are short (eviction 200 ms, probes 300/150 ms) so each test runs in seconds;
//! every wait is bounded.

pub(crate) use std::io::{BufRead as _, BufReader};
pub(crate) use std::path::PathBuf;
pub(crate) use std::process::{Child, Command, Stdio};
pub(crate) use std::sync::atomic::{AtomicU32, Ordering};
pub(crate) use std::time::{Duration, Instant};

pub(crate) use reqwest::StatusCode;
pub(crate) use serde_json::{Value, json};
pub(crate) use waitingroom_core::{NodeId, Pass, Ticket, TicketId};
pub(crate) use waitingroom_http::crypto::Crypto;
pub(crate) use waitingroom_http::crypto::tls::{InternalTls, TlsFiles};
pub(crate) use waitingroom_http::peer::Transport;
pub(crate) use waitingroom_http::peer::auth::{RequestHead, Route};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_waitingroom-node");

/// Settings every test node gets: fast timers, everyone queued.
pub(crate) const FAST: &[&str] = &[
    "--eviction-interval-ms",
    "200",
    "--cleanup-interval-ms",
    "200",
    "--refresh-interval-ms",
    "200",
    "--ticket-expiry-ms",
    "5000",
    "--probe-interval-ms",
    "300",
    "--probe-timeout-ms",
    "150",
    "--retransmit-ms",
    "60",
    "--join-retry-ms",
    "150",
    "--admit-straight-through",
    "false",
    "--shutdown-grace-ms",
    "500",
    "--forward-timeout-ms",
    "500",
    "--log-level",
    "info",
];

/// The flag-value pairs of [`FAST`] that `settings` does not set itself (a flag is taken
/// once).
fn fast_unless_set(settings: &[String]) -> Vec<&'static str> {
    FAST.chunks(2)
        .filter(|pair| !settings.iter().any(|s| s == pair[0]))
        .flatten()
        .copied()
        .collect()
}

pub(crate) static SEQ: AtomicU32 = AtomicU32::new(0);

/// A running node process; killed (SIGKILL) on drop.
pub(crate) struct NodeProc {
    pub(crate) child: Child,
    /// The public listener's base URL.
    pub(crate) url: String,
    /// The internal listener's, when it has one (else the public one serves everything).
    pub(crate) internal: Option<String>,
    pub(crate) log: PathBuf,
}

impl NodeProc {
    /// Where peers, metrics and the cluster view are.
    pub(crate) fn internal_url(&self) -> &str {
        self.internal.as_deref().unwrap_or(&self.url)
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory with the cluster key and the node logs; prints the logs if the test failed.
pub(crate) struct Cluster {
    pub(crate) dir: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) nodes: Vec<NodeProc>,
    pub(crate) settings: Vec<String>,
    /// Whether each node gets an internal listener.
    pub(crate) two_ports: bool,
    /// Mutual TLS on the internal listeners, if the cluster has it.
    pub(crate) tls: Option<TlsFiles>,
    /// What the test reaches the nodes with (with the cluster's client certificate under TLS).
    pub(crate) client: reqwest::Client,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.nodes.clear();
        if std::thread::panicking() {
            for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
                let p = entry.path();
                if p.extension().is_some_and(|e| e == "log") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(40).collect();
                    eprintln!("---- {} (last 40 lines) ----", p.display());
                    for l in tail.iter().rev() {
                        eprintln!("{l}");
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Cluster {
    /// A cluster of `n` nodes with `extra` settings on top of (or instead of) [`FAST`]'s, each ready and seeing
    /// all `n` as members.
    pub(crate) async fn start(name: &str, n: usize, extra: &[&str]) -> Cluster {
        Self::start_with(name, n, extra, false).await
    }

    /// As [`Cluster::start`]; with `two_ports`, every node also has an internal listener.
    pub(crate) async fn start_with(
        name: &str,
        n: usize,
        extra: &[&str],
        two_ports: bool,
    ) -> Cluster {
        let mut c = Cluster::empty(name, extra, two_ports);
        c.grow(n).await;
        c
    }

    /// A cluster whose internal listeners take only mutual TLS, with a CA made for it.
    pub(crate) async fn start_tls(name: &str, n: usize, extra: &[&str]) -> Cluster {
        let mut c = Cluster::empty(name, extra, true);
        let files = make_ca(&c.dir, "cluster");
        let tls = InternalTls::load(&files).unwrap();
        c.client = Transport::build_client_with(Duration::from_secs(5), Some(tls.client));
        c.tls = Some(files);
        c.grow(n).await;
        c
    }

    /// No node yet: a directory with the cluster key.
    pub(crate) fn empty(name: &str, extra: &[&str], two_ports: bool) -> Cluster {
        let dir = std::env::temp_dir().join(format!(
            "wr-{name}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key.pem");
        std::fs::write(&key, Crypto::generate().to_pkcs8_pem()).unwrap();
        Cluster {
            dir,
            key,
            nodes: Vec::new(),
            settings: extra.iter().map(|s| s.to_string()).collect(),
            two_ports,
            tls: None,
            client: waitingroom_http::crypto::tls::client_builder()
                .build()
                .unwrap(),
        }
    }

    /// Starts `n` nodes and waits until they all see each other.
    pub(crate) async fn grow(&mut self, n: usize) {
        for _ in 0..n {
            self.add_node();
        }
        self.settle(self.nodes.len()).await;
    }

    /// Starts one more node, joining through the first (or starting the cluster).
    pub(crate) fn add_node(&mut self) -> usize {
        let i = self.nodes.len();
        let first = self.nodes.first().map(|n| n.internal_url().to_owned());
        let node = self.spawn(i, first.as_deref());
        self.nodes.push(node);
        i
    }

    /// Node `i` again, in a new process (the old one SIGKILLed if it still runs), joining
    /// through `peer` (or starting a cluster).
    pub(crate) fn restart(&mut self, i: usize, peer: Option<&str>) {
        signal(&self.nodes[i], "-KILL");
        let _ = self.nodes[i].child.wait();
        self.nodes[i] = self.spawn(i, peer);
    }

    /// Starts node `i` (its settings with `{node}` replaced by `i + 1`), joining through
    /// `peer` if given.
    pub(crate) fn spawn(&self, i: usize, peer: Option<&str>) -> NodeProc {
        self.spawn_with(i, peer, "127.0.0.1:0", &[])
    }

    /// As [`Cluster::spawn`], listening on `listen` (a restart at the node's old address) and
    /// with `env` added to the process's environment.
    pub(crate) fn spawn_with(
        &self,
        i: usize,
        peer: Option<&str>,
        listen: &str,
        env: &[(&str, &str)],
    ) -> NodeProc {
        let log = self.dir.join(format!("node{}.log", i + 1));
        let mut cmd = Command::new(BIN);
        cmd.envs(env.iter().copied());
        let settings = self
            .settings
            .iter()
            .map(|s| s.replace("{node}", &(i + 1).to_string()));
        // A setting given in `extra` replaces FAST's (a flag may be given once).
        cmd.args(["run", "--listen", listen, "--key-file"])
            .arg(&self.key)
            .args(["--origin-url", "http://127.0.0.1:9/origin"])
            .args(fast_unless_set(&self.settings))
            .args(settings);
        if self.two_ports {
            cmd.args(["--internal-listen", "127.0.0.1:0"]);
        }
        if let Some(tls) = &self.tls {
            cmd.arg("--internal-tls-cert").arg(&tls.cert);
            cmd.arg("--internal-tls-key").arg(&tls.key);
            cmd.arg("--internal-tls-ca").arg(&tls.ca);
        }
        if let Some(peer) = peer {
            cmd.args(["--peers", peer]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn waitingroom-node");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send((false, url.to_owned()));
                } else if let Some(url) = line.strip_prefix("internal listening on ") {
                    let _ = tx.send((true, url.to_owned()));
                }
            }
        });
        let next = || {
            rx.recv_timeout(Duration::from_secs(20))
                .expect("node printed its address")
        };
        let (_, url) = next();
        let internal = self.two_ports.then(|| next().1);
        NodeProc {
            child,
            url,
            internal,
            log,
        }
    }

    pub(crate) fn url(&self, i: usize) -> &str {
        &self.nodes[i].url
    }

    /// Every node's URL, in start order.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url.clone()).collect()
    }

    /// Waits until every node is ready and sees `members` members.
    pub(crate) async fn settle(&self, members: usize) {
        let client = &self.client;
        let deadline = Instant::now() + Duration::from_secs(20);
        'outer: loop {
            assert!(
                Instant::now() < deadline,
                "cluster did not settle on {members} members"
            );
            for n in &self.nodes {
                let ok = async {
                    let r = client.get(format!("{}/readyz", n.url)).send().await.ok()?;
                    if !r.status().is_success() {
                        return None;
                    }
                    let s: Value = client
                        .get(format!("{}/api/cluster", n.internal_url()))
                        .send()
                        .await
                        .ok()?
                        .json()
                        .await
                        .ok()?;
                    Some(s["members"].as_array()?.len() == members)
                }
                .await;
                if ok != Some(true) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'outer;
                }
            }
            return;
        }
    }

    pub(crate) fn crypto(&self) -> Crypto {
        Crypto::load(&self.key).unwrap()
    }
}

/// A client that keeps no cookies (tokens travel in bodies unless a test sets a cookie).
pub(crate) fn client() -> reqwest::Client {
    waitingroom_http::crypto::tls::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

pub(crate) async fn post(c: &reqwest::Client, url: &str, body: Value) -> (StatusCode, Value) {
    let r = c.post(url).json(&body).send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub(crate) async fn join(c: &reqwest::Client, node: &str) -> String {
    let (s, v) = post(c, &format!("{node}/api/join"), json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "queued", "{v}");
    assert!(v["position"].as_u64().unwrap() >= 1);
    assert!(v["refresh_after_ms"].as_u64().is_some());
    v["ticket"].as_str().unwrap().to_owned()
}

/// `n` visitors join, `gap` apart, at the nodes `at(i)` names: their tickets, in join order.
pub(crate) async fn join_each(
    c: &reqwest::Client,
    n: usize,
    gap: Duration,
    at: impl Fn(usize) -> String,
) -> Vec<String> {
    let mut tickets = Vec::new();
    for i in 0..n {
        tickets.push(join(c, &at(i)).await);
        tokio::time::sleep(gap).await;
    }
    tickets
}

pub(crate) async fn metric(c: &reqwest::Client, node: &str, name: &str) -> f64 {
    let text = c
        .get(format!("{node}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Visitors keep checking in, round robin over `nodes`, and leave (at the next node) as soon as
/// they are admitted, as a real client would. Returns the visitors' indexes in the order in which
/// their check-ins first said "admitted", their last tickets and their passes.
pub(crate) async fn admit_all(
    c: &reqwest::Client,
    nodes: &[String],
    mut tickets: Vec<String>,
    limit: Duration,
) -> (Vec<usize>, Vec<String>, Vec<String>) {
    let deadline = Instant::now() + limit;
    let mut order = Vec::new();
    let mut passes = vec![String::new(); tickets.len()];
    let mut rr = 0;
    while order.len() < tickets.len() {
        assert!(
            Instant::now() < deadline,
            "only {} of {} visitors admitted in {limit:?}",
            order.len(),
            tickets.len()
        );
        for i in 0..tickets.len() {
            if order.contains(&i) {
                continue;
            }
            let node = &nodes[rr % nodes.len()];
            rr += 1;
            let (s, v) = post(
                c,
                &format!("{node}/api/checkin"),
                json!({ "ticket": tickets[i] }),
            )
            .await;
            if s != StatusCode::OK {
                // A node that is going away may refuse (503) once; the next one answers.
                assert!(s.is_server_error(), "check-in {s}: {v}");
                continue;
            }
            tickets[i] = v["ticket"].as_str().unwrap().to_owned();
            if v["status"] == "admitted" {
                order.push(i);
                passes[i] = leave(c, &nodes[rr % nodes.len()], &tickets[i]).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    (order, tickets, passes)
}

pub(crate) async fn leave(c: &reqwest::Client, node: &str, ticket: &str) -> String {
    let (s, v) = post(c, &format!("{node}/api/leave"), json!({ "ticket": ticket })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["expires_at_ms"].as_u64().unwrap() > 0);
    let pass = v["pass"].as_str().unwrap().to_owned();
    assert_eq!(verify(c, node, &pass).await, StatusCode::NO_CONTENT);
    pass
}

pub(crate) async fn verify(c: &reqwest::Client, node: &str, pass: &str) -> StatusCode {
    c.get(format!("{node}/api/pass/verify"))
        .bearer_auth(pass)
        .send()
        .await
        .unwrap()
        .status()
}

pub(crate) fn signal(node: &NodeProc, sig: &str) {
    let pid = node.child.id().to_string();
    assert!(
        Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success()
    );
}

/// The admin token the admin tests' nodes share, written to a file for `name`'s cluster: the
/// token and the file (its path for `--admin-token-file`; removed with the cluster's files).
pub(crate) fn admin_token_file(name: &str) -> (&'static str, std::path::PathBuf) {
    let token = "admin-test-token-0123456789abcdef";
    let file = std::env::temp_dir().join(format!("wr-{name}-token-{}", std::process::id()));
    std::fs::write(&file, token).unwrap();
    (token, file)
}

/// The admin API of node `i` at `path` with `token`: `GET`, or `method` with `body`; the
/// answer must be 200.
pub(crate) async fn admin_call(
    cl: &Cluster,
    i: usize,
    token: &str,
    path: &str,
    send: Option<(reqwest::Method, Value)>,
) -> Value {
    let url = format!("{}{path}", cl.nodes[i].internal_url());
    let req = match send {
        Some((method, body)) => client().request(method, url).json(&body),
        None => client().get(url),
    };
    let r = req.bearer_auth(token).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

/// The live settings of node `i`: `PATCH` with `change`, or `GET` without.
pub(crate) async fn admin(cl: &Cluster, i: usize, token: &str, change: Option<Value>) -> Value {
    let send = change.map(|c| (reqwest::Method::PATCH, c));
    admin_call(cl, i, token, "/admin/settings", send).await
}

/// Node `i`'s view of the cluster.
pub(crate) async fn status(cl: &Cluster, i: usize) -> Value {
    let url = format!("{}/api/cluster", cl.nodes[i].internal_url());
    get_json(&cl.client, url).await
}

/// The JSON a GET of `url` answers.
pub(crate) async fn get_json(c: &reqwest::Client, url: String) -> Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

/// Visitors let out so far by the nodes `at` (their `waitingroom_admitted_total`).
pub(crate) async fn let_out_by(cl: &Cluster, at: &[usize]) -> f64 {
    let mut sum = 0.0;
    for &i in at {
        sum += metric(
            &client(),
            cl.nodes[i].internal_url(),
            "waitingroom_admitted_total",
        )
        .await;
    }
    sum
}

/// `waitingroom-node audit` of node `i` with the passes in `file`: its report, which must say
/// it `passed` (or not).
pub(crate) fn audit_file(cl: &Cluster, i: usize, file: &std::path::Path, passed: bool) -> String {
    let out = Command::new(BIN)
        .args(["audit", "--url", cl.url(i), "--passes"])
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.success(), passed, "{text}{err}");
    eprintln!("{text}");
    text
}

/// A CA called `name` and a certificate it signed for 127.0.0.1, written into `dir`.
pub(crate) fn make_ca(dir: &std::path::Path, name: &str) -> TlsFiles {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} CA"));
    let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let files = TlsFiles {
        cert: dir.join(format!("{name}-node.pem")),
        key: dir.join(format!("{name}-node-key.pem")),
        ca: dir.join(format!("{name}-ca.pem")),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    std::fs::write(&files.ca, ca.pem()).unwrap();
    files
}

/// An answer's status, JSON body (`null` if none) and `Retry-After` header.
pub(crate) async fn with_retry_after(r: reqwest::Response) -> (StatusCode, Value, Option<String>) {
    let retry_after = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (
        r.status(),
        r.json().await.unwrap_or(Value::Null),
        retry_after,
    )
}

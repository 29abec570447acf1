//! The binary's command line without a cluster: key files kept private, bad settings refused
//! naming the setting.

use crate::harness::*;

/// `keygen` writes the key readable by its owner only, also with `--force` over an existing
/// file that others could read; and `run` warns about a key file others can read.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_private_and_run_warns_when_they_are_not() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("wr-keymode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key.pem");
    let mode = |p: &PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let keygen = |force: bool| {
        let mut cmd = Command::new(BIN);
        cmd.args(["keygen", "--out"]).arg(&key);
        if force {
            cmd.arg("--force");
        }
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
    };
    assert!(keygen(false).success());
    assert_eq!(mode(&key), 0o600);
    assert!(!keygen(false).success(), "no overwrite without --force");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(keygen(true).success());
    assert_eq!(mode(&key), 0o600, "--force over a 0644 file");
    // A node started with a key others can read says so.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut node = Command::new(BIN)
        .args(["run", "--listen", "127.0.0.1:0", "--key-file"])
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = node.stderr.take().unwrap();
    let warned = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .take(20)
            .any(|l| l.contains("readable by others"))
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let _ = node.kill();
    let _ = node.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        warned.join().unwrap(),
        "run warned about the key file's mode"
    );
}

#[test]
fn bad_config_is_refused_naming_the_setting() {
    let dir = std::env::temp_dir().join(format!("wr-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key.pem");
    std::fs::write(&key, Crypto::generate().to_pkcs8_pem()).unwrap();
    let toml = dir.join("bad.toml");
    std::fs::write(&toml, "listen = \"127.0.0.1:0\"\ntarget_onsite = 3\n").unwrap();
    // A voters file that is not one stops the start, naming it (docs/operating.md#readiness).
    let voters = dir.join("voters.json");
    std::fs::write(&voters, "{\"node\": 1, \"voters\": ").unwrap();
    let voters = voters.to_str().unwrap();
    let key = key.to_str().unwrap();
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (vec!["run"], vec![], "key_file"),
        (
            vec!["run", "--key-file", key, "--ticket-expiry-ms", "10"],
            vec![],
            "ticket_expiry_ms",
        ),
        (
            vec!["run", "--key-file", key],
            vec![("WAITINGROOM_PROBE_TIMEOUT_MS", "900")],
            "probe_timeout_ms",
        ),
        (
            vec!["run", "--key-file", key, "--config", toml.to_str().unwrap()],
            vec![],
            "target_onsite",
        ),
        (
            vec!["run", "--key-file", key, "--peers", "127.0.0.1:1"],
            vec![],
            "peers",
        ),
        (
            vec!["run", "--key-file", key, "--listen", "0.0.0.0:0"],
            vec![],
            "internal_listen",
        ),
        (
            vec!["run", "--key-file", key, "--origin-url", "//evil.example/"],
            vec![],
            "origin_url",
        ),
        (
            vec![
                "run",
                "--key-file",
                "/nonexistent/key.pem",
                "--listen",
                "127.0.0.1:0",
            ],
            vec![],
            "/nonexistent/key.pem",
        ),
        (
            vec![
                "run",
                "--key-file",
                key,
                "--listen",
                "127.0.0.1:0",
                "--voters-file",
                voters,
            ],
            vec![],
            voters,
        ),
    ];
    for (args, env, needle) in cases {
        let out = Command::new(BIN)
            .args(&args)
            .envs(env)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Flags win over the environment.
    let out = Command::new(BIN)
        .args([
            "run",
            "--key-file",
            key,
            "--probe-timeout-ms",
            "100",
            "--ticket-expiry-ms",
            "1",
        ])
        .env("WAITINGROOM_PROBE_TIMEOUT_MS", "900")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("ticket_expiry_ms"));
    let _ = std::fs::remove_dir_all(&dir);
}

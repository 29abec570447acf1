//! The settings' tests: defaults, layering, and every refusal naming its setting.

use std::path::PathBuf;

use waitingroom_core::Settings;
use waitingroom_distributed::AdmissionMode;

use super::sources::parse_file;
use super::*;
use crate::wire::cookies::SameSite;

fn base() -> Options {
    Options {
        network: NetworkOptions {
            key_file: Some("k.pem".into()),
            ..Default::default()
        },
        ..Options::default()
    }
}

#[test]
fn a_secret_never_shows_in_debug_output() {
    let shown = format!("{:?}", Some(Secret("hunter2-0123456789".into())));
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn defaults_resolve() {
    let c = base().resolve().unwrap();
    assert_eq!(c.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(c.settings, Settings::default());
    assert!(c.peers.is_empty());
}

#[test]
fn extra_verify_keys_come_from_the_file_or_flags() {
    let file: Options = parse_file("extra_verify_key = [\"old.pem\", \"older.pem\"]").unwrap();
    let c = merge(base(), file).resolve().unwrap();
    assert_eq!(
        c.extra_verify_keys,
        [PathBuf::from("old.pem"), "older.pem".into()]
    );
    assert!(base().resolve().unwrap().extra_verify_keys.is_empty());
}

#[test]
fn the_voters_are_kept_in_the_state_dir_unless_a_voters_file_is_named() {
    let dir = std::env::temp_dir().join(format!("wr-cfg-state-{}", std::process::id()));
    let with_dir = |voters_file: Option<&str>| {
        let mut o = base();
        o.records.state_dir = Some(dir.clone());
        o.records.voters_file = voters_file.map(PathBuf::from);
        o.resolve().unwrap().voters_file
    };
    assert_eq!(with_dir(None), Some(dir.join("voters.json")));
    assert_eq!(with_dir(Some("v.json")), Some(PathBuf::from("v.json")));
    assert_eq!(base().resolve().unwrap().voters_file, None, "in memory");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flags_win_over_file() {
    let flags = Options {
        room: RoomOptions {
            target_on_site: Some(5),
            ..Default::default()
        },
        ..Options::default()
    };
    let file: Options =
        parse_file("target_on_site = 7\nrefresh_interval_ms = 900\nkey_file = \"x\"").unwrap();
    let m = merge(flags, file).resolve().unwrap();
    assert_eq!(m.settings.target_on_site, 5);
    assert_eq!(m.settings.refresh_interval_ms, 900);
}

#[test]
fn file_accepts_unlimited_and_refuses_unknown_keys() {
    let o = parse_file("target_on_site = \"unlimited\"").unwrap();
    assert_eq!(o.room.target_on_site, Some(Settings::UNLIMITED));
    let err = parse_file("target_onsite = 3").unwrap_err();
    assert!(err.to_string().contains("target_onsite"), "{err}");
}

/// The thesis' deleteMin modes are not leased: the server runs them only while nothing
/// limits admission.
#[test]
fn the_unleased_admission_modes_need_no_limit() {
    for admission in [AdmissionMode::Batched, AdmissionMode::Sequential] {
        let limited = Options {
            room: RoomOptions {
                target_on_site: Some(100),
                ..Default::default()
            },
            protocol: ProtocolOptions {
                admission: Some(admission),
                ..Default::default()
            },
            ..base()
        };
        let err = limited.resolve().unwrap_err().to_string();
        assert!(err.contains("admission"), "{err}");
        let free = Options {
            room: RoomOptions {
                target_on_site: Some(Settings::UNLIMITED),
                ..Default::default()
            },
            protocol: ProtocolOptions {
                admission: Some(admission),
                ..Default::default()
            },
            ..base()
        };
        assert!(free.resolve().is_ok());
        let capped = Options {
            room: RoomOptions {
                target_on_site: Some(Settings::UNLIMITED),
                new_users_per_minute: Some(60),
                ..Default::default()
            },
            protocol: ProtocolOptions {
                admission: Some(admission),
                ..Default::default()
            },
            ..base()
        };
        assert!(capped.resolve().is_err(), "a rate cap is a limit too");
    }
}

#[test]
fn errors_name_the_setting() {
    let cases: Vec<(Options, &str)> = vec![
        (Options::default(), "key_file"),
        (
            Options {
                room: RoomOptions {
                    ticket_expiry_ms: Some(10),
                    ..Default::default()
                },
                ..base()
            },
            "ticket_expiry_ms",
        ),
        (
            Options {
                protocol: ProtocolOptions {
                    probe_timeout_ms: Some(900),
                    ..Default::default()
                },
                ..base()
            },
            "probe_timeout_ms",
        ),
        (
            Options {
                cluster: ClusterOptions {
                    peers: Some(vec!["ftp://x".into()]),
                    ..Default::default()
                },
                ..base()
            },
            "peers",
        ),
        (
            Options {
                network: NetworkOptions {
                    listen: Some("0.0.0.0:80".parse().unwrap()),
                    ..base().network
                },
                ..base()
            },
            "internal_listen",
        ),
        (
            Options {
                network: NetworkOptions {
                    listen: Some("10.0.0.5:80".parse().unwrap()),
                    ..base().network
                },
                ..base()
            },
            "internal_listen",
        ),
        (
            Options {
                network: NetworkOptions {
                    listen: Some("0.0.0.0:80".parse().unwrap()),
                    internal_listen: Some("0.0.0.0:81".parse().unwrap()),
                    ..base().network
                },
                ..base()
            },
            "advertise",
        ),
        (
            Options {
                network: NetworkOptions {
                    internal_listen: Some("127.0.0.1:8080".parse().unwrap()),
                    ..base().network
                },
                ..base()
            },
            "internal_listen",
        ),
        (
            Options {
                page: PageOptions {
                    page_accent: Some("red;}</style>".into()),
                    ..Default::default()
                },
                ..base()
            },
            "page_accent",
        ),
        (
            Options {
                network: NetworkOptions {
                    node_id: Some(0),
                    ..base().network
                },
                ..base()
            },
            "node_id",
        ),
        (
            Options {
                cluster: ClusterOptions {
                    peers: Some(vec!["https://10.0.0.2:9081".into()]),
                    ..Default::default()
                },
                ..base()
            },
            "peers",
        ),
        (
            Options {
                network: NetworkOptions {
                    advertise: Some("https://10.0.0.1:9081".into()),
                    ..base().network
                },
                ..base()
            },
            "advertise",
        ),
        (
            Options {
                network: NetworkOptions {
                    internal_tls_cert: Some("node.pem".into()),
                    internal_tls_ca: Some("ca.pem".into()),
                    ..base().network
                },
                ..base()
            },
            "internal_tls_key",
        ),
        (
            Options {
                network: NetworkOptions {
                    internal_listen: None,
                    listen: Some("127.0.0.1:8080".parse().unwrap()),
                    internal_tls_cert: Some("node.pem".into()),
                    internal_tls_key: Some("node-key.pem".into()),
                    internal_tls_ca: Some("ca.pem".into()),
                    ..base().network
                },
                ..base()
            },
            "internal_tls_cert",
        ),
        (
            Options {
                network: NetworkOptions {
                    internal_listen: Some("127.0.0.1:9090".parse().unwrap()),
                    internal_tls_cert: Some("/nonexistent/node.pem".into()),
                    internal_tls_key: Some("/nonexistent/node-key.pem".into()),
                    internal_tls_ca: Some("/nonexistent/ca.pem".into()),
                    ..base().network
                },
                ..base()
            },
            "internal_tls_cert",
        ),
        (
            Options {
                limits: LimitOptions {
                    trusted_proxies: Some(vec!["10.0.0.0/8".into(), "balancer".into()]),
                    ..Default::default()
                },
                ..base()
            },
            "trusted_proxies",
        ),
        (
            Options {
                visitors: VisitorOptions {
                    public_url: Some("queue.example".into()),
                    ..Default::default()
                },
                ..base()
            },
            "public_url",
        ),
        (
            Options {
                limits: LimitOptions {
                    request_timeout_ms: Some(1_500),
                    ..Default::default()
                },
                ..base()
            },
            "request_timeout_ms",
        ),
    ];
    for (o, field) in cases {
        let err = o.resolve().unwrap_err().to_string();
        assert!(err.contains(field), "{field}: {err}");
    }
}

/// `--peers-dns NAME[:PORT]`: the port defaults to this node's peer port (the internal
/// listener's); a scheme, a path or a bad port is refused naming the setting.
#[test]
fn peers_dns_takes_a_name_and_an_optional_port() {
    let with = |spec: &str| {
        Options {
            network: NetworkOptions {
                internal_listen: Some("127.0.0.1:9090".parse().unwrap()),
                ..base().network
            },
            cluster: ClusterOptions {
                peers_dns: Some(spec.into()),
                ..Default::default()
            },
            ..base()
        }
        .resolve()
    };
    let d = with("peers.ns.svc").unwrap().discovery.unwrap();
    assert_eq!(
        (d.name.as_str(), d.port, d.interval_ms),
        ("peers.ns.svc", 9090, 5_000)
    );
    assert_eq!(with("peers:7000").unwrap().discovery.unwrap().port, 7000);
    for bad in ["http://peers", "peers:0", "peers:x", "peers/x", ""] {
        match with(bad) {
            Err(ConfigError::Setting(e)) => assert_eq!(e.field, "peers_dns", "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(base().resolve().unwrap().discovery.is_none());
}

/// One port for everything only on loopback; a public address needs an internal listener,
/// and the advertised URL is needed only where peers could not guess it.
#[test]
fn internal_routes_leave_the_public_port_unless_it_is_loopback() {
    let with = |listen: &str, internal: Option<&str>| Options {
        network: NetworkOptions {
            listen: Some(listen.parse().unwrap()),
            internal_listen: internal.map(|a| a.parse().unwrap()),
            ..base().network
        },
        ..base()
    };
    let c = with("127.0.0.1:8080", None).resolve().unwrap();
    assert_eq!(c.internal_listen, None);
    let c = with("[::1]:8080", None).resolve().unwrap();
    assert_eq!(c.internal_listen, None);
    let c = with("0.0.0.0:80", Some("10.0.0.5:9080")).resolve().unwrap();
    assert_eq!(c.internal_listen, Some("10.0.0.5:9080".parse().unwrap()));
    assert_eq!(
        c.advertise, None,
        "derived from the internal address at start"
    );
    assert!(with("0.0.0.0:80", None).resolve().is_err());
}

/// Where admitted visitors are sent must be an absolute http(s) URL with a host: a
/// protocol-relative `//host`, another scheme or a bare path are refused at start.
#[test]
fn origin_url_must_be_an_absolute_http_url() {
    let with = |url: &str| {
        Options {
            visitors: VisitorOptions {
                origin_url: Some(url.into()),
                ..Default::default()
            },
            ..base()
        }
        .resolve()
    };
    for bad in [
        "//evil.example/",
        "javascript:alert(1)",
        "ftp://shop.example/",
        "/shop",
        "https://",
        "http:///x",
        "https://shop.example/\"<",
    ] {
        let err = with(bad).unwrap_err().to_string();
        assert!(err.contains("origin_url"), "{bad}: {err}");
    }
    for good in ["https://shop.example/", "http://127.0.0.1:9/origin"] {
        assert_eq!(with(good).unwrap().origin_url, good);
    }
    assert_eq!(base().resolve().unwrap().origin_url, "/", "the default");
}

#[test]
fn public_url_gives_the_origin_and_secure_cookies() {
    let c = Options {
        visitors: VisitorOptions {
            public_url: Some("https://Queue.Example:443/waiting/".into()),
            ..Default::default()
        },
        ..base()
    }
    .resolve()
    .unwrap();
    let (url, origin) = c.public_url.unwrap();
    assert_eq!(url, "https://Queue.Example:443/waiting");
    assert_eq!(origin, "https://queue.example");
    assert!(c.cookies.secure);
    assert!(!base().resolve().unwrap().cookies.secure);
    assert_eq!(
        web_origin("http://a.example:8080/x?y").as_deref(),
        Some("http://a.example:8080")
    );
}

#[test]
fn cookie_options_are_checked_and_name_the_cookies() {
    let c = Options {
        visitors: VisitorOptions {
            cookie_domain: Some("example.com".into()),
            cookie_name_suffix: Some("_shop".into()),
            cookie_samesite: Some(SameSite::Strict),
            ..Default::default()
        },
        ..base()
    }
    .resolve()
    .unwrap()
    .cookies;
    assert_eq!(c.domain.as_deref(), Some("example.com"));
    assert_eq!(
        (c.pass.as_str(), c.same_site),
        ("wr_pass_shop", SameSite::Strict)
    );
    let field = |o: Options| o.resolve().unwrap_err().to_string();
    let none = Options {
        visitors: VisitorOptions {
            cookie_samesite: Some(SameSite::None),
            ..Default::default()
        },
        ..base()
    };
    assert!(field(none).contains("cookie_samesite"));
    let secure_none = Options {
        visitors: VisitorOptions {
            cookie_samesite: Some(SameSite::None),
            cookie_secure: Some(true),
            ..Default::default()
        },
        ..base()
    };
    assert!(secure_none.resolve().is_ok());
    let domain = Options {
        visitors: VisitorOptions {
            cookie_domain: Some("exa mple.com; x=1".into()),
            ..Default::default()
        },
        ..base()
    };
    assert!(field(domain).contains("cookie_domain"));
    let suffix = Options {
        visitors: VisitorOptions {
            cookie_name_suffix: Some("a=b".into()),
            ..Default::default()
        },
        ..base()
    };
    assert!(field(suffix).contains("cookie_name_suffix"));
}

#[test]
fn derived_ids_are_stable_nonzero_and_js_safe() {
    let a = derive_node_id("http://127.0.0.1:8081");
    assert_eq!(a, derive_node_id("http://127.0.0.1:8081"));
    assert_ne!(a, derive_node_id("http://127.0.0.1:8082"));
    assert!(a.0 > 0 && a.0 < (1 << 53));
}

//! The target bodies on stable Rust: every seed, then deterministic mutations of the seeds (a
//! poor man's fuzzer, so CI notices a body that no longer builds or a decoder that panics on
//! something simple). Real fuzzing is `scripts/fuzz-run.sh`.

use crate::seeds::{TARGETS, seeds};

fn body(target: &str) -> fn(&[u8]) {
    match target {
        "tokens" => crate::tokens,
        "cluster_key" => crate::cluster_key,
        "peer_message" => crate::peer_message,
        "peer_batch" => crate::peer_batch,
        "peer_values" => crate::peer_values,
        "visitor_request" => crate::visitor_request,
        "peer_auth" => crate::peer_auth,
        "replay_cache" => crate::replay_cache,
        _ => unreachable!("unknown target {target}"),
    }
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One libFuzzer-style mutation: flip a bit, set an interesting byte, insert or delete a run,
/// overwrite a number-looking run with an extreme value, or splice in another seed.
fn mutate(rng: &mut Rng, input: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(v.len() + 1);
        let last = at.min(v.len().saturating_sub(1));
        match rng.below(6) {
            0 if !v.is_empty() => v[last] ^= 1 << rng.below(8),
            1 if !v.is_empty() => {
                let b = [
                    0, 0xff, b'"', b'{', b'}', b'[', b']', b',', b'-', b'9', b'.',
                ];
                v[last] = b[rng.below(b.len())];
            }
            2 => {
                let n = rng.below(8).min(v.len() - at);
                v.drain(at..at + n);
            }
            3 => {
                let extreme: &[&[u8]] = &[b"18446744073709551615", b"0", b"-1", b"1e400", b"null"];
                let e = extreme[rng.below(extreme.len())];
                v.splice(at..at, e.iter().copied());
            }
            4 => {
                let other = &others[rng.below(others.len())];
                let from = rng.below(other.len());
                let n = rng.below(other.len() - from + 1);
                v.splice(at..at, other[from..from + n].iter().copied());
            }
            _ => v.truncate(at),
        }
    }
    v
}

fn run(target: &str, mutations: usize) {
    let body = body(target);
    let seeds = seeds(target);
    assert!(!seeds.is_empty(), "{target} has seeds");
    for s in &seeds {
        body(s);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
    for _ in 0..mutations {
        let seed = &seeds[rng.below(seeds.len())];
        body(&mutate(&mut rng, seed, &seeds));
    }
}

#[test]
fn tokens_survive_mutations() {
    // Signature checks are slow in an unoptimised build: few mutations here, millions under
    // libFuzzer.
    run("tokens", 400);
}

/// The token seeds reach past the signature checks: unmutated, the ticket verifies as a ticket
/// and the pass as a pass, both as sent (mode 0) and made again from their parts (modes 3 and
/// 1); under the other kind's algorithm (modes 1 and 3), neither does.
#[test]
fn token_seeds_verify_as_their_kind() {
    let (_, ring) = crate::tokens::key();
    let mut verified = Vec::new();
    for seed in seeds("tokens") {
        let now = u64::from_le_bytes(seed[1..9].try_into().expect("eight bytes"));
        let token = crate::tokens::token(seed[0], &seed[9..]);
        verified.push((
            ring.verify_ticket(&token, now).is_ok(),
            ring.verify_pass(&token, now).is_ok(),
        ));
    }
    let (ticket, pass, neither) = ((true, false), (false, true), (false, false));
    assert_eq!(
        verified,
        [
            ticket, ticket, neither, pass, pass, neither, neither, neither, neither
        ]
    );
}

#[test]
fn cluster_keys_survive_mutations() {
    run("cluster_key", 3_000);
}

#[test]
fn peer_messages_survive_mutations() {
    run("peer_message", 1_500);
}

#[test]
fn peer_batches_survive_mutations() {
    run("peer_batch", 300);
}

/// Seeds only: this target's whole point is extreme values in the right places, which finds
/// the known overflow panics (see the ignored tests in waitingroom-distributed) at once.
#[test]
fn peer_values_seeds() {
    run("peer_values", 0);
}

#[test]
fn visitor_requests_survive_mutations() {
    run("visitor_request", 600);
}

#[test]
fn peer_auth_survives_mutations() {
    run("peer_auth", 3_000);
}

/// The unedited seed is accepted (so the target reaches past the MAC), an edited one is not.
#[test]
fn peer_auth_seeds_reach_acceptance() {
    let seeds = seeds("peer_auth");
    assert!(crate::accepted(&seeds[0]));
    assert!(!crate::accepted(&seeds[1]));
}

#[test]
fn replay_cache_survives_mutations() {
    run("replay_cache", 5_000);
}

/// Writes the seeds to `$WR_FUZZ_CORPUS/<target>/` (used by `scripts/fuzz-run.sh`).
#[test]
#[ignore = "writes files; run by scripts/fuzz-run.sh"]
fn write_seed_corpus() {
    let dir = std::env::var("WR_FUZZ_CORPUS").expect("WR_FUZZ_CORPUS names a directory");
    for target in TARGETS {
        let dir = std::path::Path::new(&dir).join(target);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        for (i, s) in seeds(target).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:04}")), s).expect("seed written");
        }
    }
}

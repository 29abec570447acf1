#!/usr/bin/env bash
# Runs every fuzz target for a bounded time with cargo-fuzz (needs a nightly toolchain and
# `cargo install cargo-fuzz`): seeds the corpus with valid examples, then fuzzes each target
# for SECONDS (default 120) and prints executions and crashes per target.
#
#   scripts/fuzz-run.sh [SECONDS] [TARGET...]
#
# Builds with debug assertions and overflow checks (cargo-fuzz's default) but without
# AddressSanitizer: every crate here forbids unsafe code, so ASan would only halve the speed.
# libFuzzer runs in fork mode and goes on after a crash, so one run collects every distinct
# crash it can find; each leaves its input in fuzz/artifacts/<target>/. Replay one with
#   cargo +nightly fuzz run -s none <target> fuzz/artifacts/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(tokens cluster_key peer_message peer_batch peer_values visitor_request peer_auth replay_cache)
fi
target_dir=${FUZZ_TARGET_DIR:-fuzz/target}

WR_FUZZ_CORPUS="$PWD/fuzz/corpus" cargo test -q --manifest-path fuzz/Cargo.toml \
    --no-default-features -- --ignored write_seed_corpus >/dev/null
cargo +nightly fuzz build -s none --target-dir "$target_dir"
mkdir -p fuzz/logs
status=0
for t in "${targets[@]}"; do
    log="fuzz/logs/$t.log"
    case $t in
        peer_auth) dict=fuzz/dict/peer_auth.dict ;;
        replay_cache) dict="" ;;
        peer_*) dict=fuzz/dict/peer.dict ;;
        tokens) dict=fuzz/dict/tokens.dict ;;
        visitor_request) dict=fuzz/dict/visitor.dict ;;
        *) dict=fuzz/dict/keys.dict ;;
    esac
    cargo +nightly fuzz run -s none --target-dir "$target_dir" "$t" -- \
        -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -max_total_time="$secs" -rss_limit_mb=4096 -timeout=10 ${dict:+-dict="$dict"} \
        >"$log" 2>&1 || true
    # Fork mode reports "#<executions>: cov: ... oom/timeout/crash: a/b/c ..." lines.
    last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -1)
    execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
    crashes=$(grep -oE 'oom/timeout/crash: [0-9]+/[0-9]+/[0-9]+' <<<"$last" || true)
    found=$(ls "fuzz/artifacts/$t" 2>/dev/null | wc -l)
    [ "$found" -eq 0 ] || status=1
    echo "$t: ${execs:-?} executions in ${secs}s, ${crashes:-no stats}, $found artifacts (log: $log)"
done
exit $status

#!/usr/bin/env bash
# Memory a node spends on unauthenticated peer requests: starts one node on 127.0.0.1, reads
# its resident memory (VmRSS), sends COUNT (50) unsigned POSTs of SIZE_MIB (8) MiB each to its
# /peer/messages at once, waits for them to end, and reads it again (also 2 s later). Prints
# one line: before, after, after 2 s (kB). Stops the node by PID.
#
#   scripts/peer-flood-rss.sh [COUNT] [SIZE_MIB]
#   NODE_BIN=...  the waitingroom-node binary (default: the release build, built when missing)
#   PORT=18190    the node's port (the peer routes are on it: one port on loopback)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
COUNT="${1:-50}"
SIZE_MIB="${2:-8}"
PORT="${PORT:-18190}"
BIN="$(node_bin)"
WORK="$(mktemp -d)"
NODE_PID=""
cleanup() {
    stop_process "$NODE_PID"
    rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN" keygen --out "$WORK/key.pem" >/dev/null 2>&1
"$BIN" run --listen "127.0.0.1:$PORT" --key-file "$WORK/key.pem" --log-level warn \
    >/dev/null 2>"$WORK/node.log" &
NODE_PID=$!
for _ in $(seq 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$PORT/readyz" 2>/dev/null && break
    sleep 0.1
done
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$NODE_PID/status"; }
head -c $((SIZE_MIB * 1024 * 1024)) /dev/zero | tr '\0' ' ' >"$WORK/body"
before="$(rss)"
pids=()
for _ in $(seq "$COUNT"); do
    curl -s -o /dev/null -m 60 -H 'content-type: application/json' --data-binary "@$WORK/body" \
        "http://127.0.0.1:$PORT/peer/messages" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
after="$(rss)"
sleep 2
later="$(rss)"
echo "VmRSS before ${before} kB, after $COUNT unsigned ${SIZE_MIB}-MiB peer POSTs ${after} kB, 2 s later ${later} kB"

#!/usr/bin/env bash
# What a check-in costs a node, against what its HTTP stack costs: CPU per request, from the
# node's /proc/PID/stat (user + system time) around fixed wrk runs, in one run:
#   1. GET /livez on node 1 (the HTTP stack and nothing else);
#   2. POST /api/checkin on node 1 with tickets node 1 holds (local check-ins);
#   3. POST /api/checkin on node 2 with those same tickets (forwarded to node 1): the CPU of
#      node 2 (forwarding) and of node 1 (owner) per check-in.
# Prints requests/s, p99 and CPU µs per request of each, and the ratios to /livez.
# Two nodes on 127.0.0.1; wrk from Debian's packages (installed when missing); every process
# is stopped by PID at the end.
#
#   scripts/checkin-cost.sh [SECONDS (8)] [CONNECTIONS (32)] [VISITORS (2000)]
#
#   QUEUED=N      first fill node 1's queue with N more waiting visitors (wrk joins,
#                 scripts/wrk/join.lua) and print its resident memory: the check-ins then rank
#                 among N (issue 13's million-visitor node: QUEUED=1000000)
#   NODE_BIN=...  the node binary (default: the release build, built when missing)
#   PROFILE_NODE2=FILE  also record node 2 with `perf record -g` into FILE (where forwarding goes)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
SECONDS_RUN="${1:-8}"
CONNS="${2:-32}"
VISITORS="${3:-2000}"
: "${PORT:=18580}"
command -v wrk >/dev/null 2>&1 || apt_install wrk
BIN="$(node_bin)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-checkin-cost.XXXXXX")"
PIDS=()
trap 'stop_pids_and_remove "$WORK" 3' EXIT

"$BIN" keygen --out "$WORK/key.pem" >/dev/null 2>&1
# Everyone queued (target 1, no straight-through), check-ins every 30 s allowed at any rate, no
# join limit (one address), tickets valid for an hour: longer than the whole run. With QUEUED,
# visitors who never check in must stay queued for the whole run, and a queue entry lives three
# refresh intervals without a check-in (Settings::queue_entry_ttl_ms): 20-minute intervals.
[[ "${QUEUED:-0}" -gt 0 ]] && REFRESH_MS=1200000
NODE_ARGS=(--key-file "$WORK/key.pem" --target-on-site 1 --admit-straight-through false
    --refresh-interval-ms "${REFRESH_MS:-30000}" --ticket-expiry-ms 3600000 --join-rate-limit 0
    --log-level warn)
start() { # node $1 on PORT+$1, joining node 1 when $1 > 1
    local i="$1" peers=()
    ((i == 1)) || peers=(--peers "http://127.0.0.1:$((PORT + 1))")
    "$BIN" run --listen "127.0.0.1:$((PORT + i))" "${NODE_ARGS[@]}" "${peers[@]}" \
        >/dev/null 2>"$WORK/node-$i.log" &
    PIDS+=($!)
    for _ in $(seq 100); do
        curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$((PORT + i))/readyz" 2>/dev/null && return
        sleep 0.1
    done
    echo "node $i did not become ready" >&2
    cat "$WORK/node-$i.log" >&2
    exit 1
}
start 1
start 2
[[ -n "${PROFILE_NODE2:-}" ]] && { perf record -g -F 999 -p "${PIDS[1]}" -o "$PROFILE_NODE2" >/dev/null 2>&1 & PIDS+=($!); }
NODE1="${PIDS[0]}"
NODE2="${PIDS[1]}"

# CPU ticks (user + system) of PID $1.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ="$(getconf CLK_TCK)"

# Visitors join node 1; their tickets are what the check-ins carry.
for _ in $(seq "$VISITORS"); do
    curl -fsS -X POST -H 'content-type: application/json' -d '{}' \
        "http://127.0.0.1:$((PORT + 1))/api/join"
    echo
done | sed -n 's/.*"ticket":"\([^"]*\)".*/\1/p' >"$WORK/tickets"

# Resident memory of PID $1, MB.
rss_mb() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
if [[ "${QUEUED:-0}" -gt 0 ]]; then
    before="$(rss_mb "$NODE1")"
    t0="$(date +%s.%N)"
    queued_now() {
        curl -fsS "http://127.0.0.1:$((PORT + 1))/metrics" | awk '/^waitingroom_queued / {print $2}'
    }
    # wrk's threads stop at their count, but wrk itself waits out -d: stop it once all are in.
    JOINS_PER_THREAD=$((QUEUED / 2)) wrk -t 2 -c "$CONNS" -d 900s -s "$ROOT/scripts/wrk/join.lua" \
        "http://127.0.0.1:$((PORT + 1))/api/join" >/dev/null &
    PIDS+=($!)
    until (($(queued_now) >= QUEUED)); do
        kill -0 "${PIDS[-1]}" 2>/dev/null || { echo "wrk stopped before the queue filled" >&2; exit 1; }
        sleep 1
    done
    stop_process "${PIDS[-1]}" 2
    queued="$(queued_now)"
    printf 'queued %s visitors at node 1 in %.0f s; node 1 resident memory %s MB (before: %s MB)\n' \
        "$queued" "$(echo "$(date +%s.%N) - $t0" | bc -l)" "$(rss_mb "$NODE1")" "$before"
fi

# run NAME URL [LUA]: a wrk run; prints one line and leaves "requests cpu1_us cpu2_us" in $WORK/NAME.
run() {
    local name="$1" url="$2" lua=() a1 a2 b1 b2 out reqs
    [[ $# -ge 3 ]] && lua=(-s "$3")
    a1="$(ticks "$NODE1")"
    a2="$(ticks "$NODE2")"
    out="$(TICKETS="$WORK/tickets" wrk -t 2 -c "$CONNS" -d "${SECONDS_RUN}s" --latency "${lua[@]}" "$url")"
    b1="$(ticks "$NODE1")"
    b2="$(ticks "$NODE2")"
    reqs="$(echo "$out" | awk '/requests in/ {print $1}')"
    local rate p99 non2xx cpu1 cpu2
    rate="$(echo "$out" | awk '/Requests\/sec/ {print $2}')"
    p99="$(echo "$out" | awk '$1 == "99%" {print $2}')"
    non2xx="$(echo "$out" | awk '/Non-2xx/ {print $NF}')"
    cpu1="$(((b1 - a1) * 1000000 / HZ))"
    cpu2="$(((b2 - a2) * 1000000 / HZ))"
    echo "$reqs $cpu1 $cpu2" >"$WORK/$name"
    printf '%-22s %9s req/s  p99 %-8s  node 1 %6.1f µs/req  node 2 %6.1f µs/req  non-2xx %s\n' \
        "$name" "$rate" "$p99" "$(echo "$cpu1 / $reqs" | bc -l)" "$(echo "$cpu2 / $reqs" | bc -l)" \
        "${non2xx:-0}"
}

echo "checkin-cost: ${SECONDS_RUN}s per run, $CONNS connections, $(wc -l <"$WORK/tickets") tickets, wrk on the same 2 cores"
run livez "http://127.0.0.1:$((PORT + 1))/livez"
run checkin-local "http://127.0.0.1:$((PORT + 1))" "$ROOT/scripts/wrk/checkin.lua"
run checkin-forwarded "http://127.0.0.1:$((PORT + 2))" "$ROOT/scripts/wrk/checkin.lua"
per() { read -r r c1 c2 <"$WORK/$1"; echo "($c1 + $c2) / $r" | bc -l; }
printf 'ratio: local check-in / livez %.2f; forwarded check-in (both nodes) / livez %.2f\n' \
    "$(echo "$(per checkin-local) / $(per livez)" | bc -l)" \
    "$(echo "$(per checkin-forwarded) / $(per livez)" | bc -l)"

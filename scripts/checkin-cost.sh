#!/usr/bin/env bash
# What a check-in costs a node, against what its HTTP stack costs: CPU per request, from the
# node's /proc/PID/stat (user + system time) around fixed wrk runs, in one run:
#   1. GET /livez on node 1 (the HTTP stack and nothing else);
#   2. POST /api/checkin on node 1 with tickets node 1 holds (local check-ins);
#   3. POST /api/checkin on node 2 with those same tickets (forwarded to node 1): the CPU of
#      node 2 (forwarding) and of node 1 (owner) per check-in;
#   4. GET /api/pass/verify on node 3, a node of its own that lets everyone straight in, with
#      the passes of VISITORS visitors round robin: what a gate asks (nginx `auth_request`) on
#      every request a visitor on the site makes; against GET /livez on node 3.
# Prints requests/s, p99 and CPU µs per request of each, and the ratios to /livez.
# Three nodes on 127.0.0.1; wrk from Debian's packages (installed when missing); every process
# is stopped by PID at the end.
#
#   scripts/checkin-cost.sh [SECONDS (8)] [CONNECTIONS (32)] [VISITORS (2000)]
#
#   QUEUED=N      first fill node 1's queue with N more waiting visitors (wrk joins,
#                 scripts/wrk/join.lua) and print its resident memory: the check-ins then rank
#                 among N (a million waiting visitors: QUEUED=1000000)
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
start() { # node $1 on PORT+$1, run with the arguments after $1 (NODE_ARGS when none)
    local i="$1"
    shift
    (($# > 0)) || set -- "${NODE_ARGS[@]}"
    "$BIN" run --listen "127.0.0.1:$((PORT + i))" "$@" >/dev/null 2>"$WORK/node-$i.log" &
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
start 2 "${NODE_ARGS[@]}" --peers "http://127.0.0.1:$((PORT + 1))"
# Node 3 lets everyone straight in, and its passes last an hour (no renewal within the run:
# a pass is renewed only past half its life).
start 3 --key-file "$WORK/key.pem" --target-on-site unlimited --pass-expiry-ms 3600000 \
    --join-rate-limit 0 --log-level warn
[[ -n "${PROFILE_NODE2:-}" ]] && { perf record -g -F 999 -p "${PIDS[1]}" -o "$PROFILE_NODE2" >/dev/null 2>&1 & PIDS+=($!); }
NODE1="${PIDS[0]}"
NODE2="${PIDS[1]}"
NODE3="${PIDS[2]}"

# CPU ticks (user + system) of PID $1.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ="$(getconf CLK_TCK)"

# Visitors join node 1; their tickets are what the check-ins carry.
for _ in $(seq "$VISITORS"); do
    curl -fsS -X POST -H 'content-type: application/json' -d '{}' \
        "http://127.0.0.1:$((PORT + 1))/api/join"
    echo
done | sed -n 's/.*"ticket":"\([^"]*\)".*/\1/p' >"$WORK/tickets"

# Visitors join node 3 (let straight in once its first count round is done) and leave the
# queue with a pass; their passes are what the pass checks carry.
NODE3_URL="http://127.0.0.1:$((PORT + 3))"
for _ in $(seq 100); do
    curl -fsS -X POST -H 'content-type: application/json' -d '{}' "$NODE3_URL/api/join" |
        grep -q '"status":"admitted"' && break
    sleep 0.1
done
for _ in $(seq "$VISITORS"); do
    ticket="$(curl -fsS -X POST -H 'content-type: application/json' -d '{}' "$NODE3_URL/api/join" |
        sed -n 's/.*"ticket":"\([^"]*\)".*/\1/p')"
    curl -fsS -X POST -H 'content-type: application/json' -d "{\"ticket\":\"$ticket\"}" \
        "$NODE3_URL/api/leave"
    echo
done | sed -n 's/.*"pass":"\([^"]*\)".*/\1/p' >"$WORK/passes"
[[ -s "$WORK/passes" ]] || { echo "node 3 gave no pass" >&2; cat "$WORK/node-3.log" >&2; exit 1; }

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

# run NAME URL [LUA]: a wrk run; prints one line with the CPU per request of each node in
# MEASURED (node numbers) and leaves "requests cpu_us..." in $WORK/NAME.
NODE_PIDS=(none "$NODE1" "$NODE2" "$NODE3")
MEASURED=(1 2)
run() {
    local name="$1" url="$2" lua=() before=() after=() out reqs rate p99 non2xx n cpu cpus="" shown=""
    [[ $# -ge 3 ]] && lua=(-s "$3")
    for n in "${MEASURED[@]}"; do before[n]="$(ticks "${NODE_PIDS[n]}")"; done
    out="$(TICKETS="$WORK/tickets" PASSES="$WORK/passes" \
        wrk -t 2 -c "$CONNS" -d "${SECONDS_RUN}s" --latency "${lua[@]}" "$url")"
    for n in "${MEASURED[@]}"; do after[n]="$(ticks "${NODE_PIDS[n]}")"; done
    reqs="$(echo "$out" | awk '/requests in/ {print $1}')"
    rate="$(echo "$out" | awk '/Requests\/sec/ {print $2}')"
    p99="$(echo "$out" | awk '$1 == "99%" {print $2}')"
    non2xx="$(echo "$out" | awk '/Non-2xx/ {print $NF}')"
    for n in "${MEASURED[@]}"; do
        cpu="$(((after[n] - before[n]) * 1000000 / HZ))"
        cpus+=" $cpu"
        shown+="$(printf '  node %s %6.1f µs/req' "$n" "$(echo "$cpu / $reqs" | bc -l)")"
    done
    echo "$reqs$cpus" >"$WORK/$name"
    printf '%-22s %9s req/s  p99 %-8s%s  non-2xx %s\n' "$name" "$rate" "$p99" "$shown" "${non2xx:-0}"
}

echo "checkin-cost: ${SECONDS_RUN}s per run, $CONNS connections, $(wc -l <"$WORK/tickets") tickets, $(wc -l <"$WORK/passes") passes, wrk on the same 2 cores"
run livez "http://127.0.0.1:$((PORT + 1))/livez"
run checkin-local "http://127.0.0.1:$((PORT + 1))" "$ROOT/scripts/wrk/checkin.lua"
run checkin-forwarded "http://127.0.0.1:$((PORT + 2))" "$ROOT/scripts/wrk/checkin.lua"
MEASURED=(3)
run livez-node3 "$NODE3_URL/livez"
run pass-verify "$NODE3_URL/api/pass/verify" "$ROOT/scripts/wrk/verify.lua"
per() { # NAME: CPU µs per request, all nodes measured
    local reqs cpus cpu total=0
    read -r reqs cpus <"$WORK/$1"
    for cpu in $cpus; do total=$((total + cpu)); done
    echo "$total / $reqs" | bc -l
}
printf 'ratio: local check-in / livez %.2f; forwarded check-in (both nodes) / livez %.2f; pass check / livez (node 3) %.2f\n' \
    "$(echo "$(per checkin-local) / $(per livez)" | bc -l)" \
    "$(echo "$(per checkin-forwarded) / $(per livez)" | bc -l)" \
    "$(echo "$(per pass-verify) / $(per livez-node3)" | bc -l)"

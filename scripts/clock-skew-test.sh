#!/usr/bin/env bash
# Clock skew end to end: three real nodes whose clocks disagree, through libfaketime (Debian's
# faketime package): node 2 runs SKEW2 ahead of node 1 (default +1.5 s), node 3 SKEW3 (default
# -0.3 s). Checks (waitingroom-http/README.md#clocks):
#   1. every node measures every other's offset on its SWIM probes (/api/cluster
#      clock_offsets) within TOLERANCE_MS (100) of the truth;
#   2. with --max-clock-offset-ms 1000 on every node, /readyz fails with `clock_skew` on node 2
#      only: its clock is off both others' (the median of its offsets, -1.5 s), while nodes 1
#      and 3 each see one member off and one in step (docs/operating.md#readiness);
#   3. visitors joining at the three nodes in turn are let out in the order they arrived by the
#      load generator's own clock: `kendall_tau_arrival` of `waitingroom-node load` at most
#      MAX_TAU (0.002), with nobody lost. Join times are stamped on the lowest-id member's
#      clock; stamped on their own, node 2's visitors would queue 1.5 s late (the simulator
#      measures the difference: docs/benchmarks.md#protocol-sweeps).
# Loopback only; bounded (waits at most WAIT_S, the load at most 60 s); stops its own
# processes by PID.
#
#   scripts/clock-skew-test.sh        (SKEW2, SKEW3, BASE_PORT, WAIT_S, USERS to change)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
dpkg -s libfaketime >/dev/null 2>&1 || apt_install faketime
for tool in curl jq; do command -v "$tool" >/dev/null 2>&1 || apt_install "$tool"; done
: "${SKEW2:=+1.5}" "${SKEW3:=-0.3}" "${BASE_PORT:=18580}" "${WAIT_S:=30}" "${USERS:=300}"
: "${TOLERANCE_MS:=100}" "${MAX_TAU:=0.002}"
BIN="$(node_bin)"
LIBFAKETIME="$(dpkg -L libfaketime | grep '/libfaketime\.so\.1$' | head -1)"
[[ -n "$LIBFAKETIME" ]] || { echo "clock-skew-test: libfaketime.so.1 not found" >&2; exit 1; }
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-skew.XXXXXX")"
PIDS=()
trap 'stop_pids_and_remove "$STATE" 5' EXIT
fail() {
    echo "clock-skew-test: FAIL: $*" >&2
    tail -n 20 "$STATE"/node-*.log >&2 || true
    [[ -n "${KEEP_LOGS:-}" ]] && cp "$STATE"/node-*.log "$STATE"/load.json "$KEEP_LOGS"/ 2>/dev/null
    exit 1
}

public() { echo "http://127.0.0.1:$((BASE_PORT + $1))"; }
internal() { echo "http://127.0.0.1:$((BASE_PORT + 10 + $1))"; }

# Node $1 with its clock moved by $2 seconds ("" for none), plus any further flags.
start_node() {
    local i="$1" skew="$2" wrap=()
    shift 2
    # The library itself rather than the `faketime` wrapper, which forks: the PID is the node's.
    [[ -n "$skew" ]] && wrap=(env LD_PRELOAD="$LIBFAKETIME" FAKETIME="${skew}s")
    local args=(run --listen "127.0.0.1:$((BASE_PORT + i))"
        --internal-listen "127.0.0.1:$((BASE_PORT + 10 + i))" --key-file "$STATE/key.pem"
        --eviction-interval-ms 500 --refresh-interval-ms 500 --target-on-site 100
        --pass-expiry-ms 5000 --ticket-expiry-ms 5000 --admit-straight-through false
        --join-rate-limit 0
        --log-level warn "$@")
    ((i > 1)) && args+=(--peers "$(internal 1)")
    "${wrap[@]}" "$BIN" "${args[@]}" >/dev/null 2>"$STATE/node-$i.log" &
    PIDS+=($!)
}

# Seconds as milliseconds: "+1.5" -> 1500.
ms() { awk -v s="$1" 'BEGIN { printf "%d", s * 1000 }'; }

"$BIN" keygen --out "$STATE/key.pem" >/dev/null 2>&1
start_node 1 "" --max-clock-offset-ms 1000
sleep 0.5
start_node 2 "$SKEW2" --max-clock-offset-ms 1000
start_node 3 "$SKEW3" --max-clock-offset-ms 1000

# 1. Wait until every node measures both others, then compare with the true offsets.
declare -A TRUE=([1]=0 [2]="$(ms "$SKEW2")" [3]="$(ms "$SKEW3")")
deadline=$((SECONDS + WAIT_S))
for i in 1 2 3; do
    until [[ "$(curl -fsS -m 1 "$(internal "$i")/api/cluster" 2>/dev/null |
        jq '.clock_offsets | length' 2>/dev/null)" == 2 ]]; do
        ((SECONDS < deadline)) || fail "node $i did not measure both others within ${WAIT_S} s"
        sleep 0.3
    done
done
# Offsets are per peer id; ids come from each node's own status.
declare -A ID=()
for i in 1 2 3; do ID[$i]="$(curl -fsS "$(internal "$i")/api/cluster" | jq -r .id)"; done
for i in 1 2 3; do
    status="$(curl -fsS "$(internal "$i")/api/cluster")"
    for j in 1 2 3; do
        ((i == j)) && continue
        got="$(jq -r --argjson p "${ID[$j]}" '.clock_offsets[] | select(.peer == $p) | .offset_ms' <<<"$status")"
        want=$((TRUE[$j] - TRUE[$i]))
        err=$((got - want))
        ((${err#-} <= TOLERANCE_MS)) || fail "node $i measures node $j at $got ms, truly $want ms"
        echo "node $i measures node $j at $got ms (truly $want ms)"
    done
done

# 2. Readiness: node 2's clock is the outlier; the others are ready.
code="$(curl -sS -m 2 "$(public 2)/readyz" | jq -r '.code // "ready"' 2>/dev/null || echo ready)"
[[ "$code" == clock_skew ]] || fail "node 2's /readyz says '$code', expected clock_skew"
for i in 1 3; do
    curl -fsS -m 2 -o /dev/null "$(public "$i")/readyz" || fail "node $i is not ready"
done
echo "readyz: node 2 clock_skew (bound 1000 ms), nodes 1 and 3 ready"

# 3. Fairness by true arrival order.
"$BIN" load --url "$(public 1),$(public 2),$(public 3)" --users "$USERS" --concurrency 30 \
    --ramp-up-ms 3000 --max-seconds 60 --progress-s 0 --json >"$STATE/load.json"
jq -r '"load: \(.admitted)/\(.users) admitted, lost \(.lost), errors \(.errors) \(.error_reasons | tostring), Kendall-Tau by arrival \(.kendall_tau_arrival), by stamped join time \(.kendall_tau_eviction)"' "$STATE/load.json"
lost="$(jq .lost "$STATE/load.json")"
tau="$(jq .kendall_tau_arrival "$STATE/load.json")"
((lost == 0)) || fail "$lost visitors lost"
awk -v t="$tau" -v m="$MAX_TAU" 'BEGIN { exit !(t <= m) }' ||
    fail "Kendall-Tau by arrival $tau is above $MAX_TAU"
echo "clock-skew-test: PASS"

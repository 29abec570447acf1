#!/usr/bin/env bash
# The thesis' live test, on a real cluster behind HAProxy: 5,000 visitors, up to 500 at once,
# with 3, 8 and 16 nodes; every visitor queued (straight-through admission off, unlimited target,
# pass expiry 0). Prints a table.
#
#   scripts/bench.sh                       the table (3, 8, 16 nodes)
#   scripts/bench.sh --nodes N --users U --concurrency C [--json]
#                                          one benchmark (cluster up, load, cluster down); with
#                                          --json prints the load generator's JSON object
#   options: --nodes-list "3 8 16", --ramp-up-ms MS (spread the first visitors' starts),
#            --netns (each node in a network namespace with netem delay)
#
# Node settings (BENCH_NODE_ARGS overrides): what an operator of a busy sale could run —
#   --eviction-interval-ms 100 --refresh-interval-ms 250
# plus the thesis' conditions: --admit-straight-through false --target-on-site unlimited
# --pass-expiry-ms 0; --join-rate-limit 0 (every visitor comes from this one address), and
# --log-level warn.
# FRONT_PORT (default 18480), CLUSTER_DIR (default: a temporary directory) as cluster.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
NODES=""
NODES_LIST="3 8 16"
USERS=5000
CONCURRENCY=500
JSON=0
RAMP_UP_MS=0
NETNS_ARG=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --nodes) NODES="$2"; shift 2 ;;
    --nodes-list) NODES_LIST="$2"; shift 2 ;;
    --users) USERS="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --json) JSON=1; shift ;;
    --ramp-up-ms) RAMP_UP_MS="$2"; shift 2 ;;
    --netns) NETNS_ARG=(--netns); shift ;;
    *) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done

export FRONT_PORT="${FRONT_PORT:-18480}"
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-bench.XXXXXX")"
export CLUSTER_DIR="${CLUSTER_DIR:-$STATE/cluster}"
cleanup() {
    bash "$ROOT/scripts/cluster.sh" down >/dev/null 2>&1 || true
    rm -rf "$STATE"
}
trap cleanup EXIT

NODE_BIN="$(node_bin)"
export NODE_BIN
command -v jq >/dev/null 2>&1 || apt_install jq

BENCH_NODE_ARGS="${BENCH_NODE_ARGS:---eviction-interval-ms 100 --refresh-interval-ms 250 --admit-straight-through false --target-on-site unlimited --pass-expiry-ms 0 --join-rate-limit 0 --log-level warn}"
read -r -a NODE_ARGS <<<"$BENCH_NODE_ARGS"

# CPU seconds (user + system) used so far by the cluster's nodes and balancer processes.
cluster_cpu() {
    local pids=() f pid
    for f in "$CLUSTER_DIR"/node-*.pid "$CLUSTER_DIR"/balancer.pid; do
        [[ -f "$f" ]] && pids+=("$(cat "$f")")
    done
    pid="$(cat "$CLUSTER_DIR/balancer.pid" 2>/dev/null || true)"
    [[ -n "$pid" ]] && mapfile -t -O "${#pids[@]}" pids < <(pgrep -P "$pid" || true)
    for pid in "${pids[@]}"; do
        [[ -r "/proc/$pid/stat" ]] && cat "/proc/$pid/stat"
    done | awk -v hz="$(getconf CLK_TCK)" '{
        # the command name may hold spaces: count fields from the end of "(...)"
        sub(/^.*\) /, ""); t += $12 + $13 } END { printf "%.2f", t / hz }'
}

# CPU seconds used by this shell's finished children (bash `times`, second line), from the
# file $1 that `times` wrote (not in a subshell: its children would not be ours).
children_cpu() {
    tail -1 "$1" | awk '{
        split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.2f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }'
}

# One benchmark: prints the load generator's JSON object, plus the CPU the nodes, the balancer
# and the load generator used (all on this machine's cores, shared with whatever else runs).
one() {
    local n="$1" out="$STATE/load-$1.json"
    # `set -e` does not reach into the command substitutions this runs in: check each step.
    bash "$ROOT/scripts/cluster.sh" up "$n" "${NETNS_ARG[@]}" -- "${NODE_ARGS[@]}" >/dev/null ||
        { echo "bench.sh: the $n-node cluster did not start" >&2; return 1; }
    local status=0 c0 c1 load_avg
    c0="$(cluster_cpu)"
    times >"$STATE/times0"
    "$NODE_BIN" load --url "http://127.0.0.1:$FRONT_PORT" --users "$USERS" \
        --concurrency "$CONCURRENCY" --ramp-up-ms "$RAMP_UP_MS" --max-seconds 600 --json \
        >"$out" || status=$?
    times >"$STATE/times1"
    c1="$(cluster_cpu)"
    load_avg="$(cut -d' ' -f1 /proc/loadavg)"
    bash "$ROOT/scripts/cluster.sh" down >/dev/null
    ((status == 0)) || { echo "bench.sh: the load generator failed ($status)" >&2; return 1; }
    jq -c --argjson nodes "$n" --argjson cluster "$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')" \
        --argjson load "$(awk -v a="$(children_cpu "$STATE/times0")" -v b="$(children_cpu "$STATE/times1")" 'BEGIN { printf "%.2f", b - a }')" \
        --argjson load_avg "$load_avg" \
        '. + {nodes: $nodes, cpu_s: {cluster: $cluster, load_generator: $load},
              cpu_ms_per_visitor: ((($cluster + $load) * 1000 / ([.admitted, 1] | max)) * 1000 | round / 1000),
              load_average: $load_avg}' "$out"
}

if [[ -n "$NODES" ]]; then
    json="$(one "$NODES")"
    if ((JSON)); then
        echo "$json"
    else
        jq . <<<"$json"
    fi
    exit 0
fi

echo "bench: $USERS visitors, $CONCURRENCY at once, node settings: $BENCH_NODE_ARGS" >&2
rows=()
for n in $NODES_LIST; do
    echo "bench: $n nodes..." >&2
    json="$(one "$n")" || exit 1
    rows+=("$(jq -r '"| \(.nodes) | \(.admitted)/\(.users) | \(.admitted_per_s | floor) | \(.lost) | \(.errors) | \(.endpoints.checkin.p50_ms) | \(.endpoints.checkin.p99_ms) | \(.p99_ms) | \(.kendall_tau * 1e6 | round / 1e6) | \(.kendall_tau_eviction * 1e6 | round / 1e6) | \(.cpu_ms_per_visitor) | \(.load_average) |"' <<<"$json")")
done
echo "| nodes | admitted | admitted/s | lost | errors | check-in p50 ms | check-in p99 ms | all p99 ms | Kendall-Tau (seen) | Kendall-Tau (eviction) | CPU ms/visitor | load avg |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"

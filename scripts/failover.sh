#!/usr/bin/env bash
# Failover under load: 3 nodes behind the balancer, a few thousand visitors, and mid-run
#   kill: one node is killed with SIGKILL;
#   add:  one node is added (joined, then put into the balancer);
#   stop: one node is frozen with SIGSTOP for --stop-s seconds (long enough for the others to
#         declare it dead), then continued with SIGCONT (it finds itself dropped and rejoins);
#   link: (with --netns) one node's link is cut for --stop-s seconds, then restored.
# Every visitor must still be admitted (0 lost, all joined); the Kendall-Tau is reported.
#
#   scripts/failover.sh [--mode kill|add|stop|link|both|all] [--users 3000] [--concurrency 300]
#                       [--after-s 4] [--victim 2] [--stop-s 3] [--nodes 3] [--netns]
#   (both = kill, then add; all = kill, add, stop)
#
# Node settings (every visitor queued; one check-in a second; no join limit: all visitors come
# from this one address): FAILOVER_NODE_ARGS overrides.
# FRONT_PORT (default 18380) and CLUSTER_DIR (default: a temporary directory) as cluster.sh.
# Prints one line per run and exits non-zero if any visitor was lost.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
MODE=both
USERS=3000
CONCURRENCY=300
AFTER_S=4
VICTIM=2
STOP_S=3
NODES=3
NETNS_ARG=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --mode) MODE="$2"; shift 2 ;;
    --users) USERS="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --after-s) AFTER_S="$2"; shift 2 ;;
    --victim) VICTIM="$2"; shift 2 ;;
    --stop-s) STOP_S="$2"; shift 2 ;;
    --nodes) NODES="$2"; shift 2 ;;
    --netns) NETNS_ARG=(--netns); shift ;;
    *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
case "$MODE" in kill | add | stop | link | both | all) ;; *) echo "--mode kill|add|stop|link|both|all" >&2; exit 2 ;; esac

export FRONT_PORT="${FRONT_PORT:-18380}"
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-failover.XXXXXX")"
export CLUSTER_DIR="${CLUSTER_DIR:-$STATE/cluster}"
LOAD_PID=""
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    if [[ -n "$LOAD_PID" ]] && kill -0 "$LOAD_PID" 2>/dev/null; then
        kill -TERM "$LOAD_PID" 2>/dev/null || true
    fi
    bash "$ROOT/scripts/cluster.sh" down >/dev/null 2>&1 || true
    rm -rf "$STATE"
}
trap cleanup EXIT

NODE_BIN="$(node_bin)"
export NODE_BIN
command -v jq >/dev/null 2>&1 || apt_install jq

# Every visitor queued (no straight-through, unlimited target, passes born expired), a
# check-in a second, a round every 500 ms, SWIM probes every 300 ms. The load comes from one
# address (this machine, through the balancer), so the per-client join limit is off.
read -r -a NODE_ARGS <<<"${FAILOVER_NODE_ARGS:---admit-straight-through false --target-on-site unlimited --pass-expiry-ms 0 --eviction-interval-ms 500 --refresh-interval-ms 1000 --probe-interval-ms 300 --probe-timeout-ms 150 --forward-timeout-ms 500 --join-rate-limit 0 --log-level warn}"

failed=0
run() {
    local mode="$1" out="$STATE/load-$1.json"
    bash "$ROOT/scripts/cluster.sh" up "$NODES" "${NETNS_ARG[@]}" -- "${NODE_ARGS[@]}" >/dev/null
    "$NODE_BIN" load --url "http://127.0.0.1:$FRONT_PORT" --users "$USERS" \
        --concurrency "$CONCURRENCY" --max-seconds 240 --json >"$out" &
    LOAD_PID=$!
    sleep "$AFTER_S"
    case "$mode" in
    kill) bash "$ROOT/scripts/cluster.sh" kill "$VICTIM" KILL >&2 ;;
    add) bash "$ROOT/scripts/cluster.sh" add >&2 ;;
    stop)
        bash "$ROOT/scripts/cluster.sh" kill "$VICTIM" STOP >&2
        sleep "$STOP_S"
        bash "$ROOT/scripts/cluster.sh" kill "$VICTIM" CONT >&2
        ;;
    link)
        bash "$ROOT/scripts/cluster.sh" link "$VICTIM" down >&2
        sleep "$STOP_S"
        bash "$ROOT/scripts/cluster.sh" link "$VICTIM" up >&2
        ;;
    esac
    local status=0
    wait "$LOAD_PID" || status=$?
    LOAD_PID=""
    # A surviving node's view, for the record (from its internal listener).
    local members survivor=1
    ((VICTIM != 1)) || survivor=2
    members=$(curl -fsS -m 2 "$(bash "$ROOT/scripts/cluster.sh" internal-url "$survivor")/metrics" |
        awk '/^waitingroom_members /{print $2}')
    bash "$ROOT/scripts/cluster.sh" down >/dev/null
    if ((status != 0)) || [[ ! -s "$out" ]]; then
        echo "failover $mode: the load generator failed (status $status)"
        failed=1
        return
    fi
    jq -r --arg mode "$mode" --arg members "$members" '"failover \($mode): \(.users) visitors, \(.joined) joined, \(.admitted) admitted, lost \(.lost), not joined \(.not_joined), errors \(.errors) \(.error_reasons | tostring), re-checked-in after a refused leave \(.readmissions), retried later (503, not errors) \(.retried_later), passes lost \(.pass_lost), most on site at once \(.max_on_site), \(.admitted_per_s)/s, Kendall-Tau seen \(.kendall_tau) eviction \(.kendall_tau_eviction), members after \($members)"' "$out"
    if [[ "$(jq '.lost + .not_joined' "$out")" != 0 ]] ||
        [[ "$(jq '.admitted == .users' "$out")" != true ]]; then
        echo "failover $mode: FAILED (visitors lost)"
        failed=1
    fi
    if [[ -n "${FAILOVER_JSON_DIR:-}" ]]; then
        cp "$out" "$FAILOVER_JSON_DIR/failover-$mode.json"
    fi
}

case "$MODE" in
kill | add | stop | link) run "$MODE" ;;
both) run kill; run add ;;
all) run kill; run add; run stop ;;
esac
exit "$failed"

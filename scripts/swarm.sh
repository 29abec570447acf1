#!/usr/bin/env bash
# The swarm with real processes: NODES nodes (4) behind HAProxy, the demo origin behind its gate
# (`waitingroom-node origin`, which counts the passes valid at once as the site sees them), and
# visitors from `waitingroom-node load`, honest and adversarial (banked admissions, refreshes at
# other nodes with the old pass, replayed leaves, abandoners, visitors who go away and come
# back), while a schedule drawn from --seed disturbs the nodes for --duration seconds:
#   kill     SIGKILL, the node restarted 1-8 s later;
#   stop     SIGSTOP for 1-12 s, then SIGCONT;
#   restart  SIGTERM, started again at once;
#   cut      every packet to and from the node dropped for 2-12 s (peers and balancer);
#   peercut  only the peer traffic dropped for 2-12 s (the balancer still reaches it);
#   clock    restarted with its clock stepped by 0.5-3 s either way (libfaketime), kept so.
# At most --max-down nodes are disturbed at once. Then the cluster heals (every node running,
# unfrozen, linked, on the true clock) and the visitors still in line get up to --heal-s
# seconds more (the run ends as soon as every visitor is done).
# Checks:
#   - the most passes valid at once at the origin is at most the target;
#   - no visitor lost (kept checking in and never let in by the end), and no place lost (a
#     ticket refused while its visitor kept checking in: it joins again, at the back; a banked
#     visitor refused once the admission it held on to lapsed is not one: it must be refused);
#   - no double pass (one admission, two different passes: at the origin, or handed to one
#     visitor);
#   - `waitingroom-node audit` over the round records and every pass handed out: no violation.
# Prints the seed, the schedule, what happened and the verdict; --json prints one JSON object
# instead. Exits non-zero on any violation.
#
#   scripts/swarm.sh [--duration 180] [--seed N] [--nodes 4] [--max-down 2] [--users D*5/3]
#                    [--target 20] [--heal-s 120] [--json] [--keep DIR]
#
# Link cuts use iptables (filter table, a chain of this run's own jumped to from OUTPUT) and a
# cgroup v2 group per node to tell the nodes' packets apart on 127.0.0.1: they need root; without
# them the schedule has no cuts (and says so). Loopback only; every process started here is
# stopped by PID on exit, the chain and the groups removed. FRONT_PORT (default 18680): the
# balancer; nodes on FRONT_PORT+i (internal +10+i), the origin on FRONT_PORT+30.
# SWARM_NODE_ARGS adds node flags. NODE_BIN: the binary (default: the release build).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

DURATION=180 SEED="" NODES=4 MAX_DOWN=2 USERS="" TARGET=20 HEAL_S=120 JSON=0 KEEP=""
while [[ $# -gt 0 ]]; do
    case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --nodes) NODES="$2"; shift 2 ;;
    --max-down) MAX_DOWN="$2"; shift 2 ;;
    --users) USERS="$2"; shift 2 ;;
    --target) TARGET="$2"; shift 2 ;;
    --heal-s) HEAL_S="$2"; shift 2 ;;
    --json) JSON=1; shift ;;
    --keep) KEEP="$2"; shift 2 ;;
    *) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
[[ -n "$SEED" ]] || SEED=$((RANDOM * 32768 + RANDOM))
# Visitors: 100 a minute of disturbances unless told (arriving well below what the target and
# the pass expiry let in: 4 a second).
[[ -n "$USERS" ]] || USERS=$((DURATION * 5 / 3))
for n in "$DURATION" "$SEED" "$NODES" "$MAX_DOWN" "$USERS" "$TARGET" "$HEAL_S"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "swarm.sh: numbers only ($n)" >&2; exit 2; }
done
((NODES >= 2 && DURATION >= 10)) || { echo "swarm.sh: --nodes 2+ and --duration 10+" >&2; exit 2; }

FRONT_PORT="${FRONT_PORT:-18680}"
ORIGIN_PORT=$((FRONT_PORT + 30))
pub() { echo $((FRONT_PORT + $1)); }
int() { echo $((FRONT_PORT + 10 + $1)); }
say() { ((JSON)) && echo "swarm: $*" >&2 || echo "swarm: $*"; }
T0=$(date +%s%N)
elapsed_ms() { echo $((($(date +%s%N) - T0) / 1000000)); }

for tool in haproxy:haproxy curl:curl jq:jq; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || apt_install "${tool#*:}"
done
dpkg -s libfaketime >/dev/null 2>&1 || apt_install faketime
LIBFAKETIME="$(dpkg -L libfaketime | grep '/libfaketime\.so\.1$' | head -1)"
BIN="$(node_bin)"
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-swarm.XXXXXX")"

# ---- link cuts: iptables + one cgroup per node ----------------------------------------------
CHAIN="WRSWARM$FRONT_PORT"
CGROOT="$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)"
CGREL="wrswarm-$FRONT_PORT"
CUTS=0
if [[ "$(id -u)" == 0 && -n "$CGROOT" ]] && command -v iptables >/dev/null 2>&1 &&
    mkdir -p "$CGROOT/$CGREL" 2>/dev/null && iptables -N "$CHAIN" 2>/dev/null; then
    iptables -I OUTPUT -j "$CHAIN"
    CUTS=1
else
    say "no link cuts: they need root, iptables and a cgroup v2 mount"
fi
# The cgroup path iptables matches (relative to the cgroup v2 root).
cg() { echo "$CGREL/node$1"; }

# The rules that cut node $1 ($2: cut = everything, peercut = peer traffic only), one a line.
cut_rules() {
    local i="$1" kind="$2" j others=()
    for ((j = 1; j <= NODES; j++)); do
        ((j == i)) && continue
        others+=("$(int "$j")")
        echo "-p tcp -m cgroup --path $(cg "$j") -d 127.0.0.1 --dport $(int "$i") -j DROP"
    done
    echo "-p tcp -m cgroup --path $(cg "$i") -m multiport --dports $(IFS=,; echo "${others[*]}") -j DROP"
    [[ "$kind" == cut ]] && echo "-p tcp -d 127.0.0.1 --dport $(pub "$i") -j DROP"
    return 0
}
# Applies ($1 = -A) or removes ($1 = -D) the rules of node $2's cut of kind $3.
cut_apply() {
    local op="$1" rule
    while read -r rule; do
        # shellcheck disable=SC2086  # a rule is words
        iptables "$op" "$CHAIN" $rule 2>/dev/null || true
    done < <(cut_rules "$2" "$3")
}

# ---- processes ------------------------------------------------------------------------------
declare -A NODE_PID=() NODE_STATE=() NODE_SKEW=()
ORIGIN_PID="" BALANCER_PID="" LOAD_PID=""
# shellcheck disable=SC2317  # the EXIT trap
cleanup() {
    local i pid
    for pid in "$LOAD_PID" "$ORIGIN_PID" "$BALANCER_PID"; do stop_process "$pid" 3; done
    for i in "${!NODE_PID[@]}"; do
        kill -CONT "${NODE_PID[$i]}" 2>/dev/null || true
        stop_process "${NODE_PID[$i]}" 3
    done
    if ((CUTS)); then
        iptables -D OUTPUT -j "$CHAIN" 2>/dev/null || true
        iptables -F "$CHAIN" 2>/dev/null || true
        iptables -X "$CHAIN" 2>/dev/null || true
        for i in "${!NODE_PID[@]}"; do rmdir "$CGROOT/$(cg "$i")" 2>/dev/null || true; done
        rmdir "$CGROOT/$CGREL" 2>/dev/null || true
    fi
    if [[ -n "$KEEP" ]]; then mkdir -p "$KEEP" && cp -r "$STATE"/. "$KEEP"/; fi
    rm -rf "$STATE"
}
trap cleanup EXIT

"$BIN" keygen --out "$STATE/key.pem" >/dev/null 2>&1
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$STATE/admin-token")
read -r -a EXTRA <<<"${SWARM_NODE_ARGS:-}"
STATE_DIR_FLAG=0
"$BIN" run --help | grep -q -- '--state-dir' && STATE_DIR_FLAG=1

# Starts node $1 with its clock stepped by $2 seconds (0: the true clock), joining through
# every other node ($3 = first: node 1 at the very start, which founds the cluster).
start_node() {
    local i="$1" skew="$2" first="${3:-}" j peers=() wrap=() args
    for ((j = 1; j <= NODES; j++)); do ((j == i)) || peers+=("http://127.0.0.1:$(int "$j")"); done
    args=(run --listen "127.0.0.1:$(pub "$i")" --internal-listen "127.0.0.1:$(int "$i")"
        --key-file "$STATE/key.pem" --admin-token-file "$STATE/admin-token"
        --client-ip-header x-forwarded-for --target-on-site "$TARGET"
        --refresh-interval-ms 1000 --ticket-expiry-ms 15000 --pass-expiry-ms 5000
        --eviction-interval-ms 500 --probe-interval-ms 300 --probe-timeout-ms 150
        --forward-timeout-ms 500 --shutdown-grace-ms 500 --join-rate-limit 0
        --rounds-log "$STATE/rounds-$i.jsonl" --voters-file "$STATE/voters-$i.json"
        --log-level warn)
    ((STATE_DIR_FLAG)) && args+=(--state-dir "$STATE/state-$i")
    [[ "$first" == first ]] || args+=(--peers "$(IFS=,; echo "${peers[*]}")")
    [[ "$skew" == 0 ]] || wrap=(env LD_PRELOAD="$LIBFAKETIME" FAKETIME="${skew}s")
    local cgdir=""
    if ((CUTS)); then cgdir="$CGROOT/$(cg "$i")"; mkdir -p "$cgdir"; fi
    # The shell puts itself in the node's cgroup, then becomes the node: the PID is the node's.
    TOKIO_WORKER_THREADS=1 bash -c '[[ -z "$1" ]] || echo $$ >"$1/cgroup.procs"; shift; exec "$@"' \
        _ "$cgdir" "${wrap[@]}" "$BIN" "${args[@]}" "${EXTRA[@]}" \
        </dev/null >>"$STATE/node-$i.log" 2>&1 &
    NODE_PID[$i]=$!
    NODE_STATE[$i]=up
    NODE_SKEW[$i]="$skew"
}

# Waits (at most $2 s) for $1 to answer 2xx.
wait_http() {
    local deadline=$((SECONDS + $2))
    until curl -fsS -m 1 -o /dev/null "$1" 2>/dev/null; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

start_balancer() {
    local i
    {
        cat <<EOF
global
    maxconn 4000
    nbthread 1
defaults
    mode http
    timeout connect 1s
    timeout queue 10s
    timeout client 60s
    timeout server 4s
    timeout http-keep-alive 60s
    option http-keep-alive
    option forwardfor
    http-reuse always
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout 503
frontend waitingroom
    bind 127.0.0.1:$FRONT_PORT
    default_backend nodes
backend nodes
    balance roundrobin
    cookie wr_node insert indirect nocache httponly
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 500ms fall 2 rise 1 maxconn 64 observe layer4 error-limit 1 on-error mark-down
EOF
        for ((i = 1; i <= NODES; i++)); do echo "    server node$i 127.0.0.1:$(pub "$i") cookie node$i"; done
    } >"$STATE/haproxy.cfg"
    haproxy -W -db -f "$STATE/haproxy.cfg" </dev/null >"$STATE/balancer.log" 2>&1 &
    BALANCER_PID=$!
}

# ---- the schedule ---------------------------------------------------------------------------
# Each action: "at_ms kind node arg", drawn from the seed before anything runs.
KINDS=(kill stop restart cut peercut clock)
((CUTS)) || KINDS=(kill stop restart clock)
declare -A COUNT=()
ACTIONS=()
draw_schedule() {
    RANDOM=$SEED
    local t=5000 end=$((DURATION * 1000)) i busy kind len node cands arg
    local -a until_ms=()
    for ((i = 1; i <= NODES; i++)); do until_ms[i]=0; done
    while ((t < end)); do
        busy=0 cands=()
        for ((i = 1; i <= NODES; i++)); do
            if ((until_ms[i] > t)); then busy=$((busy + 1)); else cands+=("$i"); fi
        done
        if ((busy >= MAX_DOWN || ${#cands[@]} == 0)); then t=$((t + 1000)); continue; fi
        kind="${KINDS[RANDOM % ${#KINDS[@]}]}"
        node="${cands[RANDOM % ${#cands[@]}]}"
        case "$kind" in
        kill) len=$((1000 + RANDOM % 7001)); ACTIONS+=("$t kill $node -" "$((t + len)) start $node -") ;;
        stop) len=$((1000 + RANDOM % 11001)); ACTIONS+=("$t stop $node -" "$((t + len)) cont $node -") ;;
        restart) len=0; ACTIONS+=("$t restart $node 0") ;;
        cut | peercut) len=$((2000 + RANDOM % 10001)); ACTIONS+=("$t $kind $node -" "$((t + len)) un$kind $node -") ;;
        clock)
            len=0 arg=$((500 + RANDOM % 2501))
            ((RANDOM % 2)) && arg="-$arg"
            ACTIONS+=("$t clock $node $(awk -v ms="$arg" 'BEGIN { printf "%+.3f", ms / 1000 }')")
            ;;
        esac
        # Two seconds more: a restarted node needs a moment to be back.
        until_ms[node]=$((t + len + 2000))
        t=$((t + 2000 + RANDOM % 4001))
    done
    mapfile -t ACTIONS < <(printf '%s\n' "${ACTIONS[@]}" | sort -n -s -k1,1)
}

# Stops node $1 (SIGTERM, then SIGKILL after 3 s) and starts it with its clock stepped by $2 s.
restart_node() {
    stop_process "${NODE_PID[$1]}" 3
    wait "${NODE_PID[$1]}" 2>/dev/null || true
    start_node "$1" "$2"
}

# Does one action.
act() {
    local kind="$1" i="$2" arg="$3" pid="${NODE_PID[$2]}"
    case "$kind" in
    kill) kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; NODE_STATE[$i]=dead ;;
    start) start_node "$i" "${NODE_SKEW[$i]}" ;;
    stop) kill -STOP "$pid" 2>/dev/null || true; NODE_STATE[$i]=stopped ;;
    cont) kill -CONT "$pid" 2>/dev/null || true; NODE_STATE[$i]=up ;;
    restart) restart_node "$i" "${NODE_SKEW[$i]}" ;;
    clock) restart_node "$i" "$arg" ;;
    cut | peercut) cut_apply -A "$i" "$kind"; NODE_STATE[$i]="$kind" ;;
    uncut | unpeercut) cut_apply -D "$i" "${kind#un}"; NODE_STATE[$i]=up ;;
    esac
    case "$kind" in kill | stop | restart | cut | peercut | clock) COUNT[$kind]=$((${COUNT[$kind]:-0} + 1)) ;; esac
}

# Heals everything: links restored, frozen nodes continued, dead ones started, clocks true.
heal() {
    local i
    ((CUTS)) && iptables -F "$CHAIN"
    for ((i = 1; i <= NODES; i++)); do
        case "${NODE_STATE[$i]}" in
        stopped) kill -CONT "${NODE_PID[$i]}" 2>/dev/null || true ;;
        dead) start_node "$i" 0 ;;
        esac
        [[ "${NODE_SKEW[$i]}" == 0 ]] || restart_node "$i" 0
        NODE_STATE[$i]=up
    done
}

# ---- the run --------------------------------------------------------------------------------
draw_schedule
say "seed $SEED: $NODES nodes, target $TARGET, $USERS visitors, ${DURATION} s of disturbances (${#ACTIONS[@]} actions), heal ${HEAL_S} s; replay: $0 --seed $SEED --duration $DURATION --nodes $NODES --max-down $MAX_DOWN --users $USERS --target $TARGET"
printf '%s\n' "${ACTIONS[@]}" >"$STATE/schedule"
((JSON)) || sed 's/^/swarm: schedule: /' "$STATE/schedule"

start_node 1 0 first
wait_http "http://127.0.0.1:$(pub 1)/readyz" 30 || { tail "$STATE/node-1.log" >&2; exit 1; }
for ((i = 2; i <= NODES; i++)); do start_node "$i" 0; done
for ((i = 2; i <= NODES; i++)); do
    wait_http "http://127.0.0.1:$(pub "$i")/readyz" 30 || { tail "$STATE/node-$i.log" >&2; exit 1; }
done
start_balancer
wait_http "http://127.0.0.1:$FRONT_PORT/readyz" 30
"$BIN" origin --listen "127.0.0.1:$ORIGIN_PORT" --waiting-room-url "http://127.0.0.1:$FRONT_PORT/" \
    --jwks-url "http://127.0.0.1:$FRONT_PORT/.well-known/jwks.json" >"$STATE/origin.log" 2>&1 &
ORIGIN_PID=$!
wait_http "http://127.0.0.1:$ORIGIN_PORT/healthz" 30

node_urls=()
for ((i = 1; i <= NODES; i++)); do node_urls+=("http://127.0.0.1:$(pub "$i")"); done
T0=$(date +%s%N)
"$BIN" load --url "http://127.0.0.1:$FRONT_PORT" --users "$USERS" --concurrency "$USERS" \
    --ramp-up-ms $((DURATION * 800)) --max-seconds $((DURATION + HEAL_S)) --progress-s 0 \
    --request-timeout-ms 5000 --origin "http://127.0.0.1:$ORIGIN_PORT" \
    --node-url "$(IFS=,; echo "${node_urls[*]}")" --banked 0.1 --bank-ms 25000 \
    --refresh-elsewhere 0.1 --replay-leave 0.1 --abandon 0.05 --come-back 0.1 --away-ms 15000 \
    --save-passes "$STATE/passes.txt" --json >"$STATE/load.json" 2>"$STATE/load.log" &
LOAD_PID=$!

for action in "${ACTIONS[@]}"; do
    read -r at kind node arg <<<"$action"
    while (($(elapsed_ms) < at)); do sleep 0.05; done
    act "$kind" "$node" "$arg"
    ((JSON)) || say "$(awk -v ms="$(elapsed_ms)" 'BEGIN { printf "%7.1f s", ms / 1000 }'): $kind node $node$([[ "$arg" == - ]] || echo " $arg")"
done
while (($(elapsed_ms) < DURATION * 1000)); do sleep 0.2; done
heal
say "healed at $(($(elapsed_ms) / 1000)) s; the visitors still in line have until $((DURATION + HEAL_S)) s"
load_status=0
wait "$LOAD_PID" || load_status=$?
LOAD_PID=""

# ---- verdict --------------------------------------------------------------------------------
# Each node's view once healed and the load is over (ready or why not, members, pause).
views=()
for ((i = 1; i <= NODES; i++)); do
    wait_http "http://127.0.0.1:$(pub "$i")/readyz" 20 || true
    code="$(curl -sS -m 2 -o "$STATE/readyz" -w '%{http_code}' "http://127.0.0.1:$(pub "$i")/readyz" 2>/dev/null || true)"
    case "$code" in
    200) ready=ready ;;
    000 | "") ready=down ;;
    *) ready="$(jq -r '.code // "not ready"' "$STATE/readyz" 2>/dev/null || echo "not ready")" ;;
    esac
    view="$(curl -fsS -m 2 "http://127.0.0.1:$(int "$i")/api/cluster" 2>/dev/null |
        jq -c --arg ready "$ready" '{ready: $ready, members: (.members | length), paused: (.paused // null), on_site}' 2>/dev/null ||
        echo "{\"ready\": \"$ready\"}")"
    views+=("$view")
done
printf '%s\n' "${views[@]}" | jq -s . >"$STATE/views.json"
curl -fsS -m 5 "http://127.0.0.1:$ORIGIN_PORT/_origin/passes" >"$STATE/origin.json" || echo '{}' >"$STATE/origin.json"
[[ -s "$STATE/load.json" ]] || echo '{}' >"$STATE/load.json"
[[ -s "$STATE/passes.txt" ]] || : >"$STATE/passes.txt"
audit_status=0
timeout 120 "$BIN" audit --url "http://127.0.0.1:$FRONT_PORT" --passes "$STATE/passes.txt" --json \
    >"$STATE/audit.json" 2>"$STATE/audit.log" || audit_status=$?
[[ -s "$STATE/audit.json" ]] || echo '{}' >"$STATE/audit.json"
grep -h "two different passes" "$STATE/load.log" 2>/dev/null | head -5 | jq -R . | jq -s . >"$STATE/doubles.json" || echo '[]' >"$STATE/doubles.json"
counts="$(for k in kill stop restart cut peercut clock; do echo "$k ${COUNT[$k]:-0}"; done |
    jq -Rn '[inputs | split(" ") | {(.[0]): (.[1] | tonumber)}] | add')"
summary="$(jq -n --argjson seed "$SEED" --argjson duration "$DURATION" --argjson target "$TARGET" \
    --argjson wall "$(($(elapsed_ms) / 1000))" --argjson cuts "$CUTS" --argjson counts "$counts" \
    --argjson load_status "$load_status" --argjson audit_status "$audit_status" \
    --slurpfile load "$STATE/load.json" --slurpfile origin "$STATE/origin.json" \
    --slurpfile audit "$STATE/audit.json" --slurpfile views "$STATE/views.json" \
    --slurpfile handed "$STATE/doubles.json" '
    ($load[0]) as $l | ($origin[0]) as $o | ($audit[0]) as $a |
    {seed: $seed, duration_s: $duration, wall_s: $wall, target: $target, link_cuts: ($cuts == 1),
     disturbances: $counts,
     most_valid_at_once: ($o.most_valid_at_once // null), origin_ids: ($o.ids_seen // null),
     load_max_on_site: ($l.max_on_site // null), visitors: ($l.users // null),
     admitted: ($l.admitted // null), lost: ($l.lost // null),
     double_passes_origin: ($o.double_passes // null), double_passes_load: ($l.double_passes // null),
     rejoined: ($l.rejoined // null), lapsed: ($l.lapsed // null), abandoned: ($l.abandoned // null),
     errors: ($l.errors // null), error_reasons: ($l.error_reasons // {}),
     audit_status: $audit_status, audit_violations: ($a.violations // null),
     audit_rounds: ($a.rounds // null), audit_passes: ($a.passes // null),
     passes_without_round: ($a.passes_without_round // null),
     audit_findings: (($a.findings // []) | .[:10]), doubles: (($o.doubles // []) | .[:5]),
     handed_twice: $handed[0], nodes_after: $views[0]}
    | .violations = ([
        (if .most_valid_at_once == null then "no origin figures" elif .most_valid_at_once > .target then "over the target: \(.most_valid_at_once) passes valid at once, target \(.target)" else empty end),
        (if .lost == null then "no load report (status \($load_status))" elif .lost > 0 then "\(.lost) visitors lost" else empty end),
        (if (.rejoined // 0) > 0 then "\(.rejoined) places lost (tickets refused while their visitors kept checking in)" else empty end),
        (if (.double_passes_origin // 0) + (.double_passes_load // 0) > 0 then "double passes: \(.double_passes_origin) at the origin, \(.double_passes_load) handed to one visitor" else empty end),
        (if $audit_status != 0 then "audit: \(.audit_violations // "failed") violations (exit \($audit_status))" else empty end)
      ])
    | .ok = (.violations | length == 0)')"
if ((JSON)); then
    jq -c . <<<"$summary"
else
    jq -r '"swarm: seed \(.seed): \(.wall_s) s wall, disturbances \(.disturbances | to_entries | map("\(.key) \(.value)") | join(", "))\(if .link_cuts then "" else " (no link cuts)" end)",
        "swarm: most passes valid at once at the origin \(.most_valid_at_once) (target \(.target); the load generator counts \(.load_max_on_site)); \(.admitted)/\(.visitors) let in, lost \(.lost), abandoned \(.abandoned), tickets refused while checking in \(.rejoined), banked admissions lapsed \(.lapsed)",
        "swarm: double passes \(.double_passes_origin) at the origin, \(.double_passes_load) handed to one visitor; audit: exit \(.audit_status), \(.audit_violations) violations over \(.audit_rounds) rounds and \(.audit_passes) passes, \(.passes_without_round) passes without a round",
        "swarm: errors \(.errors) \(.error_reasons | tostring)",
        "swarm: after healing: \(.nodes_after | to_entries | map("node \(.key + 1) \(.value.ready), \(.value.members // "?") members\(if .value.paused then ", paused \(.value.paused | tostring)" else "" end)") | join("; "))",
        (.audit_findings[] | "swarm: audit finding: \(.)"),
        (.doubles[] | "swarm: double pass at the origin: \(. | tostring)"),
        (.handed_twice[] | "swarm: \(.)"),
        (if .ok then "swarm: PASS" else (.violations[] | "swarm: VIOLATION: \(.)"), "swarm: FAIL (replay with --seed \(.seed))" end)' <<<"$summary"
fi
jq -e .ok <<<"$summary" >/dev/null

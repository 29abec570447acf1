#!/usr/bin/env bash
# A local waitingroom cluster behind a real load balancer (HAProxy, or nginx with
# BALANCER=nginx), round robin on one front port.
#
#   scripts/cluster.sh up N [-- NODE_ARGS...]   start N nodes + the balancer, wait until ready
#   scripts/cluster.sh add [-- NODE_ARGS...]    start one more node, join it, add it to the balancer
#   scripts/cluster.sh kill I [SIGNAL]          send node I a signal (default KILL); it stays in
#                                               the balancer, whose health check takes it out
#   scripts/cluster.sh restart I [SIGNAL]       stop node I (default TERM: it leaves the cluster
#                                               cleanly; KILL: a crash) and start it again with the
#                                               same key, address and flags (node 1 without
#                                               --peers, as at `up`), waiting until it is ready
#                                               and back in one cluster with the others
#   scripts/cluster.sh rolling-restart [SIGNAL] restart every node in turn, 1 to N, each once the
#                                               one before is back in the cluster
#   scripts/cluster.sh link I down|up           (netns mode) cut or restore node I's link
#   scripts/cluster.sh status                   what runs, and each node's view of the cluster
#   scripts/cluster.sh url I                    node I's public base URL (visitors)
#   scripts/cluster.sh internal-url I           node I's internal base URL (peers, /metrics,
#                                               /api/cluster)
#   scripts/cluster.sh admin I ARGS...          `waitingroom-node admin` against node I's internal
#                                               listener with the cluster's admin token, e.g.
#                                               `admin 2 set mode=queue_all`, `admin 1 get`
#   scripts/cluster.sh down                     stop exactly what `up`/`add` started, by PID
#
# Every node has two listeners: the public one (visitor API, page, JWKS, /livez, /readyz), which
# the balancer sends visitors to, and the internal one (--internal-listen: peer traffic,
# /metrics, /api/cluster, and the admin API /admin/... with the bearer token in
# $CLUSTER_DIR/admin-token), which peers, operators and this script use. The balancer passes on public
# routes only: /peer/..., /admin/..., /metrics and /api/cluster get 404 at the front.
#
# Environment:
#   FRONT_PORT=8080        the balancer's port on 127.0.0.1
#   BASE_PORT=FRONT_PORT+1 node i listens on BASE_PORT+i-1
#   INTERNAL_BASE_PORT=BASE_PORT+1000  node i's internal listener is on INTERNAL_BASE_PORT+i-1
#   CLUSTER_DIR=.cluster   state: PIDs, ports, key, logs, balancer config
#   BALANCER=haproxy       or nginx (installed from Debian's packages when missing)
#   NODE_BIN=...           the waitingroom-node binary (default: the release build, built
#                          with cargo when missing)
#   NETNS=1 (or --netns after `up N`)  each node in its own network namespace on a bridge, with
#                          tc netem delay NETEM_DELAY (15ms) +- NETEM_JITTER (5ms) on its link;
#                          needs root and iproute2. The balancer reaches nodes over the veths.
#   READY_TIMEOUT_S=60     how long to wait for every node and the balancer
#   HAPROXY_THREADS=1      HAProxy threads (one leaves the 2 cores of a laptop to the nodes)
#   NODE_THREADS=1         tokio worker threads per node (TOKIO_WORKER_THREADS): N nodes share
#                          this machine's cores, so one each wastes least on wake-ups
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FRONT_PORT="${FRONT_PORT:-8080}"
BASE_PORT="${BASE_PORT:-$((FRONT_PORT + 1))}"
INTERNAL_BASE_PORT="${INTERNAL_BASE_PORT:-$((BASE_PORT + 1000))}"
CLUSTER_DIR="${CLUSTER_DIR:-$ROOT/.cluster}"
BALANCER="${BALANCER:-haproxy}"
NETEM_DELAY="${NETEM_DELAY:-15ms}"
NETEM_JITTER="${NETEM_JITTER:-5ms}"
READY_TIMEOUT_S="${READY_TIMEOUT_S:-60}"

die() {
    echo "cluster.sh: $*" >&2
    exit 1
}
say() { echo "cluster.sh: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

need_balancer() {
    case "$BALANCER" in
    haproxy) command -v haproxy >/dev/null 2>&1 || apt_install haproxy ;;
    nginx) command -v nginx >/dev/null 2>&1 || apt_install nginx ;;
    *) die "BALANCER must be haproxy or nginx" ;;
    esac
    command -v curl >/dev/null 2>&1 || apt_install curl
}

# True when something listens on 127.0.0.1:$1 (or any address).
port_busy() {
    ss -ltnH "sport = :$1" 2>/dev/null | grep -q .
}

# Whether PID $1 is alive and its command line contains $2 (so a reused PID is never touched).
is_ours() {
    local pid="$1" what="$2"
    [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$what"
}

# What a node's command line contains: the name of the binary `up` started (NODE_BIN may name
# any file, e.g. an older build kept for a comparison).
node_name() { cat "$CLUSTER_DIR/node-name" 2>/dev/null || echo waitingroom-node; }

wait_http() {
    local url="$1" deadline=$((SECONDS + READY_TIMEOUT_S))
    until curl -fsS -m 2 -o /dev/null "$url" 2>/dev/null; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# ---- network namespaces -----------------------------------------------------------------

subnet() { echo "10.231.$((FRONT_PORT % 250))"; }
ns_name() { echo "wr${FRONT_PORT}n$1"; }
bridge_name() { echo "wrbr${FRONT_PORT}"; }

netns_setup_bridge() {
    if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
        apt_install iproute2
    fi
    [[ "$(id -u)" == 0 ]] || die "NETNS=1 needs root"
    local br
    br="$(bridge_name)"
    if ! ip link show "$br" >/dev/null 2>&1; then
        ip link add "$br" type bridge
        ip addr add "$(subnet).1/24" dev "$br"
        ip link set "$br" up
    fi
    echo "$br" >"$CLUSTER_DIR/bridge"
}

# Creates namespace for node $1 with a veth on the bridge; prints the node's address.
netns_setup_node() {
    local i="$1" ns br host addr
    ns="$(ns_name "$i")"
    br="$(bridge_name)"
    host="wrh${FRONT_PORT}n$i"
    addr="$(subnet).$((10 + i))"
    ip netns add "$ns"
    echo "$ns" >>"$CLUSTER_DIR/netns"
    ip link add "$host" type veth peer name eth0 netns "$ns"
    ip link set "$host" master "$br" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    if ! ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$NETEM_DELAY" "$NETEM_JITTER" 2>/dev/null; then
        # Some kernels (e.g. minimal VM kernels) have no sch_netem: keep the namespaces, say so.
        if [[ ! -f "$CLUSTER_DIR/no-netem" ]]; then
            say "warning: this kernel has no netem qdisc; nodes run in namespaces without added latency"
            : >"$CLUSTER_DIR/no-netem"
        fi
    fi
    echo "$addr"
}

netns_teardown() {
    local ns
    if [[ -f "$CLUSTER_DIR/netns" ]]; then
        while read -r ns; do
            if [[ -n "$ns" ]]; then
                ip netns del "$ns" 2>/dev/null || true
            fi
        done <"$CLUSTER_DIR/netns"
        rm -f "$CLUSTER_DIR/netns"
    fi
    if [[ -f "$CLUSTER_DIR/bridge" ]]; then
        ip link del "$(cat "$CLUSTER_DIR/bridge")" 2>/dev/null || true
        rm -f "$CLUSTER_DIR/bridge"
    fi
}

# ---- nodes ------------------------------------------------------------------------------

node_count() { cat "$CLUSTER_DIR/count" 2>/dev/null || echo 0; }

# Starts node $1 (1-based); the first starts the cluster, the others join through node 1.
start_node() {
    local i="$1" bin host port iport url ns="" args=()
    bin="$(node_bin)"
    port=$((BASE_PORT + i - 1))
    iport=$((INTERNAL_BASE_PORT + i - 1))
    host=127.0.0.1
    if [[ -f "$CLUSTER_DIR/netns-mode" ]]; then
        ns="$(ns_name "$i")"
        if [[ -f "$CLUSTER_DIR/node-$i.url" ]] && grep -qx "$ns" "$CLUSTER_DIR/netns" 2>/dev/null; then
            # A restart: the node's namespace and address are still there.
            host="$(sed -e 's#^http://##' -e 's#:[0-9]*$##' "$CLUSTER_DIR/node-$i.url")"
        else
            host="$(netns_setup_node "$i")"
        fi
    elif port_busy "$port" || port_busy "$iport"; then
        die "port $port or $iport is in use (set FRONT_PORT/BASE_PORT/INTERNAL_BASE_PORT)"
    fi
    url="http://$host:$port"
    # The balancer on 127.0.0.1 is the nodes' trusted proxy (the default): the client is the
    # last x-forwarded-for entry it writes.
    args=(run --listen "$host:$port" --internal-listen "$host:$iport"
        --key-file "$CLUSTER_DIR/key.pem" --client-ip-header x-forwarded-for
        --admin-token-file "$CLUSTER_DIR/admin-token")
    if ((i > 1)); then
        args+=(--peers "$(cat "$CLUSTER_DIR/node-1.internal")")
    fi
    if [[ -s "$CLUSTER_DIR/node-args" ]]; then
        mapfile -t extra <"$CLUSTER_DIR/node-args"
        args+=("${extra[@]}")
    fi
    export TOKIO_WORKER_THREADS="${NODE_THREADS:-1}"
    if [[ -n "$ns" ]]; then
        # `ip netns exec` execs the node: the PID is the node's.
        setsid ip netns exec "$ns" "$bin" "${args[@]}" \
            </dev/null >"$CLUSTER_DIR/node-$i.log" 2>&1 &
    else
        setsid "$bin" "${args[@]}" </dev/null >"$CLUSTER_DIR/node-$i.log" 2>&1 &
    fi
    echo $! >"$CLUSTER_DIR/node-$i.pid"
    echo "$url" >"$CLUSTER_DIR/node-$i.url"
    echo "http://$host:$iport" >"$CLUSTER_DIR/node-$i.internal"
}

wait_node() {
    local i="$1" url pid deadline=$((SECONDS + READY_TIMEOUT_S))
    url="$(cat "$CLUSTER_DIR/node-$i.url")"
    pid="$(cat "$CLUSTER_DIR/node-$i.pid")"
    until curl -fsS -m 2 -o /dev/null "$url/readyz" 2>/dev/null; do
        if ! is_ours "$pid" "$(node_name)" || ((SECONDS >= deadline)); then
            tail -20 "$CLUSTER_DIR/node-$i.log" >&2 || true
            die "node $i ($url) did not become ready"
        fi
        sleep 0.2
    done
}

# ---- balancer ---------------------------------------------------------------------------

write_haproxy_cfg() {
    local i n cfg="$CLUSTER_DIR/haproxy.cfg"
    n="$(node_count)"
    {
        cat <<EOF
# Generated by scripts/cluster.sh: round robin over the waitingroom nodes.
global
    maxconn 8000
    nbthread ${HAPROXY_THREADS:-1}
    # Failed requests only, to balancer.log (what a failover run wants to read afterwards).
    log stderr format raw local0 info

defaults
    mode http
    log global
    option httplog
    option dontlog-normal
    timeout connect 1s
    # How long a request may wait for a free slot on a node (see maxconn below).
    timeout queue 10s
    timeout client 60s
    # A node answers in milliseconds (a forwarded request within its --forward-timeout-ms); one
    # that takes seconds is frozen or cut off: give up on it well before a client would, and
    # retry elsewhere (response-timeout below).
    timeout server 4s
    timeout http-keep-alive 60s
    option http-keep-alive
    # On a reload (SIGUSR2, from add) the old process answers the next request on an idle
    # connection with "Connection: close" instead of closing it under the client.
    option idle-close-on-response
    option forwardfor
    http-reuse always
    # A node that dies mid-request: try another (conn-failure and empty-response are safe
    # for every visitor call; the nodes re-queue a visitor whose node is gone). One retry per
    # other node and then some: retries go round the servers (redispatch on every retry).
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout 503

frontend waitingroom
    bind 127.0.0.1:$FRONT_PORT
    # Only public routes reach the nodes (their public listeners do not serve these anyway).
    acl internal_route path /peer /admin /metrics /api/cluster
    acl internal_route path_beg /peer/ /admin/ /metrics/ /api/cluster/
    http-request return status 404 content-type application/json string '{"error":"no such route","code":"not_found"}' if internal_route
    default_backend nodes

backend nodes
    balance roundrobin
    # Affinity: a visitor's first answer (the join) sets a cookie naming the node that gave it,
    # which holds their ticket; their later requests go to that node instead of one that would
    # forward them to it. When that node is down or gone the cookie is ignored, the request goes
    # to another node (which takes the visitor over, as without affinity) and the cookie is
    # set anew. Measured: 12–19% less CPU per visitor with 3 nodes, 27–30% with 16
    # (docs/benchmarks.md#cluster-benchmark).
    cookie wr_node insert indirect nocache httponly
    option httpchk GET /readyz
    http-check expect status 200
    # Down after two failed checks, or at once when a request cannot connect to it (observe
    # layer4): a killed node leaves the rotation on the first refused connection.
    # At most 64 requests in progress per node, over kept-alive connections; the rest wait in
    # the backend's queue for whichever node is free first. Without the cap, 2,000 visitors at
    # once opened hundreds of connections to each node in a burst; connections that could not
    # be made within the connect timeout marked healthy nodes down, and visitors got 503s.
    default-server check inter 500ms fall 2 rise 1 maxconn 64 observe layer4 error-limit 1 on-error mark-down
EOF
        for ((i = 1; i <= n; i++)); do
            echo "    server node$i $(sed 's#^http://##' "$CLUSTER_DIR/node-$i.url") cookie node$i"
        done
    } >"$cfg"
}

write_nginx_cfg() {
    local i n cfg="$CLUSTER_DIR/nginx.conf"
    n="$(node_count)"
    {
        cat <<EOF
# Generated by scripts/cluster.sh: round robin over the waitingroom nodes.
daemon off;
master_process on;
worker_processes 2;
pid $CLUSTER_DIR/nginx.pid;
error_log $CLUSTER_DIR/balancer.log warn;
events { worker_connections 8000; }
http {
    access_log off;
    client_body_temp_path $CLUSTER_DIR/nginx-tmp;
    proxy_temp_path $CLUSTER_DIR/nginx-tmp;
    upstream nodes {
EOF
        for ((i = 1; i <= n; i++)); do
            echo "        server $(sed 's#^http://##' "$CLUSTER_DIR/node-$i.url") max_fails=1 fail_timeout=2s;"
        done
        cat <<EOF
        keepalive 256;
    }
    server {
        listen 127.0.0.1:$FRONT_PORT;
        # Only public routes reach the nodes (their public listeners do not serve these anyway).
        location ~ ^/(peer|admin|metrics|api/cluster)(/|\$) {
            default_type application/json;
            return 404 '{"error":"no such route","code":"not_found"}';
        }
        location / {
            proxy_pass http://nodes;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # The client's Host (a join's Origin is checked against it without --public-url).
            proxy_set_header Host \$http_host;
            proxy_set_header X-Forwarded-For \$remote_addr;
            # A node that refuses, resets or does not answer within 4 s (frozen, cut off) is
            # skipped for 2 s and the request goes to the next one. Not on a node's own 503
            # (owner_unavailable, overloaded: it is alive, and nginx would count the answer as a
            # failure and take healthy nodes out); the client backs off on those.
            proxy_connect_timeout 1s;
            proxy_read_timeout 4s;
            proxy_send_timeout 4s;
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries 3;
        }
    }
}
EOF
    } >"$cfg"
    mkdir -p "$CLUSTER_DIR/nginx-tmp"
}

start_balancer() {
    if port_busy "$FRONT_PORT"; then
        die "front port $FRONT_PORT is in use (set FRONT_PORT)"
    fi
    case "$BALANCER" in
    haproxy)
        write_haproxy_cfg
        haproxy -c -q -f "$CLUSTER_DIR/haproxy.cfg" >&2 || die "bad generated haproxy.cfg"
        # Master-worker in the foreground (-W -db): one PID, reloaded with SIGUSR2.
        setsid haproxy -W -db -f "$CLUSTER_DIR/haproxy.cfg" </dev/null \
            >"$CLUSTER_DIR/balancer.log" 2>&1 &
        ;;
    nginx)
        write_nginx_cfg
        nginx -t -q -c "$CLUSTER_DIR/nginx.conf" -p "$CLUSTER_DIR" >&2 || die "bad generated nginx.conf"
        setsid nginx -c "$CLUSTER_DIR/nginx.conf" -p "$CLUSTER_DIR" </dev/null \
            >>"$CLUSTER_DIR/balancer.log" 2>&1 &
        ;;
    esac
    echo $! >"$CLUSTER_DIR/balancer.pid"
    echo "$BALANCER" >"$CLUSTER_DIR/balancer"
}

reload_balancer() {
    local pid kind
    pid="$(cat "$CLUSTER_DIR/balancer.pid")"
    kind="$(cat "$CLUSTER_DIR/balancer")"
    is_ours "$pid" "$kind" || die "the balancer (PID $pid) is not running"
    case "$kind" in
    haproxy)
        write_haproxy_cfg
        kill -USR2 "$pid"
        ;;
    nginx)
        write_nginx_cfg
        kill -HUP "$pid"
        ;;
    esac
}

# How many /livez requests node $1 has served (from its internal /metrics).
livez_served() {
    curl -fsS -m 2 "$(cat "$CLUSTER_DIR/node-$1.internal")/metrics" 2>/dev/null |
        awk '/^waitingroom_http_request_duration_seconds_count\{.*route="\/livez"/ { n += $2 } END { print n + 0 }'
}

wait_balancer() {
    local deadline=$((SECONDS + READY_TIMEOUT_S))
    if ! wait_http "http://127.0.0.1:$FRONT_PORT/readyz"; then
        tail -20 "$CLUSTER_DIR/balancer.log" >&2 || true
        die "the balancer on 127.0.0.1:$FRONT_PORT does not answer"
    fi
    # Every node reachable through it: round robin hits each within a few requests. Each node
    # counts the /livez requests it served (health checks use /readyz, so these came through
    # the front); a node whose count grows is reached.
    local n seen i
    n="$(node_count)"
    while true; do
        for ((k = 0; k < 3 * n; k++)); do
            curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$FRONT_PORT/livez" 2>/dev/null || true
        done
        seen=0
        for ((i = 1; i <= n; i++)); do
            if (($(livez_served "$i") > 0)); then
                seen=$((seen + 1))
            fi
        done
        ((seen >= n)) && break
        ((SECONDS < deadline)) || die "the balancer reaches only $seen of $n nodes"
        sleep 0.3
    done
}

# ---- commands ---------------------------------------------------------------------------

print_urls() {
    local i n
    n="$(node_count)"
    echo "waitingroom cluster: $n nodes behind $(cat "$CLUSTER_DIR/balancer") (state in $CLUSTER_DIR)"
    echo "  front:  http://127.0.0.1:$FRONT_PORT/   (round robin)"
    for ((i = 1; i <= n; i++)); do
        [[ -f "$CLUSTER_DIR/node-$i.url" ]] || continue
        echo "  node $i: $(cat "$CLUSTER_DIR/node-$i.url")/   (internal $(cat "$CLUSTER_DIR/node-$i.internal")/, PID $(cat "$CLUSTER_DIR/node-$i.pid"), log $CLUSTER_DIR/node-$i.log)"
    done
}

cmd_up() {
    local n="${1:-}"
    if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
        die "usage: cluster.sh up N [--netns] [-- NODE_ARGS...]"
    fi
    shift
    local netns="${NETNS:-0}"
    if [[ "${1:-}" == "--netns" ]]; then
        netns=1
        shift
    fi
    [[ "${1:-}" == "--" ]] && shift
    if [[ -f "$CLUSTER_DIR/count" ]]; then
        die "a cluster is already up in $CLUSTER_DIR (scripts/cluster.sh down first)"
    fi
    need_balancer
    mkdir -p "$CLUSTER_DIR"
    rm -f "$CLUSTER_DIR"/node-* "$CLUSTER_DIR"/netns-mode
    printf '%s\n' "$@" >"$CLUSTER_DIR/node-args"
    [[ $# -gt 0 ]] || : >"$CLUSTER_DIR/node-args"
    echo "$FRONT_PORT" >"$CLUSTER_DIR/front_port"
    local bin
    bin="$(node_bin)"
    basename "$bin" >"$CLUSTER_DIR/node-name"
    "$bin" keygen --force --out "$CLUSTER_DIR/key.pem" >/dev/null 2>&1
    # The admin API's bearer token (scripts/cluster.sh admin ..., or curl -H "Authorization:
    # Bearer $(cat $CLUSTER_DIR/admin-token)").
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$CLUSTER_DIR/admin-token")
    if [[ "$netns" == 1 ]]; then
        : >"$CLUSTER_DIR/netns-mode"
        netns_setup_bridge
    fi
    # On any failure from here on, stop what was started.
    trap 'say "start failed; stopping what was started"; cmd_down >/dev/null 2>&1 || true' EXIT
    echo "$n" >"$CLUSTER_DIR/count"
    start_node 1
    wait_node 1
    local i
    for ((i = 2; i <= n; i++)); do
        start_node "$i"
    done
    for ((i = 2; i <= n; i++)); do
        wait_node "$i"
    done
    start_balancer
    wait_balancer
    trap - EXIT
    print_urls
}

cmd_add() {
    [[ -f "$CLUSTER_DIR/count" ]] || die "no cluster is up"
    [[ "${1:-}" == "--" ]] && shift
    local n
    n=$(($(node_count) + 1))
    if [[ $# -gt 0 ]]; then
        printf '%s\n' "$@" >>"$CLUSTER_DIR/node-args"
    fi
    start_node "$n"
    echo "$n" >"$CLUSTER_DIR/count"
    wait_node "$n"
    reload_balancer
    wait_balancer
    echo "node $n: $(cat "$CLUSTER_DIR/node-$n.url") added (PID $(cat "$CLUSTER_DIR/node-$n.pid"))"
}

cmd_kill() {
    local i="${1:-}" sig="${2:-KILL}" pid
    [[ -f "$CLUSTER_DIR/node-$i.pid" ]] || die "no node $i"
    pid="$(cat "$CLUSTER_DIR/node-$i.pid")"
    is_ours "$pid" "$(node_name)" || die "node $i (PID $pid) is not running"
    kill -s "$sig" "$pid"
    echo "node $i (PID $pid): sent SIG$sig"
}

# How many members node $1 sees (0 when it does not answer).
members_seen() {
    curl -fsS -m 2 "$(cat "$CLUSTER_DIR/node-$1.internal")/api/cluster" 2>/dev/null |
        grep -o '"members":\[[^]]*\]' | grep -o '"id"' | wc -l
}

# Waits until every node runs, is ready and sees all N as members (one cluster again).
wait_one_cluster() {
    local n i deadline=$((SECONDS + READY_TIMEOUT_S))
    n="$(node_count)"
    for ((i = 1; i <= n; i++)); do
        until [[ "$(members_seen "$i")" == "$n" ]] &&
            curl -fsS -m 2 -o /dev/null "$(cat "$CLUSTER_DIR/node-$i.url")/readyz" 2>/dev/null; do
            ((SECONDS < deadline)) || die "node $i does not see all $n nodes as one cluster"
            sleep 0.2
        done
    done
}

# Stops node $1 with signal $2 and starts it again with the command line `up` gave it.
cmd_restart() {
    local i="${1:-}" sig="${2:-TERM}" pid t0
    [[ "$i" =~ ^[1-9][0-9]*$ && -f "$CLUSTER_DIR/node-$i.pid" ]] || die "no node '${i}' (usage: cluster.sh restart I [SIGNAL])"
    pid="$(cat "$CLUSTER_DIR/node-$i.pid")"
    t0=$SECONDS
    if [[ "$sig" == TERM ]]; then
        stop_pid "$pid" "$(node_name)" 5
    elif is_ours "$pid" "$(node_name)"; then
        kill -s "$sig" "$pid"
        while is_ours "$pid" "$(node_name)"; do sleep 0.1; done
    fi
    start_node "$i"
    wait_node "$i"
    wait_one_cluster
    echo "node $i: restarted (SIG$sig, PID $(cat "$CLUSTER_DIR/node-$i.pid")), one cluster of $(node_count) again after $((SECONDS - t0)) s"
}

cmd_rolling_restart() {
    [[ -f "$CLUSTER_DIR/count" ]] || die "no cluster is up"
    local i n
    n="$(node_count)"
    for ((i = 1; i <= n; i++)); do
        cmd_restart "$i" "${1:-TERM}"
    done
}

cmd_link() {
    local i="${1:-}" state="${2:-}"
    [[ -f "$CLUSTER_DIR/netns-mode" ]] || die "link needs a cluster started with --netns"
    [[ "$state" == up || "$state" == down ]] || die "usage: cluster.sh link I down|up"
    [[ -f "$CLUSTER_DIR/node-$i.url" ]] || die "no node $i"
    ip -n "$(ns_name "$i")" link set eth0 "$state"
    echo "node $i: link $state"
}

# Stops PID $1 (checked to be $2): SIGTERM, then SIGKILL after $3 seconds.
stop_pid() {
    local pid="$1" what="$2" grace="$3" k
    is_ours "$pid" "$what" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((k = 0; k < grace * 10; k++)); do
        is_ours "$pid" "$what" || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
    [[ -d "$CLUSTER_DIR" ]] || {
        echo "nothing to stop"
        return 0
    }
    local f pid pids=()
    if [[ -f "$CLUSTER_DIR/balancer.pid" ]]; then
        stop_pid "$(cat "$CLUSTER_DIR/balancer.pid")" "$(cat "$CLUSTER_DIR/balancer" 2>/dev/null || echo haproxy)" 3
        rm -f "$CLUSTER_DIR/balancer.pid"
    fi
    # SIGTERM every node at once (each leaves the cluster cleanly), then wait.
    for f in "$CLUSTER_DIR"/node-*.pid; do
        [[ -f "$f" ]] || continue
        pid="$(cat "$f")"
        if is_ours "$pid" "$(node_name)"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
        rm -f "$f"
    done
    for pid in "${pids[@]}"; do
        stop_pid "$pid" "$(node_name)" 5
    done
    netns_teardown
    rm -f "$CLUSTER_DIR/count" "$CLUSTER_DIR/netns-mode" "$CLUSTER_DIR/no-netem"
    echo "stopped ${#pids[@]} nodes and the balancer"
}

cmd_status() {
    [[ -f "$CLUSTER_DIR/count" ]] || {
        echo "no cluster is up (state dir $CLUSTER_DIR)"
        return 1
    }
    local i n pid url state
    n="$(node_count)"
    print_urls
    for ((i = 1; i <= n; i++)); do
        pid="$(cat "$CLUSTER_DIR/node-$i.pid")"
        url="$(cat "$CLUSTER_DIR/node-$i.internal")"
        if is_ours "$pid" "$(node_name)"; then
            state="$(curl -fsS -m 2 "$url/readyz" 2>/dev/null || echo 'not ready')"
            echo "node $i: running, ${state%$'\n'}; $(curl -fsS -m 2 "$url/metrics" 2>/dev/null |
                grep -E '^waitingroom_(members|queued|is_root|admitted_total) ' | tr '\n' ' ')"
        else
            echo "node $i: not running"
        fi
    done
    pid="$(cat "$CLUSTER_DIR/balancer.pid" 2>/dev/null || true)"
    if is_ours "$pid" "$(cat "$CLUSTER_DIR/balancer")"; then
        echo "balancer: running (PID $pid)"
    else
        echo "balancer: not running"
    fi
}

# Prints node $2's URL of kind $1 (url: public, internal).
cmd_url() {
    local kind="$1" i="${2:-}"
    [[ "$i" =~ ^[1-9][0-9]*$ && -f "$CLUSTER_DIR/node-$i.$kind" ]] || die "no node '$i' (usage: cluster.sh $3 I)"
    cat "$CLUSTER_DIR/node-$i.$kind"
}

cmd_admin() {
    local i="${1:-}"
    shift || true
    local url
    url="$(cmd_url internal "$i" "admin")"
    "$(node_bin)" admin --url "$url" --token-file "$CLUSTER_DIR/admin-token" "$@"
}

cmd="${1:-}"
shift || true
case "$cmd" in
up) cmd_up "$@" ;;
add) cmd_add "$@" ;;
kill) cmd_kill "$@" ;;
restart) cmd_restart "$@" ;;
rolling-restart) cmd_rolling_restart "$@" ;;
link) cmd_link "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
url) cmd_url url "${1:-}" url ;;
internal-url) cmd_url internal "${1:-}" internal-url ;;
admin) cmd_admin "$@" ;;
*)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Origin gating against a real cluster, with nginx auth_request (scripts/gating-nginx.conf) or
# Caddy forward_auth (deploy/caddy/Caddyfile), both asking a node's /api/pass/verify:
# no pass -> 302 to the waiting room, forged or expired pass -> 302, valid pass -> the origin.
#
#   scripts/gating-test.sh [nginx|caddy]      (default nginx; the gate is installed from
#                                              Debian's packages when missing)
#
# Starts 2 nodes behind the balancer (scripts/cluster.sh), the gate and a stand-in origin,
# all on 127.0.0.1; stops them by PID at the end, whatever happens. About 15 s.
#   FRONT_PORT (default 18280): the cluster's front port; the gate uses FRONT_PORT+50, the
#   origin FRONT_PORT+51, the nodes FRONT_PORT+1...
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
GATE_KIND="${1:-nginx}"
case "$GATE_KIND" in
nginx | caddy) ;;
*)
    echo "usage: $0 [nginx|caddy]" >&2
    exit 2
    ;;
esac
export FRONT_PORT="${FRONT_PORT:-18280}"
GATE_PORT=$((FRONT_PORT + 50))
ORIGIN_PORT=$((FRONT_PORT + 51))
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-gating.XXXXXX")"
export CLUSTER_DIR="$STATE/cluster"
GATE_PID=""

cleanup() {
    # nginx stops gracefully on QUIT, Caddy on TERM.
    stop_process "$GATE_PID" 3 "$([[ "$GATE_KIND" == nginx ]] && echo QUIT || echo TERM)"
    bash "$ROOT/scripts/cluster.sh" down >/dev/null 2>&1 || true
    rm -rf "$STATE"
}
trap cleanup EXIT

command -v "$GATE_KIND" >/dev/null 2>&1 || apt_install "$GATE_KIND"
for tool in curl jq; do
    command -v "$tool" >/dev/null 2>&1 || apt_install "$tool"
done

# The gate on GATE_PORT in front of a stand-in origin on ORIGIN_PORT that checks nothing and
# answers "origin: welcome, pass <the X-Waitingroom-Pass-Id header>".
start_nginx() {
    mkdir -p "$STATE/nginx/tmp"
    sed -e "s#@GATE_LISTEN@#127.0.0.1:$GATE_PORT#" \
        -e "s#@WAITING_ROOM@#127.0.0.1:$FRONT_PORT#" \
        -e "s#@WAITING_PAGE@#$FRONT/#" \
        -e "s#@ORIGIN@#http://127.0.0.1:$ORIGIN_PORT#" \
        -e "s#@ORIGIN_LISTEN@#127.0.0.1:$ORIGIN_PORT#" \
        -e "s#@GATE_SECRET@#$GATE_SECRET#" \
        -e "s#@STATE@#$STATE/nginx#g" \
        "$ROOT/scripts/gating-nginx.conf" >"$STATE/nginx/nginx.conf"
    nginx -t -q -c "$STATE/nginx/nginx.conf" -p "$STATE/nginx"
    nginx -c "$STATE/nginx/nginx.conf" -p "$STATE/nginx" </dev/null >"$STATE/nginx/out.log" 2>&1 &
    GATE_PID=$!
}

# The operator's Caddyfile as it is, its settings from the environment; the stand-in origin
# is a second site in the same process.
start_caddy() {
    mkdir -p "$STATE/caddy"
    {
        cat "$ROOT/deploy/caddy/Caddyfile"
        printf '\nhttp://127.0.0.1:%s {\n\trespond "origin: welcome, pass {header.X-Waitingroom-Pass-Id}" 200\n}\n' \
            "$ORIGIN_PORT"
    } >"$STATE/caddy/Caddyfile"
    export GATE_ADDRESS="http://127.0.0.1:$GATE_PORT" WAITING_ROOM="127.0.0.1:$FRONT_PORT" \
        WAITING_PAGE="$FRONT/" ORIGIN="127.0.0.1:$ORIGIN_PORT" GATE_SECRET="$GATE_SECRET"
    # Caddy keeps its state under XDG_DATA_HOME and XDG_CONFIG_HOME: keep it in STATE.
    XDG_DATA_HOME="$STATE/caddy" XDG_CONFIG_HOME="$STATE/caddy" HOME="$STATE/caddy" \
        caddy run --adapter caddyfile --config "$STATE/caddy/Caddyfile" \
        </dev/null >"$STATE/caddy/out.log" 2>&1 &
    GATE_PID=$!
}

fails=0
passes=0
check() {
    local what="$1" want="$2" got="$3"
    if [[ "$got" == "$want" ]]; then
        echo "ok   $what"
        passes=$((passes + 1))
    else
        echo "FAIL $what: want $want, got $got"
        fails=$((fails + 1))
    fi
}

# Passes valid 3 s (tickets too: a pass lasts its admission's claim window at least), visitors
# admitted straight through while the site has room.
bash "$ROOT/scripts/cluster.sh" up 2 -- --pass-expiry-ms 3000 --ticket-expiry-ms 3000 \
    --target-on-site 1000 --admit-straight-through true --log-level warn >/dev/null
FRONT="http://127.0.0.1:$FRONT_PORT"
# The return-path secret the gate signs the way back with (not the cluster key).
GATE_SECRET="$("${NODE_BIN:-$(node_bin)}" gate-secret --key-file "$CLUSTER_DIR/key.pem")"

start_"$GATE_KIND"
GATE="http://127.0.0.1:$GATE_PORT"
for _ in $(seq 100); do
    curl -s -o /dev/null -m 1 "$GATE/" && break
    kill -0 "$GATE_PID" 2>/dev/null || { cat "$STATE/$GATE_KIND/out.log"; exit 1; }
    sleep 0.1
done

# status code, and the Location header if any
fetch() {
    curl -s -m 5 -o "$STATE/body" -D "$STATE/headers" -w '%{http_code}' "$@"
}
location() { grep -i '^location:' "$STATE/headers" | tr -d '\r' | cut -d' ' -f2; }

code=$(fetch "$GATE/shop/cart")
check "no pass: redirected" 302 "$code"
back="$(location)"
check "no pass: to the waiting room, with the signed way back" \
    "$FRONT/?return_to=%2Fshop%2Fcart&return_sig=" "${back%%return_sig=*}return_sig="

code=$(fetch -H "Cookie: wr_pass=not.a.pass" "$GATE/shop/cart")
check "garbage pass: redirected" 302 "$code"

# A real visitor: join (admitted straight through once the cluster has counted its free
# places; until then queued, so check in until admitted), leave with a pass.
answer=$(curl -fsS -m 5 -X POST "$FRONT/api/join")
for _ in $(seq 100); do
    [[ "$(jq -r .status <<<"$answer")" == admitted ]] && break
    sleep 0.2
    answer=$(curl -fsS -m 5 -X POST -H 'content-type: application/json' \
        -d "{\"ticket\":\"$(jq -r .ticket <<<"$answer")\"}" "$FRONT/api/checkin")
done
ticket=$(jq -r .ticket <<<"$answer")
pass=$(curl -fsS -m 5 -X POST -H 'content-type: application/json' \
    -d "{\"ticket\":\"$ticket\"}" "$FRONT/api/leave" | jq -r .pass)
[[ "$pass" == *.*.* ]] || { echo "FAIL no pass from the cluster"; exit 1; }
pass_id=$(cut -d. -f2 <<<"$pass" | tr '_-' '/+' | base64 -d 2>/dev/null | jq -r .id || true)

code=$(fetch -H "Cookie: wr_pass=$pass" "$GATE/shop/cart")
check "valid pass (cookie): origin answers" 200 "$code"
check "valid pass: origin content, pass id passed on" "origin: welcome, pass $pass_id" "$(cat "$STATE/body")"

# The room sends a visitor with a pass on to the page they asked for, if the gate signed it;
# a way back made up by someone else is ignored (the visitor lands on the front page).
code=$(fetch -H "Cookie: wr_pass=$pass" "$back")
check "the room sends the visitor back to the page they asked for" "303 /shop/cart" \
    "$code $(location | sed 's#^https\?://[^/]*##')"
code=$(fetch -H "Cookie: wr_pass=$pass" "$FRONT/?return_to=%2Fadmin%2Fdelete")
check "a way back without the gate's signature is ignored" "303 1" \
    "$code $(location | grep -vc '/admin/delete')"

code=$(fetch -H "Authorization: Bearer $pass" "$GATE/")
check "valid pass (bearer): origin answers" 200 "$code"

# Only the room names the pass: a client's own X-Waitingroom-Pass-Id never reaches the origin.
code=$(fetch -H "Cookie: wr_pass=$pass" -H "X-Waitingroom-Pass-Id: someone-else" "$GATE/")
check "a pass id sent by the client is replaced by the room's" \
    "200 origin: welcome, pass $pass_id" "$code $(cat "$STATE/body")"
code=$(fetch -H "X-Waitingroom-Pass-Id: someone-else" "$GATE/")
check "a pass id header without a pass: redirected" 302 "$code"

# The pass's claims with a signature that is not theirs (the ticket's).
forged="$(cut -d. -f1-2 <<<"$pass").$(cut -d. -f3 <<<"$ticket")"
code=$(fetch -H "Cookie: wr_pass=$forged" "$GATE/")
check "pass with a wrong signature: redirected" 302 "$code"

code=$(fetch -H "Cookie: wr_pass=$ticket" "$GATE/")
check "ticket presented as a pass: redirected" 302 "$code"

sleep 1.6
# Past half its life, a pass in use comes back renewed (nginx passes the room's Set-Cookie on;
# Caddy's forward_auth does not pass answer headers to the browser).
code=$(fetch -H "Cookie: wr_pass=$pass" "$GATE/shop/cart")
if [[ "$GATE_KIND" == nginx ]]; then
    renewed=$(grep -ci '^set-cookie: wr_pass=' "$STATE/headers" || true)
    check "a pass used past half its life: renewed cookie passed on" "200 1" "$code $renewed"
fi
sleep 1.6
code=$(fetch -H "Cookie: wr_pass=$pass" "$GATE/shop/cart")
check "expired pass: redirected" 302 "$code"

code=$(fetch "http://127.0.0.1:$ORIGIN_PORT/")
check "(the stand-in origin itself checks nothing)" 200 "$code"

echo "gating-$GATE_KIND: $passes passed, $fails failed"
((fails == 0))

#!/usr/bin/env bash
# The waiting page tried as a visitor would, in headless Chromium.
#
# Starts 3 nodes (one place on the site, passes valid 3 s, everyone queued) and the demo origin,
# then sends three headless browsers to three different nodes, one after the other. A GET never
# takes a place: the page takes it with its own POST.
#   A - JavaScript off: the page shows its button (checked: no place taken before it is
#       pressed); it is pressed (DevTools Input events, scripts/cdp-click.py), and from then on
#       only the <meta refresh> path moves it on;
#   B - JavaScript on: the page joins by itself;  (E - JavaScript on, only there to make C wait
#       longer)
#   C - JavaScript on; its first page is dumped after its script joined (the position must show);
#   D - joins last; its page is screenshot to docs/waiting-page.png;
#   F - asks for German (Accept-Language): its page must be in German, <html lang="de">
#       (screenshot docs/waiting-page-de.png);
#   H - comes after an event was scheduled (admin API): pre-queued, its page must count down
#       to the start (screenshot docs/waiting-page-prequeue.png);
#   G - comes after the room was closed to new visitors (mode reject, set through the admin
#       API): its page must say so (screenshot docs/waiting-page-closed.png).
# Each browser is then watched through the DevTools HTTP endpoint (/json/list: the page title
# carries the position) until it lands on the origin, which shows its welcome page (title "Demo
# shop") only to a valid pass cookie, and redirects anyone else back to the waiting room. C's position must go down on its own on the way.
#
# Installs Debian's chromium when missing. Everything it starts is stopped on exit.
# Usage: scripts/browser-test.sh            (BASE_PORT=18301 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
command -v chromium >/dev/null 2>&1 || apt_install chromium
command -v python3 >/dev/null 2>&1 || apt_install python3

cargo build -q -p waitingroom-http --bin waitingroom-node
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/waitingroom-node"

BASE_PORT=${BASE_PORT:-18301}
ORIGIN_PORT=$((BASE_PORT + 9))
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    # Chromium's own children (renderer, GPU, utility) outlive the browser process for a moment
    # and keep writing into its profile: stop those whose command line names our directory.
    pkill -f -- "--user-data-dir=$WORK/" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK" 2>/dev/null || { sleep 1; rm -rf "$WORK"; }
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in "$WORK"/*.log; do echo "--- $f" >&2; tail -n 15 "$f" >&2; done
    exit 1
}

wait_ok() { # url
    for _ in $(seq 1 100); do
        curl -sf -o /dev/null "$1" && return 0
        sleep 0.1
    done
    fail "$1 not ready"
}

"$BIN" keygen --out "$WORK/key.pem" >/dev/null 2>&1
echo "browser-test-admin-token-0123456789" >"$WORK/admin-token"
ORIGIN="http://127.0.0.1:$ORIGIN_PORT/"
COMMON=(--key-file "$WORK/key.pem" --target-on-site 1 --pass-expiry-ms 3000
    --ticket-expiry-ms 6000 --refresh-interval-ms 1000 --eviction-interval-ms 500
    --admit-straight-through false --origin-url "$ORIGIN" --admin-token-file "$WORK/admin-token")
NODES=()
INTERNAL=()
for i in 0 1 2; do
    port=$((BASE_PORT + i))
    iport=$((BASE_PORT + 50 + i))
    peers=()
    [ "$i" -gt 0 ] && peers=(--peers "http://127.0.0.1:$((BASE_PORT + 50))")
    "$BIN" run --listen "127.0.0.1:$port" --internal-listen "127.0.0.1:$iport" "${COMMON[@]}" \
        "${peers[@]}" >/dev/null 2>"$WORK/node$i.log" &
    PIDS+=($!)
    NODES+=("http://127.0.0.1:$port")
    INTERNAL+=("http://127.0.0.1:$iport")
    wait_ok "http://127.0.0.1:$port/readyz"
done
"$BIN" origin --listen "127.0.0.1:$ORIGIN_PORT" --waiting-room-url "${NODES[0]}/" \
    --jwks-url "${NODES[0]}/.well-known/jwks.json" >/dev/null 2>"$WORK/origin.log" &
PIDS+=($!)
wait_ok "${ORIGIN}healthz"

chrome_flags() { # profile-dir
    echo --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$1" --window-size=1000,760
}

browse() { # name node-url debug-port extra-flags...
    local name=$1 url=$2 port=$3
    shift 3
    mkdir -p "$WORK/profile-$name"
    # shellcheck disable=SC2046
    chromium $(chrome_flags "$WORK/profile-$name") --remote-debugging-port="$port" "$@" "$url" \
        >/dev/null 2>"$WORK/chromium-$name.log" &
    PIDS+=($!)
}

# title|url of the browser's page, via the DevTools HTTP endpoint.
page_of() { # debug-port
    local json
    json=$(curl -s "http://127.0.0.1:$1/json/list" || true)
    local title url
    # Here-strings, not pipes into early-exiting readers: with pipefail a SIGPIPE would fail.
    title=$(grep -o -m 1 '"title": "[^"]*"' <<<"$json" | cut -d'"' -f4 || true)
    url=$(grep -o -m 1 '"url": "[^"]*"' <<<"$json" | cut -d'"' -f4 || true)
    title=${title%%$'\n'*}
    url=${url%%$'\n'*}
    printf '%s|%s' "$title" "$url"
}

wait_queued() { # name debug-port: until its page shows a position in the title
    for _ in $(seq 1 100); do
        [[ "$(page_of "$2")" =~ ^[0-9]+\ · ]] && return 0
        sleep 0.1
    done
    fail "browser $1 never showed the waiting page"
}

watch_positions() { # debug-port file: each new position its page shows, one per line
    local page last="" _
    for _ in $(seq 1 480); do
        page=$(page_of "$1")
        [ "${page#*|}" = "$ORIGIN" ] && return 0
        if [[ "${page%%|*}" =~ ^([0-9]+)\ · ]] && [ "${BASH_REMATCH[1]}" != "$last" ]; then
            last=${BASH_REMATCH[1]}
            echo "$last" >>"$2"
        fi
        sleep 0.25
    done
}

places_total() { # visitors queued or on the site through every node (their internal /metrics)
    local n=0 v u
    for u in "${INTERNAL[@]}"; do
        v=$(curl -s "$u/metrics" | awk '/^waitingroom_(queued|on_site) / { s += $2 } END { print s + 0 }')
        n=$((n + ${v:-0}))
    done
    echo "$n"
}

DBG_A=$((BASE_PORT + 21)); DBG_B=$((BASE_PORT + 22)); DBG_C=$((BASE_PORT + 23))
browse A "${NODES[0]}/" "$DBG_A" --blink-settings=scriptEnabled=false
for _ in $(seq 1 100); do
    [[ "$(page_of "$DBG_A")" == "… ·"* ]] && break
    sleep 0.1
done
sleep 0.5
[ "$(places_total)" -eq 0 ] || fail "A's page load took a place before its button was pressed"
python3 scripts/cdp-click.py "$DBG_A" "form.join button" \
    || fail "could not press A's button"
wait_queued A "$DBG_A"
# Queued, or already let out by a round (the site's one place is free): one place either way.
P=$(places_total); [ "$P" -eq 1 ] || fail "A's button did not take exactly one place ($P)"
echo "A took its place with the page's button (no JavaScript)"
browse B "${NODES[1]}/shop/item/42" "$DBG_B"
wait_queued B "$DBG_B"
# E: one more visitor ahead of C, so that C has a few places to move up.
browse E "${NODES[2]}/" $((BASE_PORT + 24))
wait_queued E $((BASE_PORT + 24))

# C: the position shows on the page (dumped DOM); then the same visitor waits in a browser.
mkdir -p "$WORK/profile-C" docs
# shellcheck disable=SC2046
DOM=$(timeout 30 chromium $(chrome_flags "$WORK/profile-C") --virtual-time-budget=5000 \
    --dump-dom "${NODES[2]}/" 2>/dev/null) || fail "chromium --dump-dom failed"
POS=$(grep -o 'id="position">[0-9]*<' <<<"$DOM" | grep -o '[0-9][0-9]*' || true)
grep -q 'aria-live="polite"' <<<"$DOM" || fail "no aria-live region in the page: ${DOM:0:400}"
grep -q '<html lang="en">' <<<"$DOM" || fail "no lang on the page"
[ -n "$POS" ] && [ "$POS" -ge 2 ] || fail "position not shown (or not behind A, B and E): '$POS'"
echo "C is queued at position $POS (dump-dom)"
browse C "${NODES[2]}/" "$DBG_C"
wait_queued C "$DBG_C"
# C's positions on its page, sampled from now on until it lands on the origin: the screenshots
# below take seconds (more on a loaded machine), and C moves up meanwhile.
: >"$WORK/positions-C"
watch_positions "$DBG_C" "$WORK/positions-C" &
PIDS+=($!)
# The screenshot is of a fourth visitor (D), who joins last and is not watched further.
mkdir -p "$WORK/profile-D"
# shellcheck disable=SC2046
timeout 30 chromium $(chrome_flags "$WORK/profile-D") --hide-scrollbars --virtual-time-budget=5000 \
    --screenshot="$ROOT/docs/waiting-page.png" "${NODES[1]}/" >/dev/null 2>&1 \
    || fail "screenshot failed"
echo "screenshot: docs/waiting-page.png"
# F asks for German (Accept-Language): the page is in German, <html lang="de">.
mkdir -p "$WORK/profile-F"
# shellcheck disable=SC2046
DOM=$(timeout 30 chromium $(chrome_flags "$WORK/profile-F") --lang=de-DE --accept-lang=de-DE,de \
    --virtual-time-budget=5000 --dump-dom "${NODES[0]}/" 2>/dev/null) || fail "dump-dom (de) failed"
grep -q '<html lang="de">' <<<"$DOM" || fail "the German page is not lang=de: ${DOM:0:300}"
grep -q 'Ihr Platz in der Warteschlange' <<<"$DOM" || fail "the German page is not in German"
# shellcheck disable=SC2046
timeout 30 chromium $(chrome_flags "$WORK/profile-F") --lang=de-DE --accept-lang=de-DE,de \
    --hide-scrollbars --virtual-time-budget=5000 --screenshot="$ROOT/docs/waiting-page-de.png" \
    "${NODES[0]}/" >/dev/null 2>&1 || fail "screenshot (de) failed"
echo "F's page is in German (Accept-Language: de); screenshot: docs/waiting-page-de.png"

# Watch all three until they land on the origin's welcome page.
declare -A DONE=()
for _ in $(seq 1 120); do
    for v in A B C; do
        [ -n "${DONE[$v]:-}" ] && continue
        port_var="DBG_$v"
        page=$(page_of "${!port_var}")
        title=${page%%|*}
        url=${page#*|}
        if [ "$url" = "$ORIGIN" ] && [ "$title" = "Demo shop" ]; then
            DONE[$v]=1
            echo "$v landed on the origin with a valid pass"
        fi
    done
    [ "${#DONE[@]}" -eq 3 ] && break
    sleep 0.5
done
SEEN_C=" $(tr '\n' ' ' <"$WORK/positions-C")"
[ "${#DONE[@]}" -eq 3 ] || fail "not every browser reached the origin (done: ${!DONE[*]}; C saw positions:$SEEN_C)"
echo "C's position on the way:$SEEN_C"
first=$(echo "$SEEN_C" | awk '{print $1}')
last=$(echo "$SEEN_C" | awk '{print $NF}')
[ -n "$first" ] && [ "$first" -gt "$last" ] || fail "C's position never moved on by itself:$SEEN_C"

# The admin API of node I (0-based): admin_api I METHOD PATH [JSON], failing the test otherwise.
admin_api() {
    local url="${INTERNAL[$1]}$3"
    curl -fsS -X "$2" -H "Authorization: Bearer $(cat "$WORK/admin-token")" \
        -H 'content-type: application/json' ${4:+-d "$4"} "$url" >/dev/null \
        || fail "the admin API refused $2 $3 ${4:-}"
}

# A new visitor's page at URL (browser profile NAME): its DOM after 5 s of virtual time in
# $DOM, and a screenshot to docs/PNG. new_visitor NAME URL PNG
new_visitor() {
    mkdir -p "$WORK/profile-$1"
    # shellcheck disable=SC2046
    DOM=$(timeout 30 chromium $(chrome_flags "$WORK/profile-$1") --virtual-time-budget=5000 \
        --dump-dom "$2" 2>/dev/null) || fail "dump-dom ($1) failed"
    # shellcheck disable=SC2046
    timeout 30 chromium $(chrome_flags "$WORK/profile-$1") --hide-scrollbars \
        --virtual-time-budget=5000 --screenshot="$ROOT/docs/$3" "$2" >/dev/null 2>&1 \
        || fail "screenshot ($1) failed"
}

# After an admin change (made through admin_api just before, reaching every node within two
# rounds), a new visitor's page at URL (profile NAME) in $DOM and docs/PNG, with data-status
# STATUS: after_change NAME URL PNG STATUS
after_change() {
    sleep 1.5
    new_visitor "$1" "$2" "$3"
    grep -q "data-status=\"$4\"" <<<"$DOM" || fail "$1's page does not say $4: ${DOM:0:300}"
}

# An event is scheduled (admin API at node 1): pre-queue open now, start in ten minutes. A new
# visitor (H) is pre-queued: the page counts down to the start.
NOW_MS=$(($(date +%s%3N)))
admin_api 0 POST /admin/events "{\"name\": \"launch\", \"prequeue_start_ms\": $NOW_MS, \"start_ms\": $((NOW_MS + 600000)), \"end_ms\": $((NOW_MS + 3600000)), \"shuffle_at_start\": true}"
after_change H "${NODES[2]}/" waiting-page-prequeue.png prequeue
grep -Eq 'id="position">(10:00|9:[0-5][0-9])<' <<<"$DOM" || fail "no countdown on the pre-queued page"
echo "H's page counts down to the event's start; screenshot: docs/waiting-page-prequeue.png"
admin_api 0 DELETE /admin/events/launch

# The room closes to new visitors (mode reject, through the admin API at node 3): a new visitor's
# page says so (its join is answered 503 "rejected").
admin_api 2 PATCH /admin/settings '{"mode": "reject"}'
after_change G "${NODES[1]}/" waiting-page-closed.png closed
grep -q 'closed to new visitors' <<<"$DOM" || fail "the closed page has no explanation"
echo "G's page says the room is closed (mode reject); screenshot: docs/waiting-page-closed.png"

echo "browser test passed"

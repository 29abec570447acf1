#!/usr/bin/env bash
# DNS discovery end to end (`--peers-dns`): a real DNS server (dnsmasq from Debian's packages, on
# a loopback port) lists the nodes under one name, as a Kubernetes headless Service does.
#   1. Three nodes start at the same moment, each on its own loopback address (127.0.0.1-3, the
#      same ports), knowing only the name: they must end up as ONE cluster of 3 (whoever found
#      nobody at first starts a cluster; clusters that formed apart merge).
#   2. A fourth address is added to the name (dnsmasq re-reads its hosts file on SIGHUP) and a
#      fourth node started: every node must see 4 members.
#   3. Node 4 is removed: its record dropped from the name and the node stopped: the others must
#      drop it (3 members each).
#   4. Node 1 (the smallest address, which starts a cluster of its own when it starts) is killed
#      and started again: its lone cluster and the others' must merge back into one of 4.
# Loopback only; bounded (each wait at most WAIT_S seconds); stops its own processes by PID.
#
#   scripts/dns-discovery-test.sh        (DNS_PORT, PUBLIC_PORT, PEER_PORT, WAIT_S to change)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
command -v dnsmasq >/dev/null 2>&1 || apt_install dnsmasq
for tool in curl jq; do command -v "$tool" >/dev/null 2>&1 || apt_install "$tool"; done
NAME=peers.waitingroom.test
: "${DNS_PORT:=18453}" "${PUBLIC_PORT:=18480}" "${PEER_PORT:=18490}" "${WAIT_S:=30}"
BIN="$(node_bin)"
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-dns.XXXXXX")"
# dnsmasq drops its privileges: it must be able to read the hosts file.
chmod 755 "$STATE"
PIDS=()
declare -A NODE_PID=()
trap 'stop_pids_and_remove "$STATE" 5' EXIT

hosts() { # the name's records: 127.0.0.1 .. 127.0.0.$1
    local i
    for ((i = 1; i <= $1; i++)); do echo "127.0.0.$i $NAME"; done >"$STATE/hosts"
    chmod 644 "$STATE/hosts"
}

start_node() {
    local i="$1"
    "$BIN" run --listen "127.0.0.$i:$PUBLIC_PORT" --internal-listen "127.0.0.$i:$PEER_PORT" \
        --key-file "$STATE/key.pem" --peers-dns "$NAME" --dns-server "127.0.0.1:$DNS_PORT" \
        --dns-interval-ms 500 --log-level warn >/dev/null 2>"$STATE/node-$i.log" &
    NODE_PID[$i]=$!
    PIDS+=($!)
}

kill_node() { # SIGKILL node $1 (quietly: no job notice)
    {
        stop_process "${NODE_PID[$1]}" 0 KILL
        wait "${NODE_PID[$1]}" || true
    } 2>/dev/null
}

members() { # node $1's member count (0 while it does not answer)
    curl -fsS -m 1 "http://127.0.0.$1:$PEER_PORT/api/cluster" 2>/dev/null | jq '.members | length' ||
        echo 0
}

wait_for_members() { # every node 1..$1 sees $1 members, within WAIT_S
    local n="$1" i ok
    for ((t = 0; t < WAIT_S * 5; t++)); do
        ok=1
        for ((i = 1; i <= n; i++)); do [[ "$(members "$i")" == "$n" ]] || ok=0; done
        ((ok)) && return 0
        sleep 0.2
    done
    echo "dns: FAIL: not one cluster of $n after ${WAIT_S}s:" >&2
    for ((i = 1; i <= n; i++)); do
        echo "node $i: $(members "$i") members" >&2
        tail -5 "$STATE/node-$i.log" >&2
    done
    return 1
}

hosts 3
dnsmasq --keep-in-foreground --log-facility=- --port="$DNS_PORT" --listen-address=127.0.0.1 \
    --bind-interfaces --no-resolv --no-hosts --addn-hosts="$STATE/hosts" \
    --pid-file="$STATE/dnsmasq.pid" 2>"$STATE/dnsmasq.log" &
DNS_PID=$!
PIDS+=("$DNS_PID")
"$BIN" keygen --out "$STATE/key.pem" >/dev/null
for _ in $(seq 50); do
    kill -0 "$DNS_PID" 2>/dev/null || { cat "$STATE/dnsmasq.log" >&2; exit 1; }
    grep -q "started, version" "$STATE/dnsmasq.log" 2>/dev/null && break
    sleep 0.1
done

ms() { echo $(($(date +%s%N) / 1000000)); }
started=$(ms)
for i in 1 2 3; do start_node "$i"; done
wait_for_members 3
echo "dns: 3 nodes started at once found each other through $NAME: one cluster of 3 after $(($(ms) - started)) ms"

hosts 4
kill -HUP "$DNS_PID"
started=$(ms)
start_node 4
wait_for_members 4
echo "dns: a 4th record and node: every node sees 4 members after $(($(ms) - started)) ms"

metric() { curl -fsS "http://127.0.0.1:$PEER_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
for _ in $(seq 20); do [[ "$(metric waitingroom_dns_peers)" == 4 ]] && break; sleep 0.2; done
lookups="$(metric 'waitingroom_dns_lookups_total{result="ok"}')"
peers="$(metric waitingroom_dns_peers)"
[[ "${lookups:-0}" -gt 0 && "$peers" == 4 ]] || {
    echo "dns: FAIL: metrics: lookups ok=$lookups, peers=$peers" >&2
    exit 1
}
echo "dns: node 1 metrics: $lookups successful lookups, $peers peers in the last one"

hosts 3
kill -HUP "$DNS_PID"
kill_node 4
started=$(ms)
wait_for_members 3
echo "dns: node 4's record removed and the node killed: the others dropped it after $(($(ms) - started)) ms"

incarnation() { curl -fsS -m 1 "http://127.0.0.$1:$PEER_PORT/api/cluster" | jq .incarnation; }
before="$(incarnation 1)"
kill_node 1
started=$(ms)
start_node 1
wait_for_members 3
[[ "$(incarnation 1)" != "$before" ]] || {
    echo "dns: FAIL: node 1 was not restarted" >&2
    exit 1
}
echo "dns: node 1 killed and restarted: one cluster of 3 again after $(($(ms) - started)) ms"
echo "dns: PASS"

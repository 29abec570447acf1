# shellcheck shell=bash
# Shared by the scripts in this folder (sourced, not run). Needs ROOT set to the repository.

# Installs Debian packages, refreshing the package lists once if the first try fails.
apt_install() {
    echo "installing $* from Debian's packages" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >&2; then
        apt-get update >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >&2
    fi
}

# Prints the waitingroom-node binary: $NODE_BIN, else the release build (built when missing).
node_bin() {
    if [[ -n "${NODE_BIN:-}" ]]; then
        echo "$NODE_BIN"
        return
    fi
    local bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/waitingroom-node"
    if [[ ! -x "$bin" ]]; then
        echo "building $bin (cargo build --release -p waitingroom-http)" >&2
        (cd "$ROOT" && cargo build --release -p waitingroom-http >&2)
    fi
    echo "$bin"
}

# Stops process $1 if it still runs: signal $3 (default TERM), then SIGKILL after $2 seconds
# (default 5). For processes a script started itself, by PID.
stop_process() {
    local pid="$1" grace="${2:-5}" sig="${3:-TERM}" k
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((k = 0; k < grace * 10; k++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# The EXIT trap of a script that starts its own processes: stops every PID in the array PIDS
# (SECONDS after TERM, then KILL) and removes DIR.
stop_pids_and_remove() {
    local dir="$1" seconds="$2" pid
    for pid in "${PIDS[@]}"; do stop_process "$pid" "$seconds"; done
    rm -rf "$dir"
}

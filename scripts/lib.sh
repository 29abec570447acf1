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

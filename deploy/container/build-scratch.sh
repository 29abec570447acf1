#!/usr/bin/env bash
# Builds the node's container image on this machine without downloading any base image, and
# runs `waitingroom-node --version` in it.
#
# The image is Containerfile.scratch: FROM scratch, plus the waitingroom-node binary built here
# and the shared libraries `ldd` names for it, at the same paths. buildah (Debian's package,
# installed when missing) builds it as root with the vfs storage driver and chroot isolation
# (no overlay mount, no container runtime, no user namespace needed), in a throw-away storage
# directory removed at the end.
#
# Then it starts a node from the image (host network, the cluster key mounted read-only) on
# 127.0.0.1:PORT, waits for /readyz, and stops it with SIGTERM (by the PID listening there).
#
#   NODE_BIN=...   the binary (default: the release build, built with cargo when missing)
#   PORT=18290     where the node in the container listens
#   KEEP_IMAGE=DIR also save the image there as an OCI archive (waitingroom-node.oci.tar)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
command -v buildah >/dev/null 2>&1 || apt_install buildah
BIN="$(node_bin)"
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-image.XXXXXX")"
BUILDAH=(buildah --root "$STATE/storage" --runroot "$STATE/run" --storage-driver vfs)
IMAGE=localhost/waitingroom-node:scratch
PORT="${PORT:-18290}"
CONTAINER=""
NODE_PID=""
cleanup() {
    stop_process "$NODE_PID"
    wait 2>/dev/null || true
    if [[ -n "$CONTAINER" ]]; then "${BUILDAH[@]}" rm "$CONTAINER" >/dev/null 2>&1 || true; fi
    "${BUILDAH[@]}" rmi --all --force >/dev/null 2>&1 || true
    rm -rf "$STATE"
}
trap cleanup EXIT

# The root filesystem: the binary (debug sections stripped: they are most of a debug build)
# and every library it loads, the dynamic loader included.
rootfs="$STATE/context/rootfs"
install -d "$rootfs/usr/local/bin" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
objcopy --strip-debug "$BIN" "$rootfs/usr/local/bin/waitingroom-node"
mapfile -t libs < <(ldd "$BIN" | grep -o '/[^ ]*' | sort -u)
((${#libs[@]} > 0)) || { echo "build-scratch: ldd found no libraries for $BIN" >&2; exit 1; }
for lib in "${libs[@]}"; do
    install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done
cp "$ROOT/deploy/container/Containerfile.scratch" "$STATE/context/Containerfile"

"${BUILDAH[@]}" build --isolation chroot --quiet -t "$IMAGE" "$STATE/context" >/dev/null
size=$("${BUILDAH[@]}" images --format '{{.Size}}' "$IMAGE")
echo "built $IMAGE ($size; libraries: ${libs[*]})"

CONTAINER="$("${BUILDAH[@]}" from --quiet "$IMAGE")"
want="$("$BIN" --version)"
got="$("${BUILDAH[@]}" run --isolation chroot "$CONTAINER" -- /usr/local/bin/waitingroom-node --version)"
if [[ -n "${KEEP_IMAGE:-}" ]]; then
    "${BUILDAH[@]}" push --quiet "$IMAGE" "oci-archive:$KEEP_IMAGE/waitingroom-node.oci.tar"
fi
if [[ "$got" != "$want" ]]; then
    echo "image: FAIL: the container printed '$got', the binary '$want'" >&2
    exit 1
fi
echo "image: '$got' in the container"

# A node from the image, serving.
"$BIN" keygen --out "$STATE/cluster-key.pem" >/dev/null 2>&1
chmod 0644 "$STATE/cluster-key.pem" # the image's user is not this one
"${BUILDAH[@]}" run --isolation chroot -v "$STATE/cluster-key.pem:/run/secrets/cluster-key:ro" \
    "$CONTAINER" -- /usr/local/bin/waitingroom-node run --listen "127.0.0.1:$PORT" \
    --key-file /run/secrets/cluster-key --log-level warn </dev/null >"$STATE/node.log" 2>&1 &
for _ in $(seq 100); do
    curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$PORT/readyz" 2>/dev/null && break
    sleep 0.1
done
NODE_PID="$(ss -ltnpH "sport = :$PORT" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)"
if [[ -z "$NODE_PID" ]] || ! curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$PORT/readyz"; then
    echo "image: FAIL: the node in the container did not become ready" >&2
    cat "$STATE/node.log" >&2
    exit 1
fi
kill -TERM "$NODE_PID"
for _ in $(seq 50); do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$NODE_PID" 2>/dev/null; then
    echo "image: FAIL: the node in the container did not stop on SIGTERM" >&2
    exit 1
fi
NODE_PID=""
wait
echo "image: a node from the image served /readyz on 127.0.0.1:$PORT and stopped on SIGTERM"

#!/usr/bin/env bash
# Checks every operator file in deploy/ without a cluster, a registry or a running service:
#
#   - YAML lint (yamllint) of every YAML file here;
#   - Kubernetes: the kustomization rendered (`kubectl kustomize`, when kubectl is installed;
#     otherwise each listed file) and validated against the Kubernetes schemas, strictly, for
#     the newest version kubernetes-validate knows and for 1.30 (the oldest the manifests
#     need: the preStop sleep action), plus secret-example.yaml;
#   - systemd: `systemd-analyze verify` of the unit in a scratch root where ExecStart's binary
#     is NODE_BIN (any warning fails), and `systemd-analyze security --offline` at most 2.0;
#   - Prometheus: `promtool check rules`, `promtool test rules` (alerts.test.yml) and
#     `promtool check config`;
#   - Grafana: the dashboard is JSON with panels (that every metric it names exists is the
#     waitingroom-http test tests::deploy::every_metric_the_dashboard_and_alerts_use_exists);
#   - Caddy: `caddy validate` of deploy/caddy/Caddyfile (scripts/gating-test.sh caddy runs it);
#   - the API description: `waitingroom-node openapi` accepted by openapi-spec-validator (PyPI);
#   - settings: every flag and config key these files give the node is one NODE_BIN knows,
#     except those in PENDING_FLAGS (flags other work adds; each is reported while missing,
#     and the check fails once one exists, so the list gets emptied).
#
# Installs what it lacks: yamllint and kubernetes-validate from PyPI in a virtualenv under
# ~/.cache/waitingroom-deploy-check; promtool unpacked from Debian's prometheus package there
# (not installed: that package would also set up a Prometheus server); systemd and caddy
# from Debian's packages.
#
#   NODE_BIN=...  the node binary (default: the release build, built with cargo when missing)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEPLOY="$ROOT/deploy"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/waitingroom-deploy-check"
# Flags the files use that this binary does not know yet (none since the security work added
# --internal-listen, --public-url and --trusted-proxies); see deploy/README.md.
PENDING_FLAGS=""
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-deploy-check.XXXXXX")"
trap 'rm -rf "$STATE"' EXIT

passes=0
fails=0
step() {
    local what="$1"
    shift
    if "$@" >"$STATE/out" 2>&1; then
        echo "ok   $what"
        passes=$((passes + 1))
    else
        echo "FAIL $what"
        sed 's/^/     /' "$STATE/out"
        fails=$((fails + 1))
    fi
}

# ---- tools ----------------------------------------------------------------------------------

python_tools() {
    local venv="$CACHE/venv"
    if [[ ! -x "$venv/bin/kubernetes-validate" || ! -x "$venv/bin/yamllint" ||
        ! -x "$venv/bin/openapi-spec-validator" ]]; then
        echo "installing yamllint, kubernetes-validate, openapi-spec-validator from PyPI into $venv" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet yamllint kubernetes-validate openapi-spec-validator >&2
    fi
    YAMLLINT="$venv/bin/yamllint"
    KUBERNETES_VALIDATE="$venv/bin/kubernetes-validate"
}

promtool_bin() {
    if command -v promtool >/dev/null 2>&1; then
        PROMTOOL=promtool
        return
    fi
    PROMTOOL="$CACHE/prometheus/usr/bin/promtool"
    [[ -x "$PROMTOOL" ]] && return
    echo "unpacking promtool from Debian's prometheus package into $CACHE/prometheus" >&2
    mkdir -p "$CACHE/deb"
    if ! (cd "$CACHE/deb" && apt-get download prometheus >&2 2>/dev/null); then
        apt-get update >&2
        (cd "$CACHE/deb" && apt-get download prometheus >&2)
    fi
    dpkg-deb -x "$(ls "$CACHE"/deb/prometheus_*.deb | tail -1)" "$CACHE/prometheus"
}

python_tools
promtool_bin
command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd
command -v caddy >/dev/null 2>&1 || apt_install caddy
BIN="$(node_bin)"

# ---- checks ---------------------------------------------------------------------------------

lint_yaml() {
    find "$DEPLOY" -name '*.yml' -o -name '*.yaml' | sort | xargs "$YAMLLINT" --strict \
        -c "$DEPLOY/.yamllint"
}

kubernetes_manifests() {
    local k="$DEPLOY/kubernetes" rendered="$STATE/kubernetes.yaml"
    if command -v kubectl >/dev/null 2>&1; then
        kubectl kustomize "$k" >"$rendered"
    else
        echo "(kubectl not installed: validating the kustomization's files one by one)"
        "$CACHE/venv/bin/python" - "$k" >"$rendered" <<'PY'
import pathlib, sys, yaml
k = pathlib.Path(sys.argv[1])
kust = yaml.safe_load((k / "kustomization.yaml").read_text())
for f in kust["resources"]:
    print("---\n" + (k / f).read_text())
for gen in kust.get("configMapGenerator", []):
    for f in gen["files"]:
        assert (k / f).is_file(), f
PY
    fi
    grep -q '^kind: StatefulSet' "$rendered"
    for version in 1.37.0 1.30.0; do
        "$KUBERNETES_VALIDATE" --strict --quiet -k "$version" "$rendered" "$k/secret-example.yaml"
    done
}

systemd_unit() {
    local root="$STATE/systemd-root" unit=waitingroom-node.service
    # A root with the system's units (verify resolves dependencies such as sysinit.target)
    # and the node binary where ExecStart looks for it.
    mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root/usr/local/bin"
    cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
    cp "$BIN" "$root/usr/local/bin/waitingroom-node"
    cp "$DEPLOY/systemd/$unit" "$root/etc/systemd/system/"
    systemd-analyze verify --root="$root" "$root/etc/systemd/system/$unit" 2>"$STATE/verify"
    # Unknown or misspelt settings are only warnings to systemd: not to us.
    if [[ -s "$STATE/verify" ]]; then
        cat "$STATE/verify"
        return 1
    fi
    systemd-analyze security --offline=true --threshold=20 --no-pager --root="$root" \
        "$root/etc/systemd/system/$unit" | tail -1
}

prometheus_rules() (
    cd "$DEPLOY/prometheus"
    "$PROMTOOL" check rules alerts.yml
    "$PROMTOOL" test rules alerts.test.yml
    "$PROMTOOL" check config prometheus.yml
)

grafana_dashboard() {
    jq -e '(.panels | length) > 0 and all(.panels[]; (.targets | length) > 0)' \
        "$DEPLOY/grafana/waitingroom.json"
}

caddyfile() {
    GATE_ADDRESS=http://127.0.0.1:1 WAITING_ROOM=127.0.0.1:2 WAITING_PAGE=http://room.invalid/ GATE_SECRET=secret \
        ORIGIN=127.0.0.1:3 caddy validate --adapter caddyfile --config "$DEPLOY/caddy/Caddyfile"
}

# The flags (`--name`) and config keys (`name = `, as `--name`) the deploy files give the node.
used_flags() {
    {
        grep -ho -- '- --[a-z-]*' "$DEPLOY/kubernetes/statefulset.yaml" | cut -c3-
        grep -h '^ExecStart=' "$DEPLOY/systemd/waitingroom-node.service" | grep -o -- '--[a-z-]*'
        grep -h '^Environment=WAITINGROOM_' "$DEPLOY/systemd/waitingroom-node.service" |
            sed -E 's/^Environment=WAITINGROOM_([A-Z_]*)=.*/\1/' | tr 'A-Z_' 'a-z-' | sed 's/^/--/'
        cat "$DEPLOY/systemd/node.toml" "$DEPLOY/kubernetes/node.toml" |
            grep -oE '^[a-z_]+ *=' | tr -d ' =' | tr _ - | sed 's/^/--/'
    } | sort -u
}

node_settings() {
    "$BIN" run --help | grep -oE -- '--[a-z][a-z-]*' | sort -u >"$STATE/known"
    local unknown="" now_known=""
    for flag in $(used_flags); do
        local pending=false
        [[ " $PENDING_FLAGS " == *" ${flag#--} "* ]] && pending=true
        if grep -qx -- "$flag" "$STATE/known"; then
            $pending && now_known+=" $flag"
        elif $pending; then
            echo "$flag" >>"$STATE/pending"
        else
            unknown+=" $flag"
        fi
    done
    [[ -z "$unknown" ]] || { echo "unknown to waitingroom-node run:$unknown"; return 1; }
    [[ -z "$now_known" ]] || {
        echo "now known, remove from PENDING_FLAGS in deploy/check.sh:$now_known"
        return 1
    }
    python3 -c 'import sys, tomllib; [tomllib.load(open(f, "rb")) for f in sys.argv[1:]]' \
        "$DEPLOY/systemd/node.toml" "$DEPLOY/kubernetes/node.toml"
}

api_description() {
    "$BIN" openapi >"$STATE/openapi.json"
    "$CACHE/venv/bin/openapi-spec-validator" "$STATE/openapi.json"
}

step "YAML lint (yamllint --strict)" lint_yaml
step "Kubernetes manifests valid (kubernetes-validate --strict, 1.37 and 1.30)" kubernetes_manifests
step "systemd unit (systemd-analyze verify, security --offline <= 2.0)" systemd_unit
step "Prometheus rules and config (promtool check/test rules, check config)" prometheus_rules
step "Grafana dashboard is JSON with panels" grafana_dashboard
step "Caddyfile (caddy validate)" caddyfile
step "flags and config keys known to waitingroom-node run" node_settings
step "API description (waitingroom-node openapi | openapi-spec-validator)" api_description
if [[ -s "$STATE/pending" ]]; then
    echo "     used, not in this binary yet (PENDING_FLAGS):" $(sort -u "$STATE/pending")
fi
echo "deploy-check: $passes passed, $fails failed"
((fails == 0))

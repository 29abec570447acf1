#!/usr/bin/env bash
# The fairness records checked by a stock JOSE library, not by our own code: PyJWT (PyPI, with
# the `cryptography` backend) verifies every round record a real 2-node cluster publishes
# (`GET /api/rounds`) against the keys it publishes (`/.well-known/jwks.json`), by `kid`, as
# EdDSA, and checks the header's `typ` (`wr-round+jwt`) and the hash chain (`prev`).
#
#   scripts/jose-check.sh            (PyJWT installed in a virtualenv under
#                                     ~/.cache/waitingroom-jose-check when missing)
#
# Starts 2 nodes behind the balancer (scripts/cluster.sh) on 127.0.0.1, lets 60 visitors of
# the load generator through 10 places, then stops what it started, by PID. About 20 s.
#   FRONT_PORT (default 18380): the cluster's front port; NODE_BIN: the node binary.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
export FRONT_PORT="${FRONT_PORT:-18380}"
STATE="$(mktemp -d "${TMPDIR:-/tmp}/waitingroom-jose.XXXXXX")"
export CLUSTER_DIR="$STATE/cluster"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/waitingroom-jose-check"

cleanup() {
    bash "$ROOT/scripts/cluster.sh" down >/dev/null 2>&1 || true
    rm -rf "$STATE"
}
trap cleanup EXIT

if [[ ! -x "$CACHE/venv/bin/python" ]] || ! "$CACHE/venv/bin/python" -c 'import jwt, cryptography' 2>/dev/null; then
    echo "installing PyJWT[crypto] from PyPI into $CACHE/venv" >&2
    python3 -m venv "$CACHE/venv"
    "$CACHE/venv/bin/pip" install --quiet 'PyJWT[crypto]' >&2
fi
NODE_BIN="$(node_bin)"
export NODE_BIN

# Passes of 5 s, tickets too (a pass lasts its admission's claim window at least): the 60
# visitors go through the 10 places in several rounds.
bash "$ROOT/scripts/cluster.sh" up 2 -- --target-on-site 10 --pass-expiry-ms 5000 \
    --ticket-expiry-ms 5000 >/dev/null
FRONT="http://127.0.0.1:$FRONT_PORT"
"$NODE_BIN" load --url "$FRONT" --users 60 --concurrency 30 --max-seconds 60 \
    --progress-s 0 >"$STATE/load.txt"
curl -fsS "$FRONT/.well-known/jwks.json" >"$STATE/jwks.json"
curl -fsS "$FRONT/api/rounds?limit=1000" >"$STATE/rounds.json"

"$CACHE/venv/bin/python" - "$STATE/jwks.json" "$STATE/rounds.json" <<'PY'
import base64, hashlib, json, sys

import jwt

jwks = jwt.PyJWKSet.from_dict(json.load(open(sys.argv[1])))
keys = {k.key_id: k for k in jwks.keys}
records = json.load(open(sys.argv[2]))["rounds"]
assert len(records) >= 3, f"only {len(records)} records"
prev = None
for token in records:
    header = jwt.get_unverified_header(token)
    assert header["typ"] == "wr-round+jwt", header
    claims = jwt.decode(token, key=keys[header["kid"]], algorithms=["EdDSA"])
    if prev is not None:
        link = base64.urlsafe_b64encode(hashlib.sha256(prev.encode()).digest()).rstrip(b"=")
        assert claims["prev"] == link.decode(), (claims["round"], "chain broken")
    prev = token
# A record changed by one claim no longer verifies.
head, payload, sig = records[-1].split(".")
claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
claims["admitted"] += 1
forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
try:
    jwt.decode(f"{head}.{forged}.{sig}", key=keys[jwt.get_unverified_header(records[-1])["kid"]],
               algorithms=["EdDSA"])
    sys.exit("jose-check: FAIL: a changed record verified")
except jwt.InvalidSignatureError:
    pass
print(f"jose-check: PASS: PyJWT {jwt.__version__} verified {len(records)} records and their chain; "
      "a changed one was refused")
PY

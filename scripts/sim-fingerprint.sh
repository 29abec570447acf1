#!/usr/bin/env bash
# The simulator's behaviour in six lines: the trace hashes of three runs and a hash of each sweep
# preset's rows (wall times left out). A change that must not change behaviour (a refactor, a
# speed-up) prints the same lines before and after; run it on both commits and diff.
#
# Usage: scripts/sim-fingerprint.sh [CHECKOUT]   (default: this one; builds its release simulator)
set -euo pipefail
co=${1:-$(cd "$(dirname "$0")/.." && pwd)}
target=${CARGO_TARGET_DIR:-$co/target}
(cd "$co" && cargo build --release -q -p waitingroom-sim)
sim=$target/release/waitingroom-sim

hash() { "$sim" run "$@" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["trace_hash"])'; }
echo "run A $(hash --users 2500 --target-on-site 20 --churn 5 --seed 7)"
echo "run B $(hash --users 20000 --nodes 32 --latency pareto:20:1.5:400 --loss-probability 0.02 \
    --target-on-site 200 --admit-straight-through --seed 3)"
# Run C's tickets are as short as its passes: a pass lasts at least its admission's claim window
# (the ticket expiry), so shorter passes would not turn places over faster.
echo "run C $(hash --users 5000 --nodes 12 --restarts 2 --partitions 2 --partition-kind random \
    --loss-probability 0.03 --pass-expiry-ms 4000 --ticket-expiry-ms 4000 --target-on-site 80 \
    --seed 11)"
for preset in thesis chaos mixed; do
    rows=$("$sim" sweep --preset "$preset" --seeds 20 --jobs 2 --json 2>/dev/null | python3 -c '
import hashlib, json, sys
rows = [{k: v for k, v in r.items() if "wall" not in k} for r in json.load(sys.stdin)["rows"]]
print(hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16])')
    echo "sweep $preset $rows"
done

#!/usr/bin/env bash
# CI check of the fuzz crate (fuzz/, outside the workspace) with stable Rust:
# - formatting and clippy of the target bodies;
# - the bodies run on their seed inputs and a few thousand deterministic mutations of them
#   (a smoke test: real fuzzing needs nightly, see scripts/fuzz-run.sh);
# - the libFuzzer binaries type-check (libfuzzer-sys builds libFuzzer itself from C++ source,
#   so this needs a C++ compiler; skipped with a notice when there is none).
set -euo pipefail
cd "$(dirname "$0")/.."
manifest=fuzz/Cargo.toml
cargo fmt --manifest-path "$manifest" --check
cargo clippy --locked --manifest-path "$manifest" --no-default-features --all-targets -- -D warnings
cargo test --locked --manifest-path "$manifest" --no-default-features
if command -v c++ >/dev/null 2>&1; then
    cargo check --locked --manifest-path "$manifest" --bins
else
    echo "fuzz-check: no C++ compiler, libFuzzer binaries not checked"
fi
echo "fuzz-check: ok"

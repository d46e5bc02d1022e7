#!/usr/bin/env bash
# Runs every check and test of the workspace, from a fresh clone, installing
# what it needs. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== toolchain"
cargo --version
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== format"
cargo fmt --all -- --check

echo "== lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== tests"
# The test profile is optimised (opt-level 1) so the seeded simulations run
# their 100,000 commands per seed in seconds.
cargo test --workspace --locked

echo "== bad input: schemathesis against the served OpenAPI document"
# At least 1,000 requests; no 5xx, nothing outside the documented responses.
bash scripts/schemathesis.sh

echo "== bad input: fuzz targets"
# cargo-fuzz on stable (RUSTC_BOOTSTRAP=1), 30 s per target; no crash.
bash scripts/fuzz.sh

#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ (order JSON bodies, websocket command
# frames, journal segments and payloads), each for a bounded time, and fails
# on any crash: a panic, a failed assertion, an AddressSanitizer report, a
# timeout or running out of memory.
#
#   bash scripts/fuzz.sh                          # CI: 30 s per target
#   UPDOWN_FUZZ_SECONDS=600 bash scripts/fuzz.sh  # long mode
#   UPDOWN_FUZZ_TARGETS="journal_record" bash scripts/fuzz.sh
#
# cargo-fuzz needs nightly compiler flags (-Zsanitizer, sanitizer coverage);
# CI has only stable, so they are unlocked with RUSTC_BOOTSTRAP=1 for these
# builds only. The main workspace never sees it: fuzz/ is its own workspace
# (excluded from the root one), built into target/fuzz.
#
# New inputs found go to target/fuzz/corpus/<target> (the seeds in
# fuzz/corpus/<target> are only read); a crashing input is saved under
# fuzz/artifacts/<target>/ and replayed with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir fuzz -a --target-dir target/fuzz <target> fuzz/artifacts/<target>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH="${UPDOWN_FUZZ_SECONDS:-30}"
TARGETS="${UPDOWN_FUZZ_TARGETS:-order_json ws_command journal_record}"
CARGO_FUZZ_VERSION="0.13.2"
TARGET_DIR="$PWD/target/fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
cargo fuzz --version

export RUSTC_BOOTSTRAP=1
# -a: debug assertions and overflow checks on, as in the debug build: an
# overflow is a bug even where release would wrap silently.
FUZZ=(cargo fuzz)
BUILD_ARGS=(--fuzz-dir fuzz -a --target-dir "$TARGET_DIR")

echo "== building fuzz targets (release, AddressSanitizer, sanitizer coverage)"
start=$(date +%s)
"${FUZZ[@]}" build "${BUILD_ARGS[@]}"
echo "built in $(($(date +%s) - start)) s"

# Scratch space for the journal target's segment files: tmpfs when there is one.
scratch=""
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    scratch=$(mktemp -d /dev/shm/updown-fuzz.XXXXXX 2>/dev/null || true)
fi
if [ -z "$scratch" ]; then
    mkdir -p "$TARGET_DIR/tmp"
    scratch=$(mktemp -d "$TARGET_DIR/tmp/run.XXXXXX")
fi
trap 'rm -rf "$scratch"' EXIT

failed=()
for target in $TARGETS; do
    case "$target" in
        journal_record) max_len=16384 ;;
        *) max_len=4096 ;;
    esac
    corpus="$TARGET_DIR/corpus/$target"
    mkdir -p "$corpus" "fuzz/artifacts/$target"
    echo "== fuzz $target for ${SECONDS_EACH} s"
    log="$TARGET_DIR/$target.log"
    # -timeout: one input taking over 10 s is a hang, reported as a crash.
    if TMPDIR="$scratch" "${FUZZ[@]}" run "${BUILD_ARGS[@]}" "$target" "$corpus" "fuzz/corpus/$target" -- \
        -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
        -print_final_stats=1 >"$log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^Done ' "$log" | tail -2 || true
    else
        echo "FAILED: $target crashed; from its log ($log):"
        grep -E -A4 'panicked at|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)' "$log" | head -30 || true
        echo "..."
        tail -40 "$log"
        failed+=("$target")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzzing found crashes in: ${failed[*]} (inputs under fuzz/artifacts/)"
    exit 1
fi
echo "fuzzing: no crash in ${TARGETS// /, } (${SECONDS_EACH} s each)"

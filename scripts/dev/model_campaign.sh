#!/usr/bin/env bash
# A campaign of the model test (tests/clients/test_model_concurrency.py): seeds FIRST..LAST,
# each through one mount and through two, SECONDS of workload each; prints the failing seeds
# (rerun one with ZARRFS_MODEL_SEED=N) and a summary line. Operation logs of failures go to
# .cache/model-SEED.log.
#
# Usage: scripts/dev/model_campaign.sh [FIRST-LAST] [SECONDS]   (default 1-200, 6 s)
# Env:   ZARRFS_BIN   binary (default target/release/zarrfs, built if missing)
#        ZARRFS_MODEL_OPTIONS  more mount options, e.g. "--write-back-delay 0.05" (then one
#                     mount per seed)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
SEEDS="${1:-1-200}"
SECONDS_EACH="${2:-6}"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
[ -x "$BIN" ] || cargo build --release --quiet
bash scripts/setup.sh --test >/dev/null

LOG="$REPO/.cache/model-campaign-$SEEDS.txt"
mkdir -p "$REPO/.cache"
start=$(date +%s)
set +e
ZARRFS_BIN="$BIN" ZARRFS_MODEL_SEEDS="$SEEDS" ZARRFS_MODEL_SECONDS="$SECONDS_EACH" \
    .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/clients/test_model_concurrency.py \
    >"$LOG" 2>&1
status=$?
set -e
ops=$(grep -oE "mount\(s\): [0-9]+ operations" "$LOG" | awk '{s += $2} END {print s + 0}')
runs=$(grep -cE "mount\(s\): [0-9]+ operations" "$LOG" || true)
echo "model campaign, seeds $SEEDS, $SECONDS_EACH s each, $(basename "$BIN"): $runs runs, $ops operations, $(( $(date +%s) - start )) s"
grep -E "^FAILED" "$LOG" || true
tail -1 "$LOG"
echo "full output: $LOG"
exit $status

#!/usr/bin/env bash
# What serving Prometheus metrics costs a `cp -r` of a mounted array, side by side in one run:
#   plain    a mount without --metrics-address
#   metrics  a mount with --metrics-address, scraped every SCRAPE seconds throughout (4 times
#            as often as the tests' Prometheus, to make the cost visible)
# Cold runs (page caches dropped before each when possible) alternate between the two mounts;
# the fastest and the median of RUNS each are reported with their ratios (aim: metrics/plain
# <= 1.02; on a loaded machine single runs vary by tens of percent, so read the median). The
# latency histograms are recorded on every mount (they feed `zarrfs stats` too); what this
# measures is the endpoint and its scrapes.
#
# Usage: bench/bench_metrics.sh
# Env:   ZARRFS_BIN   binary (default target/release/zarrfs)
#        BENCH_SCALE  scales the array (default 1: 2048 chunk files of 8 KiB, 16 MiB)
#        RUNS         timed runs per mount (default 5)
#        SCRAPE       seconds between scrapes (default 0.25)
#        BENCH_DIR    work directory (default: a new one, removed after)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
PY="$REPO/.venv/bin/python"
SCALE="${BENCH_SCALE:-1}"
RUNS="${RUNS:-5}"
SCRAPE="${SCRAPE:-0.25}"

source "$REPO/bench/bench_lib.sh" metrics

SRC="$WORK/src.zarr"
say "writing the array ($SCALE x 2048 chunks of 8 KiB) in $SRC"
"$PY" - "$SRC" "$SCALE" <<'PY'
import sys, numpy as np, zarr
path, scale = sys.argv[1], int(sys.argv[2])
rows = 64 * 64 * scale
a = zarr.create_array(path, shape=(rows, 64 * 64), chunks=(64, 128), shards=(512, 1024),
                      dtype="u1", compressors=None)
a[:] = np.random.default_rng(0).integers(0, 255, size=a.shape, dtype=np.uint8)
PY

PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
declare -A MOUNT_OPTS=([plain]="--read-only" [metrics]="--read-only --metrics-address $PORT")
declare -A FLAVOR_BIN=()
mount_flavor plain
mount_flavor metrics

scraper() {
    local n=0
    while true; do
        curl -sf "http://127.0.0.1:$PORT/metrics" -o /dev/null && n=$((n + 1))
        echo "$n" > "$WORK/scrapes"
        sleep "$SCRAPE"
    done
}
scraper &
SCRAPER=$!
echo "$SCRAPER" >> "$WORK/pids"
trap 'kill $SCRAPER 2>/dev/null || true; for f in plain metrics; do fusermount3 -u "$(mnt_of $f)" 2>/dev/null || true; done; cleanup' EXIT

copy() { # FLAVOR: seconds of one cold cp -r
    local dst="$WORK/copy" start end
    rm -rf "$dst"
    drop_caches
    start=$(now)
    cp -r "$(mnt_of "$1")" "$dst"
    end=$(now)
    rm -rf "$dst"
    secs "$start" "$end"
}

declare -A BEST=() ALL=()
for run in $(seq 1 "$RUNS"); do
    for flavor in plain metrics; do
        s=$(copy "$flavor")
        say "run $run $flavor ${s}s"
        ALL[$flavor]="${ALL[$flavor]:-} $s"
        if [ -z "${BEST[$flavor]:-}" ] || awk -v s="$s" -v b="${BEST[$flavor]}" 'BEGIN { exit !(s < b) }'; then
            BEST[$flavor]=$s
        fi
    done
done
kill "$SCRAPER" 2>/dev/null || true
FILES=$(find "$(mnt_of plain)" -type f | wc -l)
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
MED_PLAIN=$(echo "${ALL[plain]}" | median)
MED_METRICS=$(echo "${ALL[metrics]}" | median)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
printf "%-18s %10s %10s %10s\n" "cp -r, $FILES files" "plain" "metrics" "ratio"
printf "%-18s %9ss %9ss %10s\n" "fastest" "${BEST[plain]}" "${BEST[metrics]}" "$(ratio "${BEST[metrics]}" "${BEST[plain]}")"
printf "%-18s %9ss %9ss %10s\n" "median" "$MED_PLAIN" "$MED_METRICS" "$(ratio "$MED_METRICS" "$MED_PLAIN")"
say "$(cat "$WORK/scrapes") scrapes served during the runs"

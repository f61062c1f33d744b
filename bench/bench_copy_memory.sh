#!/usr/bin/env bash
# Peak memory of `zarrfs copy` by the number of chunk files (issue 35): for each N, a sharded
# uint8 array of about N chunks of 4x4 bytes (64x64 chunks a shard, written by tensorstore,
# bench/bench_copy_memory.py) is copied with --unshard (N files written), then that copy
# packed again with --shard 256,256; each run's peak RSS (/usr/bin/time -v) and seconds are
# printed as a table. The copy plans array by array and a chunk directory at a time, so the
# peak should not grow with N.
# Usage: bench/bench_copy_memory.sh [N...]   (default: 100000 1000000)
# Env: ZARRFS_BIN (default target/release/zarrfs), BENCH_DIR (kept; default a temporary
# directory under TMPDIR or /var/tmp, removed at the end), JOBS (--jobs, default 16).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || PY=/work/main/.venv/bin/python
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build --release, or set ZARRFS_BIN)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (GNU time)" >&2; exit 1; }
if [ -n "${BENCH_DIR:-}" ]; then
    WORK="$BENCH_DIR"; mkdir -p "$WORK"; KEEP=1
else
    WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/zarrfs-copy-memory.XXXXXX")"; KEEP=0
fi
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT
[ $# -gt 0 ] || set -- 100000 1000000

# run NAME ARGS...: one copy under /usr/bin/time -v; prints "NAME peak_MiB seconds".
run() {
    local name="$1"; shift
    /usr/bin/time -v "$BIN" copy "$@" --jobs "${JOBS:-16}" --progress-every 3600 \
        >"$WORK/$name.out" 2>"$WORK/$name.time" || { cat "$WORK/$name.time" >&2; exit 1; }
    local kb secs
    kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/$name.time")
    secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$WORK/$name.time")
    awk -v name="$name" -v n="$N" -v kb="$kb" -v secs="$secs" \
        'BEGIN { printf "%-10s %10s %10.1f %12s\n", name, n, kb / 1024, secs }'
}

printf "%-10s %10s %10s %12s\n" direction chunks peak_MiB wall
for N in "$@"; do
    rm -rf "$WORK/sharded" "$WORK/unsharded" "$WORK/packed"
    N=$("$PY" "$REPO/bench/bench_copy_memory.py" "$WORK/sharded" "$N")
    run unshard "$WORK/sharded" "$WORK/unsharded" --unshard
    run shard "$WORK/unsharded" "$WORK/packed" --shard 256,256
    cmp -s "$WORK/sharded/a/c/0/0" "$WORK/packed/a/c/0/0" || echo "note: the packed shard a/c/0/0 differs from the source's" >&2
done

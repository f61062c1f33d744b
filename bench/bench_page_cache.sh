#!/usr/bin/env bash
# Reads through the default (writable) mount against a --read-only one and the same files on
# the native filesystem, side by side in one run (issue 35, aim 3: the writable mount reads
# through the kernel's page cache). One array of 8 KiB inner chunks (4,096 chunk files, 32 MB,
# the `bench/small` array of scripts/fixtures.py), read as:
#   cp cold    cp -r of the array, page caches dropped before each run
#   cp warm    the same with every cache kept (one untimed copy first)
#   zarr cold  zarr-python reading the whole array (`a[...]`), caches dropped
#   zarr warm  the same with every cache kept (one untimed read first)
# from: native (the view's files copied to disk), ro (--read-only), rw (the default mount),
# and, with ZARRFS_BASE_BIN set, base (the default mount of another binary, e.g. main's: the
# before figure of a change, in the same run). Runs alternate between the mounts, so noise from
# other work on the machine hits all of them alike; the fastest of RUNS is reported.
#
# Usage: bench/bench_page_cache.sh
# Env:   ZARRFS_BIN       binary (default target/release/zarrfs)
#        ZARRFS_BASE_BIN  a second binary whose default mount is measured too (optional)
#        RUNS             timed runs per measurement (default 5)
#        BENCH_DIR        work directory (default: a new one under ${TMPDIR:-/var/tmp}, removed)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
BASE_BIN="${ZARRFS_BASE_BIN:-}"
PY="$REPO/.venv/bin/python"
RUNS="${RUNS:-5}"

source "$REPO/bench/bench_lib.sh" pagecache

say "work directory $WORK"
say "writing bench/small (8 KiB inner chunks)"
"$PY" - "$REPO/scripts" "$WORK/fx" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import fixtures as fx
out = Path(sys.argv[2])
(out / "root").mkdir(parents=True)
(out / "expected").mkdir()
fx.write_group(out / "root", "bench", {})
fx.write_array(out, next(s for s in fx.bench_specs(1.0) if s.path == "bench/small"))
EOF
SRC="$WORK/fx/root"
OUT="$WORK/out"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    OUT="$(mktemp -d /dev/shm/zarrfs-bench-pc.XXXXXX)"
fi
mkdir -p "$OUT"

MOUNTS=()
mount_one() { # NAME BIN OPTIONS...
    local name="$1" bin="$2" dir="$WORK/mnt-$1"
    shift 2
    mkdir -p "$dir"
    RUST_LOG="${RUST_LOG:-zarrfs=warn}" "$bin" mount "$SRC" "$dir" "$@" --log-file "$WORK/$name.log"
    DAEMON_PIDS="$DAEMON_PIDS $(pgrep -f -- "mount $SRC $dir" || true)"
    MOUNTS+=("$dir")
}
unmount_all() {
    for m in "${MOUNTS[@]}"; do fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    rm -rf "$OUT"
    cleanup
}
trap unmount_all EXIT
mount_one ro "$BIN" --read-only
mount_one rw "$BIN"
VARIANTS=(native ro rw)
if [ -n "$BASE_BIN" ]; then
    mount_one base "$BASE_BIN"
    VARIANTS+=(base)
fi
where() { [ "$1" = native ] && echo "$WORK/native/small" || echo "$WORK/mnt-$1/bench/small"; }

say "native copy of the view"
mkdir -p "$WORK/native"
cp -r "$WORK/mnt-ro/bench/small" "$WORK/native/small"
for v in "${VARIANTS[@]}"; do
    diff -rq "$(where native)" "$(where "$v")" >/dev/null || die "$v differs from the native copy"
done

copy() { rm -rf "$OUT/c"; cp -r "$1" "$OUT/c"; rm -rf "$OUT/c"; }
# zarr-python's whole-array read, timed inside Python (interpreter start left out); prints s.
zarr_read() {
    "$PY" - "$1" <<'EOF'
import sys, time
import zarr
a = zarr.open_array(sys.argv[1], mode="r")
start = time.perf_counter()
x = a[...]
print(f"{time.perf_counter() - start:.3f}")
assert x.size == a.size
EOF
}

declare -A BEST
keep_best() { # KEY SECS
    if [ -z "${BEST[$1]:-}" ] || awk -v s="$2" -v b="${BEST[$1]}" 'BEGIN { exit !(s < b) }'; then
        BEST[$1]=$2
    fi
}
timed_copy() { local start end; start=$(now); copy "$1"; end=$(now); secs "$start" "$end"; }

for run in $(seq 1 "$RUNS"); do
    say "run $run of $RUNS"
    for v in "${VARIANTS[@]}"; do
        drop_caches; keep_best "cp_cold_$v" "$(timed_copy "$(where "$v")")"
    done
    for v in "${VARIANTS[@]}"; do
        copy "$(where "$v")"; sync; keep_best "cp_warm_$v" "$(timed_copy "$(where "$v")")"
    done
    for v in "${VARIANTS[@]}"; do
        drop_caches; keep_best "zarr_cold_$v" "$(zarr_read "$(where "$v")")"
    done
    for v in "${VARIANTS[@]}"; do
        zarr_read "$(where "$v")" >/dev/null; keep_best "zarr_warm_$v" "$(zarr_read "$(where "$v")")"
    done
done

[ "$CAN_DROP" = 1 ] && caches="dropped for cold runs" || caches="NOT dropped (no permission): cold = warm"
echo
echo "zarrfs page-cache benchmark: bench/small, 4,096 files of 8 KiB; $BIN; page caches $caches;"
echo "fastest of $RUNS alternating runs; seconds, and ratios as speed relative to the column named"
{
    printf "%-10s" "read"
    for v in "${VARIANTS[@]}"; do printf "%10s" "$v s"; done
    printf "%12s%12s" "rw/ro" "rw/native"
    [ -n "$BASE_BIN" ] && printf "%12s%12s" "base/ro" "rw/base"
    echo
    for m in cp_cold cp_warm zarr_cold zarr_warm; do
        printf "%-10s" "${m/_/ }"
        for v in "${VARIANTS[@]}"; do printf "%10s" "${BEST[${m}_$v]}"; done
        ratio() { awk -v a="${BEST[${m}_$1]}" -v b="${BEST[${m}_$2]}" 'BEGIN { printf "%11.2fx", b / a }'; }
        printf " %s %s" "$(ratio rw ro)" "$(ratio rw native)"
        [ -n "$BASE_BIN" ] && printf " %s %s" "$(ratio base ro)" "$(ratio rw base)"
        echo
    done
}
echo "rw/ro: the default mount's speed relative to --read-only (aim: >= 0.9x); base: the default"
echo "mount of $BASE_BIN (rw/base > 1: faster than it)"

#!/usr/bin/env bash
# Read benchmark of zarrfs, side by side in one run, for small (8 KiB) and large (128 KiB)
# inner chunks, `bytes` only (random data, exact sizes) and zstd (4-bit data, ~2:1, so the
# stored chunks are still ~8 KiB and ~128 KiB and a re-encode has real work to do):
#   view    cp -r of the array from the mounted unsharded view
#   native  cp -r of the same unsharded chunk files from the native filesystem
#   ts      tensorstore reading the sharded array and writing an unsharded copy (re-encode)
# Page caches are dropped before each cold run when possible. Then, view against native:
#   warm      the same cp -r again with every cache kept (one untimed copy first), from the default
#             (writable) mount and from a --read-only one
#   parallel  8 concurrent cp processes over the array's files (as `gsutil -m cp` would), cold
#   find, ls -lR  over an array of 65,536 chunk files, warm
#   open cost     the default (writable) mount against a --read-only one, which reads files
#             without opening them: cold cp -r, and zarr-python reading the whole array (its
#             defaults; timed inside python), cold and warm, 8 and 128 KiB chunks
# Warm rows and walks also run on a --read-only --metadata-ttl indefinite mount ("ri"), where
# the kernel keeps directory listings, entries and attributes.
#
# Usage: bench/bench_read.sh
# Env:   ZARRFS_BIN   binary (default target/release/zarrfs)
#        BENCH_SCALE  scales the array sizes (default 1: ~32 MB of 8 KiB, ~192 MB of 128 KiB)
#        BENCH_DIR    work directory (default: a new one under ${TMPDIR:-/var/tmp}, removed after)
#        RUNS         timed runs per measurement; the fastest is reported (default 3)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
PY="$REPO/.venv/bin/python"
SCALE="${BENCH_SCALE:-1}"
RUNS="${RUNS:-3}"
SIZES=(small large small_zstd large_zstd)

source "$REPO/bench/bench_lib.sh" bench

# time_runs cold|warm CMD...: run CMD $RUNS times; print the fastest seconds. cold: page caches
# dropped before each run. warm: one untimed run first, every cache kept, and only the dirty
# pages of earlier runs written out before each (as drop_caches does), so a run does not pay
# for the previous one's writes. CMD gets the run number as its last argument so each run can
# write a fresh destination.
time_runs() {
    local mode="$1" best="" run start end secs
    shift
    [ "$mode" = cold ] || "$@" 0
    for run in $(seq 1 "$RUNS"); do
        if [ "$mode" = cold ]; then drop_caches; else sync; fi
        start=$(now)
        "$@" "$run"
        end=$(now)
        secs=$(secs "$start" "$end")
        if [ -z "$best" ] || awk -v s="$secs" -v b="$best" 'BEGIN { exit !(s < b) }'; then
            best=$secs
        fi
    done
    echo "$best"
}
time_fastest() { time_runs cold "$@"; }
time_warm() { time_runs warm "$@"; }

copy_tree() { # SRC DST_PREFIX RUN
    rm -rf "$2.$3"
    cp -r "$1" "$2.$3"
    rm -rf "$2.$3"
}

copy_parallel() { # SRC DST_PREFIX RUN: 8 concurrent cp processes, 64 files each at a time
    rm -rf "$2.$3"
    mkdir -p "$2.$3"
    (cd "$1" && find . -type d -print0 | (cd "$2.$3" && xargs -0 mkdir -p))
    (cd "$1" && find . -type f -print0 | xargs -0 -P 8 -n 64 cp --parents -t "$2.$3")
    rm -rf "$2.$3"
}

zarr_secs() { # DIR: seconds zarr-python takes to open the array and read it whole
    "$PY" - "$1" <<'EOF'
import sys, time
import zarr
start = time.perf_counter()
zarr.open_array(sys.argv[1], mode="r")[...]
print(f"{time.perf_counter() - start:.3f}")
EOF
}

zarr_fastest() { # cold|warm DIR: the fastest of $RUNS reads (warm: one untimed read first)
    local mode="$1" best="" run secs
    [ "$mode" = cold ] || zarr_secs "$2" > /dev/null
    for run in $(seq 1 "$RUNS"); do
        [ "$mode" = cold ] && drop_caches
        secs=$(zarr_secs "$2")
        if [ -z "$best" ] || awk -v s="$secs" -v b="$best" 'BEGIN { exit !(s < b) }'; then
            best=$secs
        fi
    done
    echo "$best"
}

walk_find() { find "$1" > /dev/null; }      # DIR RUN
walk_ls() { ls -lR "$1" > /dev/null; }      # DIR RUN

tensorstore_reencode() { # SRC DST_PREFIX RUN
    rm -rf "$2.$3"
    "$PY" - "$1" "$2.$3" <<'EOF'
import json, sys
import tensorstore as ts
src_path, dst_path = sys.argv[1], sys.argv[2]
src = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": src_path + "/"}},
              open=True, read=True).result()
meta = json.load(open(src_path + "/zarr.json"))
sharding = meta["codecs"][0]["configuration"]
meta["chunk_grid"]["configuration"]["chunk_shape"] = sharding["chunk_shape"]
meta["codecs"] = sharding["codecs"]
dst = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": dst_path + "/"},
               "metadata": meta}, create=True).result()
dst.write(src).result()
EOF
    rm -rf "$2.$3"
}

# -- fixtures, mount, native copy
say "work directory $WORK"
say "writing benchmark arrays (scale $SCALE)"
"$PY" "$REPO/scripts/fixtures.py" "$WORK/fx" --sets bench --bench-scale "$SCALE" -q
SRC="$WORK/fx/root"

# Copies are written to memory when there is a tmpfs for them, so what is timed is reading,
# not the disk writing the copies (which would also carry over from run to run).
OUT="$WORK/out"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    OUT="$(mktemp -d /dev/shm/zarrfs-bench-out.XXXXXX)"
fi
mkdir -p "$MNT" "$WORK/native" "$OUT"
say "mounting $SRC on $MNT"
RUST_LOG="${RUST_LOG:-zarrfs=warn}" "$BIN" mount "$SRC" "$MNT" --log-file "$WORK/zarrfs.log"
DAEMON_PIDS=$(pgrep -f -- "mount $SRC $MNT" || true)
# A second, read-only mount of the same source: the kernel reads its files without opening them.
MNT_RO="$WORK/mnt-ro"
mkdir -p "$MNT_RO"
RUST_LOG="${RUST_LOG:-zarrfs=warn}" "$BIN" mount "$SRC" "$MNT_RO" --read-only --log-file "$WORK/zarrfs-ro.log"
DAEMON_PIDS="$DAEMON_PIDS $(pgrep -f -- "mount $SRC $MNT_RO" || true)"
# A third: --read-only --metadata-ttl indefinite, for a dataset that does not change: the kernel
# also keeps directory listings, entries and attributes for good.
MNT_RI="$WORK/mnt-ri"
mkdir -p "$MNT_RI"
RUST_LOG="${RUST_LOG:-zarrfs=warn}" "$BIN" mount "$SRC" "$MNT_RI" --read-only --metadata-ttl indefinite \
    --log-file "$WORK/zarrfs-ri.log"
DAEMON_PIDS="$DAEMON_PIDS $(pgrep -f -- "mount $SRC $MNT_RI" || true)"
trap 'for m in "$MNT_RO" "$MNT_RI"; do fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done; rm -rf "$OUT"; cleanup' EXIT

for size in "${SIZES[@]}" many; do
    say "native copy of bench/$size (cp -r from the view)"
    cp -r "$MNT/bench/$size" "$WORK/native/$size"
    if ! diff -rq "$MNT/bench/$size" "$WORK/native/$size" >/dev/null; then
        say "WARNING: the native copy of bench/$size differs from the view"
    fi
done

# -- timed runs
printf "size\tfiles\tbytes\tview_s\tnative_s\tts_s\n" > "$RESULTS"
RESULTS2="$WORK/results2.tsv"
RESULTS3="$WORK/results3.tsv"
printf "size\tfiles\tview_warm_s\tro_warm_s\tri_warm_s\tnative_warm_s\tview_par_s\tnative_par_s\n" > "$RESULTS2"
for size in "${SIZES[@]}"; do
    files=$(find "$WORK/native/$size" -type f ! -name zarr.json | wc -l)
    bytes=$(find "$WORK/native/$size" -type f ! -name zarr.json -printf '%s\n' | awk '{s+=$1} END {print s+0}')
    say "timing bench/$size: $files chunk files, $bytes bytes"
    t_view=$(time_fastest copy_tree "$MNT/bench/$size" "$OUT/view_$size")
    t_native=$(time_fastest copy_tree "$WORK/native/$size" "$OUT/native_$size")
    t_ts=$(time_fastest tensorstore_reencode "$SRC/bench/$size" "$OUT/ts_$size")
    printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$size" "$files" "$bytes" "$t_view" "$t_native" "$t_ts" >> "$RESULTS"
    say "timing bench/$size: warm and parallel copies"
    w_view=$(time_warm copy_tree "$MNT/bench/$size" "$OUT/view_$size")
    w_ro=$(time_warm copy_tree "$MNT_RO/bench/$size" "$OUT/ro_$size")
    w_ri=$(time_warm copy_tree "$MNT_RI/bench/$size" "$OUT/ri_$size")
    w_native=$(time_warm copy_tree "$WORK/native/$size" "$OUT/native_$size")
    p_view=$(time_fastest copy_parallel "$MNT/bench/$size" "$OUT/view_$size")
    p_native=$(time_fastest copy_parallel "$WORK/native/$size" "$OUT/native_$size")
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$size" "$files" "$w_view" "$w_ro" "$w_ri" "$w_native" "$p_view" "$p_native" >> "$RESULTS2"
done
RESULTS4="$WORK/results4.tsv"
printf "size\tview_cold_s\tro_cold_s\tz_view_cold_s\tz_ro_cold_s\tz_native_cold_s\tz_view_warm_s\tz_ro_warm_s\tz_native_warm_s\n" > "$RESULTS4"
for size in small large; do
    say "timing bench/$size: the default mount against --read-only, cp -r and zarr-python"
    c_view=$(time_fastest copy_tree "$MNT/bench/$size" "$OUT/view_$size")
    c_ro=$(time_fastest copy_tree "$MNT_RO/bench/$size" "$OUT/ro_$size")
    row="$size	$c_view	$c_ro"
    for mode in cold warm; do
        for dir in "$MNT/bench/$size" "$MNT_RO/bench/$size" "$WORK/native/$size"; do
            row="$row	$(zarr_fastest "$mode" "$dir")"
        done
    done
    printf "%b\n" "$row" >> "$RESULTS4"
done
files=$(find "$WORK/native/many" -type f | wc -l)
say "timing find and ls -lR over bench/many ($files files), warm"
printf "walk\tfiles\tview_s\tri_s\tnative_s\n" > "$RESULTS3"
for walk in find ls; do
    t_view=$(time_warm "walk_$walk" "$MNT/bench/many")
    t_ri=$(time_warm "walk_$walk" "$MNT_RI/bench/many")
    t_native=$(time_warm "walk_$walk" "$WORK/native/many")
    printf "%s\t%s\t%s\t%s\t%s\n" "$walk" "$files" "$t_view" "$t_ri" "$t_native" >> "$RESULTS3"
done

# -- table
[ "$CAN_DROP" = 1 ] && caches="dropped before each run" || caches="NOT dropped (no permission)"
echo
echo "zarrfs read benchmark: $("$BIN" --version 2>/dev/null | head -1) ($BIN), page caches $caches, fastest of $RUNS run(s)"
"$PY" - "$RESULTS" "$RESULTS2" "$RESULTS3" "$RESULTS4" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
LABELS = {"small": "8 KiB", "large": "128 KiB", "small_zstd": "~8 KiB zstd", "large_zstd": "~128 KiB zstd"}
head = ("inner chunks", "files", "MB", "view s", "view MB/s", "native s", "native MB/s",
        "tensorstore s", "ts MB/s", "view/native", "view/ts")
print("  ".join(f"{h:>13s}" for h in head))
for r in rows:
    mb = int(r["bytes"]) / 1e6
    v, n, t = (float(r[k]) for k in ("view_s", "native_s", "ts_s"))
    label = {"small": "8 KiB", "large": "128 KiB",
             "small_zstd": "~8 KiB zstd", "large_zstd": "~128 KiB zstd"}[r["size"]]
    cells = (label, r["files"], f"{mb:.1f}", f"{v:.2f}", f"{mb / v:.0f}", f"{n:.2f}",
             f"{mb / n:.0f}", f"{t:.2f}", f"{mb / t:.0f}", f"{n / v:.2f}x", f"{t / v:.2f}x")
    print("  ".join(f"{c:>13s}" for c in cells))
print("view/native: speed of cp -r from the mount relative to cp -r of the same files on disk")
print("view/ts: how many times faster cp -r from the mount is than a tensorstore re-encode")
print()
head = ("inner chunks", "files", "warm view s", "warm ro s", "warm ri s", "warm native s", "warm v/n",
        "warm ro/n", "warm ri/n", "8-par view s", "8-par native s", "8-par v/n")
print("  ".join(f"{h:>14s}" for h in head))
for r in csv.DictReader(open(sys.argv[2]), delimiter="\t"):
    wv, wr, wi, wn, pv, pn = (float(r[k]) for k in ("view_warm_s", "ro_warm_s", "ri_warm_s", "native_warm_s",
                                                     "view_par_s", "native_par_s"))
    cells = (LABELS[r["size"]], r["files"], f"{wv:.3f}", f"{wr:.3f}", f"{wi:.3f}", f"{wn:.3f}", f"{wn / wv:.2f}x",
             f"{wn / wr:.2f}x", f"{wn / wi:.2f}x", f"{pv:.3f}", f"{pn:.3f}", f"{pn / pv:.2f}x")
    print("  ".join(f"{c:>14s}" for c in cells))
print("warm: cp -r again with all caches kept (view: the default, writable mount; ro: a --read-only")
print("mount, where the kernel reads files without opening them; ri: --read-only --metadata-ttl")
print("indefinite, where the kernel also keeps listings, entries and attributes); 8-par: 8 concurrent")
print("cp, cold; v/n: speed from the mount relative to the same on the native filesystem")
print()
head = ("inner chunks", "cp cold view", "cp cold ro", "view/ro", "zarr cold view", "zarr cold ro",
        "zarr cold nat", "view/ro", "zarr warm view", "zarr warm ro", "zarr warm nat", "view/ro")
print("  ".join(f"{h:>14s}" for h in head))
for r in csv.DictReader(open(sys.argv[4]), delimiter="\t"):
    cv, cr, zv, zr, zn, wv, wr, wn = (float(r[k]) for k in (
        "view_cold_s", "ro_cold_s", "z_view_cold_s", "z_ro_cold_s", "z_native_cold_s",
        "z_view_warm_s", "z_ro_warm_s", "z_native_warm_s"))
    cells = (LABELS[r["size"]], f"{cv:.3f}", f"{cr:.3f}", f"{cr / cv:.2f}x", f"{zv:.3f}", f"{zr:.3f}",
             f"{zn:.3f}", f"{zr / zv:.2f}x", f"{wv:.3f}", f"{wr:.3f}", f"{wn:.3f}", f"{wr / wv:.2f}x")
    print("  ".join(f"{c:>14s}" for c in cells))
print("open cost: the default mount opens every file (an OPEN and a RELEASE round trip), a --read-only")
print("one reads them without opening (docs/performance.md); view/ro: speed of the default mount")
print("relative to --read-only; zarr: zarr-python opening the array and reading it whole, seconds")
print()
for r in csv.DictReader(open(sys.argv[3]), delimiter="\t"):
    v, i, n = float(r["view_s"]), float(r["ri_s"]), float(r["native_s"])
    walk = {"find": "find", "ls": "ls -lR"}[r["walk"]]
    print(f"{walk:>8s} over {r['files']} chunk files, warm: view {v:.3f} s, ri {i:.3f} s, native {n:.3f} s,"
          f" view/native {n / v:.2f}x, ri/native {n / i:.2f}x")
EOF

#!/usr/bin/env bash
# Peak memory and time of `zarrfs copy` at 10^6 or 10^7 chunk files (issue 35, aim 6: peak RSS
# <= 256 MiB at 10^7), without the disk 10^7 files of 4 KiB blocks would take (~40 GB):
#   source   the `grid` array of bench/bench_walk.sh's sharded fixture for N (a 2-D uint8 array
#            of N chunks of 4x4 bytes, 16-byte chunk files, shards of 256x256 chunks; made by
#            tensorstore if missing, and kept in FIXTURE_DIR/nN/src for the next run)
#   unshard  `zarrfs copy --unshard` of it into a loop-mounted ext4 made for tiny files
#            (inline_data: a 16-byte file lives in its inode; N = 10^7 takes ~3 GB), made here
#            and removed at the end
#   shard    `zarrfs copy --shard SHAPE` of that unsharded copy (N files read) into a directory
#            of WORK, for each SHAPE of SHARDS: 1024,1024 (the README's, 256x256 chunks a shard)
#            and 4096,4096 (1024x1024 chunks a shard) by default
# Each copy runs under /usr/bin/time -v with the default --jobs (or JOBS); printed: the binary,
# the mode, the files written, wall seconds, peak RSS, and the `held_keys_peak` and
# `pack_held_bytes_peak` (the chunk records of rows of shards being gathered) of `--json`.
# With BASE_BIN (e.g. the build before a change) each copy is run with both binaries one after
# the other, on the same input, so that their figures can be set side by side (the machine is
# shared: read ratios of neighbouring rows, not absolute times); their --shard copies are
# compared file by file (they must be byte for byte the same).
#
# Usage: bench/bench_copy_scale.sh [N]   (default 1000000; 10000000 takes ~30 min a copy here)
# Env:   ZARRFS_BIN   binary (default target/release/zarrfs); BASE_BIN a second one
#        FIXTURE_DIR  sharded fixtures by N (default /var/tmp/zarrfs-bench-walk, bench_walk's)
#        SHARDS       shard shapes for --shard (default "1024,1024 4096,4096")
#        JOBS         --jobs (default: the copy's default)
#        UNSHARD_WITH  "all" (default): --unshard with each binary; "first": with the first
#                     only (BASE_BIN if set), when only --shard is compared (at 10^7 it saves a
#                     quarter of an hour)
#        BENCH_DIR    work directory, kept (default a temporary one under TMPDIR or /var/tmp);
#                     needs root (mount -o loop), mkfs.ext4, GNU time
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
PY="$REPO/.venv/bin/python"
N="${1:-1000000}"
FIXTURE_DIR="${FIXTURE_DIR:-/var/tmp/zarrfs-bench-walk}"
SHARDS="${SHARDS:-1024,1024 4096,4096}"

source "$REPO/bench/bench_lib.sh" copy-scale

[ -x /usr/bin/time ] || die "needs /usr/bin/time (GNU time)"
command -v mkfs.ext4 >/dev/null || die "needs mkfs.ext4"
[ "$(id -u)" = 0 ] || die "needs root (a loop mount)"
[ -z "${BASE_BIN:-}" ] || [ -x "$BASE_BIN" ] || die "no binary at BASE_BIN=$BASE_BIN"

LOOP_IMG="$WORK/tiny.img"
LOOP_MNT="$WORK/tiny"
# The loop file system first (its files must not be removed one by one), then bench_lib's.
scale_cleanup() {
    if mountpoint -q "$LOOP_MNT" 2>/dev/null; then umount "$LOOP_MNT" || umount -l "$LOOP_MNT" || true; fi
    rm -f "$LOOP_IMG"
    cleanup
}
trap scale_cleanup EXIT

# -- the sharded fixture (bench_walk's, made once)
SRC="$FIXTURE_DIR/n$N/src"
if [ ! -f "$SRC/grid/zarr.json" ]; then
    [ -x "$PY" ] || die "no venv at $REPO/.venv to write the fixture (scripts/setup.sh)"
    say "N=$N: writing the sharded fixture (tensorstore) in $FIXTURE_DIR/n$N"
    mkdir -p "$FIXTURE_DIR/n$N"
    rm -rf "$SRC.tmp"
    "$PY" "$REPO/bench/bench_walk.py" fixture "$SRC.tmp" "$N"
    mv "$SRC.tmp" "$SRC"
fi

# -- a fresh ext4 for N tiny files: inodes of 256 bytes with inline data, large directories
make_tiny_fs() {
    local inodes=$(( N + N / 20 + 100000 ))
    local bytes=$(( inodes * 256 * 11 / 10 + N * 64 + (768 << 20) ))
    if mountpoint -q "$LOOP_MNT" 2>/dev/null; then umount "$LOOP_MNT"; fi
    rm -f "$LOOP_IMG"
    local avail
    avail=$(df -B1 --output=avail "$WORK" | tail -1)
    [ "$avail" -ge $(( bytes + (1 << 30) )) ] || die "need ~$(( bytes >> 30 )) GiB + 1 GiB free in $WORK, have $(( avail >> 30 )) GiB"
    truncate -s "$bytes" "$LOOP_IMG"
    mkfs.ext4 -q -F -O inline_data,large_dir -I 256 -N "$inodes" -m 0 "$LOOP_IMG"
    mkdir -p "$LOOP_MNT"
    # noinit_itable: the image is sparse, its inode tables read as zeros already.
    mount -o loop,noatime,noinit_itable "$LOOP_IMG" "$LOOP_MNT"
}

# run LABEL BIN ARGS...: one copy under /usr/bin/time -v; prints a row of the table.
run() {
    local label="$1" bin="$2"; shift 2
    local file="${label//[\/ ,]/_}"
    local out="$WORK/$file.json" time="$WORK/$file.time"
    # shellcheck disable=SC2086
    /usr/bin/time -v "$bin" copy "$@" ${JOBS:+--jobs $JOBS} --json --progress-every 3600 \
        >"$out" 2>"$time" || { tail -20 "$time" >&2; die "$label failed"; }
    local kb secs
    kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$time")
    secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$time" |
        awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }')
    "$PY" - "$label" "$out" "$kb" "$secs" <<'EOF'
import json, sys
label, out, kb, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
d = json.load(open(out))
held = d.get('pack_held_bytes_peak')
held = '-' if held is None else f"{held / 2**20:.1f}"
print(f"{label:<28} {d['files_copied']:>10} {secs:>9.1f} {kb / 1024:>9.1f} {d['held_keys_peak']:>10} {held:>14}", flush=True)
EOF
}

bins=("new:$BIN")
[ -z "${BASE_BIN:-}" ] || bins=("base:$BASE_BIN" "${bins[@]}")

say "N=$N chunk files (the grid array of $SRC); machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-28s %10s %9s %9s %10s %14s\n" "binary/mode" files wall_s peak_MiB held_keys pack_held_MiB
# --unshard: each binary into a fresh file system; the last one's copy is the --shard source.
unshard_bins=("${bins[@]}")
[ "${UNSHARD_WITH:-all}" = all ] || unshard_bins=("${bins[0]}")
for b in "${unshard_bins[@]}"; do
    make_tiny_fs
    run "${b%%:*}/unshard" "${b#*:}" "$SRC/grid" "$LOOP_MNT/u" --unshard
done
want=$(( N + 1 ))
got=$(find "$LOOP_MNT/u" -type f | wc -l)
[ "$got" -eq "$want" ] || die "the unsharded copy has $got files, expected $want"
for shape in $SHARDS; do
    rm -rf "$WORK/packed-base"
    for b in "${bins[@]}"; do
        rm -rf "$WORK/packed"
        run "${b%%:*}/shard $shape" "${b#*:}" "$LOOP_MNT/u" "$WORK/packed" --shard "$shape"
        if [ "${b%%:*}" = base ]; then
            mv "$WORK/packed" "$WORK/packed-base"
        elif [ -d "$WORK/packed-base" ]; then
            diff -r -q "$WORK/packed-base" "$WORK/packed" >/dev/null ||
                die "--shard $shape: the two binaries' copies differ"
            say "--shard $shape: the two binaries' copies are byte for byte the same"
        fi
    done
    rm -rf "$WORK/packed" "$WORK/packed-base"
done

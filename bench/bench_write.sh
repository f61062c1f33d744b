#!/usr/bin/env bash
# Write benchmark of zarrfs, side by side in one run, for small (8 KiB) and large (128 KiB)
# inner chunks, `bytes` only (random uint8 data, so stored sizes are exact):
#   default     cp -r of an unsharded copy into a writable view of the sharded array (which
#               exists with its metadata but no shard): every close() rewrites its shard
#   write-back  the same with --write-back-delay $WB_DELAY: shards are rewritten when complete,
#               when their oldest pending chunk has waited the delay, and on fsync
#   tensorstore tensorstore writing the same sharded array from a numpy array in memory
#   native      cp -r of the unsharded copy to the native filesystem, then `sync -f` (commit s)
#   native-durable  the same files copied durably the way the default mode makes each close():
#               every file written, fsynced and closed, then its directory fsynced
# vs native / vs durable: the native row's seconds / the view row's (>1: the view is faster).
# The unsharded copy is a cp -r from a (read-only) view of the array fully written by
# tensorstore, so its zarr.json is exactly the view's and writing it back changes nothing.
#
# What the times include:
#   cp s       the cp -r into the view (page caches dropped before it when possible)
#   commit s   then one fsync of a file in the view (`sync FILE`), which makes the daemon commit
#              everything still pending (nothing in the default mode)
#   seconds    cp s + commit s: the data is in the store and fsynced (zarrfs fsyncs each shard
#              it writes; tensorstore's file driver fsyncs too, file_io_sync defaults to true)
#   unmount s  afterwards, not in seconds: `zarrfs unmount` until the daemon process has exited
#   tensorstore: ts.open(create) + write, timed inside Python (no interpreter start, no .npy load)
# Counters are the delta of the mount's counters (`zarrfs stats`) over cp + fsync:
#   write amp = set_bytes / final size of the stored shards; shard writes = set requests.
# PREMKDIR=1 makes the chunk directory `c` in the view before the cp (not timed), for builds
# before f47f4e5 ("exact chunk directories"): there cp -r, having created `c` itself, mkdirs
# `c/1` without looking, but the view already listed `c/1` once a chunk of `c/0` was written (a
# shard spans several rows), so mkdir failed with EEXIST and cp skipped the directory.
# The store is listed before unmount and after the daemon exits; a change (a write the counters
# missed) is reported. After each run zarr-python reads the sharded store and must get the data.
#
# Usage: bench/bench_write.sh
# Env:   ZARRFS_BIN   binary (default target/release/zarrfs)
#        BENCH_SCALE  scales the array sizes (default 1: ~34 MB of 8 KiB, ~201 MB of 128 KiB chunks,
#                     the shapes of bench_read.sh)
#        BENCH_DIR    work directory (default: a new one under ${TMPDIR:-/var/tmp}, removed after)
#        RUNS         timed runs per measurement; the fastest is reported (default 3)
#        WB_DELAY     --write-back-delay of the write-back mode, seconds (default 5)
#        PREMKDIR     1: mkdir the chunk directory `c` in the view before the cp (default 0)
#        ZARRFS_MOUNT_OPTIONS  more options for every mount (e.g. "--metadata-ttl 1": a local
#                     source not watched)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
PY="$REPO/.venv/bin/python"
HELPER="$REPO/bench/bench_write.py"
SCALE="${BENCH_SCALE:-1}"
RUNS="${RUNS:-3}"
WB_DELAY="${WB_DELAY:-5}"
PREMKDIR="${PREMKDIR:-0}"
SIZES=(small large)

source "$REPO/bench/bench_lib.sh" bench-write
"$BIN" mount --help 2>/dev/null | grep -q -- --write-back-delay \
    || die "$BIN has no --write-back-delay (stale build? cargo build --release)"
ROW="$WORK/row.tsv"

# mount_view SRC [OPTIONS...]: mount SRC on $MNT; sets DAEMON_PID.
mount_view() {
    local src="$1"; shift
    # shellcheck disable=SC2086  # ZARRFS_MOUNT_OPTIONS: words
    RUST_LOG="${RUST_LOG:-zarrfs=warn}" "$BIN" mount "$src" "$MNT" --log-file "$WORK/zarrfs.log" "$@" \
        ${ZARRFS_MOUNT_OPTIONS:-}
    DAEMON_PID=$(pgrep -f -- "mount $src $MNT" || true)
    [ -n "$DAEMON_PID" ] || die "mounted $src but found no daemon process"
    DAEMON_PIDS="$DAEMON_PIDS $DAEMON_PID"
}

# daemon_alive PID: the process exists and is not a zombie waiting to be reaped.
daemon_alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# unmount_view: unmount $MNT and wait until the daemon has committed what is pending and exited.
unmount_view() {
    "$BIN" unmount "$MNT"
    local waited=0
    while daemon_alive "$DAEMON_PID"; do
        sleep 0.01
        waited=$((waited + 1))
        [ "$waited" -lt 30000 ] || die "daemon $DAEMON_PID still running 300 s after unmount"
    done
    DAEMON_PIDS="${DAEMON_PIDS/ $DAEMON_PID/}"
}

counter() { # JSON NAME
    "$PY" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

shard_bytes() { # ARRAY_DIR: total size of the stored shards (every file but zarr.json)
    find "$1" -type f ! -name zarr.json -printf '%s\n' | awk '{s+=$1} END {print s+0}'
}
shard_count() { find "$1" -type f ! -name zarr.json | wc -l; }
listing() { find "$1" -type f -printf '%P %s %T@\n' | sort; }

verify() { # ROOT SIZE WHAT
    "$PY" "$HELPER" verify "$1" "$2" "$WORK" || die "$3: zarr-python does not read the expected data"
}

# view_run SIZE MODE RUN: one cp -r into a writable view of a fresh store; result row to $ROW.
view_run() {
    local size="$1" mode="$2" run="$3"
    local store="$WORK/store/$mode.$size.$run" opts=(--writable)
    [ "$mode" = write-back ] && opts+=(--write-back-delay "$WB_DELAY")
    rm -rf "$store"; mkdir -p "$WORK/store"
    cp -r "$WORK/empty" "$store"
    mount_view "$store" "${opts[@]}"
    drop_caches
    local s0 s1 t0 t1 t2 t3 t4
    if [ "$PREMKDIR" = 1 ] && [ ! -e "$MNT/bench/$size/c" ]; then
        mkdir "$MNT/bench/$size/c"
    fi
    s0=$("$PY" "$HELPER" stats "$MNT")
    t0=$(now)
    cp -r "$WORK/unsharded/$size/." "$MNT/bench/$size/" \
        || die "$mode bench/$size: cp -r into the view failed (PREMKDIR=$PREMKDIR; see above)"
    t1=$(now)
    sync "$MNT/bench/$size/zarr.json"
    t2=$(now)
    s1=$("$PY" "$HELPER" stats "$MNT")
    listing "$store" > "$WORK/before_unmount"
    t3=$(now)
    unmount_view
    t4=$(now)
    listing "$store" > "$WORK/after_unmount"
    if ! cmp -s "$WORK/before_unmount" "$WORK/after_unmount"; then
        say "WARNING: $mode bench/$size: the store changed after the fsync (at unmount); those writes are not counted"
    fi
    verify "$store" "$size" "$mode bench/$size run $run"
    local set_bytes sets
    set_bytes=$(( $(counter "$s1" set_bytes) - $(counter "$s0" set_bytes) ))
    sets=$(( $(counter "$s1" set) - $(counter "$s0" set) ))
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$size" "$mode" "${BYTES[$size]}" \
        "$(secs "$t0" "$t1")" "$(secs "$t1" "$t2")" "$(secs "$t0" "$t2")" "$set_bytes" "$sets" \
        "$(shard_bytes "$store/bench/$size")" "$(shard_count "$store/bench/$size")" "$(secs "$t3" "$t4")" \
        > "$ROW"
    rm -rf "$store"
}

# ts_run SIZE RUN: tensorstore writes the sharded array from memory; result row to $ROW.
ts_run() {
    local size="$1" run="$2"
    local dst="$WORK/ts/$size.$run" t
    rm -rf "$dst"; mkdir -p "$dst"
    drop_caches
    t=$("$PY" "$HELPER" ts-write "$WORK" "$size" "$dst")
    verify "$dst" "$size" "tensorstore bench/$size run $run"
    printf "%s\t%s\t%s\t-\t-\t%s\t-\t-\t%s\t%s\t-\n" "$size" tensorstore "${BYTES[$size]}" "$t" \
        "$(shard_bytes "$dst/bench/$size")" "$(shard_count "$dst/bench/$size")" > "$ROW"
    rm -rf "$dst"
}

# native_run SIZE KIND RUN: the unsharded copy to the native filesystem (KIND native: cp -r then
# sync -f; native-durable: each file and its directory fsynced); result row to $ROW.
native_run() {
    local size="$1" kind="$2" run="$3"
    local dst="$WORK/native/$kind.$size.$run" t0 t1 t2
    rm -rf "$dst"; mkdir -p "$WORK/native"
    drop_caches
    if [ "$kind" = native ]; then
        t0=$(now)
        cp -r "$WORK/unsharded/$size" "$dst"
        t1=$(now)
        sync -f "$dst"
        t2=$(now)
        printf "%s\t%s\t%s\t%s\t%s\t%s\t-\t-\t%s\t%s\t-\n" "$size" "$kind" "${BYTES[$size]}" \
            "$(secs "$t0" "$t1")" "$(secs "$t1" "$t2")" "$(secs "$t0" "$t2")" \
            "$(shard_bytes "$dst")" "$(shard_count "$dst")" > "$ROW"
    else
        t0=$("$PY" "$HELPER" durable-copy "$WORK/unsharded/$size" "$dst")
        printf "%s\t%s\t%s\t%s\t0\t%s\t-\t-\t%s\t%s\t-\n" "$size" "$kind" "${BYTES[$size]}" \
            "$t0" "$t0" "$(shard_bytes "$dst")" "$(shard_count "$dst")" > "$ROW"
    fi
    diff -rq "$WORK/unsharded/$size" "$dst" > /dev/null || die "$kind bench/$size: the copy differs"
    rm -rf "$dst"
}

# fastest CMD...: run CMD $RUNS times (run number appended); print the row with the least seconds.
fastest() {
    local best="" row run
    for run in $(seq 1 "$RUNS"); do
        "$@" "$run"
        row=$(cat "$ROW")
        if [ -z "$best" ] || awk -v s="$(cut -f6 <<<"$row")" -v b="$(cut -f6 <<<"$best")" \
            'BEGIN { exit !(s < b) }'; then
            best=$row
        fi
    done
    echo "$best"
}

# -- fixtures and the unsharded copies
say "work directory $WORK"
say "writing the sharded arrays and their empty templates (scale $SCALE)"
"$PY" "$HELPER" prepare "$WORK" --scale "$SCALE"
mkdir -p "$MNT" "$WORK/unsharded"
declare -A BYTES
say "unsharded copies: cp -r from a read-only view of the written arrays"
mount_view "$WORK/fx/root"
for size in "${SIZES[@]}"; do
    cp -r "$MNT/bench/$size" "$WORK/unsharded/$size"
    diff -rq "$MNT/bench/$size" "$WORK/unsharded/$size" >/dev/null \
        || die "the unsharded copy of bench/$size differs from the view"
done
unmount_view
for size in "${SIZES[@]}"; do
    BYTES[$size]=$(shard_bytes "$WORK/unsharded/$size")
done

# -- timed runs
printf "size\twriter\tbytes\tcp_s\tcommit_s\tseconds\tset_bytes\tsets\tstored_bytes\tshards\tunmount_s\n" > "$RESULTS"
for size in "${SIZES[@]}"; do
    files=$(shard_count "$WORK/unsharded/$size")
    say "bench/$size: $files chunk files, ${BYTES[$size]} bytes"
    for mode in default write-back; do
        say "  $mode: cp -r into the view"
        fastest view_run "$size" "$mode" >> "$RESULTS"
    done
    say "  tensorstore: write from memory"
    fastest ts_run "$size" >> "$RESULTS"
    for kind in native native-durable; do
        say "  $kind: the unsharded copy to the native filesystem"
        fastest native_run "$size" "$kind" >> "$RESULTS"
    done
done

# -- table
[ "$CAN_DROP" = 1 ] && caches="dropped before each run" || caches="NOT dropped (no permission)"
echo
echo "zarrfs write benchmark: $("$BIN" --version 2>/dev/null | head -1) ($BIN), write-back delay ${WB_DELAY}s, PREMKDIR=$PREMKDIR, page caches $caches, fastest of $RUNS run(s)"
"$PY" "$HELPER" table "$RESULTS"
cat <<EOF
cp s: cp -r of the unsharded copy into the view; commit s: then one fsync in the view (commits
everything pending); seconds = cp s + commit s, MB/s = data MB / seconds (all committed, fsynced).
unmount s: zarrfs unmount until the daemon exited (not in seconds). tensorstore: open + write in-process.
write amp: bytes written to the store (set_bytes) / final size of the stored shards (aim: <= 1.2
in write-back mode); shard writes: store set requests (ideal: one per shard); vs ts: seconds / tensorstore's.
EOF

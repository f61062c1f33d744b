#!/usr/bin/env bash
# Walk benchmark of zarrfs (issue 35, millions of chunk files), side by side in one run, for
# N chunk files per size (default 10^4, 10^5, 10^6):
#   fixture  one hierarchy per N, written by tensorstore (bench/bench_walk.py): `grid`, a 2-D
#            sharded uint8 array of N inner chunks of 4x4 bytes (c/I/J: R directories of C
#            files, R x C = N, R <= C), shards of 256x256 chunks; `flat`, a 1-D one of shape
#            (4N,), chunks of 4, shards of 65,536 chunks (c/I: N files in one directory)
#   native   the same unsharded on the local filesystem (`zarrfs copy --unshard`, which writes
#            byte for byte what `cp -r` of a mount gives)
#   ro       a `--read-only` mount;  rw  the default (writable) mount (both watch the source:
#            the kernel keeps entries, attributes and listings until it changes);
#   ro1, rw1 the same with `--metadata-ttl 1` (not watched: the default before the watch)
#   ri       a `--read-only --metadata-ttl indefinite` mount (the kernel keeps entries and
#            attributes for good)
# Walks over `grid`: du -s, find, os.walk (names only), ls -lR, stat of every file (os.walk +
# os.stat), each
#   cold  page caches, dentries and inodes dropped (sync; echo 3 > drop_caches) before each run,
#         and for a mount a fresh daemon (remounted), so the shard indexes are read again
#         (COLD_REMOUNT=0: the same daemon, which keeps its caches: only the kernel's are cold)
#   warm  one untimed run first, then timed runs with every cache kept (same daemon)
# native/mount = native seconds / mount seconds: >= 1 means the mount is faster (aims: 0.5 cold,
# 0.8 warm). Python walks are timed inside Python (no interpreter start), the others around
# the command. Per mount and walk, the store requests of the timed run (from `zarrfs stats`):
# GETs (shard indexes, metadata), HEADs and LISTs; once an index is held there should be none per
# file. Then the first entry of `flat/c` (N entries in one directory), cold: seconds until
# next() on os.scandir returns, and until the listing ends. Then per mount the daemon's RSS
# (and peak) and the inodes it holds (`stat -f -c %c`) after the walks, and again after
# `echo 2 > drop_caches` (the kernel forgets its inodes) and 1 s.
#
# Usage: bench/bench_walk.sh
# Env:   ZARRFS_BIN   binary (default target/release/zarrfs)
#        WALK_SIZES   numbers of chunk files (default "10000 100000 1000000"; 10000000 needs
#                     ~90 GB and 2*10^7 inodes for the native copies, and is only run if asked)
#        BENCH_DIR    where fixtures are kept, by N, for the next run (default
#                     /var/tmp/zarrfs-bench-walk; remove it to rebuild them). Each N takes about
#                     2 N x (block size) on disk for the native copy (10^6: ~8 GB), N x 16 B for
#                     the sharded one; free space and inodes are checked first
#        RUNS         timed runs per measurement, the fastest reported (default 3 for N <= 10^5,
#                     1 above)
#        WALKS        the walks to run (default "du find oswalk ls statall")
#        TARGETS      the targets (default "native ro rw ri"; also ro1, rw1; with ZARRFS_BIN_BEFORE also
#                     ro-before, rw-before, ri-before)
#        ZARRFS_BIN_BEFORE  a second binary (e.g. the version before a change): its mounts
#                     (FLAVOR-before) are walked in the same run, interleaved with the others
#        COLD_REMOUNT 1: a fresh daemon for every cold run (default); 0: keep the daemon
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
PY="$REPO/.venv/bin/python"
HELPER="$REPO/bench/bench_walk.py"
SIZES="${WALK_SIZES:-10000 100000 1000000}"
WALKS="${WALKS:-du find oswalk ls statall}"
TARGETS="${TARGETS:-native ro rw ri${ZARRFS_BIN_BEFORE:+ ro-before rw-before ri-before}}"
COLD_REMOUNT="${COLD_REMOUNT:-1}"
export BENCH_DIR="${BENCH_DIR:-/var/tmp/zarrfs-bench-walk}"

source "$REPO/bench/bench_lib.sh" walk

# One run at a time per BENCH_DIR: a second one's exit would unmount the first one's mounts.
exec 9> "$WORK/.lock"
flock -n 9 || die "another bench_walk.sh is running in $WORK"
# Every mount under $WORK is unmounted on exit, whatever ends the run.
trap 'end_work_processes; cleanup' EXIT
trap 'exit 130' INT TERM
ERRLOG="$WORK/walk-errors.log"
: > "$ERRLOG"
: > "$WORK/pids"

declare -A MOUNT_OPTS=([ro]="--read-only" [rw]="" [ri]="--read-only --metadata-ttl indefinite"
    [ro1]="--read-only --metadata-ttl 1" [rw1]="--metadata-ttl 1")
# The same mounts of another binary (the version before a change), side by side in the same run.
declare -A FLAVOR_BIN=()
if [ -n "${ZARRFS_BIN_BEFORE:-}" ]; then
    [ -x "$ZARRFS_BIN_BEFORE" ] || die "ZARRFS_BIN_BEFORE: not an executable: $ZARRFS_BIN_BEFORE"
    for f in ro rw ri; do
        MOUNT_OPTS[$f-before]=${MOUNT_OPTS[$f]}
        FLAVOR_BIN[$f-before]=$ZARRFS_BIN_BEFORE
    done
fi
declare -A WALK_NAMES=([du]="du -s" [find]="find" [oswalk]="os.walk" [ls]="ls -lR" [statall]="stat all")

# -- mounts: one per flavor, all at once, at $WORK/mnt-FLAVOR, of $SRC
# (DPIDS, mnt_of and mount_flavor: bench_lib.sh)
unmount_flavor() { # FLAVOR: unmount, and wait for the daemon to exit
    local m
    m=$(mnt_of "$1")
    if mountpoint -q "$m"; then
        umount "$m" 2>/dev/null || fusermount3 -u "$m" 2>/dev/null || umount -l "$m"
    fi
    local pid=${DPIDS[$1]:-}
    if [ -n "$pid" ]; then
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && say "WARNING: daemon $pid still running after unmount of $m"
    fi
    DPIDS[$1]=""
}
remount_flavor() { # FLAVOR: a fresh daemon before a cold run (unless COLD_REMOUNT=0)
    [ "$COLD_REMOUNT" = 0 ] || { unmount_flavor "$1"; mount_flavor "$1"; }
}

# store counters of the live mount, as "get head list" (list + list_dir)
counters() {
    "$BIN" stats --json "$1" | awk -F'[:,]' '
        /"get":/ { g = $2 + 0 } /"head":/ { h = $2 + 0 }
        /"list":/ || /"list_dir":/ { l += $2 + 0 }
        END { print g, h, l }'
}
delta() { # "g h l" "g h l" -> "dg dh dl"
    echo "$1 $2" | awk '{ print $4 - $1, $5 - $2, $6 - $3 }'
}

# -- walks: walk_NAME DIR prints "seconds [entries]"; "fail" when the walk fails
timed() { # CMD...: run it, output and errors aside; print its seconds or "fail"
    local t0 t1
    t0=$(now)
    if "$@" > /dev/null 2>> "$ERRLOG"; then t1=$(now); secs "$t0" "$t1"; else echo fail; fi
}
walk_du() { timed du -s "$1"; }
walk_find() { timed find "$1"; }
walk_ls() { timed ls -lR "$1"; }
pywalk() { "$PY" "$HELPER" "$1" "$2" 2>> "$ERRLOG" || echo fail; }
walk_oswalk() { pywalk walk "$1"; }
walk_statall() { pywalk statall "$1"; }

faster() { # A B: the smaller of two seconds ("fail" loses)
    if [ "$1" = fail ]; then echo "$2"; elif [ "$2" = fail ] || [ -z "$2" ]; then echo "$1"
    elif awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; then echo "$1"; else echo "$2"; fi
}

# measure MODE TARGET WALK DIR: timed runs (cold: caches dropped and, for a mount, a fresh
# daemon before each; warm: one untimed run first), the fastest; appends a result line
# "walk WALK MODE TARGET seconds entries get head list" (counters of the last timed run).
measure() {
    local mode="$1" target="$2" walk="$3" dir="$4" best="" out s entries="-" c0 c1 req="- - -"
    [ "$mode" = cold ] || "walk_$walk" "$dir" > /dev/null
    for _ in $(seq 1 "$RUNS"); do
        if [ "$mode" = cold ]; then
            [ "$target" = native ] || remount_flavor "$target"
            drop_caches
        else
            sync
        fi
        [ "$target" = native ] || c0=$(counters "$(mnt_of "$target")")
        out=$("walk_$walk" "$dir")
        [ "$target" = native ] || { c1=$(counters "$(mnt_of "$target")"); req=$(delta "$c0" "$c1"); }
        s=${out%% *}
        [ "$out" = "${out#* }" ] || entries=${out#* }
        [ "$s" = fail ] && say "WARNING: $walk on $target ($mode) failed, see $ERRLOG"
        best=$(faster "$s" "$best")
    done
    echo "walk $walk $mode $target $best $entries $req" >> "$RES"
}

# first entry of DIR (N entries), cold; appends "first - cold TARGET first_s all_s entries g h l"
measure_first() {
    local target="$1" dir="$2" out f a best="" bestall="" c0 c1 req="- - -" entries=-
    for _ in $(seq 1 "$RUNS"); do
        [ "$target" = native ] || remount_flavor "$target"
        drop_caches
        [ "$target" = native ] || c0=$(counters "$(mnt_of "$target")")
        out=$(pywalk first "$dir")
        [ "$target" = native ] || { c1=$(counters "$(mnt_of "$target")"); req=$(delta "$c0" "$c1"); }
        if [ "$out" = fail ]; then say "WARNING: first entry on $target failed"; continue; fi
        read -r f a entries <<< "$out"
        best=$(faster "$f" "$best"); bestall=$(faster "$a" "$bestall")
    done
    echo "first - cold $target ${best:-fail} ${bestall:-fail} $entries $req" >> "$RES"
}

# daemon memory and the inodes it holds, after the walks and after the kernel forgot its inodes
measure_memory() { # FLAVOR
    local m rss hwm inodes rss2 inodes2 pid=${DPIDS[$1]}
    m=$(mnt_of "$1")
    rss=$(ps -o rss= -p "$pid" | tr -d ' ')
    hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
    inodes=$(stat -f -c %c "$m")
    sync; echo 2 > /proc/sys/vm/drop_caches 2>/dev/null || say "cannot drop inodes (not root?)"
    sleep 1
    rss2=$(ps -o rss= -p "$pid" | tr -d ' ')
    inodes2=$(stat -f -c %c "$m")
    echo "mem - - $1 $rss $hwm $inodes $rss2 $inodes2" >> "$RES"
}

# -- fixtures
ensure_space() { # DIR FILES: enough free inodes and blocks for FILES tiny files (+10%, +1 GiB)
    local bs avail iavail itotal need
    bs=$(stat -f -c %S "$1")
    read -r avail iavail itotal < <(df -B1 --output=avail,iavail,itotal "$1" | tail -1)
    need=$(( $2 * bs * 11 / 10 + (1 << 30) ))
    [ "$avail" -ge "$need" ] || die "need ~$((need >> 30)) GiB free in $1 for $2 files, have $((avail >> 30)) GiB"
    if [ "$itotal" -gt 0 ] && [ "$iavail" -lt $(( $2 * 11 / 10 )) ]; then
        die "need ~$(( $2 * 11 / 10 )) free inodes in $1, have $iavail"
    fi
}
ensure_fixtures() { # N: $WORK/nN/src (sharded) and $WORK/nN/native (unsharded), made once
    local n="$1" dir="$WORK/n$1" files
    mkdir -p "$dir"
    if [ ! -f "$dir/src/zarr.json" ]; then
        say "N=$n: writing the sharded fixture (tensorstore)"
        rm -rf "$dir/src.tmp"
        "$PY" "$HELPER" fixture "$dir/src.tmp" "$n"
        mv "$dir/src.tmp" "$dir/src"
    fi
    if [ ! -f "$dir/native/zarr.json" ]; then
        ensure_space "$dir" $(( 2 * n ))
        say "N=$n: writing the native (unsharded) copy, $((2 * n)) files (zarrfs copy --unshard)"
        rm -rf "$dir/native.tmp"
        "$BIN" copy --unshard --progress-every 30 "$dir/src" "$dir/native.tmp" 2>&1 | tail -1 >&2
        files=$(find "$dir/native.tmp" -type f | wc -l)
        [ "$files" -eq $(( 2 * n + 3 )) ] || die "native copy has $files files, expected $(( 2 * n + 3 ))"
        mv "$dir/native.tmp" "$dir/native"
    fi
}

# -- the table of one N
report() { # N RESULTS
    "$PY" - "$1" "$2" "$RUNS" "$CAN_DROP" "$COLD_REMOUNT" <<'EOF'
import sys
n, path, runs, can_drop = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
fresh = "cold mounts are fresh daemons" if sys.argv[5] != "0" else "cold mounts keep their daemon"
NAMES = {"du": "du -s", "find": "find", "oswalk": "os.walk", "ls": "ls -lR", "statall": "stat all"}
walks, first, mem = {}, {}, {}
order, targets = [], []
for line in open(path):
    kind, walk, mode, target, *rest = line.split()
    if target not in targets and kind != "mem":
        targets.append(target)
    if kind == "walk":
        walks[walk, mode, target] = rest
        if (walk, mode) not in order:
            order.append((walk, mode))
    elif kind == "first":
        first[target] = rest
    else:
        mem[target] = rest
mounts = [t for t in targets if t != "native"]

def num(s):
    try:
        return float(s)
    except ValueError:
        return None

caches = "page caches dropped" if can_drop else "page caches NOT dropped (not root)"
print(f"\nN = {n:,} chunk files: fastest of {runs} run(s), {caches}; {fresh}")
head = ["walk", "mode"] + [f"{t} s" for t in targets] + [f"native/{m}" for m in mounts] + ["entries"]
w = [9, 5] + [9] * len(targets) + [10] * len(mounts) + [9]
print("  ".join(f"{h:>{x}s}" if i > 1 else f"{h:<{x}s}" for i, (h, x) in enumerate(zip(head, w))))
for walk, mode in order:
    secs = {t: walks.get((walk, mode, t), ["-"])[0] for t in targets}
    cells = [NAMES.get(walk, walk), mode] + [secs[t] for t in targets]
    nat = num(secs.get("native", "-"))
    aim = 0.5 if mode == "cold" else 0.8
    for m in mounts:
        v = num(secs[m])
        if nat is None or not v:
            cells.append("-")
        else:
            r = nat / v
            cells.append(f"{r:.2f}x" + ("*" if r < aim else " "))
    ents = {walks[walk, mode, t][1] for t in targets if (walk, mode, t) in walks} - {"-"}
    cells.append("-" if not ents else ents.pop() if len(ents) == 1 else "DIFFER")
    print("  ".join(f"{c:>{x}s}" if i > 1 else f"{c:<{x}s}" for i, (c, x) in enumerate(zip(cells, w))))
print("native/mount: >= 1 the mount is faster; * below the aim (0.5 cold, 0.8 warm)")
if mounts:
    print("\nstore requests of the timed run, get/head/list:")
    print(f"{'walk':<9s}  {'mode':<5s}" + "".join(f"  {m:>14s}" for m in mounts))
    for walk, mode in order:
        cells = ["/".join(walks[walk, mode, m][2:5]) if (walk, mode, m) in walks else "-" for m in mounts]
        print(f"{NAMES.get(walk, walk):<9s}  {mode:<5s}" + "".join(f"  {c:>14s}" for c in cells))
if first:
    print(f"\nfirst entry of a directory of {n:,} entries (os.scandir + next), cold:")
    print(f"{'target':<8s}  {'first s':>9s}  {'all s':>9s}  {'entries':>9s}  {'native/first':>12s}  {'get/head/list':>14s}")
    nat = num(first.get("native", ["-"])[0])
    for t, (f, a, e, *req) in first.items():
        v = num(f)
        ratio = f"{nat / v:.2f}x" if nat and v and t != "native" else "-"
        print(f"{t:<8s}  {f:>9s}  {a:>9s}  {e:>9s}  {ratio:>12s}  {'/'.join(req):>14s}")
for m, (rss, hwm, ino, rss2, ino2) in mem.items():
    print(f"{m}: daemon RSS after the walks {int(rss) / 1024:.1f} MiB (peak {int(hwm) / 1024:.1f} MiB), "
          f"inodes held {int(ino):,}; after echo 2 > drop_caches + 1 s: {int(rss2) / 1024:.1f} MiB, "
          f"inodes held {int(ino2):,}")
EOF
}

RUNS_ENV="${RUNS:-}"
say "work directory $WORK ($BIN)"
[ "$CAN_DROP" = 1 ] || say "WARNING: cannot drop page caches (not root?): cold runs are not cold"
for N in $SIZES; do
    [[ "$N" =~ ^[1-9][0-9]*$ ]] || die "WALK_SIZES: not a number: $N"
    if [ -n "$RUNS_ENV" ]; then RUNS=$RUNS_ENV
    elif [ "$N" -le 100000 ]; then RUNS=3; else RUNS=1; fi
    ensure_fixtures "$N"
    SRC="$WORK/n$N/src"
    NATIVE="$WORK/n$N/native"
    RES="$WORK/n$N/results.tsv"
    : > "$RES"
    # Every target is mounted at once and the walks interleave them (each walk on every target
    # before the next walk), so that what the machine does meanwhile falls on all alike.
    declare -A DIRS=()
    for target in $TARGETS; do
        if [ "$target" = native ]; then
            DIRS[$target]="$NATIVE"
        else
            [ -n "${MOUNT_OPTS[$target]+x}" ] || die "TARGETS: unknown target $target"
            mount_flavor "$target"
            DIRS[$target]=$(mnt_of "$target")
        fi
    done
    for walk in $WALKS; do
        [ -n "${WALK_NAMES[$walk]+x}" ] || die "WALKS: unknown walk $walk"
        for target in $TARGETS; do
            say "N=$N $target: ${WALK_NAMES[$walk]} cold, warm"
            measure cold "$target" "$walk" "${DIRS[$target]}/grid"
            measure warm "$target" "$walk" "${DIRS[$target]}/grid"
        done
    done
    for target in $TARGETS; do
        [ "$target" = native ] || measure_memory "$target"
    done
    for target in $TARGETS; do
        say "N=$N $target: first entry of flat/c"
        measure_first "$target" "${DIRS[$target]}/flat/c"
        [ "$target" = native ] || unmount_flavor "$target"
    done
    report "$N" "$RES"
done
if [ -s "$ERRLOG" ]; then
    say "errors during the walks ($ERRLOG):"
    head -5 "$ERRLOG" >&2
fi

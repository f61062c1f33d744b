#!/usr/bin/env bash
# Large-hierarchy benchmark of zarrfs (issue 35 aim 5: 10,000 arrays in nested groups with
# consolidated metadata, ~20 MB; mount ready <= 2 s, zarr-python and xarray opens through the
# mount <= 1.2x direct), side by side in one run:
#   fixture  GROUPS groups x ARRAYS sharded arrays below one root (default 100 x 100), consolidated
#            at the root by zarr-python; metadata written as JSON, three arrays with data
#            written by zarr-python (bench/bench_hierarchy.py)
#   direct   the source directory itself, read by the same clients
#   rw       the default (writable) mount;  ro  a `--read-only` mount
# Measures:
#   mount    seconds from the start of `zarrfs mount` until it returns (the mount answers) and
#            until the first `ls` of the root is done; page caches dropped before each; the
#            daemon's RSS and peak (VmHWM) right after that `ls`
#   open     zarr.open_group(PATH) (default arguments: the consolidated metadata) and one
#            group's arrays listed with their shapes, chunk shapes and data types
#   read     zarr.open_array of one data array and all of its data, compared with what was
#            written
#   xr       xr.open_zarr(PATH, group=GROUP) (default arguments)
#   each     cold  page caches, dentries and inodes dropped (after the interpreter's imports)
#                  and, for a mount, a fresh daemon before each run
#            warm  one untimed run first, then timed runs with every cache kept (same daemon)
#            timed inside Python (a fresh interpreter per run, its imports not counted)
#   memory   per mount: a fresh daemon, ls of the root, then every operation once; its VmRSS
#            and VmHWM after all of it (and the highest VmHWM of any daemon of the run)
# mount/direct = mount seconds / direct seconds: <= 1 means the mount is as fast or faster
# (aim: <= 1.2). Per mount and operation, the store requests of the last timed run (from the
# mount's counters): GETs, HEADs and LISTs; for a cold run, all that its fresh daemon sent.
#
# Usage: bench/bench_hierarchy.sh
# Env:   ZARRFS_BIN   binary (default target/release/zarrfs)
#        HIER_GROUPS, HIER_ARRAYS  the fixture's size (default 100 and 100)
#        BENCH_DIR    where fixtures are kept, by size, for the next run (default
#                     /var/tmp/zarrfs-bench-hierarchy; remove it to rebuild them)
#        RUNS         timed runs per measurement, the fastest reported (default 3)
#        OPS          the operations (default "open read xr")
#        TARGETS      the targets (default "direct rw ro"; with ZARRFS_BIN_BEFORE also
#                     rw-before and ro-before)
#        ZARRFS_BIN_BEFORE  a second binary (e.g. the version before a change): its mounts
#                     (FLAVOR-before) are measured in the same run, interleaved with the others
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
PY="$REPO/.venv/bin/python"
HELPER="$REPO/bench/bench_hierarchy.py"
NGROUPS="${HIER_GROUPS:-100}"
NARRAYS="${HIER_ARRAYS:-100}"
RUNS="${RUNS:-3}"
OPS="${OPS:-open read xr}"
TARGETS="${TARGETS:-direct rw ro${ZARRFS_BIN_BEFORE:+ rw-before ro-before}}"
export BENCH_DIR="${BENCH_DIR:-/var/tmp/zarrfs-bench-hierarchy}"

source "$REPO/bench/bench_lib.sh" hierarchy

[[ "$NGROUPS" =~ ^[1-9][0-9]*$ && "$NARRAYS" =~ ^[1-9][0-9]*$ ]] || die "HIER_GROUPS, HIER_ARRAYS: not numbers"
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS: not a number: $RUNS"
# One run at a time per BENCH_DIR: a second one's exit would unmount the first one's mounts.
exec 9> "$WORK/.lock"
flock -n 9 || die "another bench_hierarchy.sh is running in $WORK"
# Every mount under $WORK is unmounted on exit, whatever ends the run.
trap 'end_work_processes; cleanup' EXIT
trap 'exit 130' INT TERM
ERRLOG="$WORK/hierarchy-errors.log"
: > "$ERRLOG"
: > "$WORK/pids"

declare -A MOUNT_OPTS=([rw]="" [ro]="--read-only")
declare -A FLAVOR_BIN=()
if [ -n "${ZARRFS_BIN_BEFORE:-}" ]; then
    [ -x "$ZARRFS_BIN_BEFORE" ] || die "ZARRFS_BIN_BEFORE: not an executable: $ZARRFS_BIN_BEFORE"
    for f in rw ro; do
        MOUNT_OPTS[$f-before]=${MOUNT_OPTS[$f]}
        FLAVOR_BIN[$f-before]=$ZARRFS_BIN_BEFORE
    done
fi
for target in $TARGETS; do
    [ "$target" = direct ] || [ -n "${MOUNT_OPTS[$target]+x}" ] || die "TARGETS: unknown target $target"
done
for op in $OPS; do
    case "$op" in open|read|xr) ;; *) die "OPS: unknown operation $op" ;; esac
done

FIX="$WORK/g${NGROUPS}xa${NARRAYS}"
SRC="$FIX/src"
RES="$FIX/results.tsv"
export HIERARCHY_MANIFEST="$FIX/manifest.json"

# -- the fixture, made once per size
if [ ! -f "$SRC/zarr.json" ] || [ ! -f "$HIERARCHY_MANIFEST" ]; then
    say "writing the fixture: $NGROUPS groups x $NARRAYS arrays, consolidated (zarr-python)"
    mkdir -p "$FIX"
    rm -rf "$FIX/src.tmp"
    "$PY" "$HELPER" fixture "$FIX/src.tmp" "$NGROUPS" "$NARRAYS"
    mv "$FIX/src.tmp" "$SRC"
fi

# -- mounts: one per flavor, all at once, at $WORK/mnt-FLAVOR, of $SRC
# (DPIDS, mnt_of and mount_flavor: bench_lib.sh)
hwm_of() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
rss_of() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
unmount_flavor() { # FLAVOR: note the daemon's peak, unmount, wait for the daemon to exit
    local m pid=${DPIDS[$1]:-}
    m=$(mnt_of "$1")
    if [ -n "$pid" ] && [ -e "/proc/$pid/status" ]; then echo "hwm - - $1 $(hwm_of "$pid")" >> "$RES"; fi
    if mountpoint -q "$m"; then
        umount "$m" 2>/dev/null || fusermount3 -u "$m" 2>/dev/null || umount -l "$m"
    fi
    if [ -n "$pid" ]; then
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && say "WARNING: daemon $pid still running after unmount of $m"
    fi
    DPIDS[$1]=""
}
remount_flavor() { unmount_flavor "$1"; mount_flavor "$1"; }
path_of() { if [ "$1" = direct ]; then echo "$SRC"; else mnt_of "$1"; fi; }

# store counters of the live mount, as "get head list" (list + list_dir)
counters() {
    "$BIN" stats --json "$1" | awk -F'[:,]' '
        /"get":/ { g = $2 + 0 } /"head":/ { h = $2 + 0 }
        /"list":/ || /"list_dir":/ { l += $2 + 0 }
        END { print g, h, l }'
}
delta() { echo "$1 $2" | awk '{ print $4 - $1, $5 - $2, $6 - $3 }'; }

faster() { # A B: the smaller of two seconds ("fail" loses)
    if [ "$1" = fail ]; then echo "$2"; elif [ "$2" = fail ] || [ -z "$2" ]; then echo "$1"
    elif awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; then echo "$1"; else echo "$2"; fi
}

# the mount itself, cold, once: appends "mount - cold TARGET answer_s ls_s rss_kB hwm_kB" (for
# direct: the ls of the source alone)
measure_mount() {
    local target="$1" m t0 t1 t2 answer=- rss=- hwm=-
    m=$(path_of "$target")
    [ "$target" = direct ] || unmount_flavor "$target"
    drop_caches
    t0=$(now)
    if [ "$target" != direct ]; then
        mount_flavor "$target"
        t1=$(now)
        answer=$(secs "$t0" "$t1")
    fi
    if ! ls "$m" > /dev/null 2>> "$ERRLOG"; then
        say "WARNING: ls of $m failed"
        return
    fi
    t2=$(now)
    if [ "$target" != direct ]; then
        rss=$(rss_of "${DPIDS[$target]}"); hwm=$(hwm_of "${DPIDS[$target]}")
    fi
    echo "mount - cold $target $answer $(secs "$t0" "$t2") $rss $hwm" >> "$RES"
}

# measure MODE TARGET OP: timed runs, the fastest; appends "op OP MODE TARGET seconds check
# get head list" (counters of the last timed run)
run_op() { # OP PATH [--drop]: prints "seconds check", or "fail fail"
    "$PY" "$HELPER" run "$@" 2>> "$ERRLOG" || echo "fail fail"
}
measure() {
    local mode="$1" target="$2" op="$3" path best="" out s check=- c0 c1 req="- - -"
    path=$(path_of "$target")
    [ "$mode" = cold ] || run_op "$op" "$path" > /dev/null
    for _ in $(seq 1 "$RUNS"); do
        if [ "$mode" = cold ]; then
            # A fresh daemon: its counters start at zero (asking for them would look the
            # root up, and read its document, before the timed run).
            [ "$target" = direct ] || { remount_flavor "$target"; c0="0 0 0"; }
            out=$(run_op "$op" "$path" --drop)
        else
            [ "$target" = direct ] || c0=$(counters "$path")
            out=$(run_op "$op" "$path")
        fi
        [ "$target" = direct ] || { c1=$(counters "$path"); req=$(delta "$c0" "$c1"); }
        s=${out%% *}
        check=${out#* }
        [ "$s" = fail ] && say "WARNING: $op on $target ($mode) failed, see $ERRLOG"
        best=$(faster "$s" "$best")
    done
    echo "op $op $mode $target ${best:-fail} $check $req" >> "$RES"
}

# one fresh daemon per mount through everything once: appends "mem - - FLAVOR rss_kB hwm_kB"
measure_memory() {
    local target="$1" m pid
    m=$(mnt_of "$target")
    remount_flavor "$target"
    ls "$m" > /dev/null 2>> "$ERRLOG" || true
    for op in $OPS; do run_op "$op" "$m" > /dev/null; done
    pid=${DPIDS[$target]}
    echo "mem - - $target $(rss_of "$pid") $(hwm_of "$pid")" >> "$RES"
}

report() {
    "$PY" - "$RES" "$RUNS" "$CAN_DROP" "$NGROUPS" "$NARRAYS" "$(stat -c %s "$SRC/zarr.json")" <<'EOF'
import sys
path, runs, can_drop = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
groups, arrays, doc = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
NAMES = {"open": "open_group", "read": "read array", "xr": "xr.open_zarr"}
mounts_t, ops, order, targets, mem, hwms = {}, {}, [], [], {}, {}
for line in open(path):
    kind, op, mode, target, *rest = line.split()
    if kind == "hwm":
        hwms[target] = max(hwms.get(target, 0), int(rest[0]))
        continue
    if kind == "mem":
        mem[target] = rest
        continue
    if target not in targets:
        targets.append(target)
    if kind == "mount":
        mounts_t.setdefault(target, []).append(rest)
    else:
        ops[op, mode, target] = rest
        if (op, mode) not in order:
            order.append((op, mode))
mounts = [t for t in targets if t != "direct"]

def num(s):
    try:
        return float(s)
    except ValueError:
        return None

def mib(kb):
    return "-" if kb in ("-", None) else f"{int(kb) / 1024:.0f}"

caches = "page caches dropped" if can_drop else "page caches NOT dropped (not root)"
print(f"\n{groups} groups x {arrays} arrays = {groups * arrays:,} arrays, root zarr.json "
      f"{doc / 1e6:.1f} MB (consolidated); fastest of {runs} run(s), {caches}")
print("\nmount, cold: seconds from `zarrfs mount` until it returns (the mount answers), until the "
      "first `ls` of the root is done (direct: the ls alone); daemon RSS and peak right after "
      "(last run)")
print(f"{'target':<10s}  {'answers s':>9s}  {'ls done s':>9s}  {'RSS MiB':>8s}  {'peak MiB':>8s}")
def fastest(values):
    nums = [v for v in map(num, values) if v is not None]
    return f"{min(nums):.3f}" if nums else "-"

for t in targets:
    if t in mounts_t:
        runs_t = mounts_t[t]
        _, _, rss, hwm = runs_t[-1]
        a, l = fastest(r[0] for r in runs_t), fastest(r[1] for r in runs_t)
        print(f"{t:<10s}  {a:>9s}  {l:>9s}  {mib(rss):>8s}  {mib(hwm):>8s}")
head = ["operation", "mode"] + [f"{t} s" for t in targets] + [f"{m}/direct" for m in mounts] + ["found"]
w = [12, 5] + [9] * len(targets) + [max(10, len(m) + 7) for m in mounts] + [6]
fmt = lambda cells: "  ".join(f"{c:>{x}s}" if i > 1 else f"{c:<{x}s}" for i, (c, x) in enumerate(zip(cells, w)))
print("\n" + fmt(head))
for op, mode in order:
    secs = {t: ops.get((op, mode, t), ["-"])[0] for t in targets}
    cells = [NAMES.get(op, op), mode] + [secs[t] for t in targets]
    direct = num(secs.get("direct", "-"))
    for m in mounts:
        v = num(secs[m])
        if direct is None or v is None or not direct:
            cells.append("-")
        else:
            r = v / direct
            cells.append(f"{r:.2f}x" + ("*" if r > 1.2 else " "))
    found = {ops[op, mode, t][1] for t in targets if (op, mode, t) in ops}
    cells.append(found.pop() if len(found) == 1 else "DIFFER")
    print(fmt(cells))
print("mount/direct: <= 1 the mount is as fast or faster; * above the aim (1.2)")
if mounts:
    print("\nstore requests of the last timed run, get/head/list (cold: all its fresh daemon sent):")
    print(f"{'operation':<12s}  {'mode':<5s}" + "".join(f"  {m:>12s}" for m in mounts))
    for op, mode in order:
        cells = ["/".join(ops[op, mode, m][2:5]) if (op, mode, m) in ops else "-" for m in mounts]
        print(f"{NAMES.get(op, op):<12s}  {mode:<5s}" + "".join(f"  {c:>12s}" for c in cells))
    print("\ndaemon memory: a fresh daemon through ls of the root and every operation once; "
          "highest peak of any daemon of the run")
    print(f"{'mount':<10s}  {'RSS MiB':>8s}  {'peak MiB':>8s}  {'run peak MiB':>12s}")
    for m in mounts:
        rss, hwm = mem.get(m, ["-", "-"])
        print(f"{m:<10s}  {mib(rss):>8s}  {mib(hwm):>8s}  {mib(hwms.get(m)):>12s}")
EOF
}

say "work directory $WORK ($BIN)"
[ "$CAN_DROP" = 1 ] || say "WARNING: cannot drop page caches (not root?): cold runs are not cold"
: > "$RES"
# Every mount is up at once and the measurements interleave the targets (each measurement on
# every target before the next), so that what the machine does meanwhile falls on all alike.
for run in $(seq 1 "$RUNS"); do
    for target in $TARGETS; do
        say "mount and first ls ($run/$RUNS): $target"
        measure_mount "$target"
    done
done
for op in $OPS; do
    for mode in cold warm; do
        for target in $TARGETS; do
            say "$op $mode: $target"
            measure "$mode" "$target" "$op"
        done
    done
done
for target in $TARGETS; do
    [ "$target" = direct ] && continue
    say "memory: $target"
    measure_memory "$target"
    unmount_flavor "$target"
done
report
if [ -s "$ERRLOG" ]; then
    say "errors during the run ($ERRLOG):"
    tail -5 "$ERRLOG" >&2
fi

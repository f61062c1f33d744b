# Shared by the benchmark scripts (sourced, not run): a work directory, cleanup of the mount
# and daemons on exit, dropping page caches, and timing.
# Expects REPO and BIN set; sets WORK, MNT, RESULTS, KEEP; uses BENCH_DIR and TMPDIR.
# Usage: source bench_lib.sh NAME   (NAME goes into the work directory's name)

say() { echo "bench: $*" >&2; }
die() { say "$*"; exit 1; }

[ -x "$BIN" ] || die "no binary at $BIN (cargo build --release, or set ZARRFS_BIN)"
[ -x "$REPO/.venv/bin/python" ] || die "no venv at $REPO/.venv (run scripts/setup.sh)"

if [ -n "${BENCH_DIR:-}" ]; then
    WORK="$BENCH_DIR"; mkdir -p "$WORK"; KEEP=1
else
    WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/zarrfs-$1.XXXXXX")"; KEEP=0
fi
MNT="$WORK/mnt"
RESULTS="$WORK/results.tsv"
DAEMON_PIDS=""

cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then
        fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
    fi
    if [ -n "${DAEMON_PIDS:-}" ]; then
        for pid in $DAEMON_PIDS; do kill "$pid" 2>/dev/null || true; done
    fi
    [ "$KEEP" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

CAN_DROP=0
if [ -w /proc/sys/vm/drop_caches ] && sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
    CAN_DROP=1
fi
drop_caches() {
    sync
    if [ "$CAN_DROP" = 1 ]; then echo 3 > /proc/sys/vm/drop_caches; fi
}

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

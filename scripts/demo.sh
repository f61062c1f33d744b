#!/usr/bin/env bash
# The main job on an embedded default: write a small sharded Zarr v3 sample with zarr-python,
# mount it unsharded with zarrfs, list the view, read it back through the mount with
# zarr-python and with xarray's default arguments (consolidated metadata), and unmount.
# Installs only what it uses (scripts/setup.sh: FUSE and the Python clients) and builds zarrfs.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${ZARRFS_DEMO_DIR:-$(mktemp -d /tmp/zarrfs-demo.XXXXXX)}"
PY="$REPO/.venv/bin/python"

bash "$REPO/scripts/setup.sh"
echo "demo: building zarrfs"
(cd "$REPO" && cargo build --quiet)
BIN="$REPO/target/debug/zarrfs"

SRC="$WORK/sample.zarr"
MNT="$WORK/mnt"
mkdir -p "$MNT"
cleanup() { "$BIN" unmount "$MNT" 2>/dev/null || true; }
trap cleanup EXIT

echo "demo: writing a sharded sample with zarr-python at $SRC"
"$PY" - "$SRC" <<'PY'
import sys, numpy as np, zarr
root = zarr.open_group(sys.argv[1], mode="w", attributes={"title": "zarrfs demo"})
temp = root.create_array("temperature", shape=(64, 48), chunks=(8, 8), shards=(32, 24),
                         dtype="float32", dimension_names=["y", "x"])
temp[:] = np.linspace(-10, 30, 64 * 48, dtype="float32").reshape(64, 48)
counts = root.create_array("counts", shape=(100,), chunks=(10,), shards=(50,), dtype="uint16",
                           dimension_names=["i"])
counts[:60] = np.arange(60, dtype="uint16")   # chunks 6..9 stay fill value: not stored
zarr.consolidate_metadata(sys.argv[1])          # as xarray's to_zarr does by default
PY

echo "demo: zarrfs inspect"
"$BIN" inspect "$SRC"

echo "demo: mounting at $MNT"
"$BIN" mount "$SRC" "$MNT"

echo "demo: the stored shards vs the mounted view of temperature/"
echo "  stored: $(cd "$SRC/temperature" && find c -type f | sort | tr '\n' ' ')"
echo "  view:   $(cd "$MNT/temperature" && find c -type f | wc -l) chunk files, e.g. $(cd "$MNT/temperature" && find c -type f | sort | head -4 | tr '\n' ' ')"
echo "  view of counts/c: $(ls "$MNT/counts/c" | sort -n | tr '\n' ' ')"
echo "demo: the view's temperature/zarr.json (chunk_grid and codecs rewritten)"
"$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print("  chunk_grid:", m["chunk_grid"]); print("  codecs:", [c["name"] for c in m["codecs"]])' "$MNT/temperature/zarr.json"

echo "demo: reading through the mount with zarr-python"
"$PY" - "$SRC" "$MNT" <<'PY'
import sys, numpy as np, zarr
src, mnt = sys.argv[1], sys.argv[2]
for name in ["temperature", "counts"]:
    view = zarr.open_array(f"{mnt}/{name}", mode="r")
    stored = zarr.open_array(f"{src}/{name}", mode="r")
    same = np.array_equal(view[:], stored[:])
    print(f"  {name}: view chunks {view.chunks} (stored shards {stored.shards}), identical data: {same}")
    assert same
PY

echo "demo: opening the mount with xarray's default arguments (consolidated metadata)"
"$PY" -W ignore::UserWarning - "$SRC" "$MNT" <<'PY'
import sys, numpy as np, xarray as xr, zarr
src, mnt = sys.argv[1], sys.argv[2]
ds = xr.open_zarr(mnt)
stored = zarr.open_array(f"{src}/temperature", mode="r")[:]
same = np.array_equal(ds.temperature.values, stored)
print(f"  xr.open_zarr: temperature {dict(ds.temperature.sizes)}, chunks "
      f"{ds.temperature.encoding['chunks']}, identical data: {same}")
assert same
PY

"$BIN" unmount "$MNT"
trap - EXIT
echo "demo: unmounted; sample left in $WORK"

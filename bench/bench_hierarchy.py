"""Helper of bench/bench_hierarchy.sh (issue 35 aim 5, large hierarchies with consolidated
metadata).

  bench_hierarchy.py fixture DIR GROUPS ARRAYS
        write DIR: a root group of GROUPS groups (g000, g001, …) of ARRAYS sharded float32
        arrays each (a000, a001, …; 1024 x 1024, shards of 512 x 512, inner chunks of
        128 x 128, zstd, crc32c index), consolidated at the root by zarr-python
        (`zarr.consolidate_metadata`). The arrays' metadata is written as JSON directly (the
        document zarr-python writes for the first one, with other attributes), and three
        arrays (first, middle, last) hold data written by zarr-python; the rest hold no
        shard (all fill value). DIR/manifest.json names the group to open and the data arrays.
  bench_hierarchy.py run OP PATH [--drop]
        one timed operation on the hierarchy at PATH (a mount or the source), in a fresh
        interpreter; with --drop the page caches, dentries and inodes are dropped after the
        imports, just before the timed part. Prints "seconds check", where check is what the
        operation found (so every target is seen to find the same):
          open  zarr.open_group(PATH) (default arguments: the consolidated metadata) and the
                names, shapes and chunk shapes of one group's arrays; check: arrays listed
          read  zarr.open_array(PATH/ARRAY)[...] of one data array, compared with what was
                written; check: "ok" or "WRONG"
          xr    xr.open_zarr(PATH, group=GROUP) (default arguments); check: data variables

The manifest is read from PATH/../manifest.json, or from $HIERARCHY_MANIFEST.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import warnings
from pathlib import Path

SHAPE = (1024, 1024)
SHARD = (512, 512)
CHUNK = (128, 128)

# zarr-python warns that consolidated metadata is not in the v3 specification yet.
warnings.filterwarnings("ignore", category=UserWarning)


def name(prefix: str, i: int) -> str:
    return f"{prefix}{i:03d}"


def attributes(group: int, array: int) -> dict:
    """Attributes of the size a described variable carries (about 0.4 KB of JSON)."""
    return {
        "units": "K",
        "long_name": f"air temperature of group {group} variable {array}",
        "standard_name": "air_temperature",
        "description": "Synthetic variable of the zarrfs large-hierarchy benchmark: a sharded "
                       "float32 field whose metadata is consolidated at the root of the "
                       "hierarchy together with ten thousand others.",
        "source": "bench/bench_hierarchy.py",
        "valid_range": [150.0, 350.0],
        "index": [group, array],
    }


def expected(group: int, array: int):
    import numpy as np

    rng = np.random.default_rng(group * 1000 + array)
    data = rng.normal(280.0, 10.0, size=SHAPE).astype("f4")
    data[: SHAPE[0] // 4] = 0.0  # the first shard row compresses well, like land masks do
    return data


def write_fixture(root: Path, groups: int, arrays: int) -> None:
    import zarr

    root.mkdir(parents=True)
    top = zarr.open_group(root, mode="w", attributes={"title": "zarrfs large hierarchy"})
    data_arrays = sorted({(0, 0), (groups // 2, arrays // 2), (groups - 1, arrays - 1)})
    g0, a0 = data_arrays[0]
    first = top.create_group(name("g", g0)).create_array(
        name("a", a0), shape=SHAPE, chunks=CHUNK, shards=SHARD, dtype="f4",
        dimension_names=["y", "x"], attributes=attributes(g0, a0))
    template = json.loads((root / name("g", g0) / name("a", a0) / "zarr.json").read_text())
    for g in range(groups):
        gdir = root / name("g", g)
        gdir.mkdir(exist_ok=True)
        (gdir / "zarr.json").write_text(json.dumps(
            {"attributes": {"group": g}, "zarr_format": 3, "node_type": "group"}, indent=2))
        for a in range(arrays):
            doc = copy.deepcopy(template)
            doc["attributes"] = attributes(g, a)
            (gdir / name("a", a)).mkdir(exist_ok=True)
            (gdir / name("a", a) / "zarr.json").write_text(json.dumps(doc, indent=2))
    del first
    for g, a in data_arrays:
        arr = zarr.open_array(root / name("g", g) / name("a", a), mode="r+")
        arr[...] = expected(g, a)
    zarr.consolidate_metadata(root)
    manifest = {
        "groups": groups, "arrays": arrays, "open_group": name("g", groups // 2),
        "data_arrays": [[g, a, f"{name('g', g)}/{name('a', a)}"] for g, a in data_arrays],
    }
    (root.parent / "manifest.json").write_text(json.dumps(manifest, indent=1))


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def op_open(path: str, m: dict) -> str:
    import zarr

    group = zarr.open_group(path)
    listed = [(n, a.shape, a.chunks, str(a.dtype)) for n, a in group[m["open_group"]].arrays()]
    assert all(shape == SHAPE for _, shape, _, _ in listed), listed[:2]
    return str(len(listed))


def op_read(path: str, m: dict) -> str:
    import numpy as np
    import zarr

    g, a, rel = m["data_arrays"][len(m["data_arrays"]) // 2]
    got = zarr.open_array(f"{path}/{rel}", mode="r")[...]
    return "ok" if np.array_equal(got, expected(g, a)) else "WRONG"


def op_xr(path: str, m: dict) -> str:
    import xarray as xr

    ds = xr.open_zarr(path, group=m["open_group"])
    return str(len(ds.data_vars))


OPS = {"open": op_open, "read": op_read, "xr": op_xr}


def run(op: str, path: str, drop: bool) -> None:
    manifest = os.environ.get("HIERARCHY_MANIFEST") or str(Path(path).resolve().parent / "manifest.json")
    m = json.loads(Path(manifest).read_text())
    import numpy  # noqa: F401  (imports are not timed)
    import xarray  # noqa: F401
    import zarr  # noqa: F401
    if op == "read":
        g, a, _ = m["data_arrays"][len(m["data_arrays"]) // 2]
        expected(g, a)  # numpy's generator warmed up outside the timed part
    if drop:
        drop_caches()
    t0 = time.perf_counter()
    check = OPS[op](path, m)
    print(f"{time.perf_counter() - t0:.3f} {check}")


def main(argv: list[str]) -> None:
    if len(argv) == 4 and argv[0] == "fixture":
        write_fixture(Path(argv[1]), int(argv[2]), int(argv[3]))
    elif len(argv) in (3, 4) and argv[0] == "run" and argv[1] in OPS:
        run(argv[1], argv[2], argv[3:] == ["--drop"])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Fixture hierarchies in the Zarr v3 draft layouts, and a reader of them.

  draft_fixtures.py write OUT
      OUT/2020: written by zarr-python 2.18's experimental v3 API (run this with the legacy
      venv, .venv-legacy): nested groups, arrays with the sharding storage transformer and
      without, zlib / blosc / no compressor, `/` and `.` separators, chunks never written;
      OUT/expected/<path>.npy: each array's data; OUT/manifest.json: the arrays (path, sharded).
  draft_fixtures.py read ROOT OUT
      Read every array of the manifest beside OUT (OUT/../manifest.json) from the 2020
      hierarchy at ROOT with zarr-python 2.18, saving OUT/<path>.npy.
  draft_fixtures.py write2022 OUT [--data-root]
      OUT: a 2022-layout hierarchy built from the seed text (no program writes it): entry point
      with `https://purl.org/zarr/spec/core/3.0`, `meta/group.json`, arrays at
      `meta/<path>.array.json` with URI-named gzip codecs and the sharding transformer in the
      `name: sharding` form, shards under `data/<path>/` (or `data/root/<path>/`), index at the
      end; OUT.json: for each array its stored document and the files the unsharded view must
      show (key -> hex bytes). Plain Python and numpy: any venv.
"""
from __future__ import annotations

import gzip
import json
import os
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

os.environ.setdefault("ZARR_V3_EXPERIMENTAL_API", "1")
os.environ.setdefault("ZARR_V3_SHARDING", "1")

# path, shape, chunks, chunks_per_shard (None: unsharded), dtype, compressor, separator, fill,
# region written (None: all)
ARRAYS_2020 = [
    ("grp/arr", (10, 9), (3, 2), (2, 2), "<i4", "zlib", "/", -1, None),
    ("grp/sub/partial", (12, 10), (2, 3), (2, 2), "<f8", "blosc", "/", "NaN", (slice(0, 5), slice(2, 8))),
    ("grp/sub/dots", (6, 8), (2, 2), (3, 2), "<u2", "zlib", ".", 7, None),
    ("cube", (5, 6, 7), (2, 3, 4), (2, 1, 2), "|u1", None, "/", 0, None),
    ("line", (11,), (2,), (3,), "<f4", "blosc", "/", 0.5, (slice(3, 9),)),
    ("plain", (5, 4), (2, 3), None, "<i8", "zlib", "/", 0, None),
]


def compressor(name):
    import zarr
    return {"zlib": zarr.Zlib(level=1), "blosc": zarr.Blosc(cname="lz4", clevel=5), None: None}[name]


def data_of(path, shape, dtype):
    rng = np.random.default_rng(zlib.crc32(path.encode()))
    if np.dtype(dtype).kind == "f":
        return rng.normal(size=shape).astype(dtype)
    return rng.integers(0, 200, size=shape).astype(dtype)


def write_2020(out: Path) -> None:
    import zarr
    from zarr._storage.v3 import DirectoryStoreV3
    from zarr._storage.v3_storage_transformers import ShardingStorageTransformer
    root = out / "2020"
    store = DirectoryStoreV3(str(root))
    zarr.group(store=store, path="grp", zarr_version=3).attrs["kind"] = "draft group"
    zarr.group(store=store, path="grp/sub", zarr_version=3)
    manifest = []
    for path, shape, chunks, per_shard, dtype, comp, sep, fill, region in ARRAYS_2020:
        transformers = [] if per_shard is None else [ShardingStorageTransformer("indexed", chunks_per_shard=per_shard)]
        fill_value = float("nan") if fill == "NaN" else fill
        a = zarr.create(shape=shape, chunks=chunks, dtype=dtype, store=store, path=path, zarr_version=3,
                        storage_transformers=transformers, compressor=compressor(comp),
                        dimension_separator=sep, fill_value=fill_value)
        a.attrs["written_by"] = "zarr 2.18.7"
        data = data_of(path, shape, dtype)
        region = region or tuple(slice(None) for _ in shape)
        a[region] = data[region]
        expected = np.full(shape, fill_value, dtype=dtype)
        expected[region] = data[region]
        target = out / "expected" / f"{path}.npy"
        target.parent.mkdir(parents=True, exist_ok=True)
        np.save(target, expected)
        manifest.append({"path": path, "sharded": per_shard is not None, "ndim": len(shape)})
    (out / "manifest.json").write_text(json.dumps({"arrays": manifest}, indent=1))


def read_2020(root: Path, out: Path) -> None:
    import zarr
    from zarr._storage.v3 import DirectoryStoreV3
    manifest = json.loads((out.parent / "manifest.json").read_text())
    store = DirectoryStoreV3(str(root))
    for entry in manifest["arrays"]:
        a = zarr.open_array(store, path=entry["path"], mode="r", zarr_version=3)
        target = out / f"{entry['path']}.npy"
        target.parent.mkdir(parents=True, exist_ok=True)
        np.save(target, a[...])


# ---------------------------------------------------------------------------------------------
# the 2022 layout, from the seed text

GZIP = "https://purl.org/zarr/spec/codecs/gzip/1.0"
ARRAYS_2022 = [
    # path ("" is the root array of its own hierarchy), shape, chunks, chunks_per_shard, dtype
    ("foo/baz", (6, 5), (2, 2), (2, 2), "<i2"),
    ("foo/line", (7,), (3,), (2,), "<f8"),
]


def chunk_bytes(data: np.ndarray, coords, chunks) -> bytes:
    region = tuple(slice(c * s, (c + 1) * s) for c, s in zip(coords, chunks))
    block = np.zeros(chunks, dtype=data.dtype)
    part = data[region]
    block[tuple(slice(0, n) for n in part.shape)] = part
    return gzip.compress(block.tobytes(order="C"), compresslevel=1, mtime=0)


def write_2022(out: Path, data_root: bool) -> None:
    out.mkdir(parents=True)
    (out / "zarr.json").write_text(json.dumps({
        "zarr_format": "https://purl.org/zarr/spec/core/3.0",
        "metadata_encoding": {"type": "json", "metadata_key_suffix": ".json"}, "extensions": []}))
    (out / "meta").mkdir()
    (out / "meta" / "group.json").write_text(json.dumps({"extensions": [], "attributes": {"layout": "2022"}}))
    report = {}
    for path, shape, chunks, per_shard, dtype in ARRAYS_2022:
        doc = {"shape": list(shape), "data_type": dtype,
               "chunk_grid": {"type": "regular", "chunk_shape": list(chunks), "separator": "/"},
               "chunk_memory_layout": "C", "codecs": [{"type": GZIP, "configuration": {"level": 1}}],
               "fill_value": 0, "extensions": [], "attributes": {"path": path},
               "storage_transformers": [{"name": "sharding", "configuration": {"chunks_per_shard": list(per_shard)}}]}
        meta = out / "meta" / f"{path}.array.json"
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps(doc, indent=2))
        data = data_of(path, shape, dtype)
        grid = [-(-s // c) for s, c in zip(shape, chunks)]
        shard_grid = [-(-g // k) for g, k in zip(grid, per_shard)]
        data_dir = ("data/root/" if data_root else "data/") + path
        view_files = {}
        for shard in np.ndindex(*shard_grid):
            body, index = b"", []
            for local in np.ndindex(*per_shard):
                coords = [s * k + l for s, k, l in zip(shard, per_shard, local)]
                # Every third chunk of the grid is left out (a hole), the rest stored.
                if any(c >= g for c, g in zip(coords, grid)) or sum(coords) % 3 == 2:
                    index.append((2**64 - 1, 2**64 - 1))
                    continue
                chunk = chunk_bytes(data, coords, chunks)
                index.append((len(body), len(chunk)))
                body += chunk
                key = f"{data_dir}/c" + "/".join(str(c) for c in coords)
                view_files[key] = chunk.hex()
            shard_key = out / (f"{data_dir}/c" + "/".join(str(s) for s in shard))
            shard_key.parent.mkdir(parents=True, exist_ok=True)
            shard_key.write_bytes(body + b"".join(struct.pack("<QQ", o, n) for o, n in index))
        report[path] = {"doc": doc, "meta_key": f"meta/{path}.array.json", "view_files": view_files,
                        "data_dir": data_dir}
    Path(f"{out}.json").write_text(json.dumps(report, indent=1))


def main(argv) -> int:
    if len(argv) >= 2 and argv[0] == "write":
        write_2020(Path(argv[1]))
    elif len(argv) >= 3 and argv[0] == "read":
        read_2020(Path(argv[1]), Path(argv[2]))
    elif len(argv) >= 2 and argv[0] == "write2022":
        write_2022(Path(argv[1]), "--data-root" in argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

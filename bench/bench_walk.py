"""Helper of bench/bench_walk.sh (issue 35, millions of chunk files).

  bench_walk.py fixture DIR N      write DIR: a hierarchy (written by tensorstore) of two sharded
                                   uint8 arrays with N inner chunks of 16 bytes each:
                                     grid  2-D, chunks of 4x4 in a grid of R x C = N (c/I/J:
                                           R directories of C files), shards of 256x256 chunks
                                     flat  1-D, shape (4N,), chunks of 4 (c/I: N files in one
                                           directory), shards of 65,536 chunks
  bench_walk.py walk DIR           os.walk alone (names only); prints the seconds and entries
  bench_walk.py statall DIR        os.walk and os.stat of every file; prints seconds and files
  bench_walk.py first DIR          os.scandir(DIR) and next() on it, then the rest of the listing;
                                   prints seconds to the first entry, seconds to all, entries
  bench_walk.py stats MNT          the mount's counters as one JSON line (the stats ioctl)

The timings are taken inside Python, so the interpreter's start is not counted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

SHARD_CHUNKS_2D = 256   # inner chunks per shard along each dimension of `grid`
SHARD_CHUNKS_1D = 65536  # inner chunks per shard of `flat`


def grid_of(n: int) -> tuple[int, int]:
    """R x C = n with R the largest divisor of n not above sqrt(n)."""
    r = int(n ** 0.5)
    while n % r:
        r -= 1
    return r, n // r


def array_meta(shape, chunk, shard) -> dict:
    return {
        "zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(chunk),
            "codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                             {"name": "crc32c"}],
            "index_location": "end"}}],
    }


def write_fixture(root: Path, n: int) -> None:
    import numpy as np
    import tensorstore as ts

    root.mkdir(parents=True, exist_ok=True)
    (root / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    rng = np.random.default_rng(35)
    r, c = grid_of(n)
    # Values 1..255: no chunk equals the fill value, so every inner chunk is stored (a file).
    arrays = {
        "grid": ((4 * r, 4 * c), (4, 4), (4 * SHARD_CHUNKS_2D, 4 * SHARD_CHUNKS_2D)),
        "flat": ((4 * n,), (4,), (4 * SHARD_CHUNKS_1D,)),
    }
    for name, (shape, chunk, shard) in arrays.items():
        shard = tuple(min(s, -(-d // k) * k) for s, d, k in zip(shard, shape, chunk))
        store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root / name) + "/"},
                         "metadata": array_meta(shape, chunk, shard)},
                        create=True, delete_existing=True).result()
        # Row blocks of whole shards, so memory stays small for any n.
        step = shard[0] * max(1, (1 << 26) // max(1, int(np.prod(shape[1:])) * shard[0]))
        for start in range(0, shape[0], step):
            stop = min(shape[0], start + step)
            block = rng.integers(1, 256, size=(stop - start,) + tuple(shape[1:]), dtype=np.uint8)
            store[start:stop].write(block).result()
    print(f"grid {r}x{c} chunks, flat {n} chunks", file=sys.stderr)


def walk(top: str) -> None:
    t0 = time.perf_counter()
    entries = 0
    for _, dirs, files in os.walk(top):
        entries += len(dirs) + len(files)
    print(f"{time.perf_counter() - t0:.3f} {entries}")


def statall(top: str) -> None:
    t0 = time.perf_counter()
    files = 0
    for d, _, names in os.walk(top):
        for name in names:
            os.stat(os.path.join(d, name))
            files += 1
    print(f"{time.perf_counter() - t0:.3f} {files}")


def first(top: str) -> None:
    t0 = time.perf_counter()
    with os.scandir(top) as it:
        next(it)
        t1 = time.perf_counter()
        entries = 1 + sum(1 for _ in it)
    t2 = time.perf_counter()
    print(f"{t1 - t0:.4f} {t2 - t0:.3f} {entries}")


def stats(mnt: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from mount_stats import mount_stats
    print(json.dumps(mount_stats(mnt)))


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "fixture":
        write_fixture(Path(args[0]), int(args[1]))
    else:
        {"walk": walk, "statall": statall, "first": first, "stats": stats}[cmd](args[0])

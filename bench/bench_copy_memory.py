"""Write the fixture of bench/bench_copy_memory.sh: one sharded uint8 array of N chunks of
4x4 elements (16 bytes each, uncompressed), 64x64 chunks a shard, written by tensorstore.
Usage: bench_copy_memory.py ROOT N"""
import math
import sys

import numpy as np
import tensorstore as ts

root, n = sys.argv[1], int(sys.argv[2])
side = math.isqrt(n)
rows = n // side  # rows * side chunks (N when N is a square, e.g. 10^6; a little less else)
shape = [rows * 4, side * 4]
spec = {
    "driver": "zarr3",
    "kvstore": {"driver": "file", "path": f"{root}/a"},
    "metadata": {
        "shape": shape,
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [256, 256]}},
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [4, 4], "codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                             {"name": "crc32c"}]}}],
    },
    "create": True,
    "delete_existing": True,
}
arr = ts.open(spec).result()
# Values that differ chunk by chunk (never the fill value, so every chunk is stored).
data = (np.arange(shape[0] * shape[1], dtype=np.uint64).reshape(shape) % 251 + 1).astype(np.uint8)
arr.write(data).result()
with open(f"{root}/zarr.json", "w") as f:
    f.write('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
print(rows * side)

"""The first byte of a chunk file of a big remote shard: 65,536 inner chunks, so a 1 MiB index
(65,536 x 16 bytes + a CRC32C), in a 17 MiB shard, larger than the default prefetch window
(8 MiB) that comes along with the index.

What is counted, and why: every request the daemon sends (`http_requests`: GET, HEAD, LIST
alike, from the mount's counters) between the array's metadata having been read and the first
byte of the chunk file having arrived. The metadata reads before it (a stat of the array
directory and a read of its zarr.json) are what any client does before it reads a chunk --
zarr-python and tensorstore open the array first -- and they are about the array, not the shard:
they are recorded, and bounded separately: at most 2 requests after the mount (the group's and
the array's zarr.json; the daemon reads the root's documents while mounting, so it is 0 today).
What is left is the shard's own cost: its index (one suffix-range GET of the index and the
window before it) and the chunk's bytes (one ranged GET, unless the window held them). Nothing
else may be sent: no HEAD or LIST to find out whether the shard exists (the index GET answers
that), no index read in pieces. At most 2. (Mounted with a data cache too small for the index,
--cache-size 512K, it takes 3: the index is read again by the open after the lookup; with
--metadata-ttl 0, 15.)

The chunks read: c/0/0, at the start of the shard, as far from the end-located index as it gets
(never in the window that comes with the index); and the last chunk, which is in that window
(1 request). Each is read from a fresh mount, and its bytes are compared with what tensorstore
wrote.
"""
import os

import numpy as np
import pytest

from remote import delta, record, remote, remote_view, stats  # noqa: F401

SHAPE = (4096, 4096)  # uint8: one shard of 16 MiB of chunk data
INNER = (16, 16)  # 256 x 256 = 65,536 inner chunks
NCHUNKS = (SHAPE[0] // INNER[0]) * (SHAPE[1] // INNER[1])
BACKENDS = ["s3", "http"]  # moto and nginx (WebDAV)


@pytest.fixture(scope="module")
def big_shard(tmp_path_factory):
    """A tensorstore-written array of one shard of 65,536 uncompressed 16x16 uint8 chunks."""
    import tensorstore as ts

    root = tmp_path_factory.mktemp("big-shard")
    data = np.random.default_rng(65536).integers(0, 256, SHAPE, dtype=np.uint8)
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(root / "big")},
        "metadata": {
            "shape": list(SHAPE),
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(SHAPE)}},
            "chunk_key_encoding": {"name": "default"},
            "fill_value": 0,
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": list(INNER),
                "codecs": [{"name": "bytes"}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                 {"name": "crc32c"}],
                "index_location": "end"}}],
        },
    }
    arr = ts.open(spec, create=True).result()
    arr.write(data).result()
    shard = root / "big" / "c" / "0" / "0"
    assert shard.stat().st_size == SHAPE[0] * SHAPE[1] + NCHUNKS * 16 + 4, "not one full shard"
    (root / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    return root, data


def chunk_bytes(data: np.ndarray, i: int, j: int) -> bytes:
    return data[i * INNER[0]:(i + 1) * INNER[0], j * INNER[1]:(j + 1) * INNER[1]].tobytes()


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_first_byte_of_a_65536_chunk_shard(remote_view, remote, big_shard, backend, which):
    root, data = big_shard
    prefix = remote.seeded.get((backend, "big-shard")) or remote.seed(backend, root, "big-shard")
    view = remote_view(backend, "--read-only", prefix=prefix)
    last = SHAPE[0] // INNER[0] - 1
    i, j = (0, 0) if which == "first" else (last, last)
    s_mount = stats(view)
    os.stat(view.path("big"))
    assert b"sharding_indexed" not in (view.path("big") / "zarr.json").read_bytes()
    s_meta = stats(view)
    with open(view.path(f"big/c/{i}/{j}"), "rb") as f:  # lookup, open, the first byte
        first = f.read(1)
        s_first = stats(view)
        rest = f.read()
    s_chunk = stats(view)
    assert first + rest == chunk_bytes(data, i, j), f"chunk c/{i}/{j} is not what tensorstore wrote"
    meta, cold, whole = delta(s_mount, s_meta), delta(s_meta, s_first), delta(s_meta, s_chunk)
    shown = ("http_requests", "get", "get_bytes", "head", "list", "list_dir")
    record("first byte of a 65,536-chunk shard", backend=backend, chunk=f"c/{i}/{j}",
           **{name: {k: d[k] for k in shown}
              for name, d in (("metadata", meta), ("first_byte", cold), ("whole_chunk", whole))})
    sent = {k: cold[k] for k in ("get", "head", "list", "list_dir")}
    assert cold["http_requests"] <= 2, (
        f"first byte of c/{i}/{j} of a 65,536-chunk shard on {backend} took "
        f"{cold['http_requests']} requests ({sent}), more than index + chunk")
    assert whole["http_requests"] == cold["http_requests"], f"the rest of the chunk sent: {whole}"
    assert meta["http_requests"] <= 2, f"the metadata took {meta['http_requests']} requests: {meta}"

"""Writes through the view by the real clients: zarr-python 3 and tensorstore open a sharded
array's unsharded view and write regions that cross shard boundaries, touch edge chunks, fill
whole chunks and a whole shard with the fill value (unlinks) and start a shard that did not
exist. After unmount both clients read the sharded store directly and find exactly the
expected array; every shard passes the strict check (index location and codecs as configured,
no entry out of bounds, no all-empty shard left); no temporary file is left in the source."""
import math

import numpy as np
import pytest

import fixtures as F
import shardindex as si
from helpers import READERS, assert_same_array
from writing import (CLIENT_WRITERS, build, check_sharded_store, mount_writable, stored_meta,
                     temp_files, view_matches_store)

ZP, TS = F.ZARR_PY, F.TENSORSTORE

# name -> ArraySpec builder (path set per test). `empty_shards` gives one shard that does not
# exist before the writes.
CONFIGS = {
    "1d_end_crc_gzip_slash_edge": lambda p, w: F.ArraySpec(
        p, w, (1000,), "uint8", (256,), [F.c_bytes(), F.c_gzip()], [F.Level((32,))],
        empty_shards=[(2,)]),
    "2d_start_nocrc_blosc_dot": lambda p, w: F.ArraySpec(
        p, w, (50, 70), "int16", (20, 32), [F.c_bytes(), F.c_blosc(2)],
        [F.Level((10, 8), "start", False)], cke=F.cke_default("."), empty_shards=[(2, 1)]),
    "3d_end_crc_zstd_v2dot": lambda p, w: F.ArraySpec(
        p, w, (9, 10, 11), "float32", (4, 4, 4), [F.c_bytes(), F.c_zstd()],
        [F.Level((2, 2, 2))], cke=F.cke_v2("."), empty_shards=[(1, 2, 0)]),
    "2d_start_crc_bytes_v2slash": lambda p, w: F.ArraySpec(
        p, w, (30, 25), "uint16", (8, 10), [F.c_bytes()], [F.Level((4, 5), "start", True)],
        cke=F.cke_v2("/"), empty_shards=[(3, 0)]),
    "2d_nested_end_crc_start_nocrc": lambda p, w: F.ArraySpec(
        p, w, (20, 22), "int16", (8, 8), [F.c_bytes(), F.c_zstd()],
        [F.Level((4, 4)), F.Level((2, 2), "start", False)], empty_shards=[(2, 1)]),
    "1d_bigendian_index_nocrc": lambda p, w: F.ArraySpec(
        p, w, (37,), "float64", (8,), [F.c_bytes("big")], [F.Level((2,), "end", False, "big")],
        fill_value=-1.0, empty_shards=[(3,)]),
}


def planned_writes(spec: F.ArraySpec, data: np.ndarray, seed: int) -> tuple[list, np.ndarray]:
    """The writes of a test (region, values) and the array expected after them."""
    rng = np.random.default_rng(seed)
    shape, shard, inner = spec.shape, spec.chunks, spec.inner_chunk_shape
    fill = np.array(spec.fill_value).astype(spec.dtype)
    expected = data.copy()
    writes = []

    def put(region, values):
        region = tuple(region)
        values = np.asarray(values, dtype=spec.dtype)
        expected[region] = values
        writes.append((region, values))

    def rand(region):
        return F.random_values(rng, tuple(s.stop - s.start for s in region), spec.dtype)

    def full(region):
        return np.full(tuple(s.stop - s.start for s in region), fill, dtype=spec.dtype)

    # 1. an unaligned region across the boundary of the first shards in every dimension
    cross = [slice(max(0, s - i - 1), min(n, s + i + 1)) for n, s, i in zip(shape, shard, inner)]
    put(cross, rand(cross))
    # 2. fill value over whole inner chunks of the last shards (unlinks), and over part of one
    #    chunk (which stays stored)
    grid = [math.ceil(n / s) for n, s in zip(shape, shard)]
    last = [(g - 1) * s for g, s in zip(grid, shard)]
    whole = [slice(a, min(n, a + 2 * i)) for a, n, i in zip(last, shape, inner)]
    put(whole, full(whole))
    part = [slice(0, min(n, max(1, i // 2))) for n, i in zip(shape, inner)]
    put(part, full(part))
    # 3. part of a shard that did not exist (one inner chunk and a bit of its neighbour)
    start = [c * s for c, s in zip(spec.empty_shards[0], shard)]
    new = [slice(a + 1, min(n, a + i + 2)) for a, n, i in zip(start, shape, inner)]
    put(new, rand(new))
    # 4. the corner edge chunk (partial when the shape is not a multiple of the chunk shape)
    edge = [slice(((n - 1) // i) * i, n) for n, i in zip(shape, inner)]
    put(edge, rand(edge))
    # 5. the first shard wiped with the fill value: its shard file must disappear
    first = [slice(0, min(n, s)) for n, s in zip(shape, shard)]
    put(first, full(first))
    # 6. an overwrite of a region already written in this session
    again = [slice(min(n - 1, s), min(n, s + i)) for n, s, i in zip(shape, shard, inner)]
    put(again, rand(again))
    return writes, expected


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("client", sorted(CLIENT_WRITERS))
def test_client_writes_through_view(mounter, tmp_path, client, config):
    builder = TS if client == "zarr-python" else ZP  # the store is written by the other client
    spec = CONFIGS[config](f"data/{config}", builder)
    root = tmp_path / "src"
    data = build(root, [spec])[spec.path]
    meta_before = stored_meta(root / spec.path)
    writes, expected = planned_writes(spec, data, seed=len(config))
    first_shard = root / spec.path / si.chunk_key((0,) * len(spec.shape), spec.cke)
    new_shard = root / spec.path / si.chunk_key(spec.empty_shards[0], spec.cke)
    assert first_shard.is_file() and not new_shard.exists()

    view = mount_writable(mounter, root)
    CLIENT_WRITERS[client](view.path(spec.path), writes)
    # every close() has returned: the store already holds the writes, and the view agrees
    diffs = view_matches_store(view.path(spec.path), root / spec.path)
    assert diffs == [], f"view and store differ while mounted: {diffs[:10]}"
    got = READERS[client](view.path(spec.path))
    assert_same_array(got, expected, f"{client} reading back its writes through the view")
    assert view.alive()
    view.stop()

    assert not view.is_mounted()
    assert not first_shard.exists(), "the shard wiped with the fill value still exists"
    assert new_shard.is_file(), "the shard started by the writes does not exist"
    check_sharded_store(root / spec.path, expected, meta_before, f"{client} on {config}")
    assert temp_files(root) == []


@pytest.mark.parametrize("client", sorted(CLIENT_WRITERS))
def test_client_writes_unsharded_array_through_view(mounter, tmp_path, client):
    """An unsharded array is passed through: the client's writes (temporary file + rename
    for both clients) land in the source as the client writes them."""
    spec = F.ArraySpec("data/plain", ZP, (20, 22), "int16", (8, 8), [F.c_bytes(), F.c_zstd()])
    root = tmp_path / "src"
    data = build(root, [spec])[spec.path]
    expected = data.copy()
    values = np.arange(10 * 12, dtype="int16").reshape(10, 12)
    expected[5:15, 5:17] = values
    expected[16:20, 0:8] = 0
    writes = [((slice(5, 15), slice(5, 17)), values),
              ((slice(16, 20), slice(0, 8)), np.zeros((4, 8), "int16"))]
    view = mount_writable(mounter, root)
    CLIENT_WRITERS[client](view.path(spec.path), writes)
    view.stop()
    for name, read in sorted(READERS.items()):
        assert_same_array(read(root / spec.path), expected, f"{name} after {client} wrote")
    assert temp_files(root) == []

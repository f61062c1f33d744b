"""Sharded arrays whose sharding codec is not alone: a `transpose` before it (tensorstore
writes these; zarr-python 3.1 cannot even open them) and bytes-to-bytes codecs after it
(zarr-python writes `compressors=` beside a sharding serializer; tensorstore refuses to open
those). The unsharded view shows both unsharded: for a transpose, chunks of the region one
inner chunk covers with `transpose` + the inner codecs; for outer codecs, each shard decoded
whole (cached, bounded by --cache-size) and its inner chunks served. Reads through the view
equal the data written, for zarr-python and tensorstore; writes through the view read back
from the source with the client that can read it; the raw view is the store."""
import errno
import json
import shutil

import numpy as np
import pytest

from mounting import tree_digest

DATA = np.arange(10 * 9, dtype="<i4").reshape(10, 9)


def ts_spec(path, codecs, shape=(10, 9), chunks=(4, 6), dtype="int32"):
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)},
            "metadata": {"shape": list(shape), "data_type": dtype,
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
                         "codecs": codecs},
            "create": True, "delete_existing": True}


def sharding(inner, codecs=None):
    return {"name": "sharding_indexed", "configuration": {
        "chunk_shape": inner,
        "codecs": codecs or [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}


def transpose(order):
    return {"name": "transpose", "configuration": {"order": order}}


@pytest.fixture(scope="module")
def around(tmp_path_factory):
    """name -> (expected data, which clients can read the stored array)."""
    import tensorstore as ts
    import zarr
    from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, ZstdCodec
    root = tmp_path_factory.mktemp("around") / "root"
    zarr.open_group(root, mode="w")
    arrays = {}
    # tensorstore: transpose before sharding, 2-D and 3-D, a partial write.
    ts.open(ts_spec(root / "t2d", [transpose([1, 0]), sharding([3, 2])])).result()[...] = DATA
    arrays["t2d"] = (DATA, {"tensorstore"})
    cube = np.arange(5 * 6 * 4, dtype="<u2").reshape(5, 6, 4)
    t3 = ts.open(ts_spec(root / "t3d", [transpose([2, 0, 1]), sharding([2, 2, 3], [
        {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}])],
        shape=(5, 6, 4), chunks=(4, 6, 4), dtype="uint16")).result()
    t3[1:4, :, 1:3] = cube[1:4, :, 1:3]
    want = np.zeros_like(cube)
    want[1:4, :, 1:3] = cube[1:4, :, 1:3]
    arrays["t3d"] = (want, {"tensorstore"})
    # zarr-python: codecs after the sharding codec.
    for name, compressors, inner in [
        ("gzip", [GzipCodec(level=5)], [BytesCodec()]),
        ("crc_zstd", [Crc32cCodec(), ZstdCodec(level=3)], [BytesCodec(), ZstdCodec()]),
    ]:
        a = zarr.create_array(root / name, shape=DATA.shape, chunks=(4, 6), dtype="<i4", fill_value=-1,
                              serializer=ShardingCodec(chunk_shape=(2, 3), codecs=inner),
                              compressors=compressors)
        a[:7] = DATA[:7]
        want = np.full(DATA.shape, -1, "<i4")
        want[:7] = DATA[:7]
        arrays[name] = (want, {"zarr-python"})
    return root, arrays


def read_zarr(path):
    import zarr
    return zarr.open_array(path, mode="r")[...]


def read_ts(path):
    import tensorstore as ts
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result().read().result()


READ = {"zarr-python": read_zarr, "tensorstore": read_ts}


@pytest.mark.parametrize("client", sorted(READ))
@pytest.mark.parametrize("name", ["t2d", "t3d", "gzip", "crc_zstd"])
def test_the_view_unshards_codecs_around_sharding(around, mounter, client, name):
    root, arrays = around
    want, source_readers = arrays[name]
    view = mounter(root, "--read-only")
    assert np.array_equal(READ[client](view.path(name)), want), f"{client} through the view"
    for reader in source_readers:
        assert np.array_equal(READ[reader](root / name), want), f"{reader} from the source"
    doc = json.loads((view.path(name) / "zarr.json").read_text())
    names = [c["name"] for c in doc["codecs"]]
    assert "sharding_indexed" not in names, names
    assert names[0] == "transpose" if name.startswith("t") else names == ["bytes"] or names == ["bytes", "zstd"]
    assert "WARN" not in view.log_text()


def test_a_transposed_arrays_chunks_are_the_regions_its_inner_chunks_cover(around, mounter):
    """t2d: shards of [4, 6] transposed to [6, 4], inner chunks of [3, 2] there: each view chunk
    covers [2, 3] of the array; a chunk file decodes (transpose + bytes) to that region."""
    root, _ = around
    view = mounter(root, "--read-only")
    doc = json.loads((view.path("t2d") / "zarr.json").read_text())
    assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [2, 3]
    raw = (view.path("t2d") / "c" / "3" / "1").read_bytes()
    block = np.frombuffer(raw, "<i4").reshape(3, 2).T  # stored transposed
    assert np.array_equal(block, DATA[6:8, 3:6])


@pytest.mark.parametrize("name", ["t2d", "gzip", "crc_zstd"])
def test_writes_through_the_view_are_packed_back(around, mounter, name, tmp_path):
    import zarr
    root, arrays = around
    copy = tmp_path / "root"
    shutil.copytree(root, copy)
    want, source_readers = arrays[name]
    want = want.copy()
    view = mounter(copy)
    patch = 500 + np.arange(6 * 3, dtype="<i4").reshape(6, 3)
    zarr.open_array(view.path(name), mode="r+")[2:8, 4:7] = patch
    want[2:8, 4:7] = patch
    view.stop()
    for reader in source_readers:
        assert np.array_equal(READ[reader](copy / name), want), f"{reader} on the source after writing"
    stored = json.loads((copy / name / "zarr.json").read_text())
    assert json.loads((root / name / "zarr.json").read_text())["codecs"] == stored["codecs"]


def test_a_decoded_shard_larger_than_the_cache_is_an_eio_naming_the_option(mounter, tmp_path):
    import zarr
    from zarr.codecs import BytesCodec, GzipCodec, ShardingCodec
    root = tmp_path / "big"
    a = zarr.create_array(root, shape=(256, 256), chunks=(256, 256), dtype="u1",
                          serializer=ShardingCodec(chunk_shape=(16, 16), codecs=[BytesCodec()]),
                          compressors=[GzipCodec()])
    a[:] = np.arange(256 * 256, dtype="u1").reshape(256, 256)
    view = mounter(root, "--read-only", "--cache-size", "16K")
    with pytest.raises(OSError) as err:
        (view.path() / "c" / "0" / "0").read_bytes()
    assert err.value.errno == errno.EIO
    assert "raise --cache-size" in view.log_text()
    ok = mounter(root, "--read-only", "--cache-size", "1M")
    assert np.array_equal(read_zarr(ok.path()), a[...])


@pytest.mark.parametrize("name", ["t2d", "gzip"])
def test_the_raw_view_is_the_store(around, mounter, name):
    root, _ = around
    view = mounter(root, "--read-only", "--view", "raw")
    assert tree_digest(view.path(name)) == tree_digest(root / name)


@pytest.mark.parametrize("name", ["t2d", "t3d", "gzip", "crc_zstd"])
def test_the_v2_view_shows_them_too(around, mounter, name):
    """Through `--view v2`: t2d's transpose reverses the dimensions (order F, relayed), t3d's
    does not (transcoded), the outer codecs are decoded by the sharding layer (relayed)."""
    import zarr
    root, arrays = around
    want, _ = arrays[name]
    view = mounter(root, "--view", "v2")
    got = zarr.open_array(view.path(name), mode="r", zarr_format=2)[...]
    assert np.array_equal(got, want), name
    zarray = json.loads((view.path(name) / ".zarray").read_text())
    if name == "t2d":
        assert zarray["order"] == "F"
    if name == "t3d":
        assert zarray["compressor"] == {"id": "zstd", "level": 1} and zarray["order"] == "C"

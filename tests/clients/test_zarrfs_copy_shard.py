"""`zarrfs copy SOURCE DEST --shard SHAPE` (issue 26): an unsharded hierarchy packed into shards
with the mount's packer. zarr-python and xarray (default arguments) read the packed copy as the
source, value for value; its unsharded view is the source again, byte for byte; parts are
disjoint and make the whole; a rerun skips the shards DEST holds (same size and index) and
rewrites one whose index differs, and only --verify finds a damaged chunk behind a right index;
a shard shape that does not fit an array's chunks is refused, naming it, with nothing written.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import seed_remote as SR
from copying import as_values, contents, copy, copy_json, mount_copy, same_values, shard_copy
from helpers import walk_files
from remote import download_tree, remote  # noqa: F401 - fixture

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")

@pytest.fixture
def unsharded(mounter, tree, tmp_path) -> Path:
    """The unsharded view of the zarr-python group, on local disk: what users have to pack."""
    mount_copy(mounter, tree.root / "zp", tmp_path / "unsharded")
    return tmp_path / "unsharded"


# Per group of the fixture, shard shapes that together pack every array of 1 to 4 dimensions
# (each a multiple of the chunk shapes of that many dimensions there).
SHAPES = {"zp": ["20,40", "64", "4,4,4", "4,4,2,4"], "ts": ["512,512", "32", "4,12,4", "4,4,2,4"]}


@pytest.mark.parametrize("group", sorted(SHAPES))
def test_every_array_packs_reads_as_the_source_and_unshards_back_byte_for_byte(zarrfs_bin, mounter, tree,
                                                                               tmp_path, group):
    unsharded = tmp_path / "unsharded"
    mount_copy(mounter, tree.root / group, unsharded)
    source = zarr.open_group(str(unsharded), mode="r")
    packed_names = set()
    for i, shape in enumerate(SHAPES[group]):
        dims = [int(d) for d in shape.split(",")]
        packed = tmp_path / f"packed{i}"
        res = shard_copy(zarrfs_bin, unsharded, packed, shape=shape)
        assert res.returncode == 0, res.stderr
        shards = same_values(unsharded, packed)
        for name, arr in source.arrays():
            if arr.ndim == len(dims):
                assert shards[name] == tuple(dims), (name, shards[name])
                packed_names.add(name)
                # Its chunk tree holds its shards only: at most one object per shard of the grid.
                objects = [rel for rel in walk_files(packed) if rel.startswith(f"{name}/")
                           and not rel.endswith("zarr.json")]
                assert len(objects) <= np.prod([-(-n // d) for n, d in zip(arr.shape, dims)]), name
            else:
                assert shards[name] is None, name
        res = copy(zarrfs_bin, packed, tmp_path / f"back{i}")
        assert res.returncode == 0, res.stderr
        assert as_values(contents(tmp_path / f"back{i}")) == as_values(contents(unsharded)), shape
    assert packed_names == {name for name, arr in source.arrays() if arr.ndim > 0}


def test_xarray_reads_a_packed_dataset_as_written(zarrfs_bin, tmp_path):
    ds = xr.Dataset(
        {"t": (("y", "x"), np.random.default_rng(1).normal(size=(64, 48)).astype("f4"), {"units": "K"}),
         "q": (("y",), (np.arange(64) % 7).astype("i2"))},
        coords={"y": np.arange(64), "x": np.arange(48) * 0.5}, attrs={"title": "pack me"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(tmp_path / "plain", zarr_format=3, encoding={"t": {"chunks": (8, 8)}})
    res = shard_copy(zarrfs_bin, tmp_path / "plain", tmp_path / "packed", shape="32,48")
    assert res.returncode == 0, res.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = xr.open_zarr(tmp_path / "packed")
        xr.testing.assert_identical(got.load(), ds)
    assert got["t"].encoding["shards"] == (32, 48)
    group = json.loads((tmp_path / "packed" / "zarr.json").read_text())
    entry = group["consolidated_metadata"]["metadata"]["t"]
    assert entry["codecs"][0]["name"] == "sharding_indexed", entry
    assert entry == json.loads((tmp_path / "packed" / "t" / "zarr.json").read_text())


def test_parts_of_a_packing_make_the_whole(zarrfs_bin, unsharded, tmp_path):
    assert shard_copy(zarrfs_bin, unsharded, tmp_path / "whole").returncode == 0
    want = contents(tmp_path / "whole")
    union: dict[str, bytes] = {}
    for k in range(3):
        res = shard_copy(zarrfs_bin, unsharded, tmp_path / f"part{k}", "--part", f"{k}/3")
        assert res.returncode == 0, res.stderr
        got = contents(tmp_path / f"part{k}")
        assert not set(got) & set(union), f"part {k} overlaps"
        union.update(got)
    assert union == want


def test_a_rerun_skips_held_shards_and_rewrites_a_changed_index(zarrfs_bin, unsharded, tmp_path):
    dest = tmp_path / "packed"
    assert shard_copy(zarrfs_bin, unsharded, dest).returncode == 0
    want = contents(dest)
    res = shard_copy(zarrfs_bin, unsharded, dest, "--json")
    summary = json.loads(res.stdout)
    assert summary["files_copied"] == 0 and summary["files_skipped"] == len(want), summary
    shards = sorted(rel for rel in want if rel.startswith("unsharded_2d/c/"))
    index_changed, data_changed = dest / shards[0], dest / shards[-1]
    raw = bytearray(want[shards[0]])
    raw[-5] ^= 1  # in the index (the last 4 bytes are its checksum)
    index_changed.write_bytes(bytes(raw))
    raw = bytearray(want[shards[-1]])
    raw[0] ^= 0xFF  # in the first chunk: size and index unchanged
    data_changed.write_bytes(bytes(raw))
    summary = json.loads(shard_copy(zarrfs_bin, unsharded, dest, "--json").stdout)
    assert summary["files_copied"] == 1 and summary["files_skipped"] == len(want) - 1, summary
    assert index_changed.read_bytes() == want[shards[0]]
    assert data_changed.read_bytes() != want[shards[-1]]
    summary = json.loads(shard_copy(zarrfs_bin, unsharded, dest, "--json", "--verify").stdout)
    assert summary["files_copied"] == 1 and summary["files_verified"] == len(want), summary
    assert contents(dest) == want


def test_a_shape_that_does_not_fit_is_refused_with_nothing_written(zarrfs_bin, unsharded, tmp_path):
    res = shard_copy(zarrfs_bin, unsharded, tmp_path / "dest", shape="20,30")
    assert res.returncode != 0
    assert "is not a multiple of the chunk shape" in res.stderr and "zarr.json" in res.stderr, res.stderr
    assert not walk_files(tmp_path / "dest")
    for bad in ["0,4", "x", "4,-1", "3,,4"]:
        res = shard_copy(zarrfs_bin, unsharded, tmp_path / "dest2", shape=bad)
        assert res.returncode != 0 and "shard shape" in res.stderr, (bad, res.stderr)
    res = shard_copy(zarrfs_bin, unsharded, tmp_path / "dest4", shape="4000000000,4000000000")
    assert res.returncode != 0 and "chunks per shard" in res.stderr and "above the limit" in res.stderr, res.stderr
    assert not walk_files(tmp_path / "dest4")
    res = shard_copy(zarrfs_bin, unsharded, tmp_path / "dest3", shape="1,1,1,1,1")
    assert res.returncode != 0 and "no array to pack" in res.stderr, res.stderr


def test_packing_from_s3_to_s3(zarrfs_bin, remote, unsharded, tmp_path):
    prefix = remote.seed("s3", unsharded, "pack-src")
    dest = f"{remote.run}/pack-dest"
    res = shard_copy(zarrfs_bin, SR.url("s3", prefix), SR.url("s3", dest), env=remote.env("s3"))
    assert res.returncode == 0, res.stderr
    assert shard_copy(zarrfs_bin, unsharded, tmp_path / "local").returncode == 0
    assert contents(download_tree("s3", dest, tmp_path / "got")) == contents(tmp_path / "local")


def test_arrays_the_destination_holds_sharded_are_packed_as_they_are_there(zarrfs_bin, unsharded, tmp_path):
    dest = tmp_path / "dest"
    assert shard_copy(zarrfs_bin, unsharded, dest).returncode == 0
    want = contents(dest)
    for rel in want:  # keep the documents: an empty sharded store, as zarr-python creates one
        if not rel.endswith("zarr.json"):
            (dest / rel).unlink()
    # No SHAPE: the shapes DEST holds; another SHAPE: DEST's shapes still win for its arrays.
    res = shard_copy(zarrfs_bin, unsharded, dest, shape="")
    assert res.returncode == 0, res.stderr
    assert contents(dest) == want
    res = shard_copy(zarrfs_bin, unsharded, dest, "--json", shape="40,40")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["files_copied"] == 0 and contents(dest) == want
    # A DEST array sharded with other inner chunks cannot take these chunks.
    other = tmp_path / "other"
    group = zarr.open_group(str(other), mode="w")
    group.create_array("unsharded_2d", shape=(25, 30), chunks=(5, 5), shards=(10, 10), dtype="f8")
    res = shard_copy(zarrfs_bin, unsharded, other)
    assert res.returncode != 0
    assert "unsharded_2d/zarr.json: the destination holds this array" in res.stderr, res.stderr
    assert "chunk_grid" in res.stderr, res.stderr

"""Checks of the test machinery itself (no zarrfs binary needed): the fixtures hold what the
manifest says, both clients read them back as written, and the independent shard reader
(shardindex.py) reassembles every array exactly, so it can serve as the oracle for the view."""
import json

import numpy as np
import pytest

import shardindex as si
from conftest import bad_entries, manifest_entries
from helpers import READERS, assert_same_array


@pytest.mark.parametrize("path", manifest_entries())
@pytest.mark.parametrize("client", sorted(READERS))
def test_clients_read_fixture_as_written(tree, path, client):
    """Each client reads the stored (sharded) array equal to the data that was written."""
    entry = tree.array(path)
    got = READERS[client](tree.root / path)
    assert_same_array(got, tree.expected(entry), f"{client} on stored {path}")


@pytest.mark.parametrize("path", manifest_entries())
def test_oracle_reassembles_array(tree, path):
    """Cutting inner chunks out of the shards with shardindex and decoding them gives the
    written data: the oracle's idea of the inner chunks is right."""
    entry = tree.array(path)
    layout = si.load_layout(tree.root / path)
    assert layout.sharded == (entry["kind"] == "sharded")
    assert len(layout.levels) == entry["nesting"]
    got = si.assemble(layout, si.inner_chunks(layout))
    assert_same_array(got, tree.expected(entry), f"oracle on {path}")


def test_fixture_set_covers_the_brief(tree):
    """The default set has every feature the tests rely on; a fixture edit that drops one
    fails here rather than silently shrinking the coverage."""
    layouts = {a["path"]: si.load_layout(tree.root / a["path"]) for a in tree.arrays()}
    sharded = [l for l in layouts.values() if l.sharded]
    levels = [lv for l in sharded for lv in l.levels]
    assert {lv.location for lv in levels} == {"start", "end"}
    assert {lv.crc for lv in levels} == {True, False}
    assert {lv.endian for lv in levels} == {"little", "big"}
    assert any(len(l.levels) > 1 for l in sharded), "nested sharding"
    assert {len(l.shape) for l in sharded} >= {0, 1, 2, 3, 4}
    assert {str(l.dtype) for l in sharded} >= {"uint8", "int16", "float32", "float64", "bool",
                                                "complex64", "complex128"}
    names = {c["name"] for l in sharded for c in l.inner_codecs}
    assert names >= {"bytes", "gzip", "zstd", "blosc"}
    keys = {(l.cke["name"], (l.cke.get("configuration") or {}).get("separator")) for l in sharded}
    assert {("default", "."), ("v2", "."), ("v2", "/")} <= keys
    assert ("default", "/") in keys or ("default", None) in keys
    assert any(not si.stored_shards(l) for l in sharded), "an array with no shard"
    assert any(any(s % c for s, c in zip(l.shape, l.chunk_shape)) for l in sharded), "edge shards"
    writers = {a["writer"] for a in tree.arrays("sharded")}
    assert writers == {"zarr-python", "tensorstore"}
    assert tree.arrays("unsharded")
    for rel in tree.manifest["other_files"]:
        assert (tree.root / rel).is_file()


def test_fixtures_have_missing_inner_chunks(tree):
    """Some stored shards have empty index entries inside the grid (partly-empty indexes), and
    some shards inside the grid are not stored at all."""
    partly_empty = whole_missing = 0
    for a in tree.arrays("sharded"):
        layout = si.load_layout(tree.root / a["path"])
        shards = si.stored_shards(layout)
        whole_missing += int(np.prod(layout.shard_grid)) - len(shards)
        per = [s // i for s, i in zip(layout.chunk_shape, layout.inner_shape)]
        present = si.inner_chunks(layout)
        for coords in shards:
            inside = [c for c in np.ndindex(*per)
                      if all(s * p + x < g for s, p, x, g in
                             zip(coords, per, c, layout.inner_grid))]
            got = [c for c in inside if tuple(s * p + x for s, p, x in zip(coords, per, c)) in present]
            partly_empty += 0 < len(got) < len(inside)
    assert partly_empty >= 5 and whole_missing >= 3


def test_view_metadata_rewrite_only_touches_grid_and_codecs(tree):
    """shardindex.view_metadata changes exactly chunk_grid and codecs of sharded arrays."""
    for a in tree.arrays("sharded"):
        stored = json.loads((tree.root / a["path"] / "zarr.json").read_text())
        view = si.view_metadata(stored)
        assert {k for k in stored if stored[k] != view[k]} <= {"chunk_grid", "codecs"}
        assert view["chunk_grid"]["configuration"]["chunk_shape"] == a["inner_chunk_shape"]
        assert "sharding_indexed" not in json.dumps(view["codecs"])


@pytest.mark.parametrize("path", bad_entries("eio"))
def test_oracle_detects_damage(bad_tree, path):
    """The damaged shards of bad_fixtures.py really are damaged (the reader refuses them), and
    the healthy shards of the same arrays are intact."""
    entry = bad_tree.array(path)
    layout = si.load_layout(bad_tree.root / path)
    damaged = bad_tree.root / entry["shard_key"]
    with pytest.raises(si.ShardError):
        si.split_shard(damaged.read_bytes(), layout.chunk_shape, layout.levels)
    for coords, shard in si.stored_shards(layout).items():
        if shard != damaged:
            si.split_shard(shard.read_bytes(), layout.chunk_shape, layout.levels)

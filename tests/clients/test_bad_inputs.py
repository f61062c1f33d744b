"""Assertion 7: damaged inputs next to healthy ones. Reading an affected chunk file fails with
EIO (never silently shows the fill value or wrong bytes); bad metadata shows that node raw; the
healthy array in the same mount still reads fine; the daemon log names the key and the reason;
the daemon is still alive afterwards."""
import errno
import json
import os
import re

import pytest

import shardindex as si
from conftest import bad_entries
from helpers import (assert_same_array, load_json, pread_in_child, read_file_errno,
                     read_zarr_python, walk_files)


@pytest.fixture
def bad_view(mounter, bad_tree):
    return mounter(bad_tree.root)


def source_chunk(bad_tree, path: str, key: str) -> bytes:
    """Bytes of an inner chunk from an intact shard (or the intact part of a damaged one)."""
    layout = si.load_layout(bad_tree.root / path)
    coords = (int(key.split("/")[-1]),)
    shard_coords = tuple(c // (s // i) for c, s, i in zip(coords, layout.chunk_shape, layout.inner_shape))
    raw = (bad_tree.root / path / si.chunk_key(shard_coords, layout.cke)).read_bytes()
    level = layout.levels[0]
    n = layout.chunk_shape[0] // level.chunk_shape[0]
    offset, nbytes = si.read_index(raw, n, level)[coords[0] % n]
    return raw[offset:offset + nbytes]


def assert_logged(mount, names: list[str], reason: str):
    """Some log line names one of `names` and matches the reason pattern."""
    lines = mount.log_text().splitlines()
    hits = [l for l in lines if any(n in l for n in names) and re.search(reason, l)]
    assert hits, (f"no log line naming {names} with reason /{reason}/; log tail:\n"
                  + "\n".join(lines[-20:]))


@pytest.mark.parametrize("path", bad_entries("eio"))
def test_damaged_chunk_reads_fail_with_eio(bad_view, bad_tree, path):
    """Affected keys: EIO. Keys in the same shard: EIO or their true bytes. Keys in intact
    shards: their true bytes. Then the log line, and the daemon is alive."""
    entry = bad_tree.array(path)
    for key in entry["affected_keys"]:
        probe = pread_in_child(bad_view.path(path) / key, 1 << 20, 0)
        assert probe.get("errno") == errno.EIO, f"{path}/{key}: expected EIO, got {probe}"
    for key in entry["sibling_keys"]:
        data, err = read_file_errno(bad_view.path(path) / key)
        assert err == errno.EIO or data == source_chunk(bad_tree, path, key), f"{path}/{key}"
    for key in entry.get("healthy_keys", []):
        assert (bad_view.path(path) / key).read_bytes() == source_chunk(bad_tree, path, key)
    names = [entry["shard_key"]] + [f"{path}/{k}" for k in entry["affected_keys"]]
    assert_logged(bad_view, names, entry["reason"])
    assert bad_view.alive()


@pytest.mark.parametrize("path", bad_entries("eio"))
def test_client_read_of_damaged_array_fails(bad_view, bad_tree, path):
    """zarr-python reading the whole damaged array through the view raises instead of
    returning the fill value for the damaged chunks."""
    try:
        got = read_zarr_python(bad_view.path(path))
    except Exception:
        pass
    else:
        same = (got == bad_tree.expected(bad_tree.array(path))).all()
        pytest.fail(f"zarr-python read the damaged array without error (equal to the written "
                    f"data: {same})")
    assert bad_view.alive()


@pytest.mark.parametrize("path", bad_entries("raw"))
def test_bad_metadata_node_is_shown_raw(bad_view, bad_tree, path):
    """The node's files are passed through as stored (zarr.json and shards byte for byte)."""
    entry = bad_tree.array(path)
    source = walk_files(bad_tree.root / path)
    shown = walk_files(bad_view.path(path))
    assert set(shown) == set(source)
    for rel, p in source.items():
        assert (bad_view.path(path) / rel).read_bytes() == p.read_bytes(), rel
    assert_logged(bad_view, [path], entry["reason"])
    assert bad_view.alive()


def test_unknown_inner_codec_is_raw_or_exact(bad_view, bad_tree):
    """An unknown inner codec need not be decoded to relay bytes: the node is either shown raw
    or correctly unsharded, never anything in between."""
    path = "unknown_inner_codec"
    stored = (bad_tree.root / path / "zarr.json").read_bytes()
    shown = (bad_view.path(path) / "zarr.json").read_bytes()
    files = {k: p.read_bytes() for k, p in walk_files(bad_view.path(path)).items()}
    if shown == stored:
        assert files == {k: p.read_bytes() for k, p in walk_files(bad_tree.root / path).items()}
    else:
        assert json.loads(shown) == si.view_metadata(json.loads(stored))
        expected = si.expected_chunk_files(si.load_layout(bad_tree.root / path))
        assert files == {**expected, "zarr.json": shown}


def test_absurd_shape_does_not_hang_or_crash(bad_view, bad_tree):
    """shape [2**40, 2**40]: listing the array and reading its zarr.json return promptly; if
    the first inner chunk is shown, its bytes are right; the daemon survives."""
    root = bad_view.path("absurd_shape")
    probe = pread_in_child(root / "zarr.json", 1 << 20, 0, timeout=60)
    assert not probe.get("timeout"), "reading absurd_shape/zarr.json hung"
    probe = pread_in_child(root / "c" / "0" / "0", 1 << 20, 0, timeout=60)
    assert not probe.get("timeout"), "reading absurd_shape/c/0/0 hung"
    if "ok" in probe:
        layout = si.load_layout(bad_tree.root / "healthy")  # same codecs, intact shard
        shard = (bad_tree.root / "absurd_shape/c/0/0").read_bytes()
        inner = si.split_shard(shard, layout.chunk_shape, layout.levels)
        stored_json = (bad_tree.root / "absurd_shape/zarr.json").read_bytes()
        raw = (root / "zarr.json").read_bytes() == stored_json
        assert probe["ok"] == (shard if raw else inner[(0, 0)])
    assert bad_view.alive()
    assert sorted(os.listdir(bad_view.path())) == sorted(os.listdir(bad_tree.root))


def test_healthy_array_reads_after_damage(bad_view, bad_tree):
    """After every damaged node has been read, the healthy array still reads exactly with
    zarr-python through the same mount, and the daemon is alive."""
    for entry in bad_tree.manifest["arrays"]:
        if entry["path"] == "absurd_shape":
            continue
        for p in walk_files(bad_view.path(entry["path"])).values():
            read_file_errno(p)
        for key in entry["affected_keys"]:
            pread_in_child(bad_view.path(entry["path"]) / key, 4096, 0)
        try:
            read_zarr_python(bad_view.path(entry["path"]))
        except Exception:
            pass
    got = read_zarr_python(bad_view.path("healthy"))
    assert_same_array(got, bad_tree.expected(bad_tree.array("healthy")), "healthy via view")
    meta = load_json(bad_view.path("healthy/zarr.json"))
    assert meta == si.view_metadata(load_json(bad_tree.root / "healthy/zarr.json"))
    assert bad_view.alive()

"""Assertion 4: `cp -r` of the mounted view gives an ordinary unsharded hierarchy that
zarr-python and tensorstore open with the data originally written."""
import json
import subprocess

import pytest

import shardindex as si
from conftest import manifest_entries
from helpers import READERS, assert_same_array, load_json, walk_files
from mounting import Mount


@pytest.fixture(scope="module")
def copy_of_view(tree, zarrfs_bin, tmp_path_factory):
    """The whole default view copied with `cp -r` (one mount for the module)."""
    work = tmp_path_factory.mktemp("copy")
    mount = Mount(zarrfs_bin, str(tree.root), work / "mnt", [], work / "zarrfs.log")
    mount.start()
    try:
        res = subprocess.run(["cp", "-r", str(mount.path()), str(work / "copy")],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"cp -r failed: {res.stderr}"
    finally:
        mount.stop()
    return work / "copy"


@pytest.mark.parametrize("path", manifest_entries())
@pytest.mark.parametrize("client", sorted(READERS))
def test_copy_reads_as_written(copy_of_view, tree, client, path):
    """The copied array reads equal to the written data."""
    got = READERS[client](copy_of_view / path)
    assert_same_array(got, tree.expected(tree.array(path)), f"{client} on copy of {path}")


@pytest.mark.parametrize("path", manifest_entries("sharded"))
def test_copy_is_unsharded(copy_of_view, tree, path):
    """The copy's metadata has no sharding codec, and its chunk files are exactly the inner
    chunks (bytes equal to the oracle's)."""
    meta = load_json(copy_of_view / path / "zarr.json")
    assert "sharding_indexed" not in json.dumps(meta["codecs"])
    layout = si.load_layout(tree.root / path)
    expected = si.expected_chunk_files(layout)
    copied = {k: p.read_bytes() for k, p in walk_files(copy_of_view / path).items()
              if k != "zarr.json"}
    assert copied == expected

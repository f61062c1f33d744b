"""What clients do with names beyond reading and writing files, through writable mounts of a
local directory and of S3 (moto, the journal default): the calls zarr-python's `LocalStore`,
Python's `tempfile` and `shutil`, and xarray make, judged by what they read back and what the
store holds.

- `link(2)` creates a name exclusively: zarr-python's `set_if_not_exists` (implicit groups,
  `mode="w-"`) is `link(tmp, key)` + `unlink(tmp)`; a key that exists, also one made through
  another mount of the same store after this one looked, is EEXIST and keeps the first bytes.
  Packed into the shard when the key is an inner chunk.
- A removed directory (a group, with `shutil.rmtree`) is gone at once and can be made again.
- An open file whose name is unlinked, or replaced by a rename, stays readable, writable and
  `fstat`-able (`st_nlink` 0) until closed; the name is another file's at once.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile

import numpy as np
import pytest

import fixtures as F
from remote import remote, remote_view  # noqa: F401
from writing import build, mount_writable

SOURCES = ["local", "s3"]
GROUP = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode()


@pytest.fixture
def two_mounts(request, mounter, remote_view, remote, tmp_path):  # noqa: F811
    """two_mounts(source, seed_dir=None) -> two writable mounts of one store (empty, or holding
    seed_dir's files)."""

    def make(source: str, seed_dir=None):
        if source == "local":
            root = seed_dir or tmp_path / "src"
            root.mkdir(exist_ok=True)
            return mount_writable(mounter, root), mount_writable(mounter, root)
        seed = seed_dir or tmp_path / "empty"
        seed.mkdir(exist_ok=True)
        (seed / ".keep").write_bytes(b"")  # an empty prefix seeds nothing to mount
        prefix = remote.seed(source, seed, f"names-{request.node.name}")
        return remote_view(source, prefix=prefix), remote_view(source, prefix=prefix)

    return make


def link_exclusively(path, data: bytes) -> None:
    """What zarr-python's LocalStore does for a key that must not exist yet."""
    tmp = path.with_suffix(f".{os.urandom(8).hex()}.partial")
    tmp.write_bytes(data)
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink()


@pytest.mark.parametrize("source", SOURCES)
def test_link_creates_a_name_exclusively(two_mounts, source):
    a, b = two_mounts(source)
    # The other mount looks first, and is told the name is free.
    other = b.path("x/y/zarr.json")
    other.parent.mkdir(parents=True)
    assert not other.exists()
    doc = a.path("x/y/zarr.json")
    doc.parent.mkdir(parents=True, exist_ok=True)
    link_exclusively(doc, GROUP)
    assert doc.read_bytes() == GROUP
    st = os.stat(doc)
    assert (st.st_size, st.st_nlink) == (len(GROUP), 1), "a copy, one link"
    assert sorted(os.listdir(doc.parent)) == ["zarr.json"], "the temporary name is gone"
    with pytest.raises(FileExistsError):
        link_exclusively(doc, b"second")
    # Through the other mount, which still believes the name free: the store refuses it.
    with pytest.raises(FileExistsError):
        link_exclusively(other, b"from the other mount")
    assert other.read_bytes() == GROUP and doc.read_bytes() == GROUP
    # link(2) of a directory is EPERM, as on any filesystem.
    with pytest.raises(OSError) as e:
        os.link(a.path("x"), a.path("x-link"))
    assert e.value.errno == errno.EPERM


@pytest.mark.parametrize("source", SOURCES)
def test_zarr_python_creates_nested_nodes_and_refuses_existing_ones(two_mounts, source):
    import zarr
    from zarr.errors import ContainsArrayError, ContainsGroupError

    a, _ = two_mounts(source)
    root = zarr.open_group(str(a.path("h")), mode="w")
    arr = root.create_array("x/y/arr", shape=(4,), chunks=(2,), dtype="i4")
    arr[:] = np.arange(4, dtype="i4")
    sharded = root.create_array("s/t/arr", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="u2")
    sharded[:] = np.arange(64, dtype="u2").reshape(8, 8)
    with pytest.raises((ContainsArrayError, ContainsGroupError, FileExistsError)):
        zarr.create_array(str(a.path("h/x/y/arr")), shape=(2,), dtype="i1", overwrite=False)
    with pytest.raises((ContainsArrayError, ContainsGroupError, FileExistsError)):
        zarr.open_group(str(a.path("h/x")), mode="w-")
    again = zarr.open_group(str(a.path("h")), mode="r")
    np.testing.assert_array_equal(again["x/y/arr"][:], np.arange(4, dtype="i4"))
    np.testing.assert_array_equal(again["s/t/arr"][:], np.arange(64, dtype="u2").reshape(8, 8))
    assert sorted(again.group_keys()) == ["s", "x"]


def test_xarray_writes_a_nested_group(mounter, tmp_path):
    import xarray as xr

    (tmp_path / "src").mkdir()
    view = mount_writable(mounter, tmp_path / "src")
    ds = xr.Dataset({"t": (("x",), np.arange(6.0))})
    ds.to_zarr(view.path("d.zarr"), group="a/b", zarr_format=3)
    back = xr.open_zarr(view.path("d.zarr"), group="a/b")
    np.testing.assert_array_equal(back["t"].values, np.arange(6.0))


@pytest.mark.parametrize("source", SOURCES)
def test_a_removed_group_is_gone_at_once(two_mounts, source):
    import zarr

    a, _ = two_mounts(source)
    top = a.path("top")
    g = zarr.open_group(str(top), mode="w")
    g.create_group("inner").attrs["n"] = 1
    shutil.rmtree(top / "inner")
    assert "inner" not in os.listdir(top)
    (top / "inner").mkdir()  # EEXIST for a second, before
    zarr.open_group(str(top / "inner"), mode="w").attrs["n"] = 2
    assert zarr.open_group(str(top / "inner"), mode="r").attrs["n"] == 2
    # LocalStore.clear(): the root removed and made again, then used.
    store = zarr.storage.LocalStore(str(top))
    zarr.core.sync.sync(store.clear())
    assert os.listdir(top) == []
    zarr.open_group(store=store, mode="w").create_array("a", shape=(3,), dtype="u1")[:] = 7
    np.testing.assert_array_equal(zarr.open_array(str(top / "a"), mode="r")[:], [7, 7, 7])
    # An empty directory made through the mount stays (object stores keep no directories).
    (top / "empty").mkdir()
    with pytest.raises(FileExistsError):
        (top / "empty").mkdir()
    assert "empty" in os.listdir(top)
    os.rmdir(top / "empty")
    assert "empty" not in os.listdir(top)


@pytest.mark.parametrize("source", SOURCES)
def test_open_files_outlive_their_names(two_mounts, source, tmp_path):
    seed = tmp_path / "seed"
    spec = F.ArraySpec("arr", F.ZARR_PY, (8, 8), "uint16", (4, 4), [F.c_bytes()],
                       [F.Level((2, 2))], holes=0.0)
    build(seed, [spec])
    a, _ = two_mounts(source, seed)
    # A temporary file (unlinked at once, as tempfile.TemporaryFile makes it).
    with tempfile.TemporaryFile(dir=a.path()) as f:
        f.write(b"scratch space")
        f.flush()
        st = os.fstat(f.fileno())
        assert (st.st_size, st.st_nlink) == (13, 0)
        f.seek(8)
        assert f.read() == b"space"
        f.truncate(7)
        assert os.fstat(f.fileno()).st_size == 7
    # A chunk file read by a handle opened before its unlink; the name then free for another.
    chunk = a.path("arr/c/1/2")
    want = chunk.read_bytes()
    with open(chunk, "rb") as reader:
        os.unlink(chunk)
        assert not chunk.exists()
        assert os.fstat(reader.fileno()).st_size == len(want)
        assert reader.read() == want
        chunk.write_bytes(b"new chunk")
        assert os.fstat(reader.fileno()).st_size == len(want)
    assert chunk.read_bytes() == b"new chunk"
    # A file replaced by a rename while open is still the old file through its handle.
    old, new = a.path("notes.txt"), a.path("notes.new")
    old.write_bytes(b"old text")
    new.write_bytes(b"new text!")
    with open(old, "rb") as reader:
        os.rename(new, old)
        assert reader.read() == b"old text"
        assert os.fstat(reader.fileno()).st_size == 8
    assert old.read_bytes() == b"new text!"

"""Metadata and namespace writes through the view: zarr-python resize and attribute updates of
a sharded array are translated into the stored zarr.json (sharding codec kept); a raw write of
the view's zarr.json changing attributes, dimension names and fill value is translated too,
one changing the chunk shape or codecs fails with EINVAL and changes nothing; new groups and
unsharded arrays pass through to the source byte for byte; unlinking chunk files empties their
index entries and the last one erases the shard; mkdir in a chunk tree works; renames move
chunks within an array and fail with EXDEV out of it; the request counters show one shard
write per chunk file written."""
import errno
import json
import os

import numpy as np
import pytest

import fixtures as F
import shardindex as si
from helpers import READERS, assert_same_array, walk_files
from writing import (build, check_sharded_store, delta, mount_writable, stats,
                     stored_meta, temp_files)

ZP = F.ZARR_PY
ARRAY = "g/arr"
OTHER = "g/other_v2dot"
ATTEMPTS = 20  # refused metadata writes per test, each followed at once by a read


def specs():
    return [
        F.ArraySpec(ARRAY, ZP, (20, 22), "int16", (8, 8), [F.c_bytes(), F.c_zstd()],
                    [F.Level((4, 4))], holes=0.0, attributes={"title": "t", "n": 1},
                    dimension_names=["y", "x"]),
        F.ArraySpec(OTHER, ZP, (10, 10), "uint8", (10, 10), [F.c_bytes()],
                    [F.Level((5, 5), "start", False)], cke=F.cke_v2("."), holes=0.0),
    ]


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "src"
    F.write_group(root, "", {})
    F.write_group(root, "g", {"kind": "group"})
    data = build(root, specs())
    return root, data


def shard_key(coords):
    return si.chunk_key(coords, F.cke_default("/"))


def write_file(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def errno_of(call, *args):
    try:
        call(*args)
    except OSError as e:
        return e.errno
    return None


# ---------------------------------------------------------------------------------------------
# resize and attributes


def test_zarr_python_resize_and_attributes(mounter, source):
    root, data = source
    before = stored_meta(root / ARRAY)
    view = mount_writable(mounter, root)
    import zarr
    from zarr.storage import LocalStore

    arr = zarr.open_array(store=LocalStore(str(view.path())), path=ARRAY, mode="r+")
    arr.attrs.update({"title": "changed", "added": [1, 2]})
    arr.resize((12, 30))  # shrink rows (chunks of rows >= 12 deleted), grow columns
    view_meta = json.loads(view.path(ARRAY).joinpath("zarr.json").read_bytes())
    view.stop()

    after = stored_meta(root / ARRAY)
    assert after["shape"] == [12, 30]
    assert after["attributes"] == {"title": "changed", "n": 1, "added": [1, 2]}
    assert after["codecs"] == before["codecs"], "the sharding codec was not kept"
    assert after["chunk_grid"] == before["chunk_grid"], "the shard shape changed"
    assert after["dimension_names"] == ["y", "x"]
    assert view_meta["shape"] == [12, 30]
    assert view_meta["chunk_grid"]["configuration"]["chunk_shape"] == [4, 4]
    expected = np.zeros((12, 30), dtype="int16")
    expected[:, :22] = data[ARRAY][:12]
    check_sharded_store(root / ARRAY, expected, before, "after resize")
    # the shards of rows 16..19 (shard row 2) are gone, not just emptied
    assert not (root / ARRAY / shard_key((2, 0))).exists()
    assert temp_files(root) == []


@pytest.mark.parametrize("how", ["truncate", "rename"])
def test_view_zarr_json_write_is_translated(mounter, source, how):
    """The view's zarr.json rewritten with new attributes, dimension names and fill value,
    with open(O_TRUNC)/write/close or written to a temporary name and renamed onto it."""
    root, data = source
    before = stored_meta(root / ARRAY)
    view = mount_writable(mounter, root)
    meta_path = view.path(ARRAY).joinpath("zarr.json")
    meta = json.loads(meta_path.read_bytes())
    meta["attributes"] = {"new": "attrs"}
    meta["dimension_names"] = ["row", "col"]
    meta["fill_value"] = 7
    text = json.dumps(meta, indent=2).encode()
    if how == "truncate":
        write_file(meta_path, text)
    else:
        tmp = meta_path.with_name(".zarr.json.tmp1")
        write_file(tmp, text)
        os.rename(tmp, meta_path)
    shown = json.loads(meta_path.read_bytes())
    view.stop()

    after = stored_meta(root / ARRAY)
    assert after["attributes"] == {"new": "attrs"}
    assert after["dimension_names"] == ["row", "col"]
    assert after["fill_value"] == 7
    for member in ("codecs", "chunk_grid", "shape", "data_type", "chunk_key_encoding"):
        assert after[member] == before[member], f"stored {member} changed"
    assert shown == meta, "the view does not show the zarr.json just written"
    for client, read in sorted(READERS.items()):
        assert_same_array(read(root / ARRAY), data[ARRAY], f"{client} after metadata write")
    assert temp_files(root) == []


def change_chunk_shape(meta):
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [2, 2]


def change_codecs(meta):
    meta["codecs"] = [F.c_bytes(), F.c_gzip()]


@pytest.mark.parametrize("change", [change_chunk_shape, change_codecs])
@pytest.mark.parametrize("how", ["truncate", "rename"])
def test_unexpressible_metadata_change_is_einval(mounter, source, change, how):
    root, _ = source
    stored_before = (root / ARRAY / "zarr.json").read_bytes()
    view = mount_writable(mounter, root)
    meta_path = view.path(ARRAY).joinpath("zarr.json")
    shown_before = meta_path.read_bytes()
    meta = json.loads(shown_before)
    change(meta)
    text = json.dumps(meta).encode()
    seen = []
    for attempt in range(ATTEMPTS):  # each refused write is followed at once by a reader
        if how == "truncate":
            got = errno_of(write_file, meta_path, text)
        else:
            tmp = meta_path.with_name(f".zarr.json.tmp{attempt}")
            write_file(tmp, text)
            got = errno_of(os.rename, tmp, meta_path)
            if tmp.exists():
                os.unlink(tmp)
        assert got == errno.EINVAL, f"expected EINVAL, got {got and errno.errorcode.get(got)}"
        try:
            shown = meta_path.read_bytes()
            seen.append("unchanged" if shown == shown_before else f"changed: {shown[:80]!r}")
        except OSError as e:
            seen.append(f"read after the refused write failed: {e}")
    assert seen == ["unchanged"] * ATTEMPTS, f"the view's zarr.json after refused writes: {seen}"
    view.stop()
    assert (root / ARRAY / "zarr.json").read_bytes() == stored_before, "stored zarr.json changed"
    assert temp_files(root) == []


# ---------------------------------------------------------------------------------------------
# groups and unsharded arrays pass through


def create_with_zarr_python(mnt, values):
    import zarr
    from zarr.storage import LocalStore

    group = zarr.create_group(store=LocalStore(str(mnt)), path="g/newgroup",
                              attributes={"made": "in view"})
    arr = group.create_array("plain", shape=(10, 12), chunks=(5, 5), dtype="int32",
                             compressors=None)
    arr[:] = values


def create_with_tensorstore(mnt, values):
    import tensorstore as ts

    (mnt / "g/newgroup").mkdir()
    (mnt / "g/newgroup/zarr.json").write_text(json.dumps(
        {"zarr_format": 3, "node_type": "group", "attributes": {"made": "in view"}}))
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(mnt / "g/newgroup/plain") + "/"},
                     "metadata": {"shape": [10, 12], "data_type": "int32",
                                  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 5]}}}},
                    create=True).result()
    store.write(values).result()


@pytest.mark.parametrize("client", ["zarr-python", "tensorstore"])
def test_client_creates_group_and_unsharded_array(mounter, source, client):
    """A new group and a new unsharded array written by a client through the view land in
    the source byte for byte."""
    root, _ = source
    view = mount_writable(mounter, root)
    values = np.arange(120, dtype="int32").reshape(10, 12)
    {"zarr-python": create_with_zarr_python, "tensorstore": create_with_tensorstore}[client](
        view.path(), values)
    shown = {k: p.read_bytes() for k, p in walk_files(view.path("g/newgroup")).items()}
    view.stop()
    stored = {k: p.read_bytes() for k, p in walk_files(root / "g/newgroup").items()}
    assert stored == shown
    assert "zarr.json" in stored and "plain/c/1/2" in stored
    for name, read in sorted(READERS.items()):
        assert_same_array(read(root / "g/newgroup/plain"), values, f"{name} on the new array")
    assert json.loads(stored["zarr.json"])["attributes"] == {"made": "in view"}
    assert temp_files(root) == []


def test_plain_io_creates_group_and_unsharded_array(mounter, source, tmp_path):
    """The same with mkdir and open/write/close only: a reference hierarchy written by
    zarr-python elsewhere is copied file by file into the view."""
    root, _ = source
    import zarr
    from zarr.storage import LocalStore

    ref = tmp_path / "ref"
    values = np.arange(120, dtype="int32").reshape(10, 12)
    group = zarr.create_group(store=LocalStore(str(ref)), path="newgroup", attributes={"a": 1})
    group.create_array("plain", shape=(10, 12), chunks=(5, 5), dtype="int32")[:] = values
    files = {k: p.read_bytes() for k, p in walk_files(ref / "newgroup").items()}

    view = mount_writable(mounter, root)
    for rel, content in sorted(files.items()):
        target = view.path("g/newgroup") / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        write_file(target, content)
    shown = {k: p.read_bytes() for k, p in walk_files(view.path("g/newgroup")).items()}
    view.stop()
    stored = {k: p.read_bytes() for k, p in walk_files(root / "g/newgroup").items()}
    assert shown == files and stored == files
    assert_same_array(READERS["tensorstore"](root / "g/newgroup/plain"), values, "new array")


# ---------------------------------------------------------------------------------------------
# unlink, mkdir, rename


def test_unlink_chunk_files_erases_the_emptied_shard(mounter, source):
    root, data = source
    before = stored_meta(root / ARRAY)
    view = mount_writable(mounter, root)
    arr_dir = view.path(ARRAY)
    # shard (0, 1) holds inner chunks (0..1, 2..3)
    in_shard = [f"c/{i}/{j}" for i in (0, 1) for j in (2, 3)]
    original = {k: (arr_dir / k).read_bytes() for k in in_shard}

    os.unlink(arr_dir / in_shard[0])
    assert not (arr_dir / in_shard[0]).exists()
    assert in_shard[0].split("/")[-1] not in os.listdir(arr_dir / "c/0")
    stored = si.expected_chunk_files(si.load_layout(root / ARRAY))
    assert in_shard[0] not in stored, "the unlinked chunk is still in its shard"
    assert all(stored[k] == original[k] for k in in_shard[1:]), "the other chunks changed"
    assert (root / ARRAY / shard_key((0, 1))).is_file()

    s0 = stats(view)
    for k in in_shard[1:]:
        os.unlink(arr_dir / k)
    d = delta(s0, stats(view))
    assert not (root / ARRAY / shard_key((0, 1))).exists(), "the emptied shard still exists"
    assert d["erase"] == 1, f"expected one erase for the emptied shard: {d}"
    assert d["set"] == 2, f"expected one shard write per remaining unlink: {d}"
    assert sorted(os.listdir(arr_dir / "c/0")) == ["0", "1", "4", "5"]
    view.stop()
    expected = data[ARRAY].copy()
    expected[0:8, 8:16] = 0
    check_sharded_store(root / ARRAY, expected, before, "after unlinks")


def test_mkdir_in_chunk_tree_then_write(mounter, tmp_path):
    root = tmp_path / "src"
    spec = F.ArraySpec(ARRAY, ZP, (20, 22), "int16", (8, 8), [F.c_bytes()], [F.Level((4, 4))],
                       write=False)
    build(root, [spec])
    view = mount_writable(mounter, root)
    os.mkdir(view.path(ARRAY + "/c"))
    os.mkdir(view.path(ARRAY + "/c/3"))
    assert view.path(ARRAY + "/c/3").is_dir()
    assert os.listdir(view.path(ARRAY + "/c/3")) == []
    assert "3" in os.listdir(view.path(ARRAY + "/c"))
    chunk = np.arange(16, dtype="<i2").reshape(4, 4) + 1
    write_file(view.path(ARRAY + "/c/3/4"), chunk.tobytes())
    assert view.path(ARRAY + "/c/3/4").read_bytes() == chunk.tobytes()
    view.stop()
    expected = np.zeros((20, 22), dtype="int16")
    expected[12:16, 16:20] = chunk
    check_sharded_store(root / ARRAY, expected, stored_meta(root / ARRAY), "after mkdir+write")
    assert [p.name for p in (root / ARRAY / "c").rglob("*") if p.is_file()] == ["2"]


def test_mkdir_outside_arrays_passes_through(mounter, source):
    """A directory made outside sharded arrays can be opened and listed at once (tensorstore
    opens a new directory to fsync it), and exists in the source."""
    root, _ = source
    view = mount_writable(mounter, root)
    os.mkdir(view.path("g/newdir"))
    problems = []
    try:
        if os.listdir(view.path("g/newdir")) != []:
            problems.append("the new directory is not empty")
    except OSError as e:
        problems.append(f"listing the new directory failed: {e}")
    if "newdir" not in os.listdir(view.path("g")):
        problems.append("the new directory is not listed in its parent")
    write_file(view.path("g/newdir/file.bin"), b"abc")
    view.stop()
    assert problems == []
    assert (root / "g/newdir/file.bin").read_bytes() == b"abc"


def test_renames(mounter, source):
    root, data = source
    before = stored_meta(root / ARRAY)
    other_before = stored_meta(root / OTHER)
    view = mount_writable(mounter, root)
    arr_dir = view.path(ARRAY)
    # each rename out of the array starts from its own chunk, so one that wrongly succeeds
    # does not hide the others
    outside = {"c/0/0": view.path("moved"), "c/0/1": view.path("g/moved"),
               "c/0/2": view.path(OTHER) / "0.1", "c/0/3": view.path(OTHER) / "c.0.0",
               "c/0/4": view.path("g/zarr.json")}
    chunks = {k: (arr_dir / k).read_bytes() for k in outside}
    got = {f"{k} -> {t.relative_to(view.path())}": errno_of(os.rename, arr_dir / k, t)
           for k, t in outside.items()}
    wrong = {k: errno.errorcode.get(e, "success") for k, e in got.items() if e != errno.EXDEV}
    assert wrong == {}, f"renames out of the array that did not fail with EXDEV: {wrong}"
    assert {k: (arr_dir / k).read_bytes() for k in outside} == chunks
    # within the array: onto an existing chunk key, then onto a new key in another shard
    moved = (arr_dir / "c/1/0").read_bytes()
    os.rename(arr_dir / "c/1/0", arr_dir / "c/1/1")
    assert not (arr_dir / "c/1/0").exists()
    assert (arr_dir / "c/1/1").read_bytes() == moved
    os.rename(arr_dir / "c/1/1", arr_dir / "c/4/5")
    assert not (arr_dir / "c/1/1").exists()
    assert (arr_dir / "c/4/5").read_bytes() == moved
    view.stop()
    stored = si.expected_chunk_files(si.load_layout(root / ARRAY))
    assert "c/1/0" not in stored and "c/1/1" not in stored and stored["c/4/5"] == moved
    expected = data[ARRAY].copy()
    expected[16:20, 20:22] = data[ARRAY][4:8, 0:2]
    expected[4:8, 0:8] = 0
    check_sharded_store(root / ARRAY, expected, before, "after renames")
    check_sharded_store(root / OTHER, data[OTHER], other_before, "the other array")


# ---------------------------------------------------------------------------------------------
# counters: a chunk file written is committed by close, as one shard write


@pytest.mark.parametrize("flags", ["truncate", "create"])
def test_one_shard_write_per_chunk_file(mounter, source, flags):
    root, _ = source
    view = mount_writable(mounter, root)
    key = "c/1/1"
    if flags == "create":
        os.unlink(view.path(ARRAY) / key)
    payload = np.full((4, 4), 9, dtype="<i2").tobytes()
    s0 = stats(view)
    mode = os.O_WRONLY | (os.O_TRUNC if flags == "truncate" else os.O_CREAT | os.O_EXCL)
    fd = os.open(view.path(ARRAY) / key, mode, 0o644)
    try:
        assert delta(s0, stats(view))["set"] == 0, "a shard was written before close"
        os.write(fd, payload)
    finally:
        os.close(fd)
    d = delta(s0, stats(view))
    # close() returned: the shard in the source already holds the chunk
    stored = si.expected_chunk_files(si.load_layout(root / ARRAY))
    assert stored[key] == payload
    shard = root / ARRAY / shard_key((0, 0))
    assert d["set"] == 1, f"expected exactly one shard write, counters moved by {d}"
    assert d["set_bytes"] == shard.stat().st_size
    assert d["erase"] == 0
    view.stop()

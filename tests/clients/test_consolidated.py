"""The mounted hierarchy is coherent as a whole for the clients people use by default: xarray,
dask and zarr-python open groups through their inline consolidated metadata, which the view
rewrites entry by entry like the arrays' own zarr.json; consolidated metadata written through
the view is stored with each array's sharding put back; arrays created through the mount with
sharding are stored as their client wrote them. Every write test ends by opening the sharded
store directly with default arguments and checking data, shards and that the consolidated
metadata agrees with the arrays it describes."""
import errno
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import shardindex as si
from conftest import manifest_entries, run_zarrfs
from helpers import assert_same_array, load_json
from remote import download_tree, remote, remote_view  # noqa: F401 - fixtures
from writing import check_sharded_store, mount_writable, shard_problems, temp_files

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")

# zarr-python warns that consolidated metadata is not in the v3 specification yet.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SHARDED_VARS = {"t": {"chunks": (8, 8), "shards": (32, 32)}, "q": {"chunks": (8,), "shards": (32,)}}


def dataset(ny: int = 64, y0: int = 0):
    """A dataset as scientists write it: sharded data variables, plain coordinates, attributes
    (xarray's _FillValue among them)."""
    y = np.arange(y0, y0 + ny)
    rng = np.random.default_rng(y0)
    return xr.Dataset(
        {"t": (("y", "x"), rng.normal(size=(ny, 48)).astype("f4"), {"units": "K"}),
         "q": (("y",), (y % 7).astype("i2"))},
        coords={"y": y, "x": np.arange(48) * 0.5},
        attrs={"title": "zarrfs consolidated test"})


def write_store(root: Path) -> "xr.Dataset":
    """The dataset written sharded by xarray (consolidated by default), a nested group with a
    sharded array written by zarr-python, then both groups consolidated again."""
    ds = dataset()
    ds.to_zarr(root, zarr_format=3, encoding=SHARDED_VARS)
    sub = zarr.open_group(root / "sub", mode="a")
    deep = sub.create_array("deep", shape=(20,), chunks=(4,), shards=(8,), dtype="u2")
    deep[:] = np.arange(20)
    zarr.consolidate_metadata(root / "sub")
    zarr.consolidate_metadata(root)
    return ds


@pytest.fixture(scope="module")
def xr_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("xr") / "ds.zarr"
    return root, write_store(root)


def fresh_copy(xr_store, tmp_path) -> tuple[Path, "xr.Dataset"]:
    root, ds = xr_store
    dest = tmp_path / "copy.zarr"
    shutil.copytree(root, dest)
    return dest, ds


def block(group_doc: dict) -> dict:
    return group_doc["consolidated_metadata"]["metadata"]


def normalized(doc: dict) -> dict:
    """An array document in zarr-python's own spelling (what a client compares)."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    out = ArrayV3Metadata.from_dict(json.loads(json.dumps(doc))).to_dict()
    return json.loads(json.dumps(out, default=str))


def assert_block_agrees(root: Path, group: str = "") -> int:
    """Every array entry of the stored consolidated block of `group` describes the stored array
    as it is (sharding included); returns how many entries were checked."""
    doc = load_json(root / group / "zarr.json")
    checked = 0
    for path, entry in block(doc).items():
        if entry.get("node_type") != "array":
            continue
        stored = load_json(root / group / path / "zarr.json")
        assert normalized(entry) == normalized(stored), f"consolidated entry {path} != {path}/zarr.json"
        checked += 1
    return checked


def assert_dataset(got, want, what: str) -> None:
    got, want = got.load(), want.load()
    assert sorted(got.data_vars) == sorted(want.data_vars), what
    for name in [*want.data_vars, *want.coords]:
        assert_same_array(got[name].values, want[name].values, f"{what}: {name}")
    assert got.attrs == want.attrs, what


# ---------------------------------------------------------------------------------------------
# reading through the view with default arguments


def test_xarray_dask_and_zarr_python_defaults_read_the_view(mounter, xr_store):
    root, ds = xr_store
    view = mounter(root, "--read-only")
    mnt = view.path()
    assert_dataset(xr.open_zarr(mnt), ds, "xr.open_zarr")
    assert_dataset(xr.open_dataset(mnt, engine="zarr"), ds, "xr.open_dataset(engine='zarr')")
    # The defaults went through the consolidated metadata, which shows the inner chunks.
    group = zarr.open_group(mnt)
    assert group.metadata.consolidated_metadata is not None
    assert group["t"].chunks == (8, 8) and group["t"].shards is None
    assert group["sub/deep"].chunks == (4,)
    assert_same_array(group["sub/deep"][:], np.arange(20, dtype="u2"), "sub/deep")
    import dask.array as da

    assert_same_array(da.from_zarr(str(mnt / "t")).compute(), ds.t.values, "dask from_zarr t")
    assert_same_array(da.from_zarr(str(mnt), component="q").compute(), ds.q.values, "dask q")
    # Each entry is what the view shows as that array's zarr.json; groups' sizes are exact.
    for group_dir in ["", "sub"]:
        shown = load_json(mnt / group_dir / "zarr.json")
        for path, entry in block(shown).items():
            if entry.get("node_type") == "array":
                assert entry == load_json(mnt / group_dir / path / "zarr.json"), f"{group_dir}/{path}"
        data = (mnt / group_dir / "zarr.json").read_bytes()
        assert (mnt / group_dir / "zarr.json").stat().st_size == len(data)
        assert any(e.name == "zarr.json" and e.stat().st_size == len(data)
                   for e in (mnt / group_dir).iterdir())
    assert view.alive()


def test_raw_view_shows_the_stored_group_documents(mounter, xr_store):
    root, _ = xr_store
    view = mounter(root, "--read-only", "--view", "raw")
    for group_dir in ["", "sub"]:
        assert (view.path() / group_dir / "zarr.json").read_bytes() == (root / group_dir / "zarr.json").read_bytes()


@pytest.fixture(scope="module")
def consolidated_tree(tree, tmp_path_factory):
    """The default fixture hierarchy (zarr-python and tensorstore arrays, every sharding form)
    consolidated by zarr-python."""
    root = tmp_path_factory.mktemp("consolidated") / "root"
    shutil.copytree(tree.root, root)
    zarr.consolidate_metadata(root)
    return root


def test_every_fixture_array_through_consolidated_metadata(mounter, tree, consolidated_tree):
    """Entries of every writer and sharding form (nested, start/end index, codecs around the
    sharding codec shown as stored) are rewritten exactly as the independent parser says, and
    zarr-python's default open reads every array as written."""
    view = mounter(consolidated_tree, "--read-only")
    stored, shown = block(load_json(consolidated_tree / "zarr.json")), block(load_json(view.path("zarr.json")))
    assert stored.keys() == shown.keys()
    for path, entry in stored.items():
        if entry.get("node_type") == "array":
            assert shown[path] == si.view_metadata(entry), path
            if entry == load_json(consolidated_tree / path / "zarr.json"):
                assert shown[path] == load_json(view.path(path) / "zarr.json"), path
        else:
            assert shown[path] == entry, path
    group = zarr.open_group(view.path())
    assert group.metadata.consolidated_metadata is not None
    for path in manifest_entries():
        assert_same_array(group[path][...], tree.expected(tree.array(path)), f"consolidated {path}")
    report = run_zarrfs(view.binary, "inspect", consolidated_tree).stdout
    assert "consolidated" not in report, report


def test_a_subgroup_consolidated_on_its_own_lists_without_listings(remote, mounter, xr_store,
                                                                    tmp_path):  # noqa: F811
    """No listing at all, and only a subgroup carries consolidated metadata: once the subgroup
    is reached by name, its listing shows the nodes it names."""
    import seed_remote as SR
    root, _ = xr_store
    copy = tmp_path / "ds.zarr"
    shutil.copytree(root, copy)
    doc = load_json(copy / "zarr.json")
    doc.pop("consolidated_metadata", None)
    (copy / "zarr.json").write_text(json.dumps(doc))
    remote.ensure("http")
    prefix = remote.seed("http", copy, "sub-consolidated")
    view = mounter(SR.http_plain_url(prefix, index=False), "--read-only")
    assert os.listdir(view.path()) == ["zarr.json"]
    assert "deep" in os.listdir(view.path("sub"))
    assert_same_array(zarr.open_array(view.path("sub/deep"))[...], np.arange(20, dtype="u2"),
                      "zarr-python, consolidated subgroup")


@pytest.mark.parametrize("backend", ["s3"])
def test_xarray_open_zarr_over_s3(remote, remote_view, xr_store, backend):
    root, ds = xr_store
    prefix = remote.seed(backend, root, "xr")
    view = remote_view(backend, "--read-only", prefix=prefix)
    assert_dataset(xr.open_zarr(view.path()), ds, f"xr.open_zarr over {backend}")
    assert_dataset(xr.open_dataset(view.path(), engine="zarr"), ds, f"open_dataset over {backend}")
    assert zarr.open_group(view.path()).metadata.consolidated_metadata is not None
    import dask.array as da

    assert_same_array(da.from_zarr(str(view.path("t"))).compute(), ds.t.values, "dask over s3")


@pytest.mark.parametrize("index", [True, False], ids=["autoindex", "no-listing"])
def test_xarray_open_zarr_over_plain_http(remote, mounter, xr_store, index):  # noqa: F811
    """A web server without WebDAV, with directory index pages or with no listing at all: the
    consolidated metadata names every node, so xarray's defaults open the dataset, and `ls`
    of the groups shows every node."""
    import seed_remote as SR
    root, ds = xr_store
    remote.ensure("http")
    prefix = remote.seed("http", root, "xr")
    view = mounter(SR.http_plain_url(prefix, index=index), "--read-only")
    assert {"t", "q", "x", "y", "sub", "zarr.json"} <= set(os.listdir(view.path()))
    assert "deep" in os.listdir(view.path("sub"))
    assert_dataset(xr.open_zarr(view.path()), ds, f"xr.open_zarr over plain HTTP ({index=})")
    assert_same_array(zarr.open_group(view.path())["sub/deep"][...], np.arange(20, dtype="u2"),
                      "zarr-python, nested group")
    report = run_zarrfs(view.binary, "inspect", SR.http_plain_url(prefix, index=index)).stdout
    for node in ("array /t", "array /q", "array /sub/deep", "group /sub"):
        assert node in report, report
    assert ("cannot be listed" in report) == (not index), report


# ---------------------------------------------------------------------------------------------
# writing through the view


def test_array_created_through_the_mount_written_after_every_ttl(mounter, xr_store, tmp_path):
    root, _ = fresh_copy(xr_store, tmp_path)
    view = mount_writable(mounter, root, "--metadata-ttl", "1")
    data = np.arange(40 * 6, dtype="i4").reshape(40, 6)
    arr = zarr.create_array(view.path("created"), shape=data.shape, chunks=(4, 3), shards=(8, 6),
                            dtype="i4")
    time.sleep(2.5)  # longer than every cache's TTL
    arr[:] = data
    assert_same_array(zarr.open_array(view.path("created"))[:], data, "read back through the mount")
    assert "sharded array created through the mount" in view.log_tail(200)
    view.stop()
    check_sharded_store(root / "created", data, None, "created through the mount")
    assert temp_files(root) == []


def test_array_created_by_tensorstore_written_after_every_ttl(mounter, xr_store, tmp_path):
    import tensorstore as ts

    root, _ = fresh_copy(xr_store, tmp_path)
    view = mount_writable(mounter, root, "--metadata-ttl", "1")
    inner = {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [4, 4], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(view.path("tsnew")) + "/"},
            "metadata": {"shape": [32, 12], "data_type": "int32", "codecs": [inner],
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 12]}}}}
    arr = ts.open(spec, create=True).result()
    time.sleep(2.5)
    data = np.arange(32 * 12, dtype="i4").reshape(32, 12)
    arr[...].write(data).result()
    view.stop()
    check_sharded_store(root / "tsnew", data, None, "created by tensorstore through the mount")
    assert temp_files(root) == []


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_xarray_writes_through_the_view(mounter, remote, remote_view, xr_store, tmp_path, backend):
    """A new sharded variable, an append along a dimension and a region write, each with
    xarray's default (consolidating) arguments; then the store opened directly (a remote
    store downloaded first)."""
    root, ds = fresh_copy(xr_store, tmp_path)
    if backend == "local":
        view = mount_writable(mounter, root, "--metadata-ttl", "1")
    else:
        prefix = remote.seed(backend, root, f"xr-write-{tmp_path.name}")
        view = remote_view(backend, "--metadata-ttl", "1", prefix=prefix)
    mnt = view.path()
    n = xr.Dataset({"n": (("y", "x"), np.ones((64, 48), "f8"))})
    n.to_zarr(mnt, mode="a", encoding={"n": {"chunks": (16, 16), "shards": (32, 48)}})
    time.sleep(1.5)
    more = dataset(32, y0=64)
    more["n"] = (("y", "x"), np.full((32, 48), 2.0))
    more.to_zarr(mnt, append_dim="y")
    region = xr.Dataset({"t": (("y", "x"), np.full((8, 48), -1, "f4"))})
    region.to_zarr(mnt, region={"y": slice(8, 16), "x": slice(0, 48)})
    # Read back through the view with the defaults.
    want = xr.concat([ds, dataset(32, y0=64)], dim="y")
    want["t"][8:16] = -1.0
    want["n"] = (("y", "x"), np.concatenate([np.ones((64, 48)), np.full((32, 48), 2.0)]))
    assert_dataset(xr.open_zarr(mnt), want, "through the view after the writes")
    view.stop()
    if backend != "local":
        shutil.rmtree(root)
        download_tree(backend, prefix, root)

    assert_dataset(xr.open_zarr(root), want, "the sharded store, opened directly")
    assert zarr.open_group(root).metadata.consolidated_metadata is not None
    assert assert_block_agrees(root) >= 5
    for name, enc in [("t", SHARDED_VARS["t"]), ("q", SHARDED_VARS["q"]), ("n", {"shards": (32, 48)})]:
        assert shard_problems(root / name) == [], name
        assert load_json(root / name / "zarr.json")["chunk_grid"]["configuration"]["chunk_shape"] == list(enc["shards"])
    assert temp_files(root) == []


def test_consolidate_metadata_through_the_view(mounter, tree, tmp_path):
    """zarr.consolidate_metadata through the mount of a store without consolidated metadata:
    the stored block describes every array as stored (sharded), and zarr-python's default open
    of the store reads every array as written."""
    root = tmp_path / "root"
    shutil.copytree(tree.root, root)
    view = mount_writable(mounter, root)
    zarr.consolidate_metadata(view.path())
    shown = load_json(view.path("zarr.json"))
    for path, entry in block(shown).items():
        if entry.get("node_type") == "array":
            assert normalized(entry) == normalized(load_json(view.path(path) / "zarr.json")), path
    view.stop()
    assert assert_block_agrees(root) == len(manifest_entries())
    group = zarr.open_group(root)
    assert group.metadata.consolidated_metadata is not None
    for path in manifest_entries():
        assert_same_array(group[path][...], tree.expected(tree.array(path)), f"store {path}")


def test_entries_the_store_cannot_express_are_refused(mounter, xr_store, tmp_path):
    root, _ = fresh_copy(xr_store, tmp_path)
    before = (root / "zarr.json").read_bytes()
    view = mount_writable(mounter, root)
    doc = load_json(view.path("zarr.json"))
    block(doc)["t"]["chunk_grid"]["configuration"]["chunk_shape"] = [16, 16]
    with pytest.raises(OSError) as err:
        with open(view.path("zarr.json"), "w") as f:
            json.dump(doc, f)
    assert err.value.errno == errno.EINVAL
    assert "metadata write refused" in view.log_tail(50) and '"t"' in view.log_tail(50)
    assert (root / "zarr.json").read_bytes() == before
    assert load_json(view.path("zarr.json")) != doc


def test_resize_without_reconsolidating_leaves_the_entry(mounter, zarrfs_bin, xr_store, tmp_path):
    """As a client writing the store directly would: the array's own document changes, the
    consolidated entry stays as it was (and default readers keep trusting it); `inspect` says
    the entry is stale."""
    root, _ = fresh_copy(xr_store, tmp_path)
    before = (root / "zarr.json").read_bytes()
    view = mount_writable(mounter, root)
    arr = zarr.open_array(view.path("q"), mode="r+")
    arr.resize((96,))
    view.stop()
    assert (root / "zarr.json").read_bytes() == before
    assert load_json(root / "q" / "zarr.json")["shape"] == [96]
    assert block(load_json(root / "zarr.json"))["q"]["shape"] == [64]
    assert shard_problems(root / "q") == []
    report = json.loads(run_zarrfs(zarrfs_bin, "inspect", root, "--json").stdout)
    q = next(a for a in report["arrays"] if a["path"] == "q")
    assert any("stale consolidated metadata in group /" in p and "[64]" in p and "[96]" in p
               for p in q["problems"]), q["problems"]
    # Consolidating again (through the mount) makes the store agree with itself.
    view = mount_writable(mounter, root)
    zarr.consolidate_metadata(view.path())
    view.stop()
    assert block(load_json(root / "zarr.json"))["q"]["shape"] == [96]
    assert assert_block_agrees(root) >= 5
    report = json.loads(run_zarrfs(zarrfs_bin, "inspect", root, "--json").stdout)
    assert [p for a in report["arrays"] for p in a["problems"]] == []


def test_tests_would_fail_without_the_rewrite(xr_store):
    """Guard of the premise: the stored group document describes the arrays as sharded, so a
    view that passed it through would contradict the arrays' rewritten documents."""
    root, _ = xr_store
    entry = block(load_json(root / "zarr.json"))["t"]
    assert entry["codecs"][0]["name"] == "sharding_indexed"
    assert si.view_metadata(entry) != entry

"""Hierarchies in the Zarr v3 drafts' layouts (scripts/draft_fixtures.py): the 2020 layout as
zarr-python 2.18 writes it (its own venv, .venv-legacy), and the 2022 layout built from the
seed text, with its data under `data/` and under `data/root/` (the text says both).

The unsharded view keeps the layout, drops the sharding storage transformer from each array's
document and shows every stored inner chunk under its own data key. Judged by zarr-python 2.18
reading the view against the data it wrote, by GDAL (which reads the 2020 layout but not its
shards), byte for byte against an independent parse of the shards, and through writes whose
result zarr-python 2.18 reads back from the sharded source."""
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, run_zarrfs
from helpers import walk_files
from mounting import tree_digest

LEGACY = REPO / ".venv-legacy" / "bin" / "python"
SCRIPT = REPO / "scripts" / "draft_fixtures.py"
EMPTY = 2**64 - 1


def legacy(*args, cwd=None):
    res = subprocess.run([str(LEGACY), "-W", "ignore", str(SCRIPT), *map(str, args)],
                         capture_output=True, text=True, timeout=300, cwd=cwd)
    assert res.returncode == 0, f"draft_fixtures.py {args[0]} failed:\n{res.stderr[-3000:]}"


@pytest.fixture(scope="session")
def drafts(tmp_path_factory) -> Path:
    """OUT/2020 (zarr 2.18), OUT/2022 and OUT/2022root (from the seed text), expectations."""
    assert LEGACY.exists(), "the legacy venv is missing: run scripts/setup.sh --test"
    out = tmp_path_factory.mktemp("drafts")
    legacy("write", out)
    legacy("write2022", out / "2022")
    legacy("write2022", out / "2022root", "--data-root")
    return out


def manifest(drafts):
    return json.loads((drafts / "manifest.json").read_text())["arrays"]


def read_through(drafts, root, name) -> dict:
    out = drafts / name
    shutil.rmtree(out, ignore_errors=True)
    legacy("read", root, out)
    return {a["path"]: np.load(out / f"{a['path']}.npy") for a in manifest(drafts)}


def expected(drafts, path):
    return np.load(drafts / "expected" / f"{path}.npy")


def same(a, b) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def draft_inner_chunks(root: Path, path: str) -> dict[str, bytes]:
    """An independent parse of a 2020 sharded array's shards: data key -> inner chunk bytes."""
    doc = json.loads((root / "meta" / "root" / f"{path}.array.json").read_text())
    grid = doc["chunk_grid"]
    sep, chunks, shape = grid["separator"], grid["chunk_shape"], doc["shape"]
    per_shard = doc["storage_transformers"][0]["configuration"]["chunks_per_shard"]
    n = int(np.prod(per_shard))
    inner_grid = [-(-s // c) for s, c in zip(shape, chunks)]
    out = {}
    data_dir = root / "data" / "root" / path
    for shard_file in data_dir.rglob("*"):
        if not shard_file.is_file():
            continue
        rel = str(shard_file.relative_to(data_dir))
        shard = [int(x) for x in rel[1:].replace("/", sep).split(sep)]
        blob = shard_file.read_bytes()
        index = blob[-16 * n:]
        for i, local in enumerate(np.ndindex(*per_shard)):
            offset, nbytes = struct.unpack_from("<QQ", index, 16 * i)
            coords = [s * k + l for s, k, l in zip(shard, per_shard, local)]
            if offset == EMPTY or any(c >= g for c, g in zip(coords, inner_grid)):
                continue
            key = f"data/root/{path}/c" + sep.join(str(c) for c in coords)
            out[key] = blob[offset:offset + nbytes]
    return out


def test_zarr_218_reads_the_2020_view_as_it_wrote_it(drafts, mounter):
    view = mounter(drafts / "2020", "--read-only")
    got = read_through(drafts, view.path(), "read-view")
    source = read_through(drafts, drafts / "2020", "read-source")
    for entry in manifest(drafts):
        path = entry["path"]
        assert same(got[path], expected(drafts, path)), f"{path} through the view"
        assert same(source[path], expected(drafts, path)), f"{path} from the source"
    assert "WARN" not in view.log_text(), view.log_text()[-2000:]


def test_the_2020_view_drops_the_transformer_and_shows_each_inner_chunk(drafts, mounter):
    root = drafts / "2020"
    view = mounter(root, "--read-only")
    files = walk_files(view.path())
    for entry in manifest(drafts):
        path = entry["path"]
        doc_key = f"meta/root/{path}.array.json"
        stored = json.loads((root / doc_key).read_text())
        shown = json.loads((view.path() / doc_key).read_text())
        if not entry["sharded"]:
            assert shown == stored
            continue
        assert "storage_transformers" not in shown
        assert shown == {k: v for k, v in stored.items() if k != "storage_transformers"}
        assert os.path.getsize(view.path() / doc_key) == len((view.path() / doc_key).read_bytes())
        want = draft_inner_chunks(root, path)
        got = {k: files[k].read_bytes() for k in files if k.startswith(f"data/root/{path}/")}
        assert got == want, f"{path}: {sorted(set(got) ^ set(want))[:6]}"
    # Groups, the entry point and unsharded arrays pass through unchanged.
    for rel in ["zarr.json", "meta/root/grp.group.json", "meta/root/plain.array.json", "data/root/plain/c0/0"]:
        assert (view.path() / rel).read_bytes() == (root / rel).read_bytes(), rel


def test_gdal_reads_the_unsharded_2020_view(drafts, mounter, tmp_path):
    """GDAL 3.6 reads the 2020 layout but not its shards; through the view it reads every
    sharded 2-D array as written (its `ZARR:` path syntax, one raw ENVI file per array)."""
    view = mounter(drafts / "2020", "--read-only")
    checked = 0
    for entry in manifest(drafts):
        path = entry["path"]
        want = expected(drafts, path)
        # GDAL's ENVI driver has no 64-bit integers (the unsharded `plain` passes through).
        if entry["ndim"] != 2 or want.dtype.kind in "iu" and want.dtype.itemsize == 8:
            continue
        out = tmp_path / f"{path.replace('/', '_')}.envi"
        res = subprocess.run(["gdal_translate", "-q", "-of", "ENVI", f'ZARR:"{view.path()}":/{path}', str(out)],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"gdal_translate {path}: {res.stderr}"
        got = np.fromfile(out, dtype=want.dtype).reshape(want.shape)
        assert same(got, want), f"GDAL read {path} through the view"
        checked += 1
    assert checked >= 3


def test_writes_through_the_2020_view_are_packed_back(drafts, mounter, tmp_path):
    """zarr-python 2.18 writes a region and attributes through the view and creates a new
    sharded array through it (writing its shards itself); the sharded source then reads back
    as written, its documents keeping their transformers."""
    root = tmp_path / "2020"
    shutil.copytree(drafts / "2020", root)
    view = mounter(root, "--metadata-ttl", "0")
    script = f"""
import os, numpy as np, zarr
os.environ["ZARR_V3_EXPERIMENTAL_API"] = "1"
from zarr._storage.v3 import DirectoryStoreV3
from zarr._storage.v3_storage_transformers import ShardingStorageTransformer
store = DirectoryStoreV3({str(view.path())!r})
a = zarr.open_array(store, path="grp/arr", mode="r+", zarr_version=3)
a[2:7, 1:5] = 1000 + np.arange(20, dtype="<i4").reshape(5, 4)
a.attrs["edited"] = True
t = ShardingStorageTransformer("indexed", chunks_per_shard=(2,))
n = zarr.create(shape=(9,), chunks=(2,), dtype="<u2", store=store, path="grp/new", zarr_version=3,
                storage_transformers=[t])
n[:] = np.arange(9, dtype="<u2")
"""
    res = subprocess.run([str(LEGACY), "-W", "ignore", "-c", script], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "ZARR_V3_EXPERIMENTAL_API": "1", "ZARR_V3_SHARDING": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    view.stop()
    check = f"""
import numpy as np, zarr, json
from zarr._storage.v3 import DirectoryStoreV3
store = DirectoryStoreV3({str(root)!r})
a = zarr.open_array(store, path="grp/arr", mode="r", zarr_version=3)
print(json.dumps({{"arr": a[...].tolist(), "attrs": dict(a.attrs),
                  "new": zarr.open_array(store, path="grp/new", mode="r", zarr_version=3)[...].tolist()}}))
"""
    res = subprocess.run([str(LEGACY), "-W", "ignore", "-c", check], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ZARR_V3_EXPERIMENTAL_API": "1", "ZARR_V3_SHARDING": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout)
    want = expected(drafts, "grp/arr").copy()
    want[2:7, 1:5] = 1000 + np.arange(20).reshape(5, 4)
    assert np.array_equal(np.array(got["arr"]), want)
    assert got["attrs"] == {"written_by": "zarr 2.18.7", "edited": True}
    assert got["new"] == list(range(9))
    for path in ["grp/arr", "grp/new"]:
        doc = json.loads((root / "meta" / "root" / f"{path}.array.json").read_text())
        assert doc["storage_transformers"][0]["type"] == "indexed", path


@pytest.mark.parametrize("layout", ["2022", "2022root"])
def test_the_2022_layout_byte_for_byte(drafts, mounter, layout):
    """The 2022 layout (data under `data/`, or under `data/root/` as its §2.3.1 says): each
    array's document without the transformer, each stored inner chunk under its own key with
    exactly its bytes, the holes absent."""
    root = drafts / layout
    report = json.loads((drafts / f"{layout}.json").read_text())
    view = mounter(root, "--read-only")
    files = walk_files(view.path())
    for path, array in report.items():
        shown = json.loads((view.path() / array["meta_key"]).read_text())
        assert shown == {k: v for k, v in array["doc"].items() if k != "storage_transformers"}, path
        got = {k: files[k].read_bytes().hex() for k in files if k.startswith(array["data_dir"] + "/")}
        assert got == array["view_files"], path
        assert len(got) >= 2, path
    assert (view.path() / "meta" / "group.json").read_bytes() == (root / "meta" / "group.json").read_bytes()


@pytest.mark.parametrize("layout", ["2020", "2022"])
def test_the_raw_view_of_a_draft_is_the_store(drafts, mounter, layout):
    view = mounter(drafts / layout, "--read-only", "--view", "raw")
    assert tree_digest(view.path()) == tree_digest(drafts / layout)


@pytest.mark.parametrize("layout", ["2020", "2022", "2022root"])
def test_inspect_reports_the_draft_layout_of_each_node(zarrfs_bin, drafts, layout):
    res = run_zarrfs(zarrfs_bin, "inspect", drafts / layout, "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    name = "draft 2020" if layout == "2020" else "draft 2022"
    if layout == "2020":
        want = {a["path"]: a["sharded"] for a in manifest(drafts)}
        assert report["group_layouts"] == {"grp": name, "grp/sub": name}
    else:
        want = {path: True for path in json.loads((drafts / f"{layout}.json").read_text())}
        assert report["group_layouts"] == {"": name}
    assert {a["path"]: a["sharded"] for a in report["arrays"]} == want
    assert {a["layout"] for a in report["arrays"]} == {name}
    assert report["problems"] == [] and all(a["problems"] == [] for a in report["arrays"])
    if layout == "2020":
        arr = next(a for a in report["arrays"] if a["path"] == "grp/arr")
        assert (arr["chunk_shape"], arr["shard_shape"], arr["codecs"]) == ([3, 2], [6, 4], ["zlib"])
        assert arr["shards"] == 6 and arr["inner_chunks"] == 20
    else:
        for path, array in json.loads((drafts / f"{layout}.json").read_text()).items():
            got = next(a for a in report["arrays"] if a["path"] == path)
            assert got["inner_chunks"] == len(array["view_files"]), path
            assert got["codecs"] == ["gzip"]


def test_a_chunk_written_through_a_2022_view_is_packed_into_its_shard(drafts, mounter, tmp_path):
    """No program writes the 2022 layout; a chunk file written through the view lands in its
    shard (index at the end, 16 bytes per chunk), the other chunks unchanged."""
    root = tmp_path / "2022"
    shutil.copytree(drafts / "2022", root)
    report = json.loads((drafts / "2022.json").read_text())["foo/baz"]
    view = mounter(root)
    new = b"\x1f\x8b" + os.urandom(40)
    (view.path() / "data/foo/baz/c1/1").write_bytes(new)  # a hole until now
    (view.path() / "data/foo/baz/c0/0").unlink()
    view.stop()
    per_shard = report["doc"]["storage_transformers"][0]["configuration"]["chunks_per_shard"]
    n = int(np.prod(per_shard))

    def entry(shard, local):
        blob = (root / "data/foo/baz" / shard).read_bytes()
        offset, nbytes = struct.unpack_from("<QQ", blob, len(blob) - 16 * n + 16 * local)
        return None if offset == EMPTY else blob[offset:offset + nbytes]

    assert entry("c0/0", 3) == new  # chunk (1, 1): shard (0, 0), local (1, 1)
    assert entry("c0/0", 0) is None
    for key, hexed in report["view_files"].items():
        if key in ("data/foo/baz/c0/0",):
            continue
        coords = [int(c) for c in key.rsplit("/c", 1)[1].split("/")]
        shard = "c" + "/".join(str(c // k) for c, k in zip(coords, per_shard))
        local = int(np.ravel_multi_index([c % k for c, k in zip(coords, per_shard)], per_shard))
        assert entry(shard, local) == bytes.fromhex(hexed), key

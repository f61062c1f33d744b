"""Rectilinear chunk grids written by zarr-python 3.4 (issue 34, deliverable 5).

A sharded array whose shard edges vary (`chunks=(8, 8), shards=[[16, 24, 24], [24, 24]]`) is
shown unsharded as a regular grid of its 8x8 inner chunks: zarr-python 3.1 and tensorstore
read it through the mount, zarr 2.18 through `--view v2`, exactly as zarr-python 3.4 reads the
sharded original (GDAL too, when installed; shard indexes at the end and at the start); `cp -r` of the view is a regular unsharded array; writes through the view
(zarr-python 3.1, into existing shards and a new one) and a resize read back from the sharded
store with zarr-python 3.4, its grid kept (grown by one aligned edge when resized past it). An
unsharded rectilinear array, and a sharded one whose shard edges are not multiples of its inner
chunks, are shown as stored byte for byte, and `zarrfs inspect` says why. `zarrfs copy
--unshard` and `--shard` handle both kinds.

zarr-python 3.4 needs Python 3.12: it runs as a subprocess from `ZARR34_PYTHON`, else
`.venv-zarr34/bin/python` under the repository (scripts/setup.sh --test); without it the
module is skipped.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, run_zarrfs
from copying import contents, copy, shard_copy
from helpers import assert_same_array, read_tensorstore, read_zarr_python, walk_files

ZARR34 = Path(os.environ.get("ZARR34_PYTHON", REPO / ".venv-zarr34" / "bin" / "python"))
LEGACY = REPO / ".venv-legacy" / "bin" / "python"

if not os.access(ZARR34, os.X_OK):
    pytest.skip(f"zarr-python 3.4 not found at {ZARR34} (set ZARR34_PYTHON, or run "
                "scripts/setup.sh --test)", allow_module_level=True)

SHARDED = ["sharded", "sparse", "overhang", "start"]
AS_STORED = ["unsharded", "odd"]

WRITE = r"""
import json, sys, numpy as np, zarr
root = sys.argv[1]
zarr.config.set({"array.rectilinear_chunks": True})
g = zarr.open_group(root, mode="w")
def make(name, shape, **kw):
    return g.create_array(name, shape=shape, dtype="int32", fill_value=-1, **kw)
a = make("sharded", (64, 48), chunks=(8, 8), shards=[[16, 24, 24], [24, 24]])
a[:] = np.arange(64 * 48, dtype="int32").reshape(64, 48)
a[0:8, 8:16] = -1                               # one inner chunk left empty
a.attrs["title"] = "rectilinear shards"
s = make("sparse", (64, 48), chunks=(8, 8), shards=[[16, 24, 24], [24, 24]])
s[0:16, 0:24] = 7                               # only shard (0, 0) exists
o = make("overhang", (64, 48), chunks=(8, 8), shards=[[16, 24, 24], [24, 24]])
o[:] = np.arange(64 * 48, dtype="int32").reshape(64, 48) * 3
o.resize((60, 44))                              # the grid overhangs the shape
t = g.create_array("start", shape=(64, 48), dtype="int16", fill_value=0, chunks=(8, 8),
                   shards={"shape": [[16, 24, 24], [24, 24]], "index_location": "start"})
t[:] = (np.arange(64 * 48).reshape(64, 48) % 30000).astype("int16")
u = make("unsharded", (30, 20), chunks=[[10, 5, 15], [20]])
u[:] = np.arange(600, dtype="int32").reshape(30, 20)
d = make("odd", (30, 20), chunks=(10, 10), shards=(20, 20))
d[:] = 5
c = zarr.open_group(root + "/cons", mode="w")          # consolidated, as xarray writes
x = c.create_array("x", shape=(64, 48), dtype="int32", fill_value=-1, chunks=(8, 8),
                   shards=[[16, 24, 24], [24, 24]])
x[:] = np.arange(64 * 48, dtype="int32").reshape(64, 48) + 5
zarr.consolidate_metadata(root + "/cons")
"""

# An "odd" array: sharded, on a rectilinear grid whose edges are not multiples of the inner
# chunks (the sharding codec forbids them; zarr-python 3.4 refuses to write one, so its
# document is edited): shown as stored.
ODD_GRID = {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [[15, 15], [20]]}}

READ = r"""
import json, sys, numpy as np, zarr
root, out = sys.argv[1], sys.argv[2]
names = json.loads(sys.argv[3])
zarr.config.set({"array.rectilinear_chunks": True})
for name in names:
    a = zarr.open_array(root + "/" + name, mode="r")
    np.save(out + "/" + name.replace("/", "_") + ".npy", a[...])
"""


def zarr34(*args, timeout=300) -> subprocess.CompletedProcess:
    res = subprocess.run([str(ZARR34), "-W", "ignore", "-c", *args], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def read_with_zarr34(root: Path, names: list[str], out: Path) -> dict[str, np.ndarray]:
    out.mkdir(parents=True, exist_ok=True)
    zarr34(READ, str(root), str(out), json.dumps(names))
    return {name: np.load(out / f"{name.replace('/', '_')}.npy") for name in names}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """The hierarchy zarr-python 3.4 wrote (never modified: tests copy it), and what zarr-python
    3.4 reads from its sharded and unsharded arrays."""
    base = tmp_path_factory.mktemp("rect")
    root = base / "rect.zarr"
    zarr34(WRITE, str(root))
    meta = json.loads((root / "odd" / "zarr.json").read_bytes())
    meta["chunk_grid"] = ODD_GRID
    (root / "odd" / "zarr.json").write_text(json.dumps(meta, indent=2))
    expected = read_with_zarr34(root, SHARDED + ["unsharded", "cons/x"], base / "expected")
    return root, expected


@pytest.fixture
def rect(written, tmp_path) -> tuple[Path, dict[str, np.ndarray]]:
    """A copy of the hierarchy of this test's own, and what zarr-python 3.4 reads from it."""
    root, expected = written
    shutil.copytree(root, tmp_path / "rect.zarr")
    return tmp_path / "rect.zarr", expected


def test_zarr_34_writes_what_the_view_expects(written):
    """The fixture is what the issue describes: shards of varying edges, run-length encoded."""
    root, expected = written
    meta = json.loads((root / "sharded" / "zarr.json").read_bytes())
    assert meta["chunk_grid"]["name"] == "rectilinear"
    assert meta["chunk_grid"]["configuration"]["chunk_shapes"] == [[16, [24, 2]], [[24, 2]]]
    assert meta["codecs"][0]["configuration"]["chunk_shape"] == [8, 8]
    # Each shard's index has its own shape: 2x3 inner chunks in shard (0, 0), 3x3 in (1, 0).
    assert sorted(os.listdir(root / "sharded" / "c")) == ["0", "1", "2"]
    assert expected["sharded"][0, 8] == -1 and expected["sharded"][63, 47] == 64 * 48 - 1
    assert expected["overhang"].shape == (60, 44)
    start = json.loads((root / "start" / "zarr.json").read_bytes())["codecs"][0]["configuration"]
    assert start["index_location"] == "start"


def test_readers_read_the_unsharded_view_as_zarr_34_reads_the_shards(mounter, written):
    root, expected = written
    view = mounter(root, "--read-only")
    for name in SHARDED:
        meta = json.loads(view.path(f"{name}/zarr.json").read_bytes())
        assert meta["chunk_grid"] == {"name": "regular", "configuration": {"chunk_shape": [8, 8]}}
        assert [c["name"] for c in meta["codecs"]] == ["bytes", "zstd"], meta["codecs"]
        for reader in (read_zarr_python, read_tensorstore):
            assert_same_array(reader(view.path(name)), expected[name], f"{name} by {reader.__name__}")
    # The empty inner chunk and the chunks of absent shards are no files; nothing past the shape.
    files = sorted(os.listdir(view.path("sharded/c/0")))
    assert files == ["0", "2", "3", "4", "5"], files
    assert sorted(os.listdir(view.path("sparse/c"))) == ["0", "1"]
    assert sorted(os.listdir(view.path("overhang/c/7"))) == ["0", "1", "2", "3", "4", "5"]
    assert json.loads(view.path("sharded/zarr.json").read_bytes())["attributes"] == {"title": "rectilinear shards"}


def test_consolidated_metadata_describes_the_view(mounter, written):
    """A group's consolidated entry of such an array is rewritten like its own document, so
    zarr-python 3.1 opening the group (trusting the consolidated block) reads the view."""
    import zarr
    root, expected = written
    view = mounter(root, "--read-only")
    doc = json.loads(view.path("cons/zarr.json").read_bytes())
    entry = doc["consolidated_metadata"]["metadata"]["x"]
    assert entry == json.loads(view.path("cons/x/zarr.json").read_bytes())
    group = zarr.open_group(str(view.path("cons")), mode="r")
    assert group.metadata.consolidated_metadata is not None
    assert_same_array(group["x"][...], expected["cons/x"], "cons/x through consolidated metadata")


@pytest.mark.skipif(not os.access(LEGACY, os.X_OK), reason=f"zarr 2.18 venv not found at {LEGACY}")
def test_zarr_218_and_zarr_3_read_the_v2_view(mounter, written, tmp_path):
    import zarr
    root, expected = written
    v2view = mounter(root, "--view", "v2")
    for name in SHARDED:
        got = zarr.open_array(v2view.path(name), mode="r", zarr_format=2)[...]
        assert_same_array(got, expected[name], f"{name} through the v2 view")
    script = ("import sys, numpy as np, zarr\n"
              "for n in sys.argv[2:]: np.save(sys.argv[1] + '/' + n + '.npy', zarr.open_array("
              f"{str(v2view.path())!r} + '/' + n, mode='r')[...])\n")
    out = tmp_path / "legacy"
    out.mkdir()
    res = subprocess.run([str(LEGACY), "-W", "ignore", "-c", script, str(out), *SHARDED],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    for name in SHARDED:
        assert_same_array(np.load(out / f"{name}.npy"), expected[name], f"{name} by zarr 2.18")
    # The arrays shown as stored cannot be described in v2: left out of that view.
    assert not v2view.path("unsharded/.zarray").exists()
    if shutil.which("gdal_translate"):
        for name in SHARDED:
            out = tmp_path / f"{name}.envi"
            res = subprocess.run(["gdal_translate", "-q", "-of", "ENVI", str(v2view.path(name)), str(out)],
                                 capture_output=True, text=True, timeout=120)
            assert res.returncode == 0, f"gdal_translate {name}: {res.stderr}"
            got = np.fromfile(out, dtype=expected[name].dtype.newbyteorder("<")).reshape(expected[name].shape)
            assert_same_array(got, expected[name], f"{name} by GDAL")


def test_cp_r_of_the_view_is_a_regular_unsharded_array(mounter, written, tmp_path):
    root, expected = written
    view = mounter(root, "--read-only")
    dest = tmp_path / "copy"
    res = subprocess.run(["cp", "-r", str(view.path()), str(dest)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    for name in SHARDED:
        meta = json.loads((dest / name / "zarr.json").read_bytes())
        assert meta["chunk_grid"]["name"] == "regular" and "sharding_indexed" not in json.dumps(meta)
        assert_same_array(read_zarr_python(dest / name), expected[name], f"{name} from the copy")
    assert_same_array(read_with_zarr34(dest, ["sharded"], tmp_path / "r")["sharded"], expected["sharded"],
                      "the copy by zarr 3.4")


def test_arrays_that_cannot_be_unsharded_are_shown_as_stored_and_inspect_says_why(mounter, zarrfs_bin, written):
    root, _ = written
    view = mounter(root, "--read-only")
    for name in AS_STORED:
        stored, shown = walk_files(root / name), walk_files(view.path(name))
        assert sorted(shown) == sorted(stored), name
        for rel, path in stored.items():
            assert shown[rel].read_bytes() == path.read_bytes(), f"{name}/{rel}"
    res = run_zarrfs(zarrfs_bin, "inspect", root, "--json")
    assert res.returncode == 0, res.stderr
    arrays = {a["path"]: a for a in json.loads(res.stdout)["arrays"]}
    assert any("rectilinear chunk grid: not sharded" in p for p in arrays["unsharded"]["problems"]), arrays["unsharded"]
    odd = arrays["odd"]["problems"]
    assert any("shard edge 15 along dimension 0 is not a multiple of the inner chunk edge 10" in p for p in odd), odd
    for name in SHARDED:
        a = arrays[name]
        assert a["sharded"] and a["problems"] == [] and a["chunk_shape"] == [8, 8], a
    assert arrays["sharded"]["shards"] == 6 and arrays["sparse"]["shards"] == 1
    assert arrays["sharded"]["shard_edges"] == [[16, [24, 2]], [[24, 2]]]
    text = run_zarrfs(zarrfs_bin, "inspect", root).stdout
    assert "shards      rectilinear [[16,[24,2]],[[24,2]]]  (6 stored)" in text, text
    assert arrays["unsharded"]["chunk_edges"] == [[10, 5, 15], [20]] and arrays["unsharded"]["inner_chunks"] == 3
    assert "chunks      rectilinear [[10,5,15],[20]]  (3 stored, not sharded)" in text, text
    assert arrays["sharded"]["inner_chunks"] == 8 * 6 - 1


def test_writes_through_the_view_are_packed_into_the_right_shards(mounter, rect, tmp_path):
    import zarr
    root, expected = rect
    want = {name: expected[name].copy() for name in ("sharded", "sparse")}
    m = mounter(root)
    a = zarr.open_array(m.path("sharded"), mode="r+")
    values = np.arange(20 * 30, dtype="int32").reshape(20, 30) + 10_000
    a[10:30, 5:35] = values                       # across shards (0, 0), (0, 1), (1, 0), (1, 1)
    want["sharded"][10:30, 5:35] = values
    a[0:8, 8:16] = 42                             # the empty inner chunk, in shard (0, 0)
    want["sharded"][0:8, 8:16] = 42
    s = zarr.open_array(m.path("sparse"), mode="r+")
    s[40:64, 24:48] = 9                           # a whole new shard (2, 1)
    s[17:20, 1:2] = 3                             # part of a new shard (1, 0)
    want["sparse"][40:64, 24:48] = 9
    want["sparse"][17:20, 1:2] = 3
    a.attrs["edited"] = True
    m.stop()
    got = read_with_zarr34(root, ["sharded", "sparse"], tmp_path / "after")
    for name in want:
        assert_same_array(got[name], want[name], f"{name} read by zarr 3.4 from the shards")
    meta = json.loads((root / "sharded" / "zarr.json").read_bytes())
    assert meta["chunk_grid"]["configuration"]["chunk_shapes"] == [[16, [24, 2]], [[24, 2]]]
    assert meta["attributes"] == {"title": "rectilinear shards", "edited": True}
    assert sorted(os.listdir(root / "sparse" / "c")) == ["0", "1", "2"]
    # Shard (2, 1) holds 3x3 inner chunks: its index is 9 entries of 16 bytes and a CRC.
    index = (root / "sparse" / "c" / "2" / "1").read_bytes()[-(9 * 16 + 4):]
    assert len(index) == 9 * 16 + 4


def test_resizing_through_the_view_keeps_or_grows_the_stored_grid(mounter, rect, tmp_path):
    import zarr
    root, expected = rect
    m = mounter(root)
    zarr.open_array(m.path("sharded"), mode="r+").resize((40, 48))
    meta = json.loads((root / "sharded" / "zarr.json").read_bytes())
    assert meta["shape"] == [40, 48]
    assert meta["chunk_grid"]["configuration"]["chunk_shapes"] == [[16, [24, 2]], [[24, 2]]]
    a = zarr.open_array(m.path("sparse"), mode="r+")
    a.resize((72, 48))
    a[64:72, :] = 11
    meta = json.loads((root / "sparse" / "zarr.json").read_bytes())
    assert meta["chunk_grid"]["configuration"]["chunk_shapes"] == [[16, [24, 2], 8], [[24, 2]]]
    m.stop()
    got = read_with_zarr34(root, ["sharded", "sparse"], tmp_path / "after")
    assert_same_array(got["sharded"], expected["sharded"][:40], "shrunk")
    want = np.concatenate([expected["sparse"], np.full((8, 48), 11, dtype="int32")])
    assert_same_array(got["sparse"], want, "grown")


def test_zarrfs_copy_unshard_and_shard(zarrfs_bin, mounter, written, tmp_path):
    root, expected = written
    view = mounter(root, "--read-only")
    subprocess.run(["cp", "-r", str(view.path()), str(tmp_path / "via-mount")], check=True, timeout=300)
    res = copy(zarrfs_bin, root, tmp_path / "unsharded")
    assert res.returncode == 0, res.stderr
    assert contents(tmp_path / "unsharded") == contents(tmp_path / "via-mount")
    for name in AS_STORED:
        assert contents(tmp_path / "unsharded" / name) == contents(root / name), name
    # --shard packs what the view shows unsharded into regular shards; the rest as stored.
    res = shard_copy(zarrfs_bin, root, tmp_path / "packed", shape="16,16")
    assert res.returncode == 0, res.stderr
    packed = tmp_path / "packed"
    for name in AS_STORED:
        assert contents(packed / name) == contents(root / name), name
    got = read_with_zarr34(packed, SHARDED + ["unsharded"], tmp_path / "r")
    for name in SHARDED + ["unsharded"]:
        assert_same_array(got[name], expected[name], f"{name} packed")
    for name in SHARDED:
        meta = json.loads((packed / name / "zarr.json").read_bytes())
        assert meta["chunk_grid"] == {"name": "regular", "configuration": {"chunk_shape": [16, 16]}}, meta

"""`--view v2`: the fixture hierarchy (sharded and unsharded Zarr v3 arrays written by
zarr-python and tensorstore, plus a stored Zarr v2 group) shown as Zarr v2, and judged by v2
readers: zarr-python 3 with zarr_format=2, zarr-python 2.18 (.venv-legacy), tensorstore's
`zarr` (v2) driver and GDAL. Every array reads as the source does; `cp -r` of the view is a
valid v2 hierarchy; `.zmetadata` agrees with every document; chunks are relayed byte for
byte from the unsharded view; the view is read-only."""
import errno
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import REPO, manifest_entries
from helpers import walk_files

LEGACY = REPO / ".venv-legacy" / "bin" / "python"


def v3_data(tree, path):
    import zarr
    return zarr.open_array(tree.root / path, mode="r")[...]


def same(a, b):
    """Same values and type; the byte order may differ (a big-endian array is read as such)."""
    a, b = np.asarray(a), np.asarray(b)
    return (a.shape == b.shape and a.dtype.newbyteorder("=") == b.dtype.newbyteorder("=")
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


@pytest.fixture
def v2view(mounter, tree):
    return mounter(tree.root, "--view", "v2")


def test_zarr_python_reads_every_array_as_v2(v2view, tree):
    import zarr
    for path in manifest_entries():
        got = zarr.open_array(v2view.path(path), mode="r", zarr_format=2)[...]
        assert same(got, v3_data(tree, path)), path
    assert "WARN" not in v2view.log_text(), v2view.log_text()[-2000:]


def test_tensorstore_zarr_v2_driver_reads_every_array(v2view, tree):
    import tensorstore as ts
    for path in manifest_entries():
        spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(v2view.path(path))}}
        got = ts.open(spec).result().read().result()
        assert same(np.asarray(got), v3_data(tree, path)), path


LEGACY_READ = """
import json, sys, zarr, numpy as np
root, out = sys.argv[1], sys.argv[2]
paths = json.loads(sys.argv[3])
g = zarr.open_consolidated(root, mode="r")
result = {"groups": sorted(g.group_keys())}
for p in paths:
    a = zarr.open_array(root + "/" + p, mode="r")
    np.save(out + "/" + str(paths.index(p)) + ".npy", a[...])
    assert a[...].dtype == g[p][...].dtype
print(json.dumps(result))
"""


def legacy_read(root, paths, out):
    out.mkdir(exist_ok=True)
    res = subprocess.run([str(LEGACY), "-W", "ignore", "-c", LEGACY_READ, str(root), str(out), json.dumps(paths)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout), [np.load(out / f"{i}.npy") for i in range(len(paths))]


def test_zarr_218_reads_the_view_and_its_consolidated_metadata(v2view, tree, tmp_path):
    paths = manifest_entries()
    result, arrays = legacy_read(v2view.path(), paths, tmp_path / "read")
    assert {"zp", "ts", "plain", "legacy"} <= set(result["groups"])
    for path, got in zip(paths, arrays):
        assert same(got, v3_data(tree, path)), path


def test_cp_r_of_the_v2_view_is_a_v2_hierarchy(v2view, tree, tmp_path):
    dest = tmp_path / "copy"
    res = subprocess.run(["cp", "-r", str(v2view.path()), str(dest)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    files = walk_files(dest)
    assert not [f for f in files if f.endswith("zarr.json")], "zarr.json shown in the v2 view"
    paths = manifest_entries()
    _, arrays = legacy_read(dest, paths, tmp_path / "read")
    for path, got in zip(paths, arrays):
        assert same(got, v3_data(tree, path)), f"{path} from the copy"


def test_zmetadata_agrees_with_every_document(v2view):
    consolidated = json.loads((v2view.path() / ".zmetadata").read_text())
    assert consolidated["zarr_consolidated_format"] == 1
    docs = consolidated["metadata"]
    for key, value in docs.items():
        assert json.loads((v2view.path() / key).read_text()) == value, key
    shown = {k for k in walk_files(v2view.path()) if os.path.basename(k) in (".zarray", ".zgroup", ".zattrs")}
    assert shown == set(docs), sorted(shown ^ set(docs))[:6]


def v3_coords(key, meta):
    """The coordinates of a chunk key of the unsharded view."""
    enc = meta.get("chunk_key_encoding", {"name": "default"})
    name = enc["name"]
    sep = enc.get("configuration", {}).get("separator", "/" if name == "default" else ".")
    ndim = len(meta["shape"])
    rest = key[2:] if name == "default" else key
    if ndim == 0:
        return [], sep
    return [int(x) for x in rest.split(sep)], sep


def test_chunks_are_relayed_from_the_unsharded_view(v2view, mounter, tree):
    """Each chunk file of a sharded array holds exactly the inner chunk's stored bytes, under
    its v2 key (`/` kept as the separator where the array's keys use it)."""
    unsharded = mounter(tree.root, "--read-only")
    for path in manifest_entries("sharded"):
        meta = json.loads((unsharded.path(path) / "zarr.json").read_text())
        v3_files = {k: p for k, p in walk_files(unsharded.path(path)).items() if k != "zarr.json"}
        v2_files = {k for k in walk_files(v2view.path(path)) if not os.path.basename(k).startswith(".z")}
        assert len(v2_files) == len(v3_files), path
        for key, p in v3_files.items():
            coords, sep = v3_coords(key, meta)
            v2_key = ("/" if sep == "/" else ".").join(map(str, coords)) if coords else "0"
            assert v2_key in v2_files, f"{path}: {v2_key}"
            assert (v2view.path(path) / v2_key).read_bytes() == p.read_bytes(), f"{path}/{key}"


def test_gdal_reads_every_2d_array(v2view, tree, tmp_path):
    """GDAL 3.6 reads Zarr v2 (it refuses complex fill values, so complex arrays are left out)."""
    checked = 0
    for path in manifest_entries():
        want = v3_data(tree, path)
        if want.ndim != 2 or want.dtype.kind == "c":
            continue
        if want.dtype.kind == "b":
            want = want.astype("u1")  # GDAL reads booleans as bytes
        out = tmp_path / f"{checked}.envi"
        res = subprocess.run(["gdal_translate", "-q", "-of", "ENVI", str(v2view.path(path)), str(out)],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{path}: {res.stderr}"
        got = np.fromfile(out, dtype=want.dtype.newbyteorder("<")).reshape(want.shape)
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), path
        checked += 1
    assert checked >= 9


def test_the_v2_view_is_read_only(v2view):
    with pytest.raises(OSError) as err:
        (v2view.path("zp") / "new.bin").write_bytes(b"x")
    assert err.value.errno == errno.EROFS
    with pytest.raises(OSError) as err:
        (v2view.path("zp/i16_2d_nested") / ".zattrs").write_text("{}")
    assert err.value.errno == errno.EROFS
    # Mounted read-only: the kernel refuses changes itself; the mount says so when it starts.
    assert "the v2 view is read-only: mounting read-only" in v2view.log_text()


# ---------------------------------------------------------------------------------------------
# transcoded arrays: chunk codecs v2 cannot name


@pytest.fixture(scope="module")
def transcoded(tmp_path_factory):
    """Arrays written by zarr-python whose chunk codecs have no v2 equivalent -> expected data;
    and one v2 cannot show at all (variable-length strings)."""
    import zarr
    from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,
                             TransposeCodec, ZstdCodec)
    root = tmp_path_factory.mktemp("transcoded") / "root"
    zarr.open_group(root, mode="w")
    rng = np.random.default_rng(3)
    want = {}

    def make(name, data, **kw):
        a = zarr.create_array(root / name, shape=data.shape, dtype=data.dtype, **kw)
        a[...] = data
        want[name] = data

    make("sharded_crc", rng.integers(-999, 999, (13, 11)).astype("<i2"), chunks=(8, 6), shards=(8, 12),
         serializer=BytesCodec(), compressors=[Crc32cCodec()])
    make("big_zstd_crc", rng.normal(size=(9, 7)), chunks=(4, 4),
         serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(), Crc32cCodec()])
    make("transposed_3d", rng.integers(0, 250, (5, 6, 7)).astype("u1"), chunks=(2, 3, 4), shards=(4, 6, 8),
         filters=[TransposeCodec(order=(1, 2, 0))], compressors=[GzipCodec(level=1)])
    make("two_compressors", rng.normal(size=(10, 10)).astype("<f4"), chunks=(5, 5),
         compressors=[GzipCodec(level=1), ZstdCodec(level=1)])
    make("blosc_crc", np.arange(20, dtype="<u4").reshape(4, 5), chunks=(2, 5),
         compressors=[BloscCodec(), Crc32cCodec()])
    # Every compressor zarr-python's blosc offers, as numcodecs compiled them, decoded by the
    # c-blosc compiled into the binary (a crc32c after it, which v2 has no name for, makes the
    # view decode the chunk instead of relaying it).
    for cname in BLOSC_CNAMES:
        make(f"blosc_{cname}", rng.integers(0, 9, (24, 40)).astype("<u2"), chunks=(8, 20),
             compressors=[BloscCodec(cname=cname, shuffle="bitshuffle", typesize=2), Crc32cCodec()])
    strings = zarr.create_array(root / "strings", shape=(3,), chunks=(2,), dtype=str)
    strings[:] = np.array(["a", "bb", "ccc"])
    return root, want


BLOSC_CNAMES = ["lz4", "lz4hc", "blosclz", "zlib", "zstd"]
TRANSCODED = ["sharded_crc", "big_zstd_crc", "transposed_3d", "two_compressors", "blosc_crc",
              *(f"blosc_{c}" for c in BLOSC_CNAMES)]


@pytest.mark.parametrize("compressor", ["zstd", "gzip", "none"])
def test_transcoded_arrays_read_as_written(transcoded, mounter, tmp_path, compressor):
    import zarr
    root, want = transcoded
    view = mounter(root, "--view", "v2", "--v2-compressor", compressor)
    for name in TRANSCODED:
        zarray = json.loads((view.path(name) / ".zarray").read_text())
        expected = {"zstd": {"id": "zstd", "level": 1}, "gzip": {"id": "gzip", "level": 1}, "none": None}[compressor]
        assert zarray["compressor"] == expected, name
        assert zarray["order"] == "C" and zarray["dtype"][0] in "<|", zarray
        got = zarr.open_array(view.path(name), mode="r", zarr_format=2)[...]
        assert same(got, want[name]), f"zarr-python on transcoded {name}"
    result, arrays = legacy_read(view.path(), TRANSCODED, tmp_path / "read")
    for name, got in zip(TRANSCODED, arrays):
        assert same(got, want[name]), f"zarr 2.18 on transcoded {name}"
    # The one v2 cannot show is left out, and the log says why.
    assert "strings" not in os.listdir(view.path())
    assert "left out of the v2 view" in view.log_text() and "string" in view.log_text()
    assert "strings/.zarray" not in json.loads((view.path() / ".zmetadata").read_text())["metadata"]


def test_transcoded_sizes_are_exact_and_stable(transcoded, mounter):
    root, _ = transcoded
    first = mounter(root, "--view", "v2")
    sizes = {}
    for name in TRANSCODED:
        for rel, p in walk_files(first.path(name)).items():
            data = p.read_bytes()
            assert p.stat().st_size == len(data), f"{name}/{rel}"
            sizes[f"{name}/{rel}"] = (len(data), data)
    assert len(sizes) > 20
    second = mounter(root, "--view", "v2")
    for key, (size, data) in sizes.items():
        assert (second.path() / key).read_bytes() == data, f"{key} differs between mounts"


def test_inspect_says_which_arrays_the_v2_view_leaves_out(transcoded, zarrfs_bin):
    from conftest import run_zarrfs
    root, _ = transcoded
    res = run_zarrfs(zarrfs_bin, "inspect", root, "--json")
    assert res.returncode == 0, res.stderr
    problems = {a["path"]: a["problems"] for a in json.loads(res.stdout)["arrays"]}
    assert any("left out of --view v2" in p and "string" in p for p in problems["strings"]), problems
    for name in TRANSCODED:
        assert problems[name] == [], (name, problems[name])

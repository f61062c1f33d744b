"""Writes through a remote view (s3 and azure: the servers with conditional writes). Small
sharded arrays are built locally, seeded under a fresh prefix and mounted writable by URL;
zarr-python writes regions that cross shard boundaries, overwrite edge chunks, fill a whole
inner chunk with the fill value (an unlink) and start a shard that did not exist. While mounted
the view reads back as written; after unmount the objects fetched from the bucket pass the
strict shard checks and hold exactly the expected array, and a fresh read-only mount of the
prefix reads it with both clients."""
import os

import numpy as np
import pytest

import fixtures as F
import shardindex as si
from helpers import READERS, assert_same_array
from remote import WRITABLE, delta, download_tree, record, remote, remote_view, stats  # noqa: F401
from writing import build, check_sharded_store, open_zarr_python, stored_meta, view_matches_store

ARRAYS = {
    "g/end_crc_zstd": F.ArraySpec("g/end_crc_zstd", F.ZARR_PY, (20, 22), "int16", (8, 8),
                                  [F.c_bytes(), F.c_zstd()], [F.Level((4, 4))],
                                  empty_shards=[(2, 2)]),
    "g/start_nocrc_blosc_dot": F.ArraySpec("g/start_nocrc_blosc_dot", F.TENSORSTORE, (30, 25),
                                           "uint16", (8, 10), [F.c_bytes(), F.c_blosc(2)],
                                           [F.Level((4, 5), "start", False)],
                                           cke=F.cke_default("."), empty_shards=[(3, 0)]),
}


def sync_dir(path):
    """`sync DIR` inside the mount: what waits in the journal is stored."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def planned_writes(spec: F.ArraySpec, data: np.ndarray) -> tuple[list, np.ndarray]:
    rng = np.random.default_rng(F.seed_of(spec.path) + 1)
    expected = data.copy()
    inner, shard = spec.inner_chunk_shape, spec.chunks
    fill = np.array(spec.fill_value).astype(spec.dtype)
    writes = []

    def put(region, values):
        values = np.asarray(values, dtype=spec.dtype)
        expected[region] = values
        writes.append((region, values))

    def rand(region):
        return F.random_values(rng, tuple(s.stop - s.start for s in region), spec.dtype)

    # across the first shard boundary in both dimensions, not aligned to inner chunks
    r = (slice(shard[0] - 3, shard[0] + 2), slice(shard[1] - 2, shard[1] + 3))
    put(r, rand(r))
    # the last (edge) inner chunk of the array
    r = tuple(slice((n - 1) // c * c, n) for n, c in zip(spec.shape, inner))
    put(r, rand(r))
    # one whole inner chunk set to the fill value (stored as a deletion)
    r = (slice(0, inner[0]), slice(0, inner[1]))
    put(r, np.full((inner[0], inner[1]), fill))
    # into the shard that does not exist yet
    s = spec.empty_shards[0]
    r = (slice(s[0] * shard[0], s[0] * shard[0] + inner[0]),
         slice(s[1] * shard[1], s[1] * shard[1] + inner[1]))
    put(r, rand(r))
    return writes, expected


@pytest.mark.parametrize("backend", WRITABLE)
def test_zarr_python_writes_through_remote_view(remote_view, remote, backend, tmp_path):
    local = tmp_path / "src"
    data = build(local, list(ARRAYS.values()))
    metas = {p: stored_meta(local / p) for p in ARRAYS}
    prefix = remote.seed(backend, local, f"write-{backend}")

    view = remote_view(backend, prefix=prefix)
    before = stats(view)
    expected = {}
    for path, spec in ARRAYS.items():
        writes, expected[path] = planned_writes(spec, data[path])
        arr = open_zarr_python(view.path(path))
        for region, values in writes:
            arr[region] = values
        assert_same_array(READERS["zarr-python"](view.path(path)), expected[path],
                          f"{backend} view of {path} while mounted")
    counts = delta(before, stats(view))
    record("write", backend=backend, arrays=len(ARRAYS), counts=counts)
    assert counts["set"] > 0, f"no store write counted: {counts}"
    view.stop()

    stored = download_tree(backend, prefix, tmp_path / "bucket")
    for path in ARRAYS:
        check_sharded_store(stored / path, expected[path], metas[path],
                            f"{backend} bucket after writes to {path}")

    fresh = remote_view(backend, "--read-only", prefix=prefix)
    for path in ARRAYS:
        for client, read in sorted(READERS.items()):
            assert_same_array(read(fresh.path(path)), expected[path],
                              f"{client} on a fresh {backend} mount of {path}")
        assert view_matches_store(fresh.path(path), stored / path) == []
        assert si.expected_chunk_files(si.load_layout(stored / path))


def test_zarr_pythons_temporary_files_are_held_until_renamed_and_stored_once(remote_view, remote, tmp_path):
    """zarr-python writes every file as `<name>.<hex>.partial`, closes it, then renames it into
    place. An object store has no rename (a copy, then a delete), so storing the temporary
    file cost two more requests a file: the mount holds a file of such a name (nothing stored
    under it) until it is renamed, then stores it once under its final name (the journal within
    its delay, or at `sync DIR`), or drops it when it is removed. Here an unsharded array
    (stored as it is), through the default mount."""
    import zarr
    prefix = f"{remote.run}/partials"
    view = remote_view("s3", prefix=prefix)
    data = np.arange(12 * 10, dtype="int32").reshape(12, 10)
    before = stats(view)
    arr = zarr.create_array(str(view.path("plain")), shape=data.shape, chunks=(4, 5), dtype=data.dtype,
                            fill_value=0)
    arr[...] = data
    assert delta(before, stats(view))["set"] == 1, "the chunks wait in the journal: only zarr.json is stored"
    sync_dir(view.path("plain"))
    counts = delta(before, stats(view))
    assert (counts["set"], counts["erase"]) == (1 + 3 * 2, 0), \
        f"one PUT per file (zarr.json and 6 chunks), no DELETE: {counts}"
    assert_same_array(READERS["zarr-python"](view.path("plain")), data, "read back through the mount")
    # A temporary file removed before its rename (a failed write) costs no request either.
    tmp = view.path("plain/c/0/0.0123456789abcdef0123456789abcdef.partial")
    tmp.write_bytes(b"x" * 100)
    assert tmp.stat().st_size == 100 and tmp.name in os.listdir(tmp.parent), "a held file shows"
    before = stats(view)
    tmp.unlink()
    assert not tmp.exists()
    counts = delta(before, stats(view))
    assert (counts["set"], counts["erase"]) == (0, 0), counts
    view.stop()
    stored = download_tree("s3", prefix, tmp_path / "bucket")
    names = sorted(p.relative_to(stored).as_posix() for p in stored.rglob("*") if p.is_file())
    assert names == sorted(["plain/zarr.json"] + [f"plain/c/{i}/{j}" for i in range(3) for j in range(2)])
    assert_same_array(READERS["zarr-python"](stored / "plain"), data, "the bucket")


def test_xarray_writing_a_dataset_and_over_it_asks_the_store_for_its_writes_only(remote_view, remote, tmp_path):
    """xarray's `to_zarr` into an S3 mount, new and again over it (mode "w": zarr-python removes
    the old tree file by file first), through the default mount. The mount knows what it wrote:
    a directory it made holds only what it wrote there, a file it stored has the version the
    store gave it (and a small one its bytes: zarr-python reads the group document it wrote
    before each variable), a node's `zarr.json` says what the node is, and a file removed goes
    from the listings kept. So the writes are the only requests: no lookup, listing or read.
    The build before made 28 HEADs and 12 listings for the first write alone."""
    import xarray as xr
    prefix = f"{remote.run}/xarray"
    view = remote_view("s3", prefix=prefix)
    t, y, x = 4, 6, 5
    ds = xr.Dataset({"temp": (("t", "y", "x"), np.arange(t * y * x, dtype="f4").reshape(t, y, x)),
                     "mask": (("y", "x"), np.ones((y, x), dtype="u1"))},
                    coords={"t": np.arange(t), "y": np.arange(y, dtype="f8"), "x": np.arange(x, dtype="f8")})
    files = 1 + 5 * 2  # the group's zarr.json; each of 5 variables: its zarr.json and one chunk
    for step in ("new", "over it"):
        before = stats(view)
        ds.to_zarr(view.path("ds.zarr"), mode="w", consolidated=False)
        sync_dir(view.path("ds.zarr"))
        counts = delta(before, stats(view))
        assert (counts["head"], counts["list_dir"], counts["get"]) == (0, 0, 0), \
            f"{step}: no lookup, no listing, no read: {counts}"
        assert counts["erase"] == (0 if step == "new" else files), f"{step}: {counts}"
        back = xr.open_zarr(view.path("ds.zarr"), consolidated=False, chunks=None).load()
        assert back.identical(ds), f"{step}: read back through the mount"
    view.stop()
    stored = download_tree("s3", prefix, tmp_path / "bucket")
    names = sorted(p.relative_to(stored).as_posix() for p in stored.rglob("*") if p.is_file())
    assert len(names) == files and not [n for n in names if n.endswith(".partial")], names
    assert xr.open_zarr(stored / "ds.zarr", consolidated=False, chunks=None).load().identical(ds), "the bucket"
